package workflows

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/paygate/paygate/activities"
	"github.com/paygate/paygate/billing"
	"github.com/paygate/paygate/models"
)

// Names of the subscription workflow's handlers.
const (
	// SubscriptionActionUpdate runs a PATCH /api/subscriptions action and
	// answers the subscription as the workflow left it.
	SubscriptionActionUpdate = "action"
	// SubscriptionSessionSignal carries an activities.SessionNotice: one of
	// the subscription's invoice sessions ended (sent by the checkout side).
	SubscriptionSessionSignal = "session_finished"
	// SubscriptionStatusQuery answers the workflow's state.
	SubscriptionStatusQuery = "status"
	// SubscriptionSettleUpdate takes a payment exception's transfer as the
	// open invoice's payment (POST /api/payment-exceptions/{id}/resolve
	// with subscriptionId): a SettleRequest, answered with the state.
	SubscriptionSettleUpdate = "settle_exception"
)

// SettleRequest is the settle update's argument: the exception whose
// transfer the merchant accepts for the open invoice (short, late, from
// another wallet), and the merchant's note on it.
type SettleRequest struct {
	ExceptionID string
	Note        string
}

// Refusals of the settle update (409).
const (
	// ErrTypeNoOpenInvoice: nothing is due (trialing, active, paused,
	// canceled).
	ErrTypeNoOpenInvoice = "NoOpenInvoice"
	// ErrTypeInvoicePaid: the invoice's own session turned out paid when
	// it was voided; the exception stays open.
	ErrTypeInvoicePaid = "InvoicePaid"
)

// Actions of PATCH /api/subscriptions.
const (
	// ActionCancel cancels at the end of the current period (SPEC.md's
	// sample: the status stays, cancelAtPeriodEnd becomes true). While a
	// renewal is due the period has already ended, so it cancels at once.
	ActionCancel = "cancel"
	// ActionCancelNow cancels at once.
	ActionCancelNow = "cancel_now"
	// ActionPause stops the billing clock (trialing or active only).
	ActionPause = "pause"
	// ActionResume starts it again; the period end moves by the paused time.
	ActionResume = "resume"
)

// SubscriptionActions lists the actions in the order the API names them.
var SubscriptionActions = []string{ActionCancel, ActionCancelNow, ActionPause, ActionResume}

// ErrTypeActionNotAllowed: the action does not apply to the subscription as
// it is (400). activities.ErrTypePaymentInFlight is the other refusal (409).
const ErrTypeActionNotAllowed = "ActionNotAllowed"

// Why a subscription ended (Subscription.CancelReason, subscription.canceled).
const (
	CancelReasonRequested = "requested"
	CancelReasonPeriodEnd = "cancel_at_period_end"
	CancelReasonUnpaid    = "unpaid"
)

// Search attributes of subscriptions (with MerchantIDAttr and NetworkAttr),
// registered with the checkout ones (temporaldev.PaygateSearchAttributes).
var (
	SubscriptionStatusAttr = temporal.NewSearchAttributeKeyKeyword("SubscriptionStatus")
	CustomerIDAttr         = temporal.NewSearchAttributeKeyKeyword("CustomerId")
)

// SubscriptionWorkflowID is the workflow id of a subscription: subscription:<id>.
func SubscriptionWorkflowID(id string) string { return "subscription:" + id }

// SubscriptionPolicy is the dunning schedule and the billing clock's knobs.
type SubscriptionPolicy struct {
	// GracePeriod: an invoice unpaid this long after it is issued makes the
	// subscription past_due.
	GracePeriod time.Duration
	// Reminders are the offsets from past_due at which a reminder goes out
	// (subscription.renewal_due again, with a fresh session if needed).
	Reminders []time.Duration
	// DunningPeriod: still unpaid this long after past_due, it is canceled.
	DunningPeriod time.Duration
	// InFlightRecheck is how often a deadline that finds a payment being
	// confirmed looks again (the signal normally comes first).
	InFlightRecheck time.Duration
	// BlockedRecheck is how often a subscription that cannot be billed as
	// it stands (Unbillable) tries its step again (an hour when unset).
	BlockedRecheck time.Duration
	// FixedPeriod, when set (tests, demos), makes every period last this
	// long instead of its calendar interval.
	FixedPeriod time.Duration
}

// DefaultSubscriptionPolicy: 3 days of grace, reminders 1, 3 and 5 days
// into past_due, canceled 7 days after past_due.
func DefaultSubscriptionPolicy() SubscriptionPolicy {
	return SubscriptionPolicy{GracePeriod: 72 * time.Hour, Reminders: []time.Duration{24 * time.Hour, 72 * time.Hour, 120 * time.Hour},
		DunningPeriod: 168 * time.Hour, InFlightRecheck: time.Minute, BlockedRecheck: time.Hour}
}

// Validate checks the policy: positive durations, reminders ascending and
// inside the dunning period.
func (p SubscriptionPolicy) Validate() error {
	if p.GracePeriod <= 0 || p.DunningPeriod <= 0 {
		return errors.New("grace and dunning periods must be positive")
	}
	prev := time.Duration(0)
	for _, r := range p.Reminders {
		if r <= prev || r >= p.DunningPeriod {
			return fmt.Errorf("reminder offsets must ascend and stay below the dunning period (%s)", p.DunningPeriod)
		}
		prev = r
	}
	if p.FixedPeriod < 0 || p.InFlightRecheck < 0 || p.BlockedRecheck < 0 {
		return errors.New("durations must not be negative")
	}
	return nil
}

// Invoice is the payment due for one period, and the checkout sessions
// opened for it.
type Invoice struct {
	// Number counts the subscription's invoices from 1.
	Number      int
	PeriodStart time.Time
	PeriodEnd   time.Time
	IssuedAt    time.Time
	// PastDueAt is when the grace period ran out (zero before).
	PastDueAt time.Time
	// Reminders counts the reminders sent during past_due.
	Reminders int
	// SessionID is the current session; Sessions lists every one opened
	// for this invoice (any of them paying settles it).
	SessionID        string
	SessionExpiresAt time.Time
	CheckoutURL      string
	Sessions         []string
	// Reopened counts the sessions opened again after the current one
	// ended unpaid before its expiry (cancelled by the customer, failed).
	Reopened int
	// ReopenAt, when set, is when the session that replaces an ended one,
	// refused as unbillable, is tried again (billing on hold).
	ReopenAt time.Time
}

// maxReopened bounds the sessions an invoice opens again between two
// steps of its schedule (each says so with subscription.renewal_due).
const maxReopened = 3

// reopenPerStepVersion marks the workflows whose budget of reopened
// sessions starts again at each step of the schedule (past_due, each
// reminder), as maxReopened says. Before, it was spent once per invoice:
// a customer who cancelled three sessions in the grace period had no
// session to pay with from the past_due one's cancellation until the next
// reminder, a day or more later.
const reopenPerStepVersion = "reopen-budget-per-step"

