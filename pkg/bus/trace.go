package bus

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
)

// TraceParentOrNew keeps a valid W3C traceparent from the caller, or starts
// a new trace. The gateway passes it to the services in the envelope, so
// every log line of one request carries the same trace id.
//
// A trace started here is not marked sampled (flags 00): Pinion records no
// spans, only the id in its logs, and a sampled traceparent makes the NATS
// server copy every header of every bus message into a map to look for a
// trace destination, most of a FHIR read's allocations (issue 39).
func TraceParentOrNew(tp string) string {
	if TraceID(tp) != "" {
		return tp
	}
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	h := hex.EncodeToString(b)
	return "00-" + h[:32] + "-" + h[32:] + "-00"
}

// TraceID is the trace id of a traceparent ("" if it is not valid).
func TraceID(tp string) string {
	parts := strings.Split(tp, "-")
	if len(parts) != 4 || len(parts[0]) != 2 || len(parts[1]) != 32 || len(parts[2]) != 16 || len(parts[3]) != 2 {
		return ""
	}
	for _, p := range parts {
		if _, err := hex.DecodeString(p); err != nil {
			return ""
		}
	}
	if parts[1] == strings.Repeat("0", 32) {
		return ""
	}
	return parts[1]
}

type traceKey struct{}

// WithTrace is ctx carrying a request's traceparent, so that what the
// request causes later (its resource events, the rest-hooks they trigger)
// can name the same trace.
func WithTrace(ctx context.Context, tp string) context.Context {
	if tp == "" {
		return ctx
	}
	return context.WithValue(ctx, traceKey{}, tp)
}

// TraceFrom is the traceparent WithTrace put in ctx, or "".
func TraceFrom(ctx context.Context) string {
	tp, _ := ctx.Value(traceKey{}).(string)
	return tp
}
