package console

import (
	"encoding/json"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
)

// bot is a Bot for the pages.
type bot struct {
	ID, Name, Filename, Source, Deployed string
	Identifiers                          []string // system|value
	sourceURL                            string
	// Its schedule, deployed versions and own secrets' names (botextras.go).
	Schedule     schedule
	Versions     []version
	SecretNames  []string
	SecretsShown bool
}

// output is what a run answered.
type output struct {
	Status            int
	ContentType, Body string
}

// run is one execution, from its AuditEvent.
type run struct{ When, Outcome, Duration, Log, Scheduled string }

// inputTypes are the content types $execute takes.
var inputTypes = []string{"application/json", "text/plain", "application/fhir+json", "x-application/hl7-v2+er7", "application/x-www-form-urlencoded"}

func botOf(raw []byte) (bot, error) {
	var b struct {
		ID         string `json:"id"`
		Name       string `json:"name"`
		Identifier []struct {
			System string `json:"system"`
			Value  string `json:"value"`
		} `json:"identifier"`
		SourceCode struct {
			Title string `json:"title"`
			URL   string `json:"url"`
		} `json:"sourceCode"`
		ExecutableCode struct {
			Title string `json:"title"`
		} `json:"executableCode"`
	}
	if err := json.Unmarshal(raw, &b); err != nil {
		return bot{}, err
	}
	out := bot{ID: b.ID, Name: b.Name, Filename: b.SourceCode.Title, Deployed: b.ExecutableCode.Title, sourceURL: b.SourceCode.URL}
	if out.Name == "" {
		out.Name = "Bot/" + b.ID
	}
	if out.Filename == "" {
		out.Filename = "index.ts"
	}
	for _, id := range b.Identifier {
		out.Identifiers = append(out.Identifiers, id.System+"|"+id.Value)
	}
	return out, nil
}

// bots lists the project's bots, and offers a new one.
func (c *Console) bots(fc *fiber.Ctx) error {
	s, err := c.signedIn(fc)
	if s == nil {
		return err
	}
	return c.showBots(fc, s, 200, map[string]string{}, nil, "")
}

func (c *Console) showBots(fc *fiber.Ctx, s *session, status int, form, errs map[string]string, problem string) error {
	found, resp, err := c.searchAll(fc, s, "Bot", url.Values{"_count": {"200"}})
	if err != nil {
		return err
	}
	if resp.Status != 200 {
		return c.message(fc, resp.Status, "Bots", failure(resp))
	}
	d := page{Title: "Bots", CSRF: s.csrf(), Project: &project{}, Form: form, Errors: errs, Problem: problem}
	for _, raw := range found {
		bt, err := botOf(raw)
		if err != nil {
			return err
		}
		d.Bots = append(d.Bots, bt)
	}
	return c.render(fc, status, "bots", d)
}

// createBot is the API's POST /admin/projects/:id/bot.
func (c *Console) createBot(fc *fiber.Ctx) error {
	s, err := c.form(fc)
	if s == nil {
		return err
	}
	form := map[string]string{"name": strings.TrimSpace(fc.FormValue("name")), "description": strings.TrimSpace(fc.FormValue("description"))}
	raw, _ := json.Marshal(map[string]any{"name": form["name"], "description": form["description"]})
	resp, err := c.call(fc, s.who, "POST", "/admin/projects/"+s.who.Project+"/bot",
		map[string]string{"projectId": s.who.Project}, nil, "application/json", raw)
	if err != nil {
		return err
	}
	if resp.Status != 201 {
		errs, rest := fieldErrors(resp, map[string]string{"name": "name"})
		return c.showBots(fc, s, resp.Status, form, errs, rest)
	}
	b, err := botOf(resp.Body)
	if err != nil {
		return err
	}
	headers(fc)
	return fc.Redirect(c.cfg.BaseURL+"console/bots/"+b.ID, fiber.StatusSeeOther)
}

// readBot reads the bot and its source, as the signed-in person.
func (c *Console) readBot(fc *fiber.Ctx, s *session) (*bot, map[string]any, *bus.Response, error) {
	id := fc.Params("id")
	resp, err := c.read(fc, s, "Bot", id)
	if err != nil || resp.Status != 200 {
		return nil, nil, resp, err
	}
	b, err := botOf(resp.Body)
	if err != nil {
		return nil, nil, nil, err
	}
	res, err := fhir.Decode(resp.Body)
	if err != nil {
		return nil, nil, nil, err
	}
	if bid, ok := binaryOf(b.sourceURL); ok {
		src, err := c.send(fc, &bus.Request{
			Method: "GET", Path: "/fhir/R4/Binary/" + bid, Params: map[string]string{"type": "Binary", "id": bid},
			Principal: s.who, Header: map[string]string{"Accept": "*/*"},
		})
		if err != nil {
			return nil, nil, nil, err
		}
		if src.Status == 200 {
			b.Source = string(src.Body)
		}
	}
	return &b, res, nil, nil
}