// reopenVersion marks the workflows that open a new session when the
// invoice's current one ends unpaid before its expiry (histories from
// before only logged it).
const reopenVersion = "reopen-ended-invoice-session"

// resumeShiftsAnchorVersion marks the workflows whose resume moves the
// billing anchor by the paused time. Before, the anchor became the current
// period's end, which may have been clamped to a shorter month's last day:
// a subscription anchored on January 31, paused and resumed in February,
// was billed on the 28th of every month after.
const resumeShiftsAnchorVersion = "resume-shifts-anchor"

// cancelInFlightVersion marks the workflows that take SPEC.md's cancel
// while a renewal's transfer is being confirmed: cancelAtPeriodEnd is set
// and the transfer's verdict decides (paid, the period it paid for is the
// last; unpaid, the subscription ends then). Before, the action failed
// (409, nothing recorded) and a transfer that then confirmed renewed the
// subscription for a period the merchant had asked to cancel.
const cancelInFlightVersion = "cancel-while-payment-in-flight"

// cancelVoidsEveryVersion marks the workflows whose cancel voids every
// session of the open invoice, older ones first, as the settle update does
// (version 1; asked only when the invoice has more than one session).
// Before, only the current one was voided: an older session's transfer,
// broadcast as it expired and confirmed after the cancel, was recorded as
// a payment of a canceled subscription.
const cancelVoidsEveryVersion = "cancel-voids-every-session"

// pausedCancelVersion marks the workflows in which a cancel (at period
// end) of a paused subscription, or a pause of one that cancels at period
// end, ends it at the end of its current period though it is paused
// (SubscriptionState.PausedCancelEnds). Before, a paused subscription had
// no deadline: the cancel answered cancelAtPeriodEnd and never took effect
// unless someone resumed it.
const pausedCancelVersion = "cancel-while-paused-ends-at-period-end"

// pausedCancelReaskVersion marks the workflows in which a cancel asked
// again of a paused subscription that already cancels at period end (its
// first cancel taken by a release before pausedCancelVersion) makes it end
// at its period's end. Its own change id: the run that took the first
// cancel has pausedCancelVersion read (and cached) as DefaultVersion.
const pausedCancelReaskVersion = "cancel-while-paused-reask"

// resumeNextStartVersion marks the workflows whose resume sets the next
// invoice's start to the current period's end moved by the paused time
// (SubscriptionState.NextStart), the date the subscription reports. Before,
// the next invoice came on the anchor's calendar (the anchor moved by the
// pause), which differs from the reported period end where a month's end
// clamps: anchored on January 29, paused a day in February, the invoice came
// on February 28 while currentPeriodEnd said March 1 (the customer lost the
// paused day).
const resumeNextStartVersion = "resume-next-invoice-at-period-end"

// billingBlockedVersion marks the workflows in which a step that cannot
// open its invoice's session because the subscription cannot be billed as
// it stands (activities.ErrTypeUnbillable: its network no longer
// configured, its receiving wallet proven by another merchant or a contract
// wallet proven on other networks only) holds and
// tries again every BlockedRecheck, with the reason in the read model
// (billingError) and subscription.updated. Before, the activity's failure
// failed the workflow: the subscription stayed active, never billed again,
// and nobody was told.
const billingBlockedVersion = "unbillable-holds"

// cancelInFlightRestVersion marks the workflows whose cancel taken while an
// invoice session's transfer is being confirmed (cancelInFlightVersion)
// also voids the invoice's sessions after that one, holds for the
// verdict (InFlightRecheck) instead of looking again at once, and ends the
// subscription when any of the invoice's sessions ends unpaid (the one in
// flight may be an older one). Before, an older session's transfer in
// flight left the current session payable after the cancel (the customer
// paid it and was renewed for a period the merchant had canceled), its
// bounce ended nothing, and each step past the deadline cancelled again
// at once, hundreds of activities in the same instant, until the verdict.
const cancelInFlightRestVersion = "cancel-in-flight-voids-the-rest"

// heldLastWindowVersion marks the workflows in which dunning that runs out
// while billing is on hold (the last window's session ended unpaid and its
// replacement was refused) does not cancel the subscription as unpaid: the
// end waits for a session, which comes with the time the hold took from
// the customer (resumeDunning). Before, the customer, who had nothing to
// pay with, was canceled.
const heldLastWindowVersion = "held-last-window-waits"

// createdFirstVersion marks the workflows whose subscription.created is
// recorded under the actions' lock: an action that reached the first
// workflow task (a cancel or a pause sent right after the create) is
// recorded after it. Before, the two records raced: subscription.created
// could reach the receiver after subscription.canceled, or carry a status
// other than the first (a receiver provisioning on it would provision a
// canceled subscription), and an update arrive before any created.
const createdFirstVersion = "created-before-actions"

// SubscriptionState is the whole state of a subscription's workflow: the
// input of every run, carried whole by continue-as-new.
type SubscriptionState struct {
	SubscriptionID  string
	MerchantID      string
	Mode            string
	CustomerID      string
	Network         string
	BillingInterval string
	IntervalCount   int
	Policy          SubscriptionPolicy

	Status             string
	CurrentPeriodStart time.Time
	CurrentPeriodEnd   time.Time
	// TrialEnd is the end of the free trial (zero: none).
	TrialEnd time.Time
	// Anchor and NextPeriod place the next invoice: it pays
	// [PeriodEnd(Anchor, NextPeriod), PeriodEnd(Anchor, NextPeriod+1)) and is
	// issued at its start. A resume re-anchors on the moved period end.
	Anchor     time.Time
	NextPeriod int
	// NextStart, when set (after a resume, resumeNextStartVersion), is the
	// start of the next invoice's period in place of the anchor's
	// PeriodEnd(Anchor, NextPeriod); its end still counts from the anchor.
	NextStart         time.Time
	CancelAtPeriodEnd bool
	PausedAt          time.Time
	PausedFrom        string
	// PausedCancelEnds: paused and canceling at period end, it ends at
	// CurrentPeriodEnd though paused (pausedCancelVersion).
	PausedCancelEnds bool
	CanceledAt       time.Time
	CancelReason     string
	// Invoice is the open invoice (renewal_pending, past_due), else nil.
	Invoice *Invoice
	// Invoices counts invoices issued; PaidPeriods those paid.
	Invoices    int
	PaidPeriods int
	// LatestSessionID is the session of the latest invoice.
	LatestSessionID string
	// HoldUntil defers a deadline while a payment is being confirmed, or
	// while the subscription cannot be billed (BillingError).
	HoldUntil time.Time
	// BillingError says why the last step could not open its invoice's
	// session ("" once one opens; billingBlockedVersion).
	BillingError string
	// BlockedSince is when billing was first put on hold (zero once a
	// session opens): dunning stands still meanwhile.
	BlockedSince time.Time
	// Seq numbers the changes written to the read model.
	Seq int64
	// Created: subscription.created has been emitted.
	Created bool
	// Runs counts this workflow's runs (1 on the first).
	Runs int
	// Notices are session outcomes received but not yet taken, handed to
	// the next run by continue-as-new.
	Notices []activities.SessionNotice
}

