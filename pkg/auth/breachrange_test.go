package auth

import (
	"context"
	"crypto/sha1" //nolint:gosec // the protocol's hash
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// rangeServer is a range API on 127.0.0.1 that lists the given passwords'
// hashes (with a count) and some padding, and records the paths asked.
func rangeServer(t *testing.T, breached ...string) (*httptest.Server, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.URL.Path)
		mu.Unlock()
		prefix := strings.TrimPrefix(r.URL.Path, "/range/")
		var b strings.Builder
		b.WriteString("0018A45C4D1DEF81644B54AB7F969B88D65:3\r\n")
		for _, p := range breached {
			h := sha1Hex(p)
			if h[:5] == prefix {
				b.WriteString(h[5:] + ":42\r\n")
			}
		}
		b.WriteString("FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF:0\r\n")
		_, _ = w.Write([]byte(b.String()))
	}))
	t.Cleanup(srv.Close)
	return srv, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), asked...)
	}
}

func sha1Hex(s string) string {
	sum := sha1.Sum([]byte(s)) //nolint:gosec // the protocol's hash
	return strings.ToUpper(hex.EncodeToString(sum[:]))
}

func TestBreachRange(t *testing.T) {
	const leaked = "a leaked but long passphrase"
	srv, asked := rangeServer(t, leaked)
	b := NewBreachRange(srv.URL + "/range/")
	for _, tc := range []struct {
		name, password string
		want           bool
	}{
		{"listed with a count", leaked, true},
		{"not listed", "an unlisted passphrase", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := b.Breached(context.Background(), tc.password)
			if err != nil || got != tc.want {
				t.Fatalf("Breached = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
	// Only 5 hex digits of each hash left: never the password or its hash.
	for _, p := range asked() {
		prefix := strings.TrimPrefix(p, "/range/")
		if len(prefix) != 5 || strings.Trim(prefix, "0123456789ABCDEF") != "" {
			t.Errorf("asked %q, want /range/ and 5 hex digits", p)
		}
	}
	if NewBreachRange("") != nil {
		t.Error("an empty URL should turn the check off")
	}
}

func TestBreachRangePaddingIsNoBreach(t *testing.T) {
	// A padded line (count 0) that happens to be the suffix is no breach.
	pw := "padded passphrase"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(sha1Hex(pw)[5:] + ":0\r\n"))
	}))
	t.Cleanup(srv.Close)
	if got, err := NewBreachRange(srv.URL+"/").Breached(context.Background(), pw); err != nil || got {
		t.Fatalf("Breached = %v, %v; want false", got, err)
	}
}

func TestBreachRangeFailures(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
	}{
		{"an error status", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }},
		{"an answer too large", func(w http.ResponseWriter, r *http.Request) {
			line := []byte(strings.Repeat("0", 35) + ":1\r\n")
			for range maxBreachRangeBody/len(line) + 2 {
				if _, err := w.Write(line); err != nil {
					return
				}
			}
		}},
		{"no answer", func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.handler)
			t.Cleanup(srv.Close)
			start := time.Now()
			got, err := NewBreachRange(srv.URL+"/").Breached(context.Background(), "any passphrase")
			if err == nil || got {
				t.Fatalf("Breached = %v, %v; want an error", got, err)
			}
			if d := time.Since(start); d > breachRangeTimeout+2*time.Second {
				t.Errorf("took %v, beyond its bound %v", d, breachRangeTimeout)
			}
		})
	}
}
