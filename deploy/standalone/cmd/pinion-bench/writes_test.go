package main

import (
	"bytes"
	"os"
	"testing"

	"github.com/pinion-health/pinion/services/botexec/worker"
)

func TestMain(m *testing.M) {
	// The stack a test starts runs bots in workers started from this binary.
	worker.MainIfWorker()
	os.Exit(m.Run())
}

// TestStoreSize checks the size labels: the seeded 1,000 and the 1,000
// seeded plus 100,000 grown must read 1k and 100k in every build.
func TestStoreSize(t *testing.T) {
	for n, want := range map[int]string{0: "0", 50: "50", 1000: "1k", 6000: "6k", 101_000: "100k", 11_000: "11k", 1_049: "1k", 1_050: "1.1k"} {
		if got := storeSize(n); got != want {
			t.Errorf("storeSize(%d) = %q, want %q", n, got, want)
		}
	}
	if got := sized("POST Patient", 16, "1k"); got != "POST Patient (1k)" {
		t.Errorf("sized at 16 clients: %q", got)
	}
	if got := sized("POST Patient", 1, "100k"); got != "POST Patient (1 client, 100k)" {
		t.Errorf("sized at 1 client: %q", got)
	}
}

// TestTxCreated posts the tx10 op's Bundle to a real standalone stack: it
// counts as a success, and a transaction refused, or one whose answer
// lacks an entry, does not.
func TestTxCreated(t *testing.T) {
	b := &bench{hc: newClient(), dir: t.TempDir()}
	b.credentials()
	st := b.start(nil)
	t.Cleanup(st.Close)
	b.waitReady()
	b.login()
	b.seed(0)

	status, body := b.hc.do("POST", b.base+"fhir/R4/", b.token, "application/fhir+json", txBody())
	if !txCreated(status, body) {
		t.Fatalf("tx10 Bundle not counted as created: %d %.500s", status, body)
	}
	// One entry the server refuses: the whole transaction fails.
	bad := bytes.Replace(txBody(), []byte(`"resourceType":"Patient"`), []byte(`"resourceType":"NoSuchType"`), 1)
	if status, body := b.hc.do("POST", b.base+"fhir/R4/", b.token, "application/fhir+json", bad); txCreated(status, body) {
		t.Errorf("a refused transaction counted as created: %d %.300s", status, body)
	}
	// A 200 with one entry answered otherwise than 201 is not ten creates.
	short := bytes.Replace(body, []byte(`"status":"201`), []byte(`"status":"200`), 1)
	if txCreated(status, short) {
		t.Error("an entry answered 200 counted as created")
	}
	if txCreated(status, []byte(`{"resourceType":"Bundle","entry":[]}`)) {
		t.Error("an empty transaction-response counted as created")
	}
}
