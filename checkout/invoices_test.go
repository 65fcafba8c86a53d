package checkout_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/paygate/paygate/activities"
	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/checkout"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
	"github.com/paygate/paygate/money"
)

// A subscription's last dunning session falls due at the subscription's
// final deadline. Past its expiry, until its workflow has stored an
// outcome, voiding it is a conflict (the subscription holds and asks
// again), not "expired": the workflow may have taken the customer's hash
// an instant before the expiry, written to the row a moment later, and
// answering expired cancelled a subscription whose renewal was being paid
// (found by a review in the nineteenth part of issue 16). Once expired,
// or with its hash stored, the answer is what the store says.
func TestVoidInvoiceSessionWaitsForAnEndingSession(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t, "sqlite")
	cs := hubSession(t, st)
	storetest.Exec(t, st, "UPDATE checkout_sessions SET expires_at = ? WHERE id = ?", time.Now().Add(-time.Second).UTC(), cs.ID)
	svc := &checkout.Service{Store: st}
	if status, err := svc.VoidInvoiceSession(ctx, cs.ID); !errors.Is(err, apperr.ErrConflict) || status == models.StatusExpired {
		t.Fatalf("void of a session past its expiry, outcome not stored: %q %v; want a conflict", status, err)
	}
	if _, err := st.FinishSession(ctx, models.Outcome{SessionID: cs.ID, EntryID: models.NewID(), Status: models.StatusExpired,
		Source: "server", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if status, err := svc.VoidInvoiceSession(ctx, cs.ID); err != nil || status != models.StatusExpired {
		t.Fatalf("void once expired: %q %v", status, err)
	}
}

// TestOpenInvoiceSessionUnbillable: once another merchant proves the
// subscription's receiving wallet, no new invoice session is opened to pay
// it, nor once its network is no longer configured (both are refused as
// bad requests: the activity makes them Unbillable, and the workflow holds);
// a retried attempt that had created its session still finds it.
func TestOpenInvoiceSessionUnbillable(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		newMerchant := func(email string) *models.Merchant {
			m := &models.Merchant{Email: email, PasswordHash: "x", BusinessName: "Shop"}
			if _, err := st.CreateMerchant(ctx, m, &models.DashboardSession{TokenHash: models.NewID()},
				models.NewKey{Hash: models.NewID(), Prefix: "p", Suffix: "s", Type: models.ModeTest}); err != nil {
				t.Fatal(err)
			}
			return m
		}
		m, owner := newMerchant("subs@x.io"), newMerchant("owner@x.io")
		const wallet = "0x52908400098527886E0F7030069857D2E4169EE7"
		now := time.Now().UTC()
		sub := &models.Subscription{MerchantID: m.ID, Mode: models.ModeTest, Status: models.SubRenewalPending, Network: "base_sepolia",
			BillingModel: models.BillingPush, CustomerEmail: "ann@example.com", CustomerWalletAddress: "0x8617E340B3D01FA5F11F306F4090FD50E238070D",
			ProductName: "Pro", Amount: money.FromCents(500), BillingInterval: "month", IntervalCount: 1, MerchantWalletAddress: wallet,
			CurrentPeriodStart: now, CurrentPeriodEnd: now.Add(time.Hour)}
		if err := st.CreateSubscriptionFor(ctx, sub, &models.Customer{MerchantID: m.ID, Mode: models.ModeTest, Email: "ann@example.com"}); err != nil {
			t.Fatal(err)
		}
		reg := chain.NewRegistry(chain.Network{Name: chain.NetworkBaseSepolia, Family: chain.FamilyEVM, Mode: chain.ModeTest, ChainID: 84532,
			USDC: "0x036CbD53842c5426634e7929541eC2318f3dCF7e", Decimals: 6, Confirmations: 1, PollInterval: time.Second})
		svc := &checkout.Service{Store: st, Networks: reg} // no Temporal: the session's workflow start is logged, not needed here
		open := func(svc *checkout.Service, id string) (activities.InvoiceSession, error) {
			return svc.OpenInvoiceSession(ctx, activities.InvoiceSessionRequest{SessionID: id, SubscriptionID: sub.ID,
				ExpiresAt: now.Add(time.Hour), Invoice: 1})
		}
		first := models.NewID()
		if got, err := open(svc, first); err != nil || got.SessionID != first {
			t.Fatalf("open: %+v %v", got, err)
		}
		// The merchant proves the wallet as a contract wallet on another
		// network only: on base_sepolia the address may not be its wallet,
		// so no renewal is paid there until it is proven there too.
		contractProof := func(network string) {
			t.Helper()
			if _, err := st.RecordWalletProof(ctx, &models.WalletProof{MerchantID: m.ID, Family: "evm", Address: wallet, Network: network,
				Message: "m", Signature: "s", ProvedAt: now}, 0); err != nil {
				t.Fatal(err)
			}
		}
		contractProof("polygon_amoy")
		if _, err := open(svc, models.NewID()); !errors.Is(err, apperr.ErrBadRequest) ||
			!strings.Contains(err.Error(), "is a contract wallet proven on polygon_amoy only: on base_sepolia") || !strings.Contains(err.Error(), "prove it on base_sepolia") {
			t.Fatalf("a new session to the merchant's contract wallet proven elsewhere: %v", err)
		}
		contractProof("base_sepolia")
		second := models.NewID()
		if got, err := svc.OpenInvoiceSession(ctx, activities.InvoiceSessionRequest{SessionID: second, SubscriptionID: sub.ID,
			ExpiresAt: now.Add(time.Hour), Invoice: 2}); err != nil || got.SessionID != second {
			t.Fatalf("open once proven there too: %+v %v", got, err)
		}
		if err := st.DeleteWalletProof(ctx, m.ID, wallet); err != nil {
			t.Fatal(err)
		}
		if _, err := st.RecordWalletProof(ctx, &models.WalletProof{MerchantID: owner.ID, Family: "evm", Address: wallet,
			Message: "m", Signature: "s", ProvedAt: now}, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := open(svc, models.NewID()); !errors.Is(err, apperr.ErrBadRequest) || !strings.Contains(err.Error(), "proven by another merchant") {
			t.Fatalf("a new session to another merchant's wallet: %v", err)
		}
		if got, err := open(svc, first); err != nil || got.SessionID != first {
			t.Fatalf("a retry of the attempt that created its session: %+v %v", got, err)
		}
		gone := &checkout.Service{Store: st, Networks: chain.NewRegistry()}
		if _, err := open(gone, models.NewID()); !errors.Is(err, apperr.ErrBadRequest) || !strings.Contains(err.Error(), "not configured") {
			t.Fatalf("a new session on a network removed: %v", err)
		}
		if got, err := open(gone, first); err != nil || got.SessionID != first {
			t.Fatalf("a retry once the network was removed: %+v %v", got, err)
		}
	})
}
