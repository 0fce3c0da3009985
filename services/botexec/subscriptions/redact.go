package subscriptions

import (
	"errors"
	"net/url"
	"strconv"
	"strings"
)

// endpointForLog is a rest-hook endpoint as a log line may show it: scheme,
// host and path only. Userinfo, query and fragment are where endpoints
// carry their credentials (?token=…), and logs are read more widely than
// subscriptions.
func endpointForLog(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(endpoint not shown)"
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
}

// errorForLog is err's text for a log line, with the URL a failed request
// names (net/http's and net/url's errors quote it whole) in endpointForLog's
// form.
func errorForLog(err error) string {
	if err == nil {
		return ""
	}
	msg := err.Error()
	var ue *url.Error
	if errors.As(err, &ue) && ue.URL != "" {
		shown := endpointForLog(ue.URL)
		msg = strings.ReplaceAll(msg, strconv.Quote(ue.URL), strconv.Quote(shown))
		msg = strings.ReplaceAll(msg, ue.URL, shown)
	}
	return msg
}
