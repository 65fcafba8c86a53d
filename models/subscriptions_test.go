package models_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
	"github.com/paygate/paygate/money"
)

const subWallet = "0x52908400098527886E0F7030069857D2E4169EE7"

// newSubscription creates a subscription of a new customer for m.
func newSubscription(t *testing.T, st *models.Store, m *models.Merchant, email string) *models.Subscription {
	t.Helper()
	sub := &models.Subscription{MerchantID: m.ID, Mode: models.ModeTest, Status: models.SubTrialing, Network: "base_sepolia",
		BillingModel: models.BillingPush, CustomerEmail: email, CustomerWalletAddress: "0x8617E340B3D01FA5F11F306F4090FD50E238070D",
		ProductName: "Pro", Amount: money.FromCents(1999), BillingInterval: "month", IntervalCount: 1,
		MerchantWalletAddress: subWallet, CurrentPeriodStart: time.Now(), CurrentPeriodEnd: time.Now().Add(time.Hour)}
	if err := st.CreateSubscriptionFor(context.Background(), sub, &models.Customer{MerchantID: m.ID, Mode: models.ModeTest, Email: email}); err != nil {
		t.Fatal(err)
	}
	return sub
}

// TestCreateSubscriptionFor: the customer is created with the subscription,
// or reused when the e-mail exists; the row waits for its workflow.
func TestCreateSubscriptionFor(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		m := newMerchant(t, st, "subs@x.io")
		a := newSubscription(t, st, m, "ann@example.com")
		b := newSubscription(t, st, m, "ann@example.com")
		if a.CustomerID == nil || b.CustomerID == nil || *a.CustomerID != *b.CustomerID {
			t.Fatalf("customers %v %v", a.CustomerID, b.CustomerID)
		}
		c, err := st.CustomerByEmail(ctx, models.Scope{MerchantID: m.ID, Mode: models.ModeTest}, "ann@example.com")
		if err != nil || c.ID != *a.CustomerID {
			t.Fatalf("customer %+v %v", c, err)
		}
		rows, err := st.SubscriptionsWithoutWorkflow(ctx, time.Now().Add(time.Minute), 10)
		if err != nil || len(rows) != 2 {
			t.Fatalf("without workflow: %d %v", len(rows), err)
		}
		if err := st.MarkSubscriptionWorkflowStarted(ctx, a.ID); err != nil {
			t.Fatal(err)
		}
		if rows, _ := st.SubscriptionsWithoutWorkflow(ctx, time.Now().Add(time.Minute), 10); len(rows) != 1 || rows[0].ID != b.ID {
			t.Fatalf("after mark: %+v", rows)
		}
	})
}

