// Package botcron reads a Bot's schedule as Medplum 5.0.10 does
// (workers/cron.ts): Bot.cronTiming, when it makes a schedule, else
// Bot.cronString, a five-field cron expression. Unlike Medplum, which
// silently never runs a bad one, a schedule that does not parse is refused
// at write (Check).
//
// A schedule runs in a time zone: UTC unless the cron string starts with
// CRON_TZ=<IANA zone> (or TZ=), the prefix robfig/cron reads. Times are
// wall-clock times in that zone, so daylight-saving changes neither skip
// nor double a run: a wall time that does not exist (the hour skipped in
// spring) runs when the clocks change, one that occurs twice (the
// hour repeated in autumn) runs once.
package botcron

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/pinion-health/pinion/pkg/fhir"
)

// Features a project needs for its bots to run on a schedule.
const (
	FeatureCron = "cron"
	FeatureBots = "bots"
)

// maxCronString bounds Bot.cronString.
const maxCronString = 256

// Schedule is a bot's schedule.
type Schedule struct {
	// Spec is the schedule as one cron string (cronTiming converted), which
	// says whether two versions of a bot have the same schedule.
	Spec  string
	loc   *time.Location
	sched cron.Schedule
}

// Has says whether the resource asks for a schedule at all.
func Has(bot map[string]any) bool {
	_, s := bot["cronString"]
	_, t := bot["cronTiming"]
	return s || t
}

// Check refuses, with a 400 naming the field, a cronString or cronTiming
// that makes no schedule.
func Check(bot map[string]any) error {
	_, err := Of(bot)
	return err
}

// Of is the bot's schedule, nil when it has none.
func Of(bot map[string]any) (*Schedule, error) {
	if t, ok := bot["cronTiming"]; ok {
		spec, err := timingSpec(t)
		if err != nil {
			return nil, err
		}
		return parse(spec, "Bot.cronTiming", "cronTiming")
	}
	v, ok := bot["cronString"]
	if !ok {
		return nil, nil
	}
	s, ok := v.(string)
	if !ok {
		return nil, fhir.BadRequest("Bot.cronString must be a string", "cronString")
	}
	if len(s) > maxCronString {
		return nil, fhir.BadRequest(fmt.Sprintf("Bot.cronString is longer than %d characters", maxCronString), "cronString")
	}
	return parse(strings.TrimSpace(s), "Bot.cronString", "cronString")
}

func parse(spec, field, expr string) (*Schedule, error) {
	zone, fields := "UTC", spec
	for _, p := range []string{"CRON_TZ=", "TZ="} {
		if rest, ok := strings.CutPrefix(spec, p); ok {
			zone, fields, _ = strings.Cut(rest, " ")
			fields = strings.TrimSpace(fields)
			break
		}
	}
	loc, err := time.LoadLocation(zone)
	if err != nil || zone == "" || zone == "Local" {
		return nil, fhir.BadRequest(fmt.Sprintf("%s: unknown time zone %q", field, zone), expr)
	}
	if n := len(strings.Fields(fields)); n != 5 {
		return nil, fhir.BadRequest(fmt.Sprintf("%s: a cron expression has five fields (minute hour day-of-month month day-of-week), %q has %d", field, fields, n), expr)
	}
	// The fields are read as wall-clock time in UTC, and placed in the
	// zone by Next: robfig/cron's own zone handling skips and doubles runs
	// around daylight-saving changes.
	sched, err := cron.ParseStandard(fields)
	if err != nil {
		return nil, fhir.BadRequest(fmt.Sprintf("%s: %q is not a valid cron expression: %v", field, fields, err), expr)
	}
	if sched.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return nil, fhir.BadRequest(fmt.Sprintf("%s: %q never runs", field, fields), expr)
	}
	canon := fields
	if zone != "UTC" {
		canon = "CRON_TZ=" + zone + " " + fields
	}
	return &Schedule{Spec: canon, loc: loc, sched: sched}, nil
}

