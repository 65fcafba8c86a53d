package activities

import (
	"context"
	"errors"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/paygate/paygate/apperr"
)

// ErrTypePaymentInFlight: a transfer for the invoice's session is broadcast
// and being confirmed, so the session cannot be voided (SPEC.md: no cancel
// after a broadcast). The API answers 409.
const ErrTypePaymentInFlight = "PaymentInFlight"

// ErrTypeUnbillable: an invoice's session cannot be opened because the
// subscription cannot be billed as it stands (its network is no longer
// configured, its receiving wallet is proven by another merchant); the
// message says which. The workflow holds and tries again.
const ErrTypeUnbillable = "Unbillable"

// SessionNotice tells a subscription's workflow that one of its invoice
// sessions ended (the signal sent after FinishSession).
type SessionNotice struct {
	SessionID string
	// Status is the session's outcome: complete, failed, cancelled or expired.
	Status string
	// Reason is a failure's code (empty in notices sent before it was).
	Reason string
}

// SubscriptionNotifier tells a subscription's workflow about its sessions.
type SubscriptionNotifier interface {
	// SessionFinished signals the workflow; a subscription whose workflow
	// has closed (canceled) is not an error.
	SessionFinished(ctx context.Context, subscriptionID string, n SessionNotice) error
}

// SubscriptionRecord is one change of a subscription: the read model's new
// state and the events reporting it (models.SubscriptionRecord).
type SubscriptionRecord struct {
	SubscriptionID     string
	Seq                int64
	Status             string
	CurrentPeriodStart time.Time
	CurrentPeriodEnd   time.Time
	CancelAtPeriodEnd  bool
	TrialEnd           *time.Time
	BillingAnchor      *time.Time
	PausedAt           *time.Time
	CanceledAt         *time.Time
	CancelReason       string
	LatestSessionID    string
	// BillingError: why the subscription cannot be billed now ("" none).
	BillingError string
	At           time.Time
	Events       []SubscriptionEvent
}

// SubscriptionEvent is one event of a change: its type and the fields it
// adds to the subscription's own.
type SubscriptionEvent struct {
	Type  string
	Extra map[string]any
}

// SubscriptionStore is what the subscription activities need from the store.
type SubscriptionStore interface {
	// RecordSubscription writes the change and its events in one
	// transaction, once per Seq, and returns the events' deliveries.
	RecordSubscription(ctx context.Context, r SubscriptionRecord) ([]string, error)
}

// InvoiceSessionRequest asks for the checkout session that pays an invoice.
type InvoiceSessionRequest struct {
	// SessionID is chosen by the workflow, so a retried activity finds the
	// session it created instead of opening another.
	SessionID      string
	SubscriptionID string
	ExpiresAt      time.Time
	// Invoice is the invoice's number (from 1): of the sessions opened for
	// one invoice only one may complete. 0 from histories before it.
	Invoice int
}

// InvoiceSession is an invoice's open checkout session.
type InvoiceSession struct {
	SessionID string
	Status    string
	ExpiresAt time.Time
	// CheckoutURL is the hosted page that pays it: <base>/checkout/<id>.
	CheckoutURL string
}

// InvoiceSessions opens, reads and voids the checkout sessions of invoices
// (the checkout service).
type InvoiceSessions interface {
	// OpenInvoiceSession creates the session (once per id) with its payment
	// reference and starts its CheckoutSessionWorkflow.
	OpenInvoiceSession(ctx context.Context, req InvoiceSessionRequest) (InvoiceSession, error)
	// InvoiceSessionStatus reads a session's status.
	InvoiceSessionStatus(ctx context.Context, sessionID string) (string, error)
	// VoidInvoiceSession cancels a session that has no broadcast transfer
	// and answers its status; one with a broadcast is an apperr.ErrConflict.
	VoidInvoiceSession(ctx context.Context, sessionID string) (string, error)
}

// ErrTypeExceptionRefused: the payment exception cannot pay the invoice
// (closed meanwhile, another network, no such subscription). The API
// answers 409.
const ErrTypeExceptionRefused = "ExceptionRefused"

// InvoiceExceptionRequest asks to record a payment exception's transfer
// as the payment of a subscription's open invoice.
type InvoiceExceptionRequest struct {
	ExceptionID    string
	SubscriptionID string
	// Invoice is the open invoice's number: one exception pays one invoice.
	Invoice    int
	MerchantID string
	Mode       string
	Note       string
}

// InvoiceExceptionPayment is the transaction recorded for it.
type InvoiceExceptionPayment struct {
	ExceptionID   string
	TransactionID string
	TxHash        string
	Amount        string
	Network       string
}

// InvoiceExceptions records payment exceptions as invoices' payments (the
// store).
type InvoiceExceptions interface {
	// ResolveExceptionForInvoice records the transaction (once: asked again
	// for the same invoice it answers the first, for another it refuses) and
	// answers the deliveries of its payment.completed event.
	ResolveExceptionForInvoice(ctx context.Context, r InvoiceExceptionRequest) (InvoiceExceptionPayment, []string, error)
}

