package workflows

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdkpb "go.temporal.io/api/sdk/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/paygate/paygate/activities"
	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/models"
)

// Fixed values of the refund tests: the merchant wallet that received the
// payment refunds the payer.
const (
	refundNetwork  = "base_sepolia"
	refundMerchant = "0x1111111111111111111111111111111111111111"
	refundPayer    = "0x2222222222222222222222222222222222222222"
	refundStranger = "0x3333333333333333333333333333333333333333"
	refundTxnID    = "tx_0192f3a4-paid"
	refundTxnUnits = 29_750_000 // the transaction: 29.75 USDC
)

// refundStart is the test clock's start in every refund test.
var refundStart = time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)

func refundHash(n int) string { return fmt.Sprintf("0x%064x", 0xbeef0000+n) }

// A Solana refund's wallets and two transaction signatures.
const (
	solRefundMerchant = "4JvCQqB6RWgNiv6UvhLrVWiT1wA5kUwQTnCUPTpim9rp"
	solRefundPayer    = "8LxfxgNCjge8ihBiUF4AZA8LUUZh2SY2eVEur9QgFMVW"
)

func solRefundSig(n int) string {
	return []string{"2fBhoTU7BchSKkgLEMxb8d8fJ4NJQ4KdZQxN5TJwxMsc4denDsBn4pLnFBbuE9zpofaKqUJZPiTRn7zaQbCyznBy",
		"3pAqE74Zke1svHnqwVhCSZr3R4AfnM2WpQduhKRjBkQLFszcJ6rtnYE1t8cx7JPNUDG1H76xFgxUo6NZyJqvY5oU"}[n]
}

// --- fakes ---

// refundFakeRefund is a refund as the fake store keeps it.
type refundFakeRefund struct {
	units   int64
	status  string
	hash    string
	reason  string
	message string
	full    bool
	// watched: failed, and a transfer sent for it is still watched (the
	// outcome said until when): it may still land and succeed.
	watched bool
}

// watchedFailure says the refund failed and is still watched.
func (r *refundFakeRefund) watchedFailure() bool { return r.status == models.RefundFailed && r.watched }

// refundFakeStore is an in-memory activities.RefundStore with one
// transaction's ledger that keeps the store's promises: a hash backs one
// refund, a refund moves pending → submitted → succeeded|failed once, a
// success adds to the refunded amount once and emits payment.refunded once,
// a failure gives the reserved amount back once. Anything else is a
// violation (checked by every test). failAfter makes the next n calls of a
// method fail after their write (a crash between commit and ack).
type refundFakeStore struct {
	mu         sync.Mutex
	refunds    map[string]*refundFakeRefund
	claims     map[string]string // hash -> refund id
	reserved   int64
	refunded   int64
	events     []string
	calls      map[string]int
	failAfter  map[string]int
	violations []string
}

const (
	refundSubmitMethod     = "SubmitRefundTx"
	refundFinishMethod     = "FinishRefund"
	refundFinishLateMethod = "FinishLateRefund"
)

func newRefundFakeStore() *refundFakeStore {
	return &refundFakeStore{refunds: map[string]*refundFakeRefund{}, claims: map[string]string{}, calls: map[string]int{}, failAfter: map[string]int{}}
}

// create reserves a refund of units on the transaction, as CreateRefund does.
func (s *refundFakeStore) create(t *testing.T, id string, units int64) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reserved+units > refundTxnUnits {
		t.Fatalf("refund %s of %d exceeds the remainder %d", id, units, refundTxnUnits-s.reserved)
	}
	s.reserved += units
	s.refunds[id] = &refundFakeRefund{units: units, status: models.RefundPending}
}

func (s *refundFakeStore) violate(format string, args ...any) {
	s.violations = append(s.violations, fmt.Sprintf(format, args...))
}

func (s *refundFakeStore) leave(method string) error {
	if s.failAfter[method] > 0 {
		s.failAfter[method]--
		return errCheckoutCrash
	}
	return nil
}

// claimable finds the refund a hash is to back (called with s.mu held):
// not found, or a hash that backs another refund, is refused.
func (s *refundFakeStore) claimable(method, id, hash string) (*refundFakeRefund, error) {
	s.calls[method]++
	r, ok := s.refunds[id]
	if !ok {
		return nil, apperr.NotFound()
	}
	if owner, ok := s.claims[hash]; ok && owner != id {
		return nil, apperr.Conflict("this transaction hash already backs another refund")
	}
	return r, nil
}

func (s *refundFakeStore) SubmitRefundTx(_ context.Context, id, hash string, _ time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.claimable(refundSubmitMethod, id, hash)
	if err != nil {
		return err
	}
	switch {
	case r.status == models.RefundPending:
		r.status, r.hash = models.RefundSubmitted, hash
		s.claims[hash] = id
	case r.hash == hash:
	default:
		return apperr.Conflict("refund is " + r.status)
	}
	return s.leave(refundSubmitMethod)
}

// ReplaceRefundTx points a submitted refund, or a watched failure (its
// amount reserved again), at another hash.
func (s *refundFakeStore) ReplaceRefundTx(_ context.Context, id, hash string, _ time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.claimable("ReplaceRefundTx", id, hash)
	if err != nil {
		return err
	}
	switch {
	case r.hash == hash && r.status == models.RefundSubmitted:
		return nil
	case r.status == models.RefundSubmitted:
	case r.watchedFailure():
		if s.reserved+r.units > refundTxnUnits {
			return apperr.Conflict("the refund's amount has been refunded again since it failed")
		}
		s.reserved += r.units
		r.status, r.reason, r.message, r.watched = models.RefundSubmitted, "", "", false
	default:
		return apperr.Conflict("refund is " + r.status)
	}
	delete(s.claims, r.hash)
	r.hash = hash
	s.claims[hash] = id
	return nil
}

// AdoptRefundTx makes a refund succeed with a hash it replaced (landed
// after all): refunded once, reserved again for a watched failure.
func (s *refundFakeStore) AdoptRefundTx(_ context.Context, o activities.RefundOutcome) (activities.FinishedRefund, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.claimable("AdoptRefundTx", o.RefundID, o.TxHash)
	if err != nil {
		return activities.FinishedRefund{}, err
	}
	switch {
	case r.status == models.RefundSucceeded && r.hash == o.TxHash:
	case r.status == models.RefundSubmitted, r.watchedFailure():
		if r.status == models.RefundFailed {
			s.reserved += r.units
		}
		r.watched = false
		s.refunded += r.units
		delete(s.claims, r.hash)
		r.hash, s.claims[o.TxHash] = o.TxHash, o.RefundID
		r.full = s.refunded >= refundTxnUnits
		r.status, r.reason, r.message = models.RefundSucceeded, "", ""
		s.events = append(s.events, o.RefundID+" payment.refunded")
	}
	return s.finished(o.RefundID, r), nil
}

func (s *refundFakeStore) FinishRefund(_ context.Context, o activities.RefundOutcome) (activities.FinishedRefund, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[refundFinishMethod]++
	r, ok := s.refunds[o.RefundID]
	if !ok {
		return activities.FinishedRefund{}, apperr.NotFound()
	}
	if r.status == models.RefundSucceeded || r.status == models.RefundFailed {
		if r.status != o.Status {
			s.violate("refund %s finished %s, then asked %s", o.RefundID, r.status, o.Status)
		}
		return s.finished(o.RefundID, r), s.leave(refundFinishMethod)
	}
	switch o.Status {
	case models.RefundSucceeded:
		if r.status != models.RefundSubmitted || o.TxHash != r.hash {
			return activities.FinishedRefund{}, fmt.Errorf("%w: %s", activities.ErrRefundOutcomeMismatch, o.TxHash)
		}
		s.refunded += r.units
		r.full = s.refunded >= refundTxnUnits
		s.events = append(s.events, o.RefundID+" payment.refunded")
	case models.RefundFailed:
		s.reserved -= r.units
	default:
		s.violate("outcome %q", o.Status)
	}
	r.status, r.reason, r.message, r.watched = o.Status, o.Reason, o.Message, o.WatchedUntil != nil
	return s.finished(o.RefundID, r), s.leave(refundFinishMethod)
}

