package workflows

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/paygate/paygate/activities"
	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/billing"
	"github.com/paygate/paygate/models"
)

// subStart is the test clock's start: a January 31, for month-end dates.
var subStart = time.Date(2027, 1, 31, 9, 0, 0, 0, time.UTC)

const subID = "0192f3a4-0000-7000-8000-00000000beef"

// --- fakes ---

// subRecorded is one event as the fake store emitted it.
type subRecorded struct {
	Type   string
	At     time.Time
	Seq    int64
	Record activities.SubscriptionRecord
	Extra  map[string]any
}

// subFakeStore is an in-memory activities.SubscriptionStore that keeps the
// store's promises: changes apply in Seq order without gaps, a repeated Seq
// must carry the same change and emits nothing again. Broken promises are
// noted in violations. failAfter makes the next n calls fail after their
// write (a crash between commit and ack).
type subFakeStore struct {
	mu         sync.Mutex
	records    map[int64]string // seq -> JSON of the record
	last       activities.SubscriptionRecord
	events     []subRecorded
	calls      int
	failAfter  int
	violations []string
}

func newSubFakeStore() *subFakeStore { return &subFakeStore{records: map[int64]string{}} }

func (s *subFakeStore) RecordSubscription(_ context.Context, r activities.SubscriptionRecord) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	raw, _ := json.Marshal(r)
	ids := []string{}
	for i := range r.Events {
		ids = append(ids, fmt.Sprintf("dlv:%d:%d", r.Seq, i))
	}
	if old, ok := s.records[r.Seq]; ok {
		if old != string(raw) {
			s.violations = append(s.violations, fmt.Sprintf("seq %d written twice with different content:\n%s\n%s", r.Seq, old, raw))
		}
		return ids, nil
	}
	if r.Seq != s.last.Seq+1 {
		s.violations = append(s.violations, fmt.Sprintf("seq %d after %d", r.Seq, s.last.Seq))
	}
	if s.last.Status == models.SubCanceled {
		s.violations = append(s.violations, fmt.Sprintf("seq %d moves a canceled subscription to %s", r.Seq, r.Status))
	}
	s.records[r.Seq] = string(raw)
	s.last = r
	for _, ev := range r.Events {
		s.events = append(s.events, subRecorded{Type: ev.Type, At: r.At, Seq: r.Seq, Record: r, Extra: ev.Extra})
	}
	if s.failAfter > 0 {
		s.failAfter--
		return nil, errCheckoutCrash
	}
	return ids, nil
}

func (s *subFakeStore) emitted() []subRecorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]subRecorded(nil), s.events...)
}

func (s *subFakeStore) types() []string {
	var out []string
	for _, e := range s.emitted() {
		out = append(out, e.Type)
	}
	return out
}

