package e2e

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/paygate/paygate/e2e/browser"
	"github.com/paygate/paygate/notify"
)

var confirmLinkRe = regexp.MustCompile(`http://\S+/dashboard/confirm-email\?token=\S+`)

// TestDashboardEmailConfirmationInBrowser: a new account is asked to
// confirm its address (a note on every page; the KYB form waits for it);
// it asks for the link again, opens it signed out on another device (asked
// to sign in, and told what to do if it never signed up), signs in and
// confirms; the older link no longer works. Then a stranger signs up with
// someone else's address and names a receiving wallet; the address's
// owner takes the account over by "Forgot your password": the page says
// what was removed, the stranger is signed out and the wallet is gone.
// Screenshots dash-confirm-banner, dash-confirm-signin, dash-confirm and
// dash-reclaimed. The address is then changed from Settings (screenshot
// dash-email-change).
func TestDashboardEmailConfirmationInBrowser(t *testing.T) {
	needBrowser(t)
	box := &notify.Outbox{}
	_, hs := pagesServerMailing(t, box)
	base := hs.URL
	const email, pw = "owner@confirm.example", "correct horse battery staple"
	const subject = "Confirm your paygate e-mail"
	b := browser.Start(t, browser.Timeout(3*time.Minute), browser.ActionTimeout(30*time.Second))
	desk := b.NewTab(browser.Desktop)
	signUpInBrowser(desk, base, "Blue Bottle Roasters", email, pw)
	desk.WaitText("#confirm-banner", email)
	desk.Navigate(base + "/dashboard/test/business")
	desk.WaitVisible("#kyb-unconfirmed")
	if count(desk, "#kyb-form") != 0 {
		t.Fatal("the KYB form is offered before the address is confirmed")
	}
	desk.Screenshot("dash-confirm-banner")
	first := confirmLinkRe.FindString(waitMail(t, box, subject, 1).Body)
	desk.Click("#confirm-again")
	desk.WaitText(".notice", "A new confirmation link is on its way")
	mail := waitMail(t, box, subject, 2)
	second := confirmLinkRe.FindString(mail.Body)
	if mail.To != email || !strings.HasPrefix(first, base+"/dashboard/confirm-email?token=svc_confirm_") || second == "" || second == first {
		t.Fatalf("confirmation e-mails to %q: %q, %q", mail.To, first, second)
	}

	// Opened signed out: sign in first; the stranger's way out is told.
	phone := b.NewTab(browser.Phone)
	phone.Navigate(second)
	phone.WaitVisible("#confirm-signin")
	phone.WaitText("#confirm-stranger", "choose a password")
	phone.Screenshot("dash-confirm-signin")
	phone.Click("#confirm-signin-link")
	phone.SetValue("#email", email)
	phone.SetValue("#password", pw)
	phone.Click("#login-form button[type=submit]")
	phone.WaitText("#confirm-who", email)
	phone.Screenshot("dash-confirm")
	// The first link was replaced by the second.
	desk.Navigate(first)
	desk.Click("#confirm-form button[type=submit]")
	desk.WaitText(".error", "not a valid confirmation link")
	desk.WaitVisible("#confirm-new-link")
	phone.Click("#confirm-form button[type=submit]")
	phone.WaitText(".notice", "E-mail address confirmed")
	desk.Navigate(base + "/dashboard/test/business")
	desk.WaitVisible("#kyb-form")
	if count(desk, "#confirm-banner") != 0 {
		t.Fatal("the note stays after the address is confirmed")
	}

	// The address changed from Settings: a link to the new address, opened
	// signed in, makes the change; the old address is told.
	const moved = "team@confirm.example"
	desk.Navigate(base + "/dashboard/test/settings")
	desk.SetValue("#newEmail", moved)
	desk.SetValue("#emailPassword", pw)
	desk.Click("#email-form button[type=submit]")
	desk.WaitText(".notice", "A link is on its way to the new address")
	changeMail := waitMail(t, box, "Confirm your new paygate e-mail", 1)
	changeLink := regexp.MustCompile(`http://\S+/dashboard/confirm-email\?change=1&token=\S+`).FindString(changeMail.Body)
	if changeMail.To != moved || changeLink == "" {
		t.Fatalf("change e-mail to %q: %q", changeMail.To, changeMail.Body)
	}
	if told := waitMail(t, box, "Your paygate e-mail address is to change", 1); told.To != email {
		t.Fatalf("the request's notice went to %q", told.To)
	}
	desk.Navigate(changeLink)
	desk.WaitVisible("#confirm-change")
	desk.Screenshot("dash-email-change")
	desk.Click("#confirm-form button[type=submit]")
	desk.WaitText(".notice", "E-mail address changed")
	desk.WaitText("#current-email", moved)
	if told := waitMail(t, box, "Your paygate e-mail address was changed", 1); told.To != email || strings.Contains(told.Body, moved) {
		t.Fatalf("the change's notice to %q: %q", told.To, told.Body)
	}

	// A stranger takes someone's address first and names a wallet.
	const victim = "owner@taken.example"
	stranger := b.NewTab(browser.Desktop)
	signUpInBrowser(stranger, base, "Totally Real Shop", victim, "the stranger's password")
	stranger.Navigate(base + "/dashboard/test/settings")
	stranger.SetValue("#evm", "0x52908400098527886E0F7030069857D2E4169EE7")
	stranger.Click("#settings-form button[type=submit]")
	stranger.WaitText(".notice", "Settings saved")
	// The owner takes it over with a reset link.
	owner := b.NewTab(browser.Desktop)
	owner.Navigate(base + "/dashboard/forgot")
	owner.SetValue("#email", victim)
	owner.Click("#forgot-form button[type=submit]")
	owner.WaitText("#sent", victim)
	reset := waitMail(t, box, "Choose a new paygate password", 1)
	if reset.To != victim || !strings.Contains(reset.Body, "never confirmed") {
		t.Fatalf("reset e-mail to %q: %q", reset.To, reset.Body)
	}
	owner.Navigate(regexp.MustCompile(`http://\S+/dashboard/reset\?token=\S+`).FindString(reset.Body))
	owner.SetValue("#password", "the owner's own password")
	owner.SetValue("#confirm", "the owner's own password")
	owner.Click("#reset-form button[type=submit]")
	owner.WaitText("#reclaimed", "removed")
	owner.Screenshot("dash-reclaimed")
	signInInBrowser(owner, base, "/dashboard/test/settings", victim, "the owner's own password", "#settings-form")
	var wallet string
	owner.Eval(`document.querySelector("#evm").value`, &wallet)
	if wallet != "" {
		t.Fatalf("the stranger's wallet %q is still the account's", wallet)
	}
	if count(owner, "#confirm-banner") != 0 {
		t.Fatal("the reset did not confirm the address")
	}
	stranger.Navigate(base + "/dashboard/test/settings")
	stranger.WaitText(".notice", "Your session ended")
	for _, tab := range []*browser.Tab{desk, phone, stranger, owner} {
		for _, e := range tab.ConsoleErrors() {
			if e.Kind != "log.network" || !strings.Contains(e.Text, "status of 400") {
				t.Errorf("the page reported %s", e)
			}
		}
	}
}

// count is how many elements sel matches on the tab's page.
func count(tab *browser.Tab, sel string) int {
	n := -1
	tab.Eval(`document.querySelectorAll(`+strconv.Quote(sel)+`).length`, &n)
	return n
}
