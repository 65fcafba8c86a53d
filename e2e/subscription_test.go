package e2e

import (
	"context"
	"fmt"
	"math/big"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/paygate/paygate/activities"
	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/chain/devchain"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/workflows"
)

// countOf counts the received events of type typ.
func countOf(got []received, typ string) int {
	n := 0
	for _, r := range got {
		if r.Event == typ {
			n++
		}
	}
	return n
}

// TestSubscriptionRenewsOnDevChain runs a subscription whose periods last
// seconds on the dev server and the dev EVM chain: the first invoice and
// two renewals are each paid for real (devchain.Pay signs the session's
// EIP-3009 authorization and broadcasts it), the chain verifier completes
// the sessions, their outcome reaches the subscription's workflow, and the
// merchant's receiver gets subscription.created, then renewal_due and
// renewed three times, then updated and canceled after cancel_now: emitted
// in that order, arriving in it, signed, and matching the documented
// payloads.
func TestSubscriptionRenewsOnDevChain(t *testing.T) {
	ctx := context.Background()
	const period = 12 * time.Second
	s, dc := devChainStack(t, time.Second, stackOptions{subscriptionPeriod: period})
	key, session := s.merchant()
	rc := newReceiver(t, nil)
	s.webhookEndpoint(session, rc, "subscription.created", "subscription.updated", "subscription.renewed",
		"subscription.renewal_due", "subscription.past_due", "subscription.canceled")

	sub := s.call("POST", "/api/subscriptions", key, map[string]any{"customerEmail": "ann@example.com",
		"customerWalletAddress": dc.Customer().Hex(), "productName": "Coffee club", "amount": "4.20",
		"billingInterval": "month", "network": "base_sepolia"}, 201)
	id := sub["id"].(string)
	if sub["status"] != "renewal_pending" {
		t.Fatalf("created %v", sub)
	}
	var periodEnds []string
	for n := 1; n <= 3; n++ {
		// The invoice's notice carries its session and the hosted page.
		got := rc.waitFor(fmt.Sprintf("renewal_due #%d", n), 2*period, func(g []received) bool {
			return countOf(g, "subscription.renewal_due") >= n
		})
		var due map[string]any
		for _, r := range got {
			if r.Event == "subscription.renewal_due" {
				due = r.Payload["data"].(map[string]any)
			}
		}
		inv := due["invoice"].(map[string]any)
		sessionID := inv["sessionId"].(string)
		if inv["number"] != float64(n) || inv["checkoutUrl"] != "http://paygate.test/checkout/"+sessionID || due["status"] != "renewal_pending" {
			t.Fatalf("invoice %d: %v", n, due)
		}
		sess := s.call("GET", "/api/checkout/session/"+sessionID, "", nil, 200)["session"].(map[string]any)
		if sess["expectedAmount"] != 4.2 || sess["walletAddress"] != dc.Customer().Hex() || sess["paymentReference"] == nil {
			t.Fatalf("invoice session %v", sess)
		}
		if cs, err := s.store.CheckoutSession(ctx, sessionID); err != nil || cs.InvoiceNumber != n {
			t.Fatalf("invoice %d's session is stored for invoice %d (%v)", n, cs.InvoiceNumber, err)
		}
		var sibling string
		if n == 1 {
			// Another session of the same invoice (as a reminder opens), its
			// page still open when the invoice is paid through the first.
			got, err := s.checkout.OpenInvoiceSession(ctx, activities.InvoiceSessionRequest{SessionID: models.NewID(),
				SubscriptionID: id, ExpiresAt: time.Now().Add(time.Hour), Invoice: n})
			if err != nil {
				t.Fatal(err)
			}
			sibling = got.SessionID
		}
		if _, err := devchain.Pay(ctx, devchain.PayOptions{APIBase: s.http.URL, RPCURL: dc.RPCURL(), SessionID: sessionID}); err != nil {
			t.Fatal(err)
		}
		s.waitStatus(sessionID, "complete", 30*time.Second)
		got = rc.waitFor(fmt.Sprintf("renewed #%d", n), 30*time.Second, func(g []received) bool {
			return countOf(g, "subscription.renewed") >= n
		})
		if sibling != "" {
			// The repairer cancels it: the customer cannot pay the renewal
			// a second time through it.
			if k, err := s.checkout.RepairOnce(ctx, time.Hour); err != nil || k != 1 {
				t.Fatalf("repair after the invoice was paid: %d %v", k, err)
			}
			s.waitStatus(sibling, "cancelled", 10*time.Second)
		}
		cur := s.call("GET", "/api/subscriptions/"+id, key, nil, 200)
		if cur["status"] != "active" || cur["latestCheckoutSessionId"] != sessionID {
			t.Fatalf("after paying invoice %d: %v", n, cur)
		}
		periodEnds = append(periodEnds, cur["currentPeriodEnd"].(string))
	}
	// Three paid periods back to back, each `period` long from the start.
	for i := 1; i < len(periodEnds); i++ {
		a, _ := time.Parse(time.RFC3339, periodEnds[i-1])
		b, _ := time.Parse(time.RFC3339, periodEnds[i])
		if b.Sub(a) != period {
			t.Fatalf("period ends %v", periodEnds)
		}
	}

	s.call("PATCH", "/api/subscriptions", key, map[string]any{"subscriptionId": id, "action": "cancel_now"}, 200)
	got := rc.waitFor("canceled", 30*time.Second, func(g []received) bool { return countOf(g, "subscription.canceled") == 1 })
	want := []string{"subscription.created"}
	for i := 0; i < 3; i++ {
		want = append(want, "subscription.renewal_due", "subscription.renewed")
	}
	want = append(want, "subscription.updated", "subscription.canceled")
	if len(got) != len(want) {
		t.Fatalf("received %d events, want %d: %v", len(got), len(want), types(got))
	}
	for _, r := range got {
		if r.VerifyErr != nil || r.Status != 200 {
			t.Fatalf("%s: signature %v, status %d", r.Event, r.VerifyErr, r.Status)
		}
		validateSubscriptionEvent(t, r.Event, r.Payload["data"])
	}
	// Emitted in order (delivery ids are UUIDv7, minted as the events are).
	byEmission := slices.Clone(got)
	sort.Slice(byEmission, func(i, j int) bool { return byEmission[i].ID < byEmission[j].ID })
	if e := types(byEmission); !slices.Equal(e, want) {
		t.Fatalf("emitted %v, want %v", e, want)
	}
	// Arrived in order: each delivery is its own workflow, so two events
	// emitted in the same instant (updated and canceled are one change) may
	// race; any event emitted a second or more after another arrived after it.
	stamp := func(r received) time.Time {
		ts, _ := time.Parse(time.RFC3339, r.Payload["timestamp"].(string))
		return ts
	}
	for i, a := range got {
		for _, b := range got[i+1:] {
			if stamp(a).Sub(stamp(b)) >= time.Second {
				t.Fatalf("%s (emitted %s) arrived before %s (emitted %s): %v", b.Event, stamp(b), a.Event, stamp(a), types(got))
			}
		}
	}
	t.Logf("arrived: %v", types(got))
	// The workflow ended with the subscription.
	run := s.temporal.GetWorkflow(ctx, workflows.SubscriptionWorkflowID(id), "")
	var res workflows.SubscriptionResult
	if err := run.Get(ctx, &res); err != nil || res.Status != "canceled" || res.PaidPeriods != 3 {
		t.Fatalf("workflow result %+v %v", res, err)
	}

	// A subscription whose workflow an operator terminated takes no action:
	// a 409 that says so, not a 500 to retry.
	other := s.call("POST", "/api/subscriptions", key, map[string]any{"customerEmail": "bob@example.com",
		"customerWalletAddress": dc.Customer().Hex(), "productName": "Tea club", "amount": "3.00",
		"billingInterval": "month", "network": "base_sepolia"}, 201)["id"].(string)
	if err := s.temporal.TerminateWorkflow(ctx, workflows.SubscriptionWorkflowID(other), "", "operator"); err != nil {
		t.Fatal(err)
	}
	r := s.callRaw("PATCH", "/api/subscriptions", key, map[string]any{"subscriptionId": other, "action": "pause"})
	if r.status != 409 || !strings.Contains(r.body, `"code":"CONFLICT"`) || !strings.Contains(r.body, "not running") {
		t.Fatalf("an action on a terminated subscription workflow: %+v", r)
	}
	// A cancel is taken (SPEC.md: from any status): nothing bills it any
	// more, so it is canceled at once, its subscription.canceled delivered.
	if got := s.call("PATCH", "/api/subscriptions", key, map[string]any{"subscriptionId": other, "action": "cancel"}, 200); got["status"] != "canceled" {
		t.Fatalf("cancel of a subscription whose workflow was terminated: %v", got)
	}
	if got := s.call("GET", "/api/subscriptions/"+other, key, nil, 200); got["status"] != "canceled" || got["canceledAt"] == nil {
		t.Fatalf("after the cancel: %v", got)
	}
	got = rc.waitFor("the terminated one's cancel", 30*time.Second, func(g []received) bool { return countOf(g, "subscription.canceled") == 2 })
	for _, r := range got {
		if r.Event == "subscription.canceled" && r.Payload["data"].(map[string]any)["subscriptionId"] == other {
			validateSubscriptionEvent(t, r.Event, r.Payload["data"])
		}
	}
	// Asked again: answered the same.
	if got := s.call("PATCH", "/api/subscriptions", key, map[string]any{"subscriptionId": other, "action": "cancel_now"}, 200); got["status"] != "canceled" {
		t.Fatalf("a second cancel: %v", got)
	}
}

