package bus

import (
	"strings"
	"testing"
)

// A trace the gateway starts has an id and is not marked sampled (the NATS
// server then leaves the bus messages' headers alone); a caller's own
// traceparent is kept as it came.
func TestTraceParentOrNew(t *testing.T) {
	tp := TraceParentOrNew("")
	if TraceID(tp) == "" || !strings.HasSuffix(tp, "-00") {
		t.Fatalf("a new trace %q, want a valid one with flags 00", tp)
	}
	const caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	if got := TraceParentOrNew(caller); got != caller {
		t.Fatalf("the caller's %q became %q", caller, got)
	}
}
