package auditsink

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leodido/go-syslog/v4/rfc5424"
)

// testCA is a CA made for one test, and a certificate it signed for
// 127.0.0.1: what the receivers present, and what the sinks trust.
type testCA struct {
	pool   *x509.CertPool
	pem    []byte
	server tls.Certificate
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "audit sink test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	return &testCA{pool: pool, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		server: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}}
}

// file writes the CA's PEM where a setting can name it.
func (ca *testCA) file(t *testing.T) string {
	path := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(path, ca.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func (ca *testCA) client() *tls.Config { return &tls.Config{RootCAs: ca.pool} }

func (ca *testCA) serverConfig() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{ca.server}, MinVersion: tls.VersionTLS12}
}

// arrival is one AuditEvent as a receiver took it.
type arrival struct {
	id   string // the AuditEvent's id
	json []byte
	// What the syslog message's header and structured data said.
	pri              uint8
	app, msgID       string
	project, seq, dg string
}

func arrivalOf(raw []byte) (arrival, error) {
	var res struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(raw, &res); err != nil || res.ID == "" {
		return arrival{}, fmt.Errorf("not an AuditEvent: %q", raw)
	}
	return arrival{id: res.ID, json: raw}, nil
}

// receiver is what both receivers keep: what arrived, in order, and what
// was wrong with it.
type receiver struct {
	mu   sync.Mutex
	got  []arrival
	errs []string
}

func (r *receiver) take(a arrival) {
	r.mu.Lock()
	r.got = append(r.got, a)
	r.mu.Unlock()
}

func (r *receiver) fail(format string, args ...any) {
	r.mu.Lock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

func (r *receiver) arrivals() ([]arrival, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]arrival(nil), r.got...), append([]string(nil), r.errs...)
}

func (r *receiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

// syslogReceiver is an RFC 5425 receiver on loopback: TLS, octet-counted
// frames, each parsed as RFC 5424. Down, it closes its listener and its
// connections, losing what it had not read, as a receiver that stops
// does.
type syslogReceiver struct {
	receiver
	t    *testing.T
	tls  *tls.Config
	addr string

	lmu   sync.Mutex
	ln    net.Listener
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

// maxFrame bounds a frame the receiver reads.
const maxFrame = 1 << 20

func newSyslogReceiver(t *testing.T, ca *testCA) *syslogReceiver {
	r := &syslogReceiver{t: t, tls: ca.serverConfig(), addr: "127.0.0.1:0", conns: map[net.Conn]bool{}}
	r.up()
	t.Cleanup(r.down)
	return r
}

func (r *syslogReceiver) up() {
	r.t.Helper()
	ln, err := tls.Listen("tcp", r.addr, r.tls)
	if err != nil {
		r.t.Fatal(err)
	}
	r.lmu.Lock()
	r.ln, r.addr = ln, ln.Addr().String()
	r.lmu.Unlock()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			r.lmu.Lock()
			if r.ln != ln { // went down meanwhile
				r.lmu.Unlock()
				conn.Close()
				return
			}
			r.conns[conn] = true
			r.lmu.Unlock()
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				r.serve(conn)
			}()
		}
	}()
}

func (r *syslogReceiver) down() {
	r.lmu.Lock()
	if r.ln != nil {
		r.ln.Close()
		r.ln = nil
	}
	for c := range r.conns {
		c.Close()
		delete(r.conns, c)
	}
	r.lmu.Unlock()
	r.wg.Wait()
}

func (r *syslogReceiver) serve(conn net.Conn) {
	defer conn.Close()
	br := bufio.NewReader(conn)
	for {
		head, err := br.ReadString(' ')
		if err != nil {
			return
		}
		n, err := strconv.Atoi(strings.TrimSuffix(head, " "))
		if err != nil || n <= 0 || n > maxFrame {
			r.fail("bad frame length %q", head)
			return
		}
		frame := make([]byte, n)
		if _, err := io.ReadFull(br, frame); err != nil {
			return // cut off by the receiver going down
		}
		r.parse(frame)
	}
}

