package models_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
	"github.com/paygate/paygate/money"
)

func newMerchant(t *testing.T, st *models.Store, email string) *models.Merchant {
	t.Helper()
	m := &models.Merchant{Email: email, PasswordHash: "x", BusinessName: "Shop"}
	sess := &models.DashboardSession{TokenHash: "sess-" + email}
	if _, err := st.CreateMerchant(context.Background(), m, sess, models.NewKey{Hash: "key-" + email, Prefix: "p", Suffix: "s", Type: models.ModeTest}); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestMigrateTwiceIsNoop(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		if err := st.Migrate(); err != nil {
			t.Fatalf("second migrate: %v", err)
		}
	})
}

func TestMerchantEmailUnique(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		newMerchant(t, st, "a@example.com")
		m := &models.Merchant{Email: "a@example.com", PasswordHash: "x", BusinessName: "B"}
		_, err := st.CreateMerchant(context.Background(), m, &models.DashboardSession{TokenHash: "other"}, models.NewKey{Hash: "other", Type: models.ModeTest})
		if !errors.Is(err, apperr.ErrConflict) {
			t.Fatalf("want conflict, got %v", err)
		}
	})
}

func TestOneActiveKeyPerType(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		m := newMerchant(t, st, "k@example.com")
		k2, err := st.ReplaceAPIKey(ctx, m.ID, models.NewKey{Hash: "k2", Prefix: "p", Suffix: "s", Type: models.ModeTest})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.APIKeyByHash(ctx, "key-k@example.com"); !errors.Is(err, apperr.ErrNotFound) {
			t.Fatalf("old key must be revoked, got %v", err)
		}
		if got, err := st.APIKeyByHash(ctx, "k2"); err != nil || got.ID != k2.ID {
			t.Fatalf("new key: %v %v", got, err)
		}
		keys, _ := st.APIKeys(ctx, m.ID)
		if len(keys) != 1 {
			t.Fatalf("want 1 active key, got %d", len(keys))
		}
		// Concurrent regenerations leave exactly one active key.
		var wg sync.WaitGroup
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				_, _ = st.ReplaceAPIKey(ctx, m.ID, models.NewKey{Hash: "c" + string(rune('a'+i)), Prefix: "p", Suffix: "s", Type: models.ModeTest})
			}(i)
		}
		wg.Wait()
		keys, _ = st.APIKeys(ctx, m.ID)
		if len(keys) != 1 {
			t.Fatalf("after races want 1 active key, got %d", len(keys))
		}
	})
}

func TestCustomerEmailUniquePerMerchantAndMode(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		a := newMerchant(t, st, "a@x.io")
		b := newMerchant(t, st, "b@x.io")
		mk := func(m string, mode models.Mode) error {
			return st.CreateCustomer(ctx, &models.Customer{MerchantID: m, Mode: mode, Email: "c@x.io"})
		}
		if err := mk(a.ID, models.ModeTest); err != nil {
			t.Fatal(err)
		}
		if err := mk(a.ID, models.ModeTest); !errors.Is(err, apperr.ErrConflict) {
			t.Fatalf("duplicate: %v", err)
		}
		if err := mk(a.ID, models.ModeLive); err != nil {
			t.Fatalf("other mode: %v", err)
		}
		if err := mk(b.ID, models.ModeTest); err != nil {
			t.Fatalf("other merchant: %v", err)
		}
	})
}

