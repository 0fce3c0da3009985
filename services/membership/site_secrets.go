package membership

import "encoding/json"

// siteSecretKey is the field of a Project.site that verifies reCAPTCHA
// tokens for the site's key. It is write-only for a project's admins: the
// /admin routes never answer it to anyone but a super admin (as
// /fhir/R4/Project hides it, pkg/access), and a site sent without it keeps
// the one stored for the same recaptchaSiteKey, so an admin can change a
// site without knowing its secret.
const siteSecretKey = "recaptchaSecretKey"

// keepSiteSecrets returns the sites to store: copies of sent, each without
// a secret key given the stored secret of the stored site with its
// recaptchaSiteKey. sent itself is left as it is, for a retried write
// starts again from it.
func keepSiteSecrets(sent []any, stored any) []any {
	secrets := map[string]any{}
	old, _ := stored.([]any)
	for _, x := range old {
		site, _ := x.(map[string]any)
		if key, _ := site["recaptchaSiteKey"].(string); key != "" && site[siteSecretKey] != nil {
			secrets[key] = site[siteSecretKey]
		}
	}
	out := make([]any, len(sent))
	for i, x := range sent {
		site, ok := x.(map[string]any)
		if !ok {
			out[i] = x
			continue
		}
		c := make(map[string]any, len(site)+1)
		for k, v := range site {
			c[k] = v
		}
		if key, _ := c["recaptchaSiteKey"].(string); key != "" && c[siteSecretKey] == nil && secrets[key] != nil {
			c[siteSecretKey] = secrets[key]
		}
		out[i] = c
	}
	return out
}

// hideSiteSecrets removes every site's secret key from sites (a
// Project.site list, as decoded).
func hideSiteSecrets(sites any) {
	list, _ := sites.([]any)
	for _, x := range list {
		if site, ok := x.(map[string]any); ok {
			delete(site, siteSecretKey)
		}
	}
}

// withoutSiteSecrets is a stored Project's JSON without its sites' secret
// keys.
func withoutSiteSecrets(project []byte) ([]byte, error) {
	var p map[string]any
	if err := json.Unmarshal(project, &p); err != nil {
		return nil, err
	}
	if p["site"] == nil {
		return project, nil
	}
	hideSiteSecrets(p["site"])
	return json.Marshal(p)
}
