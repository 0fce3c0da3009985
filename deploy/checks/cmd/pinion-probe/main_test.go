package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestProbe(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/livez":
			_, _ = w.Write([]byte(`{"ok":true}`))
		case "/slow":
			// Slower than the probe's deadline on purpose: the probe must
			// give up, so this is the case under test, not a wait.
			time.Sleep(500 * time.Millisecond)
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	for _, tc := range []struct {
		name, url string
		healthy   bool
	}{
		{"2xx", srv.URL + "/livez", true},
		{"503", srv.URL + "/readyz", false},
		{"no server", "http://127.0.0.1:1/livez", false},
		{"too slow", srv.URL + "/slow", false},
		{"bad url", "::", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			if err := probe(ctx, tc.url); (err == nil) != tc.healthy {
				t.Fatalf("probe(%s) = %v, want healthy %v", tc.url, err, tc.healthy)
			}
		})
	}
}
