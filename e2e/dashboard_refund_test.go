package e2e

import (
	"context"
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/paygate/paygate/chain/devchain"
	"github.com/paygate/paygate/e2e/browser"
	"github.com/paygate/paygate/money"
)

// TestDashboardRefundInBrowser: a merchant refunds a payment from its page
// in the dashboard, in Chromium against the whole stack and a dev chain.
// A refund of more than is refundable is refused in the form (the API's
// message, the values kept); half is created, the page says what to send
// from which wallet to which; the merchant's wallet sends it (as a wallet
// app would), the hash pasted into the page attaches it, and the refund
// shows succeeded with the balance moved. The rest is refunded too; then
// nothing is left, and the form is gone. Screenshots: dash-refund-pending,
// dash-refunds.
func TestDashboardRefundInBrowser(t *testing.T) {
	needBrowser(t)
	ctx := context.Background()
	s, dc := devChainStack(t, 250*time.Millisecond, stackOptions{pages: true})
	email, password := "refunds@roastery.example", "correct horse battery staple"
	d := s.call("POST", "/api/auth/signup", "", map[string]any{"email": email, "password": password, "businessName": "Roastery"}, 201)
	key, session := d["testKey"].(map[string]any)["fullKey"].(string), d["sessionToken"].(string)
	paid := s.paidOnDevChain(dc, key, session, "20.00")
	sessionID, total := paid.SessionID, paid.Total()
	usdc := func(u int64) string { return money.Amount(u).String() } // as the pages print amounts

	b := browser.Start(t, browser.Timeout(4*time.Minute), browser.ActionTimeout(30*time.Second))
	tab := b.NewTab(browser.Desktop)
	base := s.http.URL
	page := base + "/dashboard/test/payments/" + sessionID
	signInInBrowser(tab, base, strings.TrimPrefix(page, base), email, password, "#refunds")
	if got := pageText(tab, "#refund-balance"); !strings.Contains(got, "Refunded 0.00 of "+usdc(total)) || !strings.Contains(got, "refundable "+usdc(total)) {
		t.Fatalf("balance before any refund: %q", got)
	}

	// Half.
	half := total / 2
	tab.Click("#refunds details summary")
	tab.SetValue("#refund-amount", decimal(half))
	tab.SetValue("#refund-reason", "damaged in transit")
	tab.Click("#refund-form button[type=submit]")
	tab.WaitText(".notice", "Refund created")
	item := pageText(tab, "#refunds .refund")
	if !strings.Contains(item, "pending") || !strings.Contains(item, usdc(half)+" USDC") || !strings.Contains(item, devchain.MerchantAddress().Hex()) ||
		!strings.Contains(item, dc.Customer().Hex()) || !strings.Contains(item, "damaged in transit") {
		t.Fatalf("pending refund %q", item)
	}
	tab.Screenshot("dash-refund-pending")

	// The merchant's wallet sends it (as a wallet app would); the hash is
	// pasted into the refund's form on the page (sel: the refund's item).
	payAndAttach := func(sel string, units int64) string {
		t.Helper()
		hash, err := devchain.PayUSDC(ctx, dc.RPCURL(), devchain.MerchantKey(), dc.USDC(), common.HexToAddress(dc.Customer().Hex()), big.NewInt(units))
		if err != nil {
			t.Fatal(err)
		}
		tab.SetValue(sel+" input[name=txHash]", hash)
		tab.Click(sel + " form button[type=submit]")
		tab.WaitText(".notice", "Transaction hash attached")
		reloadUntil(t, tab, page, sel, "succeeded", time.Minute)
		return hash
	}
	hash := payAndAttach("#refunds .refund", half)
	if got := pageText(tab, "#refunds .refund"); !strings.Contains(got, strings.ToLower(hash)) {
		t.Fatalf("succeeded refund %q", got)
	}
	if got := pageText(tab, "#refund-balance"); !strings.Contains(got, "Refunded "+usdc(half)+" of "+usdc(total)) {
		t.Fatalf("balance after half: %q", got)
	}
	tab.Screenshot("dash-refunds")

	tab.AssertNoConsoleErrors()

	// A hash sent to the refund that succeeded (another tab's stale form):
	// refused, the refusal shown above the refunds; a refund that is not
	// this payment's is not found. (Last: the browser logs these answers
	// as errors.)
	firstID := strings.TrimPrefix(attr(tab, "#refunds .refund", "id"), "refund-")
	var stale struct {
		Status int
		Text   string
	}
	post := func(rid string) {
		tab.Eval(fmt.Sprintf(`fetch(%q, {method: "POST", body: new URLSearchParams({txHash: %q})}).then(async r => {
			const d = new DOMParser().parseFromString(await r.text(), "text/html");
			const e = d.querySelector("#refunds .error") || d.querySelector("main");
			return {Status: r.status, Text: e ? e.textContent.replace(/\s+/g, " ").trim() : ""}; })`,
			page+"/refunds/"+rid+"/submit", "0x"+strings.Repeat("ab", 32)), &stale)
	}
	post(firstID)
	if stale.Status != 409 || !strings.Contains(stale.Text, "already has a transaction hash") {
		t.Fatalf("a hash for the succeeded refund: %+v", stale)
	}
	post("01a216ce-0000-7000-8000-000000000000")
	if stale.Status != 404 {
		t.Fatalf("a hash for another payment's refund: %+v", stale)
	}

	// More than is refundable: refused in the form, the values kept.
	tab.Click("#refunds details summary")
	tab.SetValue("#refund-amount", "999")
	tab.SetValue("#refund-reason", "the rest")
	tab.Click("#refund-form button[type=submit]")
	tab.WaitText("#refunds .error", "exceeds the refundable remainder")
	var kept string
	tab.Eval(`document.getElementById("refund-reason").value`, &kept)
	if kept != "the rest" {
		t.Fatalf("the form lost its reason: %q", kept)
	}

	// The rest (the amount left empty), paid and attached the same way.
	tab.SetValue("#refund-amount", "")
	tab.Click("#refund-form button[type=submit]")
	tab.WaitText(".notice", "Refund created")
	payAndAttach("#refunds .refund:nth-child(2)", total-half)
	if got := pageText(tab, "#refunds-none"); !strings.Contains(got, "Nothing is left to refund") {
		t.Fatalf("after the rest: %q", got)
	}
	var forms int
	tab.Eval(`document.querySelectorAll("#refund-form").length`, &forms)
	if forms != 0 {
		t.Fatal("the refund form is still offered with nothing left")
	}
}