// TestSubscriptionHeldWhileItsWalletIsAnothers: on the dev server and the
// dev EVM chain, another merchant proves the subscription's receiving wallet
// after its first invoice was paid. The next invoice is not opened (no
// renewal is paid to another merchant's wallet): the subscription is held,
// subscription.updated says why (billingError, also on GET), and its status
// is kept. Once the merchant proves the wallet too, the held invoice comes
// with billingError null. Before, the renewals kept paying the other
// merchant's wallet; and a subscription that could not be billed failed its
// workflow, left active and unbilled with nobody told.
func TestSubscriptionHeldWhileItsWalletIsAnothers(t *testing.T) {
	ctx := context.Background()
	const period = 6 * time.Second
	s, dc := devChainStack(t, time.Second, stackOptions{subscriptionPeriod: period})
	key, session := s.merchant()
	rc := newReceiver(t, nil)
	s.webhookEndpoint(session, rc, "subscription.updated", "subscription.renewal_due", "subscription.renewed", "subscription.canceled")
	sub := s.call("POST", "/api/subscriptions", key, map[string]any{"customerEmail": "ann@example.com",
		"customerWalletAddress": dc.Customer().Hex(), "productName": "Coffee club", "amount": "4.20",
		"billingInterval": "month", "network": "base_sepolia"}, 201)
	id, wallet := sub["id"].(string), sub["merchantWalletAddress"].(string)
	got := rc.waitFor("the first invoice", 2*period, func(g []received) bool { return countOf(g, "subscription.renewal_due") == 1 })
	first := got[0].Payload["data"].(map[string]any)["invoice"].(map[string]any)["sessionId"].(string)
	if _, err := devchain.Pay(ctx, devchain.PayOptions{APIBase: s.http.URL, RPCURL: dc.RPCURL(), SessionID: first}); err != nil {
		t.Fatal(err)
	}
	rc.waitFor("renewed", 30*time.Second, func(g []received) bool { return countOf(g, "subscription.renewed") == 1 })

	owner := &models.Merchant{Email: models.NewID() + "@example.com", PasswordHash: "x", BusinessName: "Owner"}
	if _, err := s.store.CreateMerchant(ctx, owner, &models.DashboardSession{TokenHash: models.NewID()},
		models.NewKey{Hash: models.NewID(), Prefix: "p", Suffix: "s", Type: models.ModeTest}); err != nil {
		t.Fatal(err)
	}
	prove := func(merchantID string) {
		t.Helper()
		if _, err := s.store.RecordWalletProof(ctx, &models.WalletProof{MerchantID: merchantID, Family: "evm", Address: wallet,
			Message: "m", Signature: "s", ProvedAt: time.Now()}, 0); err != nil {
			t.Fatal(err)
		}
	}
	// latest is the data of the last event of type typ received, checked
	// against its schema.
	latest := func(got []received, typ string) map[string]any {
		t.Helper()
		var d map[string]any
		for _, r := range got {
			if r.Event == typ {
				d = r.Payload["data"].(map[string]any)
			}
		}
		validateSubscriptionEvent(t, typ, d)
		return d
	}
	prove(owner.ID)
	got = rc.waitFor("held", 3*period, func(g []received) bool { return countOf(g, "subscription.updated") == 1 })
	held := latest(got, "subscription.updated")
	reason, _ := held["billingError"].(string)
	if held["action"] != nil || held["status"] != "active" || !strings.Contains(reason, "proven by another merchant") {
		t.Fatalf("held: %v", held)
	}
	if cur := s.call("GET", "/api/subscriptions/"+id, key, nil, 200); cur["billingError"] != reason || cur["status"] != "active" {
		t.Fatalf("GET while held: %v", cur)
	}
	time.Sleep(period) // tried again meanwhile, still held: no second event, no invoice
	if g := rc.snapshot(); countOf(g, "subscription.updated") != 1 || countOf(g, "subscription.renewal_due") != 1 {
		t.Fatalf("while held: %v", types(g))
	}

	// The merchant proves the wallet too: it is theirs as well, and billed.
	acct := s.call("GET", "/api/merchant", session, nil, 200)
	prove(acct["id"].(string))
	got = rc.waitFor("the held invoice", 3*period, func(g []received) bool { return countOf(g, "subscription.renewal_due") == 2 })
	billed := latest(got, "subscription.renewal_due")
	if v, ok := billed["billingError"]; !ok || v != nil || billed["status"] != "renewal_pending" ||
		fmt.Sprint(billed["invoice"].(map[string]any)["number"]) != "2" {
		t.Fatalf("the held invoice: %v", billed)
	}
	if cur := s.call("GET", "/api/subscriptions/"+id, key, nil, 200); cur["billingError"] != nil || cur["status"] != "renewal_pending" {
		t.Fatalf("GET once billed: %v", cur)
	}
	s.call("PATCH", "/api/subscriptions", key, map[string]any{"subscriptionId": id, "action": "cancel_now"}, 200)
}

