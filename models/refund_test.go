package models_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
	"github.com/paygate/paygate/money"
)

const (
	refundPayer    = "0x75B69029bA0F70f55bb3f688Be7BbeEf539c031b"
	refundMerchant = "0x52908400098527886E0F7030069857D2E4169EE7"
)

func TestSplitRefund(t *testing.T) {
	u := func(v int64) money.Amount { return money.Amount(v) }
	cases := []struct {
		name                                 string
		total, tax, prevAmount, prevTax, amt money.Amount
		wantSub, wantTax                     money.Amount
	}{
		{"whole refund returns the parts", u(29_750_000), u(4_750_000), 0, 0, u(29_750_000), u(25_000_000), u(4_750_000)},
		{"half, floor of the tax share", u(29_750_000), u(4_750_000), 0, 0, u(14_875_000), u(12_500_000), u(2_375_000)},
		{"the rest after a half", u(29_750_000), u(4_750_000), u(14_875_000), u(2_375_000), u(14_875_000), u(12_500_000), u(2_375_000)},
		{"one micro unit", u(3), u(1), 0, 0, u(1), u(1), 0},
		{"no split on record: all subtotal", u(10_000_000), 0, 0, 0, u(4_000_000), u(4_000_000), 0},
		{"overpayment is pre-tax", u(200_000_000), u(19_000_000), 0, 0, u(200_000_000), u(181_000_000), u(19_000_000)},
		{"tax larger than the total is capped", u(5_000_000), u(9_000_000), 0, 0, u(5_000_000), 0, u(5_000_000)},
	}
	for _, c := range cases {
		sub, tax := models.SplitRefund(c.total, c.tax, c.prevAmount, c.prevTax, c.amt)
		if sub != c.wantSub || tax != c.wantTax || sub+tax != c.amt {
			t.Errorf("%s: %s + %s, want %s + %s", c.name, sub, tax, c.wantSub, c.wantTax)
		}
	}
	// Any sequence of refunds, some of which fail (and give their amount
	// back), never holds more than the original parts, and refunding all
	// of it returns exactly the original parts.
	rng := rand.New(rand.NewSource(7))
	for trial := 0; trial < 20000; trial++ {
		total := money.Amount(1 + rng.Int63n(50_000_000))
		taxOrig := money.Amount(rng.Int63n(int64(total) + 1))
		type live struct{ amount, tax money.Amount }
		var held []live
		for step := 0; step < 12; step++ {
			var prevA, prevT money.Amount
			for _, h := range held {
				prevA, prevT = prevA+h.amount, prevT+h.tax
			}
			if prevA > total || prevT > taxOrig || prevA-prevT > total-taxOrig {
				t.Fatalf("trial %d: held %s (tax %s) of %s (tax %s)", trial, prevA, prevT, total, taxOrig)
			}
			remainder := total - prevA
			if remainder == 0 {
				break
			}
			if len(held) > 0 && rng.Intn(4) == 0 {
				i := rng.Intn(len(held)) // a refund fails
				held = append(held[:i], held[i+1:]...)
				continue
			}
			amt := 1 + money.Amount(rng.Int63n(int64(remainder)))
			if rng.Intn(3) == 0 {
				amt = remainder
			}
			sub, tax := models.SplitRefund(total, taxOrig, prevA, prevT, amt)
			if sub < 0 || tax < 0 || sub+tax != amt {
				t.Fatalf("trial %d: split of %s is %s + %s", trial, amt, sub, tax)
			}
			held = append(held, live{amt, tax})
		}
	}
	// No failures: the parts add up exactly.
	for trial := 0; trial < 5000; trial++ {
		total := money.Amount(1 + rng.Int63n(50_000_000))
		taxOrig := money.Amount(rng.Int63n(int64(total) + 1))
		var prevA, prevT money.Amount
		for prevA < total {
			amt := 1 + money.Amount(rng.Int63n(int64(total-prevA)))
			_, tax := models.SplitRefund(total, taxOrig, prevA, prevT, amt)
			prevA, prevT = prevA+amt, prevT+tax
		}
		if prevT != taxOrig {
			t.Fatalf("trial %d: refunds of %s returned tax %s, want %s", trial, total, prevT, taxOrig)
		}
	}
}

// refundFixture is a merchant with a verified transaction of a checkout
// session (subtotal 25.00, tax 4.75) in mode.
type refundFixture struct {
	st   *models.Store
	m    *models.Merchant
	sc   models.Scope
	txn  *models.Transaction
	seq  int
	hash func() string
}

func newRefundFixture(t *testing.T, st *models.Store, mode models.Mode) *refundFixture {
	t.Helper()
	ctx := context.Background()
	m := newMerchant(t, st, strings.ReplaceAll(models.NewID(), "-", "")+"@example.com")
	network := "base_sepolia"
	if mode == models.ModeLive {
		network = "base"
	}
	cs := &models.CheckoutSession{MerchantID: m.ID, Mode: mode, PaymentLinkID: models.NewID(), Network: network,
		Subtotal: money.FromCents(2500), Tax: money.FromCents(475), ExpectedAmount: money.FromCents(2975),
		MerchantWalletAddress: refundMerchant, TokenAddress: "0x036CbD53842c5426634e7929541eC2318f3dCF7e", ExpiresAt: time.Now().Add(time.Hour)}
	if err := st.CreateCheckoutSession(ctx, cs); err != nil {
		t.Fatal(err)
	}
	txn := &models.Transaction{MerchantID: m.ID, Mode: mode, SessionID: &cs.ID, Amount: money.FromCents(2975), Token: "USDC",
		Network: network, TxHash: "0x" + strings.Repeat("1", 32) + strings.ReplaceAll(models.NewID(), "-", ""),
		WalletAddress: refundPayer, MerchantWalletAddress: refundMerchant, Verification: models.VerificationVerified}
	if err := st.RecordTransaction(ctx, txn); err != nil {
		t.Fatal(err)
	}
	f := &refundFixture{st: st, m: m, sc: models.Scope{MerchantID: m.ID, Mode: mode}, txn: txn}
	f.hash = func() string { f.seq++; return fmt.Sprintf("0x%064x", 0xf00d0000+f.seq) }
	return f
}

func (f *refundFixture) refund(amount money.Amount, by string) (*models.Refund, error) {
	return f.st.CreateRefund(context.Background(), models.RefundRequest{Scope: f.sc, TransactionID: f.txn.ID, Amount: amount,
		Reason: "returned", InitiatedBy: by, Window: 24 * time.Hour})
}

func (f *refundFixture) reload(t *testing.T) *models.Transaction {
	t.Helper()
	txn, err := f.st.Transaction(context.Background(), f.sc, f.txn.ID)
	if err != nil {
		t.Fatal(err)
	}
	return txn
}

// notFound fails a submitted refund TX_NOT_FOUND, watched for a week, as
// its workflow does on an EVM network.
func (f *refundFixture) notFound(t *testing.T, id, hash, message string) {
	t.Helper()
	f.failWatched(t, id, hash, models.ReasonTxNotFound, message)
}

// failWatched fails a submitted refund with reason, a transfer sent for it
// still watched for a week.
func (f *refundFixture) failWatched(t *testing.T, id, hash, reason, message string) {
	t.Helper()
	until := time.Now().Add(7 * 24 * time.Hour)
	if _, err := f.st.FinishRefund(context.Background(), models.RefundOutcome{RefundID: id, Status: models.RefundFailed, TxHash: hash,
		Reason: reason, Message: message, At: time.Now(), WatchedUntil: &until}); err != nil {
		t.Fatal(err)
	}
}

// submitted creates a refund of amount by the merchant and submits a hash
// for it; it returns the refund and the hash.
func (f *refundFixture) submitted(t *testing.T, amount money.Amount) (*models.Refund, string) {
	t.Helper()
	return f.submittedBy(t, amount, models.InitiatedByMerchant)
}

// submittedBy is submitted, the refund initiated by by.
func (f *refundFixture) submittedBy(t *testing.T, amount money.Amount, by string) (*models.Refund, string) {
	t.Helper()
	r, err := f.refund(amount, by)
	if err != nil {
		t.Fatal(err)
	}
	h := f.hash()
	if err := f.st.SubmitRefundTx(context.Background(), r.ID, h, time.Now()); err != nil {
		t.Fatal(err)
	}
	return r, h
}

// lost creates a refund of amount, submits a hash for it and fails it
// TX_NOT_FOUND (its transfer unseen: watched); it returns the refund and
// the hash.
func (f *refundFixture) lost(t *testing.T, amount money.Amount, by string) (*models.Refund, string) {
	t.Helper()
	r, h := f.submittedBy(t, amount, by)
	f.notFound(t, r.ID, h, "not found")
	return r, h
}

// givenBack fails a submitted refund TX_NOT_FOUND as a worker from before
// the watch's end was stored did (its message says it is watched, and it
// is): the amount is given back at once, nothing held.
func (f *refundFixture) givenBack(t *testing.T, id, hash string) {
	t.Helper()
	if _, err := f.st.FinishRefund(context.Background(), models.RefundOutcome{RefundID: id, Status: models.RefundFailed, TxHash: hash,
		Reason: models.ReasonTxNotFound, At: time.Now(),
		Message: "refund transaction not found on base_sepolia within 1h0m0s; it is still watched until 2026-12-03T09:00:00Z: if it lands by then, the refund succeeds"}); err != nil {
		t.Fatal(err)
	}
}

