// Package subscription creates subscriptions and starts their workflows,
// runs the PATCH actions as updates of those workflows, and repairs
// subscriptions left without one. The workflow (workflows.SubscriptionWorkflow)
// decides everything after creation; this package only asks it.
package subscription

import (
	"context"
	"errors"
	"fmt"
	"github.com/paygate/paygate/periodic"
	"log/slog"
	"slices"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/paygate/paygate/activities"
	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/billing"
	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/money"
	"github.com/paygate/paygate/workflows"
)

// Service runs subscriptions.
type Service struct {
	Store     *models.Store
	Temporal  client.Client
	Networks  *chain.Registry
	TaskQueue string
	// Policy is the dunning schedule given to new workflows (zero value:
	// workflows.DefaultSubscriptionPolicy).
	Policy workflows.SubscriptionPolicy
	// UpdateTimeout bounds the wait for the workflow's answer to an
	// update (0: workflows.DefaultUpdateTimeout); past it the caller gets
	// a 503 with Retry-After.
	UpdateTimeout time.Duration
	Log           *slog.Logger
	// Now is the clock (tests); nil is time.Now.
	Now func() time.Time
	// Sessions voids an open invoice's session when a subscription whose
	// workflow closed without ending it is canceled (cancelStopped); nil:
	// the session is left to expire.
	Sessions activities.InvoiceSessions
	// Dispatch starts the deliveries of the events cancelStopped emits
	// (nil: the delivery reconciler starts them).
	Dispatch func(ctx context.Context, deliveryIDs []string) error
}

func (s *Service) now() time.Time {
	if s.Now != nil {
		return s.Now().UTC()
	}
	return time.Now().UTC()
}

func (s *Service) log() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.Default()
}

func (s *Service) policy() workflows.SubscriptionPolicy {
	if s.Policy.GracePeriod == 0 && s.Policy.DunningPeriod == 0 {
		p := workflows.DefaultSubscriptionPolicy()
		p.FixedPeriod = s.Policy.FixedPeriod
		return p
	}
	return s.Policy
}

// CreateRequest is a new subscription, its fields already checked for
// shape by the API.
type CreateRequest struct {
	Scope models.Scope
	// CustomerID or CustomerEmail names the customer (an e-mail the
	// merchant has no customer with creates one).
	CustomerID    string
	CustomerEmail string
	// CustomerWalletAddress pays the renewals; empty: the customer's own.
	CustomerWalletAddress string
	ProductName           string
	Amount                money.Amount
	BillingInterval       billing.Interval
	IntervalCount         int
	TrialDays             int
	Network               string
	BillingModel          string
	// MerchantWalletAddress receives the renewals; empty: the merchant's
	// default wallet of the network's family.
	MerchantWalletAddress string
}

