package workflows

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/paygate/paygate/activities"
	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/models"
)

// Fixed values of the checkout tests.
const (
	checkoutSessionID = "cs_0192f3a4-test"
	checkoutLinkID    = "pl_0192f3a4-link"
	checkoutNetwork   = "base_sepolia"
	checkoutWallet    = "0x1111111111111111111111111111111111111111"
	checkoutPayer     = "0x2222222222222222222222222222222222222222"
	checkoutHash      = "0x" + "ab00000000000000000000000000000000000000000000000000000000000001"
	checkoutHash2     = "0x" + "ab00000000000000000000000000000000000000000000000000000000000002"
	checkoutUnits     = 32610000 // 32.61 USDC
)

// checkoutStart is the test clock's start in every checkout test.
var checkoutStart = testClockStart

// --- fakes ---

// checkoutFakeStore is an in-memory activities.CheckoutStore that keeps the
// interface's promises: a hash backs one session ever, a history entry id is
// written once, a session gets one outcome, and an outcome emits its events
// once. Anything that would write twice, or move a session backwards, is
// noted in violations (checked by every test). failAfter makes the next n
// calls of a method fail after their write committed (a crash between commit
// and ack); failBefore makes them fail before writing.
type checkoutFakeStore struct {
	mu         sync.Mutex
	now        func() time.Time                     // the test clock
	claims     map[string]string                    // network/hash -> session id
	entries    []activities.SessionTransition       // history entries in write order, outcomes included
	entryIDs   map[string]int                       // entry id -> index in entries
	status     map[string]string                    // session -> stored status
	outcomes   map[string]activities.SessionOutcome // session -> its outcome
	finishAt   []time.Time                          // test clock at each FinishSession call
	events     []string                             // "<session> <event type>", once per emission
	calls      map[string]int                       // method -> number of calls
	failAfter  map[string]int
	failBefore map[string]int
	violations []string
	contested  map[string]bool // sessions whose unproven transfer the store finds contested
	released   []activities.SessionRelease
	// replaced are the replacements done; holds, per session, the hash a
	// replacement left it (what makes a repeated one answer Replaced).
	replaced []activities.SessionReplacement
	holds    map[string]string
}

// Store method names, the keys of calls, failAfter and failBefore.
const (
	checkoutClaim   = "ClaimSessionTxHash"
	checkoutRecord  = "RecordSessionTransition"
	checkoutFinish  = "FinishSession"
	checkoutRelease = "ReleaseSessionTxHash"
	checkoutReplace = "ReplaceSessionTxHash"
)

func newCheckoutFakeStore(now func() time.Time) *checkoutFakeStore {
	return &checkoutFakeStore{now: now, claims: map[string]string{}, entryIDs: map[string]int{}, contested: map[string]bool{},
		status: map[string]string{}, outcomes: map[string]activities.SessionOutcome{},
		calls: map[string]int{}, failAfter: map[string]int{}, failBefore: map[string]int{}}
}

// errCheckoutCrash is the injected fault: retryable, like a lost connection.
var errCheckoutCrash = errors.New("connection reset by peer")

// enter counts a call and reports whether it must fail before writing.
func (s *checkoutFakeStore) enter(method string) error {
	s.calls[method]++
	if s.failBefore[method] > 0 {
		s.failBefore[method]--
		return errCheckoutCrash
	}
	return nil
}

// leave reports whether a call that has written must still fail.
func (s *checkoutFakeStore) leave(method string) error {
	if s.failAfter[method] > 0 {
		s.failAfter[method]--
		return errCheckoutCrash
	}
	return nil
}

func (s *checkoutFakeStore) violate(format string, args ...any) {
	s.violations = append(s.violations, fmt.Sprintf(format, args...))
}

func (s *checkoutFakeStore) ClaimSessionTxHash(_ context.Context, sessionID, network, txHash string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.enter(checkoutClaim); err != nil {
		return err
	}
	key := network + "/" + txHash
	if owner, ok := s.claims[key]; ok && owner != sessionID {
		return apperr.Conflict("transaction hash already attached to another session")
	}
	s.claims[key] = sessionID
	return s.leave(checkoutClaim)
}

// checkoutPreBroadcast lists the statuses a session may leave for a wallet
// status or a broadcast.
var checkoutPreBroadcast = map[string]bool{"": true, models.StatusCreated: true,
	models.StatusWalletConnecting: true, models.StatusWalletReady: true}

func checkoutTerminal(status string) bool {
	switch status {
	case models.StatusComplete, models.StatusFailed, models.StatusCancelled, models.StatusExpired:
		return true
	}
	return false
}

func (s *checkoutFakeStore) RecordSessionTransition(_ context.Context, t activities.SessionTransition) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.enter(checkoutRecord); err != nil {
		return err
	}
	if i, ok := s.entryIDs[t.EntryID]; ok {
		if old := s.entries[i]; old != t {
			s.violate("entry %s written twice with different content: %+v then %+v", t.EntryID, old, t)
		}
		return s.leave(checkoutRecord)
	}
	from := s.status[t.SessionID]
	switch {
	case checkoutTerminal(from):
		s.violate("session %s moved from %s to %s", t.SessionID, from, t.Status)
	case t.Status == models.StatusWalletConnecting || t.Status == models.StatusWalletReady || t.Status == models.StatusBroadcast:
		if !checkoutPreBroadcast[from] {
			s.violate("session %s moved back from %s to %s", t.SessionID, from, t.Status)
		}
	case t.Status == models.StatusConfirming:
		if from != models.StatusBroadcast {
			s.violate("session %s moved from %s to %s", t.SessionID, from, t.Status)
		}
	default:
		s.violate("transition to %q", t.Status)
	}
	if t.Status == models.StatusBroadcast && t.TxHash == "" {
		s.violate("broadcast of %s without its hash", t.SessionID)
	}
	s.entryIDs[t.EntryID] = len(s.entries)
	s.entries = append(s.entries, t)
	if !checkoutTerminal(from) {
		s.status[t.SessionID] = t.Status
	}
	return s.leave(checkoutRecord)
}

// checkoutEventsOf lists the events an outcome emits (SPEC.md Events,
// DESIGN.md Completion).
func checkoutEventsOf(status string) []string {
	switch status {
	case models.StatusComplete:
		return []string{"checkout.completed", "payment.completed"}
	case models.StatusFailed:
		return []string{"checkout.failed", "payment.failed"}
	case models.StatusCancelled:
		return []string{"checkout.cancelled"}
	case models.StatusExpired:
		return []string{"checkout.expired"}
	}
	return nil
}

func checkoutDeliveryIDs(sessionID, status string) []string {
	var ids []string
	for _, ev := range checkoutEventsOf(status) {
		ids = append(ids, "dlv:"+sessionID+":"+ev)
	}
	return ids
}

func (s *checkoutFakeStore) FinishSession(_ context.Context, o activities.SessionOutcome) (activities.FinishedSession, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.finishAt = append(s.finishAt, s.now())
	if err := s.enter(checkoutFinish); err != nil {
		return activities.FinishedSession{}, err
	}
	if o.Status == models.StatusComplete && !o.Bound && s.contested[o.SessionID] {
		// What the store decides for a transfer without proof that another
		// session claims too.
		o.Status, o.Reason, o.Message = models.StatusFailed, models.ReasonTxContested, "contested"
	}
	if !checkoutTerminal(o.Status) {
		s.violate("outcome %q is not terminal", o.Status)
	}
	if old, ok := s.outcomes[o.SessionID]; ok {
		if !reflect.DeepEqual(old, o) {
			s.violate("session %s finished twice: %+v then %+v", o.SessionID, old, o)
		}
		return finished(old), s.leave(checkoutFinish)
	}
	if _, ok := s.entryIDs[o.EntryID]; ok {
		s.violate("outcome entry %s reuses a history entry id", o.EntryID)
	}
	// A broadcast session finishes through verification only.
	if from := s.status[o.SessionID]; !checkoutPreBroadcast[from] &&
		(o.Status == models.StatusCancelled || o.Status == models.StatusExpired || o.Reason == ReasonLinkDeleted) {
		s.violate("session %s ended %s (%s) after %s", o.SessionID, o.Status, o.Reason, from)
	}
	s.outcomes[o.SessionID] = o
	s.entryIDs[o.EntryID] = len(s.entries)
	s.entries = append(s.entries, activities.SessionTransition{SessionID: o.SessionID, EntryID: o.EntryID,
		Status: o.Status, Source: o.Source, Chain: o.Chain, At: o.At})
	s.status[o.SessionID] = o.Status
	for _, ev := range checkoutEventsOf(o.Status) {
		s.events = append(s.events, o.SessionID+" "+ev)
	}
	return finished(o), s.leave(checkoutFinish)
}

// ReleaseSessionTxHash gives a broadcast session's hash back: the session
// returns to its last status before the broadcast (an entry with source
// chain), and the hash may back another session again.
func (s *checkoutFakeStore) ReleaseSessionTxHash(_ context.Context, r activities.SessionRelease) (activities.ReleasedSession, error) {
	// The fake gives back what is asked (the real store caps it:
	// TestReleaseSessionTxHash).
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.enter(checkoutRelease); err != nil {
		return activities.ReleasedSession{}, err
	}
	if i, ok := s.entryIDs[r.EntryID]; ok {
		return activities.ReleasedSession{Released: true, Status: s.entries[i].Status}, s.leave(checkoutRelease)
	}
	from := s.status[r.SessionID]
	if from != models.StatusBroadcast && from != models.StatusConfirming {
		return activities.ReleasedSession{Status: from}, s.leave(checkoutRelease)
	}
	if s.claims[checkoutNetwork+"/"+r.TxHash] != r.SessionID {
		s.violate("release of %s, a hash session %s does not hold", r.TxHash, r.SessionID)
	}
	delete(s.claims, checkoutNetwork+"/"+r.TxHash)
	back := models.StatusCreated
	for _, e := range s.entries {
		if e.SessionID == r.SessionID && checkoutPreBroadcast[e.Status] {
			back = e.Status
		}
	}
	s.entryIDs[r.EntryID] = len(s.entries)
	s.entries = append(s.entries, activities.SessionTransition{SessionID: r.SessionID, EntryID: r.EntryID, Status: back,
		Source: "chain", Chain: r.Chain, At: r.At})
	s.status[r.SessionID] = back
	s.released = append(s.released, r)
	return activities.ReleasedSession{Released: true, Status: back, ExpiresAt: r.ExpiresAt}, s.leave(checkoutRelease)
}