// FinishLateRefund makes a watched failure succeeded: its
// amount is reserved and refunded again, and payment.refunded emitted once.
func (s *refundFakeStore) FinishLateRefund(_ context.Context, o activities.RefundOutcome) (activities.FinishedRefund, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[refundFinishLateMethod]++
	r, ok := s.refunds[o.RefundID]
	if !ok {
		return activities.FinishedRefund{}, apperr.NotFound()
	}
	if o.Status != models.RefundSucceeded || o.TxHash != r.hash {
		return activities.FinishedRefund{}, fmt.Errorf("%w: %s", activities.ErrRefundOutcomeMismatch, o.TxHash)
	}
	if r.watchedFailure() {
		s.reserved += r.units
		s.refunded += r.units
		r.full = s.refunded >= refundTxnUnits
		r.status, r.reason, r.message, r.watched = models.RefundSucceeded, "", "", false
		s.events = append(s.events, o.RefundID+" payment.refunded")
	}
	return s.finished(o.RefundID, r), s.leave(refundFinishLateMethod)
}

// FinishExpiredRefundLate makes a refund that failed REFUND_EXPIRED
// without a hash succeeded with the late transfer: its amount reserved
// and refunded again, payment.refunded emitted once.
func (s *refundFakeStore) FinishExpiredRefundLate(_ context.Context, o activities.RefundOutcome) (activities.FinishedRefund, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.claimable("FinishExpiredRefundLate", o.RefundID, o.TxHash)
	if err != nil {
		return activities.FinishedRefund{}, err
	}
	switch {
	case r.status == models.RefundSucceeded && r.hash == o.TxHash:
	case r.status == models.RefundFailed && r.reason == ReasonRefundExpired && r.hash == "":
		s.reserved += r.units
		s.refunded += r.units
		r.full = s.refunded >= refundTxnUnits
		r.hash, s.claims[o.TxHash] = o.TxHash, o.RefundID
		r.status, r.reason, r.message = models.RefundSucceeded, "", ""
		s.events = append(s.events, o.RefundID+" payment.refunded")
	default:
		return activities.FinishedRefund{}, apperr.Conflict("refund is " + r.status + ", not expired without a transfer")
	}
	return s.finished(o.RefundID, r), s.leave("FinishExpiredRefundLate")
}

// NoteRefundWatch replaces the message of a watched failure, still
// watched.
func (s *refundFakeStore) NoteRefundWatch(_ context.Context, id, hash, message string) error {
	return s.rewriteWatch("NoteRefundWatch", id, hash, message, false)
}

// EndRefundWatch replaces the message of a watched failure, no longer
// watched.
func (s *refundFakeStore) EndRefundWatch(_ context.Context, id, hash, message string) error {
	return s.rewriteWatch("EndRefundWatch", id, hash, message, true)
}

// rewriteWatch replaces the message of a watched failure with hash, and
// ends its watch when end is set; any other refund is left as it is.
func (s *refundFakeStore) rewriteWatch(method, id, hash, message string, end bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[method]++
	r, ok := s.refunds[id]
	if !ok {
		return apperr.NotFound()
	}
	if r.watchedFailure() && r.hash == hash {
		r.message, r.watched = message, r.watched && !end
	}
	return nil
}

func (s *refundFakeStore) finished(id string, r *refundFakeRefund) activities.FinishedRefund {
	f := activities.FinishedRefund{Status: r.status, Reason: r.reason, Message: r.message, FullyRefunded: r.full}
	if r.status == models.RefundSucceeded {
		f.Deliveries = []string{"dlv:" + id}
	}
	return f
}

func (s *refundFakeStore) refund(id string) refundFakeRefund {
	s.mu.Lock()
	defer s.mu.Unlock()
	return *s.refunds[id]
}

func (s *refundFakeStore) ledger() (reserved, refunded int64, events []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reserved, s.refunded, append([]string(nil), s.events...)
}

func (s *refundFakeStore) check(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range s.violations {
		t.Errorf("store: %s", v)
	}
	if s.reserved < s.refunded || s.reserved > refundTxnUnits {
		t.Errorf("ledger: reserved %d, refunded %d of %d", s.reserved, s.refunded, refundTxnUnits)
	}
}

// refundTransfer is a transfer on the fake chain.
type refundTransfer struct {
	from, to string
	units    int64
	reverted bool
	minedAt  time.Time
}

// refundFakeChain is a chain.Verifier that judges transfers as the EVM
// verifier does (canonical token only: what reached the request's
// MerchantAddress, from whom, with confirmations counted; 2 required),
// scripted per hash by the confirmations each call sees (0: not seen, as
// before mining or after a reorg; the last entry repeats). The refund's own
// binding (sender, age) is left to chain.VerifyRefund, as in production.
type refundFakeChain struct {
	mu        sync.Mutex
	now       func() time.Time
	transfers map[string]refundTransfer
	confs     map[string][]int
	errs      map[string]int // RPC errors before the first answer
	reqs      []chain.VerifyRequest
	at        []time.Time
}

func newRefundFakeChain(now func() time.Time) *refundFakeChain {
	return &refundFakeChain{now: now, transfers: map[string]refundTransfer{}, confs: map[string][]int{}, errs: map[string]int{}}
}

func (c *refundFakeChain) put(hash string, tr refundTransfer, confs ...int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if tr.minedAt.IsZero() {
		tr.minedAt = c.now()
	}
	c.transfers[hash], c.confs[hash] = tr, confs
}

func (c *refundFakeChain) Verify(_ context.Context, req chain.VerifyRequest) (chain.VerifyResult, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reqs, c.at = append(c.reqs, req), append(c.at, c.now())
	if c.errs[req.TxHash] > 0 {
		c.errs[req.TxHash]--
		return chain.VerifyResult{}, errors.New("dial tcp 127.0.0.1:8545: connection refused")
	}
	res := chain.VerifyResult{Verdict: chain.VerdictPending, Required: 2}
	tr, ok := c.transfers[req.TxHash]
	script := c.confs[req.TxHash]
	if !ok || len(script) == 0 {
		return res, nil
	}
	conf := script[0]
	if len(script) > 1 {
		c.confs[req.TxHash] = script[1:]
	}
	if conf == 0 {
		return res, nil
	}
	received := int64(0)
	if strings.EqualFold(tr.to, req.MerchantAddress) && !tr.reverted {
		received = tr.units
	}
	res.Seen, res.Confirmations, res.BlockNumber, res.ReceivedUnits, res.Payer = true, uint64(conf), 100, fmt.Sprint(received), tr.from
	if conf < 2 {
		return res, nil
	}
	if !req.NotBefore.IsZero() {
		res.BlockTime = tr.minedAt
	}
	var expected int64
	_, _ = fmt.Sscan(req.ExpectedUnits, &expected)
	switch {
	case tr.reverted:
		res.Verdict, res.Reason = chain.VerdictFailed, chain.ReasonTxReverted
	case received == 0 || received < expected:
		res.Verdict, res.Reason = chain.VerdictFailed, chain.ReasonInvalidTransfer
	default:
		res.Verdict = chain.VerdictComplete
	}
	return res, nil
}

func (c *refundFakeChain) requests() ([]chain.VerifyRequest, []time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]chain.VerifyRequest(nil), c.reqs...), append([]time.Time(nil), c.at...)
}

// --- harness ---

type refundHarness struct {
	t          *testing.T
	env        *testsuite.TestWorkflowEnvironment
	store      *refundFakeStore
	chain      *refundFakeChain
	dispatcher *checkoutFakeDispatcher
	in         RefundInput
	updates    int
}

// newRefundHarness sets up a refund of units created at refundStart with
// a 24 h window, polled every 5 s, with a 1 h not-found window; store is
// shared when given (refunds of one transaction).
func newRefundHarness(t *testing.T, store *refundFakeStore, id string, units int64) *refundHarness {
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(webhookTestLogger())
	env := suite.NewTestWorkflowEnvironment()
	env.SetStartTime(refundStart)
	if store == nil {
		store = newRefundFakeStore()
	}
	store.create(t, id, units)
	h := &refundHarness{t: t, env: env, store: store, chain: newRefundFakeChain(env.Now), dispatcher: &checkoutFakeDispatcher{},
		in: RefundInput{RefundID: id, MerchantID: "mer_1", Network: refundNetwork, SourceWallet: refundMerchant,
			DestinationWallet: refundPayer, Units: units, CreatedAt: refundStart, ExpiresAt: refundStart.Add(24 * time.Hour),
			PollInterval: 5 * time.Second, NotFoundWindow: time.Hour}}
	env.RegisterWorkflow(RefundWorkflow)
	env.RegisterActivity(&activities.RefundActivities{Store: store, Verifier: h.chain, Dispatcher: h.dispatcher})
	return h
}

// submit sends the submit update after d on the test clock.
func (h *refundHarness) submit(d time.Duration, hash string) *checkoutUpdate {
	return h.submitRequest(d, RefundSubmitRequest{TxHash: hash})
}