// ActionRequest is the action update's argument.
type ActionRequest struct{ Action string }

// SubscriptionResult is the workflow's outcome (it ends only canceled).
type SubscriptionResult struct {
	Status       string
	CancelReason string
	PaidPeriods  int
}

var subscriptionActivities *activities.SubscriptionActivities

type subscriptionRun struct {
	st      SubscriptionState
	mu      workflow.Mutex
	effects workflow.Context
	// version changes whenever an action changed the state: the main loop
	// then recomputes its deadline.
	version int
	notices workflow.ReceiveChannel
	// indexed is the SubscriptionStatus the Web UI has (set at the start,
	// kept by continue-as-new), so only changes are upserted.
	indexed string
	// renewed: an update paid the open invoice (settleException); the run
	// continues as new, as after a paid session.
	renewed bool
}

// SubscriptionWorkflow runs one subscription for one billing period and
// continues as new for the next: trial, invoices paid through ordinary
// checkout sessions, renewal, dunning (past_due, reminders, cancellation),
// and the PATCH actions as updates. Activities write the read model and its
// events before the workflow moves on.
func SubscriptionWorkflow(ctx workflow.Context, st SubscriptionState) (SubscriptionResult, error) {
	if st.SubscriptionID == "" || !billing.Interval(st.BillingInterval).Valid() || st.Anchor.IsZero() {
		return SubscriptionResult{}, temporal.NewNonRetryableApplicationError("subscription id, interval and anchor are required", ErrTypeBadUpdate, nil)
	}
	if st.IntervalCount < 1 {
		st.IntervalCount = 1
	}
	if st.Policy.InFlightRecheck <= 0 {
		st.Policy.InFlightRecheck = time.Minute
	}
	if st.Policy.BlockedRecheck <= 0 {
		st.Policy.BlockedRecheck = time.Hour
	}
	st.Runs++
	s := &subscriptionRun{st: st, mu: workflow.NewMutex(ctx), notices: workflow.GetSignalChannel(ctx, SubscriptionSessionSignal),
		indexed: st.Status}
	s.effects = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: time.Minute,
			NonRetryableErrorTypes: []string{activities.ErrTypePaymentInFlight, activities.ErrTypeInvalidInput}},
	})
	// An action sent as the workflow starts (a PATCH right after the
	// POST's 201) waits for the created record (createdFirstVersion): the
	// lock is taken before the handlers are there to take it.
	first := !s.st.Created && workflow.GetVersion(ctx, createdFirstVersion, workflow.DefaultVersion, 1) == 1
	if first {
		if err := s.mu.Lock(ctx); err != nil {
			return SubscriptionResult{}, err
		}
	}
	if err := s.registerHandlers(ctx); err != nil {
		return SubscriptionResult{}, err
	}
	// Listen for session outcomes; the main loop takes them.
	workflow.Go(ctx, func(gctx workflow.Context) {
		for {
			var n activities.SessionNotice
			s.notices.Receive(gctx, &n)
			s.st.Notices = append(s.st.Notices, n)
		}
	})
	if !s.st.Created {
		s.st.Created = true
		err := s.record(ctx, subEvent("subscription.created", nil))
		if first {
			s.mu.Unlock()
		}
		if err != nil {
			return SubscriptionResult{}, err
		}
	}
	return s.run(ctx)
}

func (s *subscriptionRun) registerHandlers(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, SubscriptionStatusQuery, func() (SubscriptionState, error) {
		return s.st, nil
	}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, SubscriptionActionUpdate, s.act,
		workflow.UpdateHandlerOptions{Validator: s.validateAction}); err != nil {
		return err
	}
	return workflow.SetUpdateHandlerWithOptions(ctx, SubscriptionSettleUpdate, s.settleException,
		workflow.UpdateHandlerOptions{Validator: s.validateSettle})
}

// periodEnd is the end of the n-th period after the anchor.
func (s *subscriptionRun) periodEnd(n int) time.Time {
	if s.st.Policy.FixedPeriod > 0 {
		return s.st.Anchor.Add(time.Duration(n*s.st.IntervalCount) * s.st.Policy.FixedPeriod)
	}
	return billing.PeriodEnd(s.st.Anchor, billing.Interval(s.st.BillingInterval), s.st.IntervalCount, n)
}

// deadline is when the workflow acts next without being told anything
// (zero: never, while paused or canceled).
func (s *subscriptionRun) deadline() time.Time {
	st := &s.st
	var d time.Time
	switch {
	case st.Status == models.SubPaused && st.CancelAtPeriodEnd && st.PausedCancelEnds:
		// The billing clock is stopped, but the subscription ends when the
		// period paid for ends: no more periods will use the pause.
		d = st.CurrentPeriodEnd
	case st.Status == models.SubCanceled || st.Status == models.SubPaused:
		return time.Time{}
	case st.Invoice == nil:
		// Trialing or active (or a first invoice not yet issued): the next
		// invoice is due when its period starts.
		d = s.nextStart()
	case st.Invoice.PastDueAt.IsZero():
		d = st.Invoice.IssuedAt.Add(st.Policy.GracePeriod)
	default:
		d = s.nextDunningStep()
	}
	// A cancel at period end with nothing invoiced is not held (a hold
	// with no open invoice is a blocked billing, which it ends).
	if st.HoldUntil.After(d) && (st.Invoice != nil || !st.CancelAtPeriodEnd) {
		d = st.HoldUntil
	}
	// A held replacement session is tried again at its time, or with the
	// invoice's next step if that comes first (each refusal moves it on).
	if inv := st.Invoice; inv != nil && !inv.ReopenAt.IsZero() && inv.ReopenAt.Before(d) {
		d = inv.ReopenAt
	}
	return d
}

// nextStart is when the next invoice's period starts.
func (s *subscriptionRun) nextStart() time.Time {
	if !s.st.NextStart.IsZero() {
		return s.st.NextStart
	}
	return s.periodEnd(s.st.NextPeriod)
}

// nextDunningStep is the next reminder of a past_due invoice, or its end.
func (s *subscriptionRun) nextDunningStep() time.Time {
	inv, p := s.st.Invoice, s.st.Policy
	if inv.Reminders < len(p.Reminders) {
		return inv.PastDueAt.Add(p.Reminders[inv.Reminders])
	}
	return inv.PastDueAt.Add(p.DunningPeriod)
}

