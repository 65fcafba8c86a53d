package e2e

import (
	"context"
	"math/big"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/paygate/paygate/chain/devchain"
	"github.com/paygate/paygate/e2e/browser"
)

// pageStack is the whole service as `make run` runs it, for the browser:
// Temporal dev server, a dev chain with its relayer, API with the hosted
// pages, workers and the watcher.
type pageStack struct {
	*stack
	dc   *devchain.Chain
	key  string
	link string
}

func newPageStack(t *testing.T, lifetime time.Duration) *pageStack {
	t.Helper()
	needBrowser(t)
	s, dc := devChainStack(t, 250*time.Millisecond, stackOptions{watch: true, pages: true, lifetime: lifetime})
	key, _ := s.merchant()
	link := s.call("POST", "/api/payment-links", key, map[string]any{"name": "Ethiopia Yirgacheffe, 250 g",
		"description": "Washed, light roast. Notes of jasmine, bergamot and honey.", "amount": "18.50", "network": "base_sepolia"}, 201)["id"].(string)
	return &pageStack{stack: s, dc: dc, key: key, link: link}
}

func ciMode() bool { return strings.EqualFold(os.Getenv("CI"), "true") }

// fillPayForm fills the link page's form as a customer does.
func fillPayForm(tab *browser.Tab, wallet string) {
	tab.WaitVisible("#pay-form")
	tab.SetValue("#name", "Ann Example")
	tab.SetValue("#email", "ann@example.com")
	tab.SetValue("#country", "DE")
	tab.SetValue("#address", "Torstraße 1, Berlin")
	if wallet != "" {
		tab.SetValue("#wallet", wallet)
	}
}

// TestCheckoutPagePaysWithBrowserWallet: a customer opens the link's hosted
// page in a real browser with an injected EIP-1193 wallet (the dev chain's
// funded customer), connects it, sees the tax totals, continues to the
// checkout page, pays with the wallet (EIP-6963 discovery, EIP-3009
// signature, relayed), and the page shows the receipt. Screenshots of each
// step go to docs/screenshots/.
func TestCheckoutPagePaysWithBrowserWallet(t *testing.T) {
	ps := newPageStack(t, 0)
	b := browser.Start(t)
	w := browser.NewWallet(browser.WalletConfig{Key: devchain.CustomerKey(), RPC: map[uint64]string{ps.dc.ChainID(): ps.dc.RPCURL()}})
	tab := b.NewTab(browser.Desktop, browser.WithWallet(w))

	if st := tab.Navigate(ps.http.URL + "/pay/" + ps.link); st != 200 {
		t.Fatalf("link page answered %d", st)
	}
	m := tab.Metrics()
	t.Logf("link page: load %s, DOMContentLoaded %s, %d bytes in %d requests (%v)", m.Load, m.DOMContentLoaded, m.Bytes, m.Requests, m.ByType)
	fillPayForm(tab, "")
	tab.Click("#connect")
	tab.Eval(`new Promise(r => { const f = () => document.getElementById('wallet').value ? r(true) : setTimeout(f, 50); f(); })`, nil)
	tab.WaitVisible("#totals")
	tab.WaitText("#t-total", "22.02 USDC")
	tab.Screenshot("pay-link")
	tab.Click("#pay-form button[type=submit]")

	tab.WaitVisible("#status-card")
	var path string
	tab.Eval(`location.pathname`, &path)
	id := strings.TrimPrefix(path, "/checkout/")
	m = tab.Metrics()
	t.Logf("checkout page: load %s, DOMContentLoaded %s, %d bytes in %d requests (%v)", m.Load, m.DOMContentLoaded, m.Bytes, m.Requests, m.ByType)
	if m.Bytes > 150*1024 {
		t.Errorf("checkout page weighs %d bytes, over the 150 KB budget", m.Bytes)
	}
	tab.WaitVisible("#wallets button")
	tab.Screenshot("checkout-open")
	tab.Click("#wallets button")
	tab.WaitVisible(".outcome.ok")
	tab.Screenshot("checkout-complete")

	sess := ps.call("GET", "/api/checkout/session/"+id, "", nil, 200)["session"].(map[string]any)
	if sess["status"] != "complete" {
		t.Fatalf("session %v", sess["status"])
	}
	signed := w.RequestsFor("eth_signTypedData_v4")
	if len(signed) != 1 {
		t.Fatalf("%d signature requests", len(signed))
	}
	td, err := signed[0].TypedData()
	if err != nil {
		t.Fatal(err)
	}
	if nonce, _ := td.Message["nonce"].(string); !strings.EqualFold(nonce, sess["paymentReference"].(string)) {
		t.Fatalf("the wallet signed nonce %v, the session's reference is %v", td.Message["nonce"], sess["paymentReference"])
	}
	if got := strings.Join(w.Methods(), ","); !strings.Contains(got, "eth_requestAccounts") {
		t.Fatalf("wallet methods %s", got)
	}
	hist := ps.call("GET", "/api/checkout/session/"+id, "", nil, 200)["events"].([]any)
	var statuses []string
	for _, e := range hist {
		statuses = append(statuses, e.(map[string]any)["status"].(string))
	}
	if got := strings.Join(statuses, ","); !strings.Contains(got, "wallet_connecting,wallet_ready,txn_broadcast") {
		t.Fatalf("history %s: the page did not report the wallet steps", got)
	}
	tab.AssertNoConsoleErrors()
}