// submitRequest sends the submit update with req when the test clock
// reaches d.
func (h *refundHarness) submitRequest(d time.Duration, req RefundSubmitRequest) *checkoutUpdate {
	h.updates++
	u := &checkoutUpdate{name: fmt.Sprintf("submit-%d", h.updates)}
	h.env.RegisterDelayedCallback(func() {
		u.sentAt = h.env.Now()
		h.env.UpdateWorkflow(RefundSubmitUpdate, u.name, &testsuite.TestUpdateCallback{
			OnAccept: func() { u.accepted = true },
			OnReject: func(err error) { u.rejected, u.done, u.doneAt = err, true, h.env.Now() },
			OnComplete: func(v any, err error) {
				u.value, u.err, u.done, u.doneAt = v, err, true, h.env.Now()
			},
		}, req)
	}, d)
	return u
}

// pay puts the merchant's transfer of units to the payer on the fake chain
// when the test clock reaches d, and submits it then.
func (h *refundHarness) pay(d time.Duration, hash string, tr refundTransfer, confs ...int) *checkoutUpdate {
	h.env.RegisterDelayedCallback(func() { h.chain.put(hash, tr, confs...) }, d)
	return h.submit(d, hash)
}

// query asks for the status after d.
func (h *refundHarness) query(d time.Duration) *RefundState {
	st := &RefundState{}
	h.env.RegisterDelayedCallback(func() {
		v, err := h.env.QueryWorkflow(RefundStatusQuery)
		if err == nil {
			err = v.Get(st)
		}
		if err != nil {
			h.t.Errorf("status query at +%v: %v", d, err)
		}
	}, d)
	return st
}

// result runs the workflow to its end and returns its result.
func (h *refundHarness) result() RefundResult {
	h.t.Helper()
	h.env.ExecuteWorkflow(RefundWorkflow, h.in)
	if !h.env.IsWorkflowCompleted() {
		h.t.Fatal("workflow did not complete")
	}
	if err := h.env.GetWorkflowError(); err != nil {
		h.t.Fatalf("workflow error: %v", err)
	}
	h.store.check(h.t)
	var res RefundResult
	if err := h.env.GetWorkflowResult(&res); err != nil {
		h.t.Fatal(err)
	}
	return res
}

// continuedAsNew runs the workflow to its continue-as-new and returns the
// next run's input.
func (h *refundHarness) continuedAsNew() RefundInput {
	h.t.Helper()
	h.env.ExecuteWorkflow(RefundWorkflow, h.in)
	var can *workflow.ContinueAsNewError
	if err := h.env.GetWorkflowError(); !errors.As(err, &can) {
		h.t.Fatalf("want continue-as-new, got %v", err)
	}
	var next RefundInput
	if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &next); err != nil {
		h.t.Fatal(err)
	}
	return next
}

// nextRun runs a continued refund where the last run stopped, on the same
// store, with a fresh chain that setup scripts, and returns its result.
func (h *refundHarness) nextRun(next RefundInput, setup func(env *testsuite.TestWorkflowEnvironment, c *refundFakeChain)) RefundResult {
	h.t.Helper()
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(webhookTestLogger())
	env := suite.NewTestWorkflowEnvironment()
	env.SetStartTime(h.env.Now())
	c := newRefundFakeChain(env.Now)
	setup(env, c)
	env.RegisterWorkflow(RefundWorkflow)
	env.RegisterActivity(&activities.RefundActivities{Store: h.store, Verifier: c, Dispatcher: &checkoutFakeDispatcher{}})
	env.ExecuteWorkflow(RefundWorkflow, next)
	if err := env.GetWorkflowError(); err != nil {
		h.t.Fatal(err)
	}
	var res RefundResult
	if err := env.GetWorkflowResult(&res); err != nil {
		h.t.Fatal(err)
	}
	h.store.check(h.t)
	return res
}

// stored reads the fake store's refund after d.
func (h *refundHarness) stored(d time.Duration) *refundFakeRefund {
	r := &refundFakeRefund{}
	h.env.RegisterDelayedCallback(func() { *r = h.store.refund(h.in.RefundID) }, d)
	return r
}

func (h *refundHarness) elapsed() time.Duration { return h.env.Now().Sub(refundStart) }

// good is the merchant's transfer of units to the payer.
func good(units int64) refundTransfer {
	return refundTransfer{from: refundMerchant, to: refundPayer, units: units}
}

// --- tests ---

// TestRefundFull: the whole transaction refunded; the transfer is seen,
// confirmed, and only then the refund succeeds, fullyRefunded, with one
// event and one dispatch. The chain is asked about the refund as a payment
// to the payer from the merchant's wallet, no older than the refund.
func TestRefundFull(t *testing.T) {
	h := newRefundHarness(t, nil, "rf_full", refundTxnUnits)
	u := h.pay(2*time.Minute, refundHash(1), good(refundTxnUnits), 0, 1, 2)
	mid := h.query(2*time.Minute + 7*time.Second)
	res := h.result()
	if res.Status != models.RefundSucceeded || !res.FullyRefunded || res.TxHash != refundHash(1) || res.Reason != "" {
		t.Fatalf("result %+v", res)
	}
	if !u.accepted || u.err != nil {
		t.Fatalf("submit %s", u)
	}
	if v, ok := u.value.(RefundSubmitResult); ok && v.Status != models.RefundSubmitted {
		t.Fatalf("submit answered %+v", v)
	}
	if mid.Status != models.RefundSubmitted || mid.LastCheck == nil || mid.LastCheck.Confirmations != 1 {
		t.Fatalf("status while confirming %+v", mid)
	}
	reqs, at := h.chain.requests()
	if len(reqs) != 3 || !at[2].Equal(refundStart.Add(2*time.Minute+10*time.Second)) {
		t.Fatalf("%d checks, last at %v", len(reqs), at)
	}
	want := chain.VerifyRequest{Network: refundNetwork, TxHash: refundHash(1), MerchantAddress: refundPayer, ExpectedUnits: fmt.Sprint(refundTxnUnits),
		PayerAddress: refundMerchant, NotBefore: refundStart.Add(-blockClockSlack)}
	if reqs[0] != want {
		t.Fatalf("verify request %+v, want %+v", reqs[0], want)
	}
	reserved, refunded, events := h.store.ledger()
	if reserved != refundTxnUnits || refunded != refundTxnUnits || fmt.Sprint(events) != "[rf_full payment.refunded]" {
		t.Fatalf("ledger %d/%d, events %v", reserved, refunded, events)
	}
	if ids := h.dispatcher.ids(); fmt.Sprint(ids) != "[dlv:rf_full]" || h.dispatcher.started["dlv:rf_full"] != 1 {
		t.Fatalf("dispatched %v", h.dispatcher.started)
	}
}

// TestRefundPartial: half the transaction; fullyRefunded stays false.
func TestRefundPartial(t *testing.T) {
	h := newRefundHarness(t, nil, "rf_half", refundTxnUnits/2)
	h.pay(time.Hour, refundHash(1), good(refundTxnUnits/2), 2)
	res := h.result()
	if res.Status != models.RefundSucceeded || res.FullyRefunded {
		t.Fatalf("result %+v", res)
	}
	if _, refunded, _ := h.store.ledger(); refunded != refundTxnUnits/2 {
		t.Fatalf("refunded %d", refunded)
	}
}

// TestRefundSeveralPartialsUpToTotal: three refunds of one transaction
// (10 + 10 + the remaining 9.75): fullyRefunded only on the last event.
func TestRefundSeveralPartialsUpToTotal(t *testing.T) {
	store := newRefundFakeStore()
	parts := []int64{10_000_000, 10_000_000, refundTxnUnits - 20_000_000}
	var fulls []bool
	for i, units := range parts {
		id := fmt.Sprintf("rf_part%d", i+1)
		h := newRefundHarness(t, store, id, units)
		h.pay(time.Duration(i+1)*time.Minute, refundHash(10+i), good(units), 1, 2)
		res := h.result()
		if res.Status != models.RefundSucceeded {
			t.Fatalf("%s: %+v", id, res)
		}
		fulls = append(fulls, res.FullyRefunded)
	}
	reserved, refunded, events := store.ledger()
	if fmt.Sprint(fulls) != "[false false true]" || refunded != refundTxnUnits || reserved != refundTxnUnits || len(events) != 3 {
		t.Fatalf("fullyRefunded %v, ledger %d/%d, events %v", fulls, reserved, refunded, events)
	}
}

