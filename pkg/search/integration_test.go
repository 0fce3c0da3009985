package search

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/pinion-health/pinion/pkg/embedded"
	"github.com/pinion-health/pinion/pkg/store"
	"github.com/pinion-health/pinion/pkg/store/mongostore"
	"github.com/pinion-health/pinion/pkg/store/sqlstore"
)

// These tests run each query through every store adapter: the SQLite store
// and the MongoDB adapter on the embedded FerretDB that TestMain starts.
var (
	client *mongo.Client
	tmpDir string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "pinion-search-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "search tests:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	tmpDir = dir
	// FerretDB warns about every endSessions the driver sends on Disconnect;
	// only its errors matter here.
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	f, err := embedded.StartFerretDB(embedded.FerretOptions{Dir: dir + "/ferret", Logger: quiet})
	if err != nil {
		fmt.Fprintln(os.Stderr, "search tests: start FerretDB:", err)
		return 1
	}
	defer f.Close()
	if client, err = mongo.Connect(options.Client().ApplyURI(f.URI)); err != nil {
		fmt.Fprintln(os.Stderr, "search tests: connect:", err)
		return 1
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.Disconnect(ctx)
	}()
	return m.Run()
}

// backend is one store adapter, fresh and empty for one test.
type backend struct {
	name string
	st   store.Store
}

var dbSeq int

func backends(t *testing.T, ctx context.Context) []backend {
	t.Helper()
	dbSeq++
	sq, err := sqlstore.Open(ctx, fmt.Sprintf("%s/search-%d.db", tmpDir, dbSeq), sqlstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sq.Close() })
	mg, err := mongostore.Open(ctx, client.Database(fmt.Sprintf("search_test_%d", dbSeq)), mongostore.Options{IndexKeys: IndexKeys})
	if err != nil {
		t.Fatal(err)
	}
	return []backend{{"sqlite", sq}, {"ferretdb", mg}}
}

// fixture is one stored resource.
type fixture struct {
	id, lastUpdated, json string
}

// load writes resources of one type, in project proj1, with their search
// fields from Fields, into every backend.
func load(t *testing.T, ctx context.Context, resourceType string, fixtures []fixture) []backend {
	t.Helper()
	bs := backends(t, ctx)
	var ws []*store.Write
	for _, f := range fixtures {
		res := decode(t, f.json)
		res["resourceType"], res["id"] = resourceType, f.id
		ws = append(ws, &store.Write{
			Record: store.Record{Type: resourceType, ID: f.id, Version: "1", Time: ts(f.lastUpdated), Project: "proj1", JSON: []byte(f.json)},
			Fields: Fields(resourceType, res),
		})
	}
	for _, b := range bs {
		if err := b.st.Write(ctx, ws...); err != nil {
			t.Fatalf("%s: %v", b.name, err)
		}
	}
	return bs
}

// find runs a parsed query the way the repository does and returns the ids.
func find(t *testing.T, ctx context.Context, st store.Store, resourceType, project string, q *Query) []string {
	t.Helper()
	recs, err := st.Search(ctx, resourceType, &store.Query{Project: project, Filter: q.Filter, Sort: q.Sort, Offset: q.Offset, Limit: q.Count})
	if err != nil {
		t.Fatalf("search %s: %v", render(q.Filter), err)
	}
	ids := make([]string, len(recs))
	for i, r := range recs {
		ids[i] = r.ID
	}
	return ids
}

type searchCase struct {
	name  string
	query string
	want  []string // in order when the query sorts; otherwise as a set
}

func runCases(t *testing.T, ctx context.Context, bs []backend, resourceType string, cases []searchCase) {
	t.Helper()
	for _, b := range bs {
		t.Run(b.name, func(t *testing.T) { runCasesOn(t, ctx, b.st, resourceType, cases) })
	}
}

