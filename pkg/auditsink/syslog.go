package auditsink

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/leodido/go-syslog/v4/rfc5424"

	"github.com/pinion-health/pinion/pkg/audit"
)

// Syslog delivers to a syslog receiver: an RFC 5424 message per
// AuditEvent, over TLS (RFC 5425), framed by octet counting.
//
// Syslog has no acknowledgement: a receiver that drops its connection
// loses what it had not read yet, and the write after it succeeds into
// the void. So the connection is watched (a receiver that closes it is
// seen at once), and each new connection starts with the messages
// written lately (up to replayFrames, replayBytes), sent again: a SIEM
// sees those twice, and tells them apart by project and seq.
type Syslog struct {
	addr     string
	tls      *tls.Config
	hostname string

	conn   net.Conn
	closed chan struct{} // closed when the receiver closes conn
	// recent are the frames written lately, oldest first.
	recent      [][]byte
	recentBytes int
}

// SyslogConfig is where a Syslog delivers.
type SyslogConfig struct {
	Addr string // host:port of an RFC 5425 receiver (6514)
	// TLS trusts the receiver (RootCAs) and may present a client
	// certificate; ServerName is Addr's host when empty.
	TLS *tls.Config
	// Hostname is the messages' HOSTNAME: os.Hostname() when empty.
	Hostname string
}

// Bounds of the syslog sink.
const (
	syslogBatch      = 256              // messages per write
	syslogBatchBytes = 1 << 20          // of AuditEvent JSON per write
	replayFrames     = 1000             // sent again on a new connection
	replayBytes      = 4 << 20          // the same, in bytes
	dialTimeout      = 10 * time.Second // connecting and the TLS handshake
	writeTimeout     = 30 * time.Second // one write
)

// The message's fixed parts.
const (
	appName = "pinion"
	// sdID names the structured data element. Pinion has no IANA Private
	// Enterprise Number yet: 32473 is the one RFC 5612 reserves for
	// documentation, which receivers accept as any other.
	sdID = "pinion@32473"
	// authpriv (10), as RFC 5424 numbers facilities: security and
	// authorization messages kept private.
	facilityAuthPriv = 10
	severityError    = 3
	severityWarning  = 4
	severityNotice   = 5
)

// NewSyslog makes a syslog destination.
func NewSyslog(c SyslogConfig) (*Syslog, error) {
	host, _, err := net.SplitHostPort(c.Addr)
	if err != nil {
		return nil, fmt.Errorf("syslog address %q: %w", c.Addr, err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.TLS != nil {
		cfg = c.TLS.Clone()
		cfg.MinVersion = max(cfg.MinVersion, tls.VersionTLS12)
	}
	if cfg.ServerName == "" {
		cfg.ServerName = host
	}
	hostname := c.Hostname
	if hostname == "" {
		if hostname, err = os.Hostname(); err != nil || hostname == "" {
			hostname = "-"
		}
	}
	return &Syslog{addr: c.Addr, tls: cfg, hostname: hostname}, nil
}

// Name is "syslog".
func (s *Syslog) Name() string { return "syslog" }

// Limits are syslogBatch messages, syslogBatchBytes of JSON.
func (s *Syslog) Limits() (int, int) { return syslogBatch, syslogBatchBytes }

// Deliver writes a message per event, after the recent ones when the
// connection is new.
func (s *Syslog) Deliver(ctx context.Context, evs []Event) error {
	frames := make([][]byte, len(evs))
	for i, e := range evs {
		msg, err := Format(e, s.hostname)
		if err != nil {
			return fmt.Errorf("%s seq %d: %w", e.Project, e.Seq, err)
		}
		frames[i] = Frame(msg)
	}
	var buf bytes.Buffer
	if s.conn != nil {
		select {
		case <-s.closed:
			s.drop()
		default:
		}
	}
	if s.conn == nil {
		if err := s.connect(ctx); err != nil {
			return err
		}
		for _, f := range s.recent {
			buf.Write(f)
		}
	}
	for _, f := range frames {
		buf.Write(f)
	}
	_ = s.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	stop := context.AfterFunc(ctx, func() { _ = s.conn.SetWriteDeadline(time.Unix(1, 0)) })
	_, err := s.conn.Write(buf.Bytes())
	stop()
	if err != nil {
		s.drop()
		return fmt.Errorf("syslog %s: %w", s.addr, err)
	}
	s.remember(frames)
	return nil
}

func (s *Syslog) connect(ctx context.Context) error {
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: dialTimeout}, Config: s.tls}
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	conn, err := d.DialContext(dctx, "tcp", s.addr)
	if err != nil {
		return fmt.Errorf("syslog %s: %w", s.addr, err)
	}
	closed := make(chan struct{})
	go func() {
		// A receiver sends nothing: a read ends when it closes.
		defer close(closed)
		_, _ = io.Copy(io.Discard, conn)
	}()
	s.conn, s.closed = conn, closed
	return nil
}