// TestRefundWrongTransfers: a transfer that does not pay the refund fails
// it once confirmed (never before), frees its amount and emits nothing.
func TestRefundWrongTransfers(t *testing.T) {
	cases := []struct {
		name    string
		tr      refundTransfer
		reason  string
		message string
	}{
		{"wrong sender", refundTransfer{from: refundStranger, to: refundPayer, units: 5_000_000}, chain.ReasonInvalidTransfer, "not from the merchant wallet"},
		{"wrong destination", refundTransfer{from: refundMerchant, to: refundStranger, units: 5_000_000}, chain.ReasonInvalidTransfer, "no USDC reached"},
		{"short amount", refundTransfer{from: refundMerchant, to: refundPayer, units: 4_999_999}, chain.ReasonInvalidTransfer, "received 4999999 USDC units, the refund is 5000000"},
		{"reverted", refundTransfer{from: refundMerchant, to: refundPayer, units: 5_000_000, reverted: true}, chain.ReasonTxReverted, "reverted"},
		{"mined before the refund", refundTransfer{from: refundMerchant, to: refundPayer, units: 5_000_000, minedAt: refundStart.Add(-time.Hour)},
			chain.ReasonInvalidTransfer, "before the refund was created"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newRefundHarness(t, nil, "rf_wrong", 5_000_000)
			h.pay(10*time.Minute, refundHash(2), c.tr, 1, 1, 2)
			res := h.result()
			if res.Status != models.RefundFailed || res.Reason != c.reason || res.FullyRefunded {
				t.Fatalf("result %+v", res)
			}
			st := RefundState{}
			v, err := h.env.QueryWorkflow(RefundStatusQuery)
			if err == nil {
				err = v.Get(&st)
			}
			if err != nil || !strings.Contains(st.Message, c.message) {
				t.Fatalf("message %q (%v), want it to say %q", st.Message, err, c.message)
			}
			if got := h.elapsed(); got != 10*time.Minute+10*time.Second {
				t.Fatalf("failed at +%v, want once confirmed (+10m10s)", got)
			}
			reserved, refunded, events := h.store.ledger()
			if reserved != 0 || refunded != 0 || len(events) != 0 || len(h.dispatcher.ids()) != 0 {
				t.Fatalf("ledger %d/%d events %v", reserved, refunded, events)
			}
		})
	}
}

// TestRefundReorg: the transfer is seen, its block is dropped by a reorg
// (pending, not seen again: the refund stays submitted), then it is mined
// again and confirmed: the refund succeeds. A transfer that never comes
// back fails TX_NOT_FOUND one window after its last sighting, not after
// the submit.
func TestRefundReorg(t *testing.T) {
	h := newRefundHarness(t, nil, "rf_reorg", 5_000_000)
	h.pay(time.Minute, refundHash(3), good(5_000_000), 1, 0, 0, 0, 1, 2)
	during := h.query(time.Minute + 12*time.Second)
	res := h.result()
	if res.Status != models.RefundSucceeded {
		t.Fatalf("result %+v", res)
	}
	if during.Status != models.RefundSubmitted || during.LastCheck == nil || during.LastCheck.Seen {
		t.Fatalf("after the reorg %+v", during)
	}
	if got := h.elapsed(); got != time.Minute+25*time.Second {
		t.Fatalf("succeeded at +%v", got)
	}

	lost := newRefundHarness(t, nil, "rf_lost", 5_000_000)
	lost.in.PollInterval = 30 * time.Second // an hour of checks in one run
	// Seen at the first two checks (+2m, +2m30s), then gone for good.
	lost.pay(2*time.Minute, refundHash(4), good(5_000_000), 1, 1, 0)
	failedAt := 2*time.Minute + 30*time.Second + time.Hour // a window after the last sighting
	before, after := lost.stored(failedAt-time.Second), lost.stored(failedAt+time.Second)
	res = lost.result()
	if res.Status != models.RefundFailed || res.Reason != chain.ReasonTxNotFound {
		t.Fatalf("lost transfer: %+v", res)
	}
	if before.status != models.RefundSubmitted || after.status != models.RefundFailed || after.reason != chain.ReasonTxNotFound {
		t.Fatalf("stored before +%v: %+v; after: %+v", failedAt, *before, *after)
	}
	if got, want := lost.elapsed(), failedAt+DefaultLateWatch; got != want {
		t.Fatalf("watched until +%v, want +%v (the late watch)", got, want)
	}
	if reserved, _, _ := lost.store.ledger(); reserved != 0 {
		t.Fatalf("reserved %d after the failure", reserved)
	}
}

// TestRefundNeverPaid: no transfer within the window: the refund fails
// REFUND_EXPIRED exactly at its end, frees its amount, and the chain is
// never asked.
func TestRefundNeverPaid(t *testing.T) {
	h := newRefundHarness(t, nil, "rf_unpaid", 5_000_000)
	res := h.result()
	if res.Status != models.RefundFailed || res.Reason != ReasonRefundExpired {
		t.Fatalf("result %+v", res)
	}
	if h.elapsed() != 24*time.Hour {
		t.Fatalf("failed at +%v", h.elapsed())
	}
	if reqs, _ := h.chain.requests(); len(reqs) != 0 {
		t.Fatalf("%d chain checks", len(reqs))
	}
	if reserved, refunded, events := h.store.ledger(); reserved != 0 || refunded != 0 || len(events) != 0 {
		t.Fatalf("ledger %d/%d %v", reserved, refunded, events)
	}
}

// TestRefundSubmittedJustBeforeTheWindow: a transfer submitted a second
// before the window ends is verified to the end (the window stops only
// refunds without a transfer).
func TestRefundSubmittedJustBeforeTheWindow(t *testing.T) {
	h := newRefundHarness(t, nil, "rf_late", 5_000_000)
	h.pay(24*time.Hour-time.Second, refundHash(5), good(5_000_000), 0, 0, 1, 2)
	if res := h.result(); res.Status != models.RefundSucceeded {
		t.Fatalf("result %+v", res)
	}
	if h.elapsed() <= 24*time.Hour {
		t.Fatalf("succeeded at +%v", h.elapsed())
	}
}

// TestRefundSubmitRefusals: an empty hash is refused by the validator
// (nothing reaches the history); a hash that backs another refund fails
// the update and leaves the refund pending; the right one is accepted; a
// second submit is refused.
func TestRefundSubmitRefusals(t *testing.T) {
	h := newRefundHarness(t, nil, "rf_refusals", 5_000_000)
	h.store.claims[refundHash(9)] = "rf_other"
	empty := h.submit(time.Minute, "")
	taken := h.submit(2*time.Minute, refundHash(9))
	ok := h.pay(3*time.Minute, refundHash(6), good(5_000_000), 1, 1, 2)
	// Another hash while the first is checked: a replacement (a speed-up),
	// accepted; the first lands after all, and the refund takes it back.
	again := h.submit(3*time.Minute+2*time.Second, refundHash(7))
	res := h.result()
	if res.Status != models.RefundSucceeded || res.TxHash != refundHash(6) {
		t.Fatalf("result %+v", res)
	}
	if r := h.store.refund("rf_refusals"); r.hash != refundHash(6) || r.status != models.RefundSucceeded {
		t.Fatalf("stored %+v", r)
	}
	if empty.rejected == nil || empty.errType() != ErrTypeBadUpdate {
		t.Fatalf("empty hash: %s", empty)
	}
	if !taken.accepted || taken.errType() != activities.ErrTypeRefundTxClaimed {
		t.Fatalf("taken hash: %s", taken)
	}
	if !ok.accepted || ok.err != nil {
		t.Fatalf("good hash: %s", ok)
	}
	if !again.accepted || again.err != nil {
		t.Fatalf("replacement: %s", again)
	}
	if n, m, a := h.store.calls[refundSubmitMethod], h.store.calls["ReplaceRefundTx"], h.store.calls["AdoptRefundTx"]; n != 2 || m != 1 || a != 1 {
		t.Fatalf("%d submit, %d replace and %d adopt activities, want 2, 1 and 1 (the validator refused the others)", n, m, a)
	}
}

// TestRefundSubmitFirstOnly: the refund watcher's submit (FirstOnly) is
// taken by a refund without a hash and refused by one that has one, even
// where the merchant's own submit of that hash would replace it (a transfer
// the watcher found may be a twin refund's).
func TestRefundSubmitFirstOnly(t *testing.T) {
	h := newRefundHarness(t, nil, "rf_first_only", 5_000_000)
	found := h.submitRequest(time.Minute, RefundSubmitRequest{TxHash: refundHash(41), FirstOnly: true}) // never lands
	twin := h.submitRequest(2*time.Minute, RefundSubmitRequest{TxHash: refundHash(42), FirstOnly: true})
	byHand := h.pay(3*time.Minute, refundHash(43), good(5_000_000), 1, 2)
	res := h.result()
	if !found.accepted || found.err != nil {
		t.Fatalf("the watcher's submit of a refund without a hash: %s", found)
	}
	if twin.rejected == nil || twin.errType() != ErrTypeRefundNotOpen {
		t.Fatalf("the watcher's submit of another hash: %s", twin)
	}
	if !byHand.accepted || byHand.err != nil || res.Status != models.RefundSucceeded || res.TxHash != refundHash(43) {
		t.Fatalf("the merchant's replacement: %s; result %+v", byHand, res)
	}
}