// succeed submits a hash for the refund and finishes it succeeded.
func (f *refundFixture) succeed(t *testing.T, r *models.Refund) models.RefundFinish {
	t.Helper()
	ctx := context.Background()
	h := f.hash()
	if err := f.st.SubmitRefundTx(ctx, r.ID, h, time.Now()); err != nil {
		t.Fatal(err)
	}
	out, err := f.st.FinishRefund(ctx, models.RefundOutcome{RefundID: r.ID, Status: models.RefundSucceeded, TxHash: h, At: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRefundLifecycle: a half refund then the remainder, each submitted and
// succeeded once (a repeated outcome changes nothing), with SPEC.md's
// payment.refunded data; a third refund finds nothing left; a failed refund
// gives its amount back; hashes back one refund per merchant and network.
func TestRefundLifecycle(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		f := newRefundFixture(t, st, models.ModeTest)
		ep := &models.WebhookEndpoint{MerchantID: f.m.ID, Mode: models.ModeTest, URL: "https://hooks.example.com/r",
			Events: models.StringList{"payment.refunded"}, Secret: "whsec_dGVzdA=="}
		if err := st.CreateWebhookEndpoint(ctx, ep); err != nil {
			t.Fatal(err)
		}

		half, err := f.refund(money.Amount(14_875_000), models.InitiatedByMerchant)
		if err != nil {
			t.Fatal(err)
		}
		if half.Status != models.RefundPending || half.SubtotalAmount != money.FromCents(1250) || half.TaxAmount != money.Amount(2_375_000) ||
			half.DestinationWallet != refundPayer || half.SourceWallet != refundMerchant || half.Network != "base_sepolia" ||
			half.FeeReversed != 0 || !half.ExpiresAt.After(half.CreatedAt) {
			t.Fatalf("half refund %+v", half)
		}
		if got := f.reload(t); got.RefundReserved != half.Amount || got.RefundedAmount != 0 {
			t.Fatalf("after create: reserved %s refunded %s", got.RefundReserved, got.RefundedAmount)
		}
		fin := f.succeed(t, half)
		if fin.Status != models.RefundSucceeded || fin.FullyRefunded || len(fin.Deliveries) != 1 {
			t.Fatalf("first outcome %+v", fin)
		}
		// Retried after its commit: same answer, counted once.
		again, err := st.FinishRefund(ctx, models.RefundOutcome{RefundID: half.ID, Status: models.RefundSucceeded, TxHash: *mustRefund(t, st, half.ID).TxHash, At: time.Now()})
		if err != nil || again.Status != models.RefundSucceeded || again.FullyRefunded || fmt.Sprint(again.Deliveries) != fmt.Sprint(fin.Deliveries) {
			t.Fatalf("repeated outcome %+v %v", again, err)
		}
		if got := f.reload(t); got.RefundedAmount != half.Amount || got.RefundReserved != half.Amount {
			t.Fatalf("after success: %+v", got)
		}
		// A failed verdict after the success is ignored.
		if late, err := st.FinishRefund(ctx, models.RefundOutcome{RefundID: half.ID, Status: models.RefundFailed, Reason: "X"}); err != nil || late.Status != models.RefundSucceeded {
			t.Fatalf("failure after success: %+v %v", late, err)
		}

		// The rest, by default amount; then nothing is left.
		rest, err := f.refund(0, models.InitiatedByAPI)
		if err != nil {
			t.Fatal(err)
		}
		if rest.Amount != money.Amount(14_875_000) || rest.SubtotalAmount+half.SubtotalAmount != money.FromCents(2500) ||
			rest.TaxAmount+half.TaxAmount != money.FromCents(475) {
			t.Fatalf("rest %+v", rest)
		}
		if _, err := f.refund(0, models.InitiatedByAPI); !errors.Is(err, apperr.ErrBadRequest) {
			t.Fatalf("refund of nothing: %v", err)
		}
		// A failure gives the amount back; a new refund may take it.
		if fin, err := st.FinishRefund(ctx, models.RefundOutcome{RefundID: rest.ID, Status: models.RefundFailed, Reason: "REFUND_EXPIRED", Message: "not paid"}); err != nil || fin.Status != models.RefundFailed || len(fin.Deliveries) != 0 {
			t.Fatalf("failure %+v %v", fin, err)
		}
		if got := f.reload(t); got.RefundReserved != half.Amount {
			t.Fatalf("reserved after a failure: %s", got.RefundReserved)
		}
		if _, err := f.refund(money.FromCents(1500), models.InitiatedByAPI); !errors.Is(err, apperr.ErrBadRequest) {
			t.Fatalf("more than the remainder: %v", err)
		}
		last, err := f.refund(0, models.InitiatedByAPI)
		if err != nil {
			t.Fatal(err)
		}
		// A hash that backs another refund of the merchant is refused.
		used := *mustRefund(t, st, half.ID).TxHash
		if err := st.SubmitRefundTx(ctx, last.ID, used, time.Now()); !errors.Is(err, apperr.ErrConflict) {
			t.Fatalf("reused hash: %v", err)
		}
		fin = f.succeed(t, last)
		if !fin.FullyRefunded {
			t.Fatalf("last outcome %+v", fin)
		}
		if got := f.reload(t); got.RefundedAmount != got.Amount || got.RefundReserved != got.Amount {
			t.Fatalf("fully refunded: %+v", got)
		}
		// Another hash on a submitted refund, or an outcome for another hash.
		if err := st.SubmitRefundTx(ctx, last.ID, f.hash(), time.Now()); !errors.Is(err, apperr.ErrConflict) {
			t.Fatalf("second hash: %v", err)
		}
		// The event carries exactly SPEC.md's fields.
		rows, _, err := st.WebhookDeliveries(ctx, f.sc, models.DeliveryFilter{Event: "payment.refunded"}, models.Page{Limit: 10})
		if err != nil || len(rows) != 2 {
			t.Fatalf("deliveries %d %v", len(rows), err)
		}
		var env struct {
			Data map[string]any `json:"data"`
		}
		if err := json.Unmarshal(rows[0].Payload, &env); err != nil {
			t.Fatal(err)
		}
		want := []string{"refundId", "transactionId", "txHash", "merchantWalletAddress", "amount", "subtotalAmount", "taxAmount",
			"feeReversed", "token", "network", "reason", "fullyRefunded", "initiatedBy", "livemode"}
		if len(env.Data) != len(want) {
			t.Fatalf("event data has %d fields, want %d: %v", len(env.Data), len(want), env.Data)
		}
		for _, k := range want {
			if _, ok := env.Data[k]; !ok {
				t.Fatalf("event data lacks %s: %v", k, env.Data)
			}
		}
		if env.Data["refundId"] != last.ID || env.Data["fullyRefunded"] != true || env.Data["amount"] != "14.875" ||
			env.Data["feeReversed"] != "0.00" || env.Data["initiatedBy"] != "api" || env.Data["livemode"] != false ||
			env.Data["merchantWalletAddress"] != refundMerchant || env.Data["reason"] != "returned" {
			t.Fatalf("event data %v", env.Data)
		}
		list, more, err := st.Refunds(ctx, f.sc, models.RefundFilter{TransactionID: f.txn.ID}, models.Page{Limit: 2})
		if err != nil || len(list) != 2 || !more || list[0].ID != last.ID {
			t.Fatalf("list %d %v %v", len(list), more, err)
		}
		if failed, _, _ := st.Refunds(ctx, f.sc, models.RefundFilter{Status: models.RefundFailed}, models.Page{Limit: 10}); len(failed) != 1 || failed[0].ID != rest.ID {
			t.Fatalf("failed filter %v", failed)
		}
	})
}

func mustRefund(t *testing.T, st *models.Store, id string) *models.Refund {
	t.Helper()
	r, err := st.RefundByID(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestRefundRefusals: another merchant's or mode's transaction is not
// found; an unverified record, a destination equal to the sending wallet
// and a transaction without a payer wallet are refused.
func TestRefundRefusals(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		f := newRefundFixture(t, st, models.ModeTest)
		other := newRefundFixture(t, st, models.ModeTest)
		req := models.RefundRequest{Scope: other.sc, TransactionID: f.txn.ID, InitiatedBy: models.InitiatedByAPI, Window: time.Hour}
		if _, err := st.CreateRefund(ctx, req); !errors.Is(err, apperr.ErrNotFound) {
			t.Fatalf("another merchant's transaction: %v", err)
		}
		req.Scope = models.Scope{MerchantID: f.m.ID, Mode: models.ModeLive}
		if _, err := st.CreateRefund(ctx, req); !errors.Is(err, apperr.ErrNotFound) {
			t.Fatalf("the other mode: %v", err)
		}
		req.Scope, req.Destination = f.sc, strings.ToLower(refundMerchant)
		if _, err := st.CreateRefund(ctx, req); !errors.Is(err, apperr.ErrBadRequest) {
			t.Fatalf("destination = source: %v", err)
		}
		rec := &models.Transaction{MerchantID: f.m.ID, Mode: models.ModeTest, Amount: money.FromCents(100), Token: "USDC",
			Network: "base_sepolia", TxHash: "0x" + strings.Repeat("2", 64), MerchantWalletAddress: refundMerchant}
		if err := st.RecordTransaction(ctx, rec); err != nil {
			t.Fatal(err)
		}
		req.TransactionID, req.Destination = rec.ID, refundPayer
		if _, err := st.CreateRefund(ctx, req); !errors.Is(err, apperr.ErrConflict) {
			t.Fatalf("unverified record: %v", err)
		}
		if err := st.SetRecordVerification(ctx, rec.ID, models.VerificationVerified, ""); err != nil {
			t.Fatal(err)
		}
		req.Destination = ""
		if _, err := st.CreateRefund(ctx, req); !errors.Is(err, apperr.ErrBadRequest) {
			t.Fatalf("no payer wallet on record: %v", err)
		}
		req.Destination = refundPayer
		r, err := st.CreateRefund(ctx, req)
		if err != nil || r.TaxAmount != 0 || r.SubtotalAmount != r.Amount {
			t.Fatalf("record without a split: %+v %v", r, err)
		}
	})
}

// TestConcurrentRefundsNeverExceed: 20 partial refunds of 1.75 (35.00 in
// all) race one request for the remainder on a transaction of 29.75:
// whatever wins, the refunds created add up to exactly the transaction
// (never more), to what it holds in reserve, and their parts to the
// original subtotal and tax.
func TestConcurrentRefundsNeverExceed(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		f := newRefundFixture(t, st, models.ModeTest)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var created []*models.Refund
		refused := 0
		start := make(chan struct{})
		for i := 0; i <= 20; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				<-start
				amount := money.FromCents(175)
				if i == 10 {
					amount = 0 // the remainder
				}
				r, err := f.refund(amount, models.InitiatedByAPI)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					created = append(created, r)
				case errors.Is(err, apperr.ErrBadRequest):
					refused++
				default:
					t.Errorf("refund %d: %v", i, err)
				}
			}(i)
		}
		close(start)
		wg.Wait()
		var sum, sub, tax money.Amount
		for _, r := range created {
			sum, sub, tax = sum+r.Amount, sub+r.SubtotalAmount, tax+r.TaxAmount
		}
		txn := f.reload(t)
		if sum > txn.Amount || sum != txn.RefundReserved || sub > money.FromCents(2500) || tax > money.FromCents(475) {
			t.Fatalf("%d refunds hold %s (subtotal %s, tax %s) of %s; reserved %s", len(created), sum, sub, tax, txn.Amount, txn.RefundReserved)
		}
		if sum != txn.Amount || sub != money.FromCents(2500) || tax != money.FromCents(475) || len(created)+refused != 21 {
			t.Fatalf("the remainder requests left %s of %s unrefunded (%d created, %d refused)", txn.Amount-sum, txn.Amount, len(created), refused)
		}
		t.Logf("%s: %d refunds created (%s), %d refused; subtotal %s + tax %s", st.Dialect(), len(created), sum, refused, sub, tax)
	})
}

