package api_test

import (
	"context"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
	"github.com/paygate/paygate/notify"
)

// mailbox keeps the e-mails a server sends (after the answer): the
// confirmation links apart (confirms), every other one in the Outbox, whose
// n-th waitFor waits for.
type mailbox struct {
	notify.Outbox
	confirms notify.Outbox
}

func (m *mailbox) Send(ctx context.Context, msg notify.Message) error {
	if strings.HasPrefix(msg.Subject, "Confirm your paygate e-mail") {
		return m.confirms.Send(ctx, msg)
	}
	return m.Outbox.Send(ctx, msg)
}

func (m *mailbox) count() int { return m.Count() }

func (m *mailbox) waitFor(t *testing.T, n int) notify.Message {
	t.Helper()
	msg, ok := m.Wait(n, 10*time.Second)
	if !ok {
		t.Fatalf("%d e-mails sent, want %d", m.Count(), n)
	}
	return msg
}

var resetLink = regexp.MustCompile(`https://pay\.example\.com/dashboard/reset\?token=(\S+)`)

// resetToken is the token of the link in a reset e-mail.
func resetToken(t *testing.T, msg notify.Message) string {
	t.Helper()
	return linkToken(t, resetLink, msg)
}

// linkToken is the token of the link link finds in msg.
func linkToken(t *testing.T, link *regexp.Regexp, msg notify.Message) string {
	t.Helper()
	m := link.FindStringSubmatch(msg.Body)
	if m == nil {
		t.Fatalf("no link %s in %q", link, msg.Body)
	}
	tok, err := url.QueryUnescape(m[1])
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func signIn(t *testing.T, h *harness, email, password string) string {
	t.Helper()
	r := h.do("POST", "/api/auth/login", "", map[string]any{"email": email, "password": password})
	expect(t, r, 200, "")
	return r.str("data", "sessionToken")
}

// TestChangePassword: the current password is checked, the new one
// replaces it, and the account's other sessions are signed out while the
// calling one stays signed in.
func TestChangePassword(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		m := h.signup()
		other1, other2 := signIn(t, h, m.Email, "correct horse battery"), signIn(t, h, m.Email, "correct horse battery")
		b := h.signup()

		expectField(t, h.do("POST", "/api/auth/password", m.Session, map[string]any{"currentPassword": "wrong password!!",
			"newPassword": "a new long password"}), "currentPassword")
		expectField(t, h.do("POST", "/api/auth/password", m.Session, map[string]any{"currentPassword": "correct horse battery",
			"newPassword": "short"}), "newPassword")
		expectField(t, h.do("POST", "/api/auth/password", m.Session, map[string]any{"currentPassword": "correct horse battery",
			"newPassword": "correct horse battery"}), "newPassword")
		expectField(t, h.do("POST", "/api/auth/password", m.Session, map[string]any{"newPassword": "a new long password"}), "currentPassword")
		expectField(t, h.do("POST", "/api/auth/password", m.Session, "{"), "body")
		expect(t, h.do("POST", "/api/auth/password", m.TestKey, map[string]any{"currentPassword": "correct horse battery",
			"newPassword": "a new long password"}), 401, "UNAUTHORIZED")
		// Nothing changed by the refusals.
		for _, s := range []string{m.Session, other1, other2} {
			expect(t, h.do("GET", "/api/merchant", s, nil), 200, "")
		}

		r := h.do("POST", "/api/auth/password", m.Session, map[string]any{"currentPassword": "correct horse battery",
			"newPassword": "a new long password"})
		expect(t, r, 200, "")
		if got := r.decimal("data", "sessionsSignedOut"); got != "2" {
			t.Fatalf("sessionsSignedOut %v, want 2", got)
		}
		expect(t, h.do("GET", "/api/merchant", m.Session, nil), 200, "")
		for _, s := range []string{other1, other2} {
			expect(t, h.do("GET", "/api/merchant", s, nil), 401, "UNAUTHORIZED")
		}
		expect(t, h.do("POST", "/api/auth/login", "", map[string]any{"email": m.Email, "password": "correct horse battery"}), 401, "UNAUTHORIZED")
		signIn(t, h, m.Email, "a new long password")
		// Another merchant's account and sessions are untouched.
		expect(t, h.do("GET", "/api/merchant", b.Session, nil), 200, "")
		signIn(t, h, b.Email, "correct horse battery")

		// The old password no longer passes as the current one.
		expectField(t, h.do("POST", "/api/auth/password", m.Session, map[string]any{"currentPassword": "correct horse battery",
			"newPassword": "yet another long password"}), "currentPassword")
	})
}