func runCasesOn(t *testing.T, ctx context.Context, st store.Store, resourceType string, cases []searchCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q, err := Parse(resourceType, mustQuery(t, tc.query))
			if err != nil {
				t.Fatalf("Parse(%q): %v", tc.query, err)
			}
			if q.Count == 0 {
				// The repository only counts.
				if len(tc.want) != 0 {
					t.Fatalf("_count=0 with results wanted")
				}
				return
			}
			got := find(t, ctx, st, resourceType, "proj1", q)
			want := slices.Clone(tc.want)
			if len(q.Sort) == 0 {
				slices.Sort(got)
				slices.Sort(want)
			}
			if want == nil {
				want = []string{}
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s?%s\nfilter %s sort %s\n got %v\nwant %v",
					resourceType, tc.query, render(q.Filter), renderSort(q.Sort), got, want)
			}
		})
	}
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestSearchPatients(t *testing.T) {
	ctx := testContext(t)
	bs := load(t, ctx, "Patient", []fixture{
		{"p1", "2024-01-01T10:00:00Z", `{"name":[{"given":["John"],"family":"Smith"}],"birthDate":"1980-05-12","gender":"male","active":true,
			"identifier":[{"system":"http://hospital/mrn","value":"123"}],"telecom":[{"system":"email","value":"John.Smith@Example.com"}]}`},
		{"p2", "2024-02-01T10:00:00Z", `{"name":[{"given":["José"],"family":"Müller"}],"birthDate":"1990","gender":"female",
			"identifier":[{"value":"456"}],"telecom":[{"system":"email","value":"jose@example.com"},{"system":"phone","value":"555"}]}`},
		{"p3", "2024-03-01T10:00:00Z", `{"name":[{"given":["Jane"],"family":"Smithers"}],"birthDate":"2001-02-03","gender":"female",
			"identifier":[{"system":"http://hospital/mrn","value":"789"}]}`},
		{"p4", "2024-04-01T10:00:00Z", `{"active":false}`},
	})
	runCases(t, ctx, bs, "Patient", []searchCase{
		{"everything", "", []string{"p1", "p2", "p3", "p4"}},
		{"name prefix", "name=smi", []string{"p1", "p3"}},
		{"name is case-insensitive", "name=SMITH", []string{"p1", "p3"}},
		{"full name", "name=john%20smith", []string{"p1"}},
		{"name accent-insensitive", "name=jose", []string{"p2"}},
		{"name with accent in query", "name=Müll", []string{"p2"}},
		{"name alternatives", "name=jane,jose", []string{"p2", "p3"}},
		{"name repeated is AND", "name=smi&name=jane", []string{"p3"}},
		{"name exact", "name:exact=Smith", []string{"p1"}},
		{"name contains", "name:contains=ith", []string{"p1", "p3"}},
		{"name missing", "name:missing=true", []string{"p4"}},
		{"family", "family=smith", []string{"p1", "p3"}},
		{"family exact", "family:exact=Smithers", []string{"p3"}},
		{"given", "given=ja", []string{"p3"}},
		{"identifier code", "identifier=123", []string{"p1"}},
		{"identifier system|code", "identifier=http://hospital/mrn|789", []string{"p3"}},
		{"identifier system|", "identifier=http://hospital/mrn|", []string{"p1", "p3"}},
		{"identifier |code", "identifier=|456", []string{"p2"}},
		{"identifier |code with a system does not match", "identifier=|123", nil},
		{"identifier not", "identifier:not=123", []string{"p2", "p3", "p4"}},
		{"birthdate day", "birthdate=1980-05-12", []string{"p1"}},
		{"birthdate year contains the day", "birthdate=1980", []string{"p1"}},
		{"birthdate year value", "birthdate=1990", []string{"p2"}},
		{"birthdate month inside a year value", "birthdate=1990-06", nil},
		{"birthdate ge", "birthdate=ge1990", []string{"p2", "p3"}},
		{"birthdate lt", "birthdate=lt1990", []string{"p1"}},
		{"birthdate le", "birthdate=le1990", []string{"p1", "p2"}},
		{"birthdate gt", "birthdate=gt1990-06", []string{"p2", "p3"}},
		{"birthdate sa", "birthdate=sa2000", []string{"p3"}},
		{"birthdate eb", "birthdate=eb1985", []string{"p1"}},
		{"birthdate ne", "birthdate=ne1980-05-12", []string{"p2", "p3"}},
		{"birthdate range", "birthdate=ge1985&birthdate=lt2000", []string{"p2"}},
		{"birthdate OR", "birthdate=1980,2001", []string{"p1", "p3"}},
		{"birthdate missing", "birthdate:missing=true", []string{"p4"}},
		{"email case-insensitive", "email=JOHN.SMITH@example.com", []string{"p1"}},
		{"email system|value", "telecom=email|jose@example.com", []string{"p2"}},
		{"phone", "phone=555", []string{"p2"}},
		{"gender", "gender=female", []string{"p2", "p3"}},
		{"gender OR", "gender=male,female", []string{"p1", "p2", "p3"}},
		{"gender not", "gender:not=male", []string{"p2", "p3", "p4"}},
		// A code has no system: "|female" is "female", and a system never matches.
		{"gender without a system", "gender=%7Cfemale", []string{"p2", "p3"}},
		{"gender not without a system", "gender:not=%7Cmale", []string{"p2", "p3", "p4"}},
		{"gender with a system", "gender=http%3A%2F%2Fhl7.org%2Ffhir%2Fadministrative-gender%7Cfemale", nil},
		{"active without a system", "active=%7Ctrue", []string{"p1"}},
		{"gender missing", "gender:missing=true", []string{"p4"}},
		{"gender present", "gender:missing=false", []string{"p1", "p2", "p3"}},
		{"active", "active=true", []string{"p1"}},
		{"active false", "active=false", []string{"p4"}},
		{"deceased false when absent", "deceased=false", []string{"p1", "p2", "p3", "p4"}},
		{"combined", "name=smi&gender=female", []string{"p3"}},
		{"_id", "_id=p1,p3", []string{"p1", "p3"}},
		{"_lastUpdated ge", "_lastUpdated=ge2024-02-01", []string{"p2", "p3", "p4"}},
		{"_lastUpdated lt month", "_lastUpdated=lt2024-02", []string{"p1"}},
		{"_lastUpdated month", "_lastUpdated=2024-03", []string{"p3"}},
		{"_lastUpdated range", "_lastUpdated=gt2024-01-01&_lastUpdated=lt2024-03-15", []string{"p2", "p3"}},
		{"_lastUpdated instant", "_lastUpdated=2024-02-01T10:00:00Z", []string{"p2"}},
		{"_lastUpdated ne", "_lastUpdated=ne2024-02", []string{"p1", "p3", "p4"}},
		{"_project", "_project=proj1", []string{"p1", "p2", "p3", "p4"}},
		{"_project other", "_project=Project/other", nil},
		{"sort by _lastUpdated descending", "_sort=-_lastUpdated", []string{"p4", "p3", "p2", "p1"}},
		{"sort by name, missing last", "_sort=name", []string{"p3", "p1", "p2", "p4"}},
		// By each one's largest name (smithers, smith, muller), not its first.
		{"sort by name descending, by the largest value", "_sort=-name", []string{"p3", "p1", "p2", "p4"}},
		{"sort by birthdate descending, missing last", "_sort=-birthdate", []string{"p3", "p2", "p1", "p4"}},
		{"sort by gender then id descending", "_sort=gender,-_id", []string{"p3", "p2", "p1", "p4"}},
		{"sort by identifier", "_sort=identifier", []string{"p1", "p2", "p3", "p4"}},
		{"page", "_sort=_id&_count=2&_offset=1", []string{"p2", "p3"}},
		{"page past the end", "_sort=_id&_count=2&_offset=4", nil},
		{"count 0", "_count=0", nil},
		{"sorted filter", "gender=female&_sort=-birthdate", []string{"p3", "p2"}},
	})
}

