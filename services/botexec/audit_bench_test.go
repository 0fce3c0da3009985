package botexec

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/search"
	"github.com/pinion-health/pinion/services/botexec/sandbox"
)

// auditBenchRun is one ordinary run's record inputs: a short log.
func auditBenchRun() (*bot, *bus.Principal, *bus.Principal, *sandbox.Result) {
	return &bot{ID: "0196f0a2-7a4b-7c1d-9e2f-3a4b5c6d7e8f", Project: "p1", Name: "echo"},
		&bus.Principal{Profile: "Practitioner/1", Project: "p1"}, &bus.Principal{Profile: "Bot/b1", Project: "p1"},
		&sandbox.Result{Kind: sandbox.KindString, Log: "hello\nworld"}
}

// BenchmarkAuditEncode is a run's AuditEvent from record to the bytes the
// repository stores: built, turned into the map the repository takes,
// and encoded as the repository encodes it.
func BenchmarkAuditEncode(b *testing.B) {
	bt, req, runAs, res := auditBenchRun()
	start := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		m := auditRecord(bt, req, runAs, start, start, res, nil).Map()
		if _, err := json.Marshal(m); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAuditWriteChecks is what the repository does with each such
// map before it stores it (its check and search values), for scale.
func BenchmarkAuditWriteChecks(b *testing.B) {
	bt, req, runAs, res := auditBenchRun()
	start := time.Now()
	m := auditRecord(bt, req, runAs, start, start, res, nil).Map()
	b.ReportAllocs()
	for b.Loop() {
		if err := repo.Check(m, false); err != nil {
			b.Fatal(err)
		}
		_ = search.Fields("AuditEvent", m)
	}
}
