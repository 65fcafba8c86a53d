package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/money"
)

// isolationCase says how to reach a route's resource: which credential of a
// merchant to use, how to make a resource of merchant A in a given mode, and
// the request body (a body-borne id is substituted for {id}).
type isolationCase struct {
	auth   string // "key" or "session"
	create func(h *harness, a merchant, mode models.Mode) string
	body   string
	// modeMismatchIsReported: SPEC.md Errors rule 3 asks for a 400 that says
	// the payment link is of the other mode; the status still matches a
	// missing id, the message may differ (it is the caller's own link).
	modeMismatchIsReported bool
}

func isolationCases() map[string]isolationCase {
	linkOf := func(h *harness, a merchant, mode models.Mode) string {
		if mode == models.ModeLive {
			return h.link(a.LiveKey, map[string]any{"name": "x", "amount": 1, "network": "base"})
		}
		return h.link(a.TestKey, nil)
	}
	customerOf := func(h *harness, a merchant, mode models.Mode) string {
		c := &models.Customer{MerchantID: a.ID, Mode: mode, Email: strings.ReplaceAll(models.NewID(), "-", "") + "@example.com"}
		if err := h.store.CreateCustomer(context.Background(), c); err != nil {
			h.t.Fatal(err)
		}
		return c.ID
	}
	txOf := func(h *harness, a merchant, mode models.Mode) string {
		network := "base_sepolia"
		if mode == models.ModeLive {
			network = "base"
		}
		tx := &models.Transaction{MerchantID: a.ID, Mode: mode, Amount: money.FromCents(100), Token: "USDC", Network: network,
			TxHash: "0x" + strings.Repeat("0", 28) + strings.ReplaceAll(models.NewID(), "-", "")}
		if err := h.store.RecordTransaction(context.Background(), tx); err != nil {
			h.t.Fatal(err)
		}
		return tx.ID
	}
	subOf := func(h *harness, a merchant, mode models.Mode) string {
		s := &models.Subscription{MerchantID: a.ID, Mode: mode, Status: models.SubActive, Network: "base_sepolia", BillingModel: "push",
			Amount: money.FromCents(100), BillingInterval: "month", CurrentPeriodStart: time.Now(), CurrentPeriodEnd: time.Now()}
		if err := h.store.CreateSubscription(context.Background(), s); err != nil {
			h.t.Fatal(err)
		}
		return s.ID
	}
	endpointOf := func(h *harness, a merchant, mode models.Mode) string {
		ep := &models.WebhookEndpoint{MerchantID: a.ID, Mode: mode, URL: "https://hooks.example.com/" + models.NewID(),
			Events: models.StringList{"checkout.completed"}, Secret: "whsec_dGVzdC1zZWNyZXQtdGVzdC1zZWNyZXQ="}
		if err := h.store.CreateWebhookEndpoint(context.Background(), ep); err != nil {
			h.t.Fatal(err)
		}
		return ep.ID
	}
	deliveryOf := func(h *harness, a merchant, mode models.Mode) string {
		endpointOf(h, a, mode)
		ids, err := h.store.EmitEvent(context.Background(), a.ID, mode, models.EventSpec{Type: "checkout.completed",
			Key: "isolation:" + models.NewID(), Data: map[string]any{"livemode": mode == models.ModeLive}})
		if err != nil || len(ids) == 0 {
			h.t.Fatalf("emit: %v %v", ids, err)
		}
		return ids[0]
	}
	sessionOf := func(h *harness, a merchant, mode models.Mode) string {
		linkID := linkOf(h, a, mode)
		cs := &models.CheckoutSession{MerchantID: a.ID, Mode: mode, PaymentLinkID: linkID, Network: "base_sepolia", WalletType: "evm",
			ExpectedAmount: money.FromCents(100), MerchantWalletAddress: evmA, TokenAddress: evmB, ExpiresAt: time.Now().Add(time.Hour)}
		if err := h.store.CreateCheckoutSession(context.Background(), cs); err != nil {
			h.t.Fatal(err)
		}
		return cs.ID
	}
	exceptionOf := func(h *harness, a merchant, mode models.Mode) string {
		network := "base_sepolia"
		if mode == models.ModeLive {
			network = "base"
		}
		e := &models.PaymentException{MerchantID: a.ID, Mode: mode, Network: network, Kind: models.ExceptionUnmatched,
			TxHash: "0x" + strings.Repeat("0", 32) + strings.ReplaceAll(models.NewID(), "-", ""), Amount: money.FromCents(100)}
		if _, err := h.store.OpenException(context.Background(), e); err != nil {
			h.t.Fatal(err)
		}
		return e.ID
	}
	productOf := func(h *harness, a merchant, mode models.Mode) string {
		pr := &models.Product{MerchantID: a.ID, Mode: mode, Name: "P", Price: money.FromCents(500), Currency: "USD", Active: true}
		if err := h.store.CreateProduct(context.Background(), pr); err != nil {
			h.t.Fatal(err)
		}
		return pr.ID
	}
	hostedOf := func(h *harness, a merchant, mode models.Mode) string {
		network := "base_sepolia"
		if mode == models.ModeLive {
			network = "base"
		}
		hc := &models.HostedCheckout{MerchantID: a.ID, Mode: mode, Name: "H", Amount: money.FromCents(500), Currency: "USD",
			ExpiresAt: time.Now().Add(time.Hour)}
		l := &models.PaymentLink{MerchantID: a.ID, Mode: mode, Name: "H", Amount: money.FromCents(500), Currency: "USD", Network: network,
			Networks: models.StringList{network}, Token: "USDC", WalletAddresses: models.StringMap{network: evmA}, MerchantWalletAddress: evmA}
		if err := h.store.CreateHostedCheckout(context.Background(), hc, l); err != nil {
			h.t.Fatal(err)
		}
		return hc.ID
	}
	refundOf := func(h *harness, a merchant, mode models.Mode) string {
		network := "base_sepolia"
		if mode == models.ModeLive {
			network = "base"
		}
		tx := &models.Transaction{MerchantID: a.ID, Mode: mode, Amount: money.FromCents(100), Token: "USDC", Network: network,
			TxHash: "0x" + strings.Repeat("5", 32) + strings.ReplaceAll(models.NewID(), "-", ""), WalletAddress: evmB,
			MerchantWalletAddress: evmA, Verification: models.VerificationVerified}
		if err := h.store.RecordTransaction(context.Background(), tx); err != nil {
			h.t.Fatal(err)
		}
		r, err := h.store.CreateRefund(context.Background(), models.RefundRequest{Scope: models.Scope{MerchantID: a.ID, Mode: mode},
			TransactionID: tx.ID, InitiatedBy: models.InitiatedByAPI, Window: time.Hour})
		if err != nil {
			h.t.Fatal(err)
		}
		return r.ID
	}
	submitBody := `{"txHash":"0x` + strings.Repeat("c", 64) + `"}`
	return map[string]isolationCase{
		"GET /api/refunds/:id":                     {auth: "key", create: refundOf},
		"POST /api/refunds/:id/submit":             {auth: "key", create: refundOf, body: submitBody},
		"GET /api/v1/refunds/:id":                  {auth: "session", create: refundOf},
		"POST /api/v1/refunds/:id/submit":          {auth: "session", create: refundOf, body: submitBody},
		"POST /api/refunds":                        {auth: "key", create: txOf, body: `{"transactionId":"{id}"}`},
		"POST /api/v1/refunds":                     {auth: "session", create: txOf, body: `{"transactionId":"{id}"}`},
		"GET /api/v1/products/:id":                 {auth: "key", create: productOf},
		"PATCH /api/v1/products/:id":               {auth: "key", create: productOf, body: `{"name":"stolen"}`},
		"GET /api/v1/checkouts/:id":                {auth: "key", create: hostedOf},
		"POST /api/v1/checkouts/:id/cancel":        {auth: "key", create: hostedOf},
		"POST /api/v1/checkouts":                   {auth: "key", create: productOf, body: `{"productId":"{id}","network":"base_sepolia"}`},
		"GET /api/payment-exceptions/:id":          {auth: "key", create: exceptionOf},
		"POST /api/payment-exceptions/:id/resolve": {auth: "key", create: exceptionOf, body: `{"customerEmail":"thief@example.com"}`},
		"POST /api/payment-exceptions/:id/dismiss": {auth: "key", create: exceptionOf, body: `{}`},
		"GET /api/checkout-sessions/:id":           {auth: "key", create: sessionOf},
		"GET /api/payments/:id":                    {auth: "key", create: sessionOf},
		"POST /api/webhooks/:id/test":              {auth: "session", create: endpointOf},
		"POST /api/checkout-sessions/:id/cancel":   {auth: "key", create: sessionOf},
		"PATCH /api/webhooks/:id":                  {auth: "session", create: endpointOf, body: `{"active":false}`},
		"DELETE /api/webhooks/:id":                 {auth: "session", create: endpointOf},
		"POST /api/webhooks/:id/rotate-secret":     {auth: "session", create: endpointOf},
		"POST /api/webhooks/deliveries/:id/retry":  {auth: "session", create: deliveryOf},
		"GET /api/payment-links/:id":               {auth: "key", create: linkOf},
		"PATCH /api/payment-links/:id":             {auth: "key", create: linkOf, body: `{"name":"stolen"}`},
		"DELETE /api/payment-links/:id":            {auth: "session", create: linkOf},
		"GET /api/customers/:id":                   {auth: "key", create: customerOf},
		"PATCH /api/customers/:id":                 {auth: "key", create: customerOf, body: `{"name":"stolen"}`},
		"GET /api/transactions/:id":                {auth: "key", create: txOf},
		"GET /api/subscriptions/:id":               {auth: "key", create: subOf},
		// Routes whose id travels in the body.
		"PATCH /api/subscriptions": {auth: "key", create: subOf, body: `{"subscriptionId":"{id}","action":"pause"}`},
		// A subscription for another merchant's customer.
		"POST /api/subscriptions": {auth: "key", create: customerOf, body: `{"customerId":"{id}","productName":"Pro","amount":"5",` +
			`"billingInterval":"month","network":"base_sepolia","customerWalletAddress":"` + evmB + `"}`},
		"POST /api/transactions": {auth: "key", create: linkOf, body: `{"amount":"1","token":"USDC","network":"base_sepolia",` +
			`"txHash":"0x` + strings.Repeat("e", 64) + `","walletAddress":"` + evmB + `","paymentLinkId":"{id}"}`,
			modeMismatchIsReported: true},
	}
}