func TestSearchPractitioners(t *testing.T) {
	ctx := testContext(t)
	bs := load(t, ctx, "Practitioner", []fixture{
		{"pr1", "2024-01-01T00:00:00Z", `{"name":[{"given":["Alice"],"family":"Walker","prefix":["Dr"]}],"telecom":[{"system":"email","value":"alice@clinic.org"}],
			"identifier":[{"system":"http://hl7.org/fhir/sid/us-npi","value":"1234567893"}],"address":[{"city":"Zürich","line":["Bahnhofstrasse 1"]}]}`},
		{"pr2", "2024-01-02T00:00:00Z", `{"name":[{"given":["Bob"],"family":"Brown"}],"gender":"male","active":true}`},
	})
	runCases(t, ctx, bs, "Practitioner", []searchCase{
		{"name", "name=alice", []string{"pr1"}},
		{"name prefix", "name=dr", []string{"pr1"}},
		{"family", "family=bro", []string{"pr2"}},
		{"email", "email=Alice@Clinic.org", []string{"pr1"}},
		{"identifier", "identifier=http://hl7.org/fhir/sid/us-npi|1234567893", []string{"pr1"}},
		{"address city without accent", "address-city=zurich", []string{"pr1"}},
		{"address line", "address=bahnhof", []string{"pr1"}},
		{"gender", "gender=male", []string{"pr2"}},
		{"active missing", "active:missing=true", []string{"pr1"}},
	})
}

