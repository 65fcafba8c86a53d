package models_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
	"github.com/paygate/paygate/money"
)

// TestSettlementBalanceIsOneSnapshot: a refund that succeeds while a
// settlement reads the balance is counted once, as held or as refunded,
// never in neither (PostgreSQL: the balance was four statements, each its
// own snapshot, and a refund succeeding between the read of succeeded
// refunds and that of refunds in progress let a settlement pay its amount
// out again: 29.75 settled with 19.75 available, the balance at -10.00).
func TestSettlementBalanceIsOneSnapshot(t *testing.T) {
	if !contains(storetest.Dialects(), "postgres") {
		t.Skip("PostgreSQL only: SQLite's one writer runs the refund's write after the settlement")
	}
	st := storetest.Open(t, "postgres")
	ctx := context.Background()
	f := newRefundFixture(t, st, models.ModeLive) // 29.75 collected on base
	r, h := f.submitted(t, money.FromCents(1000)) // 10.00 held
	var armed atomic.Bool
	// After the balance's first read of refunds, the refund's workflow
	// records its success on another connection.
	hook := func(db *gorm.DB) {
		if !armed.Load() || !strings.Contains(db.Statement.SQL.String(), "refunds") || !armed.CompareAndSwap(true, false) {
			return
		}
		if _, err := st.FinishRefund(context.Background(), models.RefundOutcome{RefundID: r.ID, Status: models.RefundSucceeded, TxHash: h, At: time.Now()}); err != nil {
			t.Errorf("finish: %v", err)
		}
	}
	if err := st.DB().Callback().Query().After("gorm:query").Register("test:refund-succeeds", hook); err != nil {
		t.Fatal(err)
	}
	if err := st.DB().Callback().Row().After("gorm:row").Register("test:refund-succeeds-row", hook); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	err := st.CreateSettlement(ctx, &models.Settlement{MerchantID: f.m.ID, Amount: money.FromCents(2975), Token: "USDC",
		Network: "base", DestinationWallet: "0x00000000000000000000000000000000000000d1", TxHash: "0x" + strings.Repeat("d1", 32)})
	if armed.Load() {
		t.Fatal("the refund's success was not injected into the balance read")
	}
	if err == nil {
		bals, _ := st.Balances(ctx, f.m.ID)
		t.Fatalf("a settlement of 29.75 with 19.75 available was accepted; balances after: %+v", bals)
	}
	bals, err := st.Balances(ctx, f.m.ID)
	if err != nil || len(bals) != 1 || bals[0].Available != money.FromCents(1975) || bals[0].Refunded != money.FromCents(1000) {
		t.Fatalf("balances after the refund: %+v %v", bals, err)
	}
}
