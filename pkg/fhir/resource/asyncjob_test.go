package resource

import (
	"encoding/json"
	"testing"
)

// An AsyncJob read, changed and written keeps what Pinion does not set as
// it was written, numbers in their own form included.
func TestAsyncJobKeepsOtherElements(t *testing.T) {
	stored := `{"resourceType":"AsyncJob","id":"j1","meta":{"versionId":"v1","security":[{"system":"s","code":"c"}]},` +
		`"status":"active","request":"http://x/fhir/R4/$export","requestTime":"2024-01-01T00:00:00Z",` +
		`"extension":[{"url":"http://example.com/cost","valueDecimal":1.50}],"dataVersion":"7",` +
		`"output":{"resourceType":"Parameters","parameter":[{"name":"cursor","part":[{"name":"step","valueInteger":2.0}]}]}}`
	var job AsyncJob
	if err := json.Unmarshal([]byte(stored), &job); err != nil {
		t.Fatal(err)
	}
	if got := job.Output.Parameter[0].Part[0].Int(); got != 2 {
		t.Fatalf("step %d, want 2", got)
	}
	job.Status = "completed"
	job.TransactionTime = job.RequestTime
	job.Output = &Parameters{ResourceType: "Parameters", Parameter: []Parameter{}}
	m, err := Map(&job)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(m)
	want := `{"dataVersion":"7","extension":[{"url":"http://example.com/cost","valueDecimal":1.50}],"id":"j1",` +
		`"meta":{"security":[{"code":"c","system":"s"}],"versionId":"v1"},"output":{"parameter":[],"resourceType":"Parameters"},` +
		`"request":"http://x/fhir/R4/$export","requestTime":"2024-01-01T00:00:00Z","resourceType":"AsyncJob","status":"completed",` +
		`"transactionTime":"2024-01-01T00:00:00Z"}`
	if string(got) != want {
		t.Fatalf("%s\nwant %s", got, want)
	}
}

// Integer reads every JSON form of a whole number; anything else is 0.
func TestInteger(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Integer
	}{
		{"12", 12}, {"12.0", 12}, {"1.2e1", 12}, {"-3", -3}, {"0", 0},
		{"12.5", 0}, {`"12"`, 0}, {"true", 0}, {"null", 0}, {"1e300", 0},
	} {
		var i Integer = 99
		if err := json.Unmarshal([]byte(tc.in), &i); err != nil || i != tc.want {
			t.Errorf("%s: %d, %v; want %d", tc.in, i, err, tc.want)
		}
	}
}

// A value of the wrong kind reads as absent, and the rest of the job
// still reads.
func TestAsyncJobLenient(t *testing.T) {
	var job AsyncJob
	err := json.Unmarshal([]byte(`{"resourceType":"AsyncJob","status":7,"request":"r","output":"x"}`), &job)
	if err != nil || job.Status != "" || job.Request != "r" || job.Output != nil && len(job.Output.Parameter) > 0 {
		t.Fatalf("%+v, %v", job, err)
	}
	if err := json.Unmarshal([]byte(`[1]`), &job); err == nil {
		t.Fatal("a list read as a job")
	}
}