// TestBalanceCountsRefunds: succeeded refunds leave the balance, refunds in
// progress hold their amount, failed ones give it back.
func TestBalanceCountsRefunds(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		f := newRefundFixture(t, st, models.ModeLive)
		done, err := f.refund(money.FromCents(500), models.InitiatedByMerchant)
		if err != nil {
			t.Fatal(err)
		}
		f.succeed(t, done)
		held, err := f.refund(money.FromCents(300), models.InitiatedByMerchant)
		if err != nil {
			t.Fatal(err)
		}
		failed, err := f.refund(money.FromCents(100), models.InitiatedByMerchant)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.FinishRefund(ctx, models.RefundOutcome{RefundID: failed.ID, Status: models.RefundFailed, Reason: "TX_REVERTED"}); err != nil {
			t.Fatal(err)
		}
		// Failed TX_NOT_FOUND and watched: it holds its 2.00 as one in
		// progress does, until the watch ends.
		watched, wh := f.submitted(t, money.FromCents(200))
		f.notFound(t, watched.ID, wh, "not found; still watched")
		balance := func(refunded, pending money.Amount) {
			t.Helper()
			bals, err := st.Balances(ctx, f.m.ID)
			if err != nil || len(bals) != 1 {
				t.Fatalf("%+v %v", bals, err)
			}
			b := bals[0]
			if b.Collected != money.FromCents(2975) || b.Refunded != refunded || b.RefundsPending != pending ||
				b.Available != b.Collected-refunded-pending {
				t.Fatalf("balance %+v, want refunded %s and held %s", b, refunded, pending)
			}
		}
		balance(money.FromCents(500), held.Amount+watched.Amount)
		if err := st.CreateSettlement(ctx, &models.Settlement{MerchantID: f.m.ID, Amount: money.FromCents(1976), Token: "USDC",
			Network: "base", DestinationWallet: "0xdest", TxHash: "0xpayout"}); !errors.Is(err, apperr.ErrBadRequest) {
			t.Fatalf("a payout of refunded money: %v", err)
		}
		if err := st.EndRefundWatch(ctx, watched.ID, wh, "watch over"); err != nil {
			t.Fatal(err)
		}
		balance(money.FromCents(500), held.Amount)
	})
}

// TestRefundsFlag: on by default in test mode, off in live until enabled;
// disabled turns both off.
func TestRefundsFlag(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		m := newMerchant(t, st, "flag@example.com")
		if !m.RefundsOn(models.ModeTest) || m.RefundsOn(models.ModeLive) {
			t.Fatalf("default flag %v", m.RefundsEnabled)
		}
		on, err := st.SetRefundsEnabled(ctx, m.ID, true)
		if err != nil || !on.RefundsOn(models.ModeTest) || !on.RefundsOn(models.ModeLive) {
			t.Fatalf("enabled %+v %v", on, err)
		}
		off, err := st.SetRefundsEnabled(ctx, m.ID, false)
		if err != nil || off.RefundsOn(models.ModeTest) || off.RefundsOn(models.ModeLive) {
			t.Fatalf("disabled %+v %v", off, err)
		}
		if _, err := st.SetRefundsEnabled(ctx, models.NewID(), true); !errors.Is(err, apperr.ErrNotFound) {
			t.Fatalf("unknown merchant: %v", err)
		}
	})
}