// Routes that act only on the caller's own account (no foreign id can be
// named), and the customer-facing checkout routes, which take no merchant
// credential by design (whoever holds a link or session id is its customer).
// Listed so that a new route must be classified here or above.
var ownAccountRoutes = map[string]bool{
	// Uploads: another merchant's key is a 403 by SPEC.md (Errors rule 6),
	// checked in TestUploads; uploaded logos are public.
	"POST /api/upload": true, "DELETE /api/upload/*key": true, "GET /uploads/*key": true,
	"GET /api/openapi.json": true, "GET /api/checkout/links/:id": true, "POST /api/checkout/quote": true,
	"POST /api/checkout/session": true, "GET /api/checkout/session/:id": true, "POST /api/checkout/session/:id/wallet": true,
	"POST /api/checkout/session/:id/cancel": true, "POST /api/checkout/submit": true,
	"POST /api/checkout/session/:id/authorization": true, "POST /api/v1/products": true, "GET /api/v1/products": true,
	"GET /api/v1/checkouts": true, "GET /api/checkout/session/:id/events": true, "GET /api/payment-exceptions": true,
	"POST /api/auth/signup": true, "POST /api/auth/login": true, "POST /api/auth/logout": true,
	// The caller's own account, or the account a reset link names (another
	// merchant's sessions and password untouched: TestChangePassword,
	// TestLogoutOthers, TestPasswordReset).
	"POST /api/auth/logout-others": true, "POST /api/auth/password": true, "POST /api/auth/password-reset": true,
	"POST /api/auth/password-reset/confirm": true,
	// The caller's own address; a link of another account's confirms
	// nothing (TestEmailConfirmation).
	"POST /api/auth/email-confirmation": true, "POST /api/auth/email-confirmation/confirm": true,
	// The caller's own address (another account's link changes nothing:
	// TestEmailChange).
	"POST /api/auth/email-change": true,
	// The caller's own sessions (another account's: 404, TestSignedInSessions).
	"GET /api/auth/sessions": true, "DELETE /api/auth/sessions/:id": true,
	"GET /api/merchant": true, "PATCH /api/merchant": true, "PATCH /api/merchant/logo": true,
	"GET /api/merchant/wallet-proofs": true, "POST /api/merchant/wallet-proofs": true, "POST /api/merchant/wallet-proofs/message": true,
	// Its path names a wallet, not a record: the caller's own proof of it,
	// or 404 (another merchant's proof of it: TestWalletProofs).
	"DELETE /api/merchant/wallet-proofs/:address": true,
	"POST /api/developer/keys":                    true, "GET /api/developer/keys": true,
	"POST /api/kyb": true, "GET /api/kyb": true, "PATCH /api/kyb": true,
	"POST /api/payment-links": true, "GET /api/payment-links": true,
	"POST /api/customers": true, "GET /api/customers": true, "GET /api/transactions": true,
	"GET /api/subscriptions": true, "POST /api/settlements": true, "GET /api/settlements": true,
	"GET /api/settlements/balance": true, "GET /api/payments": true, "GET /api/webhooks/deliveries": true,
	"POST /api/webhooks": true, "GET /api/webhooks": true, "GET /api/events": true,
	"GET /api/refunds": true, "GET /api/v1/refunds": true,
}

