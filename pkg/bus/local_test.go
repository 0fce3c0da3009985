package bus

import (
	"context"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/fhir"
)

// TestCallOnTheServicesConnection: a Call to a service on the caller's
// own connection (the standalone stack) is answered without crossing
// NATS, with the request as the wire would deliver it, and once the
// service stops, NATS answers as before (no responders: 503).
func TestCallOnTheServicesConnection(t *testing.T) {
	nc := connect(t)
	var got *Request
	svc, err := Serve(nc, "echo", "0.0.1", []Endpoint{{"test.echo", Internal, func(ctx context.Context, r *Request) (*Response, error) {
		got = r
		if _, ok := ctx.Deadline(); !ok {
			t.Error("the handler's context has no deadline")
		}
		resp := FHIR(201, r.Body)
		resp.Header["Location"] = "here"
		return resp, nil
	}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := &Request{Method: "POST", Path: "/fhir/R4/Patient", RawQuery: "a=1&a=2", Params: map[string]string{"type": "Patient"},
		Header: map[string]string{"Content-Type": "application/fhir+json"}, Body: []byte(`{"resourceType":"Patient"}`),
		Principal: &Principal{User: "User/1", Project: "p"}, RequestID: "r1", Trace: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"}
	before := nc.Stats()
	resp, err := Call(ctx, nc, "test.echo", req)
	if err != nil {
		t.Fatal(err)
	}
	if after := nc.Stats(); after.OutMsgs != before.OutMsgs || after.InMsgs != before.InMsgs {
		t.Errorf("the call crossed NATS: %d messages out, %d in", after.OutMsgs-before.OutMsgs, after.InMsgs-before.InMsgs)
	}
	if resp.Status != 201 || resp.Header["Location"] != "here" || string(resp.Body) != `{"resourceType":"Patient"}` {
		t.Errorf("answer %d %v %s", resp.Status, resp.Header, resp.Body)
	}
	if got.Method != "POST" || got.Path != req.Path || len(got.Query["a"]) != 2 || got.Param("type") != "Patient" ||
		got.Get("Content-Type") != "application/fhir+json" || got.Principal == nil || *got.Principal != *req.Principal ||
		got.Principal == req.Principal || got.RequestID != "r1" || got.Trace != req.Trace {
		t.Errorf("the handler got %+v", got)
	}
	if err := svc.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := Call(ctx, nc, "test.echo", req); fhir.AsError(err).Status != 503 {
		t.Fatalf("after the service stopped: %v, want 503", err)
	}
}

// TestLocalCallOwnsItsRequest: a handler that outlives its caller (the
// caller's deadline passed: 504) reads the request as it was sent, though
// the caller's buffers are reused, as Fiber reuses its own.
func TestLocalCallOwnsItsRequest(t *testing.T) {
	nc := connect(t)
	release := make(chan struct{})
	seen := make(chan string, 1)
	svc, err := Serve(nc, "slow", "0.0.1", []Endpoint{{"test.slow", Internal, func(ctx context.Context, r *Request) (*Response, error) {
		<-release
		seen <- r.Param("id") + " " + string(r.Body)
		return OK(), nil
	}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop(context.Background())
	body := []byte(`{"a":1}`)
	id := []byte("abc")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = Call(ctx, nc, "test.slow", &Request{Method: "PUT", Path: "/", Body: body, Params: map[string]string{"id": string(id)}})
	if fhir.AsError(err).Status != 504 {
		t.Fatalf("past the deadline: %v, want 504", err)
	}
	copy(body, `{"b":2}`)
	close(release)
	if s := <-seen; s != `abc {"a":1}` {
		t.Fatalf("the handler read %q", s)
	}
}