func TestSearchMemberships(t *testing.T) {
	ctx := testContext(t)
	m := func(profile, user, extra string) string {
		s := `{"project":{"reference":"Project/proj1"}`
		if profile != "" {
			s += `,"profile":{"reference":"` + profile + `"}`
		}
		if user != "" {
			s += `,"user":{"reference":"` + user + `"}`
		}
		return s + extra + "}"
	}
	bs := load(t, ctx, "ProjectMembership", []fixture{
		{"m1", "2024-01-01T00:00:00Z", m("Patient/p1", "User/u1", `,"active":true,"userName":"john@example.com"`)},
		{"m2", "2024-01-02T00:00:00Z", m("Practitioner/pr1", "User/u2", `,"admin":true,"accessPolicy":{"reference":"AccessPolicy/ap1"},"externalId":"EXT-2"`)},
		{"m3", "2024-01-03T00:00:00Z", m("ClientApplication/c1", "ClientApplication/c1", "")},
		{"m4", "2024-01-04T00:00:00Z", m("Bot/b1", "Bot/b1", "")},
		{"m5", "2024-01-05T00:00:00Z", m("RelatedPerson/rp1", "User/u5", `,"access":[{"policy":{"reference":"AccessPolicy/ap2"}}]`)},
		{"m6", "2024-01-06T00:00:00Z", m("", "User/u6", "")},
		{"m7", "2024-01-07T00:00:00Z", m("https://example.com/fhir/R4/Patient/p2", "User/u7", "")},
	})
	runCases(t, ctx, bs, "ProjectMembership", []searchCase{
		// The four use cases of E4 (docs/API.md): GET ProjectMembership by profile type.
		{"all members", "", []string{"m1", "m2", "m3", "m4", "m5", "m6", "m7"}},
		{"human members", "profile-type:not=ClientApplication,Bot", []string{"m1", "m2", "m5", "m6", "m7"}},
		{"patients", "profile-type=Patient", []string{"m1", "m7"}},
		{"practitioners", "profile-type=Practitioner", []string{"m2"}},
		{"patients or practitioners", "profile-type=Patient,Practitioner", []string{"m1", "m2", "m7"}},
		{"profile-type is case-sensitive", "profile-type=patient", nil},
		{"profile-type missing", "profile-type:missing=true", []string{"m6"}},
		{"profile-type present", "profile-type:missing=false", []string{"m1", "m2", "m3", "m4", "m5", "m7"}},
		{"profile-type with count and sort", "profile-type:not=ClientApplication,Bot&_sort=-_lastUpdated&_count=2", []string{"m7", "m6"}},
		{"sort by profile-type", "profile-type:missing=false&_sort=profile-type", []string{"m4", "m3", "m1", "m7", "m2", "m5"}},
		{"profile Type/id", "profile=Patient/p1", []string{"m1"}},
		{"profile from an absolute reference", "profile=Patient/p2", []string{"m7"}},
		{"profile absolute query", "profile=https://other.example/fhir/Patient/p1", []string{"m1"}},
		{"profile bare id", "profile=pr1", []string{"m2"}},
		{"profile type modifier", "profile:Bot=b1", []string{"m4"}},
		{"user", "user=User/u1,User/u2", []string{"m1", "m2"}},
		{"user type modifier", "user:ClientApplication=c1", []string{"m3"}},
		{"project", "project=Project/proj1&_count=1&_sort=_id", []string{"m1"}},
		{"access-policy from accessPolicy", "access-policy=AccessPolicy/ap1", []string{"m2"}},
		{"access-policy from access[].policy", "access-policy=ap2", []string{"m5"}},
		{"admin", "admin=true", []string{"m2"}},
		{"active", "active=true", []string{"m1"}},
		{"external-id", "external-id=ext", []string{"m2"}},
		{"external-id exact", "external-id:exact=EXT-2", []string{"m2"}},
		{"user-name", "user-name=john@", []string{"m1"}},
		{"_lastUpdated window", "_lastUpdated=ge2024-01-03&_lastUpdated=le2024-01-04", []string{"m3", "m4"}},
	})
}

