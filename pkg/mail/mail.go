// Package mail sends Pinion's e-mails (invitations, password resets) from
// a durable queue. Any service puts an e-mail on it with Queue; a Courier,
// run by the membership service, sends each one and records on its invite
// how an invitation's went. It sends through a real SMTP client
// (github.com/wneessen/go-mail, chosen for being maintained,
// dependency-free and context-aware), or, with no SMTP server configured,
// writes .eml files under the data directory.
package mail

import (
	"context"
	"fmt"
	"html"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

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
	// Quoted-printable breaks lines past 76 characters with "=", and a
	// set-password link is longer: copied from the raw message it no
	// longer works. ASCII text goes as it is (its lines are far below
	// SMTP's 998; go-mail's "7bit" would still quote them, so it is sent
	// labelled 8bit); text with other characters goes as base64, whose
	// lines a client joins back whole.
	enc := gomail.WithPartEncoding(gomail.EncodingB64)
	if isASCII(m.Text) {
		enc = gomail.WithPartEncoding(gomail.NoEncoding)
	}
	msg.SetBodyString(gomail.TypeTextPlain, m.Text, enc)
	msg.AddAlternativeString(gomail.TypeTextHTML, htmlOf(m.Text), enc)
	return msg, nil
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 || (s[i] < 0x20 && s[i] != '\n' && s[i] != '\t') {
			return false
		}
	}
	return true
}

var links = regexp.MustCompile(`https?://[^\s<>"]+`)

// htmlOf is the HTML part: the same text, paragraph by paragraph, with each
// URL a link to exactly the URL the text part shows.
func htmlOf(text string) string {
	var b strings.Builder
	b.WriteString("<!doctype html><html><body>\n")
	for _, para := range strings.Split(strings.TrimSpace(text), "\n\n") {
		b.WriteString("<p>")
		rest := para
		for {
			loc := links.FindStringIndex(rest)
			if loc == nil {
				break
			}
			b.WriteString(lineBreaks(html.EscapeString(rest[:loc[0]])))
			u := html.EscapeString(rest[loc[0]:loc[1]])
			b.WriteString(`<a href="` + u + `">` + u + `</a>`)
			rest = rest[loc[1]:]
		}
		b.WriteString(lineBreaks(html.EscapeString(rest)))
		b.WriteString("</p>\n")
	}
	b.WriteString("</body></html>")
	return b.String()
}

func lineBreaks(s string) string { return strings.ReplaceAll(s, "\n", "<br>\n") }

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
