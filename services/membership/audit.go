package membership

import "github.com/pinion-health/pinion/pkg/audit"

// auditedRoutes are the administration routes the audit trail records
// (audit.Recorder.Wrap), with the kind of event each makes; a refused
// request records nothing.
var auditedRoutes = map[string]audit.Route{
	"POST /admin/Project":                                     {Kind: audit.ProjectCreated},
	"POST /fhir/R4/Project/$init":                             {Kind: audit.ProjectCreated},
	"POST /admin/projects/:projectId/secrets":                 {Kind: audit.ConfigChanged},
	"POST /admin/projects/:projectId/sites":                   {Kind: audit.ConfigChanged},
	"POST /admin/projects/:projectId/invite":                  {Kind: audit.MemberInvited},
	"POST /admin/projects/:projectId/members/:membershipId":   {Kind: audit.MemberChanged},
	"PATCH /admin/projects/:projectId/members/:membershipId":  {Kind: audit.MemberChanged},
	"DELETE /admin/projects/:projectId/members/:membershipId": {Kind: audit.MemberRemoved},
	"POST /scim/v2/Users":                                     {Kind: audit.MemberInvited},
	"PUT /scim/v2/Users/:id":                                  {Kind: audit.MemberChanged},
	"PATCH /scim/v2/Users/:id":                                {Kind: audit.MemberChanged},
	"DELETE /scim/v2/Users/:id":                               {Kind: audit.MemberRemoved},
	"PATCH /scim/v2/Groups/:id":                               {Kind: audit.MemberChanged},
}