// TestRecordSubscription: changes apply in sequence order only, events are
// emitted once per change with the subscription's fields and livemode, and
// a retried record returns the same deliveries without moving the row back.
func TestRecordSubscription(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		m := newMerchant(t, st, "rec@x.io")
		ep := &models.WebhookEndpoint{MerchantID: m.ID, Mode: models.ModeTest, URL: "https://hooks.example.com/a",
			Events: models.StringList{"subscription.renewal_due", "subscription.renewed"}, Secret: "whsec_dGVzdA==", Active: true}
		if err := st.CreateWebhookEndpoint(ctx, ep); err != nil {
			t.Fatal(err)
		}
		sub := newSubscription(t, st, m, "bob@example.com")
		start := time.Date(2027, 1, 31, 10, 0, 0, 0, time.UTC)
		end := time.Date(2027, 2, 28, 10, 0, 0, 0, time.UTC)
		due := models.SubscriptionRecord{SubscriptionID: sub.ID, Seq: 2, Status: models.SubRenewalPending,
			CurrentPeriodStart: start, CurrentPeriodEnd: start, BillingAnchor: &start, LatestSessionID: "0192f3a4-0000-7000-8000-000000000001",
			BillingError: "network: base_sepolia is not configured on this server",
			Events: []models.SubscriptionEventSpec{{Type: "subscription.renewal_due",
				Extra: map[string]any{"invoice": map[string]any{"number": 1, "sessionId": "s1"}}}}}
		ids, err := st.RecordSubscription(ctx, due)
		if err != nil || len(ids) != 1 {
			t.Fatalf("record: %v %v", ids, err)
		}
		again, err := st.RecordSubscription(ctx, due)
		if err != nil || len(again) != 1 || again[0] != ids[0] {
			t.Fatalf("retry: %v %v", again, err)
		}
		d, err := st.WebhookDelivery(ctx, ids[0])
		if err != nil {
			t.Fatal(err)
		}
		var env models.Envelope
		if err := json.Unmarshal(d.Payload, &env); err != nil {
			t.Fatal(err)
		}
		if env.Event != "subscription.renewal_due" || env.Data["subscriptionId"] != sub.ID || env.Data["livemode"] != false ||
			env.Data["status"] != models.SubRenewalPending || env.Data["amount"] != "19.99" || env.Data["customerId"] != *sub.CustomerID ||
			env.Data["currentPeriodEnd"] != "2027-01-31T10:00:00.000Z" || env.Data["invoice"] == nil ||
			env.Data["billingError"] != due.BillingError {
			t.Fatalf("payload %+v", env.Data)
		}
		if got, err := st.SubscriptionByID(ctx, sub.ID); err != nil || got.BillingError != due.BillingError {
			t.Fatalf("billing error kept: %+v %v", got, err)
		}
		// A later change, then the earlier one again: the row keeps the later.
		paid := models.SubscriptionRecord{SubscriptionID: sub.ID, Seq: 3, Status: models.SubActive, CurrentPeriodStart: start,
			CurrentPeriodEnd: end, BillingAnchor: &start, LatestSessionID: "0192f3a4-0000-7000-8000-000000000001",
			Events: []models.SubscriptionEventSpec{{Type: "subscription.renewed"}}}
		ids2, err := st.RecordSubscription(ctx, paid)
		if err != nil || len(ids2) != 1 {
			t.Fatalf("renewed: %v %v", ids2, err)
		}
		if _, err := st.RecordSubscription(ctx, due); err != nil {
			t.Fatal(err)
		}
		got, err := st.SubscriptionByID(ctx, sub.ID)
		if err != nil || got.Status != models.SubActive || got.ChangeSeq != 3 || !got.CurrentPeriodEnd.Equal(end) || !got.WorkflowStarted ||
			got.LatestSessionID == nil || got.BillingAnchor == nil || !got.BillingAnchor.Equal(start) || got.BillingError != "" {
			t.Fatalf("row %+v %v", got, err)
		}
		d, _ = st.WebhookDelivery(ctx, ids2[0])
		_ = json.Unmarshal(d.Payload, &env)
		if v, ok := env.Data["billingError"]; !ok || v != nil {
			t.Fatalf("billingError of a billed subscription: %v (present %v)", v, ok)
		}
		if _, ok := env.Data["txHash"]; !ok || env.Data["txHash"] != nil {
			t.Fatalf("renewed without a transaction carries txHash null: %+v", env.Data)
		}
		if _, err := st.RecordSubscription(ctx, models.SubscriptionRecord{SubscriptionID: models.NewID(), Seq: 1}); !errors.Is(err, apperr.ErrNotFound) {
			t.Fatalf("unknown subscription: %v", err)
		}
	})
}

// TestSubscriptionLinkIsHidden: the link pricing a subscription is made
// once, inactive, and never reaches the merchant's link routes.
func TestSubscriptionLinkIsHidden(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		m := newMerchant(t, st, "link@x.io")
		sc := models.Scope{MerchantID: m.ID, Mode: models.ModeTest}
		sub := newSubscription(t, st, m, "cy@example.com")
		l, err := st.SubscriptionLink(ctx, sub.ID)
		if err != nil || l.Active || l.SubscriptionID == nil || *l.SubscriptionID != sub.ID || l.Amount != sub.Amount ||
			l.WalletAddresses["base_sepolia"] != subWallet || l.Name != "Pro" {
			t.Fatalf("link %+v %v", l, err)
		}
		if again, err := st.SubscriptionLink(ctx, sub.ID); err != nil || again.ID != l.ID {
			t.Fatalf("second call made another link: %v %v", again, err)
		}
		if links, err := st.PaymentLinks(ctx, sc, ""); err != nil || len(links) != 0 {
			t.Fatalf("listed: %v %v", links, err)
		}
		if _, err := st.PaymentLink(ctx, sc, l.ID); !errors.Is(err, apperr.ErrNotFound) {
			t.Fatalf("read: %v", err)
		}
		if _, err := st.PaymentLinkOfMerchant(ctx, m.ID, l.ID); !errors.Is(err, apperr.ErrNotFound) {
			t.Fatalf("dashboard read: %v", err)
		}
		active := true
		if _, err := st.UpdatePaymentLink(ctx, sc, l.ID, models.PaymentLinkUpdate{Active: &active}); !errors.Is(err, apperr.ErrNotFound) {
			t.Fatalf("update: %v", err)
		}
		if got, _ := st.PaymentLinkByID(ctx, l.ID); got.Active {
			t.Fatal("the merchant activated a subscription's link")
		}
	})
}

