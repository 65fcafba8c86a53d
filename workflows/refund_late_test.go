package workflows

import (
	"testing"
	"time"

	"go.temporal.io/sdk/testsuite"

	"github.com/paygate/paygate/activities"
	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/models"
)

// lateRun runs RefundLateTransferWorkflow for the harness's refund and
// hash on its store, starting at start, with a fresh chain that setup
// scripts, and returns its result, the time it took and what it dispatched.
func (h *refundHarness) lateRun(start time.Time, hash string, setup func(env *testsuite.TestWorkflowEnvironment, c *refundFakeChain)) (RefundLateResult, time.Duration, []string) {
	h.t.Helper()
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(webhookTestLogger())
	env := suite.NewTestWorkflowEnvironment()
	env.SetStartTime(start)
	c := newRefundFakeChain(env.Now)
	setup(env, c)
	d := &checkoutFakeDispatcher{}
	env.RegisterWorkflow(RefundLateTransferWorkflow)
	env.RegisterActivity(&activities.RefundActivities{Store: h.store, Verifier: c, Dispatcher: d})
	env.ExecuteWorkflow(RefundLateTransferWorkflow, RefundLateInput{Refund: h.in, TxHash: hash})
	if err := env.GetWorkflowError(); err != nil {
		h.t.Fatal(err)
	}
	var res RefundLateResult
	if err := env.GetWorkflowResult(&res); err != nil {
		h.t.Fatal(err)
	}
	h.store.check(h.t)
	return res, env.Now().Sub(start), d.ids()
}

// TestRefundExpiredTransferRecordedLate: a refund failed REFUND_EXPIRED
// (its amount given back); a transfer the watcher found after is checked
// until confirmed and then recorded: the refund succeeds with it, its
// amount reserved and refunded again, one payment.refunded, dispatched.
// Started again for the same transfer, nothing is counted twice. A
// transfer that does not pay the refund (short, mined before the refund,
// reverted), one that backs another refund, or one never seen, leaves the
// refund expired.
func TestRefundExpiredTransferRecordedLate(t *testing.T) {
	h := newRefundHarness(t, nil, "rf_expired_late", 5_000_000)
	if res := h.result(); res.Status != models.RefundFailed || res.Reason != ReasonRefundExpired {
		t.Fatalf("first: %+v", res)
	}
	if reserved, refunded, _ := h.store.ledger(); reserved != 0 || refunded != 0 {
		t.Fatalf("expired: ledger %d/%d", reserved, refunded)
	}
	after := refundStart.Add(30 * time.Hour)
	mined := after.Add(-time.Minute)

	// Refusals first, each leaving the refund as it was.
	refusals := []struct {
		name, hash, reason string
		tr                 refundTransfer
		confs              []int
	}{
		{"short", refundHash(61), chain.ReasonInvalidTransfer, refundTransfer{from: refundMerchant, to: refundPayer, units: 4_999_999, minedAt: mined}, []int{2}},
		{"reverted", refundHash(62), chain.ReasonTxReverted, refundTransfer{from: refundMerchant, to: refundPayer, units: 5_000_000, reverted: true, minedAt: mined}, []int{2}},
		{"mined before the refund", refundHash(63), chain.ReasonInvalidTransfer, refundTransfer{from: refundMerchant, to: refundPayer, units: 5_000_000,
			minedAt: refundStart.Add(-time.Hour)}, []int{2}},
		{"never seen", refundHash(64), chain.ReasonTxNotFound, refundTransfer{}, nil},
	}
	for _, c := range refusals {
		res, took, ids := h.lateRun(after, c.hash, func(_ *testsuite.TestWorkflowEnvironment, ch *refundFakeChain) {
			if c.confs != nil {
				ch.put(c.hash, c.tr, c.confs...)
			}
		})
		if res.Recorded || res.Reason != c.reason || len(ids) != 0 {
			t.Fatalf("%s: %+v, dispatched %v", c.name, res, ids)
		}
		if c.confs == nil && (took < time.Hour || took > time.Hour+time.Minute) {
			t.Fatalf("%s: ended after %v, want the not-found window", c.name, took)
		}
		if r := h.store.refund("rf_expired_late"); r.status != models.RefundFailed || r.reason != ReasonRefundExpired || r.hash != "" {
			t.Fatalf("%s: stored %+v", c.name, r)
		}
	}
	// A hash that backs another refund is not recorded.
	h.store.claims[refundHash(65)] = "rf_other"
	res, _, _ := h.lateRun(after, refundHash(65), func(_ *testsuite.TestWorkflowEnvironment, ch *refundFakeChain) {
		ch.put(refundHash(65), refundTransfer{from: refundMerchant, to: refundPayer, units: 5_000_000, minedAt: mined}, 2)
	})
	if res.Recorded || res.Reason != "NOT_RECORDED" {
		t.Fatalf("a hash of another refund: %+v", res)
	}
	if reserved, refunded, events := h.store.ledger(); reserved != 0 || refunded != 0 || len(events) != 0 {
		t.Fatalf("after the refusals: ledger %d/%d %v", reserved, refunded, events)
	}

	// The merchant's late transfer: seen, then confirmed, then recorded.
	pay := func(_ *testsuite.TestWorkflowEnvironment, ch *refundFakeChain) {
		ch.put(refundHash(66), refundTransfer{from: refundMerchant, to: refundPayer, units: 5_000_000, minedAt: mined}, 0, 1, 2)
	}
	res, took, ids := h.lateRun(after, refundHash(66), pay)
	if !res.Recorded || res.Status != models.RefundSucceeded || res.FullyRefunded || len(ids) != 1 {
		t.Fatalf("the late transfer: %+v, dispatched %v", res, ids)
	}
	if took != 15*time.Second { // unseen: a pause of two poll intervals; seen: one
		t.Fatalf("recorded after %v, want three poll intervals", took)
	}
	if r := h.store.refund("rf_expired_late"); r.status != models.RefundSucceeded || r.hash != refundHash(66) || r.reason != "" {
		t.Fatalf("stored %+v", r)
	}
	again, _, _ := h.lateRun(after.Add(time.Minute), refundHash(66), pay)
	if !again.Recorded || again.Status != models.RefundSucceeded {
		t.Fatalf("started again: %+v", again)
	}
	if reserved, refunded, events := h.store.ledger(); reserved != 5_000_000 || refunded != 5_000_000 || len(events) != 1 {
		t.Fatalf("ledger %d/%d %v", reserved, refunded, events)
	}
	// Another transfer for the refund now succeeded is not recorded.
	other, _, _ := h.lateRun(after.Add(2*time.Minute), refundHash(67), func(_ *testsuite.TestWorkflowEnvironment, ch *refundFakeChain) {
		ch.put(refundHash(67), refundTransfer{from: refundMerchant, to: refundPayer, units: 5_000_000, minedAt: mined}, 2)
	})
	if other.Recorded || other.Reason != "NOT_RECORDED" {
		t.Fatalf("a second transfer: %+v", other)
	}
}
