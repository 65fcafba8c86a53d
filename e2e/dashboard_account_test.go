package e2e

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/paygate/paygate/e2e/browser"
	"github.com/paygate/paygate/notify"
)

// TestDashboardPasswordInBrowser: a merchant signed in on two devices
// changes its password on the settings page (a wrong current password and
// a mistyped confirmation are refused there); the other device is signed
// out. Signed in there again, it is signed out once more by "sign out every
// other session". Then, having forgotten the password, the merchant asks
// for a link on the sign-in page, opens the e-mailed link, sets a new
// password (every session ends, the link works once) and signs in with it.
// Screenshots dash-security, dash-forgot and dash-reset.
func TestDashboardPasswordInBrowser(t *testing.T) {
	needBrowser(t)
	box := &notify.Outbox{}
	_, hs := pagesServerMailing(t, box)
	base := hs.URL
	const email, first = "owner@password.example", "correct horse battery staple"
	b := browser.Start(t, browser.Timeout(3*time.Minute), browser.ActionTimeout(30*time.Second))
	desk := b.NewTab(browser.Desktop)
	signUpInBrowser(desk, base, "Blue Bottle Roasters", email, first)
	phone := b.NewTab(browser.Phone)
	signInInBrowser(phone, base, "/dashboard/test/payments", email, first, "#payments")

	// Refused on the page: a wrong current password, a mistyped copy.
	changePassword := func(current, next, again string) {
		desk.Navigate(base + "/dashboard/test/settings#security")
		desk.SetValue("#currentPassword", current)
		desk.SetValue("#newPassword", next)
		desk.SetValue("#confirmPassword", again)
		desk.Click("#password-form button[type=submit]")
	}
	changePassword("not my password at all", "a second long password", "a second long password")
	desk.WaitText("#security .error", "currentPassword: is not the account's password")
	changePassword(first, "a second long password", "a second long passwort")
	desk.WaitText("#security .error", "differs from the new password")
	changePassword(first, "a second long password", "a second long password")
	desk.WaitText(".notice", "Password changed")

	// The phone's session ended with the change.
	phone.Navigate(base + "/dashboard/test/payments")
	phone.WaitText(".notice", "Your session ended")
	signInInBrowser(phone, base, "/dashboard/test/payments", email, "a second long password", "#payments")
	// The list of sessions: this one, and the phone's, signed out from here.
	desk.Navigate(base + "/dashboard/test/settings#security")
	desk.WaitText("#sessions", "This session")
	var rows []string
	desk.Eval(`[...document.querySelectorAll("#sessions tbody tr")].map(r => r.innerText)`, &rows)
	if len(rows) != 2 || !strings.Contains(rows[1], "This session") || !strings.Contains(rows[0], "127.0.0.1") ||
		!strings.Contains(rows[0], " on ") {
		t.Fatalf("sessions listed: %q", rows)
	}
	desk.Screenshot("dash-security")
	desk.Click("#sessions tbody tr:first-child button")
	desk.WaitText(".notice", "That session is signed out")
	phone.Navigate(base + "/dashboard/test/payments")
	phone.WaitText(".notice", "Your session ended")
	signInInBrowser(phone, base, "/dashboard/test/payments", email, "a second long password", "#payments")
	desk.Navigate(base + "/dashboard/test/settings")
	desk.Click("#logout-others-form button[type=submit]")
	desk.WaitText(".notice", "Every other session of your account is signed out")
	phone.Navigate(base + "/dashboard/test/payments")
	phone.WaitText(".notice", "Your session ended")
	desk.Navigate(base + "/dashboard/test/payments")
	desk.WaitVisible("#payments")

	// Forgotten: the link from the sign-in page.
	signInInBrowser(phone, base, "/dashboard/test/payments", email, "a second long password", "#payments")
	desk.Click(".logout button")
	desk.WaitText(".notice", "signed out")
	desk.Click("#forgot")
	desk.WaitVisible("#forgot-form")
	desk.SetValue("#email", email)
	desk.Click("#forgot-form button[type=submit]")
	desk.WaitText("#sent", email)
	desk.Screenshot("dash-forgot")
	mail := waitMail(t, box, "Choose a new paygate password", 1)
	link := regexp.MustCompile(`http://\S+/dashboard/reset\?token=\S+`).FindString(mail.Body)
	if mail.To != email || !strings.HasPrefix(link, base+"/dashboard/reset?token=svc_reset_") {
		t.Fatalf("reset e-mail to %q: %q", mail.To, mail.Body)
	}
	desk.Navigate(link)
	desk.WaitVisible("#reset-form")
	desk.Screenshot("dash-reset")
	desk.SetValue("#password", "a third long password")
	desk.SetValue("#confirm", "a third long passwort")
	desk.Click("#reset-form button[type=submit]")
	desk.WaitText(".error", "The two passwords differ")
	desk.SetValue("#password", "a third long password")
	desk.SetValue("#confirm", "a third long password")
	desk.Click("#reset-form button[type=submit]")
	desk.WaitText(".notice", "Your new password is set")
	// Every session ended: the phone's too.
	phone.Navigate(base + "/dashboard/test/payments")
	phone.WaitText(".notice", "Your session ended")
	// The old password no longer signs in; the new one does.
	desk.SetValue("#email", email)
	desk.SetValue("#password", "a second long password")
	desk.Click("#login-form button[type=submit]")
	desk.WaitText(".error", "invalid email or password")
	signInInBrowser(desk, base, "/dashboard/test/payments", email, "a third long password", "#payments")
	// The link worked once.
	desk.Navigate(link)
	desk.SetValue("#password", "a fourth long password")
	desk.SetValue("#confirm", "a fourth long password")
	desk.Click("#reset-form button[type=submit]")
	desk.WaitText(".error", "is not a valid reset link")
	desk.WaitVisible("#ask-again")
	// The refusals above are pages answered 400 or 401, which the browser
	// logs as failed loads; nothing else may be reported.
	for _, tab := range []*browser.Tab{desk, phone} {
		for _, e := range tab.ConsoleErrors() {
			if e.Kind != "log.network" || !(strings.Contains(e.Text, "status of 400") || strings.Contains(e.Text, "status of 401")) {
				t.Errorf("the page reported %s", e)
			}
		}
	}
}

// waitMail waits for the n-th e-mail box was sent whose subject starts
// with subject.
func waitMail(t *testing.T, box *notify.Outbox, subject string, n int) notify.Message {
	t.Helper()
	seen := 0
	for i := 1; ; i++ {
		m, ok := box.Wait(i, 15*time.Second)
		if !ok {
			t.Fatalf("%d e-mails %q sent, want %d", seen, subject, n)
		}
		if strings.HasPrefix(m.Subject, subject) {
			if seen++; seen == n {
				return m
			}
		}
	}
}
