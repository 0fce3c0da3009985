package mail

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net"
	netmail "net/mail"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// received collects what a real SMTP server (go-smtp) was sent.
type received struct {
	mu    sync.Mutex
	auth  []string
	rcpt  []string
	datas []string
}

type session struct{ r *received }

func (s *session) AuthMechanisms() []string { return []string{sasl.Plain} }
func (s *session) Auth(string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(_, user, pass string) error {
		if user != "pinion" || pass != "s3cret" {
			return errors.New("bad credentials")
		}
		s.r.mu.Lock()
		s.r.auth = append(s.r.auth, user)
		s.r.mu.Unlock()
		return nil
	}), nil
}
func (s *session) Mail(string, *smtp.MailOptions) error { return nil }
func (s *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	s.r.mu.Lock()
	s.r.rcpt = append(s.r.rcpt, to)
	s.r.mu.Unlock()
	return nil
}
func (s *session) Data(r io.Reader) error {
	b, err := io.ReadAll(r)
	s.r.mu.Lock()
	s.r.datas = append(s.r.datas, string(b))
	s.r.mu.Unlock()
	return err
}
func (s *session) Reset()        {}
func (s *session) Logout() error { return nil }

func TestSMTPDelivers(t *testing.T) {
	got := &received{}
	srv := smtp.NewServer(smtp.BackendFunc(func(*smtp.Conn) (smtp.Session, error) { return &session{got}, nil }))
	srv.Domain = "localhost"
	srv.AllowInsecureAuth = true
	srv.ReadTimeout, srv.WriteTimeout = 10*time.Second, 10*time.Second
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()

	s, err := NewSMTP("smtp://pinion:s3cret@" + ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m := Message{ID: "invite-1", To: "ada@example.com", Subject: "Welcome to Pinion", Text: "Set your password: http://x/setpassword/1/2"}
	if _, err := s.Send(ctx, m); err != nil {
		t.Fatal(err)
	}
	got.mu.Lock()
	defer got.mu.Unlock()
	if len(got.auth) != 1 || len(got.rcpt) != 1 || got.rcpt[0] != "ada@example.com" || len(got.datas) != 1 {
		t.Fatalf("server saw auth %v rcpt %v, %d messages", got.auth, got.rcpt, len(got.datas))
	}
	if !strings.Contains(got.datas[0], "Subject: Welcome to Pinion") || !strings.Contains(got.datas[0], "setpassword/1/2") {
		t.Fatalf("message: %s", got.datas[0])
	}

	// A server that refuses the login is an error, to be retried from the queue.
	bad, _ := NewSMTP("smtp://pinion:wrong@" + ln.Addr().String())
	if _, err := bad.Send(ctx, m); err == nil {
		t.Fatal("refused login reported as sent")
	}
}

func TestFilesAndConfig(t *testing.T) {
	dir := t.TempDir()
	s, err := FromConfig("", dir)
	if err != nil {
		t.Fatal(err)
	}
	where, err := s.Send(context.Background(), Message{ID: "../evil id", To: "a@example.com", Subject: "S", Text: "T"})
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(where) != filepath.Join(dir, "mail") {
		t.Fatalf("written outside the mail directory: %s", where)
	}
	if b, _ := os.ReadFile(where); !strings.Contains(string(b), "a@example.com") {
		t.Fatal("eml lacks the recipient")
	}
	for _, bad := range []string{"http://x", "smtp://", "smtp://h:port"} {
		if _, err := FromConfig(bad, dir); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

// A set-password link reaches the reader whole in both parts, for ASCII
// text (sent as it is: intact even in the raw message) and for text with
// other characters (base64, which a reader decodes whole).
func TestLinksSurviveEncoding(t *testing.T) {
	link := "https://pinion.example.com/setpassword/0b9d7c0e-1111-2222-3333-444455556666/" + strings.Repeat("ab", 32)
	for _, name := range []string{"Ada", "Zoë"} {
		dir := t.TempDir()
		where, err := Files{Dir: dir}.Send(context.Background(), Message{ID: "x", To: "a@example.com", Subject: "S",
			Text: "Hello " + name + ",\n\nSet your password:\n" + link + "\n"})
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := os.ReadFile(where)
		if i := strings.Index(string(raw), link); name == "Ada" && (i < 0 || (raw[i+len(link)] != '\r' && raw[i+len(link)] != '\n')) {
			t.Errorf("ASCII message: the raw text lacks the whole link:\n%s", raw)
		}
		msg, err := netmail.ReadMessage(bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		_, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
		if err != nil {
			t.Fatal(err)
		}
		parts := map[string]string{}
		mr := multipart.NewReader(msg.Body, params["boundary"])
		for {
			p, err := mr.NextPart()
			if err != nil {
				break
			}
			var body io.Reader = p
			if p.Header.Get("Content-Transfer-Encoding") == "base64" {
				body = base64.NewDecoder(base64.StdEncoding, p)
			}
			b, err := io.ReadAll(body)
			if err != nil {
				t.Fatal(err)
			}
			ct, _, _ := mime.ParseMediaType(p.Header.Get("Content-Type"))
			parts[ct] = string(b)
		}
		if !strings.Contains(parts["text/plain"], link+"\r\n") && !strings.Contains(parts["text/plain"], link+"\n") {
			t.Errorf("%s: text part: %q", name, parts["text/plain"])
		}
		if !strings.Contains(parts["text/html"], `<a href="`+link+`">`) || !strings.Contains(parts["text/html"], "Hello "+name) {
			t.Errorf("%s: html part: %q", name, parts["text/html"])
		}
	}
}