// SubscriptionActivities are the side effects of SubscriptionWorkflow.
type SubscriptionActivities struct {
	Store    SubscriptionStore
	Sessions InvoiceSessions
	// Exceptions records a payment exception as an invoice's payment (the
	// settle-exception update).
	Exceptions InvoiceExceptions
	Dispatcher DeliveryDispatcher
	// PublicBaseURL is where customers reach the hosted pages.
	PublicBaseURL string
}

// RecordSubscription writes a change of the read model with its events,
// then starts their deliveries. Both steps are idempotent.
func (a *SubscriptionActivities) RecordSubscription(ctx context.Context, r SubscriptionRecord) error {
	if r.SubscriptionID == "" || r.Seq <= 0 || r.Status == "" {
		return temporal.NewNonRetryableApplicationError("record needs subscription, sequence and status", ErrTypeInvalidInput, nil)
	}
	ids, err := a.Store.RecordSubscription(ctx, r)
	if err != nil {
		if errors.Is(err, apperr.ErrNotFound) {
			return temporal.NewNonRetryableApplicationError("subscription not found", ErrTypeInvalidInput, err)
		}
		return err
	}
	if len(ids) == 0 || a.Dispatcher == nil {
		return nil
	}
	return a.Dispatcher.Dispatch(ctx, ids)
}

// OpenInvoiceSession opens the checkout session of an invoice and answers
// the link that pays it.
func (a *SubscriptionActivities) OpenInvoiceSession(ctx context.Context, req InvoiceSessionRequest) (InvoiceSession, error) {
	if req.SessionID == "" || req.SubscriptionID == "" || req.ExpiresAt.IsZero() {
		return InvoiceSession{}, temporal.NewNonRetryableApplicationError("invoice session needs id, subscription and expiry", ErrTypeInvalidInput, nil)
	}
	s, err := a.Sessions.OpenInvoiceSession(ctx, req)
	if err != nil {
		if errors.Is(err, apperr.ErrBadRequest) || errors.Is(err, apperr.ErrNotFound) {
			// The subscription cannot be billed as it stands (network not
			// configured, receiving wallet proven by another merchant, or
			// a contract wallet the merchant proved elsewhere only):
			// retrying now will not help; the workflow holds and tries
			// again later.
			return InvoiceSession{}, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeUnbillable, err)
		}
		return InvoiceSession{}, err
	}
	s.CheckoutURL = strings.TrimSuffix(a.PublicBaseURL, "/") + "/checkout/" + s.SessionID
	return s, nil
}

// InvoiceSessionStatus reads the status of an invoice's session: the
// workflow looks before it acts on a deadline, so a lost signal never
// costs a paid customer their subscription.
func (a *SubscriptionActivities) InvoiceSessionStatus(ctx context.Context, sessionID string) (string, error) {
	return a.Sessions.InvoiceSessionStatus(ctx, sessionID)
}

// VoidInvoiceSession cancels an invoice's session when the subscription
// ends; a broadcast payment cannot be voided (ErrTypePaymentInFlight).
func (a *SubscriptionActivities) VoidInvoiceSession(ctx context.Context, sessionID string) (string, error) {
	status, err := a.Sessions.VoidInvoiceSession(ctx, sessionID)
	if errors.Is(err, apperr.ErrConflict) {
		return status, temporal.NewNonRetryableApplicationError("a payment of the renewal is being confirmed on chain; try again when it is decided",
			ErrTypePaymentInFlight, err)
	}
	return status, err
}

// ResolveInvoiceException records a payment exception's transfer as the
// open invoice's payment, then starts the deliveries of its
// payment.completed. A refusal (the exception closed meanwhile, another
// network) is not retried (ErrTypeExceptionRefused).
func (a *SubscriptionActivities) ResolveInvoiceException(ctx context.Context, r InvoiceExceptionRequest) (InvoiceExceptionPayment, error) {
	if a.Exceptions == nil || r.ExceptionID == "" || r.SubscriptionID == "" || r.MerchantID == "" {
		return InvoiceExceptionPayment{}, temporal.NewNonRetryableApplicationError("exception, subscription and merchant are required", ErrTypeInvalidInput, nil)
	}
	p, ids, err := a.Exceptions.ResolveExceptionForInvoice(ctx, r)
	if err != nil {
		if errors.Is(err, apperr.ErrConflict) || errors.Is(err, apperr.ErrBadRequest) || errors.Is(err, apperr.ErrNotFound) {
			return InvoiceExceptionPayment{}, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeExceptionRefused, err)
		}
		return InvoiceExceptionPayment{}, err
	}
	if len(ids) > 0 && a.Dispatcher != nil {
		if err := a.Dispatcher.Dispatch(ctx, ids); err != nil {
			return InvoiceExceptionPayment{}, err
		}
	}
	return p, nil
}