// binaryOf is the id of the Binary an attachment url names: "Binary/<id>"
// as stored, or the signed storage URL (<base>storage/<id>/<vid>?...) a
// read answers with (services/fhir signs them for browsers).
func binaryOf(u string) (string, bool) {
	if typ, id, ok := fhir.SplitReference(u); ok && typ == "Binary" {
		return id, true
	}
	p, err := url.Parse(u)
	if err != nil {
		return "", false
	}
	_, rest, ok := strings.Cut(p.Path, "/storage/")
	id, _, _ := strings.Cut(rest, "/")
	return id, ok && id != ""
}

// latestRuns are the bot's last executions, from their AuditEvents.
func (c *Console) latestRuns(fc *fiber.Ctx, s *session, id string) ([]run, error) {
	resp, err := c.call(fc, s.who, "GET", "/fhir/R4/AuditEvent", map[string]string{"type": "AuditEvent"},
		// Its runs (type execute), not the trail's events of changes to it.
		url.Values{"entity": {"Bot/" + id}, "type": {"execute"}, "_sort": {"-_lastUpdated"}, "_count": {"10"}}, "", nil)
	if err != nil || resp.Status != 200 {
		return nil, err // a policy without AuditEvent: no list, not an error
	}
	var b struct {
		Entry []struct {
			Resource struct {
				Recorded    string   `json:"recorded"`
				Outcome     string   `json:"outcome"`
				OutcomeDesc string   `json:"outcomeDesc"`
				Subtype     []coding `json:"subtype"`
				Period      struct {
					Start string `json:"start"`
					End   string `json:"end"`
				} `json:"period"`
			} `json:"resource"`
		} `json:"entry"`
	}
	if err := json.Unmarshal(resp.Body, &b); err != nil {
		return nil, err
	}
	var out []run
	for _, e := range b.Entry {
		r := e.Resource
		x := run{When: r.Recorded, Outcome: "success", Log: r.OutcomeDesc, Scheduled: scheduledDue(r.Subtype)}
		if r.Outcome != "0" {
			x.Outcome = "failure"
		}
		start, err1 := time.Parse(time.RFC3339Nano, r.Period.Start)
		end, err2 := time.Parse(time.RFC3339Nano, r.Period.End)
		if err1 == nil && err2 == nil {
			x.Duration = end.Sub(start).Round(time.Millisecond).String()
		}
		out = append(out, x)
	}
	return out, nil
}

// renderBot shows the bot page.
func (c *Console) renderBot(fc *fiber.Ctx, s *session, status int, d page) error {
	b, res, resp, err := c.readBot(fc, s)
	if err != nil {
		return err
	}
	if b == nil {
		return c.message(fc, resp.Status, "Bot", failure(resp))
	}
	if d.Runs, err = c.latestRuns(fc, s, b.ID); err != nil {
		return err
	}
	if err := c.loadExtras(fc, s, b, res); err != nil {
		return err
	}
	if d.Bot != nil {
		b.Source, b.Filename = d.Bot.Source, d.Bot.Filename // what was typed, when it was refused
	}
	d.Title, d.CSRF, d.Project, d.Bot, d.InputTypes = b.Name, s.csrf(), &project{}, b, inputTypes
	if d.Form == nil {
		d.Form = map[string]string{"contentType": "application/json"}
	}
	return c.render(fc, status, "bot", d)
}

func (c *Console) showBot(fc *fiber.Ctx) error {
	s, err := c.signedIn(fc)
	if s == nil {
		return err
	}
	return c.renderBot(fc, s, 200, page{Notice: botNotices[fc.Query("done")]})
}

var botNotices = map[string]string{
	"saved":       "The source was saved.",
	"deployed":    "The source was saved and deployed.",
	"identifiers": "The identifiers were saved.",
	"schedule":    "The schedule was saved.",
	"rollback":    "That version's code was deployed again, as a new version.",
	"secrets":     "The bot's secrets were saved.",
}

// sourceType is the content type of a bot source, by its file name.
func sourceType(filename string) string {
	switch path.Ext(filename) {
	case ".js", ".mjs", ".cjs":
		return "application/javascript"
	}
	return "text/typescript"
}

