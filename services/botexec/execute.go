package botexec

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"mime"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/hl7"
	"github.com/pinion-health/pinion/pkg/metrics"
	"github.com/pinion-health/pinion/pkg/presign"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/search"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/services/botexec/sandbox"
	"github.com/pinion-health/pinion/services/botexec/worker"
)

// Bot timeouts (seconds): Medplum's default and the most we allow.
const (
	defaultTimeout = 10
	maxTimeout     = 900
)

// bot is what an execution needs of a Bot resource.
type bot struct {
	ID        string
	Project   string
	Name      string      `json:"name"`
	RunAsUser bool        `json:"runAsUser"`
	Timeout   json.Number `json:"timeout"`
	// AuditTrigger and AuditDestination are auditEventTrigger and
	// auditEventDestination.
	AuditTrigger     string   `json:"auditEventTrigger"`
	AuditDestination []string `json:"auditEventDestination"`
	Code             struct {
		URL string `json:"url"`
	} `json:"executableCode"`
}

// execute is POST or GET /fhir/R4/Bot/{id}/$execute and
// /fhir/R4/Bot/$execute?identifier=<system>|<code> (E5 and E6 in docs/API.md).
func (s *Service) execute(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	if err := access.Check(r.Principal, "Bot", access.Read); err != nil {
		return nil, err
	}
	if err := checkBotDepth(r.BotDepth); err != nil {
		return nil, err
	}
	if wantsAsync(r) {
		return s.executeAsync(ctx, r)
	}
	return s.executeNow(ctx, r)
}

// maxBotDepth bounds chains of bots running bots: without it, one request
// fanned out into more than a thousand executions.
const maxBotDepth = 5

// checkBotDepth refuses a run past maxBotDepth in a chain of bots.
func checkBotDepth(depth int) error {
	if depth >= maxBotDepth {
		return fhir.BadRequest(fmt.Sprintf("Bots may run bots at most %d deep", maxBotDepth-1))
	}
	return nil
}

// timeout is how long the bot may run: its own setting when that is a whole
// number of seconds above zero (at most maxTimeout), else Medplum's default.
func (b *bot) timeout() time.Duration {
	n, err := b.Timeout.Int64()
	if err != nil || n <= 0 {
		return defaultTimeout * time.Second
	}
	return time.Duration(min(n, maxTimeout)) * time.Second
}

// decodeBot reads what an execution needs from a Bot's JSON; id and project
// are the stored resource's.
func decodeBot(id, project string, j []byte) (bot, error) {
	var b bot
	if err := json.Unmarshal(j, &b); err != nil {
		return bot{}, err
	}
	b.ID, b.Project = id, project
	return b, nil
}

// executeNow runs the bot and answers with its result.
func (s *Service) executeNow(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	start := time.Now()
	b, err := s.findBot(ctx, r)
	if err != nil {
		return nil, err
	}
	in, err := botInput(r)
	if err != nil {
		return nil, err
	}
	runAs, err := s.runAs(ctx, b, r.Principal, session.AppliedRevision(r.Get(session.AppliedHeader)))
	if err != nil {
		return nil, err
	}
	res, err := s.run(ctx, requestExecution(b, r, in, runAs, start))
	if err != nil {
		return nil, err
	}
	return botResponse(res, in.mediaType), nil
}

// execution is one run of a bot, however it was asked for ($execute, a
// subscription or its schedule): what Service.run needs to run it and
// record it.
type execution struct {
	bot              *bot
	in               *input
	requester, runAs *bus.Principal
	// depth is how deep in a chain of bots the asker runs (0: not a bot).
	depth       int
	start       time.Time
	requestID   string
	contentType string
	traceID     string
	headers     map[string]string
	// subscription names the Subscription that asked, for the audit, and
	// committed is when the change it delivers was committed.
	subscription string
	committed    time.Time
	// scheduled is the tick of Bot.cronString a scheduled run is for.
	scheduled time.Time
}