func attr(tab *browser.Tab, sel, name string) string {
	var v string
	tab.Eval(fmt.Sprintf(`document.querySelector(%q).getAttribute(%q)`, sel, name), &v)
	return v
}

// TestDashboardExpiredRefundPaidLateInBrowser: a refund left to expire
// shows, on its payment's page, that a transfer sent late is still found
// and until when; the merchant pays it late and pastes the hash into its
// "Paid it late?" form: the transfer is checked on chain and recorded, the
// page says so, and the refund shows succeeded. Screenshot:
// dash-refund-late.
func TestDashboardExpiredRefundPaidLateInBrowser(t *testing.T) {
	needBrowser(t)
	ctx := context.Background()
	s, dc := devChainStack(t, 250*time.Millisecond, stackOptions{pages: true, refundWindow: 2 * time.Second})
	email, password := "late@roastery.example", "correct horse battery staple"
	d := s.call("POST", "/api/auth/signup", "", map[string]any{"email": email, "password": password, "businessName": "Roastery"}, 201)
	key, session := d["testKey"].(map[string]any)["fullKey"].(string), d["sessionToken"].(string)
	paid := s.paidOnDevChain(dc, key, session, "20.00")
	id := s.call("POST", "/api/refunds", key, map[string]any{"transactionId": paid.TxID(), "amount": "2.50", "reason": "returned"}, 201)["id"].(string)
	s.waitRefund(key, id, "failed", 20*time.Second)

	b := browser.Start(t, browser.Timeout(3*time.Minute), browser.ActionTimeout(30*time.Second))
	tab := b.NewTab(browser.Desktop)
	signInInBrowser(tab, s.http.URL, "/dashboard/test/payments/"+paid.SessionID, email, password, "#refunds")
	sel := "#refund-" + id
	if got := pageText(tab, sel); !strings.Contains(got, "REFUND_EXPIRED") || !strings.Contains(got, "Its amount is refundable again") ||
		!strings.Contains(got, "is still found on chain") {
		t.Fatalf("the expired refund: %q", got)
	}
	hash, err := devchain.PayUSDC(ctx, dc.RPCURL(), devchain.MerchantKey(), dc.USDC(), common.HexToAddress(dc.Customer().Hex()), big.NewInt(2_500_000))
	if err != nil {
		t.Fatal(err)
	}
	tab.Click(sel + " details summary")
	tab.SetValue(sel+" input[name=txHash]", hash)
	tab.Screenshot("dash-refund-late")
	tab.Click(sel + " form button[type=submit]")
	tab.WaitText(".notice", "Transfer recorded")
	if got := pageText(tab, sel); !strings.Contains(got, "succeeded") || !strings.Contains(got, strings.ToLower(hash)) ||
		!strings.Contains(got, "landed after the refund had been marked failed") {
		t.Fatalf("the refund paid late: %q", got)
	}
	tab.AssertNoConsoleErrors()
}
