package console

import (
	"encoding/json"
	"net/url"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/pinion-health/pinion/pkg/bus"
)

// A bot's schedule, deployed versions and own secrets, on its page (issue
// 35). Each is read and written through the API the console's user could
// call: the Bot itself, its history, $deploy, and the admin routes of the
// bot's schedule and secrets.

// schedule is a bot's schedule as written and as the scheduler holds it.
type schedule struct {
	Cron, Zone string // Bot.cronString, its CRON_TZ= prefix apart
	Timing     bool   // the bot has a cronTiming, which takes precedence
	Shown      bool   // the caller may read the scheduler's view
	Scheduled  bool
	Next       string // the next run the scheduler will claim, UTC
}

// version is one deployed version of a bot.
type version struct {
	ID, When, Title string
	Current         bool
}

// Limits of what the page lists.
const (
	maxVersions      = 50
	maxSecretName    = 200
	maxSecretValue   = 8192
	maxScheduleInput = 256
)

// splitZone parses a cron string's zone prefix (CRON_TZ= or TZ=, as
// pkg/botcron reads it).
func splitZone(cron string) (spec, zone string) {
	cron = strings.TrimSpace(cron)
	for _, p := range []string{"CRON_TZ=", "TZ="} {
		if rest, ok := strings.CutPrefix(cron, p); ok {
			zone, spec, _ = strings.Cut(rest, " ")
			return strings.TrimSpace(spec), zone
		}
	}
	return cron, ""
}

// loadExtras fills the bot's schedule, versions and secret names. What the
// caller may not read (a member who is no admin) is left out, not an error.
func (c *Console) loadExtras(fc *fiber.Ctx, s *session, b *bot, res map[string]any) error {
	cron, _ := res["cronString"].(string)
	b.Schedule.Cron, b.Schedule.Zone = splitZone(cron)
	_, b.Schedule.Timing = res["cronTiming"]
	botPath := "/admin/projects/" + s.who.Project + "/bot/" + b.ID
	params := map[string]string{"projectId": s.who.Project, "botId": b.ID}
	resp, err := c.call(fc, s.who, "GET", botPath+"/schedule", params, nil, "", nil)
	if err != nil {
		return err
	}
	if resp.Status == 200 {
		var v struct {
			Scheduled bool   `json:"scheduled"`
			Next      string `json:"next"`
		}
		if err := json.Unmarshal(resp.Body, &v); err != nil {
			return err
		}
		b.Schedule.Shown, b.Schedule.Scheduled, b.Schedule.Next = true, v.Scheduled, v.Next
	}
	if resp, err = c.call(fc, s.who, "GET", botPath+"/secrets", params, nil, "", nil); err != nil {
		return err
	}
	if resp.Status == 200 {
		var list []struct {
			Name string `json:"name"`
		}
		if err := json.Unmarshal(resp.Body, &list); err != nil {
			return err
		}
		b.SecretsShown = true
		for _, sec := range list {
			b.SecretNames = append(b.SecretNames, sec.Name)
		}
	}
	b.Versions, err = c.versions(fc, s, b.ID)
	return err
}

// versions are the bot's deployed versions, newest first: the versions of
// its history whose executableCode differs from the one before.
func (c *Console) versions(fc *fiber.Ctx, s *session, id string) ([]version, error) {
	resp, err := c.call(fc, s.who, "GET", "/fhir/R4/Bot/"+id+"/_history", map[string]string{"type": "Bot", "id": id},
		url.Values{"_count": {"200"}}, "", nil)
	if err != nil || resp.Status != 200 {
		return nil, err
	}
	var h struct {
		Entry []struct {
			Resource struct {
				Meta struct {
					VersionID   string `json:"versionId"`
					LastUpdated string `json:"lastUpdated"`
				} `json:"meta"`
				ExecutableCode struct {
					Title string `json:"title"`
					URL   string `json:"url"`
				} `json:"executableCode"`
			} `json:"resource"`
		} `json:"entry"`
	}
	if err := json.Unmarshal(resp.Body, &h); err != nil {
		return nil, err
	}
	var out []version
	for i, e := range h.Entry {
		r := e.Resource
		if r.ExecutableCode.URL == "" || r.Meta.VersionID == "" {
			continue
		}
		// History is newest first: a deploy changed the code of the one
		// after it. Compared by Binary, as reads answer signed URLs.
		if i+1 < len(h.Entry) && sameBinary(h.Entry[i+1].Resource.ExecutableCode.URL, r.ExecutableCode.URL) {
			continue
		}
		out = append(out, version{ID: r.Meta.VersionID, When: r.Meta.LastUpdated, Title: r.ExecutableCode.Title})
		if len(out) == maxVersions {
			break
		}
	}
	if len(out) > 0 && len(h.Entry) > 0 && h.Entry[0].Resource.ExecutableCode.URL != "" {
		out[0].Current = true
	}
	return out, nil
}

