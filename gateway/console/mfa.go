package console

import (
	"encoding/json"
	"net/url"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"
)

// The members' second factors (issue 32): the list and a member's page
// show whether each person has an authenticator and how many passkeys,
// from the identity service's overview for admins; a member's page resets
// them, through the API's $reset-mfa, when a device is lost.

// mfaStates fills the MFA state of the members shown, in one call. Only
// people have one; a member left blank (a client, a bot, or an overview
// refused) shows nothing.
func (c *Console) mfaStates(fc *fiber.Ctx, s *session, ms []member) error {
	if len(ms) == 0 {
		return nil
	}
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.ID
	}
	resp, err := c.call(fc, s.who, "GET", "/admin/projects/"+s.who.Project+"/mfa",
		map[string]string{"projectId": s.who.Project}, url.Values{"membership": {strings.Join(ids, ",")}}, "", nil)
	// The members are listed even when the overview fails: the column is
	// then blank, and the log says why.
	if err != nil {
		c.log.Warn("console: no MFA overview", "err", err)
		return nil
	}
	if resp.Status != 200 {
		c.log.Warn("console: no MFA overview", "status", resp.Status)
		return nil
	}
	var b struct {
		Members []struct {
			Membership string `json:"membership"`
			Enrolled   bool   `json:"enrolled"`
			Passkeys   int    `json:"passkeys"`
		} `json:"members"`
	}
	if err := json.Unmarshal(resp.Body, &b); err != nil {
		return err
	}
	state := map[string]string{}
	for _, m := range b.Members {
		text := "not enrolled"
		if m.Enrolled {
			text = "enrolled"
		}
		if m.Passkeys > 0 {
			text += ", passkeys " + strconv.Itoa(m.Passkeys)
		}
		state[m.Membership] = text
	}
	for i := range ms {
		ms[i].MFA = state[ms[i].ID]
	}
	return nil
}

// resetMFA drops a member's authenticator, recovery codes and passkeys,
// through the API's POST /admin/projects/:id/members/:membershipId/$reset-mfa.
func (c *Console) resetMFA(fc *fiber.Ctx) error {
	s, err := c.form(fc)
	if s == nil {
		return err
	}
	id := fc.Params("id")
	resp, err := c.call(fc, s.who, "POST", "/admin/projects/"+s.who.Project+"/members/"+id+"/$reset-mfa",
		map[string]string{"projectId": s.who.Project, "membershipId": id}, nil, "", nil)
	if err != nil {
		return err
	}
	if resp.Status != 200 {
		return c.message(fc, resp.Status, "Reset MFA", failure(resp))
	}
	headers(fc)
	return fc.Redirect(c.cfg.BaseURL+"console/members/"+url.PathEscape(id)+"?done=mfa", fiber.StatusSeeOther)
}