// TestRefundLandsLate: a refund failed TX_NOT_FOUND holds its amount while
// its transfer is watched (no second refund can pay it twice); when the
// transfer lands later the refund becomes succeeded, its amount refunded
// and payment.refunded emitted, once. The watch's end gives the amount
// back, once. A refund failed by an older worker gave it back at once: a
// refund made in between that took the same amount leaves the transaction
// over-refunded when it lands (the chain's truth) and no further refund
// possible. Only a watched failure is reopened so, and only with its own
// hash.
func TestRefundLandsLate(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		f := newRefundFixture(t, st, models.ModeTest)
		if err := st.CreateWebhookEndpoint(ctx, &models.WebhookEndpoint{MerchantID: f.m.ID, Mode: models.ModeTest, URL: "https://hooks.example.com/r",
			Events: models.StringList{"payment.refunded"}, Secret: "whsec_dGVzdA=="}); err != nil {
			t.Fatal(err)
		}
		lost, h := f.lost(t, money.FromCents(2000), models.InitiatedByMerchant)
		if got := f.reload(t); got.RefundReserved != money.FromCents(2000) {
			t.Fatalf("reserved after the failure: %s, want the 20.00 held while watched", got.RefundReserved)
		}
		if r := mustRefund(t, st, lost.ID); !r.AmountHeld || r.WatchedUntil == nil {
			t.Fatalf("a watched failure: %+v", r)
		}
		// The merchant cannot refund the same 20.00 again meanwhile: only
		// what is left.
		if _, err := f.refund(money.FromCents(2000), models.InitiatedByMerchant); !errors.Is(err, apperr.ErrBadRequest) {
			t.Fatalf("a second refund of the held amount: %v", err)
		}
		rest, err := f.refund(0, models.InitiatedByMerchant)
		if err != nil || rest.Amount != money.FromCents(975) {
			t.Fatalf("the remainder: %+v %v", rest, err)
		}
		if _, err := st.FinishLateRefund(ctx, models.RefundOutcome{RefundID: lost.ID, Status: models.RefundSucceeded, TxHash: f.hash()}); !errors.Is(err, models.ErrRefundHashMismatch) {
			t.Fatalf("late outcome for another hash: %v", err)
		}
		fin, err := st.FinishLateRefund(ctx, models.RefundOutcome{RefundID: lost.ID, Status: models.RefundSucceeded, TxHash: h, At: time.Now()})
		if err != nil || fin.Status != models.RefundSucceeded || fin.FullyRefunded || len(fin.Deliveries) != 1 {
			t.Fatalf("late landing %+v %v", fin, err)
		}
		r := mustRefund(t, st, lost.ID)
		if r.Status != models.RefundSucceeded || r.FailureReason != "" || r.FailureMessage != "" || r.SucceededAt == nil || r.FailedAt == nil || r.AmountHeld {
			t.Fatalf("stored %+v", r)
		}
		if got := f.reload(t); got.RefundedAmount != money.FromCents(2000) || got.RefundReserved != got.Amount {
			t.Fatalf("after the late landing: refunded %s reserved %s", got.RefundedAmount, got.RefundReserved)
		}
		// Retried after its commit: the same answer, counted once.
		if rep, err := st.FinishLateRefund(ctx, models.RefundOutcome{RefundID: lost.ID, Status: models.RefundSucceeded, TxHash: h, At: time.Now()}); err != nil ||
			rep.Status != models.RefundSucceeded || fmt.Sprint(rep.Deliveries) != fmt.Sprint(fin.Deliveries) {
			t.Fatalf("repeated %+v %v", rep, err)
		}
		if got := f.reload(t); got.RefundedAmount != money.FromCents(2000) || got.RefundReserved != got.Amount {
			t.Fatalf("counted twice: refunded %s reserved %s", got.RefundedAmount, got.RefundReserved)
		}
		if fin := f.succeed(t, rest); !fin.FullyRefunded {
			t.Fatalf("the remainder's refund %+v", fin)
		}
		// A refund failed otherwise is answered as stored.
		other, h2 := newRefundFixture(t, st, models.ModeTest).submittedBy(t, money.FromCents(100), models.InitiatedByAPI)
		if _, err := st.FinishRefund(ctx, models.RefundOutcome{RefundID: other.ID, Status: models.RefundFailed, TxHash: h2, Reason: "TX_REVERTED"}); err != nil {
			t.Fatal(err)
		}
		if got, err := st.FinishLateRefund(ctx, models.RefundOutcome{RefundID: other.ID, Status: models.RefundSucceeded, TxHash: h2}); err != nil ||
			got.Status != models.RefundFailed || got.Reason != "TX_REVERTED" {
			t.Fatalf("late outcome of a reverted refund: %+v %v", got, err)
		}
		// The end of a watch rewrites a watched failure's message only.
		if err := st.EndRefundWatch(ctx, other.ID, h2, "watch over"); err != nil || mustRefund(t, st, other.ID).FailureMessage == "watch over" {
			t.Fatalf("end of a watch on a reverted refund: %v", err)
		}
		tf := newRefundFixture(t, st, models.ModeTest)
		third, h3 := tf.submittedBy(t, money.FromCents(100), models.InitiatedByAPI)
		tf.notFound(t, third.ID, h3, "not found; it is still watched")
		if r := mustRefund(t, st, third.ID); r.WatchedUntil == nil || !r.AmountHeld {
			t.Fatalf("a watched failure: %+v", r)
		}
		// A note while the watch goes on: the message only.
		if err := st.NoteRefundWatch(ctx, third.ID, h3, "landed reverted; the one it replaced is watched"); err != nil {
			t.Fatal(err)
		}
		if r := mustRefund(t, st, third.ID); r.FailureMessage != "landed reverted; the one it replaced is watched" || r.WatchedUntil == nil || !r.AmountHeld {
			t.Fatalf("after a note %+v", r)
		}
		if got := tf.reload(t); got.RefundReserved != money.FromCents(100) {
			t.Fatalf("reserved during the watch: %s", got.RefundReserved)
		}
		// The watch's end gives the amount back, once however often it is
		// recorded.
		for range 2 {
			if err := st.EndRefundWatch(ctx, third.ID, h3, "not found, nor after"); err != nil {
				t.Fatal(err)
			}
		}
		if r := mustRefund(t, st, third.ID); r.FailureMessage != "not found, nor after" || r.Status != models.RefundFailed || r.WatchedUntil != nil || r.AmountHeld {
			t.Fatalf("after the end of its watch %+v", r)
		}
		if got := tf.reload(t); got.RefundReserved != 0 {
			t.Fatalf("reserved after the watch's end: %s", got.RefundReserved)
		}
		// No longer watched: a late outcome is answered as stored.
		if got, err := st.FinishLateRefund(ctx, models.RefundOutcome{RefundID: third.ID, Status: models.RefundSucceeded, TxHash: h3}); err != nil ||
			got.Status != models.RefundFailed {
			t.Fatalf("late outcome after the watch's end: %+v %v", got, err)
		}
		// Failed by a worker from before the watch's end was stored (a
		// rolling deploy): its message says it is watched, and it is, but
		// its amount was given back, and the merchant refunded it again.
		// Landing, it is reserved and refunded again: the record shows more
		// refunded than received, as the chain does, and nothing more can
		// be refunded.
		of := newRefundFixture(t, st, models.ModeTest)
		fourth, h4 := of.submittedBy(t, money.FromCents(2000), models.InitiatedByAPI)
		of.givenBack(t, fourth.ID, h4)
		if got := of.reload(t); got.RefundReserved != 0 {
			t.Fatalf("reserved after an older worker's failure: %s", got.RefundReserved)
		}
		again, err := of.refund(money.FromCents(2000), models.InitiatedByMerchant)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := st.FinishLateRefund(ctx, models.RefundOutcome{RefundID: fourth.ID, Status: models.RefundSucceeded, TxHash: h4, At: time.Now()}); err != nil ||
			got.Status != models.RefundSucceeded || got.FullyRefunded {
			t.Fatalf("late outcome of a refund failed by an older worker: %+v %v", got, err)
		}
		if got := of.reload(t); got.RefundedAmount != money.FromCents(2000) || got.RefundReserved != money.FromCents(4000) {
			t.Fatalf("after the late landing: refunded %s reserved %s", got.RefundedAmount, got.RefundReserved)
		}
		if _, err := of.refund(0, models.InitiatedByAPI); !errors.Is(err, apperr.ErrBadRequest) {
			t.Fatalf("refund past an over-refund: %v", err)
		}
		// The pending one still can be paid (the merchant's to decide), and
		// then the record shows 40.00 refunded of 29.75.
		if fin := of.succeed(t, again); !fin.FullyRefunded {
			t.Fatalf("second refund %+v", fin)
		}
		if got := of.reload(t); got.RefundedAmount != money.FromCents(4000) {
			t.Fatalf("refunded %s", got.RefundedAmount)
		}
	})
}

// TestRefundAmountHeldMigration: a refund failed TX_NOT_FOUND and watched
// before 20261128_0019 gave its amount back: after the upgrade it holds
// nothing (the amount stays refundable, as it was), its late landing
// reserves the amount again, and its watch's end gives nothing back twice;
// a failure after the upgrade holds its amount.
func TestRefundAmountHeldMigration(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		f := newRefundFixture(t, st, models.ModeTest)
		landed, h1 := f.submitted(t, money.FromCents(1000))
		ended, h2 := f.submitted(t, money.FromCents(500))
		f.notFound(t, landed.ID, h1, "not found; it is still watched until next week")
		f.notFound(t, ended.ID, h2, "not found; it is still watched until next week")
		// Back to the schema before 20261128_0019, with the amounts given
		// back as the store did then.
		if err := st.DB().Migrator().DropColumn(&models.Refund{}, "AmountHeld"); err != nil {
			t.Fatal(err)
		}
		if err := st.ExecRaw("UPDATE transactions SET refund_reserved = 0 WHERE id = ?", f.txn.ID); err != nil {
			t.Fatal(err)
		}
		st = upgradeAgain(t, st, "20261128_0019_refund_amount_held")
		f.st = st
		if r := mustRefund(t, st, landed.ID); r.AmountHeld || r.WatchedUntil == nil {
			t.Fatalf("after the upgrade %+v", r)
		}
		if err := st.EndRefundWatch(ctx, ended.ID, h2, "watch over"); err != nil {
			t.Fatal(err)
		}
		if got := f.reload(t); got.RefundReserved != 0 {
			t.Fatalf("reserved after an older watch's end: %s", got.RefundReserved)
		}
		if _, err := st.FinishLateRefund(ctx, models.RefundOutcome{RefundID: landed.ID, Status: models.RefundSucceeded, TxHash: h1, At: time.Now()}); err != nil {
			t.Fatal(err)
		}
		if got := f.reload(t); got.RefundReserved != money.FromCents(1000) || got.RefundedAmount != money.FromCents(1000) {
			t.Fatalf("after the late landing: reserved %s refunded %s", got.RefundReserved, got.RefundedAmount)
		}
		third, h3 := f.submitted(t, money.FromCents(700))
		f.notFound(t, third.ID, h3, "not found; it is still watched until next week")
		if got := f.reload(t); got.RefundReserved != money.FromCents(1700) || !mustRefund(t, st, third.ID).AmountHeld {
			t.Fatalf("a failure after the upgrade: reserved %s", got.RefundReserved)
		}
	})
}

// TestLapsedRefundHolds: the holds a repair pass looks at are those of
// failed refunds whose watch ended before the given instant, or that have
// no watch left (a worker from before the hold ended the watch without
// giving the amount back); ReleaseRefundHold gives each back once, and
// nothing that no longer holds.
func TestLapsedRefundHolds(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		f := newRefundFixture(t, st, models.ModeTest)
		watched, h1 := f.submitted(t, money.FromCents(1000))
		f.notFound(t, watched.ID, h1, "not found; still watched")
		orphan, h2 := f.submitted(t, money.FromCents(500))
		f.notFound(t, orphan.ID, h2, "not found; still watched")
		// An older worker's EndRefundWatch: the watch cleared, the amount not given back.
		if err := st.ExecRaw("UPDATE refunds SET watched_until = NULL WHERE id = ?", orphan.ID); err != nil {
			t.Fatal(err)
		}
		ids := func(before time.Time) []string {
			t.Helper()
			var out []string
			after := ""
			for {
				rows, err := st.LapsedRefundHolds(ctx, before, after, 1) // one a page: the cursor pages
				if err != nil {
					t.Fatal(err)
				}
				if len(rows) == 0 {
					return out
				}
				out = append(out, rows[0].ID)
				after = rows[0].ID
			}
		}
		if got := ids(time.Now()); len(got) != 1 || got[0] != orphan.ID {
			t.Fatalf("lapsed now %v, want only the orphan %s", got, orphan.ID)
		}
		if got := ids(time.Now().Add(8 * 24 * time.Hour)); len(got) != 2 {
			t.Fatalf("lapsed after the week %v", got)
		}
		for _, id := range []string{orphan.ID, watched.ID} {
			if ok, err := st.ReleaseRefundHold(ctx, id, "released"); err != nil || !ok {
				t.Fatalf("release %s: %v %v", id, ok, err)
			}
			if ok, err := st.ReleaseRefundHold(ctx, id, "released again"); err != nil || ok {
				t.Fatalf("released %s twice: %v %v", id, ok, err)
			}
		}
		if got := f.reload(t); got.RefundReserved != 0 {
			t.Fatalf("reserved after the releases: %s", got.RefundReserved)
		}
		if r := mustRefund(t, st, watched.ID); r.AmountHeld || r.WatchedUntil != nil || r.FailureMessage != "released" || r.Status != models.RefundFailed {
			t.Fatalf("released %+v", r)
		}
		if got := ids(time.Now().Add(8 * 24 * time.Hour)); len(got) != 0 {
			t.Fatalf("lapsed after the releases %v", got)
		}
	})
}