// TestLogoutOthers: every other session of the account is signed out, the
// calling one stays; another merchant's sessions are untouched.
func TestLogoutOthers(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		m, b := h.signup(), h.signup()
		other := signIn(t, h, m.Email, "correct horse battery")
		r := h.do("POST", "/api/auth/logout-others", m.Session, nil)
		expect(t, r, 200, "")
		if got := r.decimal("data", "sessionsSignedOut"); got != "1" {
			t.Fatalf("sessionsSignedOut %v, want 1", got)
		}
		expect(t, h.do("GET", "/api/merchant", other, nil), 401, "UNAUTHORIZED")
		expect(t, h.do("GET", "/api/merchant", m.Session, nil), 200, "")
		expect(t, h.do("GET", "/api/merchant", b.Session, nil), 200, "")
		r = h.do("POST", "/api/auth/logout-others", m.Session, nil)
		expect(t, r, 200, "")
		if got := r.decimal("data", "sessionsSignedOut"); got != "0" {
			t.Fatalf("a second time: sessionsSignedOut %v, want 0", got)
		}
		expect(t, h.do("POST", "/api/auth/logout-others", m.TestKey, nil), 401, "UNAUTHORIZED")
	})
}

// TestSignedInSessions: the account lists its signed-in sessions, the
// newest first, with the browser and address each signed in from and the
// caller's marked current; one is signed out by id (the caller's own too);
// another account's, an ended or a malformed id is refused, and another
// account's sessions never show.
func TestSignedInSessions(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		m, b := h.signup(), h.signup()
		login := h.doWith("POST", "/api/auth/login", "", map[string]any{"email": m.Email, "password": "correct horse battery"},
			map[string]string{"User-Agent": "Mozilla/5.0 (X11; Linux x86_64) Firefox/140.0 " + strings.Repeat("é", 200)})
		expect(t, login, 200, "")
		phone := login.str("data", "sessionToken")

		r := h.do("GET", "/api/auth/sessions", m.Session, nil)
		expect(t, r, 200, "")
		list := r.list()
		if len(list) != 2 {
			t.Fatalf("%d sessions, want 2: %s", len(list), r.Raw)
		}
		newest, first := list[0].(map[string]any), list[1].(map[string]any)
		ua, _ := newest["userAgent"].(string)
		if newest["current"] != false || first["current"] != true || !strings.HasPrefix(ua, "Mozilla/5.0 (X11; Linux x86_64) Firefox/140.0 é") ||
			len(ua) > 300 || !utf8.ValidString(ua) || newest["ipAddress"] != "127.0.0.1" {
			t.Fatalf("sessions %s", r.Raw)
		}
		for _, s := range list {
			if id := s.(map[string]any)["id"]; id == "" || id == nil {
				t.Fatalf("no id: %s", r.Raw)
			}
		}
		// Another account's session: not found, and still signed in.
		theirs := h.do("GET", "/api/auth/sessions", b.Session, nil)
		expect(t, theirs, 200, "")
		if len(theirs.list()) != 1 {
			t.Fatalf("b sees %s", theirs.Raw)
		}
		theirID := theirs.list()[0].(map[string]any)["id"].(string)
		expect(t, h.do("DELETE", "/api/auth/sessions/"+theirID, m.Session, nil), 404, "NOT_FOUND")
		expect(t, h.do("GET", "/api/merchant", b.Session, nil), 200, "")
		expectField(t, h.do("DELETE", "/api/auth/sessions/not-a-uuid", m.Session, nil), "id")

		// The other one signed out: gone from the list, its token refused.
		out := h.do("DELETE", "/api/auth/sessions/"+newest["id"].(string), m.Session, nil)
		expect(t, out, 200, "")
		if out.data()["current"] != false || out.data()["signedOut"] != true {
			t.Fatalf("signed out %s", out.Raw)
		}
		expect(t, h.do("GET", "/api/merchant", phone, nil), 401, "UNAUTHORIZED")
		expect(t, h.do("DELETE", "/api/auth/sessions/"+newest["id"].(string), m.Session, nil), 404, "NOT_FOUND")
		if r := h.do("GET", "/api/auth/sessions", m.Session, nil); len(r.list()) != 1 {
			t.Fatalf("after the sign-out %s", r.Raw)
		}
		// Its own: a logout.
		self := h.do("DELETE", "/api/auth/sessions/"+first["id"].(string), m.Session, nil)
		expect(t, self, 200, "")
		if self.data()["current"] != true {
			t.Fatalf("own sign-out %s", self.Raw)
		}
		expect(t, h.do("GET", "/api/auth/sessions", m.Session, nil), 401, "UNAUTHORIZED")
		expect(t, h.do("GET", "/api/auth/sessions", b.TestKey, nil), 401, "UNAUTHORIZED")
	})
}