// run waits for the next deadline, a session outcome or an action, acts,
// and repeats until the subscription is canceled or a period was paid
// (then it continues as new).
func (s *subscriptionRun) run(ctx workflow.Context) (SubscriptionResult, error) {
	for {
		if s.st.Status == models.SubCanceled {
			return s.end(ctx)
		}
		seen := s.version
		woken := func() bool { return s.version != seen || len(s.st.Notices) > 0 }
		if d := s.deadline(); d.IsZero() {
			if err := workflow.Await(ctx, woken); err != nil {
				return SubscriptionResult{}, err
			}
		} else if wait := d.Sub(utcNow(ctx)); wait > 0 {
			if _, err := workflow.AwaitWithTimeout(ctx, wait, woken); err != nil {
				return SubscriptionResult{}, err
			}
		}
		if err := s.mu.Lock(ctx); err != nil {
			return SubscriptionResult{}, err
		}
		paid, err := s.step(ctx)
		s.mu.Unlock()
		if err != nil {
			return SubscriptionResult{}, err
		}
		if paid || s.renewed || workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
			if s.st.Status != models.SubCanceled {
				return SubscriptionResult{}, s.continueAsNew(ctx)
			}
		}
	}
}

// step takes the session outcomes received, then acts if the deadline has
// come. It reports whether an invoice was paid (the period's run is over).
func (s *subscriptionRun) step(ctx workflow.Context) (bool, error) {
	if paid, err := s.takeNotices(ctx); paid || err != nil {
		return paid, err
	}
	d := s.deadline()
	if d.IsZero() || utcNow(ctx).Before(d) {
		return false, nil
	}
	if inv := s.st.Invoice; inv != nil && !inv.ReopenAt.IsZero() && !utcNow(ctx).Before(inv.ReopenAt) {
		// The held replacement session's time, before the invoice's next
		// step: it is tried again.
		return false, s.unlessUnbillable(ctx, s.reopenHeld)
	}
	s.st.HoldUntil = time.Time{}
	switch {
	case s.st.Invoice == nil && s.st.CancelAtPeriodEnd:
		return false, s.cancel(ctx, CancelReasonPeriodEnd, false, nil)
	case s.st.Invoice == nil:
		return false, s.unlessUnbillable(ctx, s.issueInvoice)
	}
	// A deadline of an open invoice: look at its session first, so that a
	// lost signal never cancels a customer who paid.
	status, err := s.sessionStatus(ctx)
	if err != nil {
		return false, err
	}
	switch {
	case status == models.StatusComplete:
		return true, s.settle(ctx, s.st.Invoice.SessionID)
	case status == models.StatusBroadcast || status == models.StatusConfirming:
		// The customer's transfer is on its way: wait for its verdict.
		s.st.HoldUntil = utcNow(ctx).Add(s.st.Policy.InFlightRecheck)
		return false, nil
	case s.st.CancelAtPeriodEnd:
		// Canceled while a transfer was in flight (cancelInFlightVersion),
		// which did not pay: no dunning, the subscription ends.
		return false, s.cancel(ctx, CancelReasonRequested, true, nil)
	case s.st.Invoice.PastDueAt.IsZero():
		return false, s.unlessUnbillable(ctx, s.pastDue)
	case s.st.Invoice.Reminders < len(s.st.Policy.Reminders) &&
		(utcNow(ctx).Before(s.st.Invoice.PastDueAt.Add(s.st.Policy.DunningPeriod)) || !s.st.BlockedSince.IsZero()):
		// (A reminder held while billing is on hold is sent once it can
		// be: the customer had nothing to pay with meanwhile.)
		return false, s.unlessUnbillable(ctx, s.remind)
	case !s.st.BlockedSince.IsZero() && workflow.GetVersion(ctx, heldLastWindowVersion, workflow.DefaultVersion, 1) == 1:
		// Dunning ran out while billing was on hold (the last window's
		// session ended and its replacement was refused): the customer
		// had nothing to pay with, so the end waits for a session.
		return false, s.unlessUnbillable(ctx, s.resumeDunning)
	}
	// Dunning is over. A payment that reached the session since the look
	// above still wins: cancel holds for one on its way and renews for
	// one completed.
	err = s.cancel(ctx, CancelReasonUnpaid, false, nil)
	return s.st.Status == models.SubActive, err
}

// takeNotices applies the session outcomes received: a completed session
// of the open invoice pays it; anything else is only logged (the next
// notice opens a new session when the last one ended).
func (s *subscriptionRun) takeNotices(ctx workflow.Context) (bool, error) {
	for len(s.st.Notices) > 0 {
		n := s.st.Notices[0]
		s.st.Notices = s.st.Notices[1:]
		inv := s.st.Invoice
		if inv == nil || !slices.Contains(inv.Sessions, n.SessionID) {
			workflow.GetLogger(ctx).Info("session outcome of no open invoice", "sessionId", n.SessionID, "status", n.Status)
			continue
		}
		if n.Status == models.StatusComplete {
			return true, s.settle(ctx, n.SessionID)
		}
		workflow.GetLogger(ctx).Info("invoice session ended unpaid", "sessionId", n.SessionID, "status", n.Status)
		if s.st.CancelAtPeriodEnd && (n.SessionID == inv.SessionID ||
			workflow.GetVersion(ctx, cancelInFlightRestVersion, workflow.DefaultVersion, 1) == 1) {
			// Canceled while this session's transfer was in flight
			// (cancelInFlightVersion; no earlier run has an open invoice
			// and cancelAtPeriodEnd together): it did not pay, so the
			// period that ended is the last.
			return false, s.cancel(ctx, CancelReasonRequested, true, nil)
		}
		if err := s.unlessUnbillable(ctx, func(ctx workflow.Context) error { return s.reopen(ctx, n) }); err != nil {
			return false, err
		}
	}
	return false, nil
}

// reopen gives the customer a new session when the invoice's current one
// ended unpaid before its expiry: cancelled on the hosted page, or failed
// (a short transfer, the wrong wallet). Without it the invoice had nothing
// to pay with until its next step, days later, and the checkoutUrl the
// merchant sent was dead. The new session keeps the old one's expiry and
// is announced with subscription.renewal_due (its checkoutUrl).
func (s *subscriptionRun) reopen(ctx workflow.Context, n activities.SessionNotice) error {
	inv := s.st.Invoice
	if n.SessionID != inv.SessionID || (n.Status != models.StatusCancelled && n.Status != models.StatusFailed) ||
		!utcNow(ctx).Before(inv.SessionExpiresAt) || inv.Reopened >= maxReopened {
		return nil
	}
	if n.Reason == models.ReasonInvoicePaid {
		// Another session of the invoice paid it; its notice settles the
		// invoice (no notice before the store kept invoice numbers says
		// this, so older histories replay as they ran).
		return nil
	}
	if workflow.GetVersion(ctx, reopenVersion, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return nil
	}
	return s.reopenSession(ctx)
}

