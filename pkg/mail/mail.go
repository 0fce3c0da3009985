// Package mail sends Pinion's e-mails (invitations, password resets) from
// a durable queue: a real SMTP client (github.com/wneessen/go-mail, chosen
// for being maintained, dependency-free and context-aware), or, with no SMTP
// server configured, .eml files under the data directory.
package mail

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"

	gomail "github.com/wneessen/go-mail"

	"github.com/pinion-health/pinion/pkg/saga"
)

// Subject is the step subject of the e-mail queue.
const Subject = saga.SubjectPrefix + "mail"

// Message is one e-mail to send.
type Message struct {
	ID       string `json:"id"` // idempotency key
	To       string `json:"to"`
	Subject  string `json:"subject"`
	Text     string `json:"text"`
	InviteID string `json:"invite,omitempty"`
}

// Sender delivers a message; a returned error is retried from the queue.
type Sender interface {
	Send(ctx context.Context, m Message) (where string, err error)
}

// From is the sender address.
const From = "Pinion <no-reply@pinion.invalid>"

// SMTP sends through an SMTP server given as smtp://user:pass@host:port
// (smtps:// forces TLS; smtp:// uses STARTTLS when offered).
type SMTP struct {
	host string
	opts []gomail.Option
}

// NewSMTP parses the server URL.
func NewSMTP(raw string) (*SMTP, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "smtp" && u.Scheme != "smtps") || u.Hostname() == "" {
		return nil, fmt.Errorf("PINION_SMTP_URL: want smtp://user:pass@host:port")
	}
	port := 25
	if u.Scheme == "smtps" {
		port = 465
	}
	if p := u.Port(); p != "" {
		if port, err = strconv.Atoi(p); err != nil {
			return nil, fmt.Errorf("PINION_SMTP_URL: bad port")
		}
	}
	opts := []gomail.Option{gomail.WithPort(port), gomail.WithTLSPolicy(gomail.TLSOpportunistic)}
	if u.Scheme == "smtps" {
		opts = append(opts, gomail.WithSSL())
	}
	if u.User != nil {
		pw, _ := u.User.Password()
		opts = append(opts, gomail.WithSMTPAuth(gomail.SMTPAuthPlain), gomail.WithUsername(u.User.Username()), gomail.WithPassword(pw))
	}
	return &SMTP{host: u.Hostname(), opts: opts}, nil
}

func build(m Message) (*gomail.Msg, error) {
	msg := gomail.NewMsg()
	if err := msg.From(From); err != nil {
		return nil, err
	}
	if err := msg.To(m.To); err != nil {
		return nil, fmt.Errorf("recipient %q: %w", m.To, err)
	}
	msg.Subject(m.Subject)
	msg.SetBodyString(gomail.TypeTextPlain, m.Text)
	return msg, nil
}

// Send delivers m.
func (s *SMTP) Send(ctx context.Context, m Message) (string, error) {
	msg, err := build(m)
	if err != nil {
		return "", err
	}
	c, err := gomail.NewClient(s.host, s.opts...)
	if err != nil {
		return "", err
	}
	if err := c.DialAndSendWithContext(ctx, msg); err != nil {
		return "", err
	}
	return "smtp://" + s.host, nil
}

// Files writes each message as an .eml file, for a machine with no mail server.
type Files struct{ Dir string }

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]`)

// Send writes m to <Dir>/<id>.eml.
func (f Files) Send(ctx context.Context, m Message) (string, error) {
	msg, err := build(m)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(f.Dir, 0o700); err != nil {
		return "", err
	}
	path := filepath.Join(f.Dir, unsafeName.ReplaceAllString(m.ID, "_")+".eml")
	// Written beside it and renamed: whoever reads the directory (a person,
	// a test, a mail pickup) never sees half a message.
	tmp := filepath.Join(f.Dir, "."+filepath.Base(path)+".tmp")
	if err := msg.WriteToFile(tmp); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return "", err
	}
	return path, nil
}

// FromConfig picks the sender: SMTP when smtpURL is set, else .eml files
// under dataDir/mail.
func FromConfig(smtpURL, dataDir string) (Sender, error) {
	if smtpURL != "" {
		return NewSMTP(smtpURL)
	}
	return Files{Dir: filepath.Join(dataDir, "mail")}, nil
}