// requestExecution is the execution a $execute request asks for.
func requestExecution(b *bot, r *bus.Request, in *input, runAs *bus.Principal, start time.Time) *execution {
	return &execution{
		bot: b, in: in, requester: r.Principal, runAs: runAs, depth: r.BotDepth, start: start,
		requestID: r.RequestID, contentType: r.Get("Content-Type"), traceID: traceID(r), headers: lowerHeaders(r.Header),
	}
}

// event is what the bot's handler receives besides its input.
func (x *execution) event(secrets map[string]any) sandbox.Event {
	return sandbox.Event{
		Bot:         map[string]any{"reference": "Bot/" + x.bot.ID, "display": x.bot.Name},
		Requester:   map[string]any{"reference": x.requester.Profile},
		ContentType: x.contentType,
		Secrets:     secrets,
		TraceID:     x.traceID,
		Headers:     x.headers,
	}
}

// run executes a bot within its project's concurrency and the sandbox's
// limits, then records it: one path for every way a bot is run.
func (s *Service) run(ctx context.Context, x *execution) (*sandbox.Result, error) {
	b := x.bot
	code, err := s.program(ctx, b)
	if err != nil {
		return nil, err
	}
	secrets, err := s.runSecrets(ctx, b)
	if err != nil {
		return nil, err
	}
	// A bot run by a bot does not wait for a slot its caller may be
	// holding: it is refused at once rather than deadlock.
	release, err := s.slots.acquire(ctx, b.Project, x.depth == 0)
	if err != nil {
		return nil, err
	}
	defer release()
	if !x.committed.IsZero() {
		metrics.SubscriptionLatency.Observe(time.Since(x.committed).Seconds())
	}
	res, err := s.pool.Run(ctx, &worker.Job{
		Key: code.key, Name: "Bot/" + b.ID, Code: code.source,
		Event: x.event(secrets),
		Input: x.in.body, InputKind: x.in.kind,
		Limits: sandbox.Limits{
			Timeout: b.timeout(), MemoryBytes: s.cfg.MemoryBytes,
			// What a bot returns must fit in one answer on the bus.
			MaxOutputBytes: min(sandbox.DefaultLimits.MaxOutputBytes, bus.ReplyBudget(s.nc)),
		},
		Host: &host{s: s, principal: x.runAs, requestID: x.requestID, depth: x.depth + 1},
	})
	if err != nil {
		return nil, err
	}
	outcome := "ok"
	if res.Err != nil {
		outcome = "error"
		// An error's text is often an accident (a failed call quoting its
		// URL and key): it reaches the caller with secrets masked. What the
		// bot returns is its own choice.
		res.Err.Message = maskSecrets(res.Err.Message, secrets)
	}
	metrics.BotExecutions.WithLabelValues(outcome).Inc()
	metrics.BotDuration.Observe(res.Elapsed.Seconds())
	s.audit(b, x.requester, x.runAs, x.start, res, secrets, x.subscription, x.scheduled)
	return res, nil
}

// findBot finds the bot to run, by id or by identifier in the caller's
// project (several bots with the identifier is 412, not an arbitrary
// pick), through the caller's access policy either way: 403 when it grants
// no read of Bot, 404 when its criteria hide the bot.
func (s *Service) findBot(ctx context.Context, r *bus.Request) (*bot, error) {
	pol, err := s.policies.For(ctx, r.Principal)
	if err != nil {
		return nil, err
	}
	id, ident, err := botTarget(r)
	if err != nil {
		return nil, err
	}
	if id == "" {
		if id, err = s.botByIdentifier(ctx, pol, r.Principal.Project, ident); err != nil {
			return nil, err
		}
	}
	res, err := s.readBot(ctx, pol, id, access.Read)
	if err != nil {
		return nil, err
	}
	b, err := botOf(res)
	if err != nil {
		return nil, err
	}
	if vid := r.Param("vid"); vid != "" {
		// Bot/<id>/_history/<vid>/$execute runs the code that version
		// deployed (each $deploy is a version naming its own Binary), as
		// the caller may vread it, with the bot's settings as they are now:
		// who it runs as and its limits are never rolled back with it.
		v, err := pol.Gate(s.repo, "Bot", id).VRead(ctx, id, vid)
		if err != nil {
			return nil, err
		}
		old, err := decodeBot(v.ID, v.Project, v.JSON)
		if err != nil {
			return nil, err
		}
		b.Code = old.Code
	}
	return b, nil
}