func TestRecordTransactionClaimsHashAndUpdatesTotals(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		m := newMerchant(t, st, "t@x.io")
		sc := models.Scope{MerchantID: m.ID, Mode: models.ModeTest}
		link := &models.PaymentLink{MerchantID: m.ID, Mode: models.ModeTest, Name: "L", Amount: money.FromCents(1000),
			Currency: "USD", Network: "base_sepolia", Networks: models.StringList{"base_sepolia"}, Token: "USDC",
			WalletAddresses: models.StringMap{"base_sepolia": "0xabc"}, MerchantWalletAddress: "0xabc"}
		if err := st.CreatePaymentLink(ctx, link); err != nil {
			t.Fatal(err)
		}
		mkTx := func() *models.Transaction {
			return &models.Transaction{MerchantID: m.ID, Mode: models.ModeTest, PaymentLinkID: &link.ID, Amount: money.FromCents(1000),
				Token: "USDC", Network: "base_sepolia", TxHash: "0x01", CustomerEmail: "payer@x.io", CustomerName: "P"}
		}
		if err := st.RecordTransaction(ctx, mkTx()); err != nil {
			t.Fatal(err)
		}
		if err := st.RecordTransaction(ctx, mkTx()); !errors.Is(err, apperr.ErrConflict) {
			t.Fatalf("reused hash: %v", err)
		}
		l, _ := st.PaymentLink(ctx, sc, link.ID)
		if l.TotalCollected != money.FromCents(1000) || l.TotalTransactions != 1 {
			t.Fatalf("link totals %v %d", l.TotalCollected, l.TotalTransactions)
		}
		cs, _, _ := st.Customers(ctx, sc, models.Page{Limit: 10})
		if len(cs) != 1 || cs[0].TotalSpent != money.FromCents(1000) || cs[0].TransactionCount != 1 {
			t.Fatalf("customer %+v", cs)
		}
		// The same hash on another network is a different transfer.
		other := mkTx()
		other.Network = "eth_sepolia"
		if err := st.RecordTransaction(ctx, other); err != nil {
			t.Fatal(err)
		}
	})
}

func TestCursorPagination(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		m := newMerchant(t, st, "p@x.io")
		sc := models.Scope{MerchantID: m.ID, Mode: models.ModeTest}
		var ids []string
		for i := 0; i < 5; i++ {
			c := &models.Customer{MerchantID: m.ID, Mode: models.ModeTest, Email: string(rune('a'+i)) + "@x.io"}
			if err := st.CreateCustomer(ctx, c); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, c.ID)
		}
		var seen []string
		cursor := ""
		for {
			page, more, err := st.Customers(ctx, sc, models.Page{Limit: 2, StartingAfter: cursor})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range page {
				seen = append(seen, c.ID)
			}
			if !more {
				break
			}
			cursor = page[len(page)-1].ID
		}
		if len(seen) != 5 {
			t.Fatalf("saw %d", len(seen))
		}
		for i := range seen {
			if seen[i] != ids[4-i] {
				t.Fatalf("order: %v vs %v", seen, ids)
			}
		}
	})
}

func TestSubscriptionActions(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		m := newMerchant(t, st, "s@x.io")
		sc := models.Scope{MerchantID: m.ID, Mode: models.ModeTest}
		sub := &models.Subscription{MerchantID: m.ID, Mode: models.ModeTest, Status: models.SubActive, Network: "base_sepolia",
			BillingModel: "push", Amount: money.FromCents(500), BillingInterval: "month"}
		if err := st.CreateSubscription(ctx, sub); err != nil {
			t.Fatal(err)
		}
		got, err := st.ApplySubscriptionAction(ctx, sc, sub.ID, models.ActionPause)
		if err != nil || got.Status != models.SubPaused {
			t.Fatalf("pause: %v %v", got, err)
		}
		if _, err := st.ApplySubscriptionAction(ctx, sc, sub.ID, models.ActionPause); !errors.Is(err, apperr.ErrBadRequest) {
			t.Fatalf("pause twice: %v", err)
		}
		got, err = st.ApplySubscriptionAction(ctx, sc, sub.ID, models.ActionResume)
		if err != nil || got.Status != models.SubActive {
			t.Fatalf("resume: %v %v", got, err)
		}
		got, err = st.ApplySubscriptionAction(ctx, sc, sub.ID, models.ActionCancel)
		if err != nil || !got.CancelAtPeriodEnd || got.Status != models.SubActive {
			t.Fatalf("cancel: %+v %v", got, err)
		}
		if _, err := st.ApplySubscriptionAction(ctx, models.Scope{MerchantID: m.ID, Mode: models.ModeLive}, sub.ID, models.ActionCancel); !errors.Is(err, apperr.ErrNotFound) {
			t.Fatalf("other mode: %v", err)
		}
	})
}

func TestSettlementBalance(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		m := newMerchant(t, st, "b@x.io")
		if err := st.RecordTransaction(ctx, &models.Transaction{MerchantID: m.ID, Mode: models.ModeLive, Amount: money.FromCents(10000),
			Token: "USDC", Network: "base", TxHash: "0xaa"}); err != nil {
			t.Fatal(err)
		}
		mk := func(cents int64, hash string) error {
			return st.CreateSettlement(ctx, &models.Settlement{MerchantID: m.ID, Amount: money.FromCents(cents), Token: "USDC",
				Network: "base", DestinationWallet: "0xdest", TxHash: hash})
		}
		if err := mk(6000, "0x1"); err != nil {
			t.Fatal(err)
		}
		if err := mk(4001, "0x2"); !errors.Is(err, apperr.ErrBadRequest) {
			t.Fatalf("over balance: %v", err)
		}
		if err := mk(4000, "0x3"); err != nil {
			t.Fatal(err)
		}
		bals, _ := st.Balances(ctx, m.ID)
		if len(bals) != 1 || bals[0].Available != 0 {
			t.Fatalf("balances %+v", bals)
		}
	})
}

