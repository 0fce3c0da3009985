package search

import (
	"errors"
	"time"
)

// Open ends of a Period are stored as these, so every range has both ends
// and comparisons stay simple top-level conditions.
var (
	minTime = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
	maxTime = time.Date(9999, 12, 31, 23, 59, 59, 999e6, time.UTC)
)

var errDate = errors.New("not a FHIR date")

// parseDate reads a FHIR date, dateTime or instant, or a partial one as a
// search value may be (2000, 2000-01, 2000-01-02T10:00), and returns the
// range it covers, both ends inclusive at millisecond precision: 2000-01 is
// 2000-01-01T00:00:00.000Z through 2000-01-31T23:59:59.999Z. A time without
// a zone is taken as UTC. A space in place of the zone's '+' is accepted,
// because an unencoded '+' in a query string arrives as a space.
func parseDate(s string) (lo, hi time.Time, err error) {
	num := func(i, n int) (int, bool) {
		if i+n > len(s) {
			return 0, false
		}
		v := 0
		for _, c := range []byte(s[i : i+n]) {
			if c < '0' || c > '9' {
				return 0, false
			}
			v = v*10 + int(c-'0')
		}
		return v, true
	}
	year, ok := num(0, 4)
	if !ok || year == 0 {
		return lo, hi, errDate
	}
	month, day, hour, minute, sec, ms := 1, 1, 0, 0, 0, 0
	loc := time.UTC
	var next func(time.Time) time.Time
	i := 4
	switch {
	case len(s) == 4:
		next = func(t time.Time) time.Time { return t.AddDate(1, 0, 0) }
	case s[4] != '-':
		return lo, hi, errDate
	default:
		if month, ok = num(5, 2); !ok || month < 1 || month > 12 {
			return lo, hi, errDate
		}
		i = 7
		if len(s) == 7 {
			next = func(t time.Time) time.Time { return t.AddDate(0, 1, 0) }
			break
		}
		if s[7] != '-' {
			return lo, hi, errDate
		}
		if day, ok = num(8, 2); !ok || day < 1 || day > daysIn(year, month) {
			return lo, hi, errDate
		}
		i = 10
		if len(s) == 10 {
			next = func(t time.Time) time.Time { return t.AddDate(0, 0, 1) }
			break
		}
		if s[10] != 'T' {
			return lo, hi, errDate
		}
		if hour, ok = num(11, 2); !ok || hour > 23 || len(s) < 16 || s[13] != ':' {
			return lo, hi, errDate
		}
		if minute, ok = num(14, 2); !ok || minute > 59 {
			return lo, hi, errDate
		}
		i = 16
		unit := time.Minute
		if i < len(s) && s[i] == ':' {
			if sec, ok = num(17, 2); !ok || sec > 60 {
				return lo, hi, errDate
			}
			i = 19
			unit = time.Second
			if i < len(s) && s[i] == '.' {
				j := i + 1
				digits := 0
				for j < len(s) && s[j] >= '0' && s[j] <= '9' {
					if digits < 3 {
						ms = ms*10 + int(s[j]-'0')
					}
					digits++
					j++
				}
				if digits == 0 {
					return lo, hi, errDate
				}
				unit = time.Millisecond
				for d := digits; d < 3; d++ {
					ms *= 10
					unit *= 10
				}
				i = j
			}
			if sec == 60 { // a leap second: the last moment of its minute
				sec, ms, unit = 59, 999, time.Millisecond
			}
		}
		switch {
		case i == len(s):
		case s[i] == 'Z' && i+1 == len(s):
		case (s[i] == '+' || s[i] == '-' || s[i] == ' ') && i+6 == len(s) && s[i+3] == ':':
			zh, ok1 := num(i+1, 2)
			zm, ok2 := num(i+4, 2)
			if !ok1 || !ok2 || zh > 14 || zm > 59 {
				return lo, hi, errDate
			}
			off := zh*3600 + zm*60
			if s[i] == '-' {
				off = -off
			}
			loc = time.FixedZone("", off)
		default:
			return lo, hi, errDate
		}
		lo = time.Date(year, time.Month(month), day, hour, minute, sec, ms*1e6, loc).UTC()
		return lo, lo.Add(unit - time.Millisecond), nil
	}
	if i != len(s) {
		return lo, hi, errDate
	}
	lo = time.Date(year, time.Month(month), day, 0, 0, 0, 0, time.UTC)
	return lo, next(lo).Add(-time.Millisecond), nil
}

func daysIn(year, month int) int {
	return time.Date(year, time.Month(month)+1, 0, 0, 0, 0, 0, time.UTC).Day()
}