// TestLateRefundTaxSplit: a refund that lands late, after a refund made
// while it was failed, is split again after that one, so the refunds' tax
// parts add up to the cumulative share of what they refund (tax 4.75 of
// 29.75: 19/119), neither one micro unit short nor one over.
func TestLateRefundTaxSplit(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		for _, c := range []struct {
			name           string
			before, amount money.Amount // refunded before, then each of the two refunds
			late, again    money.Amount // the tax parts once the first has landed
		}{
			// 4 and 4 alone are each taxed 0, together 8 × 19/119 → 1.
			{name: "short", amount: 4, late: 1, again: 0},
			// After 6 (taxed 0), 1 alone is taxed 1 each, together 1 in all.
			{name: "over", before: 6, amount: 1, late: 0, again: 1},
		} {
			lateTaxSplit(t, st, c.name, c.before, c.amount, c.late, c.again, false)
			lateTaxSplit(t, st, c.name+", its hash replaced before it landed", c.before, c.amount, c.late, c.again, true)
		}
	})
}

// lateTaxSplit plays one case of TestLateRefundTaxSplit: after before
// refunded, a refund of amount fails TX_NOT_FOUND, another of amount
// succeeds, then the first lands late (or its hash is replaced and the
// replacement lands); their tax parts must be wantLate and wantAgain.
func lateTaxSplit(t *testing.T, st *models.Store, name string, before, amount, wantLate, wantAgain money.Amount, replaced bool) {
	t.Helper()
	ctx := context.Background()
	f := newRefundFixture(t, st, models.ModeTest)
	if before > 0 {
		r, err := f.refund(before, models.InitiatedByAPI)
		if err != nil {
			t.Fatal(err)
		}
		f.succeed(t, r)
	}
	lost, h := f.lost(t, amount, models.InitiatedByAPI)
	again, err := f.refund(amount, models.InitiatedByAPI)
	if err != nil {
		t.Fatal(err)
	}
	f.succeed(t, again)
	if replaced {
		h = f.hash()
		if err := st.ReplaceRefundTx(ctx, lost.ID, h, time.Now()); err != nil {
			t.Fatal(err)
		}
		if _, err := st.FinishRefund(ctx, models.RefundOutcome{RefundID: lost.ID, Status: models.RefundSucceeded, TxHash: h, At: time.Now()}); err != nil {
			t.Fatal(err)
		}
	} else if _, err := st.FinishLateRefund(ctx, models.RefundOutcome{RefundID: lost.ID, Status: models.RefundSucceeded, TxHash: h, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	l, a := mustRefund(t, st, lost.ID), mustRefund(t, st, again.ID)
	if l.Status != models.RefundSucceeded || l.TaxAmount != wantLate || a.TaxAmount != wantAgain || l.SubtotalAmount+l.TaxAmount != l.Amount {
		t.Errorf("%s: tax parts %s (late, of %s, %s) and %s, want %s and %s", name, l.TaxAmount, l.Amount, l.Status, a.TaxAmount, wantLate, wantAgain)
	}
}

// TestReplaceRefundTx: a submitted refund takes the hash that replaced its
// transfer (the same again is accepted; another refund's hash is not); a
// refund failed TX_NOT_FOUND becomes submitted again with the amount it
// held; one failed by an older worker (its amount given back) is reserved
// again, unless a refund made since holds that amount; a succeeded refund
// takes no other hash.
func TestReplaceRefundTx(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		f := newRefundFixture(t, st, models.ModeTest)
		r, _ := f.submitted(t, money.FromCents(2000))
		second := f.hash()
		for range 2 {
			if err := st.ReplaceRefundTx(ctx, r.ID, second, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
		if got := mustRefund(t, st, r.ID); got.Status != models.RefundSubmitted || *got.TxHash != second {
			t.Fatalf("after the replacement %+v", got)
		}
		// Another refund's hash.
		other, err := f.refund(money.FromCents(500), models.InitiatedByAPI)
		if err != nil {
			t.Fatal(err)
		}
		taken := f.hash()
		if err := st.SubmitRefundTx(ctx, other.ID, taken, time.Now()); err != nil {
			t.Fatal(err)
		}
		if err := st.ReplaceRefundTx(ctx, r.ID, taken, time.Now()); !errors.Is(err, apperr.ErrConflict) {
			t.Fatalf("another refund's hash: %v", err)
		}
		// Failed TX_NOT_FOUND: its amount held, then submitted again with
		// it, even after the rest was refunded.
		f.notFound(t, r.ID, second, "not found; still watched")
		if got := f.reload(t); got.RefundReserved != money.FromCents(2500) {
			t.Fatalf("reserved after the failure: %s", got.RefundReserved)
		}
		if _, err := f.refund(0, models.InitiatedByAPI); err != nil { // the 4.75 left
			t.Fatal(err)
		}
		third := f.hash()
		if err := st.ReplaceRefundTx(ctx, r.ID, third, time.Now()); err != nil {
			t.Fatal(err)
		}
		got := mustRefund(t, st, r.ID)
		if got.Status != models.RefundSubmitted || *got.TxHash != third || got.FailureReason != "" || got.FailedAt != nil || got.AmountHeld || got.WatchedUntil != nil {
			t.Fatalf("a watched failure replaced: %+v", got)
		}
		if got := f.reload(t); got.RefundReserved != got.Amount {
			t.Fatalf("reserved after the replacement: %s", got.RefundReserved)
		}
		// Failed again by an older worker (the amount given back), and the
		// amount refunded since: the replacement is refused.
		f.givenBack(t, r.ID, third)
		if _, err := f.refund(0, models.InitiatedByAPI); err != nil {
			t.Fatal(err)
		}
		if err := st.ReplaceRefundTx(ctx, r.ID, f.hash(), time.Now()); !errors.Is(err, apperr.ErrConflict) {
			t.Fatalf("a replacement past a new refund of the amount: %v", err)
		}
		if got := f.reload(t); got.RefundReserved != got.Amount {
			t.Fatalf("reserved %s of %s", got.RefundReserved, got.Amount)
		}
		// Given back, and not refunded since: reserved again.
		g := newRefundFixture(t, st, models.ModeTest)
		gr, gh := g.submitted(t, money.FromCents(1000))
		g.givenBack(t, gr.ID, gh)
		if err := st.ReplaceRefundTx(ctx, gr.ID, g.hash(), time.Now()); err != nil {
			t.Fatal(err)
		}
		if got := g.reload(t); got.RefundReserved != money.FromCents(1000) {
			t.Fatalf("reserved after replacing a given-back failure: %s", got.RefundReserved)
		}
		// A succeeded refund takes no other hash.
		if _, err := st.FinishRefund(ctx, models.RefundOutcome{RefundID: other.ID, Status: models.RefundSucceeded, TxHash: taken, At: time.Now()}); err != nil {
			t.Fatal(err)
		}
		if err := st.ReplaceRefundTx(ctx, other.ID, f.hash(), time.Now()); !errors.Is(err, apperr.ErrConflict) {
			t.Fatalf("a succeeded refund's hash replaced: %v", err)
		}
	})
}

// TestAdoptRefundTx: a hash the refund's replaced landed after all: the
// refund takes it back and succeeds, refunded once (a submitted refund's
// reservation stands, so does a failed TX_NOT_FOUND one's held amount; one
// an older worker gave back is taken again, even past a refund made since);
// a hash another refund holds is a conflict.
func TestAdoptRefundTx(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		f := newRefundFixture(t, st, models.ModeTest)
		r, first := f.submitted(t, money.FromCents(2000))
		second := f.hash()
		if err := st.ReplaceRefundTx(ctx, r.ID, second, time.Now()); err != nil {
			t.Fatal(err)
		}
		f.notFound(t, r.ID, second, "not found; still watched")
		if _, err := f.refund(0, models.InitiatedByAPI); err != nil { // takes all that is left: 9.75
			t.Fatal(err)
		}
		fin, err := st.AdoptRefundTx(ctx, models.RefundOutcome{RefundID: r.ID, Status: models.RefundSucceeded, TxHash: first, At: time.Now()})
		if err != nil || fin.Status != models.RefundSucceeded {
			t.Fatalf("adopted %+v %v", fin, err)
		}
		if got := mustRefund(t, st, r.ID); got.Status != models.RefundSucceeded || *got.TxHash != first || got.AmountHeld {
			t.Fatalf("stored %+v", got)
		}
		if got := f.reload(t); got.RefundedAmount != money.FromCents(2000) || got.RefundReserved != got.Amount {
			t.Fatalf("refunded %s reserved %s", got.RefundedAmount, got.RefundReserved)
		}
		// Given back by an older worker and refunded since: adopted, the
		// record follows the chain past the transaction's amount.
		o := newRefundFixture(t, st, models.ModeTest)
		or, oh1 := o.submitted(t, money.FromCents(2000))
		oh2 := o.hash()
		if err := st.ReplaceRefundTx(ctx, or.ID, oh2, time.Now()); err != nil {
			t.Fatal(err)
		}
		o.givenBack(t, or.ID, oh2)
		if _, err := o.refund(0, models.InitiatedByAPI); err != nil { // all of it
			t.Fatal(err)
		}
		if fin, err := st.AdoptRefundTx(ctx, models.RefundOutcome{RefundID: or.ID, Status: models.RefundSucceeded, TxHash: oh1, At: time.Now()}); err != nil ||
			fin.Status != models.RefundSucceeded {
			t.Fatalf("adopted after a give-back %+v %v", fin, err)
		}
		if got := o.reload(t); got.RefundedAmount != money.FromCents(2000) || got.RefundReserved != got.Amount+money.FromCents(2000) {
			t.Fatalf("refunded %s reserved %s", got.RefundedAmount, got.RefundReserved)
		}
		if again, err := st.AdoptRefundTx(ctx, models.RefundOutcome{RefundID: r.ID, Status: models.RefundSucceeded, TxHash: first, At: time.Now()}); err != nil ||
			fmt.Sprint(again.Deliveries) != fmt.Sprint(fin.Deliveries) {
			t.Fatalf("repeated %+v %v", again, err)
		}
		if got := f.reload(t); got.RefundedAmount != money.FromCents(2000) {
			t.Fatalf("counted twice: %s", got.RefundedAmount)
		}
		// A re-send that reverted while the transfer it replaced was unseen:
		// failed TX_REVERTED and watched, the replaced one is adopted; failed
		// so without a watch (or after its end), it is not.
		e := newRefundFixture(t, st, models.ModeTest)
		for _, watched := range []bool{true, false} {
			rr, h1 := e.submitted(t, money.FromCents(300))
			h2 := e.hash()
			if err := st.ReplaceRefundTx(ctx, rr.ID, h2, time.Now()); err != nil {
				t.Fatal(err)
			}
			o := models.RefundOutcome{RefundID: rr.ID, Status: models.RefundFailed, TxHash: h2, Reason: "TX_REVERTED", Message: "reverted", At: time.Now()}
			if watched {
				until := time.Now().Add(time.Hour)
				o.WatchedUntil = &until
			}
			if _, err := st.FinishRefund(ctx, o); err != nil {
				t.Fatal(err)
			}
			if got := mustRefund(t, st, rr.ID); (got.WatchedUntil != nil) != watched {
				t.Fatalf("watched %v: stored %+v", watched, got)
			}
			fin, err := st.AdoptRefundTx(ctx, models.RefundOutcome{RefundID: rr.ID, Status: models.RefundSucceeded, TxHash: h1, At: time.Now()})
			switch got := mustRefund(t, st, rr.ID); {
			case err != nil:
				t.Fatal(err)
			case watched && (fin.Status != models.RefundSucceeded || got.Status != models.RefundSucceeded || *got.TxHash != h1 || got.WatchedUntil != nil):
				t.Fatalf("a watched TX_REVERTED failure's replaced hash: %+v, stored %+v", fin, got)
			case !watched && (fin.Status != models.RefundFailed || got.Status != models.RefundFailed || *got.TxHash != h2):
				t.Fatalf("an unwatched TX_REVERTED failure adopted a hash: %+v, stored %+v", fin, got)
			}
		}
		if got := e.reload(t); got.RefundedAmount != money.FromCents(300) || got.RefundReserved != money.FromCents(300) {
			t.Fatalf("refunded %s reserved %s", got.RefundedAmount, got.RefundReserved)
		}
		// A hash another refund holds.
		g := newRefundFixture(t, st, models.ModeTest)
		a, _ := g.refund(money.FromCents(100), models.InitiatedByAPI)
		b, _ := g.refund(money.FromCents(100), models.InitiatedByAPI)
		ha, hb := g.hash(), g.hash()
		if err := st.SubmitRefundTx(ctx, a.ID, ha, time.Now()); err != nil {
			t.Fatal(err)
		}
		if err := st.SubmitRefundTx(ctx, b.ID, hb, time.Now()); err != nil {
			t.Fatal(err)
		}
		if _, err := st.AdoptRefundTx(ctx, models.RefundOutcome{RefundID: a.ID, Status: models.RefundSucceeded, TxHash: hb, At: time.Now()}); !errors.Is(err, apperr.ErrConflict) {
			t.Fatalf("another refund's hash adopted: %v", err)
		}
		if got := mustRefund(t, st, a.ID); got.Status != models.RefundSubmitted || *got.TxHash != ha {
			t.Fatalf("after the refused adoption %+v", got)
		}
	})
}