// TestInvoiceSession: a session with a chosen id is created once; its
// outcome names the subscription so the workflow can be told.
func TestInvoiceSession(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		m := newMerchant(t, st, "inv@x.io")
		sub := newSubscription(t, st, m, "di@example.com")
		l, err := st.SubscriptionLink(ctx, sub.ID)
		if err != nil {
			t.Fatal(err)
		}
		ref := "0x" + "cd00000000000000000000000000000000000000000000000000000000000001"
		mk := func() *models.CheckoutSession {
			return &models.CheckoutSession{ID: models.NewID(), SubscriptionID: &sub.ID, PaymentReference: &ref, MerchantID: m.ID,
				Mode: models.ModeTest, PaymentLinkID: l.ID, Network: "base_sepolia", WalletType: "evm", ExpectedAmount: sub.Amount,
				Subtotal: sub.Amount, MerchantWalletAddress: subWallet, TokenAddress: subWallet, ExpiresAt: time.Now().Add(time.Hour)}
		}
		cs := mk()
		got, created, err := st.CreateInvoiceSession(ctx, cs)
		if err != nil || !created || got.Status != models.StatusCreated {
			t.Fatalf("create: %+v %v %v", got, created, err)
		}
		retry := mk()
		retry.ID = cs.ID
		got, created, err = st.CreateInvoiceSession(ctx, retry)
		if err != nil || created || got.ID != cs.ID || got.CreatedAt.IsZero() {
			t.Fatalf("retry: %+v %v %v", got, created, err)
		}
		if h, _ := st.SessionHistory(ctx, cs.ID); len(h) != 1 {
			t.Fatalf("history %d", len(h))
		}
		res, err := st.FinishSession(ctx, models.Outcome{SessionID: cs.ID, EntryID: models.NewID(), Status: models.StatusExpired,
			Source: "server", At: time.Now()})
		if err != nil || res.SubscriptionID != sub.ID {
			t.Fatalf("finish: %+v %v", res, err)
		}
	})
}

// TestSubscriptionsMigration runs 20261123_0004 over a database as 0002 left
// it, with a subscription, a link and a session in it: the columns come
// back with their defaults and the rows are intact; running it twice is
// harmless.
func TestSubscriptionsMigration(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		m := newMerchant(t, st, "mig@x.io")
		sub := &models.Subscription{MerchantID: m.ID, Mode: models.ModeTest, Status: models.SubActive, Network: "base_sepolia",
			BillingModel: "push", Amount: money.FromCents(500), BillingInterval: "month"}
		if err := st.CreateSubscription(ctx, sub); err != nil {
			t.Fatal(err)
		}
		if err := st.RewindSubscriptionsMigration(); err != nil {
			t.Fatal(err)
		}
		if st.HasColumnForTest(&models.Subscription{}, "ChangeSeq") || st.HasColumnForTest(&models.CheckoutSession{}, "SubscriptionID") {
			t.Fatal("rewind left the columns")
		}
		if err := st.Migrate(); err != nil {
			t.Fatal(err)
		}
		if err := st.Migrate(); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			model any
			field string
		}{{&models.Subscription{}, "WorkflowStarted"}, {&models.Subscription{}, "BillingAnchor"},
			{&models.CheckoutSession{}, "SubscriptionID"}, {&models.PaymentLink{}, "SubscriptionID"}} {
			if !st.HasColumnForTest(c.model, c.field) {
				t.Fatalf("%T.%s missing", c.model, c.field)
			}
		}
		got, err := st.SubscriptionByID(ctx, sub.ID)
		if err != nil || got.IntervalCount != 1 || got.WorkflowStarted || got.ChangeSeq != 0 || got.Amount != sub.Amount {
			t.Fatalf("row after migration %+v %v", got, err)
		}
		if ids := models.MigrationIDs(); !contains(ids, "20261123_0004_subscriptions") {
			t.Fatalf("migrations %v", ids)
		}
	})
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// TestInvoiceSessionWatchedWhileOpen: the watcher looks for a session's
// payment while it is open and for the late grace after it ends, counted
// from its expiry; an invoice session is open for 72 hours, and was
// dropped from the watch 24.5 hours after its creation (a customer paying
// its Solana Pay QR code on the second day was never credited, and the
// subscription was canceled unpaid).
func TestInvoiceSessionWatchedWhileOpen(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		t0 := time.Now().UTC()
		now := t0
		st.SetClock(func() time.Time { return now })
		m := newMerchant(t, st, "watched@example.com")
		sub := newSubscription(t, st, m, "watched@example.com")
		ref := "0xcd00000000000000000000000000000000000000000000000000000000000009"
		newInvoiceSession(t, st, sub, ref, t0.Add(72*time.Hour))
		const grace = 24 * time.Hour
		for _, c := range []struct {
			at      time.Duration
			watched bool
		}{{time.Hour, true}, {25 * time.Hour, true}, {48 * time.Hour, true}, {71 * time.Hour, true},
			{72*time.Hour + grace - time.Minute, true}, {72*time.Hour + grace + time.Minute, false}} {
			now = t0.Add(c.at)
			endedAfter := now.Add(-grace)
			refs, err := st.WatchedReferences(ctx, "base_sepolia", endedAfter, 10)
			among, aerr := st.WatchedAmong(ctx, "base_sepolia", []string{ref}, endedAfter)
			if err != nil || aerr != nil {
				t.Fatal(err, aerr)
			}
			if (len(refs) == 1) != c.watched || among[ref] != c.watched {
				t.Fatalf("at t0+%v: listed %v, among %v; want watched %v", c.at, refs, among[ref], c.watched)
			}
		}
	})
}

