package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/paygate/paygate/activities"
	"github.com/paygate/paygate/models"
)

// checkoutStore adapts the store to activities.CheckoutStore, so the
// activities do not depend on GORM models.
type checkoutStore struct{ s *models.Store }

func (c checkoutStore) ClaimSessionTxHash(ctx context.Context, sessionID, network, txHash string) error {
	return c.s.ClaimSessionTxHash(ctx, sessionID, network, txHash)
}

func (c checkoutStore) RecordSessionTransition(ctx context.Context, t activities.SessionTransition) error {
	return c.s.RecordSessionTransition(ctx, models.Transition(t))
}

func (c checkoutStore) FinishSession(ctx context.Context, o activities.SessionOutcome) (activities.FinishedSession, error) {
	f, err := c.s.FinishSession(ctx, models.Outcome(o))
	return activities.FinishedSession(f), err
}

func (c checkoutStore) ReleaseSessionTxHash(ctx context.Context, r activities.SessionRelease) (activities.ReleasedSession, error) {
	got, err := c.s.ReleaseSessionTxHash(ctx, models.Release(r))
	return activities.ReleasedSession(got), err
}

func (c checkoutStore) ReplaceSessionTxHash(ctx context.Context, r activities.SessionReplacement) (activities.ReplacedSession, error) {
	got, err := c.s.ReplaceSessionTxHash(ctx, models.Replacement(r))
	return activities.ReplacedSession(got), err
}

// refundStore adapts the store to activities.RefundStore.
type refundStore struct{ s *models.Store }

func (r refundStore) SubmitRefundTx(ctx context.Context, refundID, txHash string, at time.Time) error {
	return r.s.SubmitRefundTx(ctx, refundID, txHash, at)
}

func (r refundStore) FinishRefund(ctx context.Context, o activities.RefundOutcome) (activities.FinishedRefund, error) {
	f, err := r.s.FinishRefund(ctx, models.RefundOutcome(o))
	if errors.Is(err, models.ErrRefundHashMismatch) {
		return activities.FinishedRefund{}, fmt.Errorf("%w: %v", activities.ErrRefundOutcomeMismatch, err)
	}
	return activities.FinishedRefund(f), err
}

func (r refundStore) ReplaceRefundTx(ctx context.Context, refundID, txHash string, at time.Time) error {
	return r.s.ReplaceRefundTx(ctx, refundID, txHash, at)
}

func (r refundStore) AdoptRefundTx(ctx context.Context, o activities.RefundOutcome) (activities.FinishedRefund, error) {
	f, err := r.s.AdoptRefundTx(ctx, models.RefundOutcome(o))
	return activities.FinishedRefund(f), err
}

func (r refundStore) NoteRefundWatch(ctx context.Context, refundID, txHash, message string) error {
	return r.s.NoteRefundWatch(ctx, refundID, txHash, message)
}

func (r refundStore) EndRefundWatch(ctx context.Context, refundID, txHash, message string) error {
	return r.s.EndRefundWatch(ctx, refundID, txHash, message)
}

func (r refundStore) FinishLateRefund(ctx context.Context, o activities.RefundOutcome) (activities.FinishedRefund, error) {
	f, err := r.s.FinishLateRefund(ctx, models.RefundOutcome(o))
	if errors.Is(err, models.ErrRefundHashMismatch) {
		return activities.FinishedRefund{}, fmt.Errorf("%w: %v", activities.ErrRefundOutcomeMismatch, err)
	}
	return activities.FinishedRefund(f), err
}

func (r refundStore) FinishExpiredRefundLate(ctx context.Context, o activities.RefundOutcome) (activities.FinishedRefund, error) {
	f, err := r.s.FinishExpiredRefundLate(ctx, models.RefundOutcome(o))
	return activities.FinishedRefund(f), err
}

// deliveryStore adapts the store to activities.DeliveryStore.
type deliveryStore struct{ s *models.Store }

func (d deliveryStore) LoadDeliveryTarget(ctx context.Context, id string) (activities.DeliveryTarget, error) {
	t, err := d.s.DeliveryTarget(ctx, id)
	if errors.Is(err, models.ErrGone) {
		return activities.DeliveryTarget{}, fmt.Errorf("delivery %s: %w", id, activities.ErrDeliveryGone)
	}
	return activities.DeliveryTarget(t), err
}

func (d deliveryStore) RecordDeliveryAttempt(ctx context.Context, a activities.DeliveryAttemptRecord) error {
	err := d.s.RecordDeliveryAttempt(ctx, models.AttemptRecord(a))
	if errors.Is(err, models.ErrGone) {
		return fmt.Errorf("delivery %s: %w", a.DeliveryID, activities.ErrDeliveryGone)
	}
	return err
}

// subscriptionStore adapts the store to activities.SubscriptionStore.
type subscriptionStore struct{ s *models.Store }

func (a subscriptionStore) RecordSubscription(ctx context.Context, r activities.SubscriptionRecord) ([]string, error) {
	rec := models.SubscriptionRecord{SubscriptionID: r.SubscriptionID, Seq: r.Seq, Status: r.Status,
		CurrentPeriodStart: r.CurrentPeriodStart, CurrentPeriodEnd: r.CurrentPeriodEnd, CancelAtPeriodEnd: r.CancelAtPeriodEnd,
		TrialEnd: r.TrialEnd, BillingAnchor: r.BillingAnchor, PausedAt: r.PausedAt, CanceledAt: r.CanceledAt,
		CancelReason: r.CancelReason, LatestSessionID: r.LatestSessionID, BillingError: r.BillingError, At: r.At}
	for _, ev := range r.Events {
		rec.Events = append(rec.Events, models.SubscriptionEventSpec{Type: ev.Type, Extra: ev.Extra})
	}
	return a.s.RecordSubscription(ctx, rec)
}

// invoiceExceptions adapts the store to activities.InvoiceExceptions.
type invoiceExceptions struct{ s *models.Store }

func (a invoiceExceptions) ResolveExceptionForInvoice(ctx context.Context, r activities.InvoiceExceptionRequest) (activities.InvoiceExceptionPayment, []string, error) {
	sc := models.Scope{MerchantID: r.MerchantID, Mode: models.Mode(r.Mode)}
	exc, t, ids, err := a.s.ResolveExceptionForInvoice(ctx, sc, r.ExceptionID, r.SubscriptionID, r.Invoice, r.Note)
	if err != nil {
		return activities.InvoiceExceptionPayment{}, nil, err
	}
	return activities.InvoiceExceptionPayment{ExceptionID: exc.ID, TransactionID: t.ID, TxHash: t.TxHash, Amount: t.Amount.String(),
		Network: t.Network}, ids, nil
}
