package sandbox

import "testing"

func TestScratchDeepJSON(t *testing.T) {
	res := runBot(t, `exports.handler = async () => { let o = {}; for (let i = 0; i < 5e5; i++) o = {o}; return o };`, Event{}, nil, Limits{})
	t.Logf("kind %v err %+v len %d elapsed %v", res.Kind, res.Err, len(res.JSON), res.Elapsed)
	res = runBot(t, `exports.handler = async () => { let o = []; for (let i = 0; i < 5e5; i++) o = [o]; return String(o) };`, Event{}, nil, Limits{})
	t.Logf("kind %v err %+v len %d elapsed %v", res.Kind, res.Err, len(res.Text), res.Elapsed)
}
