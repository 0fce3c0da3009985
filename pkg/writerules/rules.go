package writerules

import (
	"context"
	"fmt"
	"strings"

	"github.com/pinion-health/pinion/pkg/access/criteria"
	"github.com/pinion-health/pinion/pkg/botcron"
	"github.com/pinion-health/pinion/pkg/clientapp"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/search"
	"github.com/pinion-health/pinion/pkg/subscription"
)

// rules are, per resource type, what a resource must be for any write to
// store it, checked in order before the writer's access (Check). A new
// rule goes here, with accepted and refused examples in rules_test.go.
// Rules that packages other than writes also need (a subscription's
// parsing, a bot's schedule) live in those packages and are named here.
var rules = map[string][]Rule{
	"ClientApplication": {clientSecretsServerSet, clientURIs},
	"AccessPolicy":      {policyCriteria},
	"Subscription":      {subscriptionDeliverable, subscriptionCriteriaVisible},
	"Bot":               {botSchedule, botScheduleFeatures},
}

// afterAccess are rules checked only once the writer may make the write
// (CheckAfterAccess): their refusals say something about resources of
// other projects. access.Gate checks them on an update under a policy that
// puts conditions on the type (a project admin's own Project); a super
// admin, whose writes of these types are unconditioned, is not held to
// them.
var afterAccess = map[string][]Rule{
	"Project": {projectPatientPolicy},
}

// clientSecretsServerSet refuses a ClientApplication naming its secrets,
// super admins' included. A client's secrets live only as digests in the
// identity service: one written here would be kept in plain text and
// never work.
func clientSecretsServerSet(_ context.Context, res map[string]any, _ Env) error {
	for _, f := range []string{"secret", "retiringSecret"} {
		if _, ok := res[f]; ok {
			return fhir.BadRequest("ClientApplication."+f+" is set by the server: use $rotate-secret", f)
		}
	}
	return nil
}

// clientURIs refuses a redirect or launch URI a browser must never be
// sent to (pkg/clientapp, which the /admin client route applies too).
func clientURIs(_ context.Context, res map[string]any, _ Env) error {
	return clientapp.CheckURIs(res)
}

// policyCriteria refuses an AccessPolicy entry whose criteria could never
// work: criteria that do not parse, that search another type than their
// entry's, or that name a search parameter the type does not have.
// Medplum stores such a policy and fails every request of a member under
// it; here the write is refused, saying which entry is wrong.
func policyCriteria(_ context.Context, res map[string]any, _ Env) error {
	list, _ := res["resource"].([]any)
	for i, e := range list {
		m, _ := e.(map[string]any)
		typ, _ := m["resourceType"].(string)
		crit, _ := m["criteria"].(string)
		if crit == "" {
			continue
		}
		expr := fmt.Sprintf("AccessPolicy.resource[%d].criteria", i)
		c, err := criteria.Parse(crit, criteria.Params{})
		if err != nil {
			return fhir.BadRequest("Invalid criteria: "+err.Error(), expr)
		}
		if c.Type != typ {
			return fhir.BadRequest("Criteria must search "+typ+", the entry's resource type, not "+c.Type, expr)
		}
		known := map[string]bool{}
		for _, p := range search.Params(typ) {
			known[p.Code] = true
		}
		for k := range c.Query {
			code, _, _ := strings.Cut(k, ":")
			if strings.Contains(code, ".") {
				continue // a chained parameter: its checks are the search's
			}
			if !known[code] {
				return fhir.BadRequest("Unknown search parameter in criteria: "+code, expr)
			}
		}
	}
	return nil
}

// subscriptionDeliverable refuses a Subscription that could never be
// delivered (subscription.Check: its criteria, channel, headers and
// extensions), which Medplum stores and skips at every change.
func subscriptionDeliverable(_ context.Context, res map[string]any, _ Env) error {
	return subscription.Check(res)
}

// subscriptionCriteriaVisible refuses a Subscription whose criteria search
// on a field the writer's policy hides: each notification would answer
// that search. (Criteria are also matched on the author's view of each
// change, so a policy changed later, or FHIRPath criteria, reveal nothing
// either.)
func subscriptionCriteriaVisible(_ context.Context, res map[string]any, env Env) error {
	typ, q, err := subscription.Criteria(res)
	if err != nil {
		return err
	}
	if err := env.CheckSearch(typ, q); err != nil {
		return fhir.BadRequest("Invalid criteria: "+fhir.AsError(err).Message(), "Subscription.criteria")
	}
	return nil
}

// botSchedule refuses a cronString or cronTiming that makes no schedule
// (pkg/botcron, whose reading the scheduler shares), which Medplum keeps
// and silently never runs.
func botSchedule(_ context.Context, res map[string]any, _ Env) error {
	return botcron.Check(res)
}

// botScheduleFeatures refuses a Bot with a schedule in a project whose
// features do not include cron and bots: Medplum keeps such a schedule
// and never runs it; here the writer is told.
func botScheduleFeatures(ctx context.Context, res map[string]any, env Env) error {
	if !botcron.Has(res) {
		return nil
	}
	project, err := env.Project(ctx, res)
	if err != nil {
		return err
	}
	features, err := ProjectFeatures(ctx, env, project)
	if err != nil {
		return err
	}
	if !botcron.Enabled(features) {
		return fhir.BadRequest("Bot.cronString and Bot.cronTiming need the project's features to include cron and bots", "cronString")
	}
	return nil
}

// projectPatientPolicy refuses a Project whose defaultPatientAccessPolicy
// is not one of its own AccessPolicies: another project's would lend its
// rules to this project's patients.
func projectPatientPolicy(ctx context.Context, res map[string]any, env Env) error {
	const field = "defaultPatientAccessPolicy"
	ref, ok := res[field].(map[string]any)
	if !ok {
		if _, present := res[field]; present {
			return fhir.BadRequest("Invalid access policy reference", field)
		}
		return nil
	}
	s, _ := ref["reference"].(string)
	typ, id, ok := fhir.SplitReference(s)
	if !ok || typ != "AccessPolicy" {
		return fhir.BadRequest("Invalid access policy reference", field)
	}
	projectID, _ := res["id"].(string)
	pol, err := env.Read(ctx, repo.AllProjects, "AccessPolicy", id)
	if fhir.Missing(err) || err == nil && pol.Project != projectID {
		return fhir.BadRequest("Access policy "+s+" does not belong to this project", field)
	}
	return err
}
