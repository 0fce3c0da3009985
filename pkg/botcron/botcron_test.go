package botcron

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/fhir"
)

func TestCheckRefusesBadSchedules(t *testing.T) {
	for name, bot := range map[string]map[string]any{
		"six fields":     {"cronString": "0 0 * * * *"},
		"four fields":    {"cronString": "* * * *"},
		"bad minute":     {"cronString": "61 * * * *"},
		"words":          {"cronString": "every day"},
		"not a string":   {"cronString": 5.0},
		"unknown zone":   {"cronString": "CRON_TZ=Mars/Olympus 0 9 * * *"},
		"too long":       {"cronString": strings.Repeat("1,", 200) + "1 * * * *"},
		"never":          {"cronString": "0 0 30 2 *"},
		"timing no rep":  {"cronTiming": map[string]any{}},
		"timing bad day": {"cronTiming": map[string]any{"repeat": map[string]any{"dayOfWeek": []any{"someday"}}}},
	} {
		err := Check(bot)
		var fe *fhir.Error
		if !errors.As(err, &fe) || fe.Status != 400 {
			t.Errorf("%s: %v, want a 400", name, err)
			continue
		}
		field := "cronString"
		if _, ok := bot["cronTiming"]; ok {
			field = "cronTiming"
		}
		if !strings.Contains(fe.Error(), "Bot."+field) {
			t.Errorf("%s: %q does not name Bot.%s", name, fe.Error(), field)
		}
	}
	for _, ok := range []map[string]any{
		{"cronString": "*/5 * * * *"},
		{"cronString": "CRON_TZ=America/New_York 30 2 * * 1-5"},
		{"cronTiming": map[string]any{"repeat": map[string]any{"period": 48.0, "dayOfWeek": []any{"mon", "fri"}}}},
		{},
	} {
		if err := Check(ok); err != nil {
			t.Errorf("%v: %v", ok, err)
		}
	}
}

func TestTimingAsMedplum(t *testing.T) {
	for _, c := range []struct {
		repeat map[string]any
		want   string
	}{
		{map[string]any{}, "0 */24 * * *"},
		{map[string]any{"period": 4.0}, "0 */6 * * *"},
		{map[string]any{"period": 48.0, "dayOfWeek": []any{"mon", "sun"}}, "*/30 * * * 1,0"},
	} {
		s, err := Of(map[string]any{"cronTiming": map[string]any{"repeat": c.repeat}, "cronString": "ignored"})
		if err != nil || s.Spec != c.want {
			t.Errorf("%v: %v %v, want %q", c.repeat, s, err, c.want)
		}
	}
}

func TestNextAcrossDaylightSaving(t *testing.T) {
	ny, _ := time.LoadLocation("America/New_York")
	runs := func(spec string, from time.Time, n int) []time.Time {
		s, err := Of(map[string]any{"cronString": spec})
		if err != nil {
			t.Fatal(err)
		}
		var out []time.Time
		for at := from; len(out) < n; {
			at = s.Next(at)
			out = append(out, at)
		}
		return out
	}
	// 2026-03-08 02:30 does not exist in New York: the run is at 03:00 EDT,
	// when the clocks change, not skipped to the next day.
	got := runs("CRON_TZ=America/New_York 30 2 * * *", time.Date(2026, 3, 7, 12, 0, 0, 0, ny), 3)
	if !got[0].Equal(time.Date(2026, 3, 8, 7, 0, 0, 0, time.UTC)) {
		t.Errorf("spring: first run %v", got[0])
	}
	if got[0].Day() != 8 || got[1].In(ny).Day() != 9 || got[2].In(ny).Day() != 10 {
		t.Errorf("spring: runs %v, want one on each of the 8th, 9th and 10th", got)
	}
	// 2026-11-01 01:30 happens twice: one run that day.
	got = runs("CRON_TZ=America/New_York 30 1 * * *", time.Date(2026, 10, 31, 12, 0, 0, 0, ny), 3)
	for i, g := range got {
		if d := g.In(ny).Day(); d != []int{1, 2, 3}[i] {
			t.Errorf("autumn: runs %v, want one on each of Nov 1, 2 and 3", got)
			break
		}
	}
	// From inside the repeated hour (01:10 EST, after 01:30 EDT ran), the
	// next run is the next day's, not 01:30 EST.
	s, _ := Of(map[string]any{"cronString": "CRON_TZ=America/New_York 30 1 * * *"})
	after := time.Date(2026, 11, 1, 6, 10, 0, 0, time.UTC) // 01:10 EST
	if n := s.Next(after); n.In(ny).Day() != 2 {
		t.Errorf("from the repeated hour: %v, want Nov 2", n.In(ny))
	}
	// UTC by default; strictly after.
	s, _ = Of(map[string]any{"cronString": "* * * * *"})
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if n := s.Next(at); !n.Equal(at.Add(time.Minute)) {
		t.Errorf("every minute from %v: %v", at, n)
	}
}

func TestEnabled(t *testing.T) {
	if Enabled([]string{"cron"}) || Enabled([]string{"bots"}) || !Enabled([]string{"bots", "cron"}) {
		t.Error("cron needs both features")
	}
}
