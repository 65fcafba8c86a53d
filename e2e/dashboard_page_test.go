package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/auth"
	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/chain/devchain"
	"github.com/paygate/paygate/checkout"
	"github.com/paygate/paygate/e2e/browser"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
	"github.com/paygate/paygate/money"
	"github.com/paygate/paygate/notify"
	"github.com/paygate/paygate/web"
	"github.com/paygate/paygate/webhook"
)

// hookReceiver is a merchant's webhook endpoint that can be made to fail.
type hookReceiver struct {
	srv      *httptest.Server
	failing  atomic.Bool
	received atomic.Int64
	// secret, once set, is what the receiver verifies signatures with
	// (a 400 for a delivery it does not verify).
	secret atomic.Value
}

func newHookReceiver(t *testing.T) *hookReceiver {
	r := &hookReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.received.Add(1)
		if r.failing.Load() {
			http.Error(w, "hookReceiver is down", http.StatusInternalServerError)
			return
		}
		if secret, _ := r.secret.Load().(string); secret != "" {
			if err := webhook.Verify(secret, req.Header, body, webhook.DefaultTolerance, time.Now()); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// pageText is the text of the first element matching sel ("" if none).
func pageText(tab *browser.Tab, sel string) string {
	sj, _ := json.Marshal(sel)
	var s string
	tab.Eval(fmt.Sprintf(`(() => { const e = document.querySelector(%s); return e ? e.textContent.replace(/\s+/g, " ").trim() : "" })()`, sj), &s)
	return s
}

// reloadUntil loads url until the element's text contains want.
func reloadUntil(t *testing.T, tab *browser.Tab, url, sel, want string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		tab.Navigate(url)
		got := pageText(tab, sel)
		if strings.Contains(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s shows %q after %s, want %q", url, sel, got, within, want)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func href(tab *browser.Tab, sel string) string {
	sj, _ := json.Marshal(sel)
	var s string
	tab.Eval(fmt.Sprintf(`document.querySelector(%s).getAttribute("href")`, sj), &s)
	return s
}

// TestDashboardInBrowser is a merchant's first day in the dashboard, in
// Chromium against the whole stack: sign up, set a wallet, register a
// webhook hookReceiver, create a link, open its hosted page and pay it with the
// test wallet; see the payment with its timeline and its delivered
// webhook; make the hookReceiver fail, resend, see the failed attempt; fix it,
// resend, see it delivered; regenerate the test key; submit KYB; then a
// second merchant sees none of it. Screenshots of each page (dash-*.png)
// and the first load's weight and time.
func TestDashboardInBrowser(t *testing.T) {
	ps := newPageStack(t, 0)
	recv := newHookReceiver(t)
	b := browser.Start(t, browser.Timeout(6*time.Minute), browser.ActionTimeout(30*time.Second))
	tab := b.NewTab(browser.Desktop)
	base := ps.http.URL

	// Sign up.
	if st := tab.Navigate(base + "/dashboard/signup"); st != 200 {
		t.Fatalf("sign-up page %d", st)
	}
	m := tab.Metrics()
	t.Logf("sign-up page, first load: %s", m)
	tab.SetValue("#businessName", "Blue Bottle Roasters")
	tab.SetValue("#email", "owner@bluebottle.example")
	tab.SetValue("#password", "correct horse battery staple")
	tab.Click("#signup-form button[type=submit]")
	tab.WaitVisible("#new-key")
	firstKey := tab.Text("#new-key")
	if !strings.HasPrefix(firstKey, "svc_test_sk_") {
		t.Fatalf("welcome shows %q", firstKey)
	}
	tab.Screenshot("dash-welcome")

	// Settings: the receiving wallet.
	tab.Navigate(base + "/dashboard/test/settings")
	tab.SetValue("#evm", merchantWallet)
	tab.Click("#settings-form button[type=submit]")
	tab.WaitText(".notice", "Settings saved")
	tab.Screenshot("dash-settings")

	// Webhooks: the hookReceiver; the secret is shown once.
	tab.Navigate(base + "/dashboard/test/webhooks")
	tab.SetValue("#url", recv.srv.URL+"/paygate")
	tab.Click("#webhook-form button[type=submit]")
	tab.WaitVisible("#new-secret")
	firstSecret := tab.Text("#new-secret")
	if !strings.HasPrefix(firstSecret, "whsec_") {
		t.Fatalf("secret %q", firstSecret)
	}
	recv.secret.Store(firstSecret)
	// The secret rotated with a day's overlap: the receiver, still holding
	// the first secret, keeps verifying every delivery below.
	tab.Click(".endpoint details.rotate summary")
	tab.Click(".endpoint form[action$='/rotate'] button[type=submit]")
	tab.WaitVisible("#previous-secret")
	if s := tab.Text("#new-secret"); !strings.HasPrefix(s, "whsec_") || s == firstSecret {
		t.Fatalf("rotated secret %q", s)
	}
	if got := pageText(tab, "#previous-secret"); !strings.Contains(got, "also signs every delivery until") {
		t.Fatalf("the overlap: %q", got)
	}

	// A payment link with its hosted page and QR code.
	tab.Navigate(base + "/dashboard/test/links")
	tab.SetValue("#name", "Ethiopia Yirgacheffe, 250 g")
	tab.SetValue("#description", "Washed, light roast.")
	tab.SetValue("#amount", "18.50")
	tab.Click("#link-form button[type=submit]")
	tab.WaitText(".notice", "Payment link created")
	var hosted string
	tab.Eval(`document.getElementById("hosted-url").value`, &hosted)
	if !strings.HasPrefix(hosted, base+"/pay/") {
		t.Fatalf("hosted URL %q", hosted)
	}
	var qrOK bool
	// Wait for the image (a slow machine or the race detector may not have
	// fetched it yet), then check it decoded.
	tab.Eval(`new Promise(r => { const i = document.querySelector("img.qr");
		const ok = () => i.complete && i.naturalWidth > 0;
		if (ok()) { r(true); return; }
		i.addEventListener("load", () => r(ok())); i.addEventListener("error", () => r(false));
		setTimeout(() => r(ok()), 10000); })`, &qrOK)
	if !qrOK {
		t.Fatal("the QR code did not load")
	}
	tab.Screenshot("dash-link")

	// The customer pays on the hosted page with the test wallet.
	w := browser.NewWallet(browser.WalletConfig{Key: devchain.CustomerKey(), RPC: map[uint64]string{ps.dc.ChainID(): ps.dc.RPCURL()}})
	shop := b.NewTab(browser.Desktop, browser.WithWallet(w))
	shop.Navigate(hosted)
	fillPayForm(shop, "")
	shop.Click("#connect")
	shop.Eval(`new Promise(r => { const f = () => document.getElementById('wallet').value ? r(true) : setTimeout(f, 50); f(); })`, nil)
	shop.WaitVisible("#totals")
	shop.Click("#pay-form button[type=submit]")
	shop.WaitVisible("#wallets button")
	shop.Click("#wallets button")
	shop.WaitVisible(".outcome.ok")
	shop.AssertNoConsoleErrors()

	// The payment appears, complete, with its timeline and its delivered
	// webhook.
	reloadUntil(t, tab, base+"/dashboard/test/payments", "#payments tbody tr", "complete", time.Minute)
	if got := pageText(tab, "#payments tbody tr"); !strings.Contains(got, "22.02 USDC") || !strings.Contains(got, "ann@example.com") {
		t.Fatalf("payments row %q", got)
	}
	m = tab.Metrics()
	t.Logf("payments page: %s", m)
	tab.Screenshot("dash-payments")
	detail := base + href(tab, "#payments tbody tr td a")
	reloadUntil(t, tab, detail, "#deliveries .delivery", "delivered", time.Minute)
	for _, want := range []string{"payment session created", "txn broadcast", "seen on chain", "complete"} {
		if got := pageText(tab, "#timeline"); !strings.Contains(got, want) {
			t.Fatalf("timeline %q lacks %q", got, want)
		}
	}
	if got := pageText(tab, "#transaction"); !strings.Contains(got, "22.02 USDC") {
		t.Fatalf("transaction %q", got)
	}
	if got := pageText(tab, "#deliveries .attempts tbody"); !strings.Contains(got, "204") {
		t.Fatalf("first attempt %q", got)
	}
	tab.Screenshot("dash-payment")

	// The hookReceiver fails: a resend makes an attempt that shows its 500.
	recv.failing.Store(true)
	tab.Click("#deliveries .delivery form button")
	tab.WaitText(".notice", "Resent")
	reloadUntil(t, tab, detail, "#deliveries .attempts tbody", "500", time.Minute)
	if got := pageText(tab, "#deliveries .attempts tbody tr:nth-child(2)"); !strings.Contains(got, "500") {
		t.Fatalf("second attempt %q", got)
	}
	tab.Screenshot("dash-payment-failed-attempt")
	// Fixed: resend, delivered again.
	recv.failing.Store(false)
	tab.Click("#deliveries .delivery form button")
	tab.WaitText(".notice", "Resent")
	reloadUntil(t, tab, detail, "#deliveries .attempts tbody tr:nth-child(3)", "204", time.Minute)
	if got := pageText(tab, "#deliveries .delivery .d-head"); !strings.Contains(got, "delivered") {
		t.Fatalf("delivery %q", got)
	}

	// The webhooks page: the log across endpoints.
	tab.Navigate(base + "/dashboard/test/webhooks")
	tab.WaitText("#log", "checkout.completed")
	tab.Screenshot("dash-webhooks")

	// Developers: regenerate the test key, shown once.
	tab.Navigate(base + "/dashboard/test/developers")
	tab.Click("#regenerate-test")
	tab.WaitVisible("#new-key")
	key := tab.Text("#new-key")
	if !strings.HasPrefix(key, "svc_test_sk_") || key == firstKey {
		t.Fatalf("regenerated key %q", key)
	}
	tab.Screenshot("dash-developers")

	// Business: KYB.
	tab.Navigate(base + "/dashboard/test/business")
	tab.SetValue("#businessName", "Blue Bottle Roasters GmbH")
	tab.SetValue("#businessType", "GmbH")
	tab.SetValue("#country", "DE")
	tab.SetValue("#contactName", "Ann Owner")
	tab.SetValue("#productDescription", "Specialty coffee beans")
	tab.Click("#kyb-form button[type=submit]")
	tab.WaitText(".notice", "Business verification submitted")
	tab.WaitText("#kyb-h", "pending")
	tab.Screenshot("dash-business")

	// Customers and the live switch.
	tab.Navigate(base + "/dashboard/test/customers")
	tab.WaitText("#customers", "ann@example.com")
	tab.Screenshot("dash-customers")
	if got := tab.Text("#mode-live"); !strings.Contains(got, "needs approved KYB") {
		t.Fatalf("live switch %q", got)
	}
	// Subscriptions: one on a trial, made by API; paused and resumed from
	// its page (through the subscription's workflow).
	sub := ps.call("POST", "/api/subscriptions", key, map[string]any{"customerEmail": "ann@example.com",
		"customerWalletAddress": ps.dc.Customer().Hex(), "productName": "Coffee club, 1 kg a month", "amount": "24.00",
		"billingInterval": "month", "trialDays": 14, "network": "base_sepolia"}, 201)
	tab.Navigate(base + "/dashboard/test/subscriptions")
	tab.WaitText("#subscriptions", "Coffee club")
	tab.Screenshot("dash-subscriptions")
	tab.Click("#subscriptions tbody a")
	tab.WaitVisible("#subscription")
	tab.Click("#do-pause")
	tab.WaitText(".notice", "Subscription paused")
	tab.WaitText("#subscription", "paused")
	tab.Click("#do-resume")
	tab.WaitText(".notice", "Subscription resumed")
	tab.WaitText("#subscription", "trialing")
	tab.Screenshot("dash-subscription")
	if got := ps.call("GET", "/api/subscriptions/"+sub["id"].(string), key, nil, 200); got["status"] != "trialing" || got["pausedAt"] != nil {
		t.Fatalf("after pause and resume: %v", got)
	}

	tab.Navigate(base + "/dashboard/test/exceptions")
	tab.Screenshot("dash-exceptions")
	tab.AssertNoConsoleErrors()

	// On a phone (its own browser context: sign in there).
	phone := b.NewTab(browser.Phone)
	signInInBrowser(phone, base, strings.TrimPrefix(detail, base), "owner@bluebottle.example", "correct horse battery staple", "#timeline")
	var overflow bool
	phone.Eval(`document.documentElement.scrollWidth > window.innerWidth + 1`, &overflow)
	if overflow {
		t.Error("the payment page is wider than a phone")
	}
	phone.Screenshot("dash-payment-phone")
	phone.Navigate(base + "/dashboard/test/payments")
	phone.Screenshot("dash-payments-phone")
	phone.AssertNoConsoleErrors()

	// Keyboard: the skip link is the first stop and leads to the content.
	tab.Navigate(base + "/dashboard/test/payments")
	var focused string
	tab.Eval(`(() => { document.body.focus(); const e = document.querySelector("a.skip"); e.focus(); return document.activeElement.getAttribute("href") })()`, &focused)
	if focused != "#main" {
		t.Fatalf("skip link %q", focused)
	}

	// Sign out; a second merchant (another browser profile) sees none of it.
	tab.Click(".logout button")
	tab.WaitText(".notice", "signed out")
	if st := tab.Navigate(detail); st != 200 || !strings.Contains(pageText(tab, "h1"), "Sign in") {
		t.Fatalf("signed out, the payment page answered %d %q", st, pageText(tab, "h1"))
	}
	tab = b.NewTab(browser.Desktop)
	signUpInBrowser(tab, base, "Other Shop", "other@shop.example", "another long password")
	for path, sel := range map[string]string{"/payments": "#payments tbody", "/links": "#links tbody", "/customers": "#customers tbody",
		"/webhooks": "main"} {
		tab.Navigate(base + "/dashboard/test" + path)
		got := pageText(tab, sel)
		for _, leak := range []string{"ann@example.com", "Yirgacheffe", recv.srv.URL, "22.02"} {
			if strings.Contains(got, leak) {
				t.Errorf("merchant B's %s shows %q", path, leak)
			}
		}
	}
	tab.AssertNoConsoleErrors()
	// Last, as the browser logs a 404 as an error.
	if st := tab.Navigate(detail); st != 404 || strings.Contains(pageText(tab, "main"), "22.02") {
		t.Errorf("merchant B opened A's payment: %d", st)
	}
}

// TestDashboardThousandPayments measures the payments page over 1,000
// payments made through the store (the page shows 50 at a time): first
// load, a search and the last page, with their weight.
func TestDashboardThousandPayments(t *testing.T) {
	needBrowser(t)
	st, hs := pagesServer(t)

	b := browser.Start(t, browser.Timeout(4*time.Minute))
	tab := b.NewTab(browser.Desktop)
	signUpInBrowser(tab, hs.URL, "Busy Shop", "busy@shop.example", "correct horse battery")
	m, err := st.MerchantByEmail(context.Background(), "busy@shop.example")
	if err != nil {
		t.Fatal(err)
	}
	link := &models.PaymentLink{MerchantID: m.ID, Mode: models.ModeTest, Name: "Mug", Amount: money.FromCents(1850), Currency: "USD",
		Network: "base_sepolia", Networks: models.StringList{"base_sepolia"}, Token: "USDC", WalletAddresses: models.StringMap{"base_sepolia": merchantWallet},
		MerchantWalletAddress: merchantWallet}
	if err := st.CreatePaymentLink(context.Background(), link); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := 0; i < 1000; i++ {
		cs := &models.CheckoutSession{MerchantID: m.ID, Mode: models.ModeTest, PaymentLinkID: link.ID, Network: "base_sepolia", WalletType: "evm",
			WalletAddress: fmt.Sprintf("0x%040x", i+1), CustomerEmail: fmt.Sprintf("customer%04d@example.com", i), ExpectedAmount: money.FromCents(1850),
			MerchantWalletAddress: merchantWallet, TokenAddress: merchantWallet, ExpiresAt: time.Now().Add(time.Hour), WorkflowStarted: true}
		if err := st.CreateCheckoutSession(context.Background(), cs); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("1,000 payments stored in %s", time.Since(start).Round(time.Millisecond))

	measure := func(name, path string, rows int) {
		t.Helper()
		// Twice: the first load fetches the (cacheable) assets, the second
		// is what a merchant paging through sees.
		for _, round := range []string{"first", "again"} {
			t0 := time.Now()
			if st := tab.Navigate(hs.URL + path); st != 200 {
				t.Fatalf("%s: %d", path, st)
			}
			wall := time.Since(t0)
			mt := tab.Metrics()
			var n int
			tab.Eval(`document.querySelectorAll("#payments tbody tr").length`, &n)
			if n != rows {
				t.Fatalf("%s shows %d rows, want %d", path, n, rows)
			}
			t.Logf("%s (%s load): navigation %s; %s", name, round, wall.Round(time.Millisecond), mt)
			if mt.Bytes > 200*1024 {
				t.Errorf("%s weighs %d bytes, over 200 KB", name, mt.Bytes)
			}
		}
	}
	measure("payments, first page of 1,000", "/dashboard/test/payments", 50)
	measure("payments, search by e-mail", "/dashboard/test/payments?q=customer0042", 1)
	var last string
	cursor := "/dashboard/test/payments"
	pagesSeen := 0
	t0 := time.Now()
	for {
		tab.Navigate(hs.URL + cursor)
		pagesSeen++
		var next string
		tab.Eval(`(() => { const a = document.querySelector(".pager a.next"); return a ? a.getAttribute("href") : "" })()`, &next)
		if next == "" {
			break
		}
		last, cursor = cursor, next
	}
	t.Logf("all 1,000 payments in %d pages in %s (%s per page)", pagesSeen, time.Since(t0).Round(time.Millisecond),
		(time.Since(t0) / time.Duration(pagesSeen)).Round(time.Millisecond))
	_ = last
	if pagesSeen != 20 {
		t.Fatalf("%d pages, want 20", pagesSeen)
	}
	tab.Screenshot("dash-payments-1000")
	tab.AssertNoConsoleErrors()
}

// needBrowser skips a browser test where chromium is not installed, and
// fails it under CI=true.
func needBrowser(t *testing.T) {
	t.Helper()
	if !browser.Available() {
		if ciMode() {
			t.Fatal("chromium is not installed: make chromium")
		}
		t.Skip("chromium is not installed: make chromium")
	}
}

// pagesServer is the API with the pages over a SQLite store, without
// Temporal (no session's workflow starts): enough for dashboard pages.
func pagesServer(t *testing.T) (*models.Store, *httptest.Server) {
	t.Helper()
	return pagesServerMailing(t, nil)
}

// pagesServerMailing is pagesServer whose password-reset and address
// confirmation e-mails go to mailer, linking to the server's own address.
func pagesServerMailing(t *testing.T, mailer notify.Mailer, mutate ...func(*api.Deps)) (*models.Store, *httptest.Server) {
	t.Helper()
	st := storetest.Open(t, "sqlite")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	hasher := auth.NewHasher("e2e-secret-e2e-secret-e2e-secret-e2e")
	svc := &checkout.Service{Store: st, Hasher: hasher, Networks: chain.DefaultRegistry(), Tax: checkout.DefaultRates(),
		Lifetime: 30 * time.Minute, NotFoundWindow: time.Hour, Log: log}
	pages, err := web.New(web.Pages{Checkout: svc, Store: st, Log: log, ConfirmsEmail: mailer != nil})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(nil)
	d := api.Deps{Store: st, Hasher: hasher, Checkout: svc, Logger: log, Root: []func(*gin.Engine){pages.Register},
		Mailer: mailer, ResetBaseURL: "http://" + hs.Listener.Addr().String()}
	for _, m := range mutate {
		m(&d)
	}
	srv, err := api.New(d)
	if err != nil {
		t.Fatal(err)
	}
	hs.Config.Handler = srv.Handler()
	hs.Start()
	t.Cleanup(hs.Close)
	return st, hs
}

// signUpInBrowser signs a merchant up on the dashboard's sign-up page and
// waits for the page that shows its first API key.
func signUpInBrowser(tab *browser.Tab, base, business, email, password string) {
	tab.Navigate(base + "/dashboard/signup")
	tab.SetValue("#businessName", business)
	tab.SetValue("#email", email)
	tab.SetValue("#password", password)
	tab.Click("#signup-form button[type=submit]")
	tab.WaitVisible("#new-key")
}

// signInInBrowser signs a merchant in from the sign-in page, asking for
// path (under base), and waits for sel on the page it lands on.
func signInInBrowser(tab *browser.Tab, base, path, email, password, sel string) {
	tab.Navigate(base + "/dashboard/login?next=" + path)
	tab.SetValue("#email", email)
	tab.SetValue("#password", password)
	tab.Click("#login-form button[type=submit]")
	tab.WaitVisible(sel)
}