// Create stores a subscription (and its customer when new), then starts its
// workflow. Should the start fail, the subscription is still answered: the
// repairer starts the workflow shortly after.
func (s *Service) Create(ctx context.Context, r CreateRequest) (*models.Subscription, error) {
	fam, _ := chain.FamilyOf(r.Network)
	if _, ok := s.Networks.Lookup(r.Network); !ok {
		return nil, apperr.Invalid("network", "is not configured on this server")
	}
	var v apperr.ValidationError
	var cust *models.Customer
	var newCustomer *models.Customer
	switch {
	case r.CustomerID != "":
		c, err := s.Store.Customer(ctx, r.Scope, r.CustomerID)
		if errors.Is(err, apperr.ErrNotFound) {
			v.Add("customerId", "no such customer")
		} else if err != nil {
			return nil, err
		}
		cust = c
	default:
		c, err := s.Store.CustomerByEmail(ctx, r.Scope, r.CustomerEmail)
		switch {
		case errors.Is(err, apperr.ErrNotFound):
			newCustomer = &models.Customer{MerchantID: r.Scope.MerchantID, Mode: r.Scope.Mode, Email: r.CustomerEmail,
				WalletAddress: r.CustomerWalletAddress}
			cust = newCustomer
		case err != nil:
			return nil, err
		default:
			cust = c
		}
	}
	payer := r.CustomerWalletAddress
	if payer == "" && cust != nil && !v.Has("customerId") {
		if a, err := chain.ParseAddress(fam, cust.WalletAddress); err == nil {
			payer = a
		} else {
			v.Add("customerWalletAddress", "is required: the customer has no "+string(fam)+" wallet on record")
		}
	}
	m, err := s.Store.Merchant(ctx, r.Scope.MerchantID)
	if err != nil {
		return nil, err
	}
	wallet := r.MerchantWalletAddress
	if wallet == "" {
		wallet = m.WalletEVM
		if fam == chain.FamilySolana {
			wallet = m.WalletSolana
		}
		if wallet == "" {
			v.Add("merchantWalletAddress", "is required: no default "+string(fam)+" wallet is set on the merchant profile")
		}
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	if err := s.Store.WalletsReceive(ctx, r.Scope.MerchantID, models.NamedWallet{Field: "merchantWalletAddress", Address: wallet, Network: r.Network}); err != nil {
		return nil, err
	}
	now := s.now()
	count := max(r.IntervalCount, 1)
	sub := &models.Subscription{MerchantID: r.Scope.MerchantID, Mode: r.Scope.Mode, Network: r.Network,
		BillingModel: r.BillingModel, CustomerWalletAddress: payer, CustomerEmail: cust.Email, ProductName: r.ProductName,
		Amount: r.Amount, BillingInterval: string(r.BillingInterval), IntervalCount: count, MerchantWalletAddress: wallet,
		CurrentPeriodStart: now}
	if newCustomer == nil {
		sub.CustomerID = &cust.ID
	}
	if r.TrialDays > 0 {
		end := now.Add(time.Duration(r.TrialDays) * 24 * time.Hour)
		sub.Status, sub.TrialEnd, sub.BillingAnchor, sub.CurrentPeriodEnd = models.SubTrialing, &end, &end, end
	} else {
		// No trial: the first invoice is due at once (renewal_pending).
		sub.Status, sub.BillingAnchor = models.SubRenewalPending, &now
		sub.CurrentPeriodEnd = s.periodEnd(now, r.BillingInterval, count, 1)
	}
	if err := s.Store.CreateSubscriptionFor(ctx, sub, newCustomer); err != nil {
		return nil, err
	}
	if err := s.StartWorkflow(ctx, sub); err != nil {
		s.log().WarnContext(ctx, "subscription workflow not started; the repairer will start it", "subscriptionId", sub.ID, "err", err)
	}
	return sub, nil
}

func (s *Service) periodEnd(anchor time.Time, i billing.Interval, count, n int) time.Time {
	if p := s.policy().FixedPeriod; p > 0 {
		return anchor.Add(time.Duration(n*count) * p)
	}
	return billing.PeriodEnd(anchor, i, count, n)
}

// StateOf is the workflow state of a subscription as its row has it: the
// input of its first run (created through the API), or of a workflow
// started for a row that had none.
func (s *Service) StateOf(sub *models.Subscription) workflows.SubscriptionState {
	st := workflows.SubscriptionState{SubscriptionID: sub.ID, MerchantID: sub.MerchantID, Mode: string(sub.Mode),
		Network: sub.Network, BillingInterval: sub.BillingInterval, IntervalCount: max(sub.IntervalCount, 1), Policy: s.policy(),
		Status: sub.Status, CurrentPeriodStart: sub.CurrentPeriodStart.UTC(), CurrentPeriodEnd: sub.CurrentPeriodEnd.UTC(),
		CancelAtPeriodEnd: sub.CancelAtPeriodEnd, Seq: sub.ChangeSeq, Created: sub.ChangeSeq > 0}
	if sub.CustomerID != nil {
		st.CustomerID = *sub.CustomerID
	}
	if sub.TrialEnd != nil {
		st.TrialEnd = sub.TrialEnd.UTC()
	}
	// Rows made before the workflow existed have no anchor: their next
	// invoice is due at the end of the current period.
	st.Anchor = st.CurrentPeriodEnd
	if sub.BillingAnchor != nil {
		st.Anchor = sub.BillingAnchor.UTC()
	}
	if sub.Status == models.SubPaused {
		st.PausedFrom = models.SubActive
		st.PausedAt = s.now()
		if sub.PausedAt != nil {
			st.PausedAt = sub.PausedAt.UTC()
		}
	}
	if sub.LatestSessionID != nil {
		st.LatestSessionID = *sub.LatestSessionID
	}
	return st
}

// StartWorkflow starts a subscription's workflow, or finds it started
// already (also after it closed: a subscription's workflow never runs
// twice), and then marks the row.
func (s *Service) StartWorkflow(ctx context.Context, sub *models.Subscription) error {
	if s.Temporal == nil {
		return errors.New("subscription: no Temporal client")
	}
	attrs := []temporal.SearchAttributeUpdate{workflows.SubscriptionStatusAttr.ValueSet(sub.Status),
		workflows.MerchantIDAttr.ValueSet(sub.MerchantID), workflows.NetworkAttr.ValueSet(sub.Network)}
	if sub.CustomerID != nil {
		attrs = append(attrs, workflows.CustomerIDAttr.ValueSet(*sub.CustomerID))
	}
	opts := client.StartWorkflowOptions{
		ID:                    workflows.SubscriptionWorkflowID(sub.ID),
		TaskQueue:             s.TaskQueue,
		WorkflowIDReusePolicy: enums.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		TypedSearchAttributes: temporal.NewSearchAttributes(attrs...),
		Memo: map[string]any{"amount": sub.Amount.String(), "network": sub.Network, "productName": sub.ProductName,
			"billingInterval": fmt.Sprintf("%d %s", max(sub.IntervalCount, 1), sub.BillingInterval), "mode": string(sub.Mode),
			"customerEmail": sub.CustomerEmail},
	}
	_, err := s.Temporal.ExecuteWorkflow(ctx, opts, workflows.SubscriptionWorkflow, s.StateOf(sub))
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	if err != nil && !errors.As(err, &already) {
		return err
	}
	sub.WorkflowStarted = true
	return s.Store.MarkSubscriptionWorkflowStarted(ctx, sub.ID)
}

// Act runs a PATCH action through the subscription's workflow and answers
// the subscription as the workflow left it (its read model is written
// before the update answers).
func (s *Service) Act(ctx context.Context, sc models.Scope, id, action string) (workflows.SubscriptionState, error) {
	sub, err := s.Store.Subscription(ctx, sc, id)
	if err != nil {
		return workflows.SubscriptionState{}, err
	}
	if sub.Status == models.SubCanceled {
		if action == workflows.ActionCancel || action == workflows.ActionCancelNow {
			// Asked again (a client retrying, SPEC.md: cancel from any
			// status): it is canceled, nothing changes.
			return stateOf(sub), nil
		}
		return workflows.SubscriptionState{}, apperr.Invalid("action", "the subscription is already canceled")
	}
	if !sub.WorkflowStarted {
		if err := s.StartWorkflow(ctx, sub); err != nil {
			return workflows.SubscriptionState{}, err
		}
	}
	st, err := s.update(ctx, id, workflows.SubscriptionActionUpdate, workflows.ActionRequest{Action: action})
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) && (action == workflows.ActionCancel || action == workflows.ActionCancelNow) {
		return s.cancelStopped(ctx, sc, id)
	}
	if err != nil {
		return st, s.mapError(ctx, sc, id, err)
	}
	return st, nil
}