// TestPasswordReset: a reset request is answered alike whether or not an
// account uses the address; the e-mailed link (to the configured public
// address, never the request's Host) sets the password once and signs out
// every session; a newer link ends the older; the links of an hour are
// bounded; a used, foreign or expired token is refused.
func TestPasswordReset(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		box := &mailbox{}
		h := newHarness(t, st, func(d *api.Deps) { d.Mailer, d.ResetBaseURL = box, "https://pay.example.com/" })
		m, b := h.signup(), h.signup()
		other := signIn(t, h, m.Email, "correct horse battery")

		unknown := h.doWith("POST", "/api/auth/password-reset", "", map[string]any{"email": "nobody@example.com"}, map[string]string{"Host": "evil.example"})
		expect(t, unknown, 202, "")
		known := h.doWith("POST", "/api/auth/password-reset", "", map[string]any{"email": strings.ToUpper(m.Email)}, map[string]string{"Host": "evil.example"})
		expect(t, known, 202, "")
		if unknown.str("message") != known.str("message") || known.str("message") == "" {
			t.Fatalf("the answers differ: %q and %q", unknown.str("message"), known.str("message"))
		}
		first := box.waitFor(t, 1)
		if first.To != m.Email || strings.Contains(first.Body, "evil.example") {
			t.Fatalf("reset e-mail %+v", first)
		}
		firstToken := resetToken(t, first)
		time.Sleep(50 * time.Millisecond)
		if box.count() != 1 {
			t.Fatalf("%d e-mails: the unknown address got one", box.count())
		}
		expectField(t, h.do("POST", "/api/auth/password-reset", "", map[string]any{"email": "not an address"}), "email")

		// A second request: a new link; the first no longer works.
		expect(t, h.do("POST", "/api/auth/password-reset", "", map[string]any{"email": m.Email}), 202, "")
		token := resetToken(t, box.waitFor(t, 2))
		expectField(t, h.do("POST", "/api/auth/password-reset/confirm", "", map[string]any{"token": firstToken,
			"newPassword": "a new long password"}), "token")
		expectField(t, h.do("POST", "/api/auth/password-reset/confirm", "", map[string]any{"token": token, "newPassword": "short"}), "newPassword")
		expectField(t, h.do("POST", "/api/auth/password-reset/confirm", "", map[string]any{"token": "svc_sess_abc",
			"newPassword": "a new long password"}), "token")
		expectField(t, h.do("POST", "/api/auth/password-reset/confirm", "", map[string]any{"newPassword": "a new long password"}), "token")
		// The refusals changed nothing.
		expect(t, h.do("GET", "/api/merchant", m.Session, nil), 200, "")

		r := h.do("POST", "/api/auth/password-reset/confirm", "", map[string]any{"token": token, "newPassword": "a new long password"})
		expect(t, r, 200, "")
		for _, s := range []string{m.Session, other} {
			expect(t, h.do("GET", "/api/merchant", s, nil), 401, "UNAUTHORIZED")
		}
		expect(t, h.do("POST", "/api/auth/login", "", map[string]any{"email": m.Email, "password": "correct horse battery"}), 401, "UNAUTHORIZED")
		signIn(t, h, m.Email, "a new long password")
		expect(t, h.do("GET", "/api/merchant", b.Session, nil), 200, "")
		// Used once.
		expectField(t, h.do("POST", "/api/auth/password-reset/confirm", "", map[string]any{"token": token,
			"newPassword": "another long password"}), "token")
		signIn(t, h, m.Email, "a new long password")

		// At most five e-mails an hour per account, whoever asks (two sent
		// above): the answer stays the same.
		for range 4 {
			expect(t, h.do("POST", "/api/auth/password-reset", "", map[string]any{"email": m.Email}), 202, "")
		}
		last := resetToken(t, box.waitFor(t, 5))
		time.Sleep(50 * time.Millisecond)
		if box.count() != 5 {
			t.Fatalf("%d e-mails in the hour, want 5", box.count())
		}
		// The other account's own links are counted apart.
		expect(t, h.do("POST", "/api/auth/password-reset", "", map[string]any{"email": b.Email}), 202, "")
		bToken := resetToken(t, box.waitFor(t, 6))

		// An hour later the latest link has expired.
		st.SetClock(func() time.Time { return time.Now().Add(61 * time.Minute) })
		expectField(t, h.do("POST", "/api/auth/password-reset/confirm", "", map[string]any{"token": last,
			"newPassword": "another long password"}), "token")
		st.SetClock(time.Now)
		// A password changed from a session ends the links sent before.
		bs := signIn(t, h, b.Email, "correct horse battery")
		expect(t, h.do("POST", "/api/auth/password", bs, map[string]any{"currentPassword": "correct horse battery",
			"newPassword": "b's new long password"}), 200, "")
		expectField(t, h.do("POST", "/api/auth/password-reset/confirm", "", map[string]any{"token": bToken,
			"newPassword": "another long password"}), "token")
	})
}