// TestExceptionRefundNamesItsDestination: a payment resolved from an
// exception (here from another wallet: an exchange's withdrawal paid the
// session) is refunded only to a wallet the merchant names; by default the
// refund went to the sender, the exchange, and was lost to the customer.
func TestExceptionRefundNamesItsDestination(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		m := newMerchant(t, st, "exc@example.com")
		sc := models.Scope{MerchantID: m.ID, Mode: models.ModeTest}
		customer := "0x2222222222222222222222222222222222222222"
		exchange := "0x3333333333333333333333333333333333333333"
		link := &models.PaymentLink{MerchantID: m.ID, Mode: models.ModeTest, Name: "L", Amount: money.FromCents(1000), Currency: "USD",
			Network: "base_sepolia", Networks: models.StringList{"base_sepolia"}, Token: "USDC",
			WalletAddresses: models.StringMap{"base_sepolia": refundMerchant}, MerchantWalletAddress: refundMerchant}
		if err := st.CreatePaymentLink(ctx, link); err != nil {
			t.Fatal(err)
		}
		cs := &models.CheckoutSession{MerchantID: m.ID, Mode: models.ModeTest, PaymentLinkID: link.ID, Network: "base_sepolia",
			WalletAddress: customer, ExpectedAmount: money.FromCents(1000), MerchantWalletAddress: refundMerchant,
			TokenAddress: "0x036CbD53842c5426634e7929541eC2318f3dCF7e", ExpiresAt: time.Now().Add(time.Hour)}
		if err := st.CreateCheckoutSession(ctx, cs); err != nil {
			t.Fatal(err)
		}
		if err := st.ExecRaw("UPDATE checkout_sessions SET status = 'failed' WHERE id = ?", cs.ID); err != nil {
			t.Fatal(err)
		}
		hash := "0x" + strings.Repeat("ab", 32)
		if _, err := st.OpenException(ctx, &models.PaymentException{MerchantID: m.ID, Mode: models.ModeTest, Network: "base_sepolia", TxHash: hash,
			Kind: models.ExceptionWrongPayer, Amount: money.FromCents(1000), ExpectedAmount: money.FromCents(1000), PayerAddress: exchange,
			MerchantWalletAddress: refundMerchant, SessionIDs: models.StringList{cs.ID}, Message: "from another wallet"}); err != nil {
			t.Fatal(err)
		}
		excs, _, err := st.PaymentExceptions(ctx, sc, models.ExceptionFilter{}, models.Page{Limit: 10})
		if err != nil || len(excs) != 1 {
			t.Fatalf("%v %v", excs, err)
		}
		_, txn, _, err := st.ResolveException(ctx, sc, excs[0].ID, models.Resolution{SessionID: cs.ID})
		if err != nil {
			t.Fatal(err)
		}
		req := models.RefundRequest{Scope: sc, TransactionID: txn.ID, InitiatedBy: models.InitiatedByMerchant, Window: time.Hour}
		_, err = st.CreateRefund(ctx, req)
		var v *apperr.ValidationError
		if !errors.As(err, &v) || !v.Has("destinationWallet") {
			t.Fatalf("a refund of a payment from an exception without a destination: %v, want a 400 naming destinationWallet", err)
		}
		req.Destination = customer
		r, err := st.CreateRefund(ctx, req)
		if err != nil || r.DestinationWallet != customer {
			t.Fatalf("with the customer's wallet named: %+v %v", r, err)
		}
	})
}

// TestRefundsCountOnLinkAndCustomer: a succeeded refund (on time, or landing
// late after its failure) adds its amount to its payment's link's and
// customer's TotalRefunded, once; a failed one adds nothing; the gross
// totals stay. Migration 20261129_0022 counts the refunds that succeeded
// before it.
func TestRefundsCountOnLinkAndCustomer(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		f := newRefundFixture(t, st, models.ModeTest)
		link := f.link(t)
		f.txn = &models.Transaction{MerchantID: f.m.ID, Mode: models.ModeTest, PaymentLinkID: &link.ID, Amount: money.FromCents(2975),
			Token: "USDC", Network: "base_sepolia", TxHash: "0x" + strings.Repeat("2", 32) + strings.ReplaceAll(models.NewID(), "-", ""),
			WalletAddress: refundPayer, MerchantWalletAddress: refundMerchant, CustomerEmail: "ann@example.com", Verification: models.VerificationVerified}
		if err := st.RecordTransaction(ctx, f.txn); err != nil {
			t.Fatal(err)
		}
		totals := func() (linkRefunded, customerRefunded money.Amount) {
			t.Helper()
			l, err := st.PaymentLink(ctx, f.sc, link.ID)
			if err != nil {
				t.Fatal(err)
			}
			c, err := st.Customer(ctx, f.sc, *f.txn.CustomerID)
			if err != nil {
				t.Fatal(err)
			}
			if l.TotalCollected != money.FromCents(2975) || l.TotalTransactions != 1 || c.TotalSpent != money.FromCents(2975) {
				t.Fatalf("the gross totals moved: link %s (%d), customer %s", l.TotalCollected, l.TotalTransactions, c.TotalSpent)
			}
			return l.TotalRefunded, c.TotalRefunded
		}
		r1, err := f.refund(money.FromCents(1000), models.InitiatedByMerchant)
		if err != nil {
			t.Fatal(err)
		}
		f.succeed(t, r1)
		// Its outcome repeated changes nothing.
		if _, err := st.FinishRefund(ctx, models.RefundOutcome{RefundID: r1.ID, Status: models.RefundSucceeded, TxHash: *mustRefund(t, st, r1.ID).TxHash, At: time.Now()}); err != nil {
			t.Fatal(err)
		}
		if l, c := totals(); l != money.FromCents(1000) || c != money.FromCents(1000) {
			t.Fatalf("after a refund of 10.00: link %s, customer %s", l, c)
		}
		failed, h := f.lost(t, money.FromCents(500), models.InitiatedByMerchant)
		if l, c := totals(); l != money.FromCents(1000) || c != money.FromCents(1000) {
			t.Fatalf("a failed refund counted: link %s, customer %s", l, c)
		}
		if _, err := st.FinishLateRefund(ctx, models.RefundOutcome{RefundID: failed.ID, Status: models.RefundSucceeded, TxHash: h, At: time.Now()}); err != nil {
			t.Fatal(err)
		}
		if l, c := totals(); l != money.FromCents(1500) || c != money.FromCents(1500) {
			t.Fatalf("after a late landing of 5.00: link %s, customer %s", l, c)
		}
		// A replaced transfer that landed after all (AdoptRefundTx).
		replaced, first := f.submitted(t, money.FromCents(300))
		if err := st.ReplaceRefundTx(ctx, replaced.ID, f.hash(), time.Now()); err != nil {
			t.Fatal(err)
		}
		if _, err := st.AdoptRefundTx(ctx, models.RefundOutcome{RefundID: replaced.ID, Status: models.RefundSucceeded, TxHash: first, At: time.Now()}); err != nil {
			t.Fatal(err)
		}
		if l, c := totals(); l != money.FromCents(1800) || c != money.FromCents(1800) {
			t.Fatalf("after an adopted transfer of 3.00: link %s, customer %s", l, c)
		}

		// Back to the schema before 20261129_0022: the upgrade counts them.
		for _, model := range []any{&models.PaymentLink{}, &models.Customer{}} {
			if err := st.DB().Migrator().DropColumn(model, "TotalRefunded"); err != nil {
				t.Fatal(err)
			}
		}
		st = upgradeAgain(t, st, "20261129_0022_totals_refunded")
		if l, c := totals(); l != money.FromCents(1800) || c != money.FromCents(1800) {
			t.Fatalf("after the upgrade: link %s, customer %s", l, c)
		}
	})
}