// stateOf is the answer of an action from the read model alone.
func stateOf(sub *models.Subscription) workflows.SubscriptionState {
	return workflows.SubscriptionState{SubscriptionID: sub.ID, Status: sub.Status, CancelAtPeriodEnd: sub.CancelAtPeriodEnd}
}

// cancelStopped cancels, at once, a subscription whose workflow closed
// without ending it (terminated by an operator, or failed): nothing bills
// it any more, so a cancel, at the period's end or now, is written to the
// read model directly, with its subscription.canceled event (SPEC.md's
// transitions let a cancel come from any status). An open invoice's
// session is voided first; one with a payment being confirmed is a
// conflict, as it is for the workflow. Every open session of the
// subscription is voided, not only the latest: an older one of the invoice
// (dunning opens one per window) stayed payable, and its payment was
// recorded for a canceled subscription.
func (s *Service) cancelStopped(ctx context.Context, sc models.Scope, id string) (workflows.SubscriptionState, error) {
	sub, err := s.Store.Subscription(ctx, sc, id)
	if err != nil {
		return workflows.SubscriptionState{}, err
	}
	if sub.Status == models.SubCanceled {
		return stateOf(sub), nil
	}
	if s.Sessions != nil {
		open, err := s.Store.OpenSessionsOfSubscription(ctx, sub.ID)
		if err != nil {
			return workflows.SubscriptionState{}, err
		}
		inFlight := apperr.Conflict("a payment of the renewal is being confirmed on chain; try again when it is decided")
		for _, cs := range open {
			if cs.TxHash != nil || !slices.Contains(models.PreBroadcastStatuses, cs.Status) {
				return workflows.SubscriptionState{}, inFlight // nothing voided yet
			}
		}
		for _, cs := range open {
			status, err := s.Sessions.VoidInvoiceSession(ctx, cs.ID)
			switch {
			case errors.Is(err, apperr.ErrConflict):
				// Broadcast since the check: the sessions voided before it
				// stay voided (the merchant is ending the subscription), the
				// subscription as it was until the payment is decided.
				return workflows.SubscriptionState{}, inFlight
			case err != nil:
				return workflows.SubscriptionState{}, err
			case status == models.StatusComplete:
				// Paid between the list and the void: the customer's money
				// is a transaction of the subscription; say so before any
				// cancel is written over it.
				return workflows.SubscriptionState{}, apperr.Conflict("a payment of the renewal completed just now (session " + cs.ID +
					"); see its transaction, then cancel again (and refund it if the subscription is to end)")
			}
		}
	}
	now := s.now()
	ids, err := s.Store.RecordSubscription(ctx, models.SubscriptionRecord{SubscriptionID: sub.ID, Seq: sub.ChangeSeq + 1,
		Status: models.SubCanceled, CurrentPeriodStart: sub.CurrentPeriodStart, CurrentPeriodEnd: sub.CurrentPeriodEnd,
		TrialEnd: sub.TrialEnd, BillingAnchor: sub.BillingAnchor, PausedAt: sub.PausedAt, CanceledAt: &now,
		CancelReason: workflows.CancelReasonRequested, At: now,
		Events: []models.SubscriptionEventSpec{{Type: "subscription.canceled", Extra: map[string]any{"reason": workflows.CancelReasonRequested}}}})
	if err != nil {
		return workflows.SubscriptionState{}, err
	}
	s.log().WarnContext(ctx, "subscription canceled while its workflow was not running; written to the read model", "subscriptionId", id,
		"was", sub.Status)
	if s.Dispatch != nil && len(ids) > 0 {
		if err := s.Dispatch(ctx, ids); err != nil {
			s.log().WarnContext(ctx, "subscription.canceled deliveries not started; the reconciler starts them", "subscriptionId", id, "err", err)
		}
	}
	return workflows.SubscriptionState{SubscriptionID: sub.ID, Status: models.SubCanceled}, nil
}