// botOf is a stored Bot as an execution needs it, decoded once per version.
func botOf(res *repo.Resource) (*bot, error) {
	b, err := repo.Memo(res, "botexec.bot", func(j []byte) (bot, error) {
		return decodeBot(res.ID, res.Project, j)
	})
	return &b, err
}

// botTarget reads which bot a request names: its id from the path, else
// the identifier query parameter.
func botTarget(r *bus.Request) (id, identifier string, err error) {
	if id = r.Param("id"); id != "" {
		return id, "", nil
	}
	if identifier = r.Query.Get("identifier"); identifier == "" {
		return "", "", fhir.BadRequest("Must specify bot ID or identifier.")
	}
	return "", identifier, nil
}

// readBot reads a bot as the caller may, through the access gate: the one
// check of every route that runs or changes a bot, the same as a FHIR read
// or update of it (403 when the policy grants no such interaction on Bot,
// 404 when its criteria hide this one or it is another project's).
func (s *Service) readBot(ctx context.Context, pol *access.Policy, id string, i access.Interaction) (*repo.Resource, error) {
	return pol.Gate(s.repo, "Bot", id).Reach(ctx, i, id)
}

// identifierTTL is how long an identifier's answer is reused: executing by
// identifier then costs no search, and a bot added with the same
// identifier is seen (as a 412) within seconds.
const identifierTTL = 5 * time.Second

type identifierHit struct {
	id, err string // a bot id, or "not-found" / "multiple" in err
}

// identifierHitOf is what a search for an identifier found: one bot, or
// why there is none to run.
func identifierHitOf(found []*repo.Resource) identifierHit {
	switch len(found) {
	case 0:
		return identifierHit{err: "not-found"}
	case 1:
		return identifierHit{id: found[0].ID}
	}
	return identifierHit{err: "multiple"}
}

// answer is the bot id a hit names, or its refusal.
func (h identifierHit) answer() (string, error) {
	switch h.err {
	case "not-found":
		return "", fhir.NotFound()
	case "multiple":
		return "", fhir.MultipleMatches()
	}
	return h.id, nil
}

// maxIdentifiers bounds the identifier answers kept: the key is the
// caller's to choose, so unbounded it would grow with every new one sent.
const maxIdentifiers = 10_000

// maxBotMemberships bounds the membership entries kept (one per bot that
// runs).
const maxBotMemberships = 10_000

// botByIdentifier finds the one bot with the identifier in the caller's
// project — even for super admins: the same identifier in another project
// never matters. The search is the caller's: a policy that hides
// Bot.identifier refuses it, as it would refuse Bot?identifier=.
func (s *Service) botByIdentifier(ctx context.Context, pol *access.Policy, project, ident string) (string, error) {
	q, err := search.Parse("Bot", url.Values{"identifier": {ident}, "_count": {"2"}})
	if err != nil {
		return "", err
	}
	if err := pol.CheckSearch("Bot", q); err != nil {
		return "", err
	}
	return s.botWithIdentifier(ctx, project, ident, q)
}

// botWithIdentifier is botByIdentifier's lookup, through a short cache.
func (s *Service) botWithIdentifier(ctx context.Context, project, ident string, q *search.Query) (string, error) {
	key := project + "|" + ident
	if h, ok := s.identifiers.Get(key); ok {
		return h.answer()
	}
	page, err := s.repo.Search(ctx, repo.Scope{Project: project}, "Bot", q)
	if err != nil {
		return "", err
	}
	h := identifierHitOf(page.Resources)
	s.identifiers.Add(key, h)
	return h.answer()
}

// input is event.input as a worker receives it.
type input struct {
	kind      string // worker.InputText, InputJSON, InputHL7
	body      []byte
	mediaType string // the request's, for the answer's content type
}

// maxInputDepth bounds the nesting of JSON input: the bot's JSON.parse
// recurses per level.
const maxInputDepth = 512

