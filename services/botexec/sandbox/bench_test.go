package sandbox

import (
	"context"
	"encoding/json"
	"testing"
)

// memoryHost answers every request from memory, so the benchmark measures
// the runtime and the promise round trip, not I/O.
type memoryHost struct{ body []byte }

func (h memoryHost) Request(ctx context.Context, method, path string, body []byte, contentType string) (int, string, []byte, error) {
	return 200, "application/fhir+json", h.body, nil
}

func benchRun(b *testing.B, code string, ev Event, host Host) {
	p := mustCompile(b, code)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		res, err := Run(ctx, p, ev, host, Limits{})
		if err != nil || res.Err != nil {
			b.Fatalf("%v %+v", err, res.Err)
		}
	}
}

func BenchmarkEchoJSON(b *testing.B) {
	benchRun(b, echoBot, Event{
		Input:       json.RawMessage(`{"resourceType":"Patient","id":"123","name":[{"given":["Alice"],"family":"Smith"}],"birthDate":"1970-01-01"}`),
		ContentType: "application/fhir+json",
	}, nil)
}

func BenchmarkEchoText(b *testing.B) {
	benchRun(b, echoBot, Event{Input: "hello world", ContentType: "text/plain"}, nil)
}

func BenchmarkEchoHL7(b *testing.B) {
	benchRun(b, echoBot, Event{Input: adt, ContentType: HL7ContentType}, nil)
}

func BenchmarkReadResource(b *testing.B) {
	benchRun(b, `exports.handler = async (medplum, event) => {
		const p = await medplum.readResource('Patient', '123');
		return p.name[0].family;
	};`, Event{Input: "x", ContentType: "text/plain"},
		memoryHost{body: []byte(`{"resourceType":"Patient","id":"123","name":[{"family":"Smith"}]}`)})
}

const tsBot = `
import { BotEvent, MedplumClient, createReference } from '@medplum/core';
import type { Observation, Patient } from '@medplum/fhirtypes';

export async function handler(medplum: MedplumClient, event: BotEvent<Patient>): Promise<Observation> {
  const patient = event.input;
  const obs: Observation = {
    resourceType: 'Observation',
    status: 'final',
    code: { text: 'heart rate' },
    subject: createReference(patient),
    valueQuantity: { value: 72, unit: 'beats/min' },
  };
  return medplum.createResource(obs);
}
`

func BenchmarkTranspileCompile(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		code, err := Transpile(tsBot, "bot.ts")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Compile("bot.js", code); err != nil {
			b.Fatal(err)
		}
	}
}