// update runs one of the workflow's updates and answers the state it
// leaves; unanswered in time, a 503 with Retry-After.
func (s *Service) update(ctx context.Context, id, name string, arg any) (workflows.SubscriptionState, error) {
	uctx, cancel := context.WithTimeout(ctx, workflows.UpdateTimeout(s.UpdateTimeout))
	defer cancel()
	h, err := s.Temporal.UpdateWorkflow(uctx, client.UpdateWorkflowOptions{
		WorkflowID: workflows.SubscriptionWorkflowID(id), UpdateName: name, Args: []any{arg}, WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	var st workflows.SubscriptionState
	if err == nil {
		err = h.Get(uctx, &st)
	}
	if workflows.UpdateUnanswered(ctx, uctx, err) {
		return st, apperr.Unavailable("the subscription service is temporarily unavailable; retry shortly", workflows.UnavailableRetryAfter)
	}
	return st, err
}

// SettleFromException pays the subscription's open invoice with a payment
// exception's transfer the merchant accepts (short, late, from another
// wallet): the workflow voids the invoice's session, records the exception
// as the customer's transaction and renews the period. A subscription with
// nothing due, a transfer to the invoice's session being confirmed, a
// session found paid, or an exception closed meanwhile is a conflict.
func (s *Service) SettleFromException(ctx context.Context, sc models.Scope, id, exceptionID, note string) (workflows.SubscriptionState, error) {
	sub, err := s.Store.Subscription(ctx, sc, id)
	if err != nil {
		return workflows.SubscriptionState{}, err
	}
	if sub.Status != models.SubRenewalPending && sub.Status != models.SubPastDue {
		return workflows.SubscriptionState{}, apperr.Conflict("the subscription has no open invoice (it is " + sub.Status + "): only a renewal_pending or past_due one can be paid")
	}
	st, err := s.update(ctx, id, workflows.SubscriptionSettleUpdate, workflows.SettleRequest{ExceptionID: exceptionID, Note: note})
	if err == nil {
		return st, nil
	}
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		switch appErr.Type() {
		case workflows.ErrTypeNoOpenInvoice, workflows.ErrTypeInvoicePaid, activities.ErrTypePaymentInFlight, activities.ErrTypeExceptionRefused,
			activities.ErrTypeUnbillable:
			return st, apperr.Conflict(appErr.Message())
		}
	}
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return st, apperr.Conflict("the subscription has no open invoice (its workflow has ended)")
	}
	return st, err
}