// botInput turns the request into event.input by its content type,
// checking it here so that a bad body is a 400 (or 413, 415) before any
// bot runs.
func botInput(r *bus.Request) (*input, error) {
	if r.Method == "GET" {
		q := maps.Clone(r.Query)
		delete(q, "identifier") // it names the bot, it is not input
		return &input{kind: worker.InputJSON, body: firstValues(q)}, nil
	}
	mt, _, err := mime.ParseMediaType(r.Get("Content-Type"))
	if err != nil {
		return nil, fhir.UnsupportedMediaType()
	}
	switch mt {
	case "text/plain":
		return &input{kind: worker.InputText, body: r.Body, mediaType: mt}, nil
	case "application/json", "application/fhir+json":
		// Checked here, handed over as raw JSON: the bot sees the keys in
		// the order the client sent them.
		if !json.Valid(r.Body) {
			var v any
			err := json.Unmarshal(r.Body, &v)
			return nil, fhir.BadRequest("Content could not be parsed: " + err.Error())
		}
		if err := fhir.CheckDepth(r.Body, maxInputDepth); err != nil {
			return nil, err
		}
		return &input{kind: worker.InputJSON, body: r.Body, mediaType: mt}, nil
	case "application/x-www-form-urlencoded":
		form, err := url.ParseQuery(string(r.Body))
		if err != nil {
			return nil, fhir.BadRequest("Content could not be parsed: " + err.Error())
		}
		return &input{kind: worker.InputJSON, body: firstValues(form), mediaType: mt}, nil
	case sandbox.HL7ContentType:
		_, err := hl7.ParseLimited(string(r.Body), hl7InputLimits)
		var tooBig *hl7.LimitError
		switch {
		case errors.As(err, &tooBig):
			return nil, fhir.TooLarge("HL7 message too large: " + err.Error())
		case err != nil:
			return nil, fhir.BadRequest("Invalid HL7 message: " + err.Error())
		}
		return &input{kind: worker.InputHL7, body: r.Body, mediaType: mt}, nil
	}
	return nil, fhir.UnsupportedMediaType()
}

// firstValues is a query or form as a JSON object of each name's first
// value, as Medplum gives it; the keys are sorted, so runs are repeatable.
func firstValues(v url.Values) []byte {
	in := make(map[string]string, len(v))
	for k, vs := range v {
		if len(vs) > 0 {
			in[k] = vs[0]
		}
	}
	b, _ := json.Marshal(in)
	return b
}

// hl7InputLimits bound an HL7 message given to a bot. Each element becomes
// a JavaScript value of 200 to 300 bytes before the bot runs; pkg/hl7's
// default allows a million (some 300 MB), this 200,000 (some 60 MB, far
// more than an ADT or ORU message holds).
var hl7InputLimits = hl7.Limits{MaxElements: 200_000}

// code names a bot's program and gives its source on demand: workers keep
// compiled programs by key (the Binary's version), so a warm execution
// neither reads nor parses the source.
type code struct {
	key    string
	source func() (string, error)
}

// program finds the bot's executable code.
func (s *Service) program(ctx context.Context, b *bot) (*code, error) {
	id, err := codeBinary(s.cfg.BaseURL, b.Code.URL)
	if err != nil {
		return nil, err
	}
	bin, err := s.repo.Read(ctx, repo.Scope{Project: b.Project}, "Binary", id)
	if fhir.Missing(err) {
		return nil, fhir.BadRequest("No executable code")
	}
	if err != nil {
		return nil, err
	}
	return &code{key: "Binary/" + id + "/" + bin.VersionID, source: func() (string, error) {
		return programSource(bin.JSON)
	}}, nil
}

// codeBinary is the id of the Binary that Bot.executableCode.url names: a
// reference, or the storage URL (under base) that a client which read the
// Binary's signed URL writes back, as Medplum's bot editor does.
func codeBinary(base, url string) (string, error) {
	if url == "" {
		return "", fhir.BadRequest("No executable code")
	}
	if typ, id, ok := fhir.SplitReference(url); ok && typ == "Binary" {
		return id, nil
	}
	if id, ok := presign.BinaryID(base, url); ok {
		return id, nil
	}
	return "", fhir.BadRequest("Executable code is not a Binary")
}

