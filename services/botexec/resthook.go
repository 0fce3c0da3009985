package botexec

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"
)

// hookTimeout bounds one rest-hook request, as Medplum's REQUEST_TIMEOUT.
const hookTimeout = 120 * time.Second

// errPrivateAddress refuses a rest-hook whose host resolves to an address
// inside the network Pinion runs in.
var errPrivateAddress = errors.New("the endpoint's address is loopback, link-local or private: refused (PINION_REST_HOOK_ALLOW_PRIVATE allows it)")

// hookClient posts rest-hooks. Unless allowPrivate, the address is checked
// when the connection is made (after DNS, so a name that resolves inside
// cannot get through), and redirects are not followed: the status the
// endpoint answers is the outcome.
func hookClient(allowPrivate bool) *http.Client {
	d := &net.Dialer{Timeout: 10 * time.Second}
	if !allowPrivate {
		d.Control = func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil || !publicAddr(ap.Addr()) {
				return errPrivateAddress
			}
			return nil
		}
	}
	return &http.Client{
		Timeout: hookTimeout,
		Transport: &http.Transport{
			Proxy:                 nil,
			DialContext:           d.DialContext,
			TLSHandshakeTimeout:   10 * time.Second,
			MaxIdleConnsPerHost:   8,
			IdleConnTimeout:       90 * time.Second,
			ResponseHeaderTimeout: hookTimeout,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// notPublic are ranges that are neither private nor loopback in Go's terms
// but still not the public internet.
var notPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"), // carrier-grade NAT
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"), // benchmarking
	netip.MustParsePrefix("64:ff9b::/96"),  // NAT64 reaches IPv4 space
}

// publicAddr reports whether an address is on the public internet.
func publicAddr(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsGlobalUnicast() || a.IsPrivate() || a.IsLoopback() || a.IsLinkLocalUnicast() {
		return false
	}
	for _, p := range notPublic {
		if p.Contains(a) {
			return false
		}
	}
	return true
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