// reopenSession opens the session that replaces the invoice's ended one,
// with its expiry, and says so. Refused as unbillable, it is tried again at
// Invoice.ReopenAt (unlessUnbillable undoes the rest).
func (s *subscriptionRun) reopenSession(ctx workflow.Context) error {
	inv := s.st.Invoice
	inv.Reopened++
	if err := s.openSession(ctx, inv.SessionExpiresAt); err != nil {
		return &reopenRefused{err}
	}
	return s.record(ctx, subEvent("subscription.renewal_due", s.invoiceData(inv.Reminders)))
}

// reopenRefused marks a reopen's refusal, so that unlessUnbillable keeps the
// reopen pending (Invoice.ReopenAt).
type reopenRefused struct{ error }

func (e *reopenRefused) Unwrap() error { return e.error }

// reopenHeld tries again the replacement session a hold stopped, while the
// ended session's expiry has not passed (after it, the invoice's next step
// opens one).
func (s *subscriptionRun) reopenHeld(ctx workflow.Context) error {
	inv := s.st.Invoice
	inv.ReopenAt = time.Time{}
	if !utcNow(ctx).Before(inv.SessionExpiresAt) {
		return nil
	}
	return s.reopenSession(ctx)
}

func (s *subscriptionRun) sessionStatus(ctx workflow.Context) (string, error) {
	var status string
	err := workflow.ExecuteActivity(s.effects, subscriptionActivities.InvoiceSessionStatus, s.st.Invoice.SessionID).Get(ctx, &status)
	return status, err
}

// openSession opens a new checkout session for the open invoice, valid
// until expiresAt (the next notice, which brings a new one if needed).
func (s *subscriptionRun) openSession(ctx workflow.Context, expiresAt time.Time) error {
	req := activities.InvoiceSessionRequest{SessionID: newEntryID(ctx), SubscriptionID: s.st.SubscriptionID, ExpiresAt: expiresAt,
		Invoice: s.st.Invoice.Number}
	var got activities.InvoiceSession
	if err := workflow.ExecuteActivity(s.effects, subscriptionActivities.OpenInvoiceSession, req).Get(ctx, &got); err != nil {
		return err
	}
	inv := s.st.Invoice
	inv.SessionID, inv.SessionExpiresAt, inv.CheckoutURL = got.SessionID, got.ExpiresAt, got.CheckoutURL
	inv.Sessions = append(inv.Sessions, got.SessionID)
	s.st.LatestSessionID = got.SessionID
	// Billed again: the record that follows clears the reason.
	s.billed()
	inv.ReopenAt = time.Time{}
	return nil
}

// unlessUnbillable runs a step that opens an invoice's session. If the
// subscription cannot be billed as it stands (billingBlockedVersion), the
// step is undone (the invoice as it was), the reason recorded once with
// subscription.updated, and the step tried again after BlockedRecheck;
// the subscription keeps its status meanwhile, and a cancel still ends it.
func (s *subscriptionRun) unlessUnbillable(ctx workflow.Context, step func(workflow.Context) error) error {
	invoices, inv := s.st.Invoices, s.st.Invoice.clone()
	err := step(ctx)
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != activities.ErrTypeUnbillable ||
		workflow.GetVersion(ctx, billingBlockedVersion, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return err
	}
	s.st.Invoices, s.st.Invoice = invoices, inv
	now := utcNow(ctx)
	if s.st.BlockedSince.IsZero() {
		s.st.BlockedSince = now
	}
	retryAt := now.Add(s.st.Policy.BlockedRecheck)
	var refused *reopenRefused
	if errors.As(err, &refused) {
		// A replacement session: tried again at its own time (the
		// invoice's deadlines and holds stay as they were).
		inv.ReopenAt = retryAt
	} else {
		// A step: held, and tried again then (it opens the session a held
		// replacement would have).
		s.st.HoldUntil = retryAt
		if inv != nil {
			inv.ReopenAt = time.Time{}
		}
	}
	workflow.GetLogger(ctx).Error("subscription cannot be billed; the step is held and tried again", "subscriptionId", s.st.SubscriptionID,
		"reason", appErr.Message(), "retryAt", retryAt)
	if s.st.BillingError == appErr.Message() {
		return nil
	}
	s.st.BillingError = appErr.Message()
	return s.record(ctx, subEvent("subscription.updated", map[string]any{"action": nil, "previousStatus": s.st.Status}))
}

// billed ends a hold of the billing (a session opened, the invoice paid,
// the subscription canceled): nothing stands in the way any more.
func (s *subscriptionRun) billed() { s.st.BillingError, s.st.BlockedSince = "", time.Time{} }

// clone is a copy of the invoice sharing nothing with it (nil for nil).
func (inv *Invoice) clone() *Invoice {
	if inv == nil {
		return nil
	}
	c := *inv
	c.Sessions = slices.Clone(inv.Sessions)
	return &c
}

// issueInvoice opens the invoice of the next period at its start, with a
// session valid until the grace period ends, and says so.
func (s *subscriptionRun) issueInvoice(ctx workflow.Context) error {
	now := utcNow(ctx)
	s.st.Invoices++
	s.st.Invoice = &Invoice{Number: s.st.Invoices, PeriodStart: s.nextStart(),
		PeriodEnd: s.periodEnd(s.st.NextPeriod + 1), IssuedAt: now}
	if err := s.openSession(ctx, now.Add(s.st.Policy.GracePeriod)); err != nil {
		return err
	}
	s.st.Status = models.SubRenewalPending
	return s.record(ctx, subEvent("subscription.renewal_due", s.invoiceData(0)))
}

// pastDue: the grace period ran out unpaid.
func (s *subscriptionRun) pastDue(ctx workflow.Context) error {
	inv := s.st.Invoice
	inv.PastDueAt = utcNow(ctx)
	s.newStep(ctx)
	if err := s.openSession(ctx, s.nextDunningStep()); err != nil {
		return err
	}
	s.st.Status = models.SubPastDue
	return s.record(ctx, subEvent("subscription.past_due", s.invoiceData(0)))
}

// remind sends the next reminder with a session valid until the next step.
// After a hold, the dunning schedule (later reminders, the cancel) moves by
// the time billing was on hold, so this reminder goes out now with a
// session to pay with (unlessUnbillable undoes the move if it is refused
// again).
func (s *subscriptionRun) remind(ctx workflow.Context) error {
	s.st.Invoice.Reminders++
	return s.resumeDunning(ctx)
}