// TestExceptionNotResolvedIntoAnInvoiceSession: an exception resolved into
// a subscription's invoice session recorded the money while the
// subscription, which renews on its session's own payment only, went on to
// past_due and was canceled unpaid; it is a 400 naming sessionId, and
// resolving it to the customer still works.
func TestExceptionNotResolvedIntoAnInvoiceSession(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		m := newMerchant(t, st, "invoice-exc@example.com")
		sc := models.Scope{MerchantID: m.ID, Mode: models.ModeTest}
		sub := newSubscription(t, st, m, "invoice-exc@example.com")
		cs := newInvoiceSession(t, st, sub, "0xcd0000000000000000000000000000000000000000000000000000000000000a", time.Now().Add(time.Hour))
		if err := st.ExecRaw("UPDATE checkout_sessions SET status = ? WHERE id = ?", models.StatusFailed, cs.ID); err != nil {
			t.Fatal(err)
		}
		exc := &models.PaymentException{MerchantID: m.ID, Mode: models.ModeTest, Network: "base_sepolia",
			TxHash: "0x" + strings.Repeat("ef", 32), Kind: models.ExceptionUnderpaid, Amount: sub.Amount - 1, ExpectedAmount: sub.Amount,
			PayerAddress: "0x2222222222222222222222222222222222222222", MerchantWalletAddress: subWallet, SessionIDs: models.StringList{cs.ID}}
		if _, err := st.OpenException(ctx, exc); err != nil {
			t.Fatal(err)
		}
		_, _, _, err := st.ResolveException(ctx, sc, exc.ID, models.Resolution{SessionID: cs.ID})
		var v *apperr.ValidationError
		if !errors.As(err, &v) || !v.Has("sessionId") {
			t.Fatalf("resolved into an invoice session: %v, want a 400 naming sessionId", err)
		}
		if _, txn, _, err := st.ResolveException(ctx, sc, exc.ID, models.Resolution{CustomerEmail: "invoice-exc@example.com"}); err != nil || txn.SessionID != nil {
			t.Fatalf("resolved to the customer: %+v %v", txn, err)
		}
	})
}