// link makes an active base_sepolia payment link of the fixture's merchant.
func (f *refundFixture) link(t *testing.T) *models.PaymentLink {
	t.Helper()
	l := &models.PaymentLink{MerchantID: f.m.ID, Mode: f.sc.Mode, Name: "Mug", Amount: money.FromCents(2975), Currency: "USD",
		Network: "base_sepolia", Networks: models.StringList{"base_sepolia"}, Token: "USDC",
		WalletAddresses: models.StringMap{"base_sepolia": refundMerchant}, MerchantWalletAddress: refundMerchant}
	if err := f.st.CreatePaymentLink(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	return l
}

// TestAdoptedRecordMovesItsRefunds: a verified record refunded, then
// adopted by the session its transfer paid (on another link), moves what
// its refunds gave back with its gross figures to the session's link.
func TestAdoptedRecordMovesItsRefunds(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		f := newRefundFixture(t, st, models.ModeTest)
		recorded, paid := f.link(t), f.link(t)
		hash := f.hash()
		cs := &models.CheckoutSession{MerchantID: f.m.ID, Mode: models.ModeTest, PaymentLinkID: paid.ID, Network: "base_sepolia",
			WalletType: "evm", WalletAddress: refundPayer, CustomerEmail: "ann@example.com", ExpectedAmount: money.FromCents(2975),
			MerchantWalletAddress: refundMerchant, TokenAddress: "0x036CbD53842c5426634e7929541eC2318f3dCF7e", ExpiresAt: time.Now().Add(time.Hour)}
		if err := st.CreateCheckoutSession(ctx, cs); err != nil {
			t.Fatal(err)
		}
		broadcastHash(t, st, cs, hash)
		f.txn = &models.Transaction{MerchantID: f.m.ID, Mode: models.ModeTest, PaymentLinkID: &recorded.ID, Amount: money.FromCents(2975),
			Token: "USDC", Network: "base_sepolia", TxHash: hash, WalletAddress: refundPayer, MerchantWalletAddress: refundMerchant,
			CustomerEmail: "ann@example.com", Verification: models.VerificationVerified}
		if err := st.RecordTransaction(ctx, f.txn); err != nil {
			t.Fatal(err)
		}
		r, err := f.refund(money.FromCents(1000), models.InitiatedByMerchant)
		if err != nil {
			t.Fatal(err)
		}
		f.succeed(t, r)
		if res, err := st.FinishSession(ctx, models.Outcome{SessionID: cs.ID, EntryID: models.NewID(), Status: models.StatusComplete,
			Source: "chain", Chain: "base_sepolia", ReceivedUnits: "29750000", Payer: refundPayer, Bound: true, At: time.Now()}); err != nil ||
			res.Status != models.StatusComplete {
			t.Fatalf("the session adopts the record: %+v %v", res, err)
		}
		for _, c := range []struct {
			link                *models.PaymentLink
			collected, refunded money.Amount
			count               int64
		}{{recorded, 0, 0, 0}, {paid, money.FromCents(2975), money.FromCents(1000), 1}} {
			l, err := st.PaymentLink(ctx, f.sc, c.link.ID)
			if err != nil {
				t.Fatal(err)
			}
			if l.TotalCollected != c.collected || l.TotalTransactions != c.count || l.TotalRefunded != c.refunded {
				t.Errorf("link %s: collected %s in %d, refunded %s; want %s in %d, %s", l.ID, l.TotalCollected, l.TotalTransactions,
					l.TotalRefunded, c.collected, c.count, c.refunded)
			}
		}
	})
}

// upgradeAgain forgets that migration id ran and migrates, as an upgraded
// binary would over the schema before it; on PostgreSQL through a store of
// its own (the old connections cached plans of tables whose columns
// changed). It returns the store to go on with.
func upgradeAgain(t *testing.T, st *models.Store, id string) *models.Store {
	t.Helper()
	if err := st.ExecRaw("DELETE FROM schema_migrations WHERE id = ?", id); err != nil {
		t.Fatal(err)
	}
	if st.Dialect() == "postgres" {
		up, err := models.Open(models.Options{DatabaseURL: storetest.URL(t, st), Secrets: storetest.Keyring()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = up.Close() })
		st = up
	}
	if err := st.Migrate(); err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	return st
}

