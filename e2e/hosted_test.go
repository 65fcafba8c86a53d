package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/chain/devchain"
	"github.com/paygate/paygate/models"
)

// TestHostedCheckoutCompletes: an integration creates a hosted checkout of
// a product with metadata and its own customer id; the customer pays it on
// the dev chain; checkout.completed reaches the receiver, signed, carrying
// productId, externalCustomerId, customerId and metadata; the checkout is
// complete with the session that paid it, and its link takes no new session.
func TestHostedCheckoutCompletes(t *testing.T) {
	ctx := context.Background()
	s, dc := devChainStack(t, 250*time.Millisecond, stackOptions{})
	key, session := s.merchant()
	s.wallet = dc.Customer().Hex()
	rc := newReceiver(t, nil)
	s.webhookEndpoint(session, rc, "checkout.completed")

	prod := s.call("POST", "/api/v1/products", key, map[string]any{"name": "Espresso beans, 1 kg", "price": "29.00"}, 201)["id"].(string)
	hc := s.call("POST", "/api/v1/checkouts", key, map[string]any{"productId": prod, "network": "base_sepolia",
		"metadata": map[string]string{"orderId": "A-1001"}, "externalCustomerId": "cus_42", "successUrl": "https://shop.example/thanks"}, 201)
	link := hc["paymentLinkId"].(string)
	id, _ := s.openSession(key, link, "")
	if _, err := devchain.PaySession(ctx, s.http.URL, dc.RPCURL(), devchain.CustomerKey(), id, nil); err != nil {
		t.Fatal(err)
	}
	s.waitStatus(id, "complete", 30*time.Second)
	got := rc.waitFor("checkout.completed", 30*time.Second, func(r []received) bool { return len(delivered2xx(r)) == 1 })
	data := got[0].Payload["data"].(map[string]any)
	if got[0].VerifyErr != nil || data["productId"] != prod || data["externalCustomerId"] != "cus_42" || data["customerId"] == nil ||
		data["metadata"].(map[string]any)["orderId"] != "A-1001" || data["checkoutId"] != hc["id"] {
		t.Fatalf("checkout.completed %v (verify %v)", data, got[0].VerifyErr)
	}
	after := s.call("GET", "/api/v1/checkouts/"+hc["id"].(string), key, nil, 200)
	if after["status"] != "complete" || after["sessionId"] != id {
		t.Fatalf("checkout after payment %v", after)
	}
	// Single use: no new session on its link.
	q := s.call("POST", "/api/checkout/quote", "", map[string]any{"linkId": link, "network": "base_sepolia",
		"customer": map[string]any{"country": "DE"}}, 400)
	_ = q
}

// TestHostedCheckoutClosedCancelsItsSessions: sessions a cancel did not
// reach (the workers were down, or the session was created while the
// cancel ran) are cancelled by the checkout repairer, with
// checkout.cancelled; so are the other open sessions of a single-use
// checkout once one of them paid it.
func TestHostedCheckoutClosedCancelsItsSessions(t *testing.T) {
	ctx := context.Background()
	v := &scriptedVerifier{}
	s := startStack(t, stackOptions{verifier: v})
	key, session := s.merchant()
	hc := s.call("POST", "/api/v1/checkouts", key, map[string]any{"name": "Order A-7", "amount": "12.00", "network": "base_sepolia"}, 201)
	link := hc["paymentLinkId"].(string)
	missed, _ := s.openSession(key, link, "")
	// Cancelled in the store alone: no session heard of it.
	sc := models.Scope{MerchantID: s.merchantID(session), Mode: models.ModeTest}
	if _, err := s.store.CancelHostedCheckout(ctx, sc, hc["id"].(string)); err != nil {
		t.Fatal(err)
	}
	if n, err := s.checkout.RepairOnce(ctx, time.Hour); err != nil || n != 1 {
		t.Fatalf("repair: %d %v", n, err)
	}
	s.waitStatus(missed, "cancelled", 10*time.Second)
	if after := s.call("GET", "/api/v1/checkouts/"+hc["id"].(string), key, nil, 200); after["status"] != "cancelled" {
		t.Fatalf("checkout %v", after)
	}
	if n, _ := s.checkout.RepairOnce(ctx, time.Hour); n != 0 {
		t.Fatalf("a second pass acted on %d sessions", n)
	}

	// A customer who opened the pay page twice pays through one session:
	// the checkout is complete, and the other session is cancelled, not
	// left open to be paid a second time.
	hc = s.call("POST", "/api/v1/checkouts", key, map[string]any{"name": "Order A-8", "amount": "12.00", "network": "base_sepolia"}, 201)
	link = hc["paymentLinkId"].(string)
	first, _ := s.openSession(key, link, "")
	second, _ := s.openSession(key, link, "")
	h := hashN(8)
	v.set(h, chain.VerifyResult{Seen: true, Verdict: chain.VerdictComplete, ReceivedUnits: "100000000"})
	s.call("POST", "/api/checkout/submit", "", map[string]any{"sessionId": second, "txHash": h}, 200)
	s.waitStatus(second, "complete", 10*time.Second)
	if after := s.call("GET", "/api/v1/checkouts/"+hc["id"].(string), key, nil, 200); after["status"] != "complete" || after["sessionId"] != second {
		t.Fatalf("checkout after payment %v", after)
	}
	if n, err := s.checkout.RepairOnce(ctx, time.Hour); err != nil || n != 1 {
		t.Fatalf("repair after payment: %d %v", n, err)
	}
	s.waitStatus(first, "cancelled", 10*time.Second)
}
