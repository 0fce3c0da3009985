package botexec

import "testing"

func TestMaskSecrets(t *testing.T) {
	secrets := map[string]any{
		"KEY":   map[string]any{"name": "KEY", "valueString": `a"b<c>\d`},
		"PORT":  map[string]any{"name": "PORT", "valueInteger": float64(8443)},
		"BIG":   map[string]any{"name": "BIG", "valueDecimal": float64(12345678)},
		"FLAG":  map[string]any{"name": "FLAG", "valueBoolean": true},
		"SHORT": map[string]any{"name": "SHORT", "valueString": "abc"},
	}
	cases := map[string]string{
		`key a"b<c>\d`:            `key ****`,
		`{"k":"a\"b<c>\\d"}`:      `{"k":"****"}`,
		`port 8443, big 12345678`: `port ****, big ****`,
		`flag true, short abc`:    `flag true, short abc`,
	}
	for in, want := range cases {
		if got := maskSecrets(in, secrets); got != want {
			t.Errorf("maskSecrets(%q) = %q, want %q", in, got, want)
		}
	}
}