// ReplaceSessionTxHash sets aside a broadcast session's hash for another:
// an entry back to the last status before the broadcast, then the
// broadcast of the new hash, both with source chain. A session already
// holding the new hash answers Replaced (a retried task asks again with
// other entry ids).
func (s *checkoutFakeStore) ReplaceSessionTxHash(_ context.Context, r activities.SessionReplacement) (activities.ReplacedSession, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.enter(checkoutReplace); err != nil {
		return activities.ReplacedSession{}, err
	}
	back := models.StatusCreated
	for _, e := range s.entries {
		if e.SessionID == r.SessionID && checkoutPreBroadcast[e.Status] {
			back = e.Status
		}
	}
	from := s.status[r.SessionID]
	if s.holds[r.SessionID] == r.TxHash && !checkoutTerminal(from) {
		return activities.ReplacedSession{Replaced: true, Status: back, ExpiresAt: r.ExpiresAt}, s.leave(checkoutReplace)
	}
	if from != models.StatusBroadcast {
		return activities.ReplacedSession{Status: from}, s.leave(checkoutReplace)
	}
	if s.claims[checkoutNetwork+"/"+r.Held] != r.SessionID || s.claims[checkoutNetwork+"/"+r.TxHash] != r.SessionID {
		s.violate("replacement of %s by %s: the session does not hold the one or claimed the other", r.Held, r.TxHash)
	}
	delete(s.claims, checkoutNetwork+"/"+r.Held)
	for _, e := range []activities.SessionTransition{
		{SessionID: r.SessionID, EntryID: r.ReleaseEntryID, Status: back, Source: "chain", Chain: r.Chain, At: r.At},
		{SessionID: r.SessionID, EntryID: r.BroadcastEntryID, Status: models.StatusBroadcast, Source: "chain", Chain: r.Chain, TxHash: r.TxHash, At: r.At},
	} {
		if _, ok := s.entryIDs[e.EntryID]; ok {
			s.violate("replacement entry %s written twice", e.EntryID)
		}
		s.entryIDs[e.EntryID] = len(s.entries)
		s.entries = append(s.entries, e)
	}
	if s.holds == nil {
		s.holds = map[string]string{}
	}
	s.holds[r.SessionID] = r.TxHash
	s.replaced = append(s.replaced, r)
	return activities.ReplacedSession{Replaced: true, Status: back, ExpiresAt: r.ExpiresAt}, s.leave(checkoutReplace)
}

func finished(o activities.SessionOutcome) activities.FinishedSession {
	return activities.FinishedSession{Status: o.Status, Reason: o.Reason, Message: o.Message,
		Deliveries: checkoutDeliveryIDs(o.SessionID, o.Status)}
}

// outcome returns the session's outcome, if any.
func (s *checkoutFakeStore) outcome(sessionID string) (activities.SessionOutcome, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.outcomes[sessionID]
	return o, ok
}

// history lists the session's stored entries in write order.
func (s *checkoutFakeStore) history(sessionID string) []activities.SessionTransition {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []activities.SessionTransition
	for _, e := range s.entries {
		if e.SessionID == sessionID {
			out = append(out, e)
		}
	}
	return out
}

func (s *checkoutFakeStore) count(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[method]
}

func (s *checkoutFakeStore) finishTimes() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.finishAt...)
}

func (s *checkoutFakeStore) emitted() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.events...)
}

// check fails t on every broken promise.
func (s *checkoutFakeStore) check(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range s.violations {
		t.Errorf("store: %s", v)
	}
}

// checkoutVerifyAnswer decides a Verify call; n counts calls from 1.
type checkoutVerifyAnswer func(n int, req chain.VerifyRequest) (chain.VerifyResult, error)

// checkoutFakeVerifier is a scripted chain.Verifier that records every
// request and the test-clock time it came at.
type checkoutFakeVerifier struct {
	mu     sync.Mutex
	now    func() time.Time
	answer checkoutVerifyAnswer
	reqs   []chain.VerifyRequest
	at     []time.Time
}

func (v *checkoutFakeVerifier) Verify(_ context.Context, req chain.VerifyRequest) (chain.VerifyResult, error) {
	v.mu.Lock()
	v.reqs = append(v.reqs, req)
	v.at = append(v.at, v.now())
	n, answer := len(v.reqs), v.answer
	v.mu.Unlock()
	if answer == nil {
		return chain.VerifyResult{}, errors.New("no chain in this test")
	}
	return answer(n, req)
}

func (v *checkoutFakeVerifier) calls() ([]chain.VerifyRequest, []time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]chain.VerifyRequest(nil), v.reqs...), append([]time.Time(nil), v.at...)
}

// checkoutStep is one scripted Verify answer.
type checkoutStep struct {
	res chain.VerifyResult
	err error
}

// checkoutScript answers call n with steps[n-1]; the last step repeats.
func checkoutScript(steps ...checkoutStep) checkoutVerifyAnswer {
	return func(n int, _ chain.VerifyRequest) (chain.VerifyResult, error) {
		s := steps[min(n, len(steps))-1]
		return s.res, s.err
	}
}

// checkoutPending is a pending verdict, seen on chain or not.
func checkoutPending(seen bool) checkoutStep {
	r := chain.VerifyResult{Verdict: chain.VerdictPending, Required: 3, Message: "waiting"}
	if seen {
		r.Seen, r.BlockNumber, r.Confirmations, r.ReceivedUnits, r.Payer = true, 1234, 1, fmt.Sprint(checkoutUnits), checkoutPayer
	}
	return checkoutStep{res: r}
}

// checkoutComplete is a complete verdict for received units.
func checkoutComplete(received int64) checkoutStep {
	return checkoutStep{res: chain.VerifyResult{Seen: true, BlockNumber: 1234, Confirmations: 3, Required: 3,
		ReceivedUnits: fmt.Sprint(received), Payer: checkoutPayer, Verdict: chain.VerdictComplete, Message: "verified"}}
}

// checkoutFailedStep is a failed verdict with its reason.
func checkoutFailedStep(reason string, received int64, msg string) checkoutStep {
	return checkoutStep{res: chain.VerifyResult{Seen: true, BlockNumber: 1234, Confirmations: 3, Required: 3,
		ReceivedUnits: fmt.Sprint(received), Payer: checkoutPayer, Verdict: chain.VerdictFailed, Reason: reason, Message: msg}}
}

// checkoutRPCError is a transient verifier fault.
func checkoutRPCError() checkoutStep {
	return checkoutStep{err: errors.New("dial tcp 127.0.0.1:8545: connection refused")}
}

// checkoutFakeDispatcher records the delivery ids it was asked to start;
// started counts starts per id, as the workflow ids of deliveries would.
type checkoutFakeDispatcher struct {
	mu      sync.Mutex
	calls   int
	started map[string]int
}

func (d *checkoutFakeDispatcher) Dispatch(_ context.Context, ids []string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls++
	if d.started == nil {
		d.started = map[string]int{}
	}
	for _, id := range ids {
		d.started[id]++
	}
	return nil
}

func (d *checkoutFakeDispatcher) ids() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for id := range d.started {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// --- harness ---

// checkoutHarness is one test's workflow environment with its fakes, its
// input and what the handlers reported.
type checkoutHarness struct {
	t          *testing.T
	env        *testsuite.TestWorkflowEnvironment
	store      *checkoutFakeStore
	verifier   *checkoutFakeVerifier
	dispatcher *checkoutFakeDispatcher
	in         CheckoutInput
	upserts    []string // CheckoutStatus values upserted, in order
	updates    int
	// offerAsClient: a test's offer is sent as a client's submit.
	offerAsClient bool
}

// newCheckoutHarness sets up a session created at checkoutStart that
// expires 30 minutes later, polled every 5 s, with a 1 h not-found window.
func newCheckoutHarness(t *testing.T, answer checkoutVerifyAnswer) *checkoutHarness {
	return newCheckoutHarnessAt(t, checkoutStart, nil, answer)
}

// newCheckoutHarnessAt starts the test clock at start and reuses store when
// given (a continued run sees the same database).
func newCheckoutHarnessAt(t *testing.T, start time.Time, store *checkoutFakeStore, answer checkoutVerifyAnswer) *checkoutHarness {
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(webhookTestLogger())
	env := suite.NewTestWorkflowEnvironment()
	env.SetStartTime(start)
	if store == nil {
		store = newCheckoutFakeStore(env.Now)
	}
	store.mu.Lock()
	store.now = env.Now
	store.mu.Unlock()
	h := &checkoutHarness{t: t, env: env, store: store,
		verifier:   &checkoutFakeVerifier{now: env.Now, answer: answer},
		dispatcher: &checkoutFakeDispatcher{},
		in: CheckoutInput{SessionID: checkoutSessionID, MerchantID: "mer_1", PaymentLinkID: checkoutLinkID,
			Network: checkoutNetwork, MerchantWallet: checkoutWallet, ExpectedUnits: checkoutUnits,
			ExpiresAt: checkoutStart.Add(30 * time.Minute), PollInterval: 5 * time.Second, NotFoundWindow: time.Hour, Shape: checkoutTestShape},
	}
	env.RegisterWorkflow(CheckoutSessionWorkflow)
	env.RegisterActivity(&activities.CheckoutActivities{Store: store, Verifier: h.verifier, Dispatcher: h.dispatcher})
	env.OnUpsertTypedSearchAttributes(mock.Anything).Run(func(args mock.Arguments) {
		sa := args.Get(0).(temporal.SearchAttributes)
		if v, ok := sa.GetKeyword(CheckoutStatusAttr); ok {
			h.upserts = append(h.upserts, v)
		} else {
			t.Errorf("upsert without CheckoutStatus: %v", sa.GetUntypedValues())
		}
	}).Return().Maybe()
	return h
}

// checkoutUpdate is what one update's callbacks reported.
type checkoutUpdate struct {
	name     string
	sentAt   time.Time
	accepted bool
	rejected error // the validator's refusal
	done     bool  // rejected or completed
	err      error // the handler's failure
	value    any
	doneAt   time.Time
}

// errType is the application error type of the refusal or failure.
func (u *checkoutUpdate) errType() string {
	err := u.rejected
	if err == nil {
		err = u.err
	}
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Type()
	}
	if err != nil {
		return "untyped: " + err.Error()
	}
	return ""
}

func (u *checkoutUpdate) String() string {
	return fmt.Sprintf("%s accepted=%v rejected=%v err=%v value=%+v", u.name, u.accepted, u.rejected, u.err, u.value)
}

// update sends an update after d on the test clock.
func (h *checkoutHarness) update(d time.Duration, name string, arg any) *checkoutUpdate {
	h.updates++
	u := &checkoutUpdate{name: fmt.Sprintf("%s-%d", name, h.updates)}
	h.env.RegisterDelayedCallback(func() {
		u.sentAt = h.env.Now()
		h.env.UpdateWorkflow(name, u.name, &testsuite.TestUpdateCallback{
			OnAccept: func() { u.accepted = true },
			OnReject: func(err error) { u.rejected, u.done, u.doneAt = err, true, h.env.Now() },
			OnComplete: func(v any, err error) {
				u.value, u.err, u.done, u.doneAt = v, err, true, h.env.Now()
			},
		}, arg)
	}, d)
	return u
}

func (h *checkoutHarness) submit(d time.Duration, hash string) *checkoutUpdate {
	return h.update(d, CheckoutSubmitUpdate, SubmitRequest{TxHash: hash})
}

func (h *checkoutHarness) wallet(d time.Duration, status string) *checkoutUpdate {
	return h.update(d, CheckoutWalletUpdate, WalletRequest{Status: status})
}

func (h *checkoutHarness) cancel(d time.Duration, source string) {
	h.env.RegisterDelayedCallback(func() { h.env.SignalWorkflow(CheckoutCancelSignal, CancelRequest{Source: source}) }, d)
}