func sameBinary(a, b string) bool {
	x, ok1 := binaryOf(a)
	y, ok2 := binaryOf(b)
	return ok1 && ok2 && x == y || a == b
}

var scheduleFields = map[string]string{"cronString": "cron", "Bot.cronString": "cron", "cronTiming": "cron", "Bot.cronTiming": "cron"}

// saveSchedule writes Bot.cronString from the form's cron fields and zone
// (no cron: no schedule). A cronTiming is replaced, as the page says. The
// API's refusal (a bad string, a project without cron) is shown as is.
func (c *Console) saveSchedule(fc *fiber.Ctx) error {
	s, err := c.form(fc)
	if s == nil {
		return err
	}
	cron, zone := strings.TrimSpace(fc.FormValue("cron")), strings.TrimSpace(fc.FormValue("zone"))
	if len(cron) > maxScheduleInput || len(zone) > maxScheduleInput {
		return c.renderBot(fc, s, 400, page{Errors: map[string]string{"cron": "The schedule is too long."}})
	}
	b, res, resp, err := c.readBot(fc, s)
	if err != nil {
		return err
	}
	if b == nil {
		return c.message(fc, resp.Status, "Bot", failure(resp))
	}
	delete(res, "cronTiming")
	switch {
	case cron == "":
		delete(res, "cronString")
	case zone == "" || zone == "UTC":
		res["cronString"] = cron
	default:
		res["cronString"] = "CRON_TZ=" + zone + " " + cron
	}
	if resp, err = c.putBot(fc, s, res); err != nil {
		return err
	}
	if resp.Status != 200 {
		errs, rest := fieldErrors(resp, scheduleFields)
		return c.renderBot(fc, s, resp.Status, page{Errors: errs, Problem: rest, Form: map[string]string{"contentType": "application/json", "cron": cron, "zone": zone}})
	}
	headers(fc)
	return fc.Redirect(c.cfg.BaseURL+"console/bots/"+b.ID+"?done=schedule", fiber.StatusSeeOther)
}