// TestRefundsAwaitingTransfer: the refund watcher's lists hold the pending
// refunds without a hash whose window is open, of every merchant and mode:
// one row per network and source wallet with its oldest refund's creation,
// and, for a transfer, the refunds of its amount from its wallet, oldest
// first; never a submitted, failed or lapsed refund.
func TestRefundsAwaitingTransfer(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		f, g := newRefundFixture(t, st, models.ModeTest), newRefundFixture(t, st, models.ModeLive)
		mustRefundOf := func(f *refundFixture, amount money.Amount) *models.Refund {
			t.Helper()
			r, err := f.refund(amount, models.InitiatedByAPI)
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		a := mustRefundOf(f, money.FromCents(100))
		_, submittedHash := f.submitted(t, money.FromCents(100))
		failed := mustRefundOf(f, money.FromCents(100))
		if _, err := st.FinishRefund(ctx, models.RefundOutcome{RefundID: failed.ID, Status: models.RefundFailed, Reason: "REFUND_EXPIRED"}); err != nil {
			t.Fatal(err)
		}
		lapsing, err := f.st.CreateRefund(ctx, models.RefundRequest{Scope: f.sc, TransactionID: f.txn.ID, Amount: money.FromCents(100),
			InitiatedBy: models.InitiatedByAPI, Window: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		other := mustRefundOf(f, money.FromCents(200))
		c := mustRefundOf(g, money.FromCents(100))

		sources := func(now time.Time) string {
			rows, err := st.RefundSourcesAwaitingTransfer(ctx, now)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, r := range rows {
				out = append(out, fmt.Sprintf("%s/%s/%s/%d/%s/%d", r.Network, r.SourceWallet, r.Oldest.UTC().Format(time.RFC3339Nano),
					r.Count, r.NewestID, r.Expired))
			}
			return strings.Join(out, " ")
		}
		stamp := func(r *models.Refund) string { // as stored (PostgreSQL keeps microseconds)
			return mustRefund(t, st, r.ID).CreatedAt.UTC().Format(time.RFC3339Nano)
		}
		// The expired refund counts too (a transfer sent late is recorded).
		want := "base/" + refundMerchant + "/" + stamp(c) + "/1/" + c.ID + "/0 base_sepolia/" + refundMerchant + "/" + stamp(a) + "/4/" + other.ID + "/1"
		if got := sources(time.Now()); got != want {
			t.Fatalf("sources now:\n%s\nwant\n%s", got, want)
		}
		// The refunds a transfer to the payer (spelt in capitals) may pay,
		// as list answers them.
		type lister func(context.Context, string, string, string, bool, money.Amount, time.Time, int) ([]models.Refund, error)
		owed := func(list lister, network string, amount money.Amount, now time.Time) []string {
			rows, err := list(ctx, network, refundMerchant, "0x"+strings.ToUpper(refundPayer[2:]), true, amount, now, 10)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, r := range rows {
				ids = append(ids, r.ID)
			}
			return ids
		}
		from := func(network string, amount money.Amount, now time.Time) []string {
			return owed(st.RefundsAwaitingTransferFrom, network, amount, now)
		}
		if got, want := from("base_sepolia", money.FromCents(100), time.Now()), []string{a.ID, lapsing.ID}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("refunds of 1.00 now: %v, want %v", got, want)
		}
		if got, want := from("base_sepolia", money.FromCents(200), time.Now()), []string{other.ID}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("refunds of 2.00: %v, want %v", got, want)
		}
		if got, want := from("base", money.FromCents(100), time.Now()), []string{c.ID}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("live refunds of 1.00: %v, want %v", got, want)
		}
		later := time.Now().Add(2 * time.Minute)
		if got, want := from("base_sepolia", money.FromCents(100), later), []string{a.ID}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("refunds of 1.00 after a window of a minute: %v, want %v", got, want)
		}
		// Another destination, or one spelt otherwise where case counts, is none.
		if rows, err := st.RefundsAwaitingTransferFrom(ctx, "base_sepolia", refundMerchant, "0x"+strings.Repeat("9", 40), true, money.FromCents(100),
			time.Now(), 10); err != nil || len(rows) != 0 {
			t.Fatalf("another destination: %v %v", rows, err)
		}
		if rows, err := st.RefundsAwaitingTransferFrom(ctx, "base_sepolia", refundMerchant, strings.ToLower(refundPayer), false, money.FromCents(100),
			time.Now(), 10); err != nil || len(rows) != 0 {
			t.Fatalf("a destination spelt otherwise, case counting: %v %v", rows, err)
		}
		// Past every window the expired refund is still watched, for
		// ExpiredRefundWatch after its own.
		// Its reading starts at its creation: a transfer sent inside its
		// window that no worker read (down over its end) is read too.
		if got, want := sources(time.Now().Add(48*time.Hour)), "base_sepolia/"+refundMerchant+"/"+stamp(failed)+"/1/"+failed.ID+"/1"; got != want {
			t.Fatalf("sources after every window:\n%s\nwant\n%s", got, want)
		}
		if got := sources(time.Now().Add(24*time.Hour + models.ExpiredRefundWatch + time.Hour)); got != "" {
			t.Fatalf("sources after the expired refund's watch: %q", got)
		}
		expired := func(amount money.Amount, now time.Time) []string {
			return owed(st.ExpiredRefundsAwaitingTransferFrom, "base_sepolia", amount, now)
		}
		if got, want := expired(money.FromCents(100), time.Now()), []string{failed.ID}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("expired refunds of 1.00: %v, want %v", got, want)
		}
		if got := expired(money.FromCents(200), time.Now()); len(got) != 0 {
			t.Fatalf("expired refunds of 2.00: %v", got)
		}
		if got := expired(money.FromCents(100), time.Now().Add(24*time.Hour+models.ExpiredRefundWatch+time.Hour)); len(got) != 0 {
			t.Fatalf("expired refunds after their watch: %v", got)
		}

		// The transfer found late: a pending refund, or a hash that backs
		// another refund, is a conflict; the expired one takes it, once.
		if err := st.CreateWebhookEndpoint(ctx, &models.WebhookEndpoint{MerchantID: f.m.ID, Mode: models.ModeTest, URL: "https://hooks.example.com/r",
			Events: models.StringList{"payment.refunded"}, Secret: "whsec_dGVzdA=="}); err != nil {
			t.Fatal(err)
		}
		late := func(id, hash string) (models.RefundFinish, error) {
			return st.FinishExpiredRefundLate(ctx, models.RefundOutcome{RefundID: id, Status: models.RefundSucceeded, TxHash: hash, At: time.Now()})
		}
		before := f.reload(t)
		if _, err := late(a.ID, f.hash()); !errors.Is(err, apperr.ErrConflict) {
			t.Fatalf("a pending refund: %v", err)
		}
		// Another merchant's refund's hash (both named the wallet theirs).
		of := newRefundFixture(t, st, models.ModeTest)
		of.seq = 1000 // a hash of its own
		theirsRefund, theirs := of.submitted(t, money.FromCents(100))
		for _, c := range []struct {
			merchant, network, hash string
			want                    bool
		}{
			{"", "base_sepolia", submittedHash, true}, {"", "base", submittedHash, false}, {"", "base_sepolia", f.hash(), false},
			{f.m.ID, "base_sepolia", submittedHash, true}, {f.m.ID, "base_sepolia", theirs, false}, {"", "base_sepolia", theirs, true},
		} {
			if taken, err := st.RefundHashTaken(ctx, c.merchant, c.network, c.hash); err != nil || taken != c.want {
				t.Fatalf("hash %s on %s taken (merchant %q): %v %v", c.hash, c.network, c.merchant, taken, err)
			}
		}
		if _, err := late(failed.ID, submittedHash); !errors.Is(err, apperr.ErrConflict) {
			t.Fatalf("another refund's hash: %v", err)
		}
		if r := mustRefund(t, st, failed.ID); r.Status != models.RefundFailed || r.TxHash != nil {
			t.Fatalf("after the refusals: %+v", r)
		}
		h := f.hash()
		fin, err := late(failed.ID, h)
		if err != nil || fin.Status != models.RefundSucceeded || fin.FullyRefunded || len(fin.Deliveries) != 1 {
			t.Fatalf("the late transfer: %+v %v", fin, err)
		}
		r := mustRefund(t, st, failed.ID)
		if r.Status != models.RefundSucceeded || r.TxHash == nil || *r.TxHash != h || r.FailureReason != "" || r.SucceededAt == nil || r.SubmittedAt == nil {
			t.Fatalf("stored %+v", r)
		}
		after := f.reload(t)
		if after.RefundedAmount != before.RefundedAmount+money.FromCents(100) || after.RefundReserved != before.RefundReserved+money.FromCents(100) {
			t.Fatalf("refunded %s -> %s, reserved %s -> %s", before.RefundedAmount, after.RefundedAmount, before.RefundReserved, after.RefundReserved)
		}
		if rep, err := late(failed.ID, h); err != nil || fmt.Sprint(rep.Deliveries) != fmt.Sprint(fin.Deliveries) {
			t.Fatalf("repeated: %+v %v", rep, err)
		}
		if _, err := late(failed.ID, f.hash()); !errors.Is(err, apperr.ErrConflict) {
			t.Fatalf("a second hash: %v", err)
		}
		if got := f.reload(t); got.RefundedAmount != after.RefundedAmount || got.RefundReserved != after.RefundReserved {
			t.Fatalf("counted twice: refunded %s reserved %s", got.RefundedAmount, got.RefundReserved)
		}
		if got := expired(money.FromCents(100), time.Now()); len(got) != 0 {
			t.Fatalf("expired refunds once recorded: %v", got)
		}

		// A hash that another merchant's refund holds (a stranger who named
		// the wallet theirs too, and submitted it first) is recorded for
		// this merchant's expired refund all the same: each merchant's
		// refunds are judged apart, and theirs is left as it was.
		second, err := f.refund(money.FromCents(100), models.InitiatedByAPI)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.FinishRefund(ctx, models.RefundOutcome{RefundID: second.ID, Status: models.RefundFailed, Reason: models.ReasonRefundExpired}); err != nil {
			t.Fatal(err)
		}
		if fin, err := late(second.ID, theirs); err != nil || fin.Status != models.RefundSucceeded {
			t.Fatalf("another merchant's refund's hash: %+v %v", fin, err)
		}
		if r := mustRefund(t, st, theirsRefund.ID); r.Status != models.RefundSubmitted || r.TxHash == nil || *r.TxHash != theirs {
			t.Fatalf("the other merchant's refund after: %+v", r)
		}
	})
}

// TestAdoptedRecordWithoutACustomer: a record made without a customer
// (customerEmail is optional) that a session then completes with was
// adopted with no customer: the session's customer was never made and
// spent nothing, and checkout.completed named no customer. The session's
// customer is counted now, with the received amount.
func TestAdoptedRecordWithoutACustomer(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		f := newRefundFixture(t, st, models.ModeTest)
		paid := f.link(t)
		hash := f.hash()
		cs := &models.CheckoutSession{MerchantID: f.m.ID, Mode: models.ModeTest, PaymentLinkID: paid.ID, Network: "base_sepolia",
			WalletType: "evm", WalletAddress: refundPayer, CustomerEmail: "bea@example.com", CustomerName: "Bea",
			ExpectedAmount: money.FromCents(2975), MerchantWalletAddress: refundMerchant,
			TokenAddress: "0x036CbD53842c5426634e7929541eC2318f3dCF7e", ExpiresAt: time.Now().Add(time.Hour)}
		if err := st.CreateCheckoutSession(ctx, cs); err != nil {
			t.Fatal(err)
		}
		broadcastHash(t, st, cs, hash)
		rec := &models.Transaction{MerchantID: f.m.ID, Mode: models.ModeTest, Amount: money.FromCents(2975), Token: "USDC",
			Network: "base_sepolia", TxHash: hash, WalletAddress: refundPayer, MerchantWalletAddress: refundMerchant}
		if err := st.RecordTransaction(ctx, rec); err != nil {
			t.Fatal(err)
		}
		if res, err := st.FinishSession(ctx, models.Outcome{SessionID: cs.ID, EntryID: models.NewID(), Status: models.StatusComplete,
			Source: "chain", Chain: "base_sepolia", ReceivedUnits: "29750000", Payer: refundPayer, Bound: true, At: time.Now()}); err != nil ||
			res.Status != models.StatusComplete {
			t.Fatalf("the session adopts the record: %+v %v", res, err)
		}
		got, err := st.Transaction(ctx, f.sc, rec.ID)
		if err != nil || got.CustomerID == nil || got.CustomerEmail != "bea@example.com" {
			t.Fatalf("the adopted record: %+v %v", got, err)
		}
		c, err := st.Customer(ctx, f.sc, *got.CustomerID)
		if err != nil || c.Email != "bea@example.com" || c.TotalSpent != money.FromCents(2975) || c.TransactionCount != 1 {
			t.Fatalf("the session's customer: %+v %v", c, err)
		}
	})
}
