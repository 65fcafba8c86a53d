package models_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
	"github.com/paygate/paygate/money"
)

// A SQLite file written by the earlier driver (glebarez/go-sqlite, on
// modernc.org/sqlite) opens on the current one (ncruces/go-sqlite3): its rows
// and their times read back equal, rows written by either compare by time in
// SQL as they should, and a duplicate is still told apart from other errors.
func TestSQLiteFileOfTheEarlierDriverReadsBack(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "paygate.db")
	session := func(st *models.Store, linkID, merchantID string, expires time.Time) *models.CheckoutSession {
		t.Helper()
		cs := &models.CheckoutSession{MerchantID: merchantID, Mode: models.ModeTest, PaymentLinkID: linkID, Network: "base_sepolia",
			WalletType: "evm", WalletAddress: "0x" + strings.Repeat("2", 40), ExpectedAmount: money.FromCents(1250),
			MerchantWalletAddress: "0x" + strings.Repeat("1", 40), TokenAddress: "0x" + strings.Repeat("3", 40), ExpiresAt: expires}
		if err := st.CreateCheckoutSession(ctx, cs); err != nil {
			t.Fatal(err)
		}
		return cs
	}

	old, err := models.OpenWithEarlierSQLiteDriver(path, storetest.Keyring())
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Migrate(); err != nil {
		t.Fatal(err)
	}
	m := newMerchant(t, old, "earlier-driver@example.com")
	link := &models.PaymentLink{MerchantID: m.ID, Mode: models.ModeTest, Name: "Earlier", Amount: money.FromCents(1250), Currency: "USD",
		Network: "base_sepolia", Networks: models.StringList{"base_sepolia"}, Token: "USDC", Active: true,
		WalletAddresses: models.StringMap{"base_sepolia": "0x" + strings.Repeat("1", 40)}, MerchantWalletAddress: "0x" + strings.Repeat("1", 40)}
	if err := old.CreatePaymentLink(ctx, link); err != nil {
		t.Fatal(err)
	}
	expires := time.Date(2026, 11, 25, 10, 30, 0, 123456000, time.UTC)
	before := session(old, link.ID, m.ID, expires)
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}

	st, err := models.Open(models.Options{SQLitePath: path, Secrets: storetest.Keyring()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Migrate(); err != nil {
		t.Fatal(err)
	}
	got, err := st.CheckoutSession(ctx, before.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !got.CreatedAt.Equal(before.CreatedAt) || !got.ExpiresAt.Equal(expires) || got.ExpectedAmount.String() != "12.50" {
		t.Fatalf("read back created %v expires %v amount %s; wrote created %v expires %v amount 12.50",
			got.CreatedAt, got.ExpiresAt, got.ExpectedAmount, before.CreatedAt, expires)
	}
	l, err := st.PaymentLinkByID(ctx, link.ID)
	if err != nil || l.WalletAddresses["base_sepolia"] != link.MerchantWalletAddress || !l.Active {
		t.Fatalf("link read back %+v, %v", l, err)
	}

	// A time the current driver binds compares with one the earlier driver
	// wrote: nothing was created before the first session's own instant.
	if rows, err := st.SessionsWithoutWorkflow(ctx, before.CreatedAt, 10); err != nil || len(rows) != 0 {
		t.Fatalf("sessions created before the first one's instant: %d rows (%v), want none", len(rows), err)
	}

	// A row of the current driver, a little later: a time comparison in SQL
	// between the two rows' created_at sees the earlier row only.
	time.Sleep(2 * time.Millisecond)
	after := session(st, link.ID, m.ID, expires.Add(time.Minute))
	rows, err := st.SessionsWithoutWorkflow(ctx, after.CreatedAt, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].ID != before.ID {
		t.Fatalf("sessions created before the second: %d rows, want only %s", len(rows), before.ID)
	}
	if rows, err = st.SessionsWithoutWorkflow(ctx, after.CreatedAt.Add(time.Microsecond), 10); err != nil || len(rows) != 2 {
		t.Fatalf("sessions created before just after the second: %d rows (%v), want 2", len(rows), err)
	}

	// The same email is a unique violation on the current driver too.
	again := &models.Merchant{Email: m.Email, PasswordHash: "x", BusinessName: "Again"}
	if _, err := st.CreateMerchant(ctx, again, &models.DashboardSession{TokenHash: "again"}, models.NewKey{Hash: "again", Type: models.ModeTest}); !errors.Is(err, apperr.ErrConflict) {
		t.Fatalf("second merchant with the same email: %v, want a conflict", err)
	}
}

// BenchmarkSQLiteDriver is a session's creation (its row and first history
// entry in one transaction) and a read of it by id, on the store's driver
// and, as the reference, on the driver it ran before.
func BenchmarkSQLiteDriver(b *testing.B) {
	for _, driver := range []string{"current", "earlier"} {
		b.Run(driver, func(b *testing.B) {
			ctx := context.Background()
			path := filepath.Join(b.TempDir(), "paygate.db")
			open := func() (*models.Store, error) {
				return models.Open(models.Options{SQLitePath: path, Secrets: storetest.Keyring()})
			}
			if driver == "earlier" {
				open = func() (*models.Store, error) { return models.OpenWithEarlierSQLiteDriver(path, storetest.Keyring()) }
			}
			st, err := open()
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			if err := st.Migrate(); err != nil {
				b.Fatal(err)
			}
			wallet := "0x" + strings.Repeat("1", 40)
			link := &models.PaymentLink{MerchantID: models.NewID(), Mode: models.ModeTest, Name: "Bench", Amount: money.FromCents(1250),
				Currency: "USD", Network: "base_sepolia", Networks: models.StringList{"base_sepolia"}, Token: "USDC", Active: true,
				WalletAddresses: models.StringMap{"base_sepolia": wallet}, MerchantWalletAddress: wallet}
			if err := st.CreatePaymentLink(ctx, link); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				cs := &models.CheckoutSession{MerchantID: link.MerchantID, Mode: models.ModeTest, PaymentLinkID: link.ID,
					Network: "base_sepolia", WalletType: "evm", WalletAddress: wallet, ExpectedAmount: money.FromCents(1250),
					MerchantWalletAddress: wallet, TokenAddress: wallet, ExpiresAt: time.Now().Add(time.Hour)}
				if err := st.CreateCheckoutSession(ctx, cs); err != nil {
					b.Fatal(err)
				}
				if _, err := st.CheckoutSession(ctx, cs.ID); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
