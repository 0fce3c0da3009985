package main

import (
	"bytes"
	"fmt"
	"sort"
	"time"
)

// bots measures each form of $execute issue 38 names (input as JSON, as
// text, a bot named by identifier, a bot that reads a Patient) at -c
// clients and at one, then a bot's first run after each $deploy.
func (b *bench) bots(size string) {
	if !wanted("bots") {
		return
	}
	// An identifier of this run's own: a kept project (-data), or the run
	// before growth, has other echo bots, and an identifier naming several is 412.
	ident := fmt.Sprintf("https://bench.example/bots|echo-%d", time.Now().UnixNano())
	echo := b.newBot("echo", ident, `exports.handler = async (medplum, event) => event.input;`)
	reader := b.newBot("reader", "", `exports.handler = async (medplum, event) => medplum.readResource('Patient', event.input.id);`)
	// A success is a 200 that carries want: a build answering fast but
	// wrong must count errors, not speed.
	execute := func(path, ct string, body, want []byte) bool {
		st, out := b.hc.do("POST", b.base+"fhir/R4/"+path, b.token, ct, body)
		return st == 200 && bytes.Contains(out, want)
	}
	// Labels as issue 38's table names the forms; each answers 200 with
	// its input (the reader its Patient), POSTed to Bot/<id>/$execute or,
	// by identifier, to Bot/$execute?identifier=.
	forms := []struct {
		name string
		op   func(w, i int) bool
	}{
		{"$execute JSON", func(int, int) bool {
			return execute("Bot/"+echo+"/$execute", "application/json", []byte(`{"hello":"world"}`), []byte("world"))
		}},
		{"$execute text", func(int, int) bool {
			return execute("Bot/"+echo+"/$execute", "text/plain", []byte("hello"), []byte("hello"))
		}},
		{"$execute by identifier", func(int, int) bool {
			return execute("Bot/$execute?identifier="+ident, "application/json", []byte(`{"hello":"world"}`), []byte("world"))
		}},
		{"$execute reading a Patient", func(w, i int) bool {
			id := b.patients[(w*31+i)%len(b.patients)]
			return execute("Bot/"+reader+"/$execute", "application/json", []byte(`{"id":"`+id+`"}`), []byte(`"`+id+`"`))
		}},
	}
	for _, f := range forms {
		drive(sized(f.name, *clients, size), *clients, f.op)
	}
	for _, f := range forms {
		drive(sized(f.name, 1, size), 1, f.op)
	}
	// A cold first run: each iteration deploys new code, then executes it once.
	var cold []time.Duration
	for i := 0; i < 20; i++ {
		code := fmt.Sprintf("export async function handler(m: unknown, e: {input: unknown}): Promise<unknown> { return {n: %d, input: e.input}; }", i)
		st, _ := b.hc.do("POST", b.base+"fhir/R4/Bot/"+echo+"/$deploy", b.super, "application/json",
			[]byte(fmt.Sprintf(`{"code":%q,"filename":"index.ts"}`, code)))
		if st != 200 {
			fail(fmt.Errorf("deploy: %d", st))
		}
		t0 := time.Now()
		st, _ = b.hc.do("POST", b.base+"fhir/R4/Bot/"+echo+"/$execute", b.token, "application/json", []byte(`{}`))
		cold = append(cold, time.Since(t0))
		if st != 200 {
			fail(fmt.Errorf("cold execute: %d", st))
		}
	}
	sort.Slice(cold, func(i, j int) bool { return cold[i] < cold[j] })
	fmt.Printf("%-44s %9s        p50 %7.3f ms  max %7.3f ms  (20 deploys, each followed by its first execution)\n",
		"first $execute after $deploy ("+size+")", "", ms(cold[len(cold)/2]), ms(cold[len(cold)-1]))
}
