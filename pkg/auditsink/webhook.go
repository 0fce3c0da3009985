package auditsink

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Webhook delivers to an HTTPS endpoint: a POST per batch, one project's
// events in chain order, NDJSON (one AuditEvent per line, as stored),
// signed. Anything but a 2xx answer is a failure, and the batch is sent
// again.
type Webhook struct {
	url    string
	secret []byte
	client *http.Client
}

// WebhookConfig is where a Webhook delivers.
type WebhookConfig struct {
	URL    string // https://
	Secret string // keys the signature
	// TLS trusts the endpoint (RootCAs; the system's when nil) and may
	// present a client certificate.
	TLS *tls.Config
}

// The headers of a delivery.
const (
	// TimestampHeader is when the request was signed, in Unix seconds.
	TimestampHeader = "X-Pinion-Timestamp"
	// SignatureHeader is "sha256=" and the hex HMAC-SHA256, keyed with the
	// secret, of the timestamp, a full stop, and the body (Sign).
	SignatureHeader = "X-Pinion-Signature"
)

// Bounds of the webhook sink.
const (
	webhookBatch      = 100              // events per request
	webhookBatchBytes = 1 << 20          // of body per request (one larger event goes alone)
	requestTimeout    = 30 * time.Second // one request, answer included
	maxAnswer         = 1024             // of an answer's body read, for the log
)

// NewWebhook makes a webhook destination.
func NewWebhook(c WebhookConfig) (*Webhook, error) {
	u, err := url.Parse(c.URL)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("webhook URL %q: not an https:// URL", c.URL)
	}
	if c.Secret == "" {
		return nil, fmt.Errorf("webhook: no secret to sign with")
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.TLS != nil {
		cfg = c.TLS.Clone()
		cfg.MinVersion = max(cfg.MinVersion, tls.VersionTLS12)
	}
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: dialTimeout}).DialContext,
		TLSClientConfig:       cfg,
		TLSHandshakeTimeout:   dialTimeout,
		ResponseHeaderTimeout: requestTimeout,
		MaxIdleConnsPerHost:   2,
		IdleConnTimeout:       90 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	client := &http.Client{
		Transport: tr,
		Timeout:   requestTimeout,
		// A redirect is an answer that is not a 2xx: a failure, not a
		// second destination.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return &Webhook{url: c.URL, secret: []byte(c.Secret), client: client}, nil
}

// Name is "webhook".
func (w *Webhook) Name() string { return "webhook" }

// Limits are webhookBatch events, webhookBatchBytes of body.
func (w *Webhook) Limits() (int, int) { return webhookBatch, webhookBatchBytes }

// Deliver posts evs as one NDJSON body.
func (w *Webhook) Deliver(ctx context.Context, evs []Event) error {
	var body bytes.Buffer
	for _, e := range evs {
		body.Write(e.JSON)
		body.WriteByte('\n')
	}
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(body.Bytes()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-ndjson")
	req.Header.Set(TimestampHeader, ts)
	req.Header.Set(SignatureHeader, "sha256="+Sign(w.secret, ts, body.Bytes()))
	resp, err := w.client.Do(req)
	if err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	// The rest is drained (within bounds) so that the connection is used
	// again.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("webhook answered %s: %q", resp.Status, answer)
	}
	return nil
}

// Close closes idle connections.
func (w *Webhook) Close() error {
	w.client.CloseIdleConnections()
	return nil
}

// Sign is the hex HMAC-SHA256, keyed with secret, of the timestamp, a
// full stop and the body: what X-Pinion-Signature carries after "sha256=".
// A receiver computes it again, compares in constant time, and refuses a
// timestamp too far from its clock (a delivery replayed).
func Sign(secret []byte, timestamp string, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(timestamp))
	m.Write([]byte{'.'})
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}
