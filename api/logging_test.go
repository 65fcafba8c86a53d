package api_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/logging"
	"github.com/paygate/paygate/models/storetest"
)

// syncBuffer is a bytes.Buffer safe for the server's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

var credentialPrefixes = []string{"svc_test_sk_", "svc_live_sk_", "svc_sess_", "whsec_"}

// driveCredentials sends signup, login, key creation and use, wrong and
// mistyped credentials, webhook-secret-looking values in bodies and an
// internal error through the API, and returns every credential it saw.
func driveCredentials(t *testing.T, h *harness, hostileRequestID bool) []string {
	t.Helper()
	m := h.signup()
	r := h.do("POST", "/api/auth/login", "", map[string]any{"email": m.Email, "password": "correct horse battery"})
	expect(t, r, 200, "")
	sess := r.str("data", "sessionToken")
	r = h.do("POST", "/api/developer/keys", sess, map[string]any{"keyType": "test"})
	expect(t, r, 201, "")
	key := r.str("data", "fullKey")
	expect(t, h.do("GET", "/api/developer/keys", sess, nil), 200, "")
	h.link(key, map[string]any{"name": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "amount": 10, "network": "base_sepolia"})
	// Wrong credentials of every kind, and credentials on the wrong routes.
	expect(t, h.do("GET", "/api/payment-links", "svc_test_sk_0000000000000000000000000000dead", nil), 401, "UNAUTHORIZED")
	expect(t, h.do("GET", "/api/payment-links", "svc_live_sk_0000000000000000000000000000dead", nil), 401, "UNAUTHORIZED")
	expect(t, h.do("GET", "/api/payment-links", "svc_sess_00000000000000000000000000000dead", nil), 401, "UNAUTHORIZED")
	expect(t, h.do("GET", "/api/merchant", key, nil), 401, "UNAUTHORIZED")
	expect(t, h.do("GET", "/api/merchant", "svc_sess_00000000000000000000000000000dead", nil), 401, "UNAUTHORIZED")
	// Secrets in malformed and unexpected bodies.
	h.do("POST", "/api/auth/login", "", `{"email":"svc_test_sk_inbody@x.y","password":"whsec_AAAA"`)
	h.do("PATCH", "/api/merchant", sess, map[string]any{"webhookSecret": "whsec_QUJDREVGR0hJSktMTU5PUFFSU1RVVldY", "apiKey": key})
	if hostileRequestID {
		// A client sending its key as the request id: only the redacting
		// handler can keep that out of the access log.
		req, _ := http.NewRequest("GET", h.http.URL+"/api/payment-links", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("X-Request-Id", key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
	}
	expect(t, h.do("POST", "/api/auth/logout", sess, nil), 200, "")
	// An internal error is logged with its error text: the store is gone.
	_ = h.store.Close()
	r = h.do("GET", "/api/payment-links", key, nil)
	if r.Status != 500 {
		t.Fatalf("with the store closed: %d %s", r.Status, r.Raw)
	}
	return []string{m.Session, m.TestKey, sess, key}
}

// TestLogsCarryRequestIDAndNoCredentials drives credentials through the API
// with its logs (request logger and slog's default, which the error mapper
// uses) going to a buffer, then checks that no credential prefix appears
// anywhere and that every line logged for a request carries its id. It runs
// twice: with a plain JSON handler (the handlers themselves log no
// credentials) and with the service's redacting handler, also facing a
// client that sends its key as the request id.
func TestLogsCarryRequestIDAndNoCredentials(t *testing.T) {
	for _, tc := range []struct {
		name      string
		redacting bool
	}{{"plain", false}, {"redacting", true}} {
		t.Run(tc.name, func(t *testing.T) {
			var buf syncBuffer
			var log *slog.Logger
			if tc.redacting {
				log = logging.NewJSON(&buf, slog.LevelDebug)
			} else {
				log = slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
			}
			prev := slog.Default()
			slog.SetDefault(log)
			t.Cleanup(func() { slog.SetDefault(prev) })
			st := storetest.Open(t, "sqlite")
			h := newHarness(t, st, func(d *api.Deps) { d.Logger = log })
			secrets := driveCredentials(t, h, tc.redacting)

			out := buf.String()
			for _, p := range credentialPrefixes {
				if strings.Contains(out, p) {
					t.Errorf("%q appears in the logs", p)
				}
			}
			for _, s := range secrets {
				if s != "" && strings.Contains(out, s[len(s)-12:]) {
					t.Errorf("the tail of a credential appears in the logs")
				}
			}
			var requests, failures int
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				var rec map[string]any
				if err := json.Unmarshal([]byte(line), &rec); err != nil {
					t.Fatalf("not a JSON line: %q", line)
				}
				id, _ := rec["requestId"].(string)
				if id == "" {
					t.Errorf("line without requestId: %s", line)
				}
				switch rec["msg"] {
				case "request":
					requests++
				case "request failed":
					failures++
				}
			}
			if requests < 15 || failures != 1 {
				t.Fatalf("%d access lines, %d error lines; logs:\n%s", requests, failures, out)
			}
			if t.Failed() {
				t.Logf("logs:\n%s", out)
			}
		})
	}
}
