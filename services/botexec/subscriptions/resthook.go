package subscriptions

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"time"

	"github.com/pinion-health/pinion/pkg/egress"
)

// hookTimeout bounds one rest-hook request, as Medplum's REQUEST_TIMEOUT.
const hookTimeout = 120 * time.Second

// hookClient posts rest-hooks: a rest-hook's URL is written by a project
// member, so it gets egress's address check and no redirects; the status
// the endpoint answers is the outcome.
func hookClient(allowPrivate bool) *http.Client {
	return egress.Client(allowPrivate, hookTimeout)
}

// post sends one rest-hook and returns the endpoint's status. The answer's
// body is read (up to 64 KiB, so the connection can be reused) and dropped.
func post(ctx context.Context, c *http.Client, url string, header http.Header, body []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header = header
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, nil
}
