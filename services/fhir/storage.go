package fhirsvc

import (
	"context"
	"errors"
	"mime"
	"strconv"
	"strings"
	"time"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/presign"
	"github.com/pinion-health/pinion/pkg/repo"
)

// storage is GET /storage/<id>/<versionId>?Expires=&Signature=: the
// content of one version of a Binary, for whoever holds a URL this server
// signed (pkg/presign) and before it expires, with no bearer token, as
// Medplum's storage route serves its presigned URLs. Any other URL is 403.
func (s *Service) storage(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	id, vid := r.Param("id"), r.Param("vid")
	switch err := s.urls.Check(ctx, id, vid, r.Query.Get("Expires"), r.Query.Get("Signature")); {
	case errors.Is(err, presign.ErrInvalid):
		return nil, fhir.ForbiddenText("Invalid signature")
	case errors.Is(err, presign.ErrExpired):
		return nil, fhir.ForbiddenText("URL has expired")
	case err != nil:
		return nil, err
	}
	// A deleted Binary is gone for its URLs too.
	if _, err := s.repo.Read(ctx, repo.AllProjects, "Binary", id); err != nil {
		return nil, err
	}
	res, err := s.repo.VRead(ctx, repo.AllProjects, "Binary", id, vid)
	if err != nil {
		return nil, err
	}
	resp, err := binaryContent(res)
	if err != nil {
		return nil, err
	}
	ct := contentTypeOf(resp.Header["Content-Type"])
	resp.Header["Content-Type"] = ct
	resp.Header["X-Content-Type-Options"] = "nosniff"
	resp.Header["Content-Disposition"] = disposition(ct)
	// Private: the URL is the credential; a shared cache must not keep it.
	resp.Header["Cache-Control"] = "private, max-age=" + strconv.Itoa(int(presign.Lifetime/time.Second))
	return resp, nil
}

// contentTypeOf is a Binary's content type as a header may carry it:
// anything that does not parse as a media type is sent as bytes.
func contentTypeOf(ct string) string {
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return "application/octet-stream"
	}
	return mime.FormatMediaType(mt, params)
}

// disposition is inline for what a browser only displays (images, audio,
// video, PDF, plain text) and attachment for the rest. Medplum sends none,
// but its storage is another origin (S3, CloudFront); Pinion's /storage/
// shares the origin of the API and the sign-in pages, where an uploaded
// HTML or SVG page opened inline could run script.
func disposition(ct string) string {
	mt, _, _ := mime.ParseMediaType(ct)
	switch {
	case mt == "image/svg+xml":
		return "attachment"
	case strings.HasPrefix(mt, "image/"), strings.HasPrefix(mt, "audio/"), strings.HasPrefix(mt, "video/"),
		mt == "application/pdf", mt == "text/plain":
		return "inline"
	}
	return "attachment"
}

// signing applies the traits of the routes (fhir.go) in one place rather
// than in each handler: the answers of bus.SignsURLs routes sign their
// attachment urls, and the bodies of bus.WritesResource routes store
// references rather than URLs that expire (a client sends back what it
// read).
func (s *Service) signing(routes []bus.Endpoint) []bus.Endpoint {
	for i, e := range routes {
		sign, write := e.Auth.Has(bus.SignsURLs), e.Auth.Has(bus.WritesResource)
		if !sign && !write {
			continue
		}
		h := e.Handler
		routes[i].Handler = func(ctx context.Context, r *bus.Request) (*bus.Response, error) {
			// A raw Binary upload's body is its content, never rewritten.
			if write && isMediaType(r.Get("Content-Type"), "application/fhir+json", "application/json", "application/json-patch+json") {
				// A body that does not parse is left for the handler to refuse.
				if body, err := s.urls.Unsigner().Rewrite(ctx, r.Body); err == nil {
					r.Body = body
				}
			}
			resp, err := h(ctx, r)
			if !sign || err != nil || resp == nil || resp.Status >= 300 || !isMediaType(resp.Header["Content-Type"], "application/fhir+json", "application/json") {
				return resp, err
			}
			return s.signed(ctx, r, resp)
		}
	}
	return routes
}

// signed rewrites the attachment urls of a FHIR JSON answer into storage
// URLs the caller's browser can load, for the Binaries the caller may
// read (pkg/presign).
func (s *Service) signed(ctx context.Context, r *bus.Request, resp *bus.Response) (*bus.Response, error) {
	body, err := s.urls.Rewriter(presign.CallerResolver(s.policies, s.repo, r.Principal)).Rewrite(ctx, resp.Body)
	if err != nil {
		return nil, err
	}
	resp.Body = body
	return resp, nil
}
