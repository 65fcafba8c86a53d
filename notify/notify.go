// Package notify tells merchants about decisions that concern them (KYB
// reviews). Every notification is stored first; it is e-mailed when SMTP is
// configured and otherwise written to the log, so nothing depends on a mail
// server being present in development.
package notify

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/smtp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/paygate/paygate/config"
)

// Message is one e-mail.
type Message struct {
	To      string
	Subject string
	Body    string
}

// Mailer sends messages.
type Mailer interface {
	Send(ctx context.Context, m Message) error
}

// NewMailer returns an SMTP mailer when cfg.Host is set, else a log mailer.
func NewMailer(cfg config.SMTPConfig, log *slog.Logger) Mailer {
	if cfg.Host == "" {
		return LogMailer{Log: log}
	}
	return SMTPMailer{Config: cfg}
}

// LogMailer writes messages to the log instead of sending them.
type LogMailer struct{ Log *slog.Logger }

// Send logs the message.
func (l LogMailer) Send(_ context.Context, m Message) error {
	l.Log.Info("notification (SMTP not configured, not e-mailed)", "to", m.To, "subject", m.Subject, "body", m.Body)
	return nil
}

// SMTPMailer sends through an SMTP server with STARTTLS when offered.
type SMTPMailer struct{ Config config.SMTPConfig }

// Send delivers one message.
func (s SMTPMailer) Send(ctx context.Context, m Message) error {
	if strings.ContainsAny(m.To+m.Subject, "\r\n") {
		return fmt.Errorf("notify: header injection refused")
	}
	addr := net.JoinHostPort(s.Config.Host, strconv.Itoa(s.Config.Port))
	var a smtp.Auth
	if s.Config.Username != "" {
		a = smtp.PlainAuth("", s.Config.Username, s.Config.Password, s.Config.Host)
	}
	msg := "From: " + s.Config.From + "\r\nTo: " + m.To + "\r\nSubject: " + m.Subject +
		"\r\nDate: " + time.Now().UTC().Format(time.RFC1123Z) +
		"\r\nMIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n" +
		strings.ReplaceAll(m.Body, "\n", "\r\n") + "\r\n"
	done := make(chan error, 1)
	go func() { done <- smtp.SendMail(addr, a, s.Config.From, []string{m.To}, []byte(msg)) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Outbox keeps the messages it is given, in memory (tests, and a
// development server's own reading of what it sent).
type Outbox struct {
	mu   sync.Mutex
	mail []Message
}

// Send keeps the message.
func (o *Outbox) Send(_ context.Context, m Message) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.mail = append(o.mail, m)
	return nil
}

// Count is how many messages were sent.
func (o *Outbox) Count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.mail)
}

// Wait waits up to within for the n-th message (counting from 1) and
// returns it; false when it did not come.
func (o *Outbox) Wait(n int, within time.Duration) (Message, bool) {
	deadline := time.Now().Add(within)
	for {
		o.mu.Lock()
		if len(o.mail) >= n {
			m := o.mail[n-1]
			o.mu.Unlock()
			return m, true
		}
		o.mu.Unlock()
		if time.Now().After(deadline) {
			return Message{}, false
		}
		time.Sleep(10 * time.Millisecond)
	}
}