// resumeDunning opens the session of the current dunning step, valid until
// the next one, and says so (subscription.renewal_due). After a hold the
// rest of the schedule first moves by the time billing was on hold: the
// customer gets the time to pay that the hold took away.
func (s *subscriptionRun) resumeDunning(ctx workflow.Context) error {
	inv := s.st.Invoice
	if !s.st.BlockedSince.IsZero() {
		inv.PastDueAt = inv.PastDueAt.Add(utcNow(ctx).Sub(s.st.BlockedSince))
	}
	s.newStep(ctx)
	if err := s.openSession(ctx, s.nextDunningStep()); err != nil {
		return err
	}
	return s.record(ctx, subEvent("subscription.renewal_due", s.invoiceData(inv.Reminders)))
}

// newStep starts the reopen budget again for a step of the schedule
// (reopenPerStepVersion; asked only when some of it was spent).
func (s *subscriptionRun) newStep(ctx workflow.Context) {
	if inv := s.st.Invoice; inv.Reopened > 0 && workflow.GetVersion(ctx, reopenPerStepVersion, workflow.DefaultVersion, 1) == 1 {
		inv.Reopened = 0
	}
}

// settle takes the open invoice as paid by sessionID: its period becomes
// the current one (anchored: a late payment does not move the calendar).
func (s *subscriptionRun) settle(ctx workflow.Context, sessionID string) error {
	data := s.invoiceData(s.st.Invoice.Reminders)
	data["invoice"].(map[string]any)["sessionId"] = sessionID
	return s.renew(ctx, sessionID, data)
}

// renew records the open invoice as paid (subscription.renewed with data)
// and makes its period the current one.
func (s *subscriptionRun) renew(ctx workflow.Context, sessionID string, data map[string]any) error {
	inv := s.st.Invoice
	s.st.CurrentPeriodStart, s.st.CurrentPeriodEnd = inv.PeriodStart, inv.PeriodEnd
	s.st.NextPeriod++
	s.st.NextStart = time.Time{}
	s.st.PaidPeriods++
	s.st.Status = models.SubActive
	s.st.Invoice = nil
	s.st.LatestSessionID = sessionID
	s.st.HoldUntil = time.Time{}
	s.billed()
	return s.record(ctx, subEvent("subscription.renewed", data))
}

// cancel ends the subscription, voiding the open invoice's session first
// (refused while a payment is being confirmed: then nothing has changed). A
// session found paid settles its invoice before the subscription ends.
// atPeriodEnd sets cancelAtPeriodEnd; before, when set, is the event of the
// action that asked for it.
func (s *subscriptionRun) cancel(ctx workflow.Context, reason string, atPeriodEnd bool, before *activities.SubscriptionEvent) error {
	if inv := s.st.Invoice; inv != nil {
		sessions := []string{inv.SessionID}
		if older := s.olderSessions(); len(older) > 0 &&
			workflow.GetVersion(ctx, cancelVoidsEveryVersion, workflow.DefaultVersion, 1) == 1 {
			sessions = append(older, inv.SessionID)
		}
		paidBy, status, err := s.voidSessions(ctx, sessions)
		if reason == CancelReasonUnpaid && isPaymentInFlight(err) {
			// The customer's transfer was submitted as dunning ended: its
			// verdict decides (the deadline looks again).
			s.st.HoldUntil = utcNow(ctx).Add(s.st.Policy.InFlightRecheck)
			return nil
		}
		if reason == CancelReasonRequested && atPeriodEnd && isPaymentInFlight(err) &&
			workflow.GetVersion(ctx, cancelInFlightVersion, workflow.DefaultVersion, 1) == 1 {
			// The merchant's cancel while the customer's transfer is being
			// confirmed: taken now, decided by the transfer's verdict
			// (takeNotices and step: paid, the period it pays for is the
			// last one; unpaid, the subscription ends then).
			if workflow.GetVersion(ctx, cancelInFlightRestVersion, workflow.DefaultVersion, 1) == 1 {
				// Nothing after the one in flight stays payable (each is
				// voided, past another in flight too), no held replacement
				// session opens, and the verdict is awaited on a timer.
				inv.ReopenAt = time.Time{}
				for _, id := range sessions[slices.Index(sessions, paidBy)+1:] {
					var st string
					rerr := workflow.ExecuteActivity(s.effects, subscriptionActivities.VoidInvoiceSession, id).Get(ctx, &st)
					if isPaymentInFlight(rerr) {
						continue
					}
					if rerr != nil {
						return rerr
					}
					if st == models.StatusComplete {
						// Paid meanwhile: the period it pays for is the
						// one that ends.
						if err := s.settle(ctx, id); err != nil {
							return err
						}
						break
					}
				}
				s.st.HoldUntil = utcNow(ctx).Add(s.st.Policy.InFlightRecheck)
			}
			s.st.CancelAtPeriodEnd = true
			var events []activities.SubscriptionEvent
			if before != nil {
				events = append(events, *before)
			}
			return s.record(ctx, events...)
		}
		if err != nil {
			return err
		}
		if status == models.StatusComplete {
			if err := s.settle(ctx, paidBy); err != nil {
				return err
			}
			if reason == CancelReasonUnpaid {
				// Paid as dunning ended: renewed, not canceled.
				return nil
			}
			if atPeriodEnd {
				// Paid after all: the period it paid for is the one that ends.
				s.st.CancelAtPeriodEnd = true
				var events []activities.SubscriptionEvent
				if before != nil {
					events = append(events, *before)
				}
				return s.record(ctx, events...)
			}
		}
	}
	if atPeriodEnd {
		s.st.CancelAtPeriodEnd = true
	}
	s.st.Status = models.SubCanceled
	s.st.CanceledAt = utcNow(ctx)
	s.st.CancelReason = reason
	s.st.Invoice = nil
	s.st.HoldUntil = time.Time{}
	s.billed()
	events := []activities.SubscriptionEvent{}
	if before != nil {
		events = append(events, *before)
	}
	events = append(events, subEvent("subscription.canceled", map[string]any{"reason": reason}))
	return s.record(ctx, events...)
}

// isPaymentInFlight: the invoice's session could not be voided because a
// transfer to it is being confirmed.
func isPaymentInFlight(err error) bool {
	var appErr *temporal.ApplicationError
	return errors.As(err, &appErr) && appErr.Type() == activities.ErrTypePaymentInFlight
}

// invoiceData describes the open invoice in an event.
func (s *subscriptionRun) invoiceData(reminder int) map[string]any {
	inv := s.st.Invoice
	d := map[string]any{"number": inv.Number, "periodStart": eventTime(inv.PeriodStart), "periodEnd": eventTime(inv.PeriodEnd),
		"issuedAt": eventTime(inv.IssuedAt), "sessionId": inv.SessionID, "checkoutUrl": inv.CheckoutURL,
		"sessionExpiresAt": eventTime(inv.SessionExpiresAt), "reminder": reminder,
		"pastDueAt": nil, "cancelsAt": nil}
	if !inv.PastDueAt.IsZero() {
		d["pastDueAt"] = eventTime(inv.PastDueAt)
		d["cancelsAt"] = eventTime(inv.PastDueAt.Add(s.st.Policy.DunningPeriod))
	}
	return map[string]any{"invoice": d}
}

func eventTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}

func subEvent(typ string, extra map[string]any) activities.SubscriptionEvent {
	return activities.SubscriptionEvent{Type: typ, Extra: extra}
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// record writes the state to the read model with its events, then keeps
// the search attribute current when the status changed.
func (s *subscriptionRun) record(ctx workflow.Context, events ...activities.SubscriptionEvent) error {
	st := &s.st
	st.Seq++
	r := activities.SubscriptionRecord{SubscriptionID: st.SubscriptionID, Seq: st.Seq, Status: st.Status,
		CurrentPeriodStart: st.CurrentPeriodStart, CurrentPeriodEnd: st.CurrentPeriodEnd, CancelAtPeriodEnd: st.CancelAtPeriodEnd,
		TrialEnd: timePtr(st.TrialEnd), BillingAnchor: timePtr(st.Anchor), PausedAt: timePtr(st.PausedAt),
		CanceledAt: timePtr(st.CanceledAt), CancelReason: st.CancelReason, LatestSessionID: st.LatestSessionID,
		BillingError: st.BillingError, At: utcNow(ctx), Events: events}
	if err := workflow.ExecuteActivity(s.effects, subscriptionActivities.RecordSubscription, r).Get(ctx, nil); err != nil {
		return err
	}
	if st.Status == s.indexed {
		return nil
	}
	if err := workflow.UpsertTypedSearchAttributes(ctx, SubscriptionStatusAttr.ValueSet(st.Status)); err != nil {
		workflow.GetLogger(ctx).Warn("search attribute not updated", "err", err)
		return nil
	}
	s.indexed = st.Status
	return nil
}

// actionError says why an action does not apply now (nil: it does).
func (s *subscriptionRun) actionError(action string) error {
	st := s.st.Status
	refuse := func(msg string) error { return temporal.NewApplicationError(msg, ErrTypeActionNotAllowed) }
	switch {
	case !slices.Contains(SubscriptionActions, action):
		return refuse("action must be one of cancel, cancel_now, pause, resume")
	case st == models.SubCanceled:
		return refuse("the subscription is already canceled")
	case action == ActionPause && st != models.SubTrialing && st != models.SubActive:
		return refuse("cannot pause a subscription that is " + st + " (only trialing or active ones pause)")
	case action == ActionPause && !s.st.BlockedSince.IsZero():
		// Its period has ended and the next is not invoiced yet: a pause
		// would not stop a clock that already ran out.
		return refuse("cannot pause a subscription whose billing is on hold (" + s.st.BillingError + "); cancel it, or pause it once it is billed again")
	case action == ActionResume && st != models.SubPaused:
		return refuse("cannot resume a subscription that is " + st)
	}
	return nil
}

func (s *subscriptionRun) validateAction(ctx workflow.Context, req ActionRequest) error {
	return s.actionError(req.Action)
}

// act runs an action under the mutex (the main loop may be acting on a
// deadline), checks it again against the state it then finds, writes the
// change with subscription.updated, and answers the state.
func (s *subscriptionRun) act(ctx workflow.Context, req ActionRequest) (SubscriptionState, error) {
	if err := s.mu.Lock(ctx); err != nil {
		return SubscriptionState{}, err
	}
	defer s.mu.Unlock()
	if err := s.actionError(req.Action); err != nil {
		return SubscriptionState{}, err
	}
	st := &s.st
	previous := st.Status
	updated := func() activities.SubscriptionEvent {
		return subEvent("subscription.updated", map[string]any{"action": req.Action, "previousStatus": previous})
	}
	now := utcNow(ctx)
	var err error
	switch req.Action {
	case ActionCancel:
		if st.CancelAtPeriodEnd {
			// Asked before: nothing changes (with an open invoice only
			// since cancelInFlightVersion, its transfer's verdict pending),
			// except that a paused one asked before pausedCancelVersion
			// now ends at its period's end.
			if st.Status == models.SubPaused && !st.PausedCancelEnds &&
				workflow.GetVersion(ctx, pausedCancelReaskVersion, workflow.DefaultVersion, 1) == 1 {
				st.PausedCancelEnds = true
				s.version++
			}
			return s.st, nil
		}
		if st.Invoice != nil {
			// The current period has ended and the next is not paid: the
			// end of the period is now.
			ev := updated()
			err = s.cancel(ctx, CancelReasonRequested, true, &ev)
		} else {
			st.CancelAtPeriodEnd = true
			s.pausedCancel(ctx)
			err = s.record(ctx, updated())
		}
	case ActionCancelNow:
		ev := updated()
		err = s.cancel(ctx, CancelReasonRequested, false, &ev)
	case ActionPause:
		st.PausedAt, st.PausedFrom, st.Status = now, st.Status, models.SubPaused
		s.pausedCancel(ctx)
		err = s.record(ctx, updated())
	case ActionResume:
		// The billing clock stopped while paused: the period (and a trial)
		// ends later by the paused time, and later periods count from there.
		paused := now.Sub(st.PausedAt)
		st.CurrentPeriodEnd = st.CurrentPeriodEnd.Add(paused)
		if !st.TrialEnd.IsZero() && st.PausedFrom == models.SubTrialing {
			st.TrialEnd = st.TrialEnd.Add(paused)
		}
		if workflow.GetVersion(ctx, resumeShiftsAnchorVersion, workflow.DefaultVersion, 1) == 1 {
			// The anchor moves by the pause, its day of the month kept:
			// later periods clamp and recover as without a pause.
			st.Anchor = st.Anchor.Add(paused)
			if workflow.GetVersion(ctx, resumeNextStartVersion, workflow.DefaultVersion, 1) == 1 {
				// The next invoice comes when the moved period ends, as
				// reported; the anchor's calendar may clamp it otherwise.
				st.NextStart = st.CurrentPeriodEnd
			}
		} else {
			st.Anchor, st.NextPeriod = st.CurrentPeriodEnd, 0
		}
		st.Status, st.PausedAt, st.PausedFrom, st.PausedCancelEnds = st.PausedFrom, time.Time{}, "", false
		err = s.record(ctx, updated())
	}
	s.version++
	if err != nil {
		return SubscriptionState{}, err
	}
	return s.st, nil
}

// pausedCancel makes a paused subscription that cancels at period end end
// then (pausedCancelVersion; asked only when both hold).
func (s *subscriptionRun) pausedCancel(ctx workflow.Context) {
	st := &s.st
	if st.Status == models.SubPaused && st.CancelAtPeriodEnd &&
		workflow.GetVersion(ctx, pausedCancelVersion, workflow.DefaultVersion, 1) == 1 {
		st.PausedCancelEnds = true
	}
}

// noOpenInvoice says why nothing can be settled now (nil: an invoice is
// open and may be paid so).
func (s *subscriptionRun) noOpenInvoice() error {
	switch {
	case s.st.Invoice == nil || s.st.Status == models.SubCanceled:
		return temporal.NewApplicationError("the subscription has no open invoice (it is "+s.st.Status+"): only a renewal_pending or past_due one can be paid",
			ErrTypeNoOpenInvoice)
	case s.st.CancelAtPeriodEnd:
		// Canceled while a transfer to the invoice was being confirmed
		// (cancelInFlightVersion): that transfer's verdict ends it.
		return temporal.NewApplicationError("the subscription is being canceled (cancelAtPeriodEnd): its open invoice is decided by the transfer being confirmed",
			ErrTypeNoOpenInvoice)
	}
	return nil
}

func (s *subscriptionRun) validateSettle(ctx workflow.Context, req SettleRequest) error {
	if req.ExceptionID == "" {
		return temporal.NewApplicationError("an exception id is required", ErrTypeBadUpdate)
	}
	return s.noOpenInvoice()
}

// settleException pays the open invoice with a payment exception's
// transfer, which the merchant accepts (short, late, from another wallet).
// Every session of the invoice is voided first, the older ones before the
// current one, so none can take a second payment: a transfer to one being
// confirmed refuses the update (its verdict decides), and one found paid
// settles the invoice (the exception stays open). Then the exception is
// recorded as the customer's transaction for this invoice (once: one
// transfer never pays two), and the invoice's period renewed with it
// (subscription.renewed names the exception and the transaction); the run
// then continues as new, as after a paid session. If the exception cannot
// be recorded (closed meanwhile), the invoice gets a session to pay with
// again.
func (s *subscriptionRun) settleException(ctx workflow.Context, req SettleRequest) (SubscriptionState, error) {
	if err := s.mu.Lock(ctx); err != nil {
		return SubscriptionState{}, err
	}
	defer s.mu.Unlock()
	defer func() { s.version++ }()
	if err := s.noOpenInvoice(); err != nil {
		return SubscriptionState{}, err
	}
	inv := s.st.Invoice
	paidBy, status, err := s.voidSessions(ctx, append(s.olderSessions(), inv.SessionID))
	if err != nil {
		return SubscriptionState{}, err
	}
	if status == models.StatusComplete {
		if err := s.settle(ctx, paidBy); err != nil {
			return SubscriptionState{}, err
		}
		s.renewed = true
		return SubscriptionState{}, temporal.NewApplicationError("the invoice was paid by one of its checkout sessions meanwhile; the exception stays open",
			ErrTypeInvoicePaid)
	}
	r := activities.InvoiceExceptionRequest{ExceptionID: req.ExceptionID, SubscriptionID: s.st.SubscriptionID, Invoice: inv.Number,
		MerchantID: s.st.MerchantID, Mode: s.st.Mode, Note: req.Note}
	var paid activities.InvoiceExceptionPayment
	if err := workflow.ExecuteActivity(s.effects, subscriptionActivities.ResolveInvoiceException, r).Get(ctx, &paid); err != nil {
		if utcNow(ctx).Before(inv.SessionExpiresAt) {
			// (Refused as unbillable: held and tried again, as a reopen.)
			if oerr := s.unlessUnbillable(ctx, func(ctx workflow.Context) error {
				if oerr := s.openSession(ctx, s.st.Invoice.SessionExpiresAt); oerr != nil {
					return &reopenRefused{oerr}
				}
				return s.record(ctx, subEvent("subscription.renewal_due", s.invoiceData(s.st.Invoice.Reminders)))
			}); oerr != nil {
				return SubscriptionState{}, oerr
			}
		}
		return SubscriptionState{}, err
	}
	data := s.invoiceData(inv.Reminders)
	d := data["invoice"].(map[string]any)
	d["sessionId"], d["exceptionId"], d["transactionId"], d["txHash"], d["amount"] = nil, paid.ExceptionID, paid.TransactionID, paid.TxHash, paid.Amount
	data["transactionId"], data["txHash"] = paid.TransactionID, paid.TxHash
	if err := s.renew(ctx, s.st.LatestSessionID, data); err != nil {
		return SubscriptionState{}, err
	}
	s.renewed = true
	return s.st, nil
}

// olderSessions are the open invoice's sessions before its current one.
func (s *subscriptionRun) olderSessions() []string {
	inv := s.st.Invoice
	return slices.DeleteFunc(slices.Clone(inv.Sessions), func(id string) bool { return id == inv.SessionID })
}

// voidSessions voids the invoice's sessions in order and stops at the
// first that decides: one paid (its id, complete), or one whose transfer
// is being confirmed (the activity's ErrTypePaymentInFlight). Otherwise it
// answers the last one's status.
func (s *subscriptionRun) voidSessions(ctx workflow.Context, ids []string) (string, string, error) {
	var status string
	for _, id := range ids {
		if err := workflow.ExecuteActivity(s.effects, subscriptionActivities.VoidInvoiceSession, id).Get(ctx, &status); err != nil {
			return id, status, err
		}
		if status == models.StatusComplete {
			return id, status, nil
		}
	}
	return ids[len(ids)-1], status, nil
}

// drainNotices takes every signal already delivered, so none is lost when
// the run ends (updates are covered by AllHandlersFinished; signals are not).
func (s *subscriptionRun) drainNotices() {
	for {
		var n activities.SessionNotice
		if !s.notices.ReceiveAsync(&n) {
			return
		}
		s.st.Notices = append(s.st.Notices, n)
	}
}

// continueAsNew hands the whole state to the next run.
func (s *subscriptionRun) continueAsNew(ctx workflow.Context) error {
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
		return err
	}
	s.drainNotices()
	return workflow.NewContinueAsNewError(ctx, SubscriptionWorkflow, s.st)
}

// end closes a canceled subscription once running updates have answered.
func (s *subscriptionRun) end(ctx workflow.Context) (SubscriptionResult, error) {
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
		return SubscriptionResult{}, err
	}
	s.drainNotices()
	for _, n := range s.st.Notices {
		workflow.GetLogger(ctx).Info("session outcome after the subscription ended", "sessionId", n.SessionID, "status", n.Status)
	}
	return SubscriptionResult{Status: s.st.Status, CancelReason: s.st.CancelReason, PaidPeriods: s.st.PaidPeriods}, nil
}

// utcNow is the workflow's clock in UTC (the service keeps every time in UTC).
func utcNow(ctx workflow.Context) time.Time { return workflow.Now(ctx).UTC() }