// query asks for the status after d; the answer is filled in then.
func (h *checkoutHarness) query(d time.Duration) *CheckoutState {
	st := &CheckoutState{}
	h.env.RegisterDelayedCallback(func() {
		v, err := h.env.QueryWorkflow(CheckoutStatusQuery)
		if err == nil {
			err = v.Get(st)
		}
		if err != nil {
			h.t.Errorf("status query at +%v: %v", d, err)
		}
	}, d)
	return st
}

// run executes the workflow to its end and checks the store's promises.
func (h *checkoutHarness) run() {
	h.t.Helper()
	h.env.ExecuteWorkflow(CheckoutSessionWorkflow, h.in)
	if !h.env.IsWorkflowCompleted() {
		h.t.Fatal("workflow did not complete")
	}
	h.store.check(h.t)
}

// result runs the workflow and returns its result, failing on an error.
func (h *checkoutHarness) result() CheckoutResult {
	h.t.Helper()
	h.run()
	if err := h.env.GetWorkflowError(); err != nil {
		h.t.Fatalf("workflow error: %v", err)
	}
	var res CheckoutResult
	if err := h.env.GetWorkflowResult(&res); err != nil {
		h.t.Fatal(err)
	}
	return res
}

// finalState queries the finished workflow.
func (h *checkoutHarness) finalState() CheckoutState {
	h.t.Helper()
	v, err := h.env.QueryWorkflow(CheckoutStatusQuery)
	if err != nil {
		h.t.Fatalf("status query after the end: %v", err)
	}
	var st CheckoutState
	if err := v.Get(&st); err != nil {
		h.t.Fatal(err)
	}
	return st
}

// checkoutEntry is a history entry without its id, for comparisons.
type checkoutEntry struct {
	Status, Source, Chain string
	At                    time.Duration // since checkoutStart
}

func (e checkoutEntry) String() string {
	return fmt.Sprintf("%s/%s/%s@+%v", e.Status, e.Source, e.Chain, e.At)
}

func checkoutEntries(hist []HistoryEntry) []checkoutEntry {
	out := make([]checkoutEntry, 0, len(hist))
	for _, e := range hist {
		out = append(out, checkoutEntry{e.Status, e.Source, e.Chain, e.At.Sub(checkoutStart)})
	}
	return out
}

// checkHistory compares the workflow's history, the store's entries and the
// search attribute upserts with want, and checks ids and time order.
func (h *checkoutHarness) checkHistory(want ...checkoutEntry) {
	h.t.Helper()
	st := h.finalState()
	if got := fmt.Sprint(checkoutEntries(st.History)); got != fmt.Sprint(want) {
		h.t.Errorf("workflow history\n got %s\nwant %s", got, fmt.Sprint(want))
	}
	stored := h.store.history(h.in.SessionID)
	if len(stored) != len(st.History) {
		h.t.Fatalf("store has %d entries, workflow %d", len(stored), len(st.History))
	}
	seen := map[string]bool{}
	for i, e := range st.History {
		s := stored[i]
		if s.EntryID != e.ID || s.Status != e.Status || s.Source != e.Source || s.Chain != e.Chain || !s.At.Equal(e.At) {
			h.t.Errorf("entry %d: stored %+v, workflow %+v", i, s, e)
		}
		if e.ID == "" || seen[e.ID] {
			h.t.Errorf("entry %d: id %q empty or repeated", i, e.ID)
		}
		seen[e.ID] = true
		if i > 0 && e.At.Before(st.History[i-1].At) {
			h.t.Errorf("entry %d at %v is before entry %d at %v", i, e.At, i-1, st.History[i-1].At)
		}
	}
	var statuses []string
	for _, e := range want {
		statuses = append(statuses, e.Status)
	}
	if fmt.Sprint(h.upserts) != fmt.Sprint(statuses) {
		h.t.Errorf("CheckoutStatus upserts %v, want %v", h.upserts, statuses)
	}
	if len(want) > 0 && st.Status != want[len(want)-1].Status {
		h.t.Errorf("final status %q, want %q", st.Status, want[len(want)-1].Status)
	}
}

// checkOutcome checks the stored outcome, its events and their dispatch.
func (h *checkoutHarness) checkOutcome(status, source, network, reason string, at time.Duration) activities.SessionOutcome {
	h.t.Helper()
	o, ok := h.store.outcome(h.in.SessionID)
	if !ok {
		h.t.Fatal("no outcome stored")
	}
	if o.Status != status || o.Source != source || o.Chain != network || o.Reason != reason || !o.At.Equal(checkoutStart.Add(at)) {
		h.t.Errorf("outcome %+v, want %s/%s/%s reason %q at +%v", o, status, source, network, reason, at)
	}
	var want []string
	for _, ev := range checkoutEventsOf(status) {
		want = append(want, h.in.SessionID+" "+ev)
	}
	if got := h.store.emitted(); fmt.Sprint(got) != fmt.Sprint(want) {
		h.t.Errorf("events %v, want %v", got, want)
	}
	ids := checkoutDeliveryIDs(h.in.SessionID, status)
	sort.Strings(ids)
	if got := h.dispatcher.ids(); fmt.Sprint(got) != fmt.Sprint(ids) {
		h.t.Errorf("dispatched %v, want %v", got, ids)
	}
	h.dispatcher.mu.Lock()
	for id, n := range h.dispatcher.started {
		if n != 1 {
			h.t.Errorf("delivery %s dispatched %d times", id, n)
		}
	}
	h.dispatcher.mu.Unlock()
	return o
}

func checkoutAt(status, source, network string, at time.Duration) checkoutEntry {
	return checkoutEntry{status, source, network, at}
}

// --- tests ---

func TestCheckoutWorkflowID(t *testing.T) {
	if got := CheckoutWorkflowID("0192f3a4"); got != "checkout:0192f3a4" {
		t.Fatal(got)
	}
}

func TestCheckoutRejectsBadInput(t *testing.T) {
	for _, in := range []CheckoutInput{{ExpectedUnits: 1}, {SessionID: "cs", ExpectedUnits: 0}, {SessionID: "cs", ExpectedUnits: -5}} {
		h := newCheckoutHarness(t, nil)
		h.in = in
		h.run()
		var appErr *temporal.ApplicationError
		if err := h.env.GetWorkflowError(); !errors.As(err, &appErr) || appErr.Type() != ErrTypeBadUpdate || !appErr.NonRetryable() {
			t.Fatalf("input %+v: error %v, want a non-retryable %s", in, err, ErrTypeBadUpdate)
		}
	}
}

// The happy path: wallet progress, a submit, two unseen checks, a seen one
// (txn_confirming by the chain on the network), then the verdict.
func TestCheckoutCompletes(t *testing.T) {
	h := newCheckoutHarness(t, checkoutScript(checkoutPending(false), checkoutPending(false),
		checkoutPending(true), checkoutPending(true), checkoutComplete(checkoutUnits)))
	w1 := h.wallet(10*time.Second, models.StatusWalletConnecting)
	w2 := h.wallet(20*time.Second, models.StatusWalletReady)
	sub := h.submit(time.Minute, checkoutHash)
	mid := h.query(time.Minute + 12*time.Second)
	res := h.result()

	if res != (CheckoutResult{Status: models.StatusComplete, TxHash: checkoutHash}) {
		t.Fatalf("result %+v", res)
	}
	for _, w := range []*checkoutUpdate{w1, w2} {
		if !w.accepted || w.err != nil {
			t.Fatalf("wallet update: %v", w)
		}
	}
	if !sub.accepted || sub.err != nil || !sub.doneAt.Equal(checkoutStart.Add(time.Minute)) {
		t.Fatalf("submit: %v", sub)
	}
	if got, ok := sub.value.(SubmitResult); !ok || got != (SubmitResult{Status: models.StatusBroadcast, TxHash: checkoutHash,
		SessionID: checkoutSessionID, NextAction: "poll_status"}) {
		t.Fatalf("submit answer %#v", sub.value)
	}
	// Checks every 5 s from the broadcast.
	reqs, at := h.verifier.calls()
	if len(reqs) != 5 {
		t.Fatalf("%d checks, want 5", len(reqs))
	}
	wantReq := chain.VerifyRequest{Network: checkoutNetwork, TxHash: checkoutHash, MerchantAddress: checkoutWallet, ExpectedUnits: "32610000"}
	for i := range reqs {
		if reqs[i] != wantReq || !at[i].Equal(checkoutStart.Add(time.Minute+time.Duration(i)*5*time.Second)) {
			t.Errorf("check %d: %+v at %v", i+1, reqs[i], at[i])
		}
	}
	// The status query in the middle: confirming, with the latest check.
	if mid.Status != models.StatusConfirming || mid.TxHash != checkoutHash || mid.Verifying || mid.LastCheck == nil ||
		!mid.LastCheck.Seen || len(mid.History) != 4 || !mid.ExpiresAt.Equal(h.in.ExpiresAt) || mid.SessionID != checkoutSessionID {
		t.Errorf("status at +1m12s: %+v", mid)
	}
	h.checkHistory(
		checkoutAt(models.StatusWalletConnecting, "client", "", 10*time.Second),
		checkoutAt(models.StatusWalletReady, "client", "", 20*time.Second),
		checkoutAt(models.StatusBroadcast, "client", "", time.Minute),
		checkoutAt(models.StatusConfirming, "chain", checkoutNetwork, time.Minute+10*time.Second),
		checkoutAt(models.StatusComplete, "chain", checkoutNetwork, time.Minute+20*time.Second),
	)
	o := h.checkOutcome(models.StatusComplete, "chain", checkoutNetwork, "", time.Minute+20*time.Second)
	if o.ReceivedUnits != "32610000" || o.Payer != checkoutPayer {
		t.Errorf("outcome %+v", o)
	}
	if tr := h.store.history(checkoutSessionID)[2]; tr.TxHash != checkoutHash {
		t.Errorf("broadcast entry without the hash: %+v", tr)
	}
	if n := h.store.count(checkoutClaim); n != 1 {
		t.Errorf("%d claims", n)
	}
	if st := h.finalState(); st.Status != models.StatusComplete || st.Reason != "" || st.Message != "verified" {
		t.Errorf("final state %+v", st)
	}
	// The expiry timer was cancelled: the workflow ended at the verdict.
	if !h.env.Now().Equal(checkoutStart.Add(time.Minute + 20*time.Second)) {
		t.Errorf("ended at %v", h.env.Now())
	}
}

// An overpayment completes at once (the first check is the verdict); the
// session still passes through txn_confirming, and the amount is recorded.
func TestCheckoutOverpaidCompletes(t *testing.T) {
	h := newCheckoutHarness(t, checkoutScript(checkoutComplete(40_000_000)))
	h.submit(2*time.Minute, checkoutHash)
	res := h.result()
	if res.Status != models.StatusComplete || res.TxHash != checkoutHash {
		t.Fatalf("result %+v", res)
	}
	h.checkHistory(
		checkoutAt(models.StatusBroadcast, "client", "", 2*time.Minute),
		checkoutAt(models.StatusConfirming, "chain", checkoutNetwork, 2*time.Minute),
		checkoutAt(models.StatusComplete, "chain", checkoutNetwork, 2*time.Minute),
	)
	if o := h.checkOutcome(models.StatusComplete, "chain", checkoutNetwork, "", 2*time.Minute); o.ReceivedUnits != "40000000" {
		t.Errorf("received %q", o.ReceivedUnits)
	}
}