// TestRefundEffectsOnceUnderCrashes: the submit and the outcome activities
// fail after their writes committed (a crash before the ack): retried, the
// refund is still submitted once, counted once, and emits one event.
func TestRefundEffectsOnceUnderCrashes(t *testing.T) {
	h := newRefundHarness(t, nil, "rf_crash", refundTxnUnits)
	h.store.failAfter[refundSubmitMethod] = 1
	h.store.failAfter[refundFinishMethod] = 2
	h.chain.errs[refundHash(8)] = 3 // RPC faults are no verdict
	h.pay(time.Minute, refundHash(8), good(refundTxnUnits), 2)
	res := h.result()
	if res.Status != models.RefundSucceeded || !res.FullyRefunded {
		t.Fatalf("result %+v", res)
	}
	reserved, refunded, events := h.store.ledger()
	if refunded != refundTxnUnits || reserved != refundTxnUnits || len(events) != 1 {
		t.Fatalf("ledger %d/%d events %v", reserved, refunded, events)
	}
	if h.store.calls[refundFinishMethod] != 3 || h.store.calls[refundSubmitMethod] != 2 {
		t.Fatalf("calls %v", h.store.calls)
	}
	if h.dispatcher.started["dlv:rf_crash"] != 1 {
		t.Fatalf("dispatched %v", h.dispatcher.started)
	}
}

// TestRefundTxNotFound: a hash that never appears fails TX_NOT_FOUND one
// window after the submit.
func TestRefundTxNotFound(t *testing.T) {
	h := newRefundHarness(t, nil, "rf_nothing", 5_000_000)
	h.in.PollInterval = 30 * time.Second // an hour of checks in one run
	h.submit(30*time.Minute, refundHash(11))
	before, after := h.stored(90*time.Minute-time.Second), h.stored(90*time.Minute+time.Second)
	watching := h.query(90*time.Minute + time.Second)
	var details string
	h.env.RegisterDelayedCallback(func() {
		v, err := h.env.QueryWorkflow("__temporal_workflow_metadata")
		var meta sdkpb.WorkflowMetadata
		if err == nil {
			err = v.Get(&meta)
		}
		if err != nil {
			t.Errorf("metadata query: %v", err)
		}
		details = meta.GetCurrentDetails()
	}, 2*time.Hour)
	res := h.result()
	if res.Status != models.RefundFailed || res.Reason != chain.ReasonTxNotFound {
		t.Fatalf("result %+v", res)
	}
	if before.status != models.RefundSubmitted || after.status != models.RefundFailed || after.reason != chain.ReasonTxNotFound ||
		!strings.Contains(after.message, "still watched until") {
		t.Fatalf("stored before +90m: %+v; after: %+v", *before, *after)
	}
	// What the Web UI shows of the run: the watch, its hash and its end.
	if !strings.Contains(details, "still watched") || !strings.Contains(details, refundHash(11)) {
		t.Errorf("current details during the watch: %q", details)
	}
	if watching.Status != models.RefundFailed || watching.WatchedUntil == nil || !watching.WatchedUntil.Equal(refundStart.Add(90*time.Minute+DefaultLateWatch)) {
		t.Fatalf("status after the failure %+v", watching)
	}
	if got := h.elapsed(); got != 90*time.Minute+DefaultLateWatch {
		t.Fatalf("watched until +%v", got)
	}
	// The watch's end is recorded: the message no longer says watched.
	if r := h.store.refund("rf_nothing"); r.status != models.RefundFailed || strings.Contains(r.message, "still watched") ||
		!strings.Contains(r.message, "nor in the 168h0m0s after") {
		t.Fatalf("stored after the watch %+v", r)
	}
	// The late watch: a minute, then doubling pauses up to an hour, about
	// 175 checks in the week, one run.
	reqs, at := h.chain.requests()
	var late []time.Duration
	for i, r := range reqs {
		if r.TxHash == refundHash(11) && at[i].Sub(refundStart) > 90*time.Minute {
			late = append(late, at[i].Sub(refundStart)-90*time.Minute)
		}
	}
	if len(late) < 160 || len(late) > 180 || late[0] != time.Minute || late[1] != 3*time.Minute || late[len(late)-1] != DefaultLateWatch {
		t.Fatalf("%d late checks: first %v, last %v", len(late), late[:min(3, len(late))], late[len(late)-1])
	}
}

// TestRefundLandsLate: a transfer submitted, unseen for the not-found
// window (the refund fails TX_NOT_FOUND, its amount given back), lands
// five hours later: the late watch verifies it and the refund becomes
// succeeded, its amount reserved and refunded again, payment.refunded
// emitted and dispatched once. A transfer that lands and does not pay the
// refund (another amount) leaves it failed and ends the watch.
func TestRefundLandsLate(t *testing.T) {
	h := newRefundHarness(t, nil, "rf_late", 5_000_000)
	h.in.PollInterval = 30 * time.Second
	h.submit(time.Minute, refundHash(21))
	mid := h.stored(2 * time.Hour)
	var midLedger [2]int64
	h.env.RegisterDelayedCallback(func() { midLedger[0], midLedger[1], _ = h.store.ledger() }, 2*time.Hour)
	h.env.RegisterDelayedCallback(func() { h.chain.put(refundHash(21), good(5_000_000), 1, 2) }, 6*time.Hour)
	res := h.result()
	if res.Status != models.RefundSucceeded || res.TxHash != refundHash(21) || res.FullyRefunded {
		t.Fatalf("result %+v", res)
	}
	if mid.status != models.RefundFailed || mid.reason != chain.ReasonTxNotFound || midLedger != [2]int64{0, 0} {
		t.Fatalf("after the not-found window: %+v, ledger %v", *mid, midLedger)
	}
	if r := h.store.refund("rf_late"); r.status != models.RefundSucceeded || r.reason != "" || r.message != "" {
		t.Fatalf("stored %+v", r)
	}
	reserved, refunded, events := h.store.ledger()
	if reserved != 5_000_000 || refunded != 5_000_000 || len(events) != 1 {
		t.Fatalf("ledger %d/%d events %v", reserved, refunded, events)
	}
	if got := h.dispatcher.ids(); len(got) != 1 {
		t.Fatalf("dispatched %v", got)
	}
	// Landed after the 6 h mark, seen then confirmed at the next checks
	// (an hour apart at most, then the poll interval).
	if got := h.elapsed(); got <= 6*time.Hour || got > 7*time.Hour+time.Minute {
		t.Fatalf("succeeded at +%v", got)
	}

	wrong := newRefundHarness(t, nil, "rf_late_wrong", 5_000_000)
	wrong.in.PollInterval = 30 * time.Second
	wrong.submit(time.Minute, refundHash(22))
	wrong.env.RegisterDelayedCallback(func() { wrong.chain.put(refundHash(22), good(1_000_000), 2) }, 3*time.Hour)
	res = wrong.result()
	if res.Status != models.RefundFailed || res.Reason != chain.ReasonTxNotFound {
		t.Fatalf("short transfer landing late: %+v", res)
	}
	if got := wrong.elapsed(); got <= 3*time.Hour || got > 4*time.Hour+time.Minute {
		t.Fatalf("watch ended at +%v", got)
	}
	if reserved, refunded, events := wrong.store.ledger(); reserved != 0 || refunded != 0 || len(events) != 0 {
		t.Fatalf("ledger %d/%d events %v", reserved, refunded, events)
	}
	if r := wrong.store.refund("rf_late_wrong"); !strings.Contains(r.message, "does not pay it (INVALID_TRANSFER)") {
		t.Fatalf("stored %+v", r)
	}
}