// Next is the first run strictly after t.
func (s *Schedule) Next(t time.Time) time.Time {
	wall := naive(t.In(s.loc))
	// A repeated wall time maps to its first instant, which may be before
	// t: then the next wall time is taken (bounded: a repeated hour holds
	// at most 60 minute-runs).
	for range 128 {
		wall = s.sched.Next(wall)
		if wall.IsZero() {
			return time.Time{}
		}
		at := time.Date(wall.Year(), wall.Month(), wall.Day(), wall.Hour(), wall.Minute(), wall.Second(), 0, s.loc)
		if l := at.In(s.loc); l.Hour() != wall.Hour() || l.Minute() != wall.Minute() {
			// A wall time in the gap the clocks skip: run when they change
			// (Go places it on either side of the gap).
			start, end := at.ZoneBounds()
			if naive(l).Before(wall) && !end.IsZero() {
				at = end
			} else if !start.IsZero() {
				at = start
			}
		}
		if at.After(t) {
			return at
		}
	}
	return time.Time{}
}

// naive is t's wall-clock time as if in UTC.
func naive(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
}

// daysOfWeek are FHIR's day codes as cron's day-of-week numbers.
var daysOfWeek = map[string]int{"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}

// timingSpec converts Bot.cronTiming to a cron string as Medplum does:
// repeat.period (1 unless given) is how many runs a day, at most one a
// minute, and repeat.dayOfWeek limits the days. Medplum reads nothing else
// of the Timing.
func timingSpec(v any) (string, error) {
	t, ok := v.(map[string]any)
	if !ok {
		return "", fhir.BadRequest("Bot.cronTiming must be a Timing", "cronTiming")
	}
	rep, ok := t["repeat"].(map[string]any)
	if !ok {
		return "", fhir.BadRequest("Bot.cronTiming.repeat is required for a schedule", "cronTiming.repeat")
	}
	period := 1.0
	if p, ok := rep["period"]; ok {
		f, ok := p.(float64)
		if n, isNum := p.(json.Number); isNum {
			var err error
			f, err = n.Float64()
			ok = err == nil
		}
		if !ok || f <= 0 || f > 24*60 {
			return "", fhir.BadRequest("Bot.cronTiming.repeat.period must be a number from 0 to 1440 (runs a day)", "cronTiming.repeat.period")
		}
		period = f
	}
	minute, hour := "0", "*"
	if period > 24 && period < 60 {
		minute = fmt.Sprintf("*/%d", ceil(24*60/period))
	} else {
		hour = fmt.Sprintf("*/%d", max(1, ceil(24/period)))
	}
	dow := "*"
	if d, ok := rep["dayOfWeek"]; ok {
		list, ok := d.([]any)
		if !ok || len(list) == 0 {
			return "", fhir.BadRequest("Bot.cronTiming.repeat.dayOfWeek must be a list of day codes", "cronTiming.repeat.dayOfWeek")
		}
		var days []string
		for i, x := range list {
			s, _ := x.(string)
			n, ok := daysOfWeek[s]
			if !ok {
				return "", fhir.BadRequest(fmt.Sprintf("Bot.cronTiming.repeat.dayOfWeek[%d]: %q is not a day code (mon ... sun)", i, x), "cronTiming.repeat.dayOfWeek")
			}
			days = append(days, fmt.Sprint(n))
		}
		dow = strings.Join(days, ",")
	}
	return fmt.Sprintf("%s %s * * %s", minute, hour, dow), nil
}

func ceil(f float64) int {
	n := int(f)
	if float64(n) < f {
		n++
	}
	return n
}

// Enabled says whether a project's features let its bots run on a
// schedule.
func Enabled(features []string) bool {
	var c, b bool
	for _, f := range features {
		c = c || f == FeatureCron
		b = b || f == FeatureBots
	}
	return c && b
}
