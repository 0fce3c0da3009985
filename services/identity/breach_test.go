package identity

import (
	"context"
	"crypto/sha1" //nolint:gosec // the range protocol's hash
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/pinion-health/pinion/pkg/auth"
)

// TestRegistrationBreachRange: with PINION_PASSWORD_BREACH_URL set, a
// password the range API lists is refused with Medplum's text, one it does
// not list is taken, and a failing range service refuses nothing.
func TestRegistrationBreachRange(t *testing.T) {
	const listed = "a passphrase only the range api knows"
	sum := sha1.Sum([]byte(listed)) //nolint:gosec // the range protocol's hash
	hash := strings.ToUpper(hex.EncodeToString(sum[:]))
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.TrimPrefix(r.URL.Path, "/range/") == hash[:5] {
			fmt.Fprintf(w, "%s:7\r\n", hash[5:])
		}
	}))
	t.Cleanup(up.Close)
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadGateway)
	}))
	t.Cleanup(down.Close)

	register := func(s *Service, remote, password string) error {
		_, err := s.registration.NewUser(context.Background(), jsonRequest(remote, map[string]any{
			"firstName": "Range", "lastName": "Check", "email": newEmail("range"), "password": password}))
		return err
	}
	s := another(t, Config{BaseURL: testBase, BreachURL: up.URL + "/range/"})
	expectOutcome(t, register(s, "10.9.0.1", listed), 400, auth.BreachedText, "password")
	expectOutcome(t, register(s, "10.9.0.1", "a passphrase nobody lists"), 0, "", "")

	s = another(t, Config{BaseURL: testBase, BreachURL: down.URL + "/range/"})
	expectOutcome(t, register(s, "10.9.0.2", listed), 0, "", "")
}