// saveSource stores the code as the bot's sourceCode (a new Binary, as
// `medplum bot save` does) and, asked to, deploys it ($deploy, which
// reports a syntax error with its line and column).
func (c *Console) saveSource(fc *fiber.Ctx) error {
	s, err := c.form(fc)
	if s == nil {
		return err
	}
	code, filename := fc.FormValue("code"), path.Base(strings.TrimSpace(fc.FormValue("filename")))
	if filename == "." || filename == "/" || filename == "" {
		filename = "index.ts"
	}
	typed := &bot{Source: code, Filename: filename}
	if strings.TrimSpace(code) == "" {
		return c.renderBot(fc, s, 400, page{Bot: typed, Errors: map[string]string{"code": "The code is empty."}})
	}
	bin, err := c.send(fc, &bus.Request{
		Method: "POST", Path: "/fhir/R4/Binary", Params: map[string]string{"type": "Binary"}, Principal: s.who,
		Header: map[string]string{"Content-Type": sourceType(filename)}, Body: []byte(code),
	})
	if err != nil {
		return err
	}
	if bin.Status != 201 {
		return c.renderBot(fc, s, bin.Status, page{Bot: typed, Errors: map[string]string{"code": failure(bin)}})
	}
	var created struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(bin.Body, &created); err != nil {
		return err
	}
	b, res, resp, err := c.readBot(fc, s)
	if err != nil {
		return err
	}
	if b == nil {
		return c.message(fc, resp.Status, "Bot", failure(resp))
	}
	res["sourceCode"] = map[string]any{"contentType": sourceType(filename), "title": filename, "url": "Binary/" + created.ID}
	if resp, err := c.putBot(fc, s, res); err != nil || resp.Status != 200 {
		if err != nil {
			return err
		}
		return c.renderBot(fc, s, resp.Status, page{Bot: typed, Problem: failure(resp)})
	}
	done := "saved"
	if fc.FormValue("deploy") == "true" {
		body, _ := json.Marshal(map[string]string{"code": code, "filename": filename})
		resp, err := c.call(fc, s.who, "POST", "/fhir/R4/Bot/"+b.ID+"/$deploy", map[string]string{"id": b.ID}, nil, "application/json", body)
		if err != nil {
			return err
		}
		if resp.Status != 200 {
			return c.renderBot(fc, s, resp.Status, page{Bot: typed, Errors: map[string]string{"code": "Saved, not deployed: " + failure(resp)}})
		}
		done = "deployed"
	}
	headers(fc)
	return fc.Redirect(c.cfg.BaseURL+"console/bots/"+b.ID+"?done="+done, fiber.StatusSeeOther)
}

func (c *Console) putBot(fc *fiber.Ctx, s *session, res map[string]any) (*bus.Response, error) {
	id, _ := res["id"].(string)
	raw, _ := json.Marshal(res)
	return c.call(fc, s.who, "PUT", "/fhir/R4/Bot/"+id, map[string]string{"type": "Bot", "id": id}, nil, "application/fhir+json", raw)
}

// runBot is $execute with the form's input and content type; the answer
// is shown with the latest executions, this one first.
func (c *Console) runBot(fc *fiber.Ctx) error {
	s, err := c.form(fc)
	if s == nil {
		return err
	}
	form := map[string]string{"contentType": fc.FormValue("contentType"), "input": fc.FormValue("input")}
	valid := false
	for _, t := range inputTypes {
		valid = valid || t == form["contentType"]
	}
	if !valid {
		form["contentType"] = "application/json"
	}
	// HL7 v2 separates segments with carriage returns; a text box sends
	// line feeds.
	input := form["input"]
	if form["contentType"] == "x-application/hl7-v2+er7" {
		input = strings.ReplaceAll(strings.ReplaceAll(input, "\r\n", "\r"), "\n", "\r")
	}
	id := fc.Params("id")
	resp, err := c.call(fc, s.who, "POST", "/fhir/R4/Bot/"+id+"/$execute", map[string]string{"id": id}, nil, form["contentType"], []byte(input))
	if err != nil {
		return err
	}
	out := &output{Status: resp.Status, ContentType: resp.Header["Content-Type"], Body: string(resp.Body)}
	if resp.Status >= 400 {
		out.Body = failure(resp)
	}
	// This run's AuditEvent is written in a batch a moment later: the list
	// below shows it from the next page on.
	return c.renderBot(fc, s, 200, page{Form: form, Output: out})
}

// saveIdentifiers replaces the bot's identifiers.
func (c *Console) saveIdentifiers(fc *fiber.Ctx) error {
	s, err := c.form(fc)
	if s == nil {
		return err
	}
	var ids []any
	for _, l := range lines(fc.FormValue("identifiers")) {
		system, value, ok := strings.Cut(l, "|")
		if !ok || value == "" {
			return c.renderBot(fc, s, 400, page{Errors: map[string]string{"identifiers": "Write each identifier as system|value: " + l}})
		}
		id := map[string]any{"value": value}
		if system != "" {
			id["system"] = system
		}
		ids = append(ids, id)
	}
	b, res, resp, err := c.readBot(fc, s)
	if err != nil {
		return err
	}
	if b == nil {
		return c.message(fc, resp.Status, "Bot", failure(resp))
	}
	if len(ids) == 0 {
		delete(res, "identifier")
	} else {
		res["identifier"] = ids
	}
	if resp, err = c.putBot(fc, s, res); err != nil {
		return err
	}
	if resp.Status != 200 {
		return c.renderBot(fc, s, resp.Status, page{Errors: map[string]string{"identifiers": failure(resp)}})
	}
	headers(fc)
	return fc.Redirect(c.cfg.BaseURL+"console/bots/"+b.ID+"?done=identifiers", fiber.StatusSeeOther)
}