func TestSearchBots(t *testing.T) {
	ctx := testContext(t)
	bs := load(t, ctx, "Bot", []fixture{
		{"b1", "2024-01-01T00:00:00Z", `{"name":"Echo Bot","identifier":[{"system":"https://example.com/bots","value":"echo"}]}`},
		{"b2", "2024-01-02T00:00:00Z", `{"name":"Echo Two","identifier":[{"value":"echo"}]}`},
		{"b3", "2024-01-03T00:00:00Z", `{"name":"Reader","identifier":[{"system":"https://other.example","value":"reader"}]}`},
	})
	runCases(t, ctx, bs, "Bot", []searchCase{
		{"identifier system|code", "identifier=https://example.com/bots|echo", []string{"b1"}},
		{"identifier |code", "identifier=|echo", []string{"b2"}},
		{"identifier bare code, any system", "identifier=echo", []string{"b1", "b2"}},
		{"identifier system|", "identifier=https://other.example|", []string{"b3"}},
		{"identifier other system", "identifier=https://other.example|echo", nil},
		{"name prefix", "name=echo", []string{"b1", "b2"}},
		{"name second word does not match", "name=bot", nil},
		{"name exact", "name:exact=Echo Bot", []string{"b1"}},
		{"name exact is case-sensitive", "name:exact=echo bot", nil},
		{"name contains", "name:contains=two", []string{"b2"}},
		{"sort by name descending", "_sort=-name", []string{"b3", "b2", "b1"}},
	})
}

func TestSearchAccessPolicies(t *testing.T) {
	ctx := testContext(t)
	bs := load(t, ctx, "AccessPolicy", []fixture{
		{"ap1", "2024-01-01T00:00:00Z", `{"name":"Patient Access","resource":[{"resourceType":"Patient"}]}`},
		{"ap2", "2024-01-02T00:00:00Z", `{"name":"Practitioner Policy","meta":{"tag":[{"system":"http://tags","code":"staff"}]}}`},
		{"ap3", "2024-01-03T00:00:00Z", `{"resource":[{"resourceType":"*"}]}`},
	})
	runCases(t, ctx, bs, "AccessPolicy", []searchCase{
		{"name", "name=pati", []string{"ap1"}},
		{"name shared prefix", "name=pa", []string{"ap1"}},
		{"name any", "name=p", []string{"ap1", "ap2"}},
		{"name missing", "name:missing=true", []string{"ap3"}},
		{"tag", "_tag=http://tags|staff", []string{"ap2"}},
		{"tag not", "_tag:not=staff", []string{"ap1", "ap3"}},
	})
}

