package standalone

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRestartKeepsData starts a second stack on its own data directory with
// generated credentials, writes, restarts, and reads back.
func TestRestartKeepsData(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	env := map[string]string{"PINION_SUPERADMIN_CLIENT_ID": "", "PINION_SUPERADMIN_CLIENT_SECRET": ""}
	start := func() *Stack {
		cfg := testConfig(dir, nil)
		cfg.SuperAdminClientID, cfg.SuperAdminSecret = env["PINION_SUPERADMIN_CLIENT_ID"], env["PINION_SUPERADMIN_CLIENT_SECRET"]
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		st, err := Start(ctx, cfg, log)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	st := start()
	if !st.SuperAdmin.Created || len(st.SuperAdmin.Secret) != 64 {
		t.Fatalf("first start did not generate credentials: %+v", st.SuperAdmin)
	}
	info, err := os.Stat(filepath.Join(dir, "superadmin.json"))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("superadmin.json: %v %v", err, info)
	}
	id, secret := st.SuperAdmin.ClientID, st.SuperAdmin.Secret
	saved := base
	base = "http://" + st.Addr + "/"
	defer func() { base = saved }()
	waitReadyAt(t, base)
	tok := clientToken(t, id, secret)
	r := do(t, "POST", "fhir/R4/Patient", tok, "application/fhir+json", patient("Durable"))
	expect(t, r, 201)
	pid := r.json(t)["id"].(string)
	st.Close()

	st = start()
	defer st.Close()
	if st.SuperAdmin.Created || st.SuperAdmin.ClientID != id {
		t.Fatalf("restart generated new credentials: %+v", st.SuperAdmin)
	}
	base = "http://" + st.Addr + "/"
	waitReadyAt(t, base)
	tok = clientToken(t, id, secret)
	r = do(t, "GET", "fhir/R4/Patient/"+pid, tok, "", nil)
	expect(t, r, 200)
	if !strings.Contains(string(r.body), "Durable") {
		t.Fatalf("patient lost: %s", r.body)
	}
}

func waitReadyAt(t *testing.T, b string) {
	t.Helper()
	eventually(t, 30*time.Second, b+"readyz to answer 200", func() bool {
		resp, err := http.Get(b + "readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
}
