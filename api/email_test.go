package api_test

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
	"github.com/paygate/paygate/notify"
	"github.com/paygate/paygate/webhook"
)

var confirmLink = regexp.MustCompile(`https://pay\.example\.com/dashboard/confirm-email\?(?:change=1&)?token=(\S+)`)

// confirmToken is the token of the link in a confirmation e-mail.
func confirmToken(t *testing.T, msg notify.Message) string {
	t.Helper()
	return linkToken(t, confirmLink, msg)
}

// waitConfirm waits for the n-th confirmation e-mail.
func (m *mailbox) waitConfirm(t *testing.T, n int) notify.Message {
	t.Helper()
	msg, ok := m.confirms.Wait(n, 10*time.Second)
	if !ok {
		t.Fatalf("%d confirmation e-mails sent, want %d", m.confirms.Count(), n)
	}
	return msg
}

func mailingHarness(t *testing.T, st *models.Store, box *mailbox) *harness {
	return newHarness(t, st, func(d *api.Deps) {
		d.Mailer, d.ResetBaseURL = box, "https://pay.example.com/"
		d.WebhookPolicy = webhook.Policy{AllowLoopbackHTTP: true, Resolver: testResolver}
		d.Deliveries = &fakeRetrier{}
	})
}

var kybApp = map[string]any{"businessName": "Shop", "businessType": "llc", "country": "US", "contactName": "Ann",
	"contactEmail": "ann@example.com"}

// TestEmailConfirmation: sign-up e-mails a link; only the account's own
// signed-in holder confirms the address with it (the link with another
// account's session, or no session, confirms nothing); a newer link ends
// the older; until the address is confirmed the KYB application is
// refused, and nothing of it is stored.
func TestEmailConfirmation(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		box := &mailbox{}
		h := mailingHarness(t, st, box)
		r := h.do("POST", "/api/auth/signup", "", map[string]any{"email": "owner@shop.example", "password": "correct horse battery",
			"businessName": "Shop"})
		expect(t, r, 201, "")
		if r.data()["emailConfirmationSent"] != true || r.data()["merchant"].(map[string]any)["emailConfirmed"] != false ||
			r.data()["merchant"].(map[string]any)["emailConfirmedAt"] != nil {
			t.Fatalf("sign-up %s", r.Raw)
		}
		m := merchant{ID: r.str("data", "merchant", "id"), Email: "owner@shop.example", Session: r.str("data", "sessionToken")}
		other := h.signup()
		box.waitConfirm(t, 2)
		if box.confirms.Count() != 2 || box.Count() != 0 {
			t.Fatalf("%d confirmation and %d other e-mails", box.confirms.Count(), box.Count())
		}
		// Sent after the answers, by two goroutines: in either order.
		first, _ := box.confirms.Wait(1, time.Second)
		next, _ := box.confirms.Wait(2, time.Second)
		if first.To != m.Email {
			first, next = next, first
		}
		if first.To != m.Email || next.To != other.Email {
			t.Fatalf("sent to %q and %q", first.To, next.To)
		}
		token := confirmToken(t, first)

		// No KYB application until the address is confirmed.
		kyb := h.do("POST", "/api/kyb", m.Session, kybApp)
		expect(t, kyb, 403, "FORBIDDEN")
		expect(t, h.do("GET", "/api/kyb", m.Session, nil), 404, "NOT_FOUND")

		// The link with no session, another account's, or malformed.
		expect(t, h.do("POST", "/api/auth/email-confirmation/confirm", "", map[string]any{"token": token}), 401, "UNAUTHORIZED")
		expectField(t, h.do("POST", "/api/auth/email-confirmation/confirm", other.Session, map[string]any{"token": token}), "token")
		expectField(t, h.do("POST", "/api/auth/email-confirmation/confirm", m.Session, map[string]any{"token": "svc_reset_abc"}), "token")
		expectField(t, h.do("POST", "/api/auth/email-confirmation/confirm", m.Session, map[string]any{}), "token")
		for _, s := range []string{m.Session, other.Session} {
			if h.do("GET", "/api/merchant", s, nil).data()["emailConfirmed"] != false {
				t.Fatal("a refused link confirmed an address")
			}
		}

		// A new link ends the first.
		again := h.do("POST", "/api/auth/email-confirmation", m.Session, nil)
		expect(t, again, 202, "")
		second := confirmToken(t, box.waitConfirm(t, 3))
		expectField(t, h.do("POST", "/api/auth/email-confirmation/confirm", m.Session, map[string]any{"token": token}), "token")
		done := h.do("POST", "/api/auth/email-confirmation/confirm", m.Session, map[string]any{"token": second})
		expect(t, done, 200, "")
		if done.data()["emailConfirmed"] != true || done.str("data", "emailConfirmedAt") == "" {
			t.Fatalf("confirmed %s", done.Raw)
		}
		expect(t, h.do("POST", "/api/auth/email-confirmation/confirm", m.Session, map[string]any{"token": second}), 409, "CONFLICT")
		expect(t, h.do("POST", "/api/auth/email-confirmation", m.Session, nil), 409, "CONFLICT")
		if h.do("GET", "/api/merchant", other.Session, nil).data()["emailConfirmed"] != false {
			t.Fatal("another account was confirmed")
		}
		expect(t, h.do("POST", "/api/kyb", m.Session, kybApp), 201, "")

		// At most five links an hour: the sign-up's and four more.
		for range 4 {
			expect(t, h.do("POST", "/api/auth/email-confirmation", other.Session, nil), 202, "")
		}
		// The sixth is SPEC.md's 429: retryAfter (body and header) is when
		// the oldest of the five leaves the hour.
		tooMany := h.do("POST", "/api/auth/email-confirmation", other.Session, nil)
		expect(t, tooMany, 429, "RATE_LIMITED")
		wait, _ := tooMany.Body["retryAfter"].(float64)
		if wait < 3500 || wait > 3600 || tooMany.Header.Get("Retry-After") != strconv.Itoa(int(wait)) {
			t.Fatalf("429 %s, Retry-After %q", tooMany.Raw, tooMany.Header.Get("Retry-After"))
		}
		box.waitConfirm(t, 7)
		time.Sleep(50 * time.Millisecond)
		if n := box.confirms.Count(); n != 7 {
			t.Fatalf("%d confirmation e-mails, want 7", n)
		}
	})
}