// The submitted transaction reverted because a copy of the payer's
// authorization was relayed first: the verifier answers that copy's verdict
// with PaidBy, and the outcome and result carry the copy's hash.
func TestCheckoutPaidByRelayedCopy(t *testing.T) {
	const copyHash = "0x" + "c0" + "ffee0000000000000000000000000000000000000000000000000000000000"
	paid := checkoutComplete(checkoutUnits)
	paid.res.Bound, paid.res.PaidBy = true, copyHash
	h := newCheckoutHarness(t, checkoutScript(checkoutPending(true), paid))
	h.submit(time.Minute, checkoutHash)
	res := h.result()
	if res != (CheckoutResult{Status: models.StatusComplete, TxHash: copyHash}) {
		t.Fatalf("result %+v", res)
	}
	if o := h.checkOutcome(models.StatusComplete, "chain", checkoutNetwork, "", time.Minute+5*time.Second); o.PaidBy != copyHash || !o.Bound {
		t.Errorf("outcome %+v", o)
	}
	if st := h.finalState(); st.TxHash != copyHash {
		t.Errorf("final state %+v", st)
	}
}

// Failed verdicts end the session with the chain's reason.
func TestCheckoutFailedVerdicts(t *testing.T) {
	for _, tc := range []struct {
		name     string
		step     checkoutStep
		reason   string
		received string
	}{
		{"short amount", checkoutFailedStep(chain.ReasonInvalidTransfer, 30_000_000, "received 30 USDC, expected 32.61"), chain.ReasonInvalidTransfer, "30000000"},
		{"wrong destination", checkoutFailedStep(chain.ReasonInvalidTransfer, 0, "no USDC transfer to the merchant"), chain.ReasonInvalidTransfer, "0"},
		{"reverted", checkoutFailedStep(chain.ReasonTxReverted, 0, "transaction reverted"), chain.ReasonTxReverted, "0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newCheckoutHarness(t, checkoutScript(checkoutPending(true), tc.step))
			h.submit(time.Minute, checkoutHash)
			res := h.result()
			if res != (CheckoutResult{Status: models.StatusFailed, Reason: tc.reason, TxHash: checkoutHash}) {
				t.Fatalf("result %+v", res)
			}
			h.checkHistory(
				checkoutAt(models.StatusBroadcast, "client", "", time.Minute),
				checkoutAt(models.StatusConfirming, "chain", checkoutNetwork, time.Minute),
				checkoutAt(models.StatusFailed, "chain", checkoutNetwork, time.Minute+5*time.Second),
			)
			o := h.checkOutcome(models.StatusFailed, "chain", checkoutNetwork, tc.reason, time.Minute+5*time.Second)
			if o.Message != tc.step.res.Message || o.ReceivedUnits != tc.received {
				t.Errorf("outcome %+v", o)
			}
			if st := h.finalState(); st.Reason != tc.reason || st.Message != tc.step.res.Message {
				t.Errorf("final state %+v", st)
			}
		})
	}
}

// A failed verdict on a transaction that is not the customer's (Foreign:
// another wallet sent and paid it; anyone who knows the session's id can
// submit one) does not end the session: the hash is given back, the
// session waits for its payment again (its cancel and expiry count again),
// the same hash submitted again is refused, and the customer's payment
// completes it. Sessions without a declared wallet keep the verdict.
func TestCheckoutForeignVerdictReleases(t *testing.T) {
	foreign := checkoutFailedStep(chain.ReasonInvalidTransfer, 1, "merchant received 1 units, expected 32610000")
	foreign.res.Foreign, foreign.res.Payer = true, "0x3333333333333333333333333333333333333333"
	t.Run("the customer pays after", func(t *testing.T) {
		h := newCheckoutHarness(t, func(n int, req chain.VerifyRequest) (chain.VerifyResult, error) {
			if req.TxHash == checkoutHash {
				return foreign.res, nil
			}
			return checkoutComplete(checkoutUnits).res, nil
		})
		h.in.PayerWallet = checkoutPayer
		h.wallet(30*time.Second, models.StatusWalletReady)
		h.submit(time.Minute, checkoutHash)
		again := h.submit(2*time.Minute, checkoutHash)
		reopened := h.query(2*time.Minute + time.Second)
		h.submit(3*time.Minute, checkoutHash2)
		res := h.result()
		if res != (CheckoutResult{Status: models.StatusComplete, TxHash: checkoutHash2}) {
			t.Fatalf("result %+v", res)
		}
		if again.errType() != ErrTypeTxHashReleased || !strings.Contains(again.rejected.Error(), "does not pay this session") {
			t.Errorf("the released hash submitted again: %s", again)
		}
		if reopened.Status != models.StatusWalletReady || reopened.TxHash != "" || reopened.Message != foreign.res.Message {
			t.Errorf("state once released: %+v", reopened)
		}
		h.checkHistory(
			checkoutAt(models.StatusWalletReady, "client", "", 30*time.Second),
			checkoutAt(models.StatusBroadcast, "client", "", time.Minute),
			checkoutAt(models.StatusWalletReady, "chain", checkoutNetwork, time.Minute),
			checkoutAt(models.StatusBroadcast, "client", "", 3*time.Minute),
			checkoutAt(models.StatusConfirming, "chain", checkoutNetwork, 3*time.Minute),
			checkoutAt(models.StatusComplete, "chain", checkoutNetwork, 3*time.Minute),
		)
		h.checkOutcome(models.StatusComplete, "chain", checkoutNetwork, "", 3*time.Minute)
		if len(h.store.released) != 1 || h.store.released[0].TxHash != checkoutHash || h.store.released[0].ReceivedUnits != "1" ||
			h.store.released[0].Payer != foreign.res.Payer {
			t.Errorf("releases %+v", h.store.released)
		}
	})
	t.Run("then it expires", func(t *testing.T) {
		h := newCheckoutHarness(t, checkoutScript(foreign))
		h.in.PayerWallet = checkoutPayer
		h.submit(time.Minute, checkoutHash)
		res := h.result()
		if res != (CheckoutResult{Status: models.StatusExpired}) {
			t.Fatalf("result %+v", res)
		}
		h.checkHistory(
			checkoutAt(models.StatusBroadcast, "client", "", time.Minute),
			checkoutAt(models.StatusCreated, "chain", checkoutNetwork, time.Minute),
			checkoutAt(models.StatusExpired, "server", "", 30*time.Minute),
		)
		h.checkOutcome(models.StatusExpired, "server", "", "", 30*time.Minute)
	})
	t.Run("given back after its expiry: the second it had left is the customer's again", func(t *testing.T) {
		h := newCheckoutHarness(t, checkoutScript(checkoutPending(true), foreign))
		h.in.PayerWallet = checkoutPayer
		h.submit(30*time.Minute-time.Second, checkoutHash)
		res := h.result()
		if res != (CheckoutResult{Status: models.StatusExpired}) {
			t.Fatalf("result %+v", res)
		}
		h.checkHistory(
			checkoutAt(models.StatusBroadcast, "client", "", 30*time.Minute-time.Second),
			checkoutAt(models.StatusConfirming, "chain", checkoutNetwork, 30*time.Minute-time.Second),
			checkoutAt(models.StatusCreated, "chain", checkoutNetwork, 30*time.Minute+4*time.Second),
			checkoutAt(models.StatusExpired, "server", "", 30*time.Minute+5*time.Second),
		)
		if r := h.store.released; len(r) != 1 || !r[0].ExpiresAt.Equal(checkoutStart.Add(30*time.Minute+5*time.Second)) {
			t.Errorf("release %+v", r)
		}
		o := h.checkOutcome(models.StatusExpired, "server", "", "", 30*time.Minute+5*time.Second)
		if !strings.Contains(o.Message, "set aside") || !strings.Contains(o.Message, checkoutHash) {
			t.Errorf("expiry message %q", o.Message)
		}
	})
	t.Run("the checks of every hash held count toward the run's bound", func(t *testing.T) {
		// 200 checks of a stranger's hash, released, then 100 of the next:
		// the run continues as new at 300, carrying the released hash (its
		// history cannot grow past a run's bound however often a stranger
		// submits).
		var firstChecks int
		h := newCheckoutHarness(t, func(n int, req chain.VerifyRequest) (chain.VerifyResult, error) {
			if req.TxHash == checkoutHash {
				firstChecks++
				if firstChecks <= 199 {
					return checkoutPending(true).res, nil
				}
				return foreign.res, nil
			}
			return checkoutPending(true).res, nil
		})
		h.in.PayerWallet, h.in.PollInterval = checkoutPayer, time.Second
		h.in.ExpiresAt = checkoutStart.Add(2 * time.Hour)
		h.submit(time.Minute, checkoutHash)
		h.submit(time.Minute+250*time.Second, checkoutHash2)
		h.run()
		var can *workflow.ContinueAsNewError
		if err := h.env.GetWorkflowError(); !errors.As(err, &can) {
			t.Fatalf("workflow error %v, want continue-as-new", err)
		}
		var next CheckoutInput
		if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &next); err != nil {
			t.Fatal(err)
		}
		if reqs, _ := h.verifier.calls(); len(reqs) != 300 || firstChecks != 200 {
			t.Fatalf("%d checks (%d of the stranger's hash)", len(reqs), firstChecks)
		}
		if c := next.Carry; c == nil || c.TxHash != checkoutHash2 || fmt.Sprint(c.Released) != "["+checkoutHash+"]" {
			t.Fatalf("carry %+v", next.Carry)
		}
	})
	t.Run("or is cancelled", func(t *testing.T) {
		h := newCheckoutHarness(t, checkoutScript(foreign))
		h.in.PayerWallet = checkoutPayer
		h.submit(time.Minute, checkoutHash)
		h.cancel(2*time.Minute, CancelByCustomer)
		if res := h.result(); res.Status != models.StatusCancelled {
			t.Fatalf("result %+v", res)
		}
	})
	t.Run("no declared wallet", func(t *testing.T) {
		h := newCheckoutHarness(t, checkoutScript(foreign))
		h.submit(time.Minute, checkoutHash)
		if res := h.result(); res != (CheckoutResult{Status: models.StatusFailed, Reason: chain.ReasonInvalidTransfer, TxHash: checkoutHash}) {
			t.Fatalf("result %+v", res)
		}
		if len(h.store.released) != 0 {
			t.Errorf("released %+v", h.store.released)
		}
	})
	t.Run("the release is retried after a crash", func(t *testing.T) {
		h := newCheckoutHarness(t, checkoutScript(foreign))
		h.in.PayerWallet = checkoutPayer
		h.store.failAfter[checkoutRelease] = 1
		h.submit(time.Minute, checkoutHash)
		if res := h.result(); res.Status != models.StatusExpired {
			t.Fatalf("result %+v", res)
		}
		if n := h.store.count(checkoutRelease); n != 2 || len(h.store.released) != 1 {
			t.Errorf("%d release calls, %d releases", n, len(h.store.released))
		}
	})
}

