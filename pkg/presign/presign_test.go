package presign

import (
	"context"
	"errors"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/store/sqlstore"
)

const base = "https://pinion.example/"

// openSigner is a signer over a real SQLite store's secrets.
func openSigner(t *testing.T) (*Signer, *sqlstore.Store) {
	t.Helper()
	st, err := sqlstore.Open(context.Background(), filepath.Join(t.TempDir(), "pinion.db"), sqlstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return New(base, st), st
}

// parts splits a storage URL into what Check takes.
func parts(t *testing.T, u string) (id, vid, expires, sig string) {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	id, vid, _ = strings.Cut(strings.TrimPrefix(p.Path, "/storage/"), "/")
	return id, vid, p.Query().Get("Expires"), p.Query().Get("Signature")
}

func TestCheck(t *testing.T) {
	ctx := context.Background()
	s, st := openSigner(t)
	u, err := s.URL(ctx, "b1", "v1")
	if err != nil {
		t.Fatal(err)
	}
	id, vid, exp, sig := parts(t, u)
	// Another instance over the same store checks what this one signed.
	other := New(base, st)
	later := New(base, st)
	later.Now = func() time.Time { return time.Now().Add(Lifetime + time.Minute) }
	for _, tc := range []struct {
		name              string
		s                 *Signer
		id, vid, exp, sig string
		want              error
	}{
		{"as signed", s, id, vid, exp, sig, nil},
		{"another instance", other, id, vid, exp, sig, nil},
		{"other Binary", s, "b2", vid, exp, sig, ErrInvalid},
		{"other version", s, id, "v2", exp, sig, ErrInvalid},
		{"expiry moved", s, id, vid, exp + "0", sig, ErrInvalid},
		{"signature altered", s, id, vid, exp, "A" + sig[1:], ErrInvalid},
		{"no signature", s, id, vid, exp, "", ErrInvalid},
		{"long expiry", s, id, vid, strings.Repeat("9", 40), sig, ErrInvalid},
		{"bad id", s, "../x", vid, exp, sig, ErrInvalid},
		{"after its hour", later, id, vid, exp, sig, ErrExpired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "signature altered" && sig[0] == 'A' {
				tc.sig = "B" + sig[1:]
			}
			if err := tc.s.Check(ctx, tc.id, tc.vid, tc.exp, tc.sig); !errors.Is(err, tc.want) {
				t.Fatalf("Check: %v, want %v", err, tc.want)
			}
		})
	}
}

func TestRewrite(t *testing.T) {
	ctx := context.Background()
	s, _ := openSigner(t)
	readable := map[string]string{"b1": "v9"} // id → current version
	resolve := func(_ context.Context, id, vid string) (string, bool, error) {
		cur, ok := readable[id]
		if vid == "" {
			vid = cur
		}
		return vid, ok, nil
	}
	signedAt := func(out, id, vid string) bool {
		return strings.Contains(out, `"`+base+"storage/"+id+"/"+vid+"?Expires=")
	}
	for _, tc := range []struct {
		name, in string
		check    func(out string) bool
	}{
		{"reference", `{"resourceType":"Patient","photo":[{"url":"Binary/b1"}]}`,
			func(o string) bool { return signedAt(o, "b1", "v9") }},
		{"version", `{"resourceType":"Patient","photo":[{"url":"Binary/b1/_history/v3"}]}`,
			func(o string) bool { return signedAt(o, "b1", "v3") }},
		{"API URL", `{"resourceType":"Media","content":{"url":"` + base + `fhir/R4/Binary/b1"}}`,
			func(o string) bool { return signedAt(o, "b1", "v9") }},
		{"earlier storage URL", `{"resourceType":"Media","content":{"url":"` + base + `storage/b1/v2?Expires=1&Signature=x"}}`,
			func(o string) bool { return signedAt(o, "b1", "v2") }},
		{"path", `{"resourceType":"Bot","x":{"path":"Binary/b1"}}`,
			func(o string) bool { return signedAt(o, "b1", "v9") }},
		{"unreadable", `{"resourceType":"Patient","photo":[{"url":"` + base + `fhir/R4/Binary/b2"}]}`,
			func(o string) bool {
				return strings.Contains(o, `"url":"Binary/b2"`) && !strings.Contains(o, "storage/")
			}},
		{"other keys untouched", `{"resourceType":"Observation","subject":{"reference":"Binary/b1"}}`,
			func(o string) bool { return o == `{"resourceType":"Observation","subject":{"reference":"Binary/b1"}}` }},
		{"a Binary signs itself, nothing inside", `{"resourceType":"Binary","id":"b7","meta":{"versionId":"v1"},"extension":[{"url":"Binary/b1"}]}`,
			func(o string) bool { return signedAt(o, "b7", "v1") && strings.Contains(o, `"url":"Binary/b1"`) }},
		{"Bundle entries", `{"resourceType":"Bundle","entry":[{"resource":{"resourceType":"Patient","photo":[{"url":"Binary/b1"}]}}]}`,
			func(o string) bool { return signedAt(o, "b1", "v9") }},
		{"numbers kept", `{"resourceType":"Observation","valueQuantity":{"value":1.50},"x":{"url":"Binary/b1"}}`,
			func(o string) bool { return strings.Contains(o, `"value":1.50`) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := s.Rewriter(resolve).Rewrite(ctx, []byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(string(out)) {
				t.Fatalf("rewrote %s\n into %s", tc.in, out)
			}
		})
	}
}

func TestUnsign(t *testing.T) {
	ctx := context.Background()
	s, _ := openSigner(t)
	signed, err := s.URL(ctx, "b1", "v1")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, in, want string }{
		{"signed URL sent back", `{"resourceType":"Patient","photo":[{"url":"` + signed + `"}]}`,
			`{"photo":[{"url":"Binary/b1"}],"resourceType":"Patient"}`},
		{"API URL", `{"resourceType":"Media","content":{"url":"` + base + `fhir/R4/Binary/b1"}}`,
			`{"content":{"url":"Binary/b1"},"resourceType":"Media"}`},
		{"versioned reference", `{"resourceType":"Media","content":{"url":"Binary/b1/_history/v1"}}`,
			`{"content":{"url":"Binary/b1"},"resourceType":"Media"}`},
		{"a patch's values", `[{"op":"add","path":"/photo","value":[{"url":"` + signed + `"}]}]`,
			`[{"op":"add","path":"/photo","value":[{"url":"Binary/b1"}]}]`},
		{"a Binary as written", `{"resourceType":"Binary","url":"` + signed + `"}`,
			`{"resourceType":"Binary","url":"` + signed + `"}`},
		{"other urls", `{"resourceType":"Patient","photo":[{"url":"https://elsewhere.example/Binary/b1"}]}`,
			`{"resourceType":"Patient","photo":[{"url":"https://elsewhere.example/Binary/b1"}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := s.Unsigner().Rewrite(ctx, []byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if string(out) != tc.want {
				t.Fatalf("got  %s\nwant %s", out, tc.want)
			}
		})
	}
	for name, in := range map[string]string{"trailing data": `{"url":"Binary/b1"} {}`, "not JSON": `{"url":"Binary/b1"`} {
		if _, err := s.Unsigner().Rewrite(ctx, []byte(in)); err == nil {
			t.Errorf("%s: rewritten", name)
		}
	}
}
