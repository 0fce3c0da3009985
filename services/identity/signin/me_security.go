package signin

import (
	"context"
	"net/url"
	"time"

	"github.com/mileusna/useragent"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/search"
	"github.com/pinion-health/pinion/services/identity/account"
)

// userConfiguration is /auth/me's config: the membership's
// UserConfiguration when it names one, else an empty one; without a menu
// it gets the menu Medplum builds, which is what the app's sidebar shows.
func (s *Service) userConfiguration(ctx context.Context, project, membership map[string]any) (map[string]any, error) {
	var config map[string]any
	if ref := referenceOf(membership["userConfiguration"]); ref != "" {
		typ, id, ok := fhir.SplitReference(ref)
		if ok && typ == "UserConfiguration" {
			// Read within the project: a membership may not show another
			// project's configuration.
			res, err := s.repo.Read(ctx, repo.Scope{Project: stringOf(project["id"])}, typ, id)
			switch {
			case fhir.Missing(err):
				// Medplum fails the whole /auth/me, which leaves the person
				// unable to use the app; the default menu serves instead.
				s.log.Warn("membership names a user configuration that is gone", "membership", membership["id"], "ref", ref)
			case err != nil:
				return nil, err
			default:
				if config, err = res.Decode(); err != nil {
					return nil, err
				}
			}
		}
	}
	if config == nil {
		config = map[string]any{"resourceType": "UserConfiguration"}
	}
	if _, ok := config["menu"]; !ok {
		config["menu"] = defaultMenu(membership["admin"] == true, project["superAdmin"] == true)
	}
	return config, nil
}

// favorites are the resource types of the default menu's first section.
var favorites = []string{"Patient", "Practitioner", "Organization", "ServiceRequest", "DiagnosticReport", "Questionnaire"}

// defaultMenu is the menu Medplum gives a membership without one of its
// own: Favorites; Admin for project admins (with Config unless the project
// is the super-admin project, which has Super Config instead); Super Admin
// for the super-admin project.
func defaultMenu(admin, superAdmin bool) []any {
	link := func(name, target string) map[string]any { return map[string]any{"name": name, "target": target} }
	var fav []any
	for _, typ := range favorites {
		fav = append(fav, link(typ, "/"+typ))
	}
	menu := []any{map[string]any{"title": "Favorites", "link": fav}}
	if admin {
		links := []any{link("Project", "/admin/project"), link("AccessPolicy", "/AccessPolicy"),
			link("Subscriptions", "/Subscription"), link("Batch", "/batch")}
		if !superAdmin {
			links = append(links, link("Config", "/admin/config"))
		}
		menu = append(menu, map[string]any{"title": "Admin", "link": links})
	}
	if superAdmin {
		menu = append(menu, map[string]any{"title": "Super Admin", "link": []any{
			link("Projects", "/Project"), link("Super Config", "/admin/super"),
			link("Super AsyncJob", "/admin/super/asyncjob"), link("Super DB", "/admin/super/db")}})
	}
	return menu
}

// sessionWindow: the Security page lists the sign-ins written within the
// last hour, as Medplum's does.
const sessionWindow = time.Hour

// maxListedMemberships bounds the memberships /auth/me lists.
const maxListedMemberships = 100

// security is /auth/me's security for a person: whether they enrolled a
// second factor, their live sessions (any project's, as Medplum lists
// them) and their active memberships in this project.
func (s *Service) security(ctx context.Context, p *bus.Principal, user map[string]any) (map[string]any, error) {
	ul, err := s.sessions.UserLogins(ctx)
	if err != nil {
		return nil, err
	}
	live, err := ul.Live(ctx, p.User, time.Now().Add(-sessionWindow))
	if err != nil {
		return nil, err
	}
	sessions := []any{}
	for _, l := range live {
		entry := map[string]any{"id": l.ID, "lastUpdated": l.Updated.UTC().Format("2006-01-02T15:04:05.000Z")}
		put := func(k, v string) {
			if v != "" {
				entry[k] = v
			}
		}
		put("authMethod", l.Login.AuthMethod)
		put("remoteAddress", l.Login.RemoteAddress)
		if l.Login.UserAgent != "" {
			ua := useragent.Parse(l.Login.UserAgent)
			put("browser", ua.Name)
			put("os", ua.OS)
		}
		sessions = append(sessions, entry)
	}
	q, err := search.Parse("ProjectMembership", url.Values{"user": {p.User}, "project": {"Project/" + p.Project},
		"_count": {"100"}})
	if err != nil {
		return nil, err
	}
	page, err := s.repo.Search(ctx, repo.Scope{Project: p.Project}, "ProjectMembership", q)
	if err != nil {
		return nil, err
	}
	memberships := []any{}
	for _, res := range page.Resources[:min(len(page.Resources), maxListedMemberships)] {
		m, err := res.Decode()
		if err != nil {
			return nil, err
		}
		if m["active"] == false {
			continue
		}
		memberships = append(memberships, pick(m, "resourceType", "id", "identifier", "profile", "admin"))
	}
	// The factor is kept in the credentials (package factors); a User resource
	// imported with mfaEnrolled says so too.
	mfa, _, err := s.factors.Load(ctx, account.UserIDOf(p.User))
	if err != nil {
		return nil, err
	}
	enrolled := user["mfaEnrolled"] == true || mfa.Enrolled
	return map[string]any{"mfaEnrolled": enrolled, "sessions": sessions, "memberships": memberships}, nil
}

// referenceOf is the reference string of a Reference value, "" if none.
func referenceOf(v any) string {
	m, _ := v.(map[string]any)
	return stringOf(m["reference"])
}

func stringOf(v any) string {
	s, _ := v.(string)
	return s
}
