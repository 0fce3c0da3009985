package identity

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/services/identity/limits"
)

// Concurrent wrong guesses from one address cannot all pass the limiter
// before the first of them is counted: no more than its budget is hashed.
func TestLoginConcurrentGuessesCounted(t *testing.T) {
	p := newPerson(t, "burst")
	const n = 50
	var wg sync.WaitGroup
	statuses := make(chan int, n)
	for range n {
		wg.Go(func() {
			_, err := live.svc.signins.Login(context.Background(), jsonRequest("10.29.3.1", map[string]any{"email": p.email, "password": "wrong password"}))
			statuses <- fhir.AsError(err).Status
		})
	}
	wg.Wait()
	close(statuses)
	count := map[int]int{}
	for s := range statuses {
		count[s]++
	}
	// 400 is a guess that was checked (hashed), 503 one that passed the
	// limiter but found no free hash slot; 429 one refused before.
	if passed := count[400] + count[503]; passed > limits.MaxFailures || passed+count[429] != n {
		t.Fatalf("answers %v: want at most %d guesses past the limiter and the rest 429", count, limits.MaxFailures)
	}
}

// BenchmarkUnknownLoginsPeakRSS reports the process's peak resident memory
// after 150 concurrent sign-ins with unknown e-mails, each from its own
// address (so the sign-in limiter does not stop them): the password-hash
// bound is what keeps the peak down. Run with
// go test -run '^$' -bench UnknownLoginsPeakRSS -benchtime 1x ./
func BenchmarkUnknownLoginsPeakRSS(b *testing.B) {
	before := vmHWM(b)
	for range b.N {
		var wg sync.WaitGroup
		answers := make(chan int, 150)
		for i := range 150 {
			wg.Go(func() {
				email := fmt.Sprintf("nobody-%d@example.com", i)
				_, err := live.svc.signins.Login(context.Background(), jsonRequest(fmt.Sprintf("10.29.%d.%d", i/250, i%250+1), map[string]any{"email": email, "password": "any password at all"}))
				answers <- fhir.AsError(err).Status
			})
		}
		wg.Wait()
		close(answers)
		count := map[int]int{}
		for s := range answers {
			count[s]++
		}
		b.Logf("answers by status: %v", count)
	}
	b.Logf("peak RSS (VmHWM): %d MiB before, %d MiB after", before>>10, vmHWM(b)>>10)
}

// vmHWM is the process's peak resident set size in KiB.
func vmHWM(tb testing.TB) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		tb.Skipf("no /proc/self/status: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(v), "%d", &kb)
			return kb
		}
	}
	tb.Skip("no VmHWM in /proc/self/status")
	return 0
}
