package console

import (
	"encoding/json"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/pinion-health/pinion/pkg/fhir"
)

// provider is a client's identityProvider (Medplum's IdentityProvider, with
// Pinion's issuer, jwksUrl and audience) for the client page. The
// provider's client secret is write-only: the page says whether one is
// set, never what it is.
type provider struct {
	Issuer, AuthorizeURL, TokenURL, UserInfoURL  string
	JWKSURL, Audience, ClientID, TokenAuthMethod string
	UsePkce, UseSubject, SecretSet               bool
}

// providerFields are the form's text fields, by their IdentityProvider names.
var providerFields = []string{"issuer", "authorizeUrl", "tokenUrl", "userInfoUrl", "jwksUrl", "audience", "clientId"}

// maxProviderField bounds each field the form sends: URLs and ids.
const maxProviderField = 2048

// providerOf reads a client's identityProvider, or nil.
func providerOf(raw []byte) *provider {
	var c struct {
		IDP *struct {
			Issuer          string `json:"issuer"`
			AuthorizeURL    string `json:"authorizeUrl"`
			TokenURL        string `json:"tokenUrl"`
			UserInfoURL     string `json:"userInfoUrl"`
			JWKSURL         string `json:"jwksUrl"`
			Audience        string `json:"audience"`
			ClientID        string `json:"clientId"`
			ClientSecret    string `json:"clientSecret"`
			TokenAuthMethod string `json:"tokenAuthMethod"`
			UsePkce         bool   `json:"usePkce"`
			UseSubject      bool   `json:"useSubject"`
		} `json:"identityProvider"`
	}
	if json.Unmarshal(raw, &c) != nil || c.IDP == nil {
		return nil
	}
	p := c.IDP
	return &provider{Issuer: p.Issuer, AuthorizeURL: p.AuthorizeURL, TokenURL: p.TokenURL, UserInfoURL: p.UserInfoURL,
		JWKSURL: p.JWKSURL, Audience: p.Audience, ClientID: p.ClientID, TokenAuthMethod: p.TokenAuthMethod,
		UsePkce: p.UsePkce, UseSubject: p.UseSubject, SecretSet: p.ClientSecret != ""}
}

// saveClientProvider sets or removes the client's identityProvider through
// the API's update of the ClientApplication, so the service's checks and
// access rules apply. An empty secret field keeps the current secret.
func (c *Console) saveClientProvider(fc *fiber.Ctx) error {
	s, err := c.form(fc)
	if s == nil {
		return err
	}
	id := fc.Params("id")
	resp, err := c.read(fc, s, "ClientApplication", id)
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
	if fc.FormValue("remove") != "" {
		delete(res, "identityProvider")
	} else {
		idp, errs := providerForm(fc, res["identityProvider"])
		if len(errs) > 0 {
			return c.renderClient(fc, s, 400, resp.Body, errs)
		}
		res["identityProvider"] = idp
	}
	raw, _ := json.Marshal(res)
	resp, err = c.call(fc, s.who, "PUT", "/fhir/R4/ClientApplication/"+id,
		map[string]string{"type": "ClientApplication", "id": id}, nil, "application/fhir+json", raw)
	if err != nil {
		return err
	}
	if resp.Status != 200 {
		return c.message(fc, resp.Status, "Identity provider", failure(resp))
	}
	return c.renderClient(fc, s, 200, resp.Body, nil)
}

// providerForm is the identityProvider the posted form describes, over
// the current one (whose secret stays unless a new one is typed), and the
// errors by field.
func providerForm(fc *fiber.Ctx, current any) (map[string]any, map[string]string) {
	idp := map[string]any{}
	errs := map[string]string{}
	for _, f := range providerFields {
		v := strings.TrimSpace(fc.FormValue("idp-" + f))
		if len(v) > maxProviderField {
			errs["idp-"+f] = "At most 2048 characters"
		}
		if v != "" {
			idp[f] = v
		}
	}
	for _, f := range []string{"issuer", "authorizeUrl", "tokenUrl", "clientId"} {
		if idp[f] == nil {
			errs["idp-"+f] = "Required"
		}
	}
	if m := fc.FormValue("idp-tokenAuthMethod"); m == "client_secret_post" {
		idp["tokenAuthMethod"] = m
	} else {
		idp["tokenAuthMethod"] = "client_secret_basic"
	}
	idp["usePkce"] = fc.FormValue("idp-usePkce") != ""
	idp["useSubject"] = fc.FormValue("idp-useSubject") != ""
	switch secret := fc.FormValue("idp-clientSecret"); {
	case len(secret) > maxProviderField:
		errs["idp-clientSecret"] = "At most 2048 characters"
	case secret != "":
		idp["clientSecret"] = secret
	default:
		if cur, ok := current.(map[string]any); ok && cur["clientSecret"] != nil {
			idp["clientSecret"] = cur["clientSecret"]
		}
	}
	return idp, errs
}