// offer is the service's watcher offering hash, a payment it found on
// chain, to the session (source chain).
func (h *checkoutHarness) offer(d time.Duration, hash string) *checkoutUpdate {
	return h.update(d, CheckoutSubmitUpdate, SubmitRequest{TxHash: hash, Source: "chain"})
}

// A hash the chain has not shown (a stranger's made-up one, or the
// customer's own replaced by a speed-up) gives way to a payment the watcher
// finds paying the session in full from its declared wallet: before, it
// held the session for the whole not-found window and the customer's QR
// payment became an unmatched exception.
func TestCheckoutUnseenHashReplaced(t *testing.T) {
	stranger := "0x3333333333333333333333333333333333333333"
	// answers: the held hash is never seen; checkoutHash2 answers second.
	answers := func(second ...checkoutStep) checkoutVerifyAnswer {
		n2 := 0
		return func(n int, req chain.VerifyRequest) (chain.VerifyResult, error) {
			if req.TxHash != checkoutHash2 {
				return checkoutPending(false).res, nil
			}
			n2++
			return second[min(n2, len(second))-1].res, nil
		}
	}
	t.Run("a payment from the declared wallet takes the place of an unseen hash", func(t *testing.T) {
		h := newCheckoutHarness(t, answers(checkoutPending(true), checkoutComplete(checkoutUnits)))
		h.in.PayerWallet = checkoutPayer
		h.wallet(30*time.Second, models.StatusWalletReady)
		h.submit(time.Minute, checkoutHash)
		offered := h.offer(3*time.Minute+2*time.Second, checkoutHash2)
		again := h.submit(3*time.Minute+3*time.Second, checkoutHash)
		res := h.result()
		if res != (CheckoutResult{Status: models.StatusComplete, TxHash: checkoutHash2}) {
			t.Fatalf("result %+v", res)
		}
		if !offered.accepted || offered.err != nil || offered.value.(SubmitResult).TxHash != checkoutHash2 {
			t.Errorf("offer: %s", offered)
		}
		if again.errType() != ErrTypeTxHashReleased {
			t.Errorf("the hash set aside submitted again: %s", again)
		}
		h.checkHistory(
			checkoutAt(models.StatusWalletReady, "client", "", 30*time.Second),
			checkoutAt(models.StatusBroadcast, "client", "", time.Minute),
			checkoutAt(models.StatusWalletReady, "chain", checkoutNetwork, 3*time.Minute+2*time.Second),
			checkoutAt(models.StatusBroadcast, "chain", checkoutNetwork, 3*time.Minute+2*time.Second),
			checkoutAt(models.StatusConfirming, "chain", checkoutNetwork, 3*time.Minute+5*time.Second),
			checkoutAt(models.StatusComplete, "chain", checkoutNetwork, 3*time.Minute+5*time.Second),
		)
		h.checkOutcome(models.StatusComplete, "chain", checkoutNetwork, "", 3*time.Minute+5*time.Second)
		// The two minutes the made-up hash held the session are given back.
		r := h.store.replaced
		if len(r) != 1 || r[0].Held != checkoutHash || r[0].TxHash != checkoutHash2 || len(h.store.released) != 0 ||
			!r[0].ExpiresAt.Equal(h.in.ExpiresAt.Add(2*time.Minute+2*time.Second)) {
			t.Errorf("replacements %+v, releases %+v", r, h.store.released)
		}
		reqs, _ := h.verifier.calls()
		for _, q := range reqs {
			if q.PayerAddress != checkoutPayer {
				t.Errorf("verified without the declared wallet: %+v", q)
			}
		}
	})
	t.Run("the replacement's final verdict still decides", func(t *testing.T) {
		// Mined before the session (seen only at the final verdict): not
		// its payment either; given back, the session waits and expires.
		old := checkoutFailedStep(chain.ReasonInvalidTransfer, checkoutUnits, "mined before the session")
		old.res.Foreign = true
		h := newCheckoutHarness(t, answers(checkoutPending(true), old))
		h.in.PayerWallet = checkoutPayer
		h.submit(time.Minute, checkoutHash)
		h.offer(2*time.Minute+2*time.Second, checkoutHash2)
		if res := h.result(); res != (CheckoutResult{Status: models.StatusExpired}) {
			t.Fatalf("result %+v", res)
		}
		if r := h.store.released; len(r) != 1 || r[0].TxHash != checkoutHash2 || len(h.store.replaced) != 1 {
			t.Errorf("releases %+v, replacements %+v", r, h.store.replaced)
		}
		// The time each hash held the session is given back: 62 s, then 3 s.
		o := h.checkOutcome(models.StatusExpired, "server", "", "", 31*time.Minute+5*time.Second)
		if !strings.Contains(o.Message, checkoutHash) || !strings.Contains(o.Message, checkoutHash2) {
			t.Errorf("expiry message %q", o.Message)
		}
	})
	for _, tc := range []struct {
		name     string
		offered  checkoutStep
		errType  string
		rejected bool // by the validator, before any chain check
		setup    func(h *checkoutHarness)
	}{
		{name: "from another wallet", errType: ErrTypeSessionNotOpen, offered: func() checkoutStep {
			s := checkoutPending(true)
			s.res.Payer = stranger
			return s
		}()},
		{name: "short", errType: ErrTypeSessionNotOpen, offered: func() checkoutStep {
			s := checkoutPending(true)
			s.res.ReceivedUnits = fmt.Sprint(checkoutUnits - 1)
			return s
		}()},
		{name: "not on chain either", errType: ErrTypeSessionNotOpen, offered: checkoutPending(false)},
		{name: "failed", errType: ErrTypeSessionNotOpen, offered: checkoutFailedStep(chain.ReasonTxReverted, 0, "reverted")},
		{name: "sent by a client, not found by the watcher", errType: ErrTypeSessionNotOpen, rejected: true, offered: checkoutComplete(checkoutUnits),
			setup: func(h *checkoutHarness) { h.offerAsClient = true }},
		{name: "no declared wallet", errType: ErrTypeSessionNotOpen, rejected: true, offered: checkoutComplete(checkoutUnits),
			setup: func(h *checkoutHarness) { h.in.PayerWallet = "" }},
	} {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			h := newCheckoutHarness(t, answers(tc.offered))
			h.in.PayerWallet, h.in.PollInterval = checkoutPayer, time.Minute
			if tc.setup != nil {
				tc.setup(h)
			}
			h.submit(time.Minute, checkoutHash)
			var offered *checkoutUpdate
			if h.offerAsClient {
				offered = h.submit(3*time.Minute+2*time.Second, checkoutHash2)
			} else {
				offered = h.offer(3*time.Minute+2*time.Second, checkoutHash2)
			}
			res := h.result()
			if res != (CheckoutResult{Status: models.StatusFailed, Reason: chain.ReasonTxNotFound, TxHash: checkoutHash}) {
				t.Fatalf("result %+v", res)
			}
			if offered.errType() != tc.errType || (offered.rejected != nil) != tc.rejected {
				t.Errorf("offer: %s", offered)
			}
			if len(h.store.released) != 0 {
				t.Errorf("released %+v", h.store.released)
			}
			reqs, _ := h.verifier.calls()
			checked := 0
			for _, q := range reqs {
				if q.TxHash == checkoutHash2 {
					checked++
				}
			}
			if want := map[bool]int{true: 0, false: 1}[tc.rejected]; checked != want {
				t.Errorf("the offered hash checked %d times, want %d", checked, want)
			}
		})
	}
	t.Run("refused when the held hash was mined since the last check", func(t *testing.T) {
		// Unseen at the loop's check, seen when the offer looks again: the
		// session's own to judge, not to set aside unrecorded.
		held := 0
		h := newCheckoutHarness(t, func(n int, req chain.VerifyRequest) (chain.VerifyResult, error) {
			if req.TxHash == checkoutHash {
				if held++; held == 1 {
					return checkoutPending(false).res, nil
				}
				return checkoutComplete(checkoutUnits).res, nil
			}
			return checkoutComplete(checkoutUnits).res, nil
		})
		h.in.PayerWallet = checkoutPayer
		h.submit(time.Minute, checkoutHash)
		offered := h.offer(time.Minute+2*time.Second, checkoutHash2)
		if res := h.result(); res != (CheckoutResult{Status: models.StatusComplete, TxHash: checkoutHash}) {
			t.Fatalf("result %+v", res)
		}
		if offered.rejected != nil || offered.errType() != ErrTypeSessionNotOpen {
			t.Errorf("offer: %s", offered)
		}
		if len(h.store.replaced) != 0 {
			t.Errorf("replaced %+v", h.store.replaced)
		}
		if reqs, _ := h.verifier.calls(); len(reqs) != 3 || reqs[1].TxHash != checkoutHash {
			t.Errorf("checks %+v", reqs)
		}
	})
	t.Run("the replacement is retried after a crash", func(t *testing.T) {
		h := newCheckoutHarness(t, answers(checkoutPending(true), checkoutComplete(checkoutUnits)))
		h.in.PayerWallet = checkoutPayer
		h.store.failAfter[checkoutReplace] = 1
		h.submit(time.Minute, checkoutHash)
		offered := h.offer(3*time.Minute+2*time.Second, checkoutHash2)
		if res := h.result(); res != (CheckoutResult{Status: models.StatusComplete, TxHash: checkoutHash2}) {
			t.Fatalf("result %+v", res)
		}
		if offered.err != nil || h.store.count(checkoutReplace) != 2 || len(h.store.replaced) != 1 {
			t.Errorf("offer %s; %d replace calls, %d replacements", offered, h.store.count(checkoutReplace), len(h.store.replaced))
		}
	})
	t.Run("refused once the chain has shown the held hash", func(t *testing.T) {
		h := newCheckoutHarness(t, func(n int, req chain.VerifyRequest) (chain.VerifyResult, error) {
			if req.TxHash == checkoutHash && n > 2 {
				return checkoutComplete(checkoutUnits).res, nil
			}
			return checkoutPending(true).res, nil
		})
		h.in.PayerWallet = checkoutPayer
		h.submit(time.Minute, checkoutHash)
		offered := h.offer(time.Minute+2*time.Second, checkoutHash2)
		if res := h.result(); res != (CheckoutResult{Status: models.StatusComplete, TxHash: checkoutHash}) {
			t.Fatalf("result %+v", res)
		}
		if offered.rejected == nil || offered.errType() != ErrTypeSessionNotOpen {
			t.Errorf("offer: %s", offered)
		}
	})
}