// programSource is the source a Binary of executable code holds.
func programSource(binary []byte) (string, error) {
	var v struct {
		Data string `json:"data"`
	}
	if err := json.Unmarshal(binary, &v); err != nil {
		return "", err
	}
	src, err := base64.StdEncoding.DecodeString(v.Data)
	if err != nil {
		return "", fhir.BadRequest("Executable code is not valid base64")
	}
	return string(src), nil
}

// runAs is who the bot's medplum client acts as: the caller when the bot
// says runAsUser, else the bot's own membership in its project (falling
// back to the caller for a bot without one, as Medplum does). Whoever runs
// it, a bot never reaches outside its own project: it never acts as a
// super admin, and a caller from another project (only a super admin can
// run another project's bot) lends it nothing — it runs as itself. The
// bot's membership is as fresh as the forwarding gateway's view at
// revision atLeast (0: read from the session bucket).
func (s *Service) runAs(ctx context.Context, b *bot, caller *bus.Principal, atLeast uint64) (*bus.Principal, error) {
	if runsAsCaller(b, caller) {
		return confined(caller), nil
	}
	mid, err := s.membershipID(ctx, b.Project, "Bot/"+b.ID)
	if err != nil {
		return nil, err
	}
	if mid == "" {
		return withoutMembership(b, caller)
	}
	// The rights are read on every run, never older than the gateway's.
	m, err := s.membership(ctx, mid, atLeast)
	if errors.Is(err, session.ErrNotFound) || err == nil && !m.Active {
		return nil, fhir.Forbidden()
	}
	if err != nil {
		return nil, err
	}
	return memberPrincipal(mid, m), nil
}

// membership is a membership's session entry, from the kept copy when
// there is one and the request names the gateway's revision.
func (s *Service) membership(ctx context.Context, id string, atLeast uint64) (*session.Membership, error) {
	if s.botMembers == nil {
		return s.sessions.GetMembership(ctx, id)
	}
	return s.botMembers.Get(ctx, id, atLeast)
}

// runsAsCaller reports a runAsUser bot run from its own project: it acts
// as its caller, and its own membership is not looked up.
func runsAsCaller(b *bot, caller *bus.Principal) bool {
	return b.RunAsUser && caller.Project == b.Project
}

// withoutMembership is who a bot without a membership runs as: its caller,
// who must be of the bot's project.
func withoutMembership(b *bot, caller *bus.Principal) (*bus.Principal, error) {
	if caller.Project != b.Project {
		return nil, fhir.Forbidden()
	}
	return confined(caller), nil
}

// memberPrincipal is the bot acting as its membership mid.
func memberPrincipal(mid string, m *session.Membership) *bus.Principal {
	return confined(&bus.Principal{
		User: m.User, Profile: m.Profile, Project: m.Project, Membership: mid,
		Admin: m.Admin, SuperAdmin: m.SuperAdmin, AccessPolicy: m.AccessPolicy,
	})
}

// confined is a principal held to its own project.
func confined(p *bus.Principal) *bus.Principal {
	c := *p
	c.SuperAdmin = false
	return &c
}

// memberTTL is how long a profile's membership id is trusted without a
// search: the id rarely changes, and the membership's rights are read
// fresh each time from the session bucket.
const memberTTL = 30 * time.Second

// maxMembers bounds the profiles whose membership is cached.
const maxMembers = 10_000

// membershipID finds the id of a profile's membership of a project ("" if
// none) — a bot's own, or a subscription's author's — through a short
// cache: a search on every execution or change would cost a query each.
func (s *Service) membershipID(ctx context.Context, project, profile string) (string, error) {
	key := project + "|" + profile
	if id, ok := s.members.Get(key); ok {
		return id, nil
	}
	q, err := search.Parse("ProjectMembership", url.Values{"profile": {profile}, "_count": {"1"}})
	if err != nil {
		return "", err
	}
	page, err := s.repo.Search(ctx, repo.Scope{Project: project}, "ProjectMembership", q)
	if err != nil {
		return "", err
	}
	id := ""
	if len(page.Resources) > 0 {
		id = page.Resources[0].ID
	}
	s.members.Add(key, id)
	return id, nil
}