func (r *syslogReceiver) parse(frame []byte) {
	m, err := rfc5424.NewParser().Parse(frame)
	if err != nil {
		r.fail("not RFC 5424: %v: %q", err, frame)
		return
	}
	sm := m.(*rfc5424.SyslogMessage)
	if sm.Message == nil || sm.StructuredData == nil || sm.Appname == nil || sm.Priority == nil {
		r.fail("incomplete message %q", frame)
		return
	}
	a, err := arrivalOf([]byte(*sm.Message))
	if err != nil {
		r.fail("%v", err)
		return
	}
	sd := (*sm.StructuredData)[sdID]
	a.pri, a.app, a.project, a.seq, a.dg = *sm.Priority, *sm.Appname, sd["project"], sd["seq"], sd["digest"]
	if sm.MsgID != nil {
		a.msgID = *sm.MsgID
	}
	r.take(a)
}

// webhookReceiver is an HTTPS endpoint on loopback that checks each
// delivery's signature. It answers 503 (refusing), or goes down (its
// listener and connections closed), and comes back on the same port.
type webhookReceiver struct {
	receiver
	t      *testing.T
	tls    *tls.Config
	secret []byte
	addr   string

	smu     sync.Mutex
	srv     *http.Server
	refuse  bool
	refused int
}

func newWebhookReceiver(t *testing.T, ca *testCA, secret string) *webhookReceiver {
	r := &webhookReceiver{t: t, tls: ca.serverConfig(), secret: []byte(secret), addr: "127.0.0.1:0"}
	r.up()
	t.Cleanup(r.down)
	return r
}

func (r *webhookReceiver) url() string { return "https://" + r.addr + "/audit" }

func (r *webhookReceiver) up() {
	r.t.Helper()
	ln, err := net.Listen("tcp", r.addr)
	if err != nil {
		r.t.Fatal(err)
	}
	r.addr = ln.Addr().String()
	srv := &http.Server{Handler: http.HandlerFunc(r.serve), TLSConfig: r.tls, ReadHeaderTimeout: 5 * time.Second,
		ErrorLog: nil}
	r.smu.Lock()
	r.srv = srv
	r.smu.Unlock()
	go func() { _ = srv.ServeTLS(ln, "", "") }()
}

func (r *webhookReceiver) down() {
	r.smu.Lock()
	srv := r.srv
	r.srv = nil
	r.smu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

// setRefuse makes the endpoint answer 503 (or not).
func (r *webhookReceiver) setRefuse(on bool) {
	r.smu.Lock()
	r.refuse = on
	r.smu.Unlock()
}

func (r *webhookReceiver) refusals() int {
	r.smu.Lock()
	defer r.smu.Unlock()
	return r.refused
}

func (r *webhookReceiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 4<<20))
	if err != nil {
		http.Error(w, "body", http.StatusBadRequest)
		return
	}
	// The signature, computed here as a receiver would, from the docs.
	ts := req.Header.Get("X-Pinion-Timestamp")
	mac := hmac.New(sha256.New, r.secret)
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	want := "sha256=" + hex.EncodeToString(mac.Sum(nil))
	sec, _ := strconv.ParseInt(ts, 10, 64)
	if !hmac.Equal([]byte(req.Header.Get("X-Pinion-Signature")), []byte(want)) || time.Since(time.Unix(sec, 0)).Abs() > 5*time.Minute {
		r.fail("bad signature or timestamp %q", ts)
		http.Error(w, "signature", http.StatusUnauthorized)
		return
	}
	if ct := req.Header.Get("Content-Type"); req.Method != http.MethodPost || ct != "application/x-ndjson" {
		r.fail("%s with %s", req.Method, ct)
	}
	r.smu.Lock()
	refuse := r.refuse
	if refuse {
		r.refused++
	}
	r.smu.Unlock()
	if refuse {
		http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
		return
	}
	if !bytes.HasSuffix(body, []byte("\n")) {
		r.fail("body not newline-terminated")
	}
	for line := range bytes.Lines(body) {
		a, err := arrivalOf(bytes.TrimSuffix(line, []byte("\n")))
		if err != nil {
			r.fail("%v", err)
			continue
		}
		r.take(a)
	}
	w.WriteHeader(http.StatusNoContent)
}