// TestRefundLateWatchContinuesAsNew: a late watch longer than one run's
// checks continues as new carrying its end and its message; the next run
// goes on watching and records the landing.
func TestRefundLateWatchContinuesAsNew(t *testing.T) {
	store := newRefundFakeStore()
	h := newRefundHarness(t, store, "rf_long_watch", 5_000_000)
	h.in.PollInterval, h.in.LateWatch = 30*time.Second, 30*24*time.Hour
	h.submit(time.Minute, refundHash(23))
	next := h.continuedAsNew()
	failedAt := refundStart.Add(time.Minute + time.Hour)
	if next.Carry == nil || next.Carry.Status != models.RefundFailed || !next.Carry.LateUntil.Equal(failedAt.Add(30*24*time.Hour)) ||
		!strings.Contains(next.Carry.Message, "still watched until") {
		t.Fatalf("carry %+v", next.Carry)
	}
	// One run's checks, the confirmation's and the late watch's together.
	if reqs, _ := h.chain.requests(); len(reqs) != maxChecksPerRun {
		t.Fatalf("%d checks in the run", len(reqs))
	}

	// The next run: the transfer lands; the refund succeeds.
	res := h.nextRun(next, func(env *testsuite.TestWorkflowEnvironment, c *refundFakeChain) {
		env.RegisterDelayedCallback(func() { c.put(refundHash(23), good(5_000_000), 2) }, 3*time.Hour)
	})
	if res.Status != models.RefundSucceeded {
		t.Fatalf("next run: %+v", res)
	}
	if reserved, refunded, _ := store.ledger(); reserved != 5_000_000 || refunded != 5_000_000 {
		t.Fatalf("ledger %d/%d", reserved, refunded)
	}
}

// TestSolanaRefundNotWatchedLate: on Solana a transfer unseen for the
// window can no longer land (its blockhash expired long before): the
// refund fails TX_NOT_FOUND and the workflow ends then.
func TestSolanaRefundNotWatchedLate(t *testing.T) {
	h := newRefundHarness(t, nil, "rf_sol", 5_000_000)
	h.in.Network, h.in.PollInterval = "solana_devnet", 30*time.Second
	h.in.SourceWallet, h.in.DestinationWallet = "4JvCQqB6RWgNiv6UvhLrVWiT1wA5kUwQTnCUPTpim9rp", "8LxfxgNCjge8ihBiUF4AZA8LUUZh2SY2eVEur9QgFMVW"
	h.submit(time.Minute, "5VERv8NMvzbJMEkV8xnrLkEaWRtSz9CosKDYjCJjBRnbJLgp8uirBgmQpjKhoR4tjF3ZpRzrFmBV6UjKdiSZkQUW")
	res := h.result()
	if res.Status != models.RefundFailed || res.Reason != chain.ReasonTxNotFound {
		t.Fatalf("result %+v", res)
	}
	if got := h.elapsed(); got != time.Minute+time.Hour {
		t.Fatalf("ended at +%v", got)
	}
	if r := h.store.refund("rf_sol"); strings.Contains(r.message, "watched") {
		t.Fatalf("stored %+v", r)
	}
}

// TestSolanaRefundReplacedWatchedUntilItCannotLand: on Solana too, a
// re-send that fails on chain while the transfer it replaced is unseen
// fails the refund (its amount free) and watches the replaced transfer,
// there for the not-found window (a transaction's blockhash expires within
// minutes of its signing, long before): the replaced transfer landing then
// makes the refund succeeded. Before (refund-solana-replaced-watch), the
// refund ended failed at once and the transfer landing was never recorded,
// while its amount was refundable again.
func TestSolanaRefundReplacedWatchedUntilItCannotLand(t *testing.T) {
	merchant, payer, first, resend := solRefundMerchant, solRefundPayer, solRefundSig(0), solRefundSig(1)
	run := func(id string, lands bool) (*refundHarness, RefundResult, *refundFakeRefund) {
		h := newRefundHarness(t, nil, id, 5_000_000)
		h.in.Network, h.in.PollInterval = "solana_devnet", 10*time.Second
		h.in.SourceWallet, h.in.DestinationWallet = merchant, payer
		h.submit(time.Minute, first) // unseen
		h.pay(2*time.Minute, resend, refundTransfer{from: merchant, to: payer, units: 5_000_000, reverted: true}, 1, 2)
		mid := h.stored(5 * time.Minute)
		if lands {
			h.env.RegisterDelayedCallback(func() { h.chain.put(first, refundTransfer{from: merchant, to: payer, units: 5_000_000}, 1, 2) },
				6*time.Minute)
		}
		return h, h.result(), mid
	}

	h, res, mid := run("rf_sol_resend_lands", true)
	if res.Status != models.RefundSucceeded || res.TxHash != first {
		t.Fatalf("the replaced transfer landed at +6m: %+v", res)
	}
	if mid.status != models.RefundFailed || mid.reason != chain.ReasonTxReverted || !mid.watchedFailure() ||
		!strings.Contains(mid.message, first) {
		t.Fatalf("at +5m: %+v", *mid)
	}
	if reserved, refunded, events := h.store.ledger(); reserved != 5_000_000 || refunded != 5_000_000 || len(events) != 1 {
		t.Fatalf("ledger %d/%d events %v", reserved, refunded, events)
	}

	// It never lands: the watch ends after the not-found window (not a
	// week), the refund failed with the re-send's reason.
	h, res, _ = run("rf_sol_resend_never", false)
	if res.Status != models.RefundFailed || res.Reason != chain.ReasonTxReverted || res.TxHash != resend {
		t.Fatalf("result %+v", res)
	}
	if got := h.elapsed(); got < 2*time.Minute+time.Hour || got > 2*time.Minute+time.Hour+2*time.Minute {
		t.Fatalf("watch ended at +%v", got)
	}
	if r := h.store.refund("rf_sol_resend_never"); r.watched || !strings.Contains(r.message, first) || strings.Contains(r.message, "still watched") {
		t.Fatalf("stored %+v", r)
	}
}

// TestRefundResumed: a refund resumed with a submitted transfer (continue
// as new, or the read model) goes straight to verification.
func TestRefundResumed(t *testing.T) {
	h := newRefundHarness(t, nil, "rf_resumed", 5_000_000)
	h.store.refunds["rf_resumed"].status, h.store.refunds["rf_resumed"].hash = models.RefundSubmitted, refundHash(12)
	h.in.Carry = &RefundCarry{Status: models.RefundSubmitted, TxHash: refundHash(12), SubmittedAt: refundStart}
	h.chain.put(refundHash(12), good(5_000_000), 2)
	if res := h.result(); res.Status != models.RefundSucceeded || res.TxHash != refundHash(12) {
		t.Fatalf("result %+v", res)
	}
	if h.store.calls[refundSubmitMethod] != 0 {
		t.Fatal("a resumed refund submitted again")
	}
}

// TestRefundContinuesAsNew: a long confirmation loop continues as new
// before its history grows past a few thousand events, carrying the
// submitted transfer and the start of its not-found window; the next run
// verifies it to the end.
func TestRefundContinuesAsNew(t *testing.T) {
	store := newRefundFakeStore()
	h := newRefundHarness(t, store, "rf_long", 5_000_000)
	h.in.PollInterval, h.in.NotFoundWindow = time.Second, 24*time.Hour
	h.submit(time.Minute, refundHash(13)) // never seen in this run
	next := h.continuedAsNew()
	want := RefundCarry{Status: models.RefundSubmitted, TxHash: refundHash(13), SubmittedAt: refundStart.Add(time.Minute)}
	if next.Carry == nil || !reflect.DeepEqual(*next.Carry, want) || next.RefundID != "rf_long" || next.Units != 5_000_000 {
		t.Fatalf("next run's input %+v carry %+v", next, next.Carry)
	}
	if reqs, _ := h.chain.requests(); len(reqs) != maxChecksPerRun {
		t.Fatalf("%d checks in the run", len(reqs))
	}

	res := h.nextRun(next, func(_ *testsuite.TestWorkflowEnvironment, c *refundFakeChain) {
		c.put(refundHash(13), good(5_000_000), 2)
	})
	if res.Status != models.RefundSucceeded {
		t.Fatalf("next run: %+v", res)
	}
	if n := store.calls[refundSubmitMethod]; n != 1 {
		t.Fatalf("%d submits", n)
	}
}

// TestRefundBadInput: a refund without wallets or amount never starts.
func TestRefundBadInput(t *testing.T) {
	h := newRefundHarness(t, nil, "rf_bad", 1)
	h.in.SourceWallet = ""
	h.env.ExecuteWorkflow(RefundWorkflow, h.in)
	var appErr *temporal.ApplicationError
	if err := h.env.GetWorkflowError(); !errors.As(err, &appErr) || appErr.Type() != ErrTypeBadUpdate {
		t.Fatalf("error %v", err)
	}
}

