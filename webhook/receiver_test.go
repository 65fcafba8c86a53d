package webhook

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

const receiverDir = "testdata/receiver"

// nodeReceiver is the npm standardwebhooks receiver in testdata/receiver,
// running as a child process on a loopback port.
type nodeReceiver struct {
	url string
}

type receivedDelivery struct {
	ID          string `json:"id"`
	Timestamp   string `json:"timestamp"`
	ContentType string `json:"contentType"`
	UserAgent   string `json:"userAgent"`
	Body        string `json:"body"`
	Valid       bool   `json:"valid"`
	Error       string `json:"error"`
}

// startNodeReceiver starts receiver.js. Without node_modules it fails under
// CI (env CI set) and skips elsewhere.
func startNodeReceiver(t *testing.T, secret string) *nodeReceiver {
	t.Helper()
	if _, err := os.Stat(filepath.Join(receiverDir, "node_modules", "standardwebhooks")); err != nil {
		msg := "webhook/testdata/receiver/node_modules is missing: run `npm ci --prefix webhook/testdata/receiver`"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("node is not installed")
		}
		t.Skip("node is not installed")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, node, "receiver.js")
	cmd.Dir = receiverDir
	cmd.Env = append(os.Environ(), "WEBHOOK_SECRET="+secret)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close() // the receiver exits when its stdin closes
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cancel()
			<-done
		}
		cancel()
	})
	portc := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		portc <- strings.TrimSpace(line)
	}()
	select {
	case port := <-portc:
		if _, err := strconv.Atoi(port); err != nil {
			t.Fatalf("receiver did not print a port (got %q): %s", port, stderr.String())
		}
		return &nodeReceiver{url: "http://127.0.0.1:" + port}
	case <-time.After(15 * time.Second):
		t.Fatalf("receiver did not start: %s", stderr.String())
	}
	return nil
}

func (r *nodeReceiver) deliveries(t *testing.T) []receivedDelivery {
	t.Helper()
	resp, err := http.Get(r.url + "/deliveries")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []receivedDelivery
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestStandardWebhooksReceiverVerifies sends real deliveries through Sender to
// a receiver that verifies them with the npm reference library.
func TestStandardWebhooksReceiverVerifies(t *testing.T) {
	secret, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	rcv := startNodeReceiver(t, secret)
	s := NewSender(devPolicy(nil))
	ctx := context.Background()

	bodies := []string{
		`{"event":"checkout.completed","data":{"sessionId":"4f0c","amount":"32.61","livemode":false},"webhookDeliveryId":"dlv_a","timestamp":"2026-11-22T03:00:00.000Z"}`,
		`{"event":"payment.refunded","data":{"reason":"caf\u00e9 \"quoted\" ünïcödé","amount":"1.00"},"webhookDeliveryId":"dlv_b","timestamp":"2026-11-22T03:00:01.000Z"}`,
		`{}`,
	}
	for i, b := range bodies {
		req := Request{URL: rcv.url + "/hook", Secret: secret, MessageID: "dlv_" + strconv.Itoa(i), Timestamp: time.Now(), Body: []byte(b)}
		res := s.Send(ctx, req)
		if !res.Delivered || res.StatusCode != http.StatusNoContent {
			t.Fatalf("delivery %d: %+v (receiver: %+v)", i, res, rcv.deliveries(t))
		}
	}

	// Signed with another secret: the receiver must refuse it.
	other, _ := NewSecret()
	res := s.Send(ctx, Request{URL: rcv.url + "/hook", Secret: other, MessageID: "dlv_wrong_secret", Timestamp: time.Now(), Body: []byte(bodies[0])})
	if res.Delivered || res.StatusCode != http.StatusBadRequest {
		t.Fatalf("wrong secret: %+v, want 400", res)
	}

	// A correctly signed delivery whose body was altered on the way.
	ts := time.Now()
	sig, _ := Sign(secret, "dlv_tampered", ts, []byte(bodies[0]))
	tampered := strings.Replace(bodies[0], "32.61", "99.99", 1)
	hreq, _ := http.NewRequest(http.MethodPost, rcv.url+"/hook", strings.NewReader(tampered))
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set(HeaderID, "dlv_tampered")
	hreq.Header.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	hreq.Header.Set(HeaderSignature, sig)
	hresp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		t.Fatal(err)
	}
	hresp.Body.Close()
	if hresp.StatusCode != http.StatusBadRequest {
		t.Fatalf("tampered body: status %d, want 400", hresp.StatusCode)
	}

	// A stale timestamp (signed correctly, but 10 minutes old).
	res = s.Send(ctx, Request{URL: rcv.url + "/hook", Secret: secret, MessageID: "dlv_stale", Timestamp: time.Now().Add(-10 * time.Minute), Body: []byte(bodies[0])})
	if res.Delivered || res.StatusCode != http.StatusBadRequest {
		t.Fatalf("stale timestamp: %+v, want 400", res)
	}

	got := rcv.deliveries(t)
	if len(got) != len(bodies)+3 {
		t.Fatalf("receiver recorded %d deliveries, want %d: %+v", len(got), len(bodies)+3, got)
	}
	for i, b := range bodies {
		d := got[i]
		if !d.Valid || d.Body != b || d.ID != "dlv_"+strconv.Itoa(i) || d.ContentType != "application/json" || d.UserAgent != DefaultUserAgent {
			t.Errorf("delivery %d recorded as %+v", i, d)
		}
	}
	for _, d := range got[len(bodies):] {
		if d.Valid || d.Error == "" {
			t.Errorf("bad delivery %s accepted: %+v", d.ID, d)
		}
	}
}

// TestReceiversHoldingEitherSecretVerifyDuringRotation: an attempt signed
// under a secret and the one it replaces (a rotation's overlap) carries two
// v1 signatures; the npm reference library verifies it with either secret,
// and refuses it with a third.
func TestReceiversHoldingEitherSecretVerifyDuringRotation(t *testing.T) {
	previous, _ := NewSecret()
	current, _ := NewSecret()
	stranger, _ := NewSecret()
	s := NewSender(devPolicy(nil))
	body := []byte(`{"event":"checkout.completed","data":{"sessionId":"4f0c","amount":"32.61","livemode":false},"webhookDeliveryId":"dlv_rot","timestamp":"2026-11-27T09:00:00.000Z"}`)
	for _, tc := range []struct {
		name, held string
		want       int
	}{{"old secret", previous, http.StatusNoContent}, {"new secret", current, http.StatusNoContent}, {"another secret", stranger, http.StatusBadRequest}} {
		rcv := startNodeReceiver(t, tc.held)
		res := s.Send(context.Background(), Request{URL: rcv.url + "/hook", Secret: current, PreviousSecret: previous,
			MessageID: "dlv_rot", Timestamp: time.Now(), Body: body})
		if res.StatusCode != tc.want {
			t.Fatalf("receiver holding the %s: %+v (receiver: %+v), want %d", tc.name, res, rcv.deliveries(t), tc.want)
		}
	}
}
