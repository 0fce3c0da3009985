package sandbox

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestTimerEdges(t *testing.T) {
	runExprs(t, []exprCase{
		{"callback must be a function", tryExpr(`setTimeout('1 + 1', 0)`), `TypeError: The "callback" argument must be of type function`},
		{"setInterval too", tryExpr(`setInterval(undefined, 5)`), `TypeError: The "callback" argument must be of type function`},
		{"negative and NaN delays are zero", `new Promise(r => { const out = []; setTimeout(() => out.push('late'), 5); setTimeout(() => out.push('neg'), -100); setTimeout(() => { out.push('nan'); }, 'soon'); setTimeout(() => r(out.join()), 20) })`, "neg,nan,late"},
		{"same delay runs in creation order", `new Promise(r => { const out = []; for (let i = 0; i < 5; i++) setTimeout(() => out.push(i), 0); setTimeout(() => r(out.join()), 0) })`, "0,1,2,3,4"},
		{"ids are distinct numbers", `(() => { const a = setTimeout(() => {}, 1e6), b = setInterval(() => {}, 1e6), c = setImmediate(() => {}); clearTimeout(a); clearInterval(b); clearImmediate(c); return [typeof a, a !== b && b !== c].join() })()`, "number,true"},
		{"clearing unknown ids is harmless", `(() => { clearTimeout(12345); clearInterval(undefined); clearImmediate('x'); return 'ok' })()`, "ok"},
		{"clearImmediate", `new Promise(r => { let hit = 'no'; const id = setImmediate(() => { hit = 'yes' }); clearImmediate(id); setTimeout(() => r(hit), 5) })`, "no"},
		{"clearing a fired timer", `new Promise(r => { const id = setTimeout(() => { clearTimeout(id); r('cleared itself') }, 0) })`, "cleared itself"},
		{"an interval of 0 lets timers run", `new Promise(r => { let n = 0; const id = setInterval(() => n++, 0); setTimeout(() => { clearInterval(id); r(n > 0 ? 'both ran' : 'starved') }, 5) })`, "both ran"},
		{"interval arguments", `new Promise(r => { const id = setInterval((a, b) => { clearInterval(id); r(a + b) }, 1, 'x', 'y') })`, "xy"},
	})
}

func TestTooManyTimers(t *testing.T) {
	res := runBot(t, `exports.handler = async () => {
		const ids = [];
		for (let i = 0; i < 10000; i++) ids.push(setTimeout(() => {}, 1e6));
		let refused;
		try { setTimeout(() => {}, 1) } catch (e) { refused = e.name + ': ' + e.message }
		ids.forEach(clearTimeout);
		setTimeout(() => {}, 1);
		return refused;
	};`, Event{}, nil, Limits{})
	mustSucceed(t, res)
	if res.Text != "TypeError: too many pending timers (limit 10000)" {
		t.Errorf("got %q", res.Text)
	}
}

func TestCancellationMessages(t *testing.T) {
	loop := mustCompile(t, `exports.handler = async () => { while (true) {} };`)
	t.Run("cancelled before the run", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		res, err := Run(ctx, loop, Event{}, nil, Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Err == nil || res.Err.Limit != LimitCancelled || res.Err.Message != "Bot execution cancelled: context canceled" {
			t.Errorf("err = %+v", res.Err)
		}
	})
	t.Run("the cause is named", func(t *testing.T) {
		ctx, cancel := context.WithCancelCause(context.Background())
		time.AfterFunc(20*time.Millisecond, func() { cancel(errors.New("client went away")) })
		res, err := Run(ctx, loop, Event{}, nil, Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Err == nil || res.Err.Limit != LimitCancelled || res.Err.Message != "Bot execution cancelled: client went away" {
			t.Errorf("err = %+v", res.Err)
		}
	})
	t.Run("a deadline is a cancellation, not a timeout", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		res, err := Run(ctx, loop, Event{}, nil, Limits{Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if res.Err == nil || res.Err.Limit != LimitCancelled || res.Err.Message != "Bot execution cancelled: context deadline exceeded" {
			t.Errorf("err = %+v", res.Err)
		}
	})
}