// secrets reads the project's secrets for event.secrets.
func (s *Service) secrets(ctx context.Context, project string) (map[string]any, error) {
	p, err := s.repo.Read(ctx, repo.AllProjects, "Project", project)
	if err != nil {
		return nil, err
	}
	// Shared by every execution in the project: never changed.
	return repo.Memo(p, "botexec.secrets", projectSecrets)
}

// projectSecrets is Project.secret by name; a secret without a name is
// left out, and an unreadable list is no secrets.
func projectSecrets(project []byte) (map[string]any, error) {
	var v struct {
		Secret []map[string]any `json:"secret"`
	}
	_ = json.Unmarshal(project, &v)
	out := map[string]any{}
	for _, sec := range v.Secret {
		if name, _ := sec["name"].(string); name != "" {
			out[name] = sec
		}
	}
	return out, nil
}

// traceID is the bot's event.traceId: the caller's X-Trace-Id when it is a
// UUID, else the request's traceparent, else a new one.
func traceID(r *bus.Request) string {
	if id := r.Get("X-Trace-Id"); id != "" {
		if _, err := uuid.Parse(id); err == nil {
			return id
		}
	}
	if tp := r.Trace; len(tp) >= 35 {
		return tp
	}
	return uuid.NewString()
}

// lowerHeaders is event.headers: lower-case names, as Node gives them.
func lowerHeaders(h map[string]string) map[string]string {
	out := make(map[string]string, len(h))
	for k, v := range h {
		if strings.EqualFold(k, "Authorization") || strings.EqualFold(k, "Cookie") {
			continue // a bot never sees the caller's credentials
		}
		if strings.EqualFold(k, session.AppliedHeader) {
			continue // the gateway's, not the caller's
		}
		out[strings.ToLower(k)] = v
	}
	return out
}

// botResponse turns a bot's result into the HTTP answer (docs/API.md,
// "E5, E6 — bots").
func botResponse(res *sandbox.Result, requestType string) *bus.Response {
	if res.Err != nil {
		o := res.Err.OperationOutcome()
		return bus.Outcome(&fhir.Error{Status: fhir.StatusOf(o), Outcome: *o})
	}
	raw := func(ct string, body []byte) *bus.Response {
		return &bus.Response{Status: 200, Header: map[string]string{"Content-Type": ct}, Body: body}
	}
	switch res.Kind {
	case sandbox.KindUndefined:
		return bus.OK()
	case sandbox.KindResource:
		switch res.ResourceType {
		case "Binary":
			var bin struct {
				ContentType string `json:"contentType"`
				Data        string `json:"data"`
			}
			_ = json.Unmarshal(res.JSON, &bin)
			data, err := base64.StdEncoding.DecodeString(bin.Data)
			if err != nil {
				return bus.Outcome(fhir.BadRequest("Bot returned a Binary with invalid data"))
			}
			if bin.ContentType == "" {
				bin.ContentType = "application/octet-stream"
			}
			return raw(bin.ContentType, data)
		case "OperationOutcome":
			var o fhir.OperationOutcome
			if json.Unmarshal(res.JSON, &o) == nil {
				if st := fhir.StatusOf(&o); st >= 400 {
					return bus.FHIR(st, res.JSON)
				}
			}
		}
		return bus.FHIR(200, res.JSON)
	case sandbox.KindHL7:
		return raw(sandbox.HL7ContentType+"; charset=utf-8", []byte(res.Text))
	case sandbox.KindString:
		switch requestType {
		case "text/plain", sandbox.HL7ContentType:
			return raw(requestType+"; charset=utf-8", []byte(res.Text))
		}
		return raw(bus.JSONContentType, []byte(res.Text))
	case sandbox.KindNull:
		return raw(bus.JSONContentType, nil)
	case sandbox.KindNumber, sandbox.KindBoolean:
		return raw(bus.JSONContentType, []byte(res.Text))
	}
	return raw(bus.JSONContentType, res.JSON)
}