// A hash never seen fails with TX_NOT_FOUND exactly when the window has
// passed since the broadcast; the session's expiry does not apply any more.
func TestCheckoutTxNotFound(t *testing.T) {
	h := newCheckoutHarness(t, checkoutScript(checkoutPending(false)))
	h.in.PollInterval = time.Minute
	h.submit(time.Minute, checkoutHash)
	res := h.result()
	if res != (CheckoutResult{Status: models.StatusFailed, Reason: chain.ReasonTxNotFound, TxHash: checkoutHash}) {
		t.Fatalf("result %+v", res)
	}
	end := time.Minute + time.Hour
	h.checkHistory(
		checkoutAt(models.StatusBroadcast, "client", "", time.Minute),
		checkoutAt(models.StatusFailed, "chain", checkoutNetwork, end),
	)
	o := h.checkOutcome(models.StatusFailed, "chain", checkoutNetwork, chain.ReasonTxNotFound, end)
	if !strings.Contains(o.Message, "not found") {
		t.Errorf("message %q", o.Message)
	}
	if reqs, _ := h.verifier.calls(); len(reqs) != 61 {
		t.Errorf("%d checks, want 61 (one a minute for an hour)", len(reqs))
	}
	if ft := h.store.finishTimes(); len(ft) != 1 || !ft[0].Equal(checkoutStart.Add(end)) {
		t.Errorf("FinishSession at %v", ft)
	}
}

// Expiry: the timer at ExpiresAt fires and the session is expired at that
// very instant (not up to a minute later), with its one event.
func TestCheckoutExpires(t *testing.T) {
	h := newCheckoutHarness(t, nil)
	h.wallet(5*time.Minute, models.StatusWalletConnecting)
	before := h.query(30*time.Minute - time.Millisecond)
	res := h.result()
	if res != (CheckoutResult{Status: models.StatusExpired}) {
		t.Fatalf("result %+v", res)
	}
	if before.Status != models.StatusWalletConnecting {
		t.Errorf("status just before expiry: %q", before.Status)
	}
	if ft := h.store.finishTimes(); len(ft) != 1 || !ft[0].Equal(h.in.ExpiresAt) {
		t.Fatalf("FinishSession at %v, want exactly %v", ft, h.in.ExpiresAt)
	}
	h.checkHistory(
		checkoutAt(models.StatusWalletConnecting, "client", "", 5*time.Minute),
		checkoutAt(models.StatusExpired, "server", "", 30*time.Minute),
	)
	h.checkOutcome(models.StatusExpired, "server", "", "", 30*time.Minute)
	if reqs, _ := h.verifier.calls(); len(reqs) != 0 {
		t.Errorf("%d chain checks without a hash", len(reqs))
	}
	if !h.env.Now().Equal(h.in.ExpiresAt) {
		t.Errorf("ended at %v", h.env.Now())
	}
}

// A workflow that starts after ExpiresAt (repaired after a crash) expires at once.
func TestCheckoutStartedAfterExpiryExpiresAtOnce(t *testing.T) {
	late := checkoutStart.Add(45 * time.Minute)
	h := newCheckoutHarnessAt(t, late, nil, nil)
	res := h.result()
	if res.Status != models.StatusExpired {
		t.Fatalf("result %+v", res)
	}
	if ft := h.store.finishTimes(); len(ft) != 1 || !ft[0].Equal(late) {
		t.Fatalf("FinishSession at %v, want %v", ft, late)
	}
}

// Cancel before any broadcast: customer (source client) or merchant
// (source server); the reason is always customer_cancelled (SPEC.md).
func TestCheckoutCancelledBeforeBroadcast(t *testing.T) {
	for _, tc := range []struct{ who, source string }{{CancelByCustomer, "client"}, {CancelByMerchant, "server"}} {
		t.Run(tc.who, func(t *testing.T) {
			h := newCheckoutHarness(t, nil)
			h.wallet(time.Minute, models.StatusWalletReady)
			h.cancel(2*time.Minute, tc.who)
			late := h.submit(2*time.Minute+time.Second, checkoutHash)
			res := h.result()
			if res != (CheckoutResult{Status: models.StatusCancelled, Reason: ReasonCustomerCancelled}) {
				t.Fatalf("result %+v", res)
			}
			h.checkHistory(
				checkoutAt(models.StatusWalletReady, "client", "", time.Minute),
				checkoutAt(models.StatusCancelled, tc.source, "", 2*time.Minute),
			)
			h.checkOutcome(models.StatusCancelled, tc.source, "", ReasonCustomerCancelled, 2*time.Minute)
			if late.accepted {
				t.Errorf("submit after the cancel was accepted: %v", late)
			}
			if n := h.store.count(checkoutClaim); n != 0 {
				t.Errorf("%d claims", n)
			}
		})
	}
}

// A cancel (customer, merchant or link deletion) after the broadcast is
// ignored: the session finishes through verification.
func TestCheckoutCancelAfterBroadcastIgnored(t *testing.T) {
	h := newCheckoutHarness(t, checkoutScript(checkoutPending(true), checkoutPending(true), checkoutPending(true),
		checkoutPending(true), checkoutPending(true), checkoutComplete(checkoutUnits)))
	h.submit(time.Minute, checkoutHash)
	h.cancel(time.Minute, CancelByCustomer) // same instant, after the update
	h.cancel(time.Minute+7*time.Second, CancelByCustomer)
	h.cancel(time.Minute+12*time.Second, CancelByMerchant)
	res := h.result()
	if res.Status != models.StatusComplete {
		t.Fatalf("result %+v", res)
	}
	h.checkHistory(
		checkoutAt(models.StatusBroadcast, "client", "", time.Minute),
		checkoutAt(models.StatusConfirming, "chain", checkoutNetwork, time.Minute),
		checkoutAt(models.StatusComplete, "chain", checkoutNetwork, time.Minute+25*time.Second),
	)
	h.checkOutcome(models.StatusComplete, "chain", checkoutNetwork, "", time.Minute+25*time.Second)
}

// A cancel or link deletion that arrives while a submit is being handled
// waits for it: the claim succeeds, so the cancel comes after the broadcast
// and is ignored. When the claim is refused, the cancel applies.
func TestCheckoutCancelDuringSubmitWaitsForIt(t *testing.T) {
	for _, source := range []string{CancelByCustomer, CancelByMerchant, CancelByLinkDeleted} {
		t.Run(source, func(t *testing.T) {
			h := newCheckoutHarness(t, checkoutScript(checkoutComplete(checkoutUnits)))
			h.store.failBefore[checkoutClaim] = 1 // the claim is retried 1 s later
			sub := h.submit(time.Minute, checkoutHash)
			h.cancel(time.Minute+500*time.Millisecond, source)
			during := h.query(time.Minute + 600*time.Millisecond)
			res := h.result()
			if res.Status != models.StatusComplete || sub.err != nil || !sub.doneAt.Equal(checkoutStart.Add(time.Minute+time.Second)) {
				t.Fatalf("result %+v, submit %v at %v", res, sub, sub.doneAt)
			}
			if !during.Verifying || during.Status != models.StatusCreated {
				t.Errorf("status during the submit: %+v", during)
			}
			h.checkOutcome(models.StatusComplete, "chain", checkoutNetwork, "", time.Minute+time.Second)
		})
	}
	t.Run("claim refused", func(t *testing.T) {
		h := newCheckoutHarness(t, nil)
		h.store.claims[checkoutNetwork+"/"+checkoutHash] = "cs_other"
		h.store.failBefore[checkoutClaim] = 1
		sub := h.submit(time.Minute, checkoutHash)
		h.cancel(time.Minute+500*time.Millisecond, CancelByLinkDeleted)
		res := h.result()
		if sub.errType() != activities.ErrTypeTxHashClaimed || res.Status != models.StatusFailed || res.Reason != ReasonLinkDeleted {
			t.Fatalf("result %+v, submit %v", res, sub)
		}
		h.checkOutcome(models.StatusFailed, "server", "", ReasonLinkDeleted, time.Minute+time.Second)
	})
}

// The expiry timer fires while a submit is being handled: the submit
// decides first, and a broadcast session never expires.
func TestCheckoutExpiryDuringSubmitWaitsForIt(t *testing.T) {
	h := newCheckoutHarness(t, checkoutScript(checkoutPending(false), checkoutComplete(checkoutUnits)))
	h.store.failBefore[checkoutClaim] = 2 // retried at +1 s and +3 s
	sub := h.submit(30*time.Minute-2*time.Second, checkoutHash)
	res := h.result()
	if res.Status != models.StatusComplete || sub.err != nil {
		t.Fatalf("result %+v, submit %v", res, sub)
	}
	broadcast := 30*time.Minute + time.Second
	h.checkHistory(
		checkoutAt(models.StatusBroadcast, "client", "", broadcast),
		checkoutAt(models.StatusConfirming, "chain", checkoutNetwork, broadcast+5*time.Second),
		checkoutAt(models.StatusComplete, "chain", checkoutNetwork, broadcast+5*time.Second),
	)
}

// A second submit is refused by the validator, whatever its hash; so is a
// submit while the first is being handled, an empty hash, and a wallet
// report after the broadcast.
func TestCheckoutDoubleSubmitRefused(t *testing.T) {
	h := newCheckoutHarness(t, checkoutScript(checkoutPending(true), checkoutPending(true), checkoutComplete(checkoutUnits)))
	h.store.failBefore[checkoutClaim] = 1
	empty := h.submit(30*time.Second, "")
	first := h.submit(time.Minute, checkoutHash)
	during := h.submit(time.Minute+500*time.Millisecond, checkoutHash2)
	again := h.submit(time.Minute+2*time.Second, checkoutHash)
	other := h.submit(time.Minute+3*time.Second, checkoutHash2)
	wallet := h.wallet(time.Minute+4*time.Second, models.StatusWalletReady)
	res := h.result()
	if res.Status != models.StatusComplete || res.TxHash != checkoutHash || first.err != nil || !first.accepted {
		t.Fatalf("result %+v, first submit %v", res, first)
	}
	for _, tc := range []struct {
		u    *checkoutUpdate
		want string
	}{{empty, ErrTypeBadUpdate}, {during, ErrTypeSubmitInProgress}, {again, ErrTypeSessionNotOpen},
		{other, ErrTypeSessionNotOpen}, {wallet, ErrTypeSessionNotOpen}} {
		if tc.u.accepted || tc.u.rejected == nil || tc.u.errType() != tc.want {
			t.Errorf("%v: want rejected by the validator with %s", tc.u, tc.want)
		}
	}
	if n := h.store.count(checkoutClaim); n != 2 { // one failed try, one claim
		t.Errorf("%d claim calls, want 2", n)
	}
	h.checkHistory(
		checkoutAt(models.StatusBroadcast, "client", "", time.Minute+time.Second),
		checkoutAt(models.StatusConfirming, "chain", checkoutNetwork, time.Minute+time.Second),
		checkoutAt(models.StatusComplete, "chain", checkoutNetwork, time.Minute+11*time.Second),
	)
}

