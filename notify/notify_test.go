package notify

import (
	"bufio"
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/paygate/paygate/config"
)

// fakeSMTP is a minimal SMTP server on loopback that records one message.
func fakeSMTP(t *testing.T) (port int, got chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got = make(chan string, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		r := bufio.NewReader(conn)
		say := func(s string) { _, _ = conn.Write([]byte(s + "\r\n")) }
		say("220 fake ESMTP")
		var data strings.Builder
		inData := false
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			if inData {
				if line == ".\r\n" {
					inData = false
					got <- data.String()
					say("250 queued")
					continue
				}
				data.WriteString(line)
				continue
			}
			switch cmd := strings.ToUpper(strings.TrimSpace(line)); {
			case strings.HasPrefix(cmd, "EHLO"), strings.HasPrefix(cmd, "HELO"):
				say("250 fake")
			case strings.HasPrefix(cmd, "DATA"):
				inData = true
				say("354 go on")
			case strings.HasPrefix(cmd, "QUIT"):
				say("221 bye")
				return
			default:
				say("250 ok")
			}
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port, got
}

func TestSMTPMailerSends(t *testing.T) {
	port, got := fakeSMTP(t)
	m := NewMailer(config.SMTPConfig{Host: "127.0.0.1", Port: port, From: "ops@paygate.example"}, slog.Default())
	if _, ok := m.(SMTPMailer); !ok {
		t.Fatalf("SMTP host set, got %T", m)
	}
	err := m.Send(context.Background(), Message{To: "shop@example.com", Subject: "KYB approved", Body: "Hello\nyou are approved."})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case msg := <-got:
		for _, want := range []string{"To: shop@example.com", "Subject: KYB approved", "Hello\r\nyou are approved."} {
			if !strings.Contains(msg, want) {
				t.Fatalf("message lacks %q:\n%s", want, msg)
			}
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no message reached the server")
	}
}

func TestSMTPRefusesHeaderInjection(t *testing.T) {
	m := SMTPMailer{Config: config.SMTPConfig{Host: "127.0.0.1", Port: 1, From: "ops@paygate.example"}}
	if err := m.Send(context.Background(), Message{To: "a@b.co\r\nBcc: x@y.z", Subject: "s"}); err == nil {
		t.Fatal("header injection accepted")
	}
}

func TestLogMailerWhenSMTPIsOff(t *testing.T) {
	var buf bytes.Buffer
	m := NewMailer(config.SMTPConfig{}, slog.New(slog.NewJSONHandler(&buf, nil)))
	if err := m.Send(context.Background(), Message{To: "shop@example.com", Subject: "KYB approved", Body: "b"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "KYB approved") || !strings.Contains(buf.String(), "not e-mailed") {
		t.Fatalf("log: %s", buf.String())
	}
}