// TestRefundReplacedTransfer: the merchant's wallet replaced the submitted
// transfer (a speed-up lands under a new hash; the first never does). The
// new hash replaces it while it is checked, up to two replacements, and the
// refund succeeds with the one that lands. A refund failed TX_NOT_FOUND and
// still watched takes a replacement too: submitted again, its amount
// reserved again, then succeeded.
func TestRefundReplacedTransfer(t *testing.T) {
	h := newRefundHarness(t, nil, "rf_replaced", 5_000_000)
	h.submit(time.Minute, refundHash(31)) // never lands
	second := h.submit(2*time.Minute, refundHash(32))
	third := h.pay(3*time.Minute, refundHash(33), good(5_000_000), 1, 2)
	fourth := h.submit(3*time.Minute+time.Second, refundHash(34))
	res := h.result()
	if res.Status != models.RefundSucceeded || res.TxHash != refundHash(33) {
		t.Fatalf("result %+v", res)
	}
	if !second.accepted || second.err != nil || !third.accepted || third.err != nil {
		t.Fatalf("replacements: %s; %s", second, third)
	}
	if fourth.rejected == nil || fourth.errType() != ErrTypeRefundNotOpen {
		t.Fatalf("a third replacement: %s", fourth)
	}
	if r := h.store.refund("rf_replaced"); r.hash != refundHash(33) || r.status != models.RefundSucceeded {
		t.Fatalf("stored %+v", r)
	}
	if reserved, refunded, events := h.store.ledger(); reserved != 5_000_000 || refunded != 5_000_000 || len(events) != 1 {
		t.Fatalf("ledger %d/%d events %v", reserved, refunded, events)
	}

	w := newRefundHarness(t, nil, "rf_replaced_watched", 5_000_000)
	w.in.PollInterval = 30 * time.Second
	w.submit(time.Minute, refundHash(35)) // never lands: fails at +1h1m
	watched := w.stored(2 * time.Hour)
	var midReserved int64
	w.env.RegisterDelayedCallback(func() { midReserved, _, _ = w.store.ledger() }, 2*time.Hour)
	replaced := w.pay(3*time.Hour, refundHash(36), good(5_000_000), 1, 2)
	res = w.result()
	if res.Status != models.RefundSucceeded || res.TxHash != refundHash(36) {
		t.Fatalf("watched then replaced: %+v", res)
	}
	if watched.status != models.RefundFailed || midReserved != 0 || !replaced.accepted || replaced.err != nil {
		t.Fatalf("before the replacement: %+v reserved %d; replacement %s", *watched, midReserved, replaced)
	}
	if got := w.elapsed(); got < 3*time.Hour || got > 3*time.Hour+2*time.Minute {
		t.Fatalf("succeeded at +%v (the watch's pause must not hold the replacement back)", got)
	}
	if reserved, refunded, events := w.store.ledger(); reserved != 5_000_000 || refunded != 5_000_000 || len(events) != 1 {
		t.Fatalf("ledger %d/%d events %v", reserved, refunded, events)
	}
}

// TestRefundReplacedLandsAfterAll: the first transfer of a replaced pair
// lands. While the refund is failed TX_NOT_FOUND and watched, after a
// refund made since took the freed amount, it is still recorded (the money
// left the wallet: the record follows the chain). And when the re-send
// reverts in the same check in which the first is confirmed (it found the
// funds spent), the refund succeeds with the first, not failed.
func TestRefundReplacedLandsAfterAll(t *testing.T) {
	h := newRefundHarness(t, nil, "rf_after_all", 5_000_000)
	h.in.PollInterval, h.in.LateWatch = 30*time.Second, 6*time.Hour
	h.submit(time.Minute, refundHash(41))
	h.submit(2*time.Minute, refundHash(42)) // never lands
	h.env.RegisterDelayedCallback(func() {
		h.store.mu.Lock()
		defer h.store.mu.Unlock()
		h.store.refunds["rf_other"] = &refundFakeRefund{units: refundTxnUnits - h.store.reserved, status: models.RefundPending}
		h.store.reserved = refundTxnUnits // another refund takes what is left
	}, 2*time.Hour)
	h.env.RegisterDelayedCallback(func() { h.chain.put(refundHash(41), good(5_000_000), 2) }, 3*time.Hour)
	h.env.ExecuteWorkflow(RefundWorkflow, h.in)
	var res RefundResult
	if err := h.env.GetWorkflowResult(&res); err != nil || res.Status != models.RefundSucceeded || res.TxHash != refundHash(41) {
		t.Fatalf("the first transfer landed at +3h: %+v %v", res, err)
	}
	if reserved, refunded, _ := h.store.ledger(); refunded != 5_000_000 || reserved != refundTxnUnits+5_000_000 {
		t.Fatalf("ledger reserved %d refunded %d (over-reserved by the landing, as the chain shows)", reserved, refunded)
	}

	r := newRefundHarness(t, nil, "rf_resend_reverts", 5_000_000)
	r.submit(time.Minute, refundHash(51))
	r.submit(2*time.Minute, refundHash(52))
	r.env.RegisterDelayedCallback(func() {
		r.chain.put(refundHash(51), good(5_000_000), 2)
		r.chain.put(refundHash(52), refundTransfer{from: refundMerchant, to: refundPayer, units: 5_000_000, reverted: true}, 2)
	}, 3*time.Minute)
	if res := r.result(); res.Status != models.RefundSucceeded || res.TxHash != refundHash(51) {
		t.Fatalf("the re-send reverted, the first landed: %+v", res)
	}
}

// TestRefundReplacementsBoundTheRun: replacements while watched send the
// refund back to its checks; one run's chain checks (the replaced hashes'
// included) stay within the bound, and a third replacement is refused.
func TestRefundReplacementsBoundTheRun(t *testing.T) {
	h := newRefundHarness(t, nil, "rf_bound", 5_000_000)
	h.in.PollInterval, h.in.NotFoundWindow = 30*time.Second, 24*time.Minute
	h.submit(time.Minute, refundHash(61))    // fails TX_NOT_FOUND at +25m
	h.submit(40*time.Minute, refundHash(62)) // watched: checked again, fails at +64m
	h.submit(80*time.Minute, refundHash(63)) // watched: checked again
	third := h.submit(100*time.Minute, refundHash(64))
	h.env.ExecuteWorkflow(RefundWorkflow, h.in)
	var can *workflow.ContinueAsNewError
	if err := h.env.GetWorkflowError(); !errors.As(err, &can) {
		t.Fatalf("want continue-as-new, got %v", err)
	}
	if reqs, _ := h.chain.requests(); len(reqs) > maxChecksPerRun+maxReplacements {
		t.Fatalf("one run made %d chain checks", len(reqs))
	}
	if third.rejected == nil || !strings.Contains(third.rejected.Error(), "replaced 2 times already") {
		t.Fatalf("a third replacement: %s", third)
	}
}

