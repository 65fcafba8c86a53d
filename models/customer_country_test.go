package models_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
)

// TestCheckoutCustomerKeepsCountry: the customer a checkout's payment
// creates carries the country the checkout collected; a later payment in
// another country does not move it, and a customer recorded without one
// (POST /api/transactions collects none) takes the first a checkout gives.
func TestCheckoutCustomerKeepsCountry(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		f := newLinkFixture(t, st, "country@example.com")
		sc := models.Scope{MerchantID: f.m.ID, Mode: models.ModeTest}
		pay := func(digit, email, country string) {
			t.Helper()
			cs := f.session("0x" + strings.Repeat(digit, 64))
			storetest.Exec(t, st, "UPDATE checkout_sessions SET customer_email = ?, customer_country = ? WHERE id = ?", email, country, cs.ID)
			hash := "0x" + strings.Repeat(digit+"c", 32)
			if err := st.ClaimSessionTxHash(ctx, cs.ID, "base_sepolia", hash); err != nil {
				t.Fatal(err)
			}
			if err := st.RecordSessionTransition(ctx, models.Transition{SessionID: cs.ID, EntryID: models.NewID(),
				Status: models.StatusBroadcast, Source: "client", TxHash: hash, At: time.Now()}); err != nil {
				t.Fatal(err)
			}
			if _, err := st.FinishSession(ctx, models.Outcome{SessionID: cs.ID, EntryID: models.NewID(), Status: models.StatusComplete,
				Source: "chain", ReceivedUnits: "5000000", Bound: true, At: time.Now()}); err != nil {
				t.Fatal(err)
			}
		}
		country := func(email string) string {
			t.Helper()
			cs, _, err := st.Customers(ctx, sc, models.Page{Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range cs {
				if c.Email == email {
					return c.Country
				}
			}
			t.Fatalf("no customer %s", email)
			return ""
		}
		pay("1", "ann@example.com", "DE")
		if got := country("ann@example.com"); got != "DE" {
			t.Fatalf("a checkout's new customer: country %q", got)
		}
		pay("2", "ann@example.com", "FR")
		if got := country("ann@example.com"); got != "DE" {
			t.Fatalf("a later payment from another country moved it: %q", got)
		}
		if err := st.RecordTransaction(ctx, &models.Transaction{MerchantID: f.m.ID, Mode: models.ModeTest, Amount: 100, Token: "USDC",
			Network: "base_sepolia", TxHash: "0x" + strings.Repeat("9", 64), CustomerEmail: "bob@example.com"}); err != nil {
			t.Fatal(err)
		}
		if got := country("bob@example.com"); got != "" {
			t.Fatalf("a recorded transaction's customer: country %q", got)
		}
		pay("3", "bob@example.com", "IT")
		if got := country("bob@example.com"); got != "IT" {
			t.Fatalf("a recorded customer after a checkout: country %q", got)
		}
	})
}