// TestPasswordResetWithoutMailer: a server without a mailer (production
// without SMTP) or without its public address answers 503.
func TestPasswordResetWithoutMailer(t *testing.T) {
	for name, mutate := range map[string]func(*api.Deps){
		"no mailer":  func(d *api.Deps) { d.ResetBaseURL = "https://pay.example.com" },
		"no address": func(d *api.Deps) { d.Mailer = &mailbox{} },
	} {
		t.Run(name, func(t *testing.T) {
			st := storetest.Open(t, "sqlite")
			h := newHarness(t, st, mutate)
			m := h.signup()
			r := h.do("POST", "/api/auth/password-reset", "", map[string]any{"email": m.Email})
			expect(t, r, 503, "SERVICE_UNAVAILABLE")
			// Retrying will not set up SMTP: no Retry-After, no hint
			// promising it would.
			if r.Header.Get("Retry-After") != "" || r.str("hint") != "" {
				t.Fatalf("a 503 waiting cannot mend: %v %s", r.Header, r.Raw)
			}
		})
	}
}

// TestChangePasswordGuessesLimited: a stolen session cannot find the
// password by guessing the current one: the account's failed sign-in
// limit counts the wrong ones, and once it is reached even the right one
// is refused (401 with Retry-After; the session itself stays valid).
func TestChangePasswordGuessesLimited(t *testing.T) {
	h := signInLimitedHarness(t)
	m := h.signup()
	for i := range 10 {
		r := h.doWith("POST", "/api/auth/password", m.Session, map[string]any{"currentPassword": "guess number " + string(rune('a'+i)),
			"newPassword": "a new long password"}, map[string]string{"X-Forwarded-For": "203.0.113.7"})
		expectField(t, r, "currentPassword")
	}
	r := h.doWith("POST", "/api/auth/password", m.Session, map[string]any{"currentPassword": "correct horse battery",
		"newPassword": "a new long password"}, map[string]string{"X-Forwarded-For": "198.51.100.9"})
	expect(t, r, 401, "UNAUTHORIZED")
	if r.Header.Get("Retry-After") == "" {
		t.Fatalf("the account's block has no Retry-After: %s", r.Raw)
	}
	expect(t, h.doWith("GET", "/api/merchant", m.Session, nil, map[string]string{"X-Forwarded-For": "198.51.100.9"}), 200, "")
	// The password did not change.
	expect(t, h.doWith("POST", "/api/auth/login", "", map[string]any{"email": m.Email, "password": "a new long password"},
		map[string]string{"X-Forwarded-For": "192.0.2.1"}), 401, "UNAUTHORIZED")
}