// TestEmailConfirmationWithoutMailer: a server that sends no e-mail
// confirms no address and so does not hold the KYB application back.
func TestEmailConfirmationWithoutMailer(t *testing.T) {
	h := newHarness(t, storetest.Open(t, "sqlite"))
	r := h.do("POST", "/api/auth/signup", "", map[string]any{"email": "plain@shop.example", "password": "correct horse battery",
		"businessName": "Shop"})
	expect(t, r, 201, "")
	if r.data()["emailConfirmationSent"] != false {
		t.Fatalf("sign-up %s", r.Raw)
	}
	s := r.str("data", "sessionToken")
	expect(t, h.do("POST", "/api/auth/email-confirmation", s, nil), 503, "SERVICE_UNAVAILABLE")
	expect(t, h.do("POST", "/api/kyb", s, kybApp), 201, "")
}

// TestPasswordResetReclaimsAnUnconfirmedAccount: a stranger signs up with
// someone's address first and sets the account up (webhook endpoint,
// receiving wallets and a proof, embedding origins, a KYB application from
// before confirmations); the address's owner takes it over with a reset
// link, which confirms the address and takes all that back, so nothing of
// the stranger's reaches the owner's payments. A confirmed account's reset
// takes nothing.
func TestPasswordResetReclaimsAnUnconfirmedAccount(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		box := &mailbox{}
		h := mailingHarness(t, st, box)
		ctx := context.Background()
		stranger := h.signup()
		r := h.do("POST", "/api/auth/signup", "", map[string]any{"email": stranger.Email, "password": "another horse battery",
			"businessName": "Shop"})
		expect(t, r, 409, "CONFLICT")
		if r.str("hint") == "" {
			t.Fatalf("the taken address's answer says nothing of a reset: %s", r.Raw)
		}
		h.endpoint(stranger.Session, nil)
		expect(t, h.do("PATCH", "/api/merchant", stranger.Session, map[string]any{"embedOrigins": []string{"https://evil.example"}}), 200, "")
		if _, err := st.RecordWalletProof(ctx, &models.WalletProof{MerchantID: stranger.ID, Family: "evm", Address: evmA,
			Message: "m", Signature: "s", ProvedAt: time.Now()}, 10); err != nil {
			t.Fatal(err)
		}
		// An application submitted before confirmations were asked for.
		if err := st.SubmitKYB(ctx, &models.KYBApplication{MerchantID: stranger.ID, BusinessName: "Shop", BusinessType: "llc",
			Country: "US", ContactName: "A", ContactEmail: "a@example.com"}); err != nil {
			t.Fatal(err)
		}
		link := h.link(stranger.TestKey, nil)
		delivery := h.emit(stranger.ID, models.ModeTest, "checkout.completed")

		expect(t, h.do("POST", "/api/auth/password-reset", "", map[string]any{"email": stranger.Email}), 202, "")
		mail := box.waitFor(t, 1)
		if !regexp.MustCompile(`never confirmed`).MatchString(mail.Body) {
			t.Fatalf("the reset e-mail does not say what it takes back: %q", mail.Body)
		}
		done := h.do("POST", "/api/auth/password-reset/confirm", "", map[string]any{"token": resetToken(t, mail), "newPassword": "the owner's own password"})
		expect(t, done, 200, "")
		took, _ := done.data()["reclaimed"].(map[string]any)
		if took["apiKeysRevoked"] != 1.0 || took["webhookEndpointsRemoved"] != 1.0 || took["walletProofsWithdrawn"] != 1.0 ||
			took["walletsCleared"] != true || took["kybWithdrawn"] != true || done.data()["emailConfirmed"] != true {
			t.Fatalf("reclaimed %s", done.Raw)
		}
		// The stranger is out: session and key.
		expect(t, h.do("GET", "/api/merchant", stranger.Session, nil), 401, "UNAUTHORIZED")
		expect(t, h.do("GET", "/api/payment-links", stranger.TestKey, nil), 401, "UNAUTHORIZED")
		// The owner holds a clean, confirmed account; the test-mode records stay.
		owner := signIn(t, h, stranger.Email, "the owner's own password")
		me := h.do("GET", "/api/merchant", owner, nil)
		if me.data()["emailConfirmed"] != true || me.str("data", "wallets", "evm") != "" || me.str("data", "wallets", "solana") != "" ||
			len(me.data()["embedOrigins"].([]any)) != 0 || me.str("data", "kybStatus") != "none" {
			t.Fatalf("after the reset %s", me.Raw)
		}
		for _, path := range []string{"/api/webhooks", "/api/developer/keys", "/api/merchant/wallet-proofs"} {
			if l := h.do("GET", path, owner, nil); l.Status != 200 || len(l.list()) != 0 {
				t.Fatalf("%s after the reset: %s", path, l.Raw)
			}
		}
		expect(t, h.do("GET", "/api/kyb", owner, nil), 404, "NOT_FOUND")
		expect(t, h.do("GET", "/api/payment-links/"+link+"?mode=test", owner, nil), 200, "")
		if l, _, err := st.WebhookDeliveries(ctx, models.Scope{MerchantID: stranger.ID, Mode: models.ModeTest}, models.DeliveryFilter{},
			models.Page{Limit: 10}); err != nil || len(l) != 1 || l[0].ID != delivery[0] || l[0].Status != models.DeliveryFailed {
			t.Fatalf("the removed endpoint's pending delivery: %+v %v", l, err)
		}
		expect(t, h.do("POST", "/api/kyb", owner, kybApp), 201, "")

		// A confirmed account's reset takes nothing back.
		b := h.signup()
		confirmed := box.waitConfirm(t, 2)
		expect(t, h.do("POST", "/api/auth/email-confirmation/confirm", b.Session, map[string]any{"token": confirmToken(t, confirmed)}), 200, "")
		expect(t, h.do("POST", "/api/auth/password-reset", "", map[string]any{"email": b.Email}), 202, "")
		mail = box.waitFor(t, 2)
		if regexp.MustCompile(`never confirmed`).MatchString(mail.Body) {
			t.Fatalf("a confirmed account's reset e-mail warns: %q", mail.Body)
		}
		done = h.do("POST", "/api/auth/password-reset/confirm", "", map[string]any{"token": resetToken(t, mail), "newPassword": "b's new password"})
		expect(t, done, 200, "")
		if took, _ := done.data()["reclaimed"].(map[string]any); took["apiKeysRevoked"] != 0.0 || took["walletsCleared"] != false {
			t.Fatalf("a confirmed account's reset: %s", done.Raw)
		}
		expect(t, h.do("GET", "/api/payment-links", b.TestKey, nil), 200, "")
		bs := signIn(t, h, b.Email, "b's new password")
		if h.do("GET", "/api/merchant", bs, nil).str("data", "wallets", "evm") == "" {
			t.Fatal("a confirmed account's wallets were cleared")
		}

		// An account an operator approved (before confirmations) is the
		// address's: its reset confirms it and takes nothing (its live key
		// and wallets go on taking payments). A rejected application, and
		// the operator's note, stay.
		resetOf := func(email string, n int) resp {
			expect(t, h.do("POST", "/api/auth/password-reset", "", map[string]any{"email": email}), 202, "")
			r := h.do("POST", "/api/auth/password-reset/confirm", "", map[string]any{"token": resetToken(t, box.waitFor(t, n)),
				"newPassword": "yet another password"})
			expect(t, r, 200, "")
			return r
		}
		live := h.withLive(h.signup())
		took, _ = resetOf(live.Email, 3).data()["reclaimed"].(map[string]any)
		if took["apiKeysRevoked"] != 0.0 || took["walletsCleared"] != false {
			t.Fatalf("an approved account's reset took %v", took)
		}
		expect(t, h.do("GET", "/api/payment-links", live.LiveKey, nil), 200, "")
		rejected := h.signup()
		if err := st.SubmitKYB(ctx, &models.KYBApplication{MerchantID: rejected.ID, BusinessName: "Shop", BusinessType: "llc",
			Country: "US", ContactName: "A", ContactEmail: "a@example.com"}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.ReviewKYB(ctx, rejected.ID, false, "registration unreadable", "", &models.Notification{Kind: "kyb.reviewed", Subject: "s", Body: "b"}); err != nil {
			t.Fatal(err)
		}
		took, _ = resetOf(rejected.Email, 4).data()["reclaimed"].(map[string]any)
		if took["apiKeysRevoked"] != 1.0 || took["kybWithdrawn"] != false {
			t.Fatalf("a rejected account's reset took %v", took)
		}
		rs := signIn(t, h, rejected.Email, "yet another password")
		if k := h.do("GET", "/api/kyb", rs, nil); k.str("data", "status") != "rejected" || k.str("data", "reviewNote") != "registration unreadable" {
			t.Fatalf("the rejected application after the reset: %s", k.Raw)
		}
	})
}