// TestTenantIsolation walks the router's own route table: for every route
// that names a resource, merchant B's credential on merchant A's id answers
// exactly what a missing id answers, and A's test key on A's live resource
// answers the same. A route in neither table fails the test.
func TestTenantIsolation(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		cases := isolationCases()
		a := h.withLive(h.signup())
		b := h.withLive(h.signup())
		cred := func(m merchant, kind string, mode models.Mode) string {
			switch {
			case kind == "session":
				return m.Session
			case mode == models.ModeLive:
				return m.LiveKey
			}
			return m.TestKey
		}
		send := func(method, path, token, body, id string) resp {
			path = strings.Replace(path, ":id", id, 1)
			var payload any
			if body != "" {
				payload = strings.ReplaceAll(body, "{id}", id)
			}
			return h.do(method, path, token, payload)
		}
		covered := 0
		for _, r := range h.srv.Engine().Routes() {
			key := r.Method + " " + r.Path
			c, ok := cases[key]
			if !ok {
				if !ownAccountRoutes[key] {
					t.Errorf("route %s has no tenant-isolation coverage: add it to isolationCases or ownAccountRoutes", key)
				}
				continue
			}
			covered++
			for _, mode := range []models.Mode{models.ModeTest, models.ModeLive} {
				if c.auth == "session" && mode == models.ModeLive {
					continue
				}
				idA := c.create(h, a, mode)
				missing := send(r.Method, r.Path, cred(b, c.auth, mode), c.body, models.NewID())
				foreign := send(r.Method, r.Path, cred(b, c.auth, mode), c.body, idA)
				if foreign.Status != missing.Status || foreign.str("message") != missing.str("message") || foreign.str("code") != missing.str("code") {
					t.Errorf("%s (%s): foreign id answered %d %s, a missing id %d %s", key, mode, foreign.Status, foreign.Raw, missing.Status, missing.Raw)
				}
				if foreign.Status < 400 {
					t.Errorf("%s (%s): merchant B reached A's resource: %s", key, mode, foreign.Raw)
				}
				if c.auth == "key" {
					// A dashboard session on a KEY route acts in ?mode= as
					// that mode's key: B's session never reaches A's data,
					// and A's session in test mode never reaches A's live data.
					withMode := r.Path + "?mode=" + string(mode)
					missing := send(r.Method, withMode, b.Session, c.body, models.NewID())
					foreign := send(r.Method, withMode, b.Session, c.body, idA)
					if foreign.Status != missing.Status || foreign.str("message") != missing.str("message") || foreign.Status < 400 {
						t.Errorf("%s (%s, B's session): foreign id answered %d %s, a missing id %d %s", key, mode, foreign.Status, foreign.Raw, missing.Status, missing.Raw)
					}
					if mode == models.ModeLive {
						own := send(r.Method, r.Path+"?mode=test", a.Session, c.body, idA)
						missingOwn := send(r.Method, r.Path+"?mode=test", a.Session, c.body, models.NewID())
						sameMessage := own.str("message") == missingOwn.str("message") || c.modeMismatchIsReported
						if own.Status != missingOwn.Status || !sameMessage || own.Status < 400 {
							t.Errorf("%s: A's test-mode session on a live resource answered %d %s, a missing id %d %s", key, own.Status, own.Raw, missingOwn.Status, missingOwn.Raw)
						}
					}
				}
				if mode == models.ModeLive && c.auth == "key" {
					// A's own test key never reads A's live resource.
					own := send(r.Method, r.Path, a.TestKey, c.body, idA)
					missingOwn := send(r.Method, r.Path, a.TestKey, c.body, models.NewID())
					sameMessage := own.str("message") == missingOwn.str("message") || c.modeMismatchIsReported
					if own.Status != missingOwn.Status || !sameMessage || own.Status < 400 {
						t.Errorf("%s: test key on a live resource answered %d %s, a missing id %d %s", key, own.Status, own.Raw, missingOwn.Status, missingOwn.Raw)
					}
				}
			}
		}
		if covered != len(cases) {
			t.Errorf("isolationCases names %d routes but only %d exist in the router", len(cases), covered)
		}
		// Nothing B attempted changed A's data.
		links := h.do("GET", "/api/payment-links", a.TestKey, nil).list()
		for _, l := range links {
			if l.(map[string]any)["name"] == "stolen" {
				t.Fatal("merchant B renamed A's link")
			}
		}
		if len(links) == 0 {
			t.Fatal("merchant B deleted A's links")
		}
		if code := h.do("GET", "/api/transactions?limit=100", b.TestKey, nil).Status; code != http.StatusOK {
			t.Fatal(code)
		}
	})
}