// drop closes the connection; the next Deliver makes another.
func (s *Syslog) drop() {
	if s.conn != nil {
		_ = s.conn.Close()
		<-s.closed
		s.conn, s.closed = nil, nil
	}
}

// remember keeps frames among the recent, within the replay bounds.
func (s *Syslog) remember(frames [][]byte) {
	for _, f := range frames {
		s.recent = append(s.recent, f)
		s.recentBytes += len(f)
	}
	n := 0
	for len(s.recent)-n > replayFrames || s.recentBytes > replayBytes && len(s.recent)-n > 1 {
		s.recentBytes -= len(s.recent[n])
		n++
	}
	if n > 0 {
		s.recent = append(s.recent[:0:0], s.recent[n:]...)
	}
}

// Close closes the connection.
func (s *Syslog) Close() error {
	s.drop()
	return nil
}

// Frame is msg framed by octet counting (RFC 6587, 3.4.1; RFC 5425, 4.3):
// its length in bytes, a space, and itself.
func Frame(msg []byte) []byte {
	f := strconv.AppendInt(make([]byte, 0, len(msg)+8), int64(len(msg)), 10)
	f = append(f, ' ')
	return append(f, msg...)
}

// Format writes e as an RFC 5424 message: PRI authpriv and notice
// (success), warning (refused) or error (failed, as outcome says); the
// event's recorded time; hostname; APP-NAME pinion; MSGID Pinion's
// subtype code; structured data [pinion@32473 project seq digest]; and
// the AuditEvent's JSON, as stored, as MSG (MSG-ANY, without a BOM, so
// that it parses as JSON as it is).
func Format(e Event, hostname string) ([]byte, error) {
	var ae struct {
		Recorded string `json:"recorded"`
		Outcome  string `json:"outcome"`
		Subtype  []struct {
			System string `json:"system"`
			Code   string `json:"code"`
		} `json:"subtype"`
	}
	if err := json.Unmarshal(e.JSON, &ae); err != nil {
		return nil, err
	}
	severity := severityNotice
	switch ae.Outcome {
	case audit.Success:
	case audit.MinorFailure:
		severity = severityWarning
	default:
		severity = severityError
	}
	code := ""
	for _, st := range ae.Subtype {
		if st.System == audit.Pinion {
			code = st.Code
		}
	}
	m := &rfc5424.SyslogMessage{}
	m.SetPriority(uint8(facilityAuthPriv*8 + severity))
	m.SetVersion(1)
	m.SetTimestamp(ae.Recorded)
	m.SetHostname(hostname)
	m.SetAppname(appName)
	m.SetMsgID(code)
	m.SetParameter(sdID, "project", e.Project)
	m.SetParameter(sdID, "seq", strconv.FormatInt(e.Seq, 10))
	m.SetParameter(sdID, "digest", e.Link.Digest)
	m.SetMessage(string(e.JSON))
	// The builder passes over a header value RFC 5424 refuses (it stays
	// "-"; the JSON has it all), but the event itself must be there.
	if m.Message == nil || m.StructuredData == nil || len((*m.StructuredData)[sdID]) != 3 {
		return nil, errors.New("not an RFC 5424 message: a value it cannot carry")
	}
	out, err := m.String()
	return []byte(out), err
}