// A hash that backs another session: the update fails with TxHashClaimed,
// the session stays open, takes another hash, or expires.
func TestCheckoutHashClaimedElsewhere(t *testing.T) {
	t.Run("then expires", func(t *testing.T) {
		h := newCheckoutHarness(t, nil)
		h.store.claims[checkoutNetwork+"/"+checkoutHash] = "cs_other"
		h.wallet(30*time.Second, models.StatusWalletReady)
		sub := h.submit(time.Minute, checkoutHash)
		after := h.query(2 * time.Minute)
		res := h.result()
		if !sub.accepted || sub.errType() != activities.ErrTypeTxHashClaimed || !sub.doneAt.Equal(checkoutStart.Add(time.Minute)) {
			t.Fatalf("submit %v (%s) at %v, want TxHashClaimed at once", sub, sub.errType(), sub.doneAt)
		}
		if n := h.store.count(checkoutClaim); n != 1 {
			t.Errorf("the conflict was retried: %d claims", n)
		}
		if after.Status != models.StatusWalletReady || after.TxHash != "" || after.Verifying {
			t.Errorf("status after the refused submit: %+v", after)
		}
		if res != (CheckoutResult{Status: models.StatusExpired}) {
			t.Fatalf("result %+v", res)
		}
		h.checkHistory(
			checkoutAt(models.StatusWalletReady, "client", "", 30*time.Second),
			checkoutAt(models.StatusExpired, "server", "", 30*time.Minute),
		)
		h.checkOutcome(models.StatusExpired, "server", "", "", 30*time.Minute)
		if reqs, _ := h.verifier.calls(); len(reqs) != 0 {
			t.Errorf("%d chain checks", len(reqs))
		}
	})
	t.Run("then takes another hash", func(t *testing.T) {
		h := newCheckoutHarness(t, checkoutScript(checkoutComplete(checkoutUnits)))
		h.store.claims[checkoutNetwork+"/"+checkoutHash] = "cs_other"
		bad := h.submit(time.Minute, checkoutHash)
		good := h.submit(2*time.Minute, checkoutHash2)
		res := h.result()
		if bad.errType() != activities.ErrTypeTxHashClaimed || good.err != nil || !good.accepted {
			t.Fatalf("submits: %v / %v", bad, good)
		}
		if res.Status != models.StatusComplete || res.TxHash != checkoutHash2 {
			t.Fatalf("result %+v", res)
		}
		if reqs, _ := h.verifier.calls(); len(reqs) != 1 || reqs[0].TxHash != checkoutHash2 {
			t.Errorf("checks %+v", reqs)
		}
	})
}

// A submit (or wallet report) after ExpiresAt is refused with
// SessionExpired even before the expired outcome is written.
func TestCheckoutSubmitAfterExpiryRefused(t *testing.T) {
	h := newCheckoutHarness(t, nil)
	h.store.failBefore[checkoutFinish] = 1 // the outcome is written 1 s after ExpiresAt
	sub := h.submit(30*time.Minute+500*time.Millisecond, checkoutHash)
	wallet := h.wallet(30*time.Minute+600*time.Millisecond, models.StatusWalletReady)
	res := h.result()
	if res.Status != models.StatusExpired {
		t.Fatalf("result %+v", res)
	}
	for _, u := range []*checkoutUpdate{sub, wallet} {
		if u.accepted || u.errType() != ErrTypeSessionExpired {
			t.Errorf("%v: want rejected with %s", u, ErrTypeSessionExpired)
		}
	}
	if n := h.store.count(checkoutClaim); n != 0 {
		t.Errorf("%d claims", n)
	}
	// The outcome keeps the expiry instant even though it was stored later.
	h.checkOutcome(models.StatusExpired, "server", "", "", 30*time.Minute)
}

// Deleting the link before a broadcast fails the session with LINK_DELETED.
func TestCheckoutLinkDeletedBeforeBroadcast(t *testing.T) {
	h := newCheckoutHarness(t, nil)
	h.wallet(time.Minute, models.StatusWalletConnecting)
	h.cancel(5*time.Minute, CancelByLinkDeleted)
	res := h.result()
	if res != (CheckoutResult{Status: models.StatusFailed, Reason: ReasonLinkDeleted}) {
		t.Fatalf("result %+v", res)
	}
	h.checkHistory(
		checkoutAt(models.StatusWalletConnecting, "client", "", time.Minute),
		checkoutAt(models.StatusFailed, "server", "", 5*time.Minute),
	)
	h.checkOutcome(models.StatusFailed, "server", "", ReasonLinkDeleted, 5*time.Minute)
}

// Deleting the link after the broadcast changes nothing: the customer's
// money has moved, so the session finishes through verification.
func TestCheckoutLinkDeletedAfterBroadcastIgnored(t *testing.T) {
	for _, tc := range []struct {
		name    string
		verdict checkoutStep
		status  string
		reason  string
	}{
		{"completes", checkoutComplete(checkoutUnits), models.StatusComplete, ""},
		{"fails on chain", checkoutFailedStep(chain.ReasonTxReverted, 0, "reverted"), models.StatusFailed, chain.ReasonTxReverted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newCheckoutHarness(t, checkoutScript(checkoutPending(false), checkoutPending(true), checkoutPending(true), tc.verdict))
			h.submit(time.Minute, checkoutHash)
			h.cancel(time.Minute+2*time.Second, CancelByLinkDeleted)
			res := h.result()
			if res.Status != tc.status || res.Reason != tc.reason {
				t.Fatalf("result %+v", res)
			}
			h.checkHistory(
				checkoutAt(models.StatusBroadcast, "client", "", time.Minute),
				checkoutAt(models.StatusConfirming, "chain", checkoutNetwork, time.Minute+5*time.Second),
				checkoutAt(tc.status, "chain", checkoutNetwork, time.Minute+15*time.Second),
			)
		})
	}
}

// Wallet reports are recorded with source client; a repeat is a no-op, a
// status that is not a wallet status is refused.
func TestCheckoutWalletUpdates(t *testing.T) {
	h := newCheckoutHarness(t, nil)
	c1 := h.wallet(10*time.Second, models.StatusWalletConnecting)
	c2 := h.wallet(15*time.Second, models.StatusWalletConnecting)
	bad := h.wallet(20*time.Second, models.StatusBroadcast)
	ready := h.wallet(25*time.Second, models.StatusWalletReady)
	back := h.wallet(30*time.Second, models.StatusWalletConnecting)
	h.cancel(time.Minute, CancelByCustomer)
	h.result()
	for _, u := range []*checkoutUpdate{c1, c2, ready, back} {
		if !u.accepted || u.err != nil {
			t.Fatalf("%v", u)
		}
	}
	if got, ok := ready.value.(CheckoutState); !ok || got.Status != models.StatusWalletReady || len(got.History) != 2 {
		t.Errorf("wallet_ready answer %#v", ready.value)
	}
	if bad.accepted || bad.errType() != ErrTypeBadUpdate {
		t.Errorf("%v: want %s", bad, ErrTypeBadUpdate)
	}
	h.checkHistory(
		checkoutAt(models.StatusWalletConnecting, "client", "", 10*time.Second),
		checkoutAt(models.StatusWalletReady, "client", "", 25*time.Second),
		checkoutAt(models.StatusWalletConnecting, "client", "", 30*time.Second),
		checkoutAt(models.StatusCancelled, "client", "", time.Minute),
	)
}

// Activities that fail after their write committed are retried, and the
// retries write nothing twice: one entry per id, one outcome, each event
// once, each delivery dispatched once.
func TestCheckoutActivityRetriesWriteOnce(t *testing.T) {
	h := newCheckoutHarness(t, checkoutScript(checkoutPending(true), checkoutComplete(checkoutUnits)))
	h.store.failAfter[checkoutRecord] = 2
	h.store.failAfter[checkoutFinish] = 2
	h.store.failAfter[checkoutClaim] = 1
	h.wallet(10*time.Second, models.StatusWalletReady)
	sub := h.submit(time.Minute, checkoutHash)
	res := h.result()
	if res.Status != models.StatusComplete || sub.err != nil {
		t.Fatalf("result %+v, submit %v", res, sub)
	}
	// wallet_ready written at +10s, retried at +11s and +13s.
	// The claim at +1m is retried at +1m1s; the broadcast is written then.
	h.checkHistory(
		checkoutAt(models.StatusWalletReady, "client", "", 10*time.Second),
		checkoutAt(models.StatusBroadcast, "client", "", time.Minute+time.Second),
		checkoutAt(models.StatusConfirming, "chain", checkoutNetwork, time.Minute+time.Second),
		checkoutAt(models.StatusComplete, "chain", checkoutNetwork, time.Minute+6*time.Second),
	)
	h.checkOutcome(models.StatusComplete, "chain", checkoutNetwork, "", time.Minute+6*time.Second)
	if n := h.store.count(checkoutRecord); n != 3+2 {
		t.Errorf("%d RecordSessionTransition calls, want 5 (3 entries, 2 retries)", n)
	}
	if n := h.store.count(checkoutFinish); n != 3 {
		t.Errorf("%d FinishSession calls, want 3", n)
	}
	if h.dispatcher.calls != 1 {
		t.Errorf("%d dispatches", h.dispatcher.calls)
	}
}

// RPC errors are never a verdict: transient ones are retried by the
// activity, a permanent one (misconfiguration) waits for the next check,
// and neither fails the session, not even past the not-found window.
func TestCheckoutRPCErrorsAreNoVerdict(t *testing.T) {
	h := newCheckoutHarness(t, func(n int, _ chain.VerifyRequest) (chain.VerifyResult, error) {
		switch {
		case n <= 3:
			s := checkoutRPCError()
			return s.res, s.err
		case n == 4:
			return chain.VerifyResult{}, fmt.Errorf("%w: endpoint serves chain 1, want 84532", chain.ErrChainIDMismatch)
		case n == 5:
			return checkoutPending(true).res, nil
		}
		return checkoutComplete(checkoutUnits).res, nil
	})
	h.submit(time.Minute, checkoutHash)
	res := h.result()
	if res.Status != models.StatusComplete {
		t.Fatalf("result %+v", res)
	}
	_, at := h.verifier.calls()
	// 3 transient failures retried after 1 s, 2 s, 4 s; the permanent fault
	// at +1m7s ends the activity, the next check comes a poll later.
	want := []time.Duration{0, time.Second, 3 * time.Second, 7 * time.Second, 12 * time.Second, 17 * time.Second}
	if len(at) != len(want) {
		t.Fatalf("%d checks, want %d", len(at), len(want))
	}
	for i := range at {
		if at[i].Sub(checkoutStart.Add(time.Minute)) != want[i] {
			t.Errorf("check %d at +%v after the broadcast, want +%v", i+1, at[i].Sub(checkoutStart.Add(time.Minute)), want[i])
		}
	}
	h.checkOutcome(models.StatusComplete, "chain", checkoutNetwork, "", time.Minute+17*time.Second)

	// An RPC outage longer than the not-found window gives no TX_NOT_FOUND.
	h2 := newCheckoutHarness(t, nil)
	outageEnd := checkoutStart.Add(time.Minute + 20*time.Minute)
	h2.in.NotFoundWindow = 10 * time.Minute
	h2.verifier.answer = func(_ int, _ chain.VerifyRequest) (chain.VerifyResult, error) {
		if h2.env.Now().Before(outageEnd) {
			s := checkoutRPCError()
			return s.res, s.err
		}
		return checkoutComplete(checkoutUnits).res, nil
	}
	h2.submit(time.Minute, checkoutHash)
	res = h2.result()
	if res.Status != models.StatusComplete {
		t.Fatalf("after an outage: result %+v", res)
	}
	if ft := h2.store.finishTimes(); len(ft) != 1 || ft[0].Before(outageEnd) {
		t.Errorf("finished at %v, before the outage ended", ft)
	}
}