// rollback deploys again the code a version deployed (the JavaScript its
// executableCode names, under its title), which makes a new version; the
// source in the editor is left as it is.
func (c *Console) rollback(fc *fiber.Ctx) error {
	s, err := c.form(fc)
	if s == nil {
		return err
	}
	id, vid := fc.Params("id"), fc.FormValue("version")
	if vid == "" || len(vid) > 64 {
		return c.renderBot(fc, s, 400, page{Problem: "Choose a version to roll back to."})
	}
	resp, err := c.call(fc, s.who, "GET", "/fhir/R4/Bot/"+id+"/_history/"+vid, map[string]string{"type": "Bot", "id": id, "vid": vid}, nil, "", nil)
	if err != nil {
		return err
	}
	if resp.Status != 200 {
		return c.renderBot(fc, s, resp.Status, page{Problem: failure(resp)})
	}
	old, err := botOf(resp.Body)
	if err != nil {
		return err
	}
	var exe struct {
		ExecutableCode struct {
			URL string `json:"url"`
		} `json:"executableCode"`
	}
	_ = json.Unmarshal(resp.Body, &exe)
	bid, ok := binaryOf(exe.ExecutableCode.URL)
	if !ok {
		return c.renderBot(fc, s, 400, page{Problem: "Version " + vid + " deployed no code."})
	}
	code, err := c.send(fc, &bus.Request{
		Method: "GET", Path: "/fhir/R4/Binary/" + bid, Params: map[string]string{"type": "Binary", "id": bid},
		Principal: s.who, Header: map[string]string{"Accept": "*/*"},
	})
	if err != nil {
		return err
	}
	if code.Status != 200 {
		return c.renderBot(fc, s, code.Status, page{Problem: "The code of version " + vid + ": " + failure(code)})
	}
	filename := old.Deployed
	if filename == "" {
		filename = "index.js"
	}
	body, _ := json.Marshal(map[string]string{"code": string(code.Body), "filename": filename})
	if resp, err = c.call(fc, s.who, "POST", "/fhir/R4/Bot/"+id+"/$deploy", map[string]string{"id": id}, nil, "application/json", body); err != nil {
		return err
	}
	if resp.Status != 200 {
		return c.renderBot(fc, s, resp.Status, page{Problem: "Not rolled back: " + failure(resp)})
	}
	headers(fc)
	return fc.Redirect(c.cfg.BaseURL+"console/bots/"+id+"?done=rollback", fiber.StatusSeeOther)
}

// saveBotSecret adds or replaces one of the bot's own secrets, or removes
// one (the remove button names it). Values are written, never shown: the
// list read back is posted whole, as the API replaces it.
func (c *Console) saveBotSecret(fc *fiber.Ctx) error {
	s, err := c.form(fc)
	if s == nil {
		return err
	}
	id := fc.Params("id")
	remove, name, value := fc.FormValue("remove"), strings.TrimSpace(fc.FormValue("name")), fc.FormValue("value")
	if remove == "" {
		switch {
		case name == "" || len(name) > maxSecretName:
			return c.renderBot(fc, s, 400, page{Errors: map[string]string{"secret": "Name the secret (at most 200 characters)."}})
		case value == "" || len(value) > maxSecretValue:
			return c.renderBot(fc, s, 400, page{Errors: map[string]string{"secret": "Give the secret a value (at most 8192 characters)."}})
		}
	}
	botPath := "/admin/projects/" + s.who.Project + "/bot/" + id + "/secrets"
	params := map[string]string{"projectId": s.who.Project, "botId": id}
	resp, err := c.call(fc, s.who, "GET", botPath, params, nil, "", nil)
	if err != nil {
		return err
	}
	if resp.Status != 200 {
		return c.renderBot(fc, s, resp.Status, page{Errors: map[string]string{"secret": failure(resp)}})
	}
	var list []map[string]any
	if err := json.Unmarshal(resp.Body, &list); err != nil {
		return err
	}
	kept := []map[string]any{}
	for _, sec := range list {
		if n, _ := sec["name"].(string); n != remove && n != name {
			kept = append(kept, sec)
		}
	}
	if remove == "" {
		kept = append(kept, map[string]any{"name": name, "valueString": value})
	}
	body, _ := json.Marshal(kept)
	if resp, err = c.call(fc, s.who, "POST", botPath, params, nil, "application/json", body); err != nil {
		return err
	}
	if resp.Status != 200 {
		return c.renderBot(fc, s, resp.Status, page{Errors: map[string]string{"secret": failure(resp)}})
	}
	headers(fc)
	return fc.Redirect(c.cfg.BaseURL+"console/bots/"+id+"?done=secrets", fiber.StatusSeeOther)
}

// coding is a coding of an AuditEvent (its type, a subtype, a role).
type coding struct {
	System  string `json:"system"`
	Code    string `json:"code"`
	Display string `json:"display"`
}

// scheduledDue is the tick a run's AuditEvent names, when the scheduler
// started it ("" otherwise).
func scheduledDue(subtype []coding) string {
	for _, c := range subtype {
		if c.Code == "scheduled" {
			if _, due, ok := strings.Cut(c.Display, "due "); ok {
				return due
			}
			return "yes"
		}
	}
	return ""
}