// TestExceptionResolvedForAnInvoice: the subscription workflow's record of
// an exception accepted for the open invoice: a transaction of the
// subscription's customer, the exception naming the subscription, and
// payment.completed naming both; asked again for the same invoice it
// answers the first record and emits nothing; another network, another
// merchant's subscription, or another invoice or subscription afterwards
// (one transfer never pays two periods) is refused.
func TestExceptionResolvedForAnInvoice(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		m := newMerchant(t, st, "accepted@example.com")
		sc := models.Scope{MerchantID: m.ID, Mode: models.ModeTest}
		sub := newSubscription(t, st, m, "ann@example.com")
		other := newSubscription(t, st, newMerchant(t, st, "other-accepted@example.com"), "bob@example.com")
		if err := st.CreateWebhookEndpoint(ctx, &models.WebhookEndpoint{MerchantID: m.ID, Mode: models.ModeTest, URL: "https://hooks.example.com/p",
			Events: models.StringList{"payment.completed"}, Secret: "whsec_dGVzdA=="}); err != nil {
			t.Fatal(err)
		}
		open := func(network, hash string) *models.PaymentException {
			exc := &models.PaymentException{MerchantID: m.ID, Mode: models.ModeTest, Network: network, TxHash: hash, Kind: models.ExceptionUnderpaid,
				Amount: sub.Amount - 300_000, ExpectedAmount: sub.Amount, PayerAddress: "0x2222222222222222222222222222222222222222",
				MerchantWalletAddress: subWallet}
			if _, err := st.OpenException(ctx, exc); err != nil {
				t.Fatal(err)
			}
			return exc
		}
		exc := open("base_sepolia", "0x"+strings.Repeat("ab", 32))
		if _, _, _, err := st.ResolveExceptionForInvoice(ctx, sc, exc.ID, other.ID, 1, ""); !errors.Is(err, apperr.ErrBadRequest) {
			t.Fatalf("another merchant's subscription: %v", err)
		}
		e, txn, ids, err := st.ResolveExceptionForInvoice(ctx, sc, exc.ID, sub.ID, 1, "accepted short")
		if err != nil || len(ids) != 1 {
			t.Fatalf("resolve: %v, %d deliveries", err, len(ids))
		}
		if e.Status != models.ExceptionResolved || e.SubscriptionID == nil || *e.SubscriptionID != sub.ID || e.SubscriptionInvoice != 1 || e.Note != "accepted short" ||
			txn.CustomerEmail != "ann@example.com" || txn.CustomerID == nil || txn.Amount != exc.Amount || txn.SessionID != nil {
			t.Fatalf("exception %+v, transaction %+v", e, txn)
		}
		d, err := st.WebhookDelivery(ctx, ids[0])
		if err != nil {
			t.Fatal(err)
		}
		var payload map[string]any
		if err := json.Unmarshal([]byte(d.Payload), &payload); err != nil {
			t.Fatal(err)
		}
		if data := payload["data"].(map[string]any); data["subscriptionId"] != sub.ID || data["exceptionId"] != exc.ID || data["transactionId"] != txn.ID {
			t.Fatalf("payment.completed %v", data)
		}
		again, txn2, ids2, err := st.ResolveExceptionForInvoice(ctx, sc, exc.ID, sub.ID, 1, "accepted short")
		if err != nil || len(ids2) != 0 || txn2.ID != txn.ID || again.Status != models.ExceptionResolved {
			t.Fatalf("asked again: %+v %+v %v %v", again, txn2, ids2, err)
		}
		if _, _, _, err := st.ResolveExceptionForInvoice(ctx, sc, exc.ID, sub.ID, 2, ""); !errors.Is(err, apperr.ErrConflict) {
			t.Fatalf("resolved for the next invoice too: %v", err)
		}
		sub2 := newSubscription(t, st, m, "cy@example.com")
		if _, _, _, err := st.ResolveExceptionForInvoice(ctx, sc, exc.ID, sub2.ID, 1, ""); !errors.Is(err, apperr.ErrConflict) {
			t.Fatalf("resolved for another subscription: %v", err)
		}
		polygon := open("polygon_amoy", "0x"+strings.Repeat("cd", 32))
		var v *apperr.ValidationError
		if _, _, _, err := st.ResolveExceptionForInvoice(ctx, sc, polygon.ID, sub.ID, 1, ""); !errors.As(err, &v) || !v.Has("subscriptionId") {
			t.Fatalf("another network: %v", err)
		}
	})
}

// newInvoiceSession opens the first invoice's session of sub, with the
// payment reference ref, until expires.
func newInvoiceSession(t *testing.T, st *models.Store, sub *models.Subscription, ref string, expires time.Time) *models.CheckoutSession {
	t.Helper()
	l, err := st.SubscriptionLink(context.Background(), sub.ID)
	if err != nil {
		t.Fatal(err)
	}
	cs := &models.CheckoutSession{ID: models.NewID(), SubscriptionID: &sub.ID, PaymentReference: &ref, MerchantID: sub.MerchantID,
		Mode: models.ModeTest, PaymentLinkID: l.ID, Network: "base_sepolia", WalletType: "evm", ExpectedAmount: sub.Amount,
		Subtotal: sub.Amount, MerchantWalletAddress: subWallet, TokenAddress: subWallet, ExpiresAt: expires, InvoiceNumber: 1}
	if _, _, err := st.CreateInvoiceSession(context.Background(), cs); err != nil {
		t.Fatal(err)
	}
	return cs
}