// openCheckout goes from the link page to a new session's page.
func (ps *pageStack) openCheckout(tab *browser.Tab) string {
	tab.Navigate(ps.http.URL + "/pay/" + ps.link)
	fillPayForm(tab, ps.dc.Customer().Hex())
	tab.Click("#pay-form button[type=submit]")
	tab.WaitVisible("#status-card")
	var path string
	tab.Eval(`location.pathname`, &path)
	return strings.TrimPrefix(path, "/checkout/")
}

// TestCheckoutPageExpires: a session left alone expires on screen by itself.
func TestCheckoutPageExpires(t *testing.T) {
	ps := newPageStack(t, 6*time.Second)
	b := browser.Start(t)
	tab := b.NewTab(browser.Desktop)
	ps.openCheckout(tab)
	tab.WaitVisible(".outcome h2#outcome-title")
	if got := tab.Text("#outcome-title"); got != "This checkout expired" {
		t.Fatalf("expired screen: %q", got)
	}
	tab.Screenshot("checkout-expired")
	tab.AssertNoConsoleErrors()
}

// TestCheckoutPageOutcomes: a short payment shows what arrived and what is
// still due; a stranger's transaction submitted to a session is shown set
// aside and the session still takes the customer's payment; a cancel shows
// the cancelled screen; the phone layout; German.
func TestCheckoutPageOutcomes(t *testing.T) {
	ps := newPageStack(t, 0)
	b := browser.Start(t)

	// Underpaid: a bound payment of 10 USDC for 22.02 due.
	tab := b.NewTab(browser.Desktop)
	id := ps.openCheckout(tab)
	if _, err := devchain.Pay(context.Background(), devchain.PayOptions{APIBase: ps.http.URL, RPCURL: ps.dc.RPCURL(), SessionID: id,
		Units: big.NewInt(10_000_000)}); err != nil {
		t.Fatal(err)
	}
	tab.WaitVisible(".outcome.bad")
	if got := tab.Text(".partial"); !strings.Contains(got, "10.00 USDC arrived; 12.02 USDC is still due") {
		t.Fatalf("partial payment shown as %q", got)
	}
	tab.Screenshot("checkout-underpaid")

	// A stranger who knows the session's id pays the merchant one unit from
	// their own wallet and submits it: the page shows the transaction set
	// aside and the session still open; the customer then pays.
	tab = b.NewTab(browser.Desktop)
	id = ps.openCheckout(tab)
	if _, err := devchain.Pay(context.Background(), devchain.PayOptions{APIBase: ps.http.URL, RPCURL: ps.dc.RPCURL(), SessionID: id,
		Key: devchain.StrangerKey(), Plain: true, Units: big.NewInt(1)}); err != nil {
		t.Fatal(err)
	}
	tab.WaitVisible("#released")
	if got := tab.Text("#released"); !strings.Contains(got, "set aside") || !strings.Contains(got, "does not pay this session") ||
		!strings.Contains(strings.ToLower(got), strings.ToLower(ps.dc.Customer().Hex())) {
		t.Fatalf("the set-aside note: %q", got)
	}
	tab.WaitVisible("img.qr")
	tab.Screenshot("checkout-released")
	if _, err := devchain.Pay(context.Background(), devchain.PayOptions{APIBase: ps.http.URL, RPCURL: ps.dc.RPCURL(), SessionID: id}); err != nil {
		t.Fatal(err)
	}
	tab.WaitVisible(".outcome.ok")

	// Cancelled, on a phone, in German.
	tab = b.NewTab(browser.Phone)
	tab.Navigate(ps.http.URL + "/pay/" + ps.link + "?lang=de")
	fillPayForm(tab, ps.dc.Customer().Hex())
	tab.Screenshot("pay-link-phone-de")
	tab.Click("#pay-form button[type=submit]")
	tab.WaitVisible("#status-card")
	tab.Screenshot("checkout-open-phone-de")
	tab.Click(".cancel button")
	tab.WaitVisible(".outcome h2#outcome-title")
	if got := tab.Text("#outcome-title"); got != "Zahlung abgebrochen" {
		t.Fatalf("cancelled screen: %q", got)
	}
	tab.Screenshot("checkout-cancelled-phone-de")
	tab.AssertNoConsoleErrors()
}

// TestCheckoutPageWithoutJavaScript: with scripts off the customer still
// gets from the link to the checkout page (forms), sees the QR code and
// the plain-text payment details, and the page shows the receipt after a
// payment (it reloads itself every 10 s while open).
func TestCheckoutPageWithoutJavaScript(t *testing.T) {
	ps := newPageStack(t, 0)
	b := browser.Start(t)
	tab := b.NewTab(browser.Desktop, browser.WithoutJavaScript())
	tab.Navigate(ps.http.URL + "/pay/" + ps.link)
	tab.WaitVisible("#pay-form")
	tab.Type("#name", "Ann Example")
	tab.Type("#email", "ann@example.com")
	tab.Type("#address", "Berlin")
	tab.Type("#wallet", ps.dc.Customer().Hex())
	tab.SetValue("#country", "DE")
	tab.Click("#pay-form button[type=submit]")
	tab.WaitVisible("img.qr")
	if got := tab.Text("#amount"); got != "22.02" {
		t.Fatalf("amount shown as %q", got)
	}
	tab.Screenshot("checkout-open-nojs")
	var path string
	tab.Eval(`location.pathname`, &path)
	if _, err := devchain.Pay(context.Background(), devchain.PayOptions{APIBase: ps.http.URL, RPCURL: ps.dc.RPCURL(),
		SessionID: strings.TrimPrefix(path, "/checkout/"), NoSubmit: true}); err != nil {
		t.Fatal(err)
	}
	tab.WaitVisible(".outcome.ok") // the meta refresh brings the receipt
	tab.Screenshot("checkout-complete-nojs")
}
