package console

import (
	"encoding/json"
	"net/url"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/pinion-health/pinion/pkg/fhir"
)

// client is a ClientApplication for the pages.
type client struct {
	ID, Name     string
	RedirectURIs []string
}

func clientOf(raw []byte) (client, error) {
	var c struct {
		ID           string   `json:"id"`
		Name         string   `json:"name"`
		RedirectURI  string   `json:"redirectUri"`
		RedirectURIs []string `json:"redirectUris"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return client{}, err
	}
	out := client{ID: c.ID, Name: c.Name, RedirectURIs: c.RedirectURIs}
	if c.RedirectURI != "" {
		out.RedirectURIs = append([]string{c.RedirectURI}, out.RedirectURIs...)
	}
	if out.Name == "" {
		out.Name = "ClientApplication/" + c.ID
	}
	return out, nil
}

// lines splits a textarea into its non-empty lines.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

var clientFields = map[string]string{"name": "name", "redirectUri": "redirectUris", "redirectUris": "redirectUris", "accessPolicy": "policy"}

// clients lists the project's client applications, and offers a new one.
func (c *Console) clients(fc *fiber.Ctx) error {
	s, err := c.signedIn(fc)
	if s == nil {
		return err
	}
	return c.showClients(fc, s, 200, map[string]string{}, nil, "")
}

func (c *Console) showClients(fc *fiber.Ctx, s *session, status int, form, errs map[string]string, problem string) error {
	found, resp, err := c.searchAll(fc, s, "ClientApplication", url.Values{"_count": {"200"}})
	if err != nil {
		return err
	}
	if resp.Status != 200 {
		return c.message(fc, resp.Status, "Client applications", failure(resp))
	}
	d := page{Title: "Client applications", CSRF: s.csrf(), Project: &project{}, Form: form, Errors: errs, Problem: problem}
	for _, raw := range found {
		cl, err := clientOf(raw)
		if err != nil {
			return err
		}
		d.Clients = append(d.Clients, cl)
	}
	if d.Policies, err = c.policies(fc, s); err != nil {
		return err
	}
	return c.render(fc, status, "clients", d)
}

// createClient is the API's POST /admin/projects/:id/client; the answer
// shows the secret, as every admin's read of the client does.
func (c *Console) createClient(fc *fiber.Ctx) error {
	s, err := c.form(fc)
	if s == nil {
		return err
	}
	form := map[string]string{"name": strings.TrimSpace(fc.FormValue("name")), "redirectUris": fc.FormValue("redirectUris"), "policy": fc.FormValue("policy")}
	body := map[string]any{"name": form["name"]}
	if uris := lines(form["redirectUris"]); len(uris) > 0 {
		body["redirectUris"] = uris
	}
	if form["policy"] != "" {
		body["accessPolicy"] = map[string]any{"reference": form["policy"]}
	}
	raw, _ := json.Marshal(body)
	resp, err := c.call(fc, s.who, "POST", "/admin/projects/"+s.who.Project+"/client",
		map[string]string{"projectId": s.who.Project}, nil, "application/json", raw)
	if err != nil {
		return err
	}
	if resp.Status != 201 {
		errs, rest := fieldErrors(resp, clientFields)
		return c.showClients(fc, s, resp.Status, form, errs, rest)
	}
	return c.renderClient(fc, s, 201, resp.Body, nil)
}

// renderClient shows a client, and its secret when the body holds it (an
// admin's read: services/fhir shows it to no one else).
func (c *Console) renderClient(fc *fiber.Ctx, s *session, status int, raw []byte, errs map[string]string) error {
	cl, err := clientOf(raw)
	if err != nil {
		return err
	}
	var secret struct {
		Secret string `json:"secret"`
	}
	_ = json.Unmarshal(raw, &secret)
	return c.render(fc, status, "client", page{Title: cl.Name, CSRF: s.csrf(), Project: &project{}, Client: &cl, Secret: secret.Secret, Errors: errs,
		Provider: providerOf(raw)})
}

func (c *Console) showClient(fc *fiber.Ctx) error {
	s, err := c.signedIn(fc)
	if s == nil {
		return err
	}
	resp, err := c.read(fc, s, "ClientApplication", fc.Params("id"))
	if err != nil {
		return err
	}
	if resp.Status != 200 {
		return c.message(fc, resp.Status, "Client application", failure(resp))
	}
	return c.renderClient(fc, s, 200, resp.Body, nil)
}

// saveClient replaces the client's return addresses, through the API's
// update of the ClientApplication.
func (c *Console) saveClient(fc *fiber.Ctx) error {
	s, err := c.form(fc)
	if s == nil {
		return err
	}
	resp, err := c.read(fc, s, "ClientApplication", fc.Params("id"))
	if err != nil {
		return err
	}
	if resp.Status != 200 {
		return c.message(fc, resp.Status, "Client application", failure(resp))
	}
	res, err := fhir.Decode(resp.Body)
	if err != nil {
		return err
	}
	delete(res, "redirectUri")
	if uris := lines(fc.FormValue("redirectUris")); len(uris) > 0 {
		list := make([]any, len(uris))
		for i, u := range uris {
			list[i] = u
		}
		res["redirectUris"] = list
	} else {
		delete(res, "redirectUris")
	}
	raw, _ := json.Marshal(res)
	id := fc.Params("id")
	resp, err = c.call(fc, s.who, "PUT", "/fhir/R4/ClientApplication/"+id,
		map[string]string{"type": "ClientApplication", "id": id}, nil, "application/fhir+json", raw)
	if err != nil {
		return err
	}
	if resp.Status != 200 {
		errs, rest := fieldErrors(resp, clientFields)
		cur, _ := c.read(fc, s, "ClientApplication", fc.Params("id"))
		if rest != "" || cur == nil || cur.Status != 200 {
			return c.message(fc, resp.Status, "Client application", failure(resp))
		}
		return c.renderClient(fc, s, resp.Status, cur.Body, errs)
	}
	return c.renderClient(fc, s, 200, resp.Body, nil)
}

// rotateClient is the API's $rotate-secret for admins: a new secret.
func (c *Console) rotateClient(fc *fiber.Ctx) error {
	s, err := c.form(fc)
	if s == nil {
		return err
	}
	id := fc.Params("id")
	resp, err := c.call(fc, s.who, "POST", "/admin/projects/"+s.who.Project+"/client/"+id+"/$rotate-secret",
		map[string]string{"projectId": s.who.Project, "clientId": id}, nil, "application/json", []byte("{}"))
	if err != nil {
		return err
	}
	if resp.Status != 200 {
		return c.message(fc, resp.Status, "Rotate the secret", failure(resp))
	}
	return c.renderClient(fc, s, 200, resp.Body, nil)
}