// mapError turns a workflow's refusal into the domain error the API maps.
func (s *Service) mapError(ctx context.Context, sc models.Scope, id string, err error) error {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		switch appErr.Type() {
		case workflows.ErrTypeActionNotAllowed:
			return apperr.Invalid("action", appErr.Message())
		case activities.ErrTypePaymentInFlight:
			return apperr.Conflict(appErr.Message())
		}
	}
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		// The workflow has closed: the subscription ended meanwhile.
		cur, lerr := s.Store.Subscription(ctx, sc, id)
		if lerr != nil {
			return lerr
		}
		if cur.Status == models.SubCanceled {
			return apperr.Invalid("action", "the subscription is already canceled")
		}
		// Closed without a cancel (failed, or terminated by an operator):
		// nothing can act on it until an operator starts it again; said
		// as such, not as our fault of the moment (a 500 invites retries).
		s.log().ErrorContext(ctx, "subscription action on a closed workflow", "subscriptionId", id, "status", cur.Status, "err", err)
		return apperr.Conflict("the subscription's billing workflow is not running (status " + cur.Status +
			"); it takes no action until an operator restarts it")
	}
	return err
}

// RepairOnce starts the workflow of every subscription older than grace
// whose workflow was never confirmed (a crash between the database write
// and the start). It returns how many it started.
func (s *Service) RepairOnce(ctx context.Context, grace time.Duration) (int, error) {
	rows, err := s.Store.SubscriptionsWithoutWorkflow(ctx, s.now().Add(-grace), 100)
	if err != nil {
		return 0, err
	}
	return periodic.StartMissing(ctx, s.log(), "subscription", "subscriptionId", rows,
		func(r *models.Subscription) string { return r.ID }, s.StartWorkflow), nil
}

// RunRepairer repairs every interval until ctx ends.
func (s *Service) RunRepairer(ctx context.Context, interval, grace time.Duration) {
	periodic.Run(ctx, interval, func(ctx context.Context) {
		if _, err := s.RepairOnce(ctx, grace); err != nil && ctx.Err() == nil {
			s.log().Warn("subscription repair pass failed", "err", err)
		}
	})
}