// After 300 checks a run continues as new, carrying status, hash, broadcast
// time and history; the next run goes on from there.
func TestCheckoutContinuesAsNew(t *testing.T) {
	for _, tc := range []struct {
		name   string
		seen   bool
		then   checkoutStep
		status string
		reason string
	}{
		{"seen then complete", true, checkoutComplete(checkoutUnits), models.StatusComplete, ""},
		// The not-found window counts from the first run's broadcast.
		{"never seen", false, checkoutPending(false), models.StatusFailed, chain.ReasonTxNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newCheckoutHarness(t, checkoutScript(checkoutPending(tc.seen)))
			h.in.PollInterval = 10 * time.Second
			h.submit(time.Minute, checkoutHash)
			h.run()
			var can *workflow.ContinueAsNewError
			if err := h.env.GetWorkflowError(); !errors.As(err, &can) {
				t.Fatalf("workflow error %v, want continue-as-new", err)
			}
			if can.WorkflowType == nil || can.WorkflowType.Name != "CheckoutSessionWorkflow" {
				t.Errorf("continues as %+v", can.WorkflowType)
			}
			var next CheckoutInput
			if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &next); err != nil {
				t.Fatal(err)
			}
			reqs, _ := h.verifier.calls()
			broadcast := checkoutStart.Add(time.Minute)
			if len(reqs) != 300 || !h.env.Now().Equal(broadcast.Add(300*10*time.Second)) {
				t.Fatalf("%d checks, continued at %v", len(reqs), h.env.Now())
			}
			wantStatus := models.StatusBroadcast
			if tc.seen {
				wantStatus = models.StatusConfirming
			}
			c := next.Carry
			if c == nil || c.Status != wantStatus || c.TxHash != checkoutHash || !c.BroadcastAt.Equal(broadcast) {
				t.Fatalf("carry %+v", c)
			}
			if got := checkoutEntries(c.History); len(got) != 1+checkoutBtoi(tc.seen) || got[0] != checkoutAt(models.StatusBroadcast, "client", "", time.Minute) {
				t.Fatalf("carried history %v", got)
			}
			rest := next
			rest.Carry = nil
			want := h.in
			if rest != want {
				t.Errorf("continued input %+v, want %+v", rest, want)
			}

			// The next run, on the same database.
			h2 := newCheckoutHarnessAt(t, h.env.Now(), h.store, checkoutScript(checkoutPending(tc.seen), checkoutPending(tc.seen), tc.then))
			h2.in = next
			resubmit := h2.submit(time.Second, checkoutHash2)
			h2.cancel(2*time.Second, CancelByCustomer)
			res := h2.result()
			if res.Status != tc.status || res.Reason != tc.reason || res.TxHash != checkoutHash {
				t.Fatalf("second run: result %+v", res)
			}
			if resubmit.accepted || resubmit.errType() != ErrTypeSessionNotOpen {
				t.Errorf("submit in the continued run: %v", resubmit)
			}
			st := h2.finalState()
			if len(st.History) != len(c.History)+1 || st.History[0].ID != c.History[0].ID {
				t.Errorf("history after the second run: %v", checkoutEntries(st.History))
			}
			end := 50*time.Minute + time.Minute + 20*time.Second // first run: 300 checks x 10 s, then 3 more
			if !tc.seen {
				end = time.Hour + time.Minute
			}
			h2.checkOutcome(tc.status, "chain", checkoutNetwork, tc.reason, end)
			if n := h.store.count(checkoutClaim); n != 1 {
				t.Errorf("%d claims", n)
			}
		})
	}
}

// checkoutBtoi is 1 for true.
func checkoutBtoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// The status query answers the history in time order, as a copy.
func TestCheckoutStatusQueryHistory(t *testing.T) {
	h := newCheckoutHarness(t, checkoutScript(checkoutPending(false), checkoutPending(true), checkoutComplete(checkoutUnits)))
	h.wallet(time.Second, models.StatusWalletConnecting)
	h.wallet(2*time.Second, models.StatusWalletReady)
	h.submit(3*time.Second, checkoutHash)
	q0 := h.query(time.Millisecond)
	q1 := h.query(1500 * time.Millisecond)
	q2 := h.query(9 * time.Second)
	h.result()
	if q0.Status != models.StatusCreated || len(q0.History) != 0 || q0.SessionID != checkoutSessionID {
		t.Errorf("at start: %+v", q0)
	}
	if q1.Status != models.StatusWalletConnecting || len(q1.History) != 1 {
		t.Errorf("at +1.5s: %+v", q1)
	}
	if got := checkoutEntries(q2.History); fmt.Sprint(got) != fmt.Sprint([]checkoutEntry{
		checkoutAt(models.StatusWalletConnecting, "client", "", time.Second),
		checkoutAt(models.StatusWalletReady, "client", "", 2*time.Second),
		checkoutAt(models.StatusBroadcast, "client", "", 3*time.Second),
		checkoutAt(models.StatusConfirming, "chain", checkoutNetwork, 8*time.Second),
	}) || q2.Status != models.StatusConfirming || q2.LastCheck == nil || q2.LastCheck.Verdict != chain.VerdictPending {
		t.Errorf("at +9s: %+v", q2)
	}
	st := h.finalState()
	ids := make([]string, len(st.History))
	for i, e := range st.History {
		ids[i] = e.ID
	}
	if !sort.StringsAreSorted(ids) {
		t.Errorf("entry ids (UUIDv7) not in time order: %v", ids)
	}
}

// --- suspected races between a wallet report and the session's end ---

// A wallet report whose write is retried while the customer cancels must
// not move the finished session back to a wallet status.
func TestCheckoutWalletReportDuringCancelKeepsOutcome(t *testing.T) {
	h := newCheckoutHarness(t, nil)
	h.store.failBefore[checkoutRecord] = 1 // the wallet_ready write is retried 1 s later
	w := h.wallet(time.Minute, models.StatusWalletReady)
	h.cancel(time.Minute+500*time.Millisecond, CancelByCustomer)
	res := h.result()
	if res.Status != models.StatusCancelled {
		t.Fatalf("result %+v", res)
	}
	if !w.accepted {
		t.Fatalf("wallet: %v", w)
	}
	st := h.finalState()
	if st.Status != models.StatusCancelled {
		t.Errorf("final status %q after the cancel, want cancelled (history %v)", st.Status, checkoutEntries(st.History))
	}
	if n := len(h.upserts); n == 0 || h.upserts[n-1] != models.StatusCancelled {
		t.Errorf("CheckoutStatus upserts %v end with a non-terminal status", h.upserts)
	}
}

// A wallet report whose write is retried while a submit broadcasts must not
// move the session back from txn_broadcast (the chain's txn_confirming move
// would then be skipped, and the store moved backwards).
func TestCheckoutWalletReportDuringSubmitKeepsBroadcast(t *testing.T) {
	h := newCheckoutHarness(t, checkoutScript(checkoutPending(false), checkoutPending(true), checkoutComplete(checkoutUnits)))
	h.store.failBefore[checkoutRecord] = 1 // the wallet_ready write is retried 1 s later
	h.wallet(time.Minute, models.StatusWalletReady)
	h.submit(time.Minute+500*time.Millisecond, checkoutHash)
	res := h.result()
	if res.Status != models.StatusComplete {
		t.Fatalf("result %+v", res)
	}
	st := h.finalState()
	var statuses []string
	for _, e := range st.History {
		statuses = append(statuses, e.Status)
	}
	if !strings.Contains(strings.Join(statuses, ","), models.StatusBroadcast+","+models.StatusConfirming) {
		t.Errorf("history %v: txn_confirming does not follow txn_broadcast", statuses)
	}
}

// A submit that arrives while a cancel's outcome is being written must be
// refused: otherwise the customer's transfer is broadcast on a session that
// then ends cancelled (SPEC.md: a cancel after broadcast is rejected, and a
// broadcast session finishes through verification).
func TestCheckoutSubmitDuringCancelOutcomeRefused(t *testing.T) {
	h := newCheckoutHarness(t, checkoutScript(checkoutComplete(checkoutUnits)))
	h.store.failBefore[checkoutFinish] = 1 // the cancelled outcome is written 1 s later
	h.cancel(time.Minute, CancelByCustomer)
	sub := h.submit(time.Minute+500*time.Millisecond, checkoutHash)
	res := h.result()
	if sub.accepted {
		t.Errorf("submit during the cancel accepted: %v; result %+v, history %v", sub, res,
			checkoutEntries(h.finalState().History))
	}
	if res.Status != models.StatusCancelled {
		t.Fatalf("result %+v", res)
	}
	if n := h.store.count(checkoutClaim); n != 0 {
		t.Errorf("hash claimed by a cancelled session (%d claims)", n)
	}
}

// A session with a payment reference asks the chain about the transfer
// bound to it, and a transfer that carries the reference completes it
// (the outcome says so, and carries the references the store checks).
func TestCheckoutBoundByReference(t *testing.T) {
	const ref = "0x00000000000000000000000000000000000000000000000000000000000000aa"
	bound := checkoutComplete(checkoutUnits)
	bound.res.Bound, bound.res.Refs = true, []string{"0xbb"}
	h := newCheckoutHarness(t, checkoutScript(bound))
	h.in.PaymentReference = ref
	h.update(time.Minute, CheckoutSubmitUpdate, SubmitRequest{TxHash: checkoutHash, Source: "chain"})
	if res := h.result(); res.Status != models.StatusComplete {
		t.Fatalf("result %+v", res)
	}
	reqs, _ := h.verifier.calls()
	if len(reqs) == 0 || reqs[0].Reference != ref {
		t.Fatalf("verify requests %+v do not carry the reference", reqs)
	}
	// Found on chain without a submit: the broadcast entry's source is the chain.
	h.checkHistory(
		checkoutAt(models.StatusBroadcast, "chain", checkoutNetwork, time.Minute),
		checkoutAt(models.StatusConfirming, "chain", checkoutNetwork, time.Minute),
		checkoutAt(models.StatusComplete, "chain", checkoutNetwork, time.Minute),
	)
	o := h.checkOutcome(models.StatusComplete, "chain", checkoutNetwork, "", time.Minute)
	if !o.Bound || len(o.Refs) != 1 {
		t.Errorf("outcome %+v", o)
	}
}

// A transfer without proof that another session claims too is decided by
// the store: the session fails TX_CONTESTED, and the workflow's result,
// state and history say what the store stored.
func TestCheckoutContestedTransferFails(t *testing.T) {
	h := newCheckoutHarness(t, checkoutScript(checkoutComplete(checkoutUnits)))
	h.store.contested[checkoutSessionID] = true
	h.submit(time.Minute, checkoutHash)
	res := h.result()
	if res.Status != models.StatusFailed || res.Reason != models.ReasonTxContested {
		t.Fatalf("result %+v", res)
	}
	if st := h.finalState(); st.Status != models.StatusFailed || st.Reason != models.ReasonTxContested {
		t.Errorf("final state %+v", st)
	}
	if got := h.upserts[len(h.upserts)-1]; got != models.StatusFailed {
		t.Errorf("CheckoutStatus upserted last: %s", got)
	}
}