// TestSubscriptionRenewedFromAcceptedShortPayment: on the dev server and
// the dev EVM chain the customer pays a subscription's invoice 0.30 short;
// the session fails and the transfer becomes an underpaid payment
// exception. The merchant accepts it for the subscription (resolve with
// subscriptionId): the subscription's workflow voids the invoice's
// session, the transfer is recorded as the customer's transaction, and the
// period is renewed; subscription.renewed names the exception and the
// transaction, payment.completed names the subscription. Another
// merchant cannot touch the exception; a second resolve answers the first,
// and one into another subscription is refused.
func TestSubscriptionRenewedFromAcceptedShortPayment(t *testing.T) {
	ctx := context.Background()
	s, dc := devChainStack(t, 250*time.Millisecond, stackOptions{})
	key, session := s.merchant()
	rc := newReceiver(t, nil)
	s.webhookEndpoint(session, rc, "subscription.renewed", "payment.completed")

	sub := s.call("POST", "/api/subscriptions", key, map[string]any{"customerEmail": "ann@example.com",
		"customerWalletAddress": dc.Customer().Hex(), "productName": "Coffee club", "amount": "4.20",
		"billingInterval": "month", "network": "base_sepolia"}, 201)
	id := sub["id"].(string)
	var sessionID string
	for deadline := time.Now().Add(20 * time.Second); sessionID == ""; time.Sleep(50 * time.Millisecond) {
		if cur := s.call("GET", "/api/subscriptions/"+id, key, nil, 200); cur["latestCheckoutSessionId"] != nil {
			sessionID = cur["latestCheckoutSessionId"].(string)
		} else if time.Now().After(deadline) {
			t.Fatalf("no invoice session: %v", cur)
		}
	}
	if _, err := devchain.Pay(ctx, devchain.PayOptions{APIBase: s.http.URL, RPCURL: dc.RPCURL(), SessionID: sessionID, Units: big.NewInt(3_900_000)}); err != nil {
		t.Fatal(err)
	}
	s.waitStatus(sessionID, "failed", 30*time.Second)
	var exc map[string]any
	for deadline := time.Now().Add(20 * time.Second); exc == nil; time.Sleep(50 * time.Millisecond) {
		if list := s.callList("GET", "/api/payment-exceptions?kind=underpaid", key); len(list) == 1 {
			exc = list[0]
		} else if time.Now().After(deadline) {
			t.Fatalf("exceptions %v", list)
		}
	}
	excID := exc["id"].(string)
	path := "/api/payment-exceptions/" + excID + "/resolve"

	// Refused before anything is written.
	s.call("POST", path, key, map[string]any{"subscriptionId": id, "customerEmail": "ann@example.com"}, 400)
	s.call("POST", path, key, map[string]any{"subscriptionId": models.NewID()}, 400)
	otherKey, _ := s.merchant()
	s.call("POST", path, otherKey, map[string]any{"subscriptionId": id}, 404)

	res := s.call("POST", path, key, map[string]any{"subscriptionId": id, "note": "accepted 0.30 short"}, 200)
	e, txn, cur := res["exception"].(map[string]any), res["transaction"].(map[string]any), res["subscription"].(map[string]any)
	if e["status"] != "resolved" || e["subscriptionId"] != id || e["transactionId"] != txn["id"] {
		t.Fatalf("exception %v", e)
	}
	if units(txn["amount"]) != 3_900_000 || txn["customerEmail"] != "ann@example.com" || txn["txHash"] != exc["txHash"] {
		t.Fatalf("transaction %v", txn)
	}
	if cur["status"] != "active" || cur["currentPeriodEnd"] == nil {
		t.Fatalf("subscription %v", cur)
	}
	// Asked again (a client retrying): the same answer; into another
	// subscription: refused.
	if again := s.call("POST", path, key, map[string]any{"subscriptionId": id}, 200); again["transaction"].(map[string]any)["id"] != txn["id"] {
		t.Fatalf("asked again: %v", again)
	}
	other := s.call("POST", "/api/subscriptions", key, map[string]any{"customerEmail": "bob@example.com", "customerWalletAddress": dc.Customer().Hex(), "productName": "Tea club",
		"amount": "3.90", "billingInterval": "month", "network": "base_sepolia"}, 201)
	s.call("POST", path, key, map[string]any{"subscriptionId": other["id"]}, 409)

	// The invoice's latest session (the one reopened after the short
	// payment failed, or that one) cannot pay it a second time.
	latest := cur["latestCheckoutSessionId"].(string)
	if st := s.call("GET", "/api/checkout/session/"+latest, "", nil, 200)["session"].(map[string]any)["status"]; st != "cancelled" && st != "failed" {
		t.Fatalf("the paid invoice's session %s is %v", latest, st)
	}
	got := rc.waitFor("renewed and completed", 20*time.Second, func(g []received) bool {
		return slices.Contains(types(g), "subscription.renewed") && slices.Contains(types(g), "payment.completed")
	})
	for _, r := range got {
		if r.VerifyErr != nil {
			t.Fatalf("%s: %v", r.Event, r.VerifyErr)
		}
		data := r.Payload["data"].(map[string]any)
		switch r.Event {
		case "subscription.renewed":
			validateSubscriptionEvent(t, r.Event, data)
			inv := data["invoice"].(map[string]any)
			if inv["exceptionId"] != excID || inv["transactionId"] != txn["id"] || inv["sessionId"] != nil || inv["amount"] != "3.90" ||
				data["transactionId"] != txn["id"] || data["txHash"] != exc["txHash"] {
				t.Fatalf("renewed %v", data)
			}
		case "payment.completed":
			if data["subscriptionId"] != id || data["exceptionId"] != excID || data["transactionId"] != txn["id"] {
				t.Fatalf("payment.completed %v", data)
			}
		}
	}
}

func types(rs []received) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Event)
	}
	return out
}

// validateSubscriptionEvent checks an event's data against its schema in
// the OpenAPI document.
func validateSubscriptionEvent(t *testing.T, typ string, data any) {
	t.Helper()
	names := map[string]string{"subscription.created": "SubscriptionCreatedEvent", "subscription.updated": "SubscriptionUpdatedEvent",
		"subscription.renewal_due": "SubscriptionRenewalDueEvent", "subscription.past_due": "SubscriptionPastDueEvent",
		"subscription.renewed": "SubscriptionRenewedEvent", "subscription.canceled": "SubscriptionCanceledEvent"}
	doc, err := api.OpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	ref := doc.Components.Schemas[names[typ]]
	if ref == nil || ref.Value == nil {
		t.Fatalf("no schema for %s", typ)
	}
	if err := ref.Value.VisitJSON(data, openapi3.MultiErrors()); err != nil {
		t.Fatalf("%s: %v\n%v", typ, err, data)
	}
	if d := data.(map[string]any); d["livemode"] != false {
		t.Fatalf("%s livemode %v", typ, d["livemode"])
	}
}