// A session that failed TX_NOT_FOUND releases its hash: the transfer that
// lands late can still be recorded by the merchant.
func TestTxNotFoundReleasesTheHash(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		m := newMerchant(t, st, "late@x.io")
		link := &models.PaymentLink{MerchantID: m.ID, Mode: models.ModeTest, Name: "L", Amount: money.FromCents(500), Currency: "USD",
			Network: "base_sepolia", Networks: models.StringList{"base_sepolia"}, Token: "USDC",
			WalletAddresses: models.StringMap{"base_sepolia": "0xabc"}, MerchantWalletAddress: "0xabc"}
		if err := st.CreatePaymentLink(ctx, link); err != nil {
			t.Fatal(err)
		}
		finish := func(reason string) string {
			cs := &models.CheckoutSession{MerchantID: m.ID, Mode: models.ModeTest, PaymentLinkID: link.ID, Network: "base_sepolia",
				ExpectedAmount: money.FromCents(500), MerchantWalletAddress: "0xabc", TokenAddress: "0xdef"}
			if err := st.CreateCheckoutSession(ctx, cs); err != nil {
				t.Fatal(err)
			}
			hash := "0x" + strings.Repeat("7", 62) + reason[:2]
			if err := st.ClaimSessionTxHash(ctx, cs.ID, "base_sepolia", hash); err != nil {
				t.Fatal(err)
			}
			if _, err := st.FinishSession(ctx, models.Outcome{SessionID: cs.ID, EntryID: models.NewID(), Status: models.StatusFailed,
				Source: "chain", Reason: reason, At: time.Now()}); err != nil {
				t.Fatal(err)
			}
			return hash
		}
		record := func(hash string) error {
			return st.RecordTransaction(ctx, &models.Transaction{MerchantID: m.ID, Mode: models.ModeTest, Amount: money.FromCents(500),
				Token: "USDC", Network: "base_sepolia", TxHash: hash})
		}
		if err := record(finish(models.ReasonTxNotFound)); err != nil {
			t.Fatalf("a hash released by TX_NOT_FOUND must be recordable: %v", err)
		}
		// Any other failure keeps the claim: the transfer was judged.
		if err := record(finish("INVALID_TRANSFER")); !errors.Is(err, apperr.ErrConflict) {
			t.Fatalf("a judged hash stays claimed: %v", err)
		}
	})
}

// An attempt that was in flight while its endpoint was deleted does not
// reopen the delivery.
func TestDeliveryOfDeletedEndpointStaysFailed(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		m := newMerchant(t, st, "hook@x.io")
		ep := &models.WebhookEndpoint{MerchantID: m.ID, Mode: models.ModeTest, URL: "https://hooks.example/x",
			Events: models.StringList{"checkout.completed"}, Secret: "whsec_x"}
		if err := st.CreateWebhookEndpoint(ctx, ep); err != nil {
			t.Fatal(err)
		}
		ids, err := st.EmitEvent(ctx, m.ID, models.ModeTest, models.EventSpec{Type: "checkout.completed", Key: "k1", Data: map[string]any{"livemode": false}})
		if err != nil || len(ids) != 1 {
			t.Fatalf("emit %v %v", ids, err)
		}
		if err := st.DeleteWebhookEndpoint(ctx, m.ID, ep.ID); err != nil {
			t.Fatal(err)
		}
		if err := st.RecordDeliveryAttempt(ctx, models.AttemptRecord{DeliveryID: ids[0], Attempt: 1, ResponseStatus: 500,
			At: time.Now(), Status: models.DeliveryPending}); err != nil {
			t.Fatal(err)
		}
		d, _ := st.WebhookDelivery(ctx, ids[0])
		if d.Status != models.DeliveryFailed || d.Attempts != 1 {
			t.Fatalf("delivery %s after its endpoint was deleted: %s, %d attempts", d.ID, d.Status, d.Attempts)
		}
	})
}