func (s *subFakeStore) ofType(typ string) []subRecorded {
	var out []subRecorded
	for _, e := range s.emitted() {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

func (s *subFakeStore) latest() activities.SubscriptionRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// subFakeExceptions is the store's side of the settle update: it records an
// exception once (asked again for the same invoice it answers the first;
// for another, it refuses), refuses the ids in refuse (closed meanwhile),
// and keeps the requests.
type subFakeExceptions struct {
	mu       sync.Mutex
	refuse   map[string]bool
	resolved map[string]activities.InvoiceExceptionRequest
	requests []activities.InvoiceExceptionRequest
}

func newSubFakeExceptions() *subFakeExceptions {
	return &subFakeExceptions{refuse: map[string]bool{}, resolved: map[string]activities.InvoiceExceptionRequest{}}
}

func (f *subFakeExceptions) ResolveExceptionForInvoice(_ context.Context, r activities.InvoiceExceptionRequest) (activities.InvoiceExceptionPayment, []string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, r)
	paid := activities.InvoiceExceptionPayment{ExceptionID: r.ExceptionID, TransactionID: "txn-" + r.ExceptionID, TxHash: "0xfeed" + r.ExceptionID,
		Amount: "3.90", Network: checkoutNetwork}
	if prev, ok := f.resolved[r.ExceptionID]; ok {
		if prev.SubscriptionID != r.SubscriptionID || prev.Invoice != r.Invoice {
			return activities.InvoiceExceptionPayment{}, nil, apperr.Conflict("the payment exception is already resolved")
		}
		return paid, nil, nil
	}
	if f.refuse[r.ExceptionID] {
		return activities.InvoiceExceptionPayment{}, nil, apperr.Conflict("the payment exception was closed meanwhile")
	}
	f.resolved[r.ExceptionID] = r
	return paid, []string{"dlv:" + r.ExceptionID}, nil
}

// subFakeSession is one invoice session of the fake checkout side.
type subFakeSession struct {
	ID       string
	Req      activities.InvoiceSessionRequest
	OpenedAt time.Time
	Status   string
	Reason   string // a failure's code, sent with its notice
	Opens    int    // OpenInvoiceSession calls for it (retries find it)
}

// subFakeSessions is the checkout side: sessions by id, their status as the
// checkout workflow would keep it (expired at their expiry unless paid).
type subFakeSessions struct {
	mu       sync.Mutex
	now      func() time.Time
	byID     map[string]*subFakeSession
	order    []string
	voided   []string
	statuses int // InvoiceSessionStatus calls
	// beforeVoid, when set, runs (locked) as a void begins: a customer
	// acting between the workflow's look at the session and its void.
	beforeVoid func(s *subFakeSession)
	// refuse, when set, answers an error in place of opening a session
	// (the subscription cannot be billed as it stands).
	refuse  func() error
	refused int
}

func newSubFakeSessions() *subFakeSessions {
	return &subFakeSessions{byID: map[string]*subFakeSession{}}
}

func subOpen(status string) bool {
	return status == models.StatusCreated || status == models.StatusWalletConnecting || status == models.StatusWalletReady
}

// statusLocked is the session's status, expired once past its expiry
// without a broadcast (what the checkout workflow decides).
func (f *subFakeSessions) statusLocked(s *subFakeSession) string {
	if subOpen(s.Status) && !f.now().Before(s.Req.ExpiresAt) {
		s.Status = models.StatusExpired
	}
	return s.Status
}

func (f *subFakeSessions) OpenInvoiceSession(_ context.Context, req activities.InvoiceSessionRequest) (activities.InvoiceSession, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refuse != nil {
		if err := f.refuse(); err != nil {
			f.refused++
			return activities.InvoiceSession{}, err
		}
	}
	s, ok := f.byID[req.SessionID]
	if !ok {
		s = &subFakeSession{ID: req.SessionID, Req: req, OpenedAt: f.now(), Status: models.StatusCreated}
		f.byID[req.SessionID] = s
		f.order = append(f.order, req.SessionID)
	}
	s.Opens++
	return activities.InvoiceSession{SessionID: s.ID, Status: s.Status, ExpiresAt: req.ExpiresAt}, nil
}

func (f *subFakeSessions) InvoiceSessionStatus(_ context.Context, id string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.statuses++
	s, ok := f.byID[id]
	if !ok {
		return "", apperr.New(apperr.ErrNotFound, "no session "+id)
	}
	return f.statusLocked(s), nil
}

func (f *subFakeSessions) VoidInvoiceSession(_ context.Context, id string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.byID[id]
	if !ok {
		return "", apperr.New(apperr.ErrNotFound, "no session "+id)
	}
	if f.beforeVoid != nil {
		f.beforeVoid(s)
	}
	switch st := f.statusLocked(s); {
	case st == models.StatusBroadcast || st == models.StatusConfirming:
		return st, apperr.Conflict("the transaction was already broadcast")
	case subOpen(st):
		s.Status = models.StatusCancelled
		f.voided = append(f.voided, id)
	}
	return s.Status, nil
}

func (f *subFakeSessions) get(id string) *subFakeSession {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.byID[id]
}

func (f *subFakeSessions) all() []*subFakeSession {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*subFakeSession
	for _, id := range f.order {
		out = append(out, f.byID[id])
	}
	return out
}

// subPayment is what the customer does with a new session: pay after
// `after` (nothing when pay is false); a broadcast transfer may take
// inFlight to be confirmed.
type subPayment struct {
	pay      bool
	after    time.Duration
	inFlight time.Duration
	// bounce: the transfer in flight fails (reverted, too short).
	bounce bool
}

func payAfter(d time.Duration) subPayment { return subPayment{pay: true, after: d} }

// --- harness ---

// subScheduled is something to do at a time on the test clock, kept across
// runs: a run that continues as new before its time hands it to the next.
type subScheduled struct {
	at    time.Time
	fn    func()
	fired bool
}

// subUpdate is what one action update's callbacks reported.
type subUpdate struct {
	action   string
	accepted bool
	rejected error
	err      error
	state    SubscriptionState
	done     bool
	at       time.Time
}

func (u *subUpdate) errType() string {
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

// subHarness runs a subscription's workflow run after run (continue-as-new
// after every paid period) on one test clock, with one fake store and one
// fake checkout side.
type subHarness struct {
	t          *testing.T
	store      *subFakeStore
	sessions   *subFakeSessions
	exceptions *subFakeExceptions
	st         SubscriptionState // the next run's input
	now        time.Time         // the next run's start
	env        *testsuite.TestWorkflowEnvironment
	// plan decides what the customer does with each new session.
	plan func(s *subFakeSession) subPayment
	// dropSignals loses every session signal (the workflow must look).
	dropSignals bool
	scheduled   []*subScheduled
	carried     []SubscriptionState // the state of each continue-as-new
	result      *SubscriptionResult
	upserts     []string
	updates     int
	// setup, when set, prepares each run's environment (mocks).
	setup func(env *testsuite.TestWorkflowEnvironment)
}

// newSubHarness starts a subscription at subStart: a trial of trialDays
// (none: the first invoice is due at once), monthly, default policy.
func newSubHarness(t *testing.T, start time.Time, trialDays int, interval billing.Interval) *subHarness {
	h := &subHarness{t: t, store: newSubFakeStore(), sessions: newSubFakeSessions(), exceptions: newSubFakeExceptions(), now: start,
		plan: func(*subFakeSession) subPayment { return payAfter(2 * time.Hour) }}
	h.sessions.now = func() time.Time {
		if h.env != nil {
			return h.env.Now()
		}
		return h.now
	}
	h.st = SubscriptionState{SubscriptionID: subID, MerchantID: "mer_1", Mode: "test", CustomerID: "cus_1", Network: checkoutNetwork,
		BillingInterval: string(interval), IntervalCount: 1, Policy: DefaultSubscriptionPolicy(), Anchor: start,
		CurrentPeriodStart: start}
	if trialDays > 0 {
		h.st.Status = models.SubTrialing
		h.st.TrialEnd = start.Add(time.Duration(trialDays) * 24 * time.Hour)
		h.st.Anchor, h.st.CurrentPeriodEnd = h.st.TrialEnd, h.st.TrialEnd
	} else {
		h.st.Status = models.SubRenewalPending
		h.st.CurrentPeriodEnd = billing.PeriodEnd(start, interval, 1, 1)
	}
	return h
}

// at does fn at time t of the test clock (in whichever run is then running).
func (h *subHarness) at(t time.Time, fn func()) {
	s := &subScheduled{at: t, fn: fn}
	h.scheduled = append(h.scheduled, s)
	if h.env != nil {
		h.register(s)
	}
}

func (h *subHarness) register(s *subScheduled) {
	env := h.env
	d := s.at.Sub(env.Now())
	if d < 0 {
		d = 0
	}
	env.RegisterDelayedCallback(func() {
		if !s.fired && h.env == env {
			s.fired = true
			s.fn()
		}
	}, d)
}

// signal tells the workflow a session ended (unless signals are lost).
func (h *subHarness) signal(s *subFakeSession) {
	if h.dropSignals {
		return
	}
	h.env.SignalWorkflow(SubscriptionSessionSignal, activities.SessionNotice{SessionID: s.ID, Status: s.Status, Reason: s.Reason})
}

// opened plays the customer and the checkout workflow for a new session.
func (h *subHarness) opened(s *subFakeSession) {
	p := h.plan(s)
	if p.pay {
		h.at(s.OpenedAt.Add(p.after), func() {
			h.sessions.mu.Lock()
			st := h.sessions.statusLocked(s)
			if !subOpen(st) {
				h.sessions.mu.Unlock()
				return
			}
			if p.inFlight > 0 {
				s.Status = models.StatusBroadcast
				h.sessions.mu.Unlock()
				h.at(h.env.Now().Add(p.inFlight), func() {
					h.sessions.mu.Lock()
					s.Status = models.StatusComplete
					if p.bounce {
						s.Status = models.StatusFailed
					}
					h.sessions.mu.Unlock()
					h.signal(s)
				})
				return
			}
			s.Status = models.StatusComplete
			h.sessions.mu.Unlock()
			h.signal(s)
		})
	}
	h.at(s.Req.ExpiresAt, func() {
		h.sessions.mu.Lock()
		st := s.Status
		expired := subOpen(st)
		if expired {
			s.Status = models.StatusExpired
		}
		h.sessions.mu.Unlock()
		if expired {
			h.signal(s)
		}
	})
}

// cancelThenPay plays a customer who cancels the first n sessions opened
// an hour after each opens, and pays the next two hours after it opens.
func (h *subHarness) cancelThenPay(n int) {
	opened := 0
	h.plan = func(s *subFakeSession) subPayment {
		opened++
		if opened > n {
			return payAfter(2 * time.Hour)
		}
		h.cancelAfter(s, time.Hour)
		return subPayment{}
	}
}

// cancelAfter has the customer cancel session s d after it opened (the
// hosted page's cancel: its status, then the workflow's notice).
func (h *subHarness) cancelAfter(s *subFakeSession, d time.Duration) {
	h.at(s.OpenedAt.Add(d), func() {
		h.sessions.mu.Lock()
		s.Status = models.StatusCancelled
		h.sessions.mu.Unlock()
		h.signal(s)
	})
}

// action sends an action update at time t.
func (h *subHarness) action(t time.Time, action string) *subUpdate {
	return h.update(t, SubscriptionActionUpdate, action, ActionRequest{Action: action})
}

// settle sends the settle update for exception excID at time t.
func (h *subHarness) settle(t time.Time, excID string) *subUpdate {
	return h.update(t, SubscriptionSettleUpdate, "settle "+excID, SettleRequest{ExceptionID: excID, Note: "accepted short"})
}

// update sends the update name with arg at time t; what names it in the
// report.
func (h *subHarness) update(t time.Time, name, what string, arg any) *subUpdate {
	h.updates++
	u := &subUpdate{action: what}
	id := fmt.Sprintf("%s-%d", name, h.updates)
	h.at(t, func() {
		env := h.env
		env.UpdateWorkflow(name, id, &testsuite.TestUpdateCallback{
			OnAccept: func() { u.accepted = true },
			OnReject: func(err error) { u.rejected, u.done, u.at = err, true, env.Now() },
			OnComplete: func(v any, err error) {
				u.err, u.done, u.at = err, true, env.Now()
				if st, ok := v.(SubscriptionState); ok {
					u.state = st
				}
			},
		}, arg)
	})
	return u
}

// runOnce runs one workflow run from h.st at h.now. It reports whether the
// workflow continued as new (h.st is then the next run's input).
func (h *subHarness) runOnce() bool {
	h.t.Helper()
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(webhookTestLogger())
	env := suite.NewTestWorkflowEnvironment()
	env.SetStartTime(h.now)
	h.env = env
	env.RegisterWorkflow(SubscriptionWorkflow)
	env.RegisterActivity(&activities.SubscriptionActivities{Store: h.store, Sessions: h.sessions, Exceptions: h.exceptions,
		Dispatcher: &checkoutFakeDispatcher{}, PublicBaseURL: "https://pay.example"})
	env.SetOnActivityCompletedListener(func(info *activity.Info, result converter.EncodedValue, err error) {
		if info.ActivityType.Name != "OpenInvoiceSession" || err != nil {
			return
		}
		var got activities.InvoiceSession
		if err := result.Get(&got); err != nil {
			h.t.Errorf("session result: %v", err)
			return
		}
		if s := h.sessions.get(got.SessionID); s != nil && s.Opens == 1 && !s.planned() {
			h.opened(s)
		}
	})
	env.OnUpsertTypedSearchAttributes(mock.Anything).Run(func(args mock.Arguments) {
		sa := args.Get(0).(temporal.SearchAttributes)
		if v, ok := sa.GetKeyword(SubscriptionStatusAttr); ok {
			h.upserts = append(h.upserts, v)
		} else {
			h.t.Errorf("upsert without SubscriptionStatus: %v", sa.GetUntypedValues())
		}
	}).Return().Maybe()
	for _, s := range h.scheduled {
		if !s.fired {
			h.register(s)
		}
	}
	if h.setup != nil {
		h.setup(env)
	}
	env.ExecuteWorkflow(SubscriptionWorkflow, h.st)
	if !env.IsWorkflowCompleted() {
		h.t.Fatal("workflow run did not complete")
	}
	h.now = env.Now()
	err := env.GetWorkflowError()
	var can *workflow.ContinueAsNewError
	if errors.As(err, &can) {
		if can.WorkflowType == nil || can.WorkflowType.Name != "SubscriptionWorkflow" {
			h.t.Fatalf("continues as %+v", can.WorkflowType)
		}
		var next SubscriptionState
		if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &next); err != nil {
			h.t.Fatal(err)
		}
		h.carried = append(h.carried, next)
		h.st = next
		return true
	}
	if err != nil {
		h.t.Fatalf("workflow error: %v", err)
	}
	var res SubscriptionResult
	if err := env.GetWorkflowResult(&res); err != nil {
		h.t.Fatal(err)
	}
	h.result = &res
	return false
}

// planned marks a session whose customer was already played (a retried
// OpenInvoiceSession reports the same session again).
func (s *subFakeSession) planned() bool { return s.Opens > 1 }

// runUntil runs until the workflow ends or stop says so after a run.
func (h *subHarness) runUntil(maxRuns int, stop func() bool) {
	h.t.Helper()
	for i := 0; i < maxRuns; i++ {
		if !h.runOnce() || (stop != nil && stop()) {
			h.check()
			return
		}
	}
	h.t.Fatalf("still running after %d runs", maxRuns)
}

// check fails the test on the store's broken promises.
func (h *subHarness) check() {
	h.t.Helper()
	h.store.mu.Lock()
	defer h.store.mu.Unlock()
	for _, v := range h.store.violations {
		h.t.Errorf("store: %s", v)
	}
}

func invoiceOf(t *testing.T, e subRecorded) map[string]any {
	t.Helper()
	inv, ok := e.Extra["invoice"].(map[string]any)
	if !ok {
		t.Fatalf("%s without invoice: %+v", e.Type, e.Extra)
	}
	return inv
}

func ts(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// --- tests ---

// A 14-day trial, then a year of monthly renewals, each paid two hours
// after its invoice; one run per paid period (continue-as-new), state
// carried whole; cancel_now in the twelfth paid period ends it.
func TestSubscriptionTrialThenAYearOfRenewals(t *testing.T) {
	h := newSubHarness(t, subStart, 14, billing.Month)
	trialEnd := subStart.Add(14 * 24 * time.Hour) // Feb 14
	end := billing.PeriodEnd(trialEnd, billing.Month, 1, 12)
	cancel := h.action(end.Add(-24*time.Hour), ActionCancelNow)
	h.runUntil(20, nil)

	if h.result == nil || h.result.Status != models.SubCanceled || h.result.PaidPeriods != 12 || h.result.CancelReason != CancelReasonRequested {
		t.Fatalf("result %+v", h.result)
	}
	want := []string{"subscription.created"}
	for i := 0; i < 12; i++ {
		want = append(want, "subscription.renewal_due", "subscription.renewed")
	}
	want = append(want, "subscription.updated", "subscription.canceled")
	if got := h.store.types(); !slices.Equal(got, want) {
		t.Fatalf("events\n%v\nwant\n%v", got, want)
	}
	if len(h.carried) != 12 {
		t.Fatalf("%d continue-as-new, want one per paid period", len(h.carried))
	}
	for k, due := range h.store.ofType("subscription.renewal_due") {
		start := billing.PeriodEnd(trialEnd, billing.Month, 1, k)
		inv := invoiceOf(t, due)
		if !due.At.Equal(start) || inv["periodStart"] != ts(start) || inv["periodEnd"] != ts(billing.PeriodEnd(trialEnd, billing.Month, 1, k+1)) ||
			num(inv["number"]) != k+1 || inv["checkoutUrl"] != "https://pay.example/checkout/"+inv["sessionId"].(string) {
			t.Fatalf("invoice %d at %s: %+v", k+1, due.At, inv)
		}
		if due.Record.Status != models.SubRenewalPending {
			t.Fatalf("invoice %d recorded %s", k+1, due.Record.Status)
		}
	}
	for k, r := range h.store.ofType("subscription.renewed") {
		start, stop := billing.PeriodEnd(trialEnd, billing.Month, 1, k), billing.PeriodEnd(trialEnd, billing.Month, 1, k+1)
		if !r.At.Equal(start.Add(2*time.Hour)) || r.Record.Status != models.SubActive || !r.Record.CurrentPeriodStart.Equal(start) ||
			!r.Record.CurrentPeriodEnd.Equal(stop) {
			t.Fatalf("renewal %d: %+v", k+1, r.Record)
		}
		c := h.carried[k]
		if c.PaidPeriods != k+1 || c.NextPeriod != k+1 || c.Invoice != nil || !c.Created || c.Runs != k+1 || c.Seq != r.Seq ||
			c.Status != models.SubActive || !c.Anchor.Equal(trialEnd) || c.Invoices != k+1 || !c.CurrentPeriodEnd.Equal(stop) {
			t.Fatalf("carried state %d: %+v", k+1, c)
		}
	}
	if !cancel.accepted || cancel.err != nil || cancel.state.Status != models.SubCanceled {
		t.Fatalf("cancel_now: %+v", cancel)
	}
	if got := h.store.latest(); got.Status != models.SubCanceled || got.CancelReason != CancelReasonRequested || got.CanceledAt == nil {
		t.Fatalf("read model %+v", got)
	}
	if n := len(h.sessions.all()); n != 12 {
		t.Fatalf("%d sessions, want one per invoice", n)
	}
	// The Web UI filter follows every status change.
	if len(h.upserts) == 0 || h.upserts[len(h.upserts)-1] != models.SubCanceled || !slices.Contains(h.upserts, models.SubRenewalPending) {
		t.Fatalf("upserts %v", h.upserts)
	}
}

// Month-end anchoring: a subscription started on January 31 without a trial
// renews on the 28th (29th in a leap year), then the 31st, 30th, 31st...
func TestSubscriptionMonthEndDates(t *testing.T) {
	for _, tc := range []struct {
		start time.Time
		ends  []string
	}{
		{subStart, []string{"2027-01-31", "2027-02-28", "2027-03-31", "2027-04-30", "2027-05-31", "2027-06-30", "2027-07-31"}},
		{time.Date(2028, 1, 31, 9, 0, 0, 0, time.UTC), []string{"2028-01-31", "2028-02-29", "2028-03-31", "2028-04-30", "2028-05-31", "2028-06-30", "2028-07-31"}},
	} {
		t.Run(tc.start.Format(time.DateOnly), func(t *testing.T) {
			h := newSubHarness(t, tc.start, 0, billing.Month)
			h.runUntil(6, func() bool { return len(h.carried) == 6 })
			dues := h.store.ofType("subscription.renewal_due")
			if len(dues) != 6 {
				t.Fatalf("%d invoices", len(dues))
			}
			for i, d := range dues {
				inv := invoiceOf(t, d)
				if inv["periodStart"] != tc.ends[i]+"T09:00:00.000Z" || inv["periodEnd"] != tc.ends[i+1]+"T09:00:00.000Z" {
					t.Fatalf("invoice %d: %v to %v", i+1, inv["periodStart"], inv["periodEnd"])
				}
			}
			// Without a trial the first invoice is due at once.
			if !dues[0].At.Equal(tc.start) {
				t.Fatalf("first invoice at %s", dues[0].At)
			}
		})
	}
}

// A renewal never paid: past_due after the grace period, reminders at the
// policy's offsets each with a fresh session (the previous one expired),
// canceled at the end of dunning.
func TestSubscriptionDunningToCanceled(t *testing.T) {
	h := newSubHarness(t, subStart, 7, billing.Month)
	h.plan = func(*subFakeSession) subPayment { return subPayment{} }
	h.runUntil(3, nil)
	trialEnd := subStart.Add(7 * 24 * time.Hour)
	pastDue := trialEnd.Add(72 * time.Hour)
	want := []struct {
		typ string
		at  time.Time
	}{
		{"subscription.created", subStart},
		{"subscription.renewal_due", trialEnd},
		{"subscription.past_due", pastDue},
		{"subscription.renewal_due", pastDue.Add(24 * time.Hour)},
		{"subscription.renewal_due", pastDue.Add(72 * time.Hour)},
		{"subscription.renewal_due", pastDue.Add(120 * time.Hour)},
		{"subscription.canceled", pastDue.Add(168 * time.Hour)},
	}
	got := h.store.emitted()
	if len(got) != len(want) {
		t.Fatalf("events %v", h.store.types())
	}
	for i, w := range want {
		if got[i].Type != w.typ || !got[i].At.Equal(w.at) {
			t.Fatalf("event %d: %s at %s, want %s at %s", i, got[i].Type, got[i].At, w.typ, w.at)
		}
	}
	if h.result == nil || h.result.CancelReason != CancelReasonUnpaid || len(h.carried) != 0 {
		t.Fatalf("result %+v, %d runs continued", h.result, len(h.carried))
	}
	if got[6].Extra["reason"] != CancelReasonUnpaid || got[6].Record.Status != models.SubCanceled {
		t.Fatalf("canceled %+v", got[6])
	}
	statuses := []string{}
	for _, e := range got {
		statuses = append(statuses, e.Record.Status)
	}
	if !slices.Equal(statuses, []string{"trialing", "renewal_pending", "past_due", "past_due", "past_due", "past_due", "canceled"}) {
		t.Fatalf("statuses %v", statuses)
	}
	// One session per notice, each valid until the next step.
	sessions := h.sessions.all()
	if len(sessions) != 5 {
		t.Fatalf("%d sessions", len(sessions))
	}
	expiries := []time.Time{pastDue, pastDue.Add(24 * time.Hour), pastDue.Add(72 * time.Hour), pastDue.Add(120 * time.Hour), pastDue.Add(168 * time.Hour)}
	for i, s := range sessions {
		if !s.Req.ExpiresAt.Equal(expiries[i]) {
			t.Fatalf("session %d expires %s, want %s", i, s.Req.ExpiresAt, expiries[i])
		}
	}
	pd := invoiceOf(t, got[2])
	if pd["pastDueAt"] != ts(pastDue) || pd["cancelsAt"] != ts(pastDue.Add(168*time.Hour)) || pd["sessionId"] != sessions[1].ID {
		t.Fatalf("past_due invoice %+v", pd)
	}
	for i, e := range got[3:6] {
		if inv := invoiceOf(t, e); num(inv["reminder"]) != i+1 || inv["sessionId"] != sessions[i+2].ID {
			t.Fatalf("reminder %d: %+v", i+1, inv)
		}
	}
}

// A late payment during past_due reactivates: the paid period is the one
// invoiced (the calendar does not move), and the next invoice follows it.
func TestSubscriptionLatePaymentReactivates(t *testing.T) {
	h := newSubHarness(t, subStart, 0, billing.Month)
	n := 0
	h.plan = func(s *subFakeSession) subPayment {
		n++
		switch n {
		case 1:
			return payAfter(time.Hour) // the first period
		case 2, 3:
			return subPayment{} // renewal: ignored, then past_due ignored
		}
		return payAfter(6 * time.Hour) // the first reminder's session
	}
	h.runUntil(5, func() bool { return len(h.carried) == 3 })
	feb28 := billing.PeriodEnd(subStart, billing.Month, 1, 1)
	pastDue := feb28.Add(72 * time.Hour)
	types := h.store.types()
	want := []string{"subscription.created", "subscription.renewal_due", "subscription.renewed", "subscription.renewal_due",
		"subscription.past_due", "subscription.renewal_due", "subscription.renewed", "subscription.renewal_due", "subscription.renewed"}
	if !slices.Equal(types, want) {
		t.Fatalf("events %v", types)
	}
	late := h.store.ofType("subscription.renewed")[1]
	if !late.At.Equal(pastDue.Add(30*time.Hour)) || late.Record.Status != models.SubActive || !late.Record.CurrentPeriodStart.Equal(feb28) ||
		!late.Record.CurrentPeriodEnd.Equal(billing.PeriodEnd(subStart, billing.Month, 1, 2)) {
		t.Fatalf("late renewal %+v at %s", late.Record, late.At)
	}
	if inv := invoiceOf(t, late); num(inv["reminder"]) != 1 || inv["sessionId"] != h.sessions.all()[3].ID {
		t.Fatalf("paid by %+v", inv)
	}
	// The next invoice on the anchored date, March 31.
	if next := h.store.ofType("subscription.renewal_due")[3]; !next.At.Equal(time.Date(2027, 3, 31, 9, 0, 0, 0, time.UTC)) {
		t.Fatalf("next invoice at %s", next.At)
	}
}

// Pause stops the billing clock across the period's end: no invoice while
// paused, and on resume the period ends later by the paused time; later
// periods count from the new end.
func TestSubscriptionPauseResumeAcrossPeriodEnd(t *testing.T) {
	h := newSubHarness(t, subStart, 0, billing.Month)
	feb20, feb28, mar10 := time.Date(2027, 2, 20, 9, 0, 0, 0, time.UTC), time.Date(2027, 2, 28, 9, 0, 0, 0, time.UTC), time.Date(2027, 3, 10, 9, 0, 0, 0, time.UTC)
	pause := h.action(feb20, ActionPause)
	again := h.action(feb20.Add(time.Hour), ActionPause)
	early := h.action(feb20.Add(-time.Hour), ActionResume)
	resume := h.action(mar10, ActionResume)
	h.runUntil(5, func() bool { return len(h.carried) == 3 })
	if !pause.accepted || pause.err != nil || pause.state.Status != models.SubPaused || !pause.state.PausedAt.Equal(feb20) {
		t.Fatalf("pause %+v", pause)
	}
	if again.accepted || again.errType() != ErrTypeActionNotAllowed || early.accepted || early.errType() != ErrTypeActionNotAllowed {
		t.Fatalf("refusals: pause twice %+v, resume when active %+v", again, early)
	}
	paused := mar10.Sub(feb20) // 18 days
	newEnd := feb28.Add(paused)
	// The anchor moves by the pause (resumeShiftsAnchorVersion): the
	// periods end on the 18th, counted from January 31 + 18 days.
	if !resume.accepted || resume.err != nil || resume.state.Status != models.SubActive || !resume.state.CurrentPeriodEnd.Equal(newEnd) ||
		!resume.state.Anchor.Equal(subStart.Add(paused)) || resume.state.NextPeriod != 1 || !resume.state.PausedAt.IsZero() {
		t.Fatalf("resume %+v", resume.state)
	}
	types := h.store.types()
	want := []string{"subscription.created", "subscription.renewal_due", "subscription.renewed", "subscription.updated",
		"subscription.updated", "subscription.renewal_due", "subscription.renewed", "subscription.renewal_due", "subscription.renewed"}
	if !slices.Equal(types, want) {
		t.Fatalf("events %v", types)
	}
	upd := h.store.ofType("subscription.updated")
	if upd[0].Extra["action"] != ActionPause || upd[0].Extra["previousStatus"] != models.SubActive || upd[0].Record.PausedAt == nil ||
		upd[1].Extra["action"] != ActionResume || upd[1].Record.Status != models.SubActive || !upd[1].Record.CurrentPeriodEnd.Equal(newEnd) {
		t.Fatalf("updated events %+v", upd)
	}
	dues := h.store.ofType("subscription.renewal_due")
	if !dues[1].At.Equal(newEnd) || invoiceOf(t, dues[1])["periodEnd"] != ts(time.Date(2027, 4, 18, 9, 0, 0, 0, time.UTC)) ||
		!dues[2].At.Equal(time.Date(2027, 4, 18, 9, 0, 0, 0, time.UTC)) {
		t.Fatalf("invoices after the resume at %s and %s: %+v", dues[1].At, dues[2].At, invoiceOf(t, dues[1]))
	}
}

// A trial paused and resumed ends later by the paused time.
func TestSubscriptionPausedTrial(t *testing.T) {
	h := newSubHarness(t, subStart, 14, billing.Month)
	h.action(subStart.Add(24*time.Hour), ActionPause)
	resume := h.action(subStart.Add(4*24*time.Hour), ActionResume)
	h.runUntil(2, func() bool { return len(h.carried) == 1 })
	want := subStart.Add(17 * 24 * time.Hour)
	if resume.state.Status != models.SubTrialing || !resume.state.TrialEnd.Equal(want) || !resume.state.CurrentPeriodEnd.Equal(want) {
		t.Fatalf("resumed trial %+v", resume.state)
	}
	if due := h.store.ofType("subscription.renewal_due")[0]; !due.At.Equal(want) || due.Record.TrialEnd == nil || !due.Record.TrialEnd.Equal(want) {
		t.Fatalf("first invoice at %s", due.At)
	}
}

// cancel keeps the status (SPEC.md's sample) and sets cancelAtPeriodEnd;
// at the period's end the subscription is canceled without an invoice.
func TestSubscriptionCancelAtPeriodEnd(t *testing.T) {
	h := newSubHarness(t, subStart, 14, billing.Month)
	cancel := h.action(subStart.Add(24*time.Hour), ActionCancel)
	twice := h.action(subStart.Add(25*time.Hour), ActionCancel)
	h.runUntil(2, nil)
	if !cancel.accepted || cancel.err != nil || cancel.state.Status != models.SubTrialing || !cancel.state.CancelAtPeriodEnd {
		t.Fatalf("cancel %+v", cancel)
	}
	if !twice.accepted || twice.err != nil || !twice.state.CancelAtPeriodEnd {
		t.Fatalf("cancel again %+v", twice)
	}
	if got := h.store.types(); !slices.Equal(got, []string{"subscription.created", "subscription.updated", "subscription.canceled"}) {
		t.Fatalf("events %v", got)
	}
	c := h.store.ofType("subscription.canceled")[0]
	if !c.At.Equal(subStart.Add(14*24*time.Hour)) || c.Extra["reason"] != CancelReasonPeriodEnd || !c.Record.CancelAtPeriodEnd {
		t.Fatalf("canceled %+v at %s", c.Extra, c.At)
	}
	if len(h.sessions.all()) != 0 || h.result.CancelReason != CancelReasonPeriodEnd {
		t.Fatalf("sessions %d, result %+v", len(h.sessions.all()), h.result)
	}
	if up := h.store.ofType("subscription.updated")[0]; up.Record.Status != models.SubTrialing || !up.Record.CancelAtPeriodEnd {
		t.Fatalf("read model after cancel %+v", up.Record)
	}
	// The status query answers the ended workflow's state.
	v, err := h.env.QueryWorkflow(SubscriptionStatusQuery)
	var st SubscriptionState
	if err == nil {
		err = v.Get(&st)
	}
	if err != nil || st.Status != models.SubCanceled || st.CancelReason != CancelReasonPeriodEnd || st.SubscriptionID != subID {
		t.Fatalf("status query %+v %v", st, err)
	}
}

// TestSubscriptionReopenBudgetPerStep: the sessions an invoice opens again
// after a customer's cancel are bounded per step of its schedule: three
// cancelled in the grace period, the past_due session cancelled too is
// replaced at once, and the customer pays it. Before, the budget was spent
// for the invoice, and the customer had no session from then to the next
// reminder, a day later.
func TestSubscriptionReopenBudgetPerStep(t *testing.T) {
	h := newSubHarness(t, subStart, 7, billing.Month)
	h.cancelThenPay(5)
	h.runUntil(3, func() bool { return len(h.carried) == 1 })
	trialEnd := subStart.Add(7 * 24 * time.Hour)
	renewed := h.store.ofType("subscription.renewed")
	if len(renewed) == 0 || !renewed[0].At.Equal(trialEnd.Add(75*time.Hour)) {
		var at []string
		for _, s := range h.sessions.all() {
			at = append(at, fmt.Sprintf("%v %s", s.OpenedAt.Sub(trialEnd), s.Status))
		}
		t.Fatalf("renewed %v; sessions (opened after the trial, status) %v; want renewed 75 h after the trial", renewed, at)
	}
}

// TestSubscriptionPauseKeepsMonthEnd: a subscription anchored on a month's
// last day, paused and resumed in February (a minute), keeps billing on the
// last day of later months, a minute later; it was billed on the 28th of
// every month after (the anchor became the clamped February 28).
func TestSubscriptionPauseKeepsMonthEnd(t *testing.T) {
	h := newSubHarness(t, subStart, 0, billing.Month) // January 31, 09:00
	feb20 := time.Date(2027, 2, 20, 9, 0, 0, 0, time.UTC)
	h.action(feb20, ActionPause)
	h.action(feb20.Add(time.Minute), ActionResume)
	h.runUntil(6, func() bool { return len(h.carried) == 4 })
	var got []string
	for _, d := range h.store.ofType("subscription.renewal_due") {
		inv := invoiceOf(t, d)
		got = append(got, fmt.Sprint(inv["periodStart"], " - ", inv["periodEnd"]))
	}
	at := func(m time.Month, d int) string { return ts(time.Date(2027, m, d, 9, 1, 0, 0, time.UTC)) }
	want := []string{ts(subStart) + " - " + ts(time.Date(2027, 2, 28, 9, 0, 0, 0, time.UTC)),
		at(2, 28) + " - " + at(3, 31), at(3, 31) + " - " + at(4, 30), at(4, 30) + " - " + at(5, 31)}
	if len(got) < len(want) || !slices.Equal(got[:len(want)], want) {
		t.Fatalf("invoice periods\n got %q\nwant %q", got, want)
	}
}

// TestSubscriptionCancelWhilePaused: a cancel (at period end) of a paused
// subscription, or a pause of one canceling at period end, ends it when
// its current period ends, paused or not; resumed meanwhile, the period
// (and the end) moves by the paused time. Before, a paused subscription had
// no deadline: the cancel answered cancelAtPeriodEnd and never took effect.
func TestSubscriptionCancelWhilePaused(t *testing.T) {
	feb10, feb28 := time.Date(2027, 2, 10, 9, 0, 0, 0, time.UTC), time.Date(2027, 2, 28, 9, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		actions []string
		ends    time.Time
	}{
		{"cancel while paused", []string{ActionPause, ActionCancel}, feb28},
		{"pause after cancel", []string{ActionCancel, ActionPause}, feb28},
		{"resumed before the end", []string{ActionPause, ActionCancel, ActionResume}, feb28.Add(2 * 24 * time.Hour)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newSubHarness(t, subStart, 0, billing.Month)
			var acts []*subUpdate
			for i, a := range tc.actions {
				acts = append(acts, h.action(feb10.Add(time.Duration(i)*24*time.Hour), a))
			}
			h.runUntil(3, nil)
			for _, u := range acts {
				if !u.accepted || u.err != nil {
					t.Fatalf("%s: %+v", u.action, u)
				}
			}
			if second := acts[1].state; second.Status != models.SubPaused || !second.CancelAtPeriodEnd {
				t.Fatalf("answer of the second action: %s, cancelAtPeriodEnd %v", second.Status, second.CancelAtPeriodEnd)
			}
			if h.result == nil || h.result.Status != models.SubCanceled || h.result.CancelReason != CancelReasonPeriodEnd || h.result.PaidPeriods != 1 {
				t.Fatalf("result %+v", h.result)
			}
			c := h.store.ofType("subscription.canceled")
			if len(c) != 1 || !c[0].At.Equal(tc.ends) || c[0].Extra["reason"] != CancelReasonPeriodEnd {
				t.Fatalf("canceled %+v, want at %s", c, tc.ends)
			}
			if n := len(h.store.ofType("subscription.renewal_due")); n != 1 {
				t.Fatalf("%d invoices, want the first only", n)
			}
		})
	}
}

// TestSubscriptionCancelledAgainInTheRunThatPaused: the pause and the cancel
// were taken by a release before pausedCancelVersion (its marker absent:
// the version reads DefaultVersion in that run, mocked here); a cancel
// asked again in the same run, after the upgrade, ends it at its period's
// end. (Asking the same change id again would read the run's cached
// DefaultVersion: the re-ask has a change id of its own.)
func TestSubscriptionCancelledAgainInTheRunThatPaused(t *testing.T) {
	h := newSubHarness(t, subStart, 14, billing.Month)
	h.setup = func(env *testsuite.TestWorkflowEnvironment) {
		env.OnGetVersion(pausedCancelVersion, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	}
	trialEnd := h.st.TrialEnd
	h.action(subStart.Add(24*time.Hour), ActionPause)
	first := h.action(subStart.Add(25*time.Hour), ActionCancel)
	again := h.action(subStart.Add(26*time.Hour), ActionCancel)
	h.runUntil(1, nil)
	if first.err != nil || first.state.PausedCancelEnds || again.err != nil || !again.state.PausedCancelEnds {
		t.Fatalf("first cancel %+v, again %+v", first.state, again.state)
	}
	if c := h.store.ofType("subscription.canceled"); len(c) != 1 || !c[0].At.Equal(trialEnd) {
		t.Fatalf("canceled %+v", c)
	}
}

// TestSubscriptionCancelledWhilePausedBeforeTheFix: a subscription paused
// and canceling at period end from before pausedCancelVersion (no deadline)
// ends at its period's end once the merchant asks to cancel again.
func TestSubscriptionCancelledWhilePausedBeforeTheFix(t *testing.T) {
	h := newSubHarness(t, subStart, 14, billing.Month)
	trialEnd := h.st.TrialEnd
	h.st.Status, h.st.PausedFrom, h.st.PausedAt, h.st.CancelAtPeriodEnd = models.SubPaused, models.SubTrialing, subStart, true
	h.st.Created = true
	again := h.action(subStart.Add(24*time.Hour), ActionCancel)
	h.runUntil(1, nil)
	if !again.accepted || again.err != nil || again.state.Status != models.SubPaused || !again.state.PausedCancelEnds {
		t.Fatalf("cancel again %+v", again)
	}
	if c := h.store.ofType("subscription.canceled"); len(c) != 1 || !c[0].At.Equal(trialEnd) || c[0].Extra["reason"] != CancelReasonPeriodEnd {
		t.Fatalf("canceled %+v", c)
	}
}

// TestSubscriptionResumeNextInvoiceAtReportedEnd: after a resume the next
// invoice comes when the reported currentPeriodEnd says, where the anchor's
// calendar clamps too. Anchored on January 29 (February ends on the 28th),
// paused a day: the period ends on March 1, and so the next invoice is
// issued then, for March 1 to March 30 (the anchor moved by the day). Before,
// it came on February 28: the customer lost the paused day.
func TestSubscriptionResumeNextInvoiceAtReportedEnd(t *testing.T) {
	start := time.Date(2027, 1, 29, 9, 0, 0, 0, time.UTC)
	h := newSubHarness(t, start, 0, billing.Month)
	feb20 := time.Date(2027, 2, 20, 9, 0, 0, 0, time.UTC)
	h.action(feb20, ActionPause)
	resume := h.action(feb20.Add(24*time.Hour), ActionResume)
	h.runUntil(4, func() bool { return len(h.carried) == 3 })
	mar1 := time.Date(2027, 3, 1, 9, 0, 0, 0, time.UTC)
	if !resume.state.CurrentPeriodEnd.Equal(mar1) {
		t.Fatalf("currentPeriodEnd after the resume %s, want %s", resume.state.CurrentPeriodEnd, mar1)
	}
	var got []string
	for _, d := range h.store.ofType("subscription.renewal_due") {
		inv := invoiceOf(t, d)
		got = append(got, fmt.Sprint(ts(d.At), ": ", inv["periodStart"], " - ", inv["periodEnd"]))
	}
	at := func(m time.Month, d int) string { return ts(time.Date(2027, m, d, 9, 0, 0, 0, time.UTC)) }
	want := []string{at(1, 29) + ": " + at(1, 29) + " - " + at(2, 28), at(3, 1) + ": " + at(3, 1) + " - " + at(3, 30),
		at(3, 30) + ": " + at(3, 30) + " - " + at(4, 30)}
	if !slices.Equal(got, want) {
		t.Fatalf("invoices (issued: period)\n got %q\nwant %q", got, want)
	}
	if r := h.store.ofType("subscription.renewed"); len(r) < 2 || !r[1].Record.CurrentPeriodStart.Equal(mar1) {
		t.Fatalf("renewed %+v", r)
	}
}

// TestSubscriptionUnbillableHolds: a step whose invoice session cannot be
// opened because the subscription cannot be billed as it stands (its
// receiving wallet proven by another merchant, its network removed) holds
// and tries again hourly: the reason is recorded once (subscription.updated,
// billingError), the status kept, and once a session opens the invoice
// comes with billingError cleared, for the period it would have paid. A
// cancel at period end is not held. Before, the activity's failure failed
// the workflow: the subscription stayed active, unbilled, and nobody knew.
func TestSubscriptionUnbillableHolds(t *testing.T) {
	trialEnd := subStart.Add(7 * 24 * time.Hour)
	claimed := func(h *subHarness, until time.Time) {
		h.sessions.refuse = func() error {
			if h.sessions.now().Before(until) {
				return apperr.New(apperr.ErrBadRequest, "the receiving wallet 0xabc is proven by another merchant account")
			}
			return nil
		}
	}
	t.Run("held, then billed", func(t *testing.T) {
		h := newSubHarness(t, subStart, 7, billing.Month)
		claimed(h, trialEnd.Add(150*time.Minute))
		h.runUntil(2, func() bool { return len(h.carried) == 1 })
		if h.sessions.refused != 3 {
			t.Fatalf("%d refused opens, want 3 (at the trial's end, then hourly)", h.sessions.refused)
		}
		types := h.store.types()
		if want := []string{"subscription.created", "subscription.updated", "subscription.renewal_due", "subscription.renewed"}; !slices.Equal(types, want) {
			t.Fatalf("events %v, want %v", types, want)
		}
		held := h.store.ofType("subscription.updated")[0]
		if !held.At.Equal(trialEnd) || held.Record.BillingError == "" || !strings.Contains(held.Record.BillingError, "another merchant") ||
			held.Record.Status != models.SubTrialing || held.Extra["action"] != nil || held.Extra["previousStatus"] != models.SubTrialing {
			t.Fatalf("held %+v at %s", held, held.At)
		}
		due := h.store.ofType("subscription.renewal_due")[0]
		if !due.At.Equal(trialEnd.Add(3*time.Hour)) || due.Record.BillingError != "" || invoiceOf(t, due)["periodStart"] != ts(trialEnd) ||
			num(invoiceOf(t, due)["number"]) != 1 {
			t.Fatalf("invoice at %s: %+v (%q)", due.At, invoiceOf(t, due), due.Record.BillingError)
		}
	})
	t.Run("cancel while held", func(t *testing.T) {
		h := newSubHarness(t, subStart, 7, billing.Month)
		claimed(h, trialEnd.Add(100*24*time.Hour))
		cancel := h.action(trialEnd.Add(10*time.Minute), ActionCancel)
		h.runUntil(1, nil)
		if cancel.err != nil || h.result == nil || h.result.CancelReason != CancelReasonPeriodEnd {
			t.Fatalf("cancel %+v, result %+v", cancel, h.result)
		}
		c := h.store.ofType("subscription.canceled")
		if len(c) != 1 || !c[0].At.Equal(trialEnd.Add(10*time.Minute)) || c[0].Record.BillingError != "" {
			t.Fatalf("canceled %+v", c)
		}
	})
	t.Run("pause refused while held", func(t *testing.T) {
		h := newSubHarness(t, subStart, 7, billing.Month)
		claimed(h, trialEnd.Add(100*24*time.Hour))
		pause := h.action(trialEnd.Add(10*time.Minute), ActionPause)
		h.action(trialEnd.Add(20*time.Minute), ActionCancelNow)
		h.runUntil(1, nil)
		if pause.accepted || pause.errType() != ErrTypeActionNotAllowed {
			t.Fatalf("pause while held: %+v", pause)
		}
	})
	t.Run("reopen held, then opened", func(t *testing.T) {
		// The customer cancels the invoice's session an hour in; its
		// replacement is refused for 150 minutes, then opened.
		h := newSubHarness(t, subStart, 7, billing.Month)
		h.cancelThenPay(1)
		h.at(trialEnd.Add(59*time.Minute), func() { claimed(h, trialEnd.Add(210*time.Minute)) })
		h.runUntil(2, func() bool { return len(h.carried) == 1 })
		dues := h.store.ofType("subscription.renewal_due")
		if len(dues) != 2 || !dues[1].At.Equal(trialEnd.Add(4*time.Hour)) || dues[1].Record.BillingError != "" {
			var at []time.Time
			for _, d := range dues {
				at = append(at, d.At)
			}
			t.Fatalf("renewal_due at %v, want the replacement 4 h after the trial (%v)", at, h.store.types())
		}
		if held := h.store.ofType("subscription.updated"); len(held) != 1 || !held[0].At.Equal(trialEnd.Add(time.Hour)) {
			t.Fatalf("held %+v", held)
		}
		if r := h.store.ofType("subscription.renewed"); len(r) != 1 {
			t.Fatalf("renewed %v", h.store.types())
		}
	})
	t.Run("replacement held across the grace end", func(t *testing.T) {
		// The customer cancels the invoice's session 73 minutes in and
		// billing stays on hold: its replacement is tried hourly from then,
		// the grace end's past_due step (between two tries) is held too,
		// and nothing is tried more often than that.
		h := newSubHarness(t, subStart, 7, billing.Month)
		h.plan = func(s *subFakeSession) subPayment {
			h.cancelAfter(s, 73*time.Minute)
			return subPayment{}
		}
		h.at(trialEnd.Add(72*time.Minute), func() { claimed(h, trialEnd.Add(100*24*time.Hour)) })
		graceEnd := trialEnd.Add(72 * time.Hour)
		h.action(graceEnd.Add(210*time.Minute), ActionCancelNow)
		h.runUntil(1, nil)
		// Hourly from 73 minutes in to the grace end (71), then the held
		// past_due step at the grace end and three more hours (4).
		if h.sessions.refused < 70 || h.sessions.refused > 80 {
			t.Fatalf("%d refused opens, want about 75 (hourly)", h.sessions.refused)
		}
	})
	t.Run("settled while held", func(t *testing.T) {
		// The replacement session is refused; the merchant accepts a
		// payment exception for the invoice: renewed, and billing is no
		// longer on hold.
		h := newSubHarness(t, subStart, 7, billing.Month)
		h.cancelThenPay(1)
		h.at(trialEnd.Add(59*time.Minute), func() { claimed(h, trialEnd.Add(100*24*time.Hour)) })
		u := h.settle(trialEnd.Add(3*time.Hour), "exc_1")
		h.runUntil(2, func() bool { return len(h.carried) == 1 })
		r := h.store.ofType("subscription.renewed")
		if u.err != nil || len(r) != 1 || r[0].Record.BillingError != "" || h.carried[0].BillingError != "" || !h.carried[0].BlockedSince.IsZero() {
			t.Fatalf("settle %+v (%s); renewed %+v", u, u.errType(), r)
		}
	})
	t.Run("reminder held moves dunning", func(t *testing.T) {
		// Nothing paid; the first reminder (a day into past_due) is
		// refused for two days. It goes out then, with a session to pay
		// with, and the rest of dunning moves by the two days.
		h := newSubHarness(t, subStart, 7, billing.Month)
		h.plan = func(*subFakeSession) subPayment { return subPayment{} }
		pastDue := trialEnd.Add(72 * time.Hour)
		r1 := pastDue.Add(24 * time.Hour)
		h.at(r1.Add(-time.Minute), func() { claimed(h, r1.Add(48*time.Hour)) })
		h.runUntil(1, nil)
		dues := h.store.ofType("subscription.renewal_due")
		if len(dues) != 4 {
			t.Fatalf("events %v", h.store.types())
		}
		first := invoiceOf(t, dues[1])
		if !dues[1].At.Equal(r1.Add(48*time.Hour)) || num(first["reminder"]) != 1 || first["sessionExpiresAt"] != ts(pastDue.Add(48*time.Hour+72*time.Hour)) ||
			first["cancelsAt"] != ts(pastDue.Add(48*time.Hour+168*time.Hour)) {
			t.Fatalf("the held reminder at %s: %+v", dues[1].At, first)
		}
		c := h.store.ofType("subscription.canceled")
		if len(c) != 1 || !c[0].At.Equal(pastDue.Add(48*time.Hour+168*time.Hour)) || c[0].Extra["reason"] != CancelReasonUnpaid {
			t.Fatalf("canceled %+v", c)
		}
	})
	t.Run("replacement held through the last window", func(t *testing.T) {
		// Nothing paid; the customer cancels the last reminder's session
		// ten hours in and billing is on hold from then until twenty hours
		// after dunning would have ended. The unpaid cancel waits: once a
		// session can open, the customer gets it with the 38 hours that
		// were left, and only then is the subscription canceled unpaid.
		h := newSubHarness(t, subStart, 7, billing.Month)
		pastDue := trialEnd.Add(72 * time.Hour)
		end := pastDue.Add(168 * time.Hour)
		opened := 0
		h.plan = func(s *subFakeSession) subPayment {
			if opened++; opened == 5 {
				h.cancelAfter(s, 10*time.Hour)
			}
			return subPayment{}
		}
		h.at(pastDue.Add(129*time.Hour), func() { claimed(h, end.Add(20*time.Hour)) })
		h.runUntil(1, nil)
		types := h.store.types()
		if want := []string{"subscription.created", "subscription.renewal_due", "subscription.past_due", "subscription.renewal_due",
			"subscription.renewal_due", "subscription.renewal_due", "subscription.updated", "subscription.renewal_due",
			"subscription.canceled"}; !slices.Equal(types, want) {
			t.Fatalf("events %v, want %v", types, want)
		}
		if held := h.store.ofType("subscription.updated")[0]; !held.At.Equal(pastDue.Add(130*time.Hour)) || held.Record.BillingError == "" {
			t.Fatalf("held at %s: %+v", held.At, held.Record)
		}
		dues := h.store.ofType("subscription.renewal_due")
		last, inv := dues[len(dues)-1], invoiceOf(t, dues[len(dues)-1])
		cancelsAt := end.Add(20*time.Hour + 38*time.Hour)
		if !last.At.Equal(end.Add(20*time.Hour)) || last.Record.BillingError != "" || num(inv["reminder"]) != 3 ||
			inv["sessionExpiresAt"] != ts(cancelsAt) || inv["cancelsAt"] != ts(cancelsAt) {
			t.Fatalf("the session after the hold at %s (%q): %+v", last.At, last.Record.BillingError, inv)
		}
		if c := h.store.ofType("subscription.canceled"); !c[0].At.Equal(cancelsAt) || c[0].Extra["reason"] != CancelReasonUnpaid {
			t.Fatalf("canceled at %s: %+v", c[0].At, c[0].Extra)
		}
		if n := len(h.sessions.all()); n != 6 {
			t.Fatalf("%d sessions, want 6 (the last one after the hold)", n)
		}
	})
	t.Run("past due held", func(t *testing.T) {
		h := newSubHarness(t, subStart, 7, billing.Month)
		h.plan = func(*subFakeSession) subPayment { return subPayment{} }
		graceEnd := trialEnd.Add(72 * time.Hour)
		h.at(graceEnd.Add(-time.Minute), func() { claimed(h, graceEnd.Add(30*time.Minute)) })
		cancel := h.action(graceEnd.Add(2*time.Hour), ActionCancelNow)
		h.runUntil(1, nil)
		types := h.store.types()
		if want := []string{"subscription.created", "subscription.renewal_due", "subscription.updated", "subscription.past_due",
			"subscription.updated", "subscription.canceled"}; !slices.Equal(types, want) {
			t.Fatalf("events %v, want %v", types, want)
		}
		pd := h.store.ofType("subscription.past_due")[0]
		if !pd.At.Equal(graceEnd.Add(time.Hour)) || pd.Record.BillingError != "" || num(invoiceOf(t, pd)["number"]) != 1 {
			t.Fatalf("past_due at %s: %+v", pd.At, pd.Record)
		}
		if held := h.store.ofType("subscription.updated")[0]; held.Record.Status != models.SubRenewalPending || !held.At.Equal(graceEnd) {
			t.Fatalf("held %+v", held.Record)
		}
		if cancel.err != nil || len(h.sessions.all()) != 2 {
			t.Fatalf("cancel %+v, sessions %d", cancel, len(h.sessions.all()))
		}
	})
}

// TestSubscriptionCancelWhileRenewalInFlight: SPEC.md's cancel (any
// status, cancelAtPeriodEnd) sent while the renewal's transfer is being
// confirmed is taken at once and recorded; the transfer's verdict decides:
// paid, the period it paid for is the last and the subscription ends with
// it; bounced, the subscription ends then, without dunning. Before, the
// cancel was refused (409, nothing recorded) and the transfer that then
// confirmed renewed a period the merchant had asked to cancel.
func TestSubscriptionCancelWhileRenewalInFlight(t *testing.T) {
	trialEnd := subStart.Add(7 * 24 * time.Hour)
	t.Run("paid", func(t *testing.T) {
		h := newSubHarness(t, subStart, 7, billing.Month)
		h.plan = func(*subFakeSession) subPayment { return subPayment{pay: true, after: time.Hour, inFlight: time.Hour} }
		c := h.action(trialEnd.Add(90*time.Minute), ActionCancel)
		again := h.action(trialEnd.Add(100*time.Minute), ActionCancel)
		h.runUntil(4, nil)
		if !c.accepted || c.err != nil || !c.state.CancelAtPeriodEnd || c.state.Status != models.SubRenewalPending {
			t.Fatalf("cancel while in flight: %+v (%s)", c, c.errType())
		}
		if again.err != nil || !again.state.CancelAtPeriodEnd {
			t.Fatalf("cancel again: %+v", again)
		}
		want := []string{"subscription.created", "subscription.renewal_due", "subscription.updated", "subscription.renewed", "subscription.canceled"}
		if got := h.store.types(); !slices.Equal(got, want) {
			t.Fatalf("events %v, want %v", got, want)
		}
		renewed := h.store.ofType("subscription.renewed")[0]
		if !renewed.Record.CancelAtPeriodEnd {
			t.Fatalf("renewed without cancelAtPeriodEnd: %+v", renewed.Record)
		}
		ended := h.store.ofType("subscription.canceled")[0]
		if !ended.At.Equal(renewed.Record.CurrentPeriodEnd) || ended.Extra["reason"] != CancelReasonPeriodEnd {
			t.Fatalf("canceled %+v at %s, want at the paid period's end %s", ended.Extra, ended.At, renewed.Record.CurrentPeriodEnd)
		}
		if n := len(h.store.ofType("subscription.renewal_due")); n != 1 {
			t.Fatalf("%d invoices, want the one that was paid", n)
		}
	})
	t.Run("bounced", func(t *testing.T) {
		h := newSubHarness(t, subStart, 7, billing.Month)
		h.plan = func(*subFakeSession) subPayment {
			return subPayment{pay: true, after: time.Hour, inFlight: time.Hour, bounce: true}
		}
		c := h.action(trialEnd.Add(90*time.Minute), ActionCancel)
		h.runUntil(3, nil)
		if c.err != nil || !c.state.CancelAtPeriodEnd {
			t.Fatalf("cancel while in flight: %+v (%s)", c, c.errType())
		}
		want := []string{"subscription.created", "subscription.renewal_due", "subscription.updated", "subscription.canceled"}
		if got := h.store.types(); !slices.Equal(got, want) {
			t.Fatalf("events %v, want %v", got, want)
		}
		ended := h.store.ofType("subscription.canceled")[0]
		if !ended.At.Equal(trialEnd.Add(2*time.Hour)) || ended.Extra["reason"] != CancelReasonRequested || len(h.sessions.all()) != 1 {
			t.Fatalf("canceled %+v at %s (sessions %d), want at the bounce, no new session", ended.Extra, ended.At, len(h.sessions.all()))
		}
	})
}

// cancel_now voids the open invoice's session and ends at once; a cancel
// while a renewal is due does the same (the period has ended); a payment
// being confirmed cannot be voided (refused, nothing changes) and settles.
func TestSubscriptionCancelNow(t *testing.T) {
	t.Run("open invoice", func(t *testing.T) {
		h := newSubHarness(t, subStart, 7, billing.Month)
		h.plan = func(*subFakeSession) subPayment { return subPayment{} }
		u := h.action(subStart.Add(8*24*time.Hour), ActionCancelNow)
		h.runUntil(2, nil)
		if u.err != nil || u.state.Status != models.SubCanceled || u.state.CancelAtPeriodEnd {
			t.Fatalf("cancel_now %+v", u)
		}
		s := h.sessions.all()
		if len(s) != 1 || len(h.sessions.voided) != 1 || h.sessions.voided[0] != s[0].ID {
			t.Fatalf("sessions %d voided %v", len(s), h.sessions.voided)
		}
		if got := h.store.types(); !slices.Equal(got, []string{"subscription.created", "subscription.renewal_due", "subscription.updated", "subscription.canceled"}) {
			t.Fatalf("events %v", got)
		}
		if up := h.store.ofType("subscription.updated")[0]; up.Extra["previousStatus"] != models.SubRenewalPending || up.Extra["action"] != ActionCancelNow {
			t.Fatalf("updated %+v", up.Extra)
		}
	})
	t.Run("cancel while renewal pending", func(t *testing.T) {
		h := newSubHarness(t, subStart, 7, billing.Month)
		h.plan = func(*subFakeSession) subPayment { return subPayment{} }
		u := h.action(subStart.Add(8*24*time.Hour), ActionCancel)
		h.runUntil(2, nil)
		if u.err != nil || u.state.Status != models.SubCanceled || !u.state.CancelAtPeriodEnd || h.result.CancelReason != CancelReasonRequested {
			t.Fatalf("cancel %+v result %+v", u, h.result)
		}
	})
	t.Run("payment in flight", func(t *testing.T) {
		h := newSubHarness(t, subStart, 7, billing.Month)
		h.plan = func(*subFakeSession) subPayment { return subPayment{pay: true, after: time.Hour, inFlight: time.Hour} }
		trialEnd := subStart.Add(7 * 24 * time.Hour)
		refused := h.action(trialEnd.Add(90*time.Minute), ActionCancelNow)
		later := h.action(trialEnd.Add(3*time.Hour), ActionCancelNow)
		h.runUntil(3, nil)
		if !refused.accepted || refused.errType() != activities.ErrTypePaymentInFlight {
			t.Fatalf("cancel during confirmation: %+v", refused)
		}
		if later.err != nil || later.state.Status != models.SubCanceled {
			t.Fatalf("cancel after: %+v", later)
		}
		want := []string{"subscription.created", "subscription.renewal_due", "subscription.renewed", "subscription.updated", "subscription.canceled"}
		if got := h.store.types(); !slices.Equal(got, want) {
			t.Fatalf("events %v", got)
		}
		if len(h.sessions.voided) != 0 {
			t.Fatalf("voided %v", h.sessions.voided)
		}
	})
}

// A lost signal costs nothing: the grace deadline looks at the session,
// finds it paid and renews instead of going past_due.
func TestSubscriptionLostSignal(t *testing.T) {
	h := newSubHarness(t, subStart, 7, billing.Month)
	h.dropSignals = true
	h.runUntil(2, func() bool { return len(h.carried) == 1 })
	trialEnd := subStart.Add(7 * 24 * time.Hour)
	r := h.store.ofType("subscription.renewed")
	if len(r) != 1 || !r[0].At.Equal(trialEnd.Add(72*time.Hour)) || len(h.store.ofType("subscription.past_due")) != 0 {
		t.Fatalf("events %v, renewed at %v", h.store.types(), r)
	}
}

// A transfer being confirmed when dunning ends holds the cancellation
// until its verdict: paid, the subscription renews.
func TestSubscriptionPaymentInFlightAtDunningEnd(t *testing.T) {
	h := newSubHarness(t, subStart, 7, billing.Month)
	trialEnd := subStart.Add(7 * 24 * time.Hour)
	end := trialEnd.Add(72*time.Hour + 168*time.Hour)
	n := 0
	h.plan = func(s *subFakeSession) subPayment {
		n++
		if n < 5 {
			return subPayment{}
		}
		// The last reminder's session: broadcast a minute before the end,
		// confirmed four minutes after it.
		return subPayment{pay: true, after: end.Add(-time.Minute).Sub(s.OpenedAt), inFlight: 5 * time.Minute}
	}
	h.runUntil(3, func() bool { return len(h.carried) == 1 })
	r := h.store.ofType("subscription.renewed")
	if len(r) != 1 || !r[0].At.Equal(end.Add(4*time.Minute)) || len(h.store.ofType("subscription.canceled")) != 0 {
		t.Fatalf("events %v, renewed %v", h.store.types(), r)
	}
}

// The customer submits a transfer to the last session between the
// workflow's look at it and its void as dunning ends: the void is refused
// (payment in flight), and the cancellation waits for the verdict instead
// of failing the workflow; paid, the subscription renews.
func TestSubscriptionPaymentSubmittedAsDunningEnds(t *testing.T) {
	h := newSubHarness(t, subStart, 7, billing.Month)
	h.plan = func(*subFakeSession) subPayment { return subPayment{} }
	end := subStart.Add(7*24*time.Hour + 72*time.Hour + 168*time.Hour)
	h.sessions.beforeVoid = func(s *subFakeSession) {
		if subOpen(s.Status) || s.Status == models.StatusExpired {
			s.Status = models.StatusBroadcast
			h.at(end.Add(4*time.Minute), func() {
				h.sessions.mu.Lock()
				s.Status = models.StatusComplete
				h.sessions.mu.Unlock()
				h.signal(s)
			})
		}
	}
	h.runUntil(3, func() bool { return len(h.carried) == 1 })
	r := h.store.ofType("subscription.renewed")
	if len(r) != 1 || !r[0].At.Equal(end.Add(4*time.Minute)) || len(h.store.ofType("subscription.canceled")) != 0 {
		t.Fatalf("events %v, renewed %v", h.store.types(), r)
	}
}

// The customer's payment completes between the workflow's look at the
// session and its void as dunning ends: the void finds it paid, and the
// subscription renews; it is not canceled as unpaid right after.
func TestSubscriptionPaidAsDunningEnds(t *testing.T) {
	h := newSubHarness(t, subStart, 7, billing.Month)
	h.plan = func(*subFakeSession) subPayment { return subPayment{} }
	end := subStart.Add(7*24*time.Hour + 72*time.Hour + 168*time.Hour)
	h.sessions.beforeVoid = func(s *subFakeSession) {
		if subOpen(s.Status) || s.Status == models.StatusExpired {
			s.Status = models.StatusComplete
		}
	}
	h.runUntil(3, func() bool { return len(h.carried) == 1 })
	r := h.store.ofType("subscription.renewed")
	if len(r) != 1 || !r[0].At.Equal(end) || len(h.store.ofType("subscription.canceled")) != 0 {
		t.Fatalf("events %v, renewed %v", h.store.types(), r)
	}
	if st := h.carried[0]; st.Status != models.SubActive || st.PaidPeriods != 1 {
		t.Fatalf("carried %+v", st)
	}
}

// The customer cancels the renewal's session on the hosted page an hour
// after it opened: a new session opens at once with the same expiry and
// subscription.renewal_due announces its checkoutUrl, so the customer can
// pay within the grace period (the dead session used to leave nothing to
// pay with until past_due). Paid, it renews.
func TestSubscriptionCancelledInvoiceSessionReopens(t *testing.T) {
	h := newSubHarness(t, subStart, 7, billing.Month)
	trialEnd := subStart.Add(7 * 24 * time.Hour)
	h.cancelThenPay(1)
	h.runUntil(3, func() bool { return len(h.carried) == 1 })
	if got := h.store.types(); !slices.Equal(got, []string{"subscription.created", "subscription.renewal_due", "subscription.renewal_due",
		"subscription.renewed"}) {
		t.Fatalf("events %v", got)
	}
	sessions := h.sessions.all()
	if len(sessions) != 2 || !sessions[1].OpenedAt.Equal(trialEnd.Add(time.Hour)) || !sessions[1].Req.ExpiresAt.Equal(sessions[0].Req.ExpiresAt) {
		t.Fatalf("sessions %+v", sessions)
	}
	due := h.store.ofType("subscription.renewal_due")
	if inv := invoiceOf(t, due[1]); inv["sessionId"] != sessions[1].ID || inv["checkoutUrl"] != "https://pay.example/checkout/"+sessions[1].ID {
		t.Fatalf("second renewal_due %+v", inv)
	}
	if r := h.store.ofType("subscription.renewed"); !r[0].At.Equal(trialEnd.Add(3 * time.Hour)) {
		t.Fatalf("renewed at %v", r[0].At)
	}
}

// The renewal's session fails INVOICE_ALREADY_PAID (another session of the
// invoice paid it first, and the store held this second payment for a
// refund) and its notice comes before the payer's: no new session is
// opened for the paid invoice, and no renewal_due announces one; the
// payer's notice settles it. Every session carries the invoice's number.
func TestSubscriptionInvoicePaidElsewhereIsNotReopened(t *testing.T) {
	h := newSubHarness(t, subStart, 7, billing.Month)
	n := 0
	h.plan = func(s *subFakeSession) subPayment {
		n++
		if n == 1 {
			h.at(s.OpenedAt.Add(time.Hour), func() {
				h.sessions.mu.Lock()
				s.Status, s.Reason = models.StatusFailed, models.ReasonInvoicePaid
				h.sessions.mu.Unlock()
				h.signal(s)
				// The payer's notice, a minute later: the session the
				// store let complete (here the same fake, marked paid).
				h.at(s.OpenedAt.Add(time.Hour+time.Minute), func() {
					h.sessions.mu.Lock()
					s.Status = models.StatusComplete
					h.sessions.mu.Unlock()
					h.signal(s)
				})
			})
			return subPayment{}
		}
		return payAfter(2 * time.Hour)
	}
	h.runUntil(3, func() bool { return len(h.carried) == 1 })
	if got := h.store.types(); !slices.Equal(got, []string{"subscription.created", "subscription.renewal_due", "subscription.renewed"}) {
		t.Fatalf("events %v", got)
	}
	sessions := h.sessions.all()
	if len(sessions) != 1 || sessions[0].Req.Invoice != 1 {
		t.Fatalf("sessions %+v", sessions)
	}
}

// A record whose write committed but whose answer was lost is retried with
// the same sequence number: nothing is written or emitted twice.
func TestSubscriptionRecordRetried(t *testing.T) {
	h := newSubHarness(t, subStart, 0, billing.Month)
	h.store.failAfter = 3
	h.runUntil(3, func() bool { return len(h.carried) == 2 })
	if got := h.store.types(); !slices.Equal(got, []string{"subscription.created", "subscription.renewal_due", "subscription.renewed",
		"subscription.renewal_due", "subscription.renewed"}) {
		t.Fatalf("events %v", got)
	}
	if h.store.calls != 5+3 {
		t.Fatalf("%d store calls", h.store.calls)
	}
}

// The validator refuses actions that do not apply, before they reach the
// history; refused actions change nothing.
func TestSubscriptionActionValidation(t *testing.T) {
	h := newSubHarness(t, subStart, 0, billing.Month)
	h.plan = func(*subFakeSession) subPayment { return subPayment{} }
	due := subStart.Add(time.Hour) // renewal_pending: the first invoice is unpaid
	cases := map[string]*subUpdate{
		"pause":   h.action(due, ActionPause),
		"resume":  h.action(due, ActionResume),
		"refund":  h.action(due, "refund"),
		"cancel1": h.action(due.Add(time.Hour), ActionCancelNow),
	}
	h.runUntil(2, nil)
	for _, name := range []string{"pause", "resume", "refund"} {
		u := cases[name]
		if u.accepted || u.rejected == nil || u.errType() != ErrTypeActionNotAllowed {
			t.Errorf("%s: %+v", name, u)
		}
	}
	if u := cases["cancel1"]; u.err != nil || u.state.Status != models.SubCanceled {
		t.Errorf("cancel_now %+v", u)
	}
	if got := h.store.types(); !slices.Equal(got, []string{"subscription.created", "subscription.renewal_due", "subscription.updated", "subscription.canceled"}) {
		t.Fatalf("events %v", got)
	}
	// A canceled subscription's workflow has ended; had it not, every action
	// would be refused.
	ended := &subscriptionRun{st: SubscriptionState{Status: models.SubCanceled}}
	for _, a := range SubscriptionActions {
		var appErr *temporal.ApplicationError
		if err := ended.actionError(a); !errors.As(err, &appErr) || appErr.Type() != ErrTypeActionNotAllowed {
			t.Errorf("%s on a canceled subscription: %v", a, err)
		}
	}
}

// num reads a JSON number (an event field after the activity round trip).
func num(v any) int {
	switch n := v.(type) {
	case float64:
		return int(n)
	case int:
		return n
	}
	return -1
}

// Weekly, yearly and daily intervals and interval counts place invoices
// where billing says.
func TestSubscriptionIntervals(t *testing.T) {
	for _, tc := range []struct {
		interval billing.Interval
		count    int
	}{{billing.Week, 2}, {billing.Year, 1}, {billing.Day, 3}, {billing.Month, 3}} {
		t.Run(fmt.Sprintf("%d %s", tc.count, tc.interval), func(t *testing.T) {
			h := newSubHarness(t, subStart, 0, tc.interval)
			h.st.IntervalCount = tc.count
			h.st.CurrentPeriodEnd = billing.PeriodEnd(subStart, tc.interval, tc.count, 1)
			h.runUntil(3, func() bool { return len(h.carried) == 3 })
			var got []time.Time
			for _, d := range h.store.ofType("subscription.renewal_due") {
				got = append(got, d.At)
			}
			for i := range got {
				if want := billing.PeriodEnd(subStart, tc.interval, tc.count, i); !got[i].Equal(want) {
					t.Fatalf("invoice %d at %s, want %s", i+1, got[i], want)
				}
			}
		})
	}
}

// A renewal paid short, accepted by the merchant: during past_due the
// merchant resolves the customer's payment exception into the
// subscription. The invoice's session is voided, the exception recorded
// (once) for the subscription, and the invoice's period renewed on its
// anchored dates with subscription.renewed naming the exception and the
// transaction; the next invoice follows on the calendar.
func TestSubscriptionSettledFromException(t *testing.T) {
	h := newSubHarness(t, subStart, 0, billing.Month)
	n := 0
	h.plan = func(*subFakeSession) subPayment {
		n++
		if n == 2 || n == 3 {
			return subPayment{} // the renewal and its past_due session: paid short, outside them
		}
		return payAfter(time.Hour)
	}
	feb28 := billing.PeriodEnd(subStart, billing.Month, 1, 1)
	mar31 := billing.PeriodEnd(subStart, billing.Month, 1, 2)
	pastDue := feb28.Add(72 * time.Hour)
	u := h.settle(pastDue.Add(10*time.Hour), "exc_1")
	h.runUntil(6, func() bool { return len(h.carried) == 3 })
	if !u.accepted || u.err != nil || u.state.Status != models.SubActive || !u.state.CurrentPeriodStart.Equal(feb28) ||
		!u.state.CurrentPeriodEnd.Equal(mar31) || u.state.Invoice != nil {
		t.Fatalf("settle %+v (%s)", u, u.errType())
	}
	want := []string{"subscription.created", "subscription.renewal_due", "subscription.renewed", "subscription.renewal_due",
		"subscription.past_due", "subscription.renewed", "subscription.renewal_due", "subscription.renewed"}
	if got := h.store.types(); !slices.Equal(got, want) {
		t.Fatalf("events %v", got)
	}
	sessions := h.sessions.all()
	if len(h.sessions.voided) != 1 || h.sessions.voided[0] != sessions[2].ID {
		t.Fatalf("voided %v, want the past_due session %s", h.sessions.voided, sessions[2].ID)
	}
	if len(h.exceptions.requests) != 1 || h.exceptions.requests[0] != (activities.InvoiceExceptionRequest{ExceptionID: "exc_1",
		SubscriptionID: subID, Invoice: 2, MerchantID: "mer_1", Mode: "test", Note: "accepted short"}) {
		t.Fatalf("exception requests %+v", h.exceptions.requests)
	}
	paid := h.store.ofType("subscription.renewed")[1]
	inv := invoiceOf(t, paid)
	if !paid.At.Equal(pastDue.Add(10*time.Hour)) || paid.Record.Status != models.SubActive || !paid.Record.CurrentPeriodStart.Equal(feb28) ||
		inv["exceptionId"] != "exc_1" || inv["transactionId"] != "txn-exc_1" || inv["sessionId"] != nil || num(inv["number"]) != 2 ||
		paid.Extra["transactionId"] != "txn-exc_1" || paid.Extra["txHash"] != "0xfeedexc_1" {
		t.Fatalf("renewed by the exception %+v (%v) at %s", inv, paid.Extra, paid.At)
	}
	// The run continued as new with the renewal, as after a paid session.
	if c := h.carried[1]; c.Invoice != nil || c.Status != models.SubActive || c.PaidPeriods != 2 {
		t.Fatalf("carried after the renewal %+v", c)
	}
	if next := h.store.ofType("subscription.renewal_due")[2]; !next.At.Equal(mar31) {
		t.Fatalf("next invoice at %s, want %s", next.At, mar31)
	}
}

// unpaidThenPaid is a customer who leaves the first session unpaid and
// pays each later one an hour after it opens.
func unpaidThenPaid() func(*subFakeSession) subPayment {
	n := 0
	return func(*subFakeSession) subPayment {
		n++
		if n == 1 {
			return subPayment{}
		}
		return payAfter(time.Hour)
	}
}

// The settle update's refusals: nothing due; a transfer to the invoice's
// session being confirmed (its verdict decides); the exception closed
// meanwhile (the invoice gets a session again); the session found paid as
// it is voided (it renews; the exception stays open).
func TestSubscriptionSettleRefusals(t *testing.T) {
	t.Run("nothing due", func(t *testing.T) {
		h := newSubHarness(t, subStart, 7, billing.Month)
		u := h.settle(subStart.Add(24*time.Hour), "exc_1")
		h.runUntil(2, func() bool { return len(h.carried) == 1 })
		if u.rejected == nil || u.errType() != ErrTypeNoOpenInvoice || len(h.exceptions.requests) != 0 {
			t.Fatalf("settle while trialing: %+v (%s)", u, u.errType())
		}
	})
	t.Run("payment in flight", func(t *testing.T) {
		h := newSubHarness(t, subStart, 0, billing.Month)
		h.plan = func(*subFakeSession) subPayment {
			return subPayment{pay: true, after: time.Hour, inFlight: 2 * time.Hour}
		}
		u := h.settle(subStart.Add(90*time.Minute), "exc_1")
		h.runUntil(2, func() bool { return len(h.carried) == 1 })
		if !u.accepted || u.errType() != activities.ErrTypePaymentInFlight || len(h.exceptions.requests) != 0 {
			t.Fatalf("settle during confirmation: %+v (%s)", u, u.errType())
		}
		if r := h.store.ofType("subscription.renewed"); len(r) != 1 || invoiceOf(t, r[0])["sessionId"] != h.sessions.all()[0].ID {
			t.Fatalf("renewed %+v", r)
		}
	})
	t.Run("exception closed meanwhile", func(t *testing.T) {
		h := newSubHarness(t, subStart, 0, billing.Month)
		h.plan = unpaidThenPaid()
		h.exceptions.refuse["exc_gone"] = true
		u := h.settle(subStart.Add(2*time.Hour), "exc_gone")
		h.runUntil(2, func() bool { return len(h.carried) == 1 })
		if !u.accepted || u.errType() != activities.ErrTypeExceptionRefused {
			t.Fatalf("settle with a closed exception: %+v (%s)", u, u.errType())
		}
		want := []string{"subscription.created", "subscription.renewal_due", "subscription.renewal_due", "subscription.renewed"}
		if got := h.store.types(); !slices.Equal(got, want) {
			t.Fatalf("events %v", got)
		}
		s := h.sessions.all()
		if len(s) != 2 || len(h.sessions.voided) != 1 || h.sessions.voided[0] != s[0].ID || !s[1].Req.ExpiresAt.Equal(s[0].Req.ExpiresAt) {
			t.Fatalf("sessions %d, voided %v", len(s), h.sessions.voided)
		}
		if due := invoiceOf(t, h.store.ofType("subscription.renewal_due")[1]); due["sessionId"] != s[1].ID {
			t.Fatalf("the new session is not announced: %+v", due)
		}
	})
	t.Run("an older session's transfer in flight", func(t *testing.T) {
		h := newSubHarness(t, subStart, 0, billing.Month)
		h.plan = func(*subFakeSession) subPayment { return subPayment{} }
		pastDue := subStart.Add(72 * time.Hour)
		// The grace session took a transfer as it expired (the past_due
		// step had already opened the next one).
		h.at(pastDue.Add(time.Hour), func() {
			grace := h.sessions.all()[0]
			h.sessions.mu.Lock()
			grace.Status = models.StatusBroadcast
			h.sessions.mu.Unlock()
		})
		u := h.settle(pastDue.Add(2*time.Hour), "exc_1")
		voided := -1
		h.at(pastDue.Add(3*time.Hour), func() {
			grace := h.sessions.all()[0]
			h.sessions.mu.Lock()
			voided = len(h.sessions.voided)
			grace.Status = models.StatusFailed // the transfer bounced
			h.sessions.mu.Unlock()
			h.signal(grace)
		})
		h.runUntil(2, nil) // dunning ends it, unpaid
		if !u.accepted || u.errType() != activities.ErrTypePaymentInFlight || len(h.exceptions.requests) != 0 || voided != 0 {
			t.Fatalf("settle while an older session's transfer is confirmed: %+v (%s), %d voided", u, u.errType(), voided)
		}
	})
	t.Run("one exception pays one invoice", func(t *testing.T) {
		// Weekly, the second invoice accepted late (its period over): the
		// third is issued at once, and the same exception again is refused.
		h := newSubHarness(t, subStart, 0, billing.Week)
		n := 0
		h.plan = func(*subFakeSession) subPayment {
			n++
			if n == 1 || n > 5 {
				return payAfter(time.Hour)
			}
			return subPayment{}
		}
		week1 := subStart.Add(7 * 24 * time.Hour)
		first := h.settle(week1.Add(8*24*time.Hour), "exc_1")
		again := h.settle(week1.Add(8*24*time.Hour+time.Minute), "exc_1")
		h.runUntil(6, func() bool { return len(h.carried) == 3 })
		if first.err != nil || again.errType() != activities.ErrTypeExceptionRefused {
			t.Fatalf("settles %+v (%s) and %+v (%s)", first, first.errType(), again, again.errType())
		}
		renewed := h.store.ofType("subscription.renewed")
		paidBy := 0
		for _, r := range renewed {
			if invoiceOf(t, r)["exceptionId"] == "exc_1" {
				paidBy++
			}
		}
		if paidBy != 1 {
			t.Fatalf("exc_1 paid %d invoices: %v", paidBy, h.store.types())
		}
	})
	t.Run("session paid as it is voided", func(t *testing.T) {
		h := newSubHarness(t, subStart, 0, billing.Month)
		h.plan = unpaidThenPaid()
		h.sessions.beforeVoid = func(s *subFakeSession) { s.Status = models.StatusComplete }
		u := h.settle(subStart.Add(2*time.Hour), "exc_1")
		h.runUntil(3, func() bool { return len(h.carried) == 1 })
		if !u.accepted || u.errType() != ErrTypeInvoicePaid || len(h.exceptions.requests) != 0 {
			t.Fatalf("settle as the session was paid: %+v (%s)", u, u.errType())
		}
		r := h.store.ofType("subscription.renewed")
		if len(r) < 1 || invoiceOf(t, r[0])["sessionId"] != h.sessions.all()[0].ID || !r[0].At.Equal(subStart.Add(2*time.Hour)) {
			t.Fatalf("renewed %v", h.store.types())
		}
	})
}

// An older session of the open invoice whose transfer is still being
// confirmed (broadcast as it expired, after the next step had opened a new
// session) is voided, or waited for, by a cancel too
// (cancelVoidsEveryVersion): cancel_now is refused until its verdict, and
// dunning's end waits for it; paid, it renews the subscription instead of
// its being canceled. Before, only the current session was voided and such
// a payment was recorded for a canceled subscription.
func TestSubscriptionCancelVoidsEverySession(t *testing.T) {
	pastDue := subStart.Add(72 * time.Hour)
	// olderInFlight makes the grace session take a transfer an hour into
	// past_due, whose verdict (status) comes at `decided`.
	olderInFlight := func(h *subHarness, decided time.Time, status string) {
		h.plan = func(*subFakeSession) subPayment { return subPayment{} }
		h.at(pastDue.Add(time.Hour), func() {
			grace := h.sessions.all()[0]
			h.sessions.mu.Lock()
			grace.Status = models.StatusBroadcast
			h.sessions.mu.Unlock()
		})
		h.at(decided, func() {
			grace := h.sessions.all()[0]
			h.sessions.mu.Lock()
			grace.Status = status
			h.sessions.mu.Unlock()
			h.signal(grace)
		})
	}
	t.Run("cancel_now", func(t *testing.T) {
		h := newSubHarness(t, subStart, 0, billing.Month)
		olderInFlight(h, pastDue.Add(3*time.Hour), models.StatusFailed)
		refused := h.action(pastDue.Add(2*time.Hour), ActionCancelNow)
		later := h.action(pastDue.Add(4*time.Hour), ActionCancelNow)
		h.runUntil(2, nil)
		if refused.errType() != activities.ErrTypePaymentInFlight {
			t.Fatalf("cancel_now while an older session's transfer is confirmed: %+v (%s)", refused, refused.errType())
		}
		s := h.sessions.all()
		if later.err != nil || later.state.Status != models.SubCanceled || len(h.sessions.voided) != 1 || h.sessions.voided[0] != s[1].ID {
			t.Fatalf("cancel_now after its verdict: %+v, voided %v", later, h.sessions.voided)
		}
	})
	t.Run("paid as dunning ends", func(t *testing.T) {
		h := newSubHarness(t, subStart, 0, billing.Month)
		ends := pastDue.Add(168 * time.Hour)
		olderInFlight(h, ends.Add(2*time.Hour), models.StatusComplete)
		h.runUntil(2, func() bool { return len(h.carried) == 1 })
		if len(h.store.ofType("subscription.canceled")) != 0 {
			t.Fatalf("canceled while an older session's transfer was confirmed: %v", h.store.types())
		}
		r := h.store.ofType("subscription.renewed")
		if len(r) != 1 || invoiceOf(t, r[0])["sessionId"] != h.sessions.all()[0].ID || r[0].At.Before(ends) {
			t.Fatalf("renewed %v", h.store.types())
		}
	})
}

// TestSubscriptionCancelWithAnOlderSessionInFlight: the merchant cancels
// while an older session of the invoice (the grace period's, broadcast as
// it expired) is being confirmed. The cancel is taken (cancelAtPeriodEnd)
// and, since cancelInFlightRestVersion, voids the current session too, so
// the customer cannot pay a period the merchant canceled; when the older
// transfer bounces the subscription ends; and while it is in flight the
// steps wait on InFlightRecheck instead of cancelling again at once,
// hundreds of times in the same instant.
func TestSubscriptionCancelWithAnOlderSessionInFlight(t *testing.T) {
	pastDue := subStart.Add(72 * time.Hour)
	// grace is the invoice's first session; the caller holds no lock
	// (graceLocked: the caller holds h.sessions.mu).
	grace := func(h *subHarness) *subFakeSession { return h.sessions.all()[0] }
	graceLocked := func(h *subHarness) *subFakeSession { return h.sessions.byID[h.sessions.order[0]] }
	setGrace := func(h *subHarness, status string) {
		g := grace(h)
		h.sessions.mu.Lock()
		g.Status = status
		h.sessions.mu.Unlock()
	}
	inFlight := func(h *subHarness) {
		h.plan = func(*subFakeSession) subPayment { return subPayment{} }
		h.at(pastDue.Add(time.Hour), func() { setGrace(h, models.StatusBroadcast) })
	}
	t.Run("bounced", func(t *testing.T) {
		h := newSubHarness(t, subStart, 0, billing.Month)
		inFlight(h)
		h.at(pastDue.Add(3*time.Hour), func() {
			setGrace(h, models.StatusFailed)
			h.signal(grace(h))
		})
		// The customer would pay the current session two hours later.
		h.at(pastDue.Add(5*time.Hour), func() {
			cur := h.sessions.all()[1]
			h.sessions.mu.Lock()
			open := subOpen(cur.Status)
			if open {
				cur.Status = models.StatusComplete
			}
			h.sessions.mu.Unlock()
			if open {
				h.signal(cur)
			}
		})
		c := h.action(pastDue.Add(2*time.Hour), ActionCancel)
		h.runUntil(3, nil)
		if c.err != nil || !c.state.CancelAtPeriodEnd {
			t.Fatalf("cancel while the older session's transfer is confirmed: %+v (%s)", c, c.errType())
		}
		if s := h.sessions.all(); len(h.sessions.voided) != 1 || h.sessions.voided[0] != s[1].ID {
			t.Fatalf("voided %v, want the current session", h.sessions.voided)
		}
		want := []string{"subscription.created", "subscription.renewal_due", "subscription.past_due", "subscription.updated", "subscription.canceled"}
		if got := h.store.types(); !slices.Equal(got, want) {
			t.Fatalf("events %v, want %v", got, want)
		}
		ended := h.store.ofType("subscription.canceled")[0]
		if !ended.At.Equal(pastDue.Add(3*time.Hour)) || ended.Extra["reason"] != CancelReasonRequested {
			t.Fatalf("canceled %+v at %s, want at the bounce", ended.Extra, ended.At)
		}
	})
	t.Run("two in flight", func(t *testing.T) {
		// The grace session confirming, the past_due one's transfer
		// broadcast as the first reminder replaced it, the reminder's
		// open: the cancel voids the reminder's too.
		h := newSubHarness(t, subStart, 0, billing.Month)
		inFlight(h)
		h.at(pastDue.Add(24*time.Hour+time.Minute), func() {
			second := h.sessions.all()[1]
			h.sessions.mu.Lock()
			second.Status = models.StatusBroadcast
			h.sessions.mu.Unlock()
		})
		h.action(pastDue.Add(25*time.Hour), ActionCancel)
		// The customer would pay the reminder's session after the cancel.
		h.at(pastDue.Add(25*time.Hour+30*time.Minute), func() {
			all := h.sessions.all()
			if len(all) < 3 {
				return
			}
			h.sessions.mu.Lock()
			open := subOpen(all[2].Status)
			if open {
				all[2].Status = models.StatusComplete
			}
			h.sessions.mu.Unlock()
			if open {
				h.signal(all[2])
			}
		})
		decided := pastDue.Add(26 * time.Hour)
		h.at(decided, func() {
			all := h.sessions.all()
			h.sessions.mu.Lock()
			all[0].Status, all[1].Status = models.StatusFailed, models.StatusFailed
			h.sessions.mu.Unlock()
			h.signal(all[0])
			h.signal(all[1])
		})
		h.runUntil(3, nil)
		all := h.sessions.all()
		if len(all) != 3 || len(h.sessions.voided) != 1 || h.sessions.voided[0] != all[2].ID {
			t.Fatalf("%d sessions, voided %v: want the reminder's voided", len(all), h.sessions.voided)
		}
		if got := h.store.ofType("subscription.canceled"); len(got) != 1 || !got[0].At.Equal(decided) || len(h.store.ofType("subscription.renewed")) != 0 {
			t.Fatalf("events %v", h.store.types())
		}
	})
	t.Run("held replacement", func(t *testing.T) {
		// The customer cancelled the current session and its
		// replacement is refused for now (held): after the cancel, no
		// replacement opens when the hold ends.
		h := newSubHarness(t, subStart, 0, billing.Month)
		inFlight(h)
		h.at(pastDue.Add(2*time.Hour), func() {
			h.sessions.mu.Lock()
			h.sessions.refuse = func() error { return apperr.Invalid("network", "base_sepolia is not configured on this server") }
			h.sessions.mu.Unlock()
			second := h.sessions.all()[1]
			h.sessions.mu.Lock()
			second.Status = models.StatusCancelled
			h.sessions.mu.Unlock()
			h.signal(second)
		})
		h.action(pastDue.Add(150*time.Minute), ActionCancel)
		h.at(pastDue.Add(160*time.Minute), func() {
			h.sessions.mu.Lock()
			h.sessions.refuse = nil
			h.sessions.mu.Unlock()
		})
		decided := pastDue.Add(5 * time.Hour)
		h.at(decided, func() {
			setGrace(h, models.StatusFailed)
			h.signal(grace(h))
		})
		h.runUntil(3, nil)
		if n := len(h.sessions.all()); n != 2 {
			t.Fatalf("%d sessions: a replacement opened after the cancel", n)
		}
		if got := h.store.ofType("subscription.canceled"); len(got) != 1 || !got[0].At.Equal(decided) {
			t.Fatalf("events %v", h.store.types())
		}
	})
	t.Run("in flight past a reminder", func(t *testing.T) {
		h := newSubHarness(t, subStart, 0, billing.Month)
		inFlight(h)
		// Voids per instant: the code before cancelled again at once at
		// each step past the deadline; a way out after 300 (the verdict).
		perInstant, most := map[time.Time]int{}, 0
		h.sessions.beforeVoid = func(s *subFakeSession) {
			now := h.env.Now()
			perInstant[now]++
			most = max(most, perInstant[now])
			if perInstant[now] == 300 {
				graceLocked(h).Status = models.StatusFailed
			}
		}
		h.action(pastDue.Add(2*time.Hour), ActionCancel)
		decided := pastDue.Add(30 * time.Hour) // past the first reminder's time
		h.at(decided, func() {
			setGrace(h, models.StatusFailed)
			h.signal(grace(h))
		})
		h.runUntil(3, nil)
		if most > 4 {
			t.Fatalf("%d voids in one instant while the transfer was in flight", most)
		}
		if got := h.store.ofType("subscription.canceled"); len(got) != 1 || !got[0].At.Equal(decided) {
			t.Fatalf("canceled %v", h.store.types())
		}
	})
}

// TestSubscriptionActionAtTheStart: an action that reaches the workflow's
// first task (a PATCH right after the POST's 201) is recorded after
// subscription.created. Before, the two records raced: created reached the
// store after canceled, carrying "canceled", or a pause's updated came
// before any created (found by an audit helper).
func TestSubscriptionActionAtTheStart(t *testing.T) {
	for _, action := range []string{ActionCancelNow, ActionPause} {
		t.Run(action, func(t *testing.T) {
			h := newSubHarness(t, subStart, 14, billing.Month)
			u := h.action(subStart, action)
			h.action(subStart.Add(400*24*time.Hour), ActionCancelNow) // ends a paused one
			h.runUntil(3, nil)
			if u.err != nil || u.rejected != nil {
				t.Fatalf("%s at the start: %v %v", action, u.err, u.rejected)
			}
			ev := h.store.emitted()
			if len(ev) < 2 || ev[0].Type != "subscription.created" || ev[0].Record.Status != models.SubTrialing {
				t.Fatalf("first record %+v", ev[0])
			}
			for _, e := range ev[1:] {
				if e.Type == "subscription.created" {
					t.Fatalf("a second created: %+v", e)
				}
			}
		})
	}
}