// TestFilterShapes checks that every kind of condition Parse builds is
// accepted by FerretDB, whatever it matches.
func TestFilterShapes(t *testing.T) {
	ctx := testContext(t)
	bs := load(t, ctx, "Observation", []fixture{
		{"o1", "2024-01-01T00:00:00Z", `{"status":"final","subject":{"reference":"Patient/p1"},
			"code":{"coding":[{"system":"http://loinc.org","code":"8867-4","display":"Heart rate"}]},
			"effectivePeriod":{"start":"2021-05-06T07:08:09Z","end":"2021-05-06T08:00:00Z"},
			"valueQuantity":{"value":72,"unit":"/min","system":"http://unitsofmeasure.org","code":"/min"}}`},
		{"o2", "2024-01-02T00:00:00Z", `{"status":"preliminary","subject":{"reference":"Group/g1"},"effectiveDateTime":"2022",
			"valueQuantity":{"value":100.2,"system":"http://unitsofmeasure.org","code":"mg"}}`},
	})
	runCases(t, ctx, bs, "Observation", []searchCase{
		{"code text", "code:text=heart", []string{"o1"}},
		{"code", "code=http://loinc.org|8867-4", []string{"o1"}},
		{"patient only for patients", "patient=p1", []string{"o1"}},
		{"subject group", "subject=Group/g1", []string{"o2"}},
		{"subject type modifier", "subject:Group=g1", []string{"o2"}},
		{"date within period", "date=2021-05-06", []string{"o1"}},
		{"date ge", "date=ge2021-06", []string{"o2"}},
		{"date le", "date=le2021-05-06", []string{"o1"}},
		{"date ap", "date=ap2022-06", []string{"o2"}},
		{"quantity eq by precision", "value-quantity=100", []string{"o2"}},
		{"quantity gt with unit", "value-quantity=gt50|http://unitsofmeasure.org|/min", []string{"o1"}},
		{"quantity code only", "value-quantity=ge1||mg", []string{"o2"}},
		{"quantity ne", "value-quantity=ne72", []string{"o2"}},
		{"quantity ap", "value-quantity=ap70", []string{"o1"}},
		{"status not", "status:not=final", []string{"o2"}},
		{"sort by date", "_sort=-date", []string{"o2", "o1"}},
	})
}

// TestScoped runs queries with the repository's project scope.
func TestScoped(t *testing.T) {
	ctx := testContext(t)
	bs := load(t, ctx, "Patient", []fixture{
		{"p1", "2024-01-01T00:00:00Z", `{"gender":"female","name":[{"family":"Smith"}]}`},
		{"p2", "2024-01-02T00:00:00Z", `{"gender":"female","name":[{"family":"Smithers"}]}`},
		{"p3", "2024-01-03T00:00:00Z", `{"gender":"male"}`},
	})
	tests := []struct {
		name, query, project string
		want                 []string
	}{
		{"own project", "gender=female", "proj1", []string{"p1", "p2"}},
		{"other project", "gender=female", "proj2", nil},
		{"every project", "gender=female", "", []string{"p1", "p2"}},
		{"_project agreeing", "_project=proj1&name=smith&name=smithe", "proj1", []string{"p2"}},
		{"_project disagreeing", "_project=proj2", "proj1", nil},
	}
	for _, b := range bs {
		for _, tc := range tests {
			t.Run(b.name+"/"+tc.name, func(t *testing.T) {
				q, err := Parse("Patient", mustQuery(t, tc.query))
				if err != nil {
					t.Fatal(err)
				}
				got := find(t, ctx, b.st, "Patient", tc.project, q)
				slices.Sort(got)
				if !slices.Equal(got, tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
					t.Errorf("%s: got %v, want %v (filter %s)", tc.query, got, tc.want, render(q.Filter))
				}
			})
		}
	}
}