// TestRefundReplacementFailsWhileTheReplacedIsUnseen: a refund's transfer
// replaced by a re-send that reverts, the replaced one unseen at that
// instant. The refund fails with the re-send's reason (its amount free
// again) but the replaced transfer is still watched: landing later, it
// makes the refund succeeded (the money left the merchant), so a merchant
// who refunds again knows. Also from a watched TX_NOT_FOUND failure, and
// when the watched hash itself lands reverted while the one it replaced is
// unseen.
func TestRefundReplacementFailsWhileTheReplacedIsUnseen(t *testing.T) {
	reverted := refundTransfer{from: refundMerchant, to: refundPayer, units: 5_000_000, reverted: true}
	cases := []struct {
		name   string
		steps  func(h *refundHarness)
		first  string // the replaced transfer that lands at +5h
		reason string
	}{
		{"re-send reverts while checked", func(h *refundHarness) {
			h.submit(time.Minute, refundHash(71)) // unseen
			h.pay(3*time.Minute, refundHash(72), reverted, 1, 2)
		}, refundHash(71), chain.ReasonTxReverted},
		{"re-send of a watched failure reverts", func(h *refundHarness) {
			h.submit(time.Minute, refundHash(73)) // fails TX_NOT_FOUND at +1h1m, watched
			h.pay(2*time.Hour, refundHash(74), reverted, 1, 2)
		}, refundHash(73), chain.ReasonTxReverted},
		{"watched re-send lands reverted", func(h *refundHarness) {
			h.submit(time.Minute, refundHash(75))
			h.submit(2*time.Minute, refundHash(76)) // both unseen: fails TX_NOT_FOUND at +1h2m
			h.env.RegisterDelayedCallback(func() { h.chain.put(refundHash(76), reverted, 2) }, 2*time.Hour)
		}, refundHash(75), chain.ReasonTxNotFound},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id := fmt.Sprintf("rf_resend_fails_%d", i)
			h := newRefundHarness(t, nil, id, 5_000_000)
			h.in.PollInterval = 30 * time.Second
			tc.steps(h)
			mid := h.stored(4 * time.Hour)
			var midReserved int64
			h.env.RegisterDelayedCallback(func() { midReserved, _, _ = h.store.ledger() }, 4*time.Hour)
			state := h.query(4 * time.Hour)
			h.env.RegisterDelayedCallback(func() { h.chain.put(tc.first, good(5_000_000), 1, 2) }, 5*time.Hour)
			res := h.result()
			if res.Status != models.RefundSucceeded || res.TxHash != tc.first {
				t.Fatalf("the replaced transfer landed at +5h: %+v", res)
			}
			if mid.status != models.RefundFailed || mid.reason != tc.reason || midReserved != 0 ||
				!mid.watchedFailure() || !strings.Contains(mid.message, "still watched") {
				t.Fatalf("at +4h: %+v reserved %d", *mid, midReserved)
			}
			if i == 2 && !strings.Contains(mid.message, refundHash(76)+" landed after the refund had failed, and does not pay it (TX_REVERTED") {
				t.Fatalf("the stored message after the watched hash landed reverted: %q", mid.message)
			}
			if state.Status != models.RefundFailed || state.WatchedUntil == nil {
				t.Fatalf("status query at +4h: %+v", *state)
			}
			if r := h.store.refund(id); r.status != models.RefundSucceeded || r.hash != tc.first || r.watched {
				t.Fatalf("stored %+v", r)
			}
			if reserved, refunded, events := h.store.ledger(); reserved != 5_000_000 || refunded != 5_000_000 || len(events) != 1 {
				t.Fatalf("ledger %d/%d events %v", reserved, refunded, events)
			}
			if got := h.elapsed(); got <= 5*time.Hour || got > 6*time.Hour+time.Minute {
				t.Fatalf("succeeded at +%v", got)
			}
		})
	}

	// The replaced transfer never lands: the watch ends, the refund stays
	// failed with its reason, and its message says the watch is over.
	h := newRefundHarness(t, nil, "rf_resend_fails_never", 5_000_000)
	h.in.PollInterval, h.in.LateWatch = 30*time.Second, 6*time.Hour
	h.submit(time.Minute, refundHash(77))
	h.pay(3*time.Minute, refundHash(78), reverted, 1, 2)
	res := h.result()
	if res.Status != models.RefundFailed || res.Reason != chain.ReasonTxReverted || res.TxHash != refundHash(78) {
		t.Fatalf("result %+v", res)
	}
	if got := h.elapsed(); got < 6*time.Hour || got > 6*time.Hour+10*time.Minute {
		t.Fatalf("watch ended at +%v", got)
	}
	r := h.store.refund("rf_resend_fails_never")
	if r.status != models.RefundFailed || r.reason != chain.ReasonTxReverted || r.watched || strings.Contains(r.message, "still watched") ||
		!strings.Contains(r.message, refundHash(77)) {
		t.Fatalf("stored %+v", r)
	}
	if reserved, refunded, events := h.store.ledger(); reserved != 0 || refunded != 0 || len(events) != 0 {
		t.Fatalf("ledger %d/%d events %v", reserved, refunded, events)
	}
}

// TestRefundFailedHashIsNotWatchedAfterItsReplacement: a watched refund
// whose current transfer already failed on chain is submitted again; that
// failed transfer is decided, so it is not among the hashes then watched
// (nor named as watched). Before (refund-replaced-failed), it joined them.
func TestRefundFailedHashIsNotWatchedAfterItsReplacement(t *testing.T) {
	reverted := refundTransfer{from: refundMerchant, to: refundPayer, units: 5_000_000, reverted: true}
	h := newRefundHarness(t, nil, "rf_third", 5_000_000)
	h.in.PollInterval = 30 * time.Second
	h.submit(time.Minute, refundHash(81))                 // unseen
	h.pay(3*time.Minute, refundHash(82), reverted, 1, 2)  // fails: 81 watched
	h.pay(30*time.Minute, refundHash(83), reverted, 1, 2) // fails again: 81 still watched, 82 decided
	mid := h.stored(time.Hour)
	state := h.query(time.Hour)
	var checkedAfter []string
	h.env.RegisterDelayedCallback(func() {
		reqs, at := h.chain.requests()
		for i, r := range reqs {
			if at[i].After(refundStart.Add(40 * time.Minute)) {
				checkedAfter = append(checkedAfter, r.TxHash)
			}
		}
		h.chain.put(refundHash(81), good(5_000_000), 1, 2)
	}, 2*time.Hour)
	res := h.result()
	if res.Status != models.RefundSucceeded || res.TxHash != refundHash(81) {
		t.Fatalf("result %+v", res)
	}
	if mid.status != models.RefundFailed || !mid.watchedFailure() || !strings.Contains(mid.message, "the transfer it replaced ("+refundHash(81)+")") {
		t.Fatalf("at +1h: %+v", *mid)
	}
	if !slices.Equal(state.Replaced, []string{refundHash(81)}) {
		t.Fatalf("watched at +1h: %v", state.Replaced)
	}
	if len(checkedAfter) == 0 || slices.Contains(checkedAfter, refundHash(82)) {
		t.Fatalf("checked after the third hash failed: %v", checkedAfter)
	}
}

// TestRefundReplacedWatchContinuesAsNew: the watch of a failed re-send's
// replaced transfer outlasts one run; the next run carries the failure
// (reason, how the re-send failed), checks only the replaced transfer, and
// adopts it when it lands.
func TestRefundReplacedWatchContinuesAsNew(t *testing.T) {
	store := newRefundFakeStore()
	h := newRefundHarness(t, store, "rf_replaced_long", 5_000_000)
	h.in.PollInterval, h.in.LateWatch = 30*time.Second, 60*24*time.Hour
	h.submit(time.Minute, refundHash(79))
	h.pay(3*time.Minute, refundHash(80), refundTransfer{from: refundMerchant, to: refundPayer, units: 5_000_000, reverted: true}, 1, 2)
	next := h.continuedAsNew()
	if c := next.Carry; c == nil || c.Reason != chain.ReasonTxReverted || !strings.HasPrefix(c.CurrentFailure, chain.ReasonTxReverted) ||
		c.TxHash != refundHash(80) || !slices.Equal(c.Replaced, []string{refundHash(79)}) || c.LateUntil.IsZero() {
		t.Fatalf("carry %+v", next.Carry)
	}
	var checked []string
	res := h.nextRun(next, func(env *testsuite.TestWorkflowEnvironment, c *refundFakeChain) {
		env.RegisterDelayedCallback(func() {
			c.put(refundHash(79), good(5_000_000), 2)
			reqs, _ := c.requests()
			for _, r := range reqs {
				checked = append(checked, r.TxHash)
			}
		}, 3*time.Hour)
	})
	if res.Status != models.RefundSucceeded || res.TxHash != refundHash(79) {
		t.Fatalf("next run: %+v", res)
	}
	if len(checked) == 0 || slices.Contains(checked, refundHash(80)) {
		t.Fatalf("the next run checked %v (the failed re-send is decided)", checked)
	}
	if reserved, refunded, events := store.ledger(); reserved != 5_000_000 || refunded != 5_000_000 || len(events) != 1 {
		t.Fatalf("ledger %d/%d events %v", reserved, refunded, events)
	}
}

// TestRefundWatchAwaitsASeenTransferPastItsEnd: a watched transfer mined
// in the watch's last minutes and confirmed after its end is still
// recorded (its verdict is awaited, for at most the not-found window);
// one still unconfirmed then ends the watch.
func TestRefundWatchAwaitsASeenTransferPastItsEnd(t *testing.T) {
	for _, tc := range []struct {
		name   string
		confs  []int
		status string
	}{
		{"confirmed after the end", []int{1, 1, 1, 2}, models.RefundSucceeded},
		{"never confirmed", []int{1}, models.RefundFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newRefundHarness(t, nil, "rf_grace", 5_000_000)
			h.in.PollInterval, h.in.LateWatch = 30*time.Second, 6*time.Hour
			h.submit(time.Minute, refundHash(81)) // fails TX_NOT_FOUND at +1h1m: watched until +7h1m
			h.env.RegisterDelayedCallback(func() { h.chain.put(refundHash(81), good(5_000_000), tc.confs...) }, 6*time.Hour+55*time.Minute)
			res := h.result()
			if res.Status != tc.status {
				t.Fatalf("result %+v at +%v", res, h.elapsed())
			}
			end := 7*time.Hour + time.Minute
			switch got := h.elapsed(); {
			case tc.status == models.RefundSucceeded && (got <= end || got > end+5*time.Minute):
				t.Fatalf("succeeded at +%v", got)
			case tc.status == models.RefundFailed && (got < end+time.Hour || got > end+time.Hour+time.Minute):
				t.Fatalf("watch ended at +%v (the not-found window after its end)", got)
			}
		})
	}
}