// TestEmailChange: the account's address changes, with the current
// password, to an address proven by a link sent there and opened signed in;
// the old address is told of the request and of the change; sign-in then
// takes the new address only. A wrong password, the same address, one
// another account uses (then, or by the time the link is opened) change
// nothing.
func TestEmailChange(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		box := &mailbox{}
		h := mailingHarness(t, st, box)
		m := h.signup()
		box.waitConfirm(t, 1)
		change := func(email, password string) resp {
			return h.do("POST", "/api/auth/email-change", m.Session, map[string]any{"newEmail": email, "currentPassword": password})
		}
		expectField(t, change("new@shop.example", "not the password"), "currentPassword")
		expectField(t, change(strings.ToUpper(m.Email), "correct horse battery"), "newEmail")
		expectField(t, change("nope", "correct horse battery"), "newEmail")
		expectField(t, change("", "correct horse battery"), "newEmail")
		expectField(t, change("new@shop.example", ""), "currentPassword")
		expect(t, h.do("POST", "/api/auth/email-change", m.Session, nil), 400, "BAD_REQUEST")
		expect(t, h.do("POST", "/api/auth/email-change", m.Session, "not json"), 400, "BAD_REQUEST")
		// An address another account uses is answered as any other (a 409
		// told anyone which addresses have accounts), and nothing is sent.
		taken := h.signup()
		expect(t, change(taken.Email, "correct horse battery"), 202, "")
		expect(t, h.do("POST", "/api/auth/email-change", "", map[string]any{"newEmail": "x@shop.example", "currentPassword": "correct horse battery"}), 401, "UNAUTHORIZED")
		if box.Count() != 0 {
			t.Fatalf("%d e-mails for refused changes", box.Count())
		}

		// A reset link sent to the old address before the change ends with it.
		expect(t, h.do("POST", "/api/auth/password-reset", "", map[string]any{"email": m.Email}), 202, "")
		oldReset := resetToken(t, box.waitFor(t, 1))
		expect(t, change("New@Shop.example", "correct horse battery"), 202, "")
		// Two e-mails, in either order: the link to the new address, the
		// notice to the old.
		box.waitFor(t, 3)
		var link notify.Message
		for i := 2; i <= 3; i++ {
			msg, _ := box.Wait(i, time.Second)
			switch msg.To {
			case "new@shop.example":
				link = msg
			case m.Email:
				// Fixed text: the address typed is anyone's words.
				if msg.Subject != "Your paygate e-mail address is to change" || strings.Contains(msg.Body, "new@shop.example") {
					t.Fatalf("the old address's notice: %+v", msg)
				}
			default:
				t.Fatalf("an e-mail to %s", msg.To)
			}
		}
		token := confirmToken(t, link)
		// Nothing changed yet; the link needs the account's session.
		if got := h.do("GET", "/api/merchant", m.Session, nil).str("data", "email"); got != m.Email {
			t.Fatalf("the address changed before its link was opened: %s", got)
		}
		expect(t, h.do("POST", "/api/auth/email-confirmation/confirm", taken.Session, map[string]any{"token": token}), 400, "BAD_REQUEST")
		r := h.do("POST", "/api/auth/email-confirmation/confirm", m.Session, map[string]any{"token": token})
		expect(t, r, 200, "")
		if r.str("data", "email") != "new@shop.example" || r.data()["emailConfirmed"] != true {
			t.Fatalf("after the change: %s", r.Raw)
		}
		notice := box.waitFor(t, 4)
		if notice.To != m.Email || notice.Subject != "Your paygate e-mail address was changed" || strings.Contains(notice.Body, "new@shop.example") ||
			strings.Contains(link.Body, "Shop") {
			t.Fatalf("the change's notice to the old address: %+v (link e-mail %q)", notice, link.Body)
		}
		// A reset link read for the old address before the change and
		// stored after it is not stored (its reader would take the account
		// back; a review helper raced them on both stores).
		if ok, err := st.CreatePasswordReset(context.Background(), m.ID, m.Email, "late-reset", time.Hour, 5); ok || !errors.Is(err, models.ErrAddressChanged) {
			t.Fatalf("a reset for the old address after the change: %v %v", ok, err)
		}
		expect(t, h.do("POST", "/api/auth/password-reset", "", map[string]any{"email": m.Email}), 202, "")
		expectField(t, h.do("POST", "/api/auth/password-reset/confirm", "", map[string]any{"token": oldReset, "newPassword": "the old reader's password"}), "token")
		expect(t, h.do("POST", "/api/auth/email-confirmation/confirm", m.Session, map[string]any{"token": token}), 409, "CONFLICT")
		expect(t, h.do("POST", "/api/auth/login", "", map[string]any{"email": m.Email, "password": "correct horse battery"}), 401, "UNAUTHORIZED")
		expect(t, h.do("POST", "/api/auth/login", "", map[string]any{"email": "new@shop.example", "password": "correct horse battery"}), 200, "")

		// An address taken between the request and the link: 409, nothing
		// changed, the link still unused.
		expect(t, change("later@shop.example", "correct horse battery"), 202, "")
		box.waitFor(t, 6)
		var late notify.Message
		for i := 5; i <= 6; i++ {
			if msg, _ := box.Wait(i, time.Second); msg.To == "later@shop.example" {
				late = msg
			}
		}
		expect(t, h.do("POST", "/api/auth/signup", "", map[string]any{"email": "later@shop.example", "password": "another fine password",
			"businessName": "Other"}), 201, "")
		expect(t, h.do("POST", "/api/auth/email-confirmation/confirm", m.Session, map[string]any{"token": confirmToken(t, late)}), 409, "CONFLICT")
		if got := h.do("GET", "/api/merchant", m.Session, nil).str("data", "email"); got != "new@shop.example" {
			t.Fatalf("a taken address became the account's: %s", got)
		}

		// A change link replaced by a newer one, or opened by another
		// (confirmed) account, is the token's 400, not "confirmed already".
		expect(t, change("first@shop.example", "correct horse battery"), 202, "")
		expect(t, change("second@shop.example", "correct horse battery"), 202, "")
		var firstLink, secondLink string
		for i := 7; i <= 10; i++ {
			msg := box.waitFor(t, i)
			switch msg.To {
			case "first@shop.example":
				firstLink = confirmToken(t, msg)
			case "second@shop.example":
				secondLink = confirmToken(t, msg)
			}
		}
		confirmedOther := h.signup()
		storetest.Exec(t, st, "UPDATE merchants SET email_confirmed_at = ? WHERE id = ?", time.Now().UTC(), confirmedOther.ID)
		expectField(t, h.do("POST", "/api/auth/email-confirmation/confirm", m.Session, map[string]any{"token": firstLink}), "token")
		expectField(t, h.do("POST", "/api/auth/email-confirmation/confirm", confirmedOther.Session, map[string]any{"token": secondLink}), "token")
		if got := h.do("GET", "/api/merchant", m.Session, nil).str("data", "email"); got != "new@shop.example" {
			t.Fatalf("a dead link changed the address: %s", got)
		}
	})
}
