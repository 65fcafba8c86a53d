package activities

import (
	"context"
	"errors"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/chain"
)

// Application error types of the refund activities.
const (
	// ErrTypeRefundTxClaimed: the hash already backs another refund of the
	// merchant, or the refund took another hash (409).
	ErrTypeRefundTxClaimed = "RefundTxClaimed"
	// ErrTypeRefundOutcomeMismatch: an outcome for another transfer than
	// the refund's; a bug, never retried.
	ErrTypeRefundOutcomeMismatch = "RefundOutcomeMismatch"
)

// RefundSubmission attaches a transfer to a refund. Refund id and hash are
// the step's idempotency key: the same pair again writes nothing.
type RefundSubmission struct {
	RefundID string
	TxHash   string
	At       time.Time
}

// RefundOutcome ends a refund: succeeded (TxHash verified) or failed.
type RefundOutcome struct {
	RefundID string
	Status   string // succeeded or failed
	TxHash   string
	Reason   string
	Message  string
	At       time.Time
	// WatchedUntil, on a failure, is the end of the watch of a transfer
	// sent for the refund that may still land (its own, not found in time,
	// or one its failed replacement replaced): until then it may succeed.
	WatchedUntil *time.Time `json:",omitempty"`
}

// RefundFinish is the outcome as stored.
type RefundFinish struct {
	Status        string
	Reason        string
	Message       string
	FullyRefunded bool
}

// FinishedRefund is what the store did: the stored outcome and the
// deliveries of its payment.refunded event.
type FinishedRefund struct {
	Status        string
	Reason        string
	Message       string
	FullyRefunded bool
	Deliveries    []string
}

// RefundStore is what the refund activities need from the store. Both
// methods are idempotent (refund id and hash; one outcome per refund; the
// event keyed by the refund id).
type RefundStore interface {
	// SubmitRefundTx moves a pending refund to submitted with its hash;
	// the same hash again succeeds; a hash that backs another refund, or
	// a refund that is no longer pending, is an apperr.ErrConflict.
	SubmitRefundTx(ctx context.Context, refundID, txHash string, at time.Time) error
	// ReplaceRefundTx points a submitted refund, or a failed one still
	// watched, at the transfer that replaced its hash; a conflict
	// (another refund's hash, another state, the amount refunded again)
	// is an apperr.ErrConflict.
	ReplaceRefundTx(ctx context.Context, refundID, txHash string, at time.Time) error
	// AdoptRefundTx records that a replaced hash landed after all: the
	// refund takes it back and succeeds (once); a hash another refund holds
	// since is an apperr.ErrConflict.
	AdoptRefundTx(ctx context.Context, o RefundOutcome) (FinishedRefund, error)
	// FinishRefund stores the outcome and its effects in one transaction
	// and returns what was stored (the first outcome, on a repeated call)
	// with the deliveries to dispatch.
	FinishRefund(ctx context.Context, o RefundOutcome) (FinishedRefund, error)
	// FinishLateRefund records a success verified after the refund failed
	// and while it was still watched (its transfer landed late): the
	// refund becomes succeeded with its effects, once; a refund that is
	// not a watched failure is answered as stored.
	FinishLateRefund(ctx context.Context, o RefundOutcome) (FinishedRefund, error)
	// FinishExpiredRefundLate records a transfer found on chain (verified)
	// for a refund that failed REFUND_EXPIRED without one: the refund takes
	// the hash and becomes succeeded with its effects, once; a hash that
	// backs another refund, or a refund in another state, is an
	// apperr.ErrConflict.
	FinishExpiredRefundLate(ctx context.Context, o RefundOutcome) (FinishedRefund, error)
	// EndRefundWatch records that the watch of a failed refund ended
	// without a transfer paying it: the message replaces the failure
	// message, the refund is no longer watched, and the amount it held is
	// refundable again.
	EndRefundWatch(ctx context.Context, refundID, txHash, message string) error
	// NoteRefundWatch replaces the failure message of a refund still
	// watched (the watch goes on; nothing else changes).
	NoteRefundWatch(ctx context.Context, refundID, txHash, message string) error
}

// RefundWatchEnd ends the watch of a failed refund.
type RefundWatchEnd struct {
	RefundID string
	TxHash   string
	Message  string
}

// ErrRefundOutcomeMismatch is what a store returns (wrapped) for an
// outcome naming another transfer than the refund's.
var ErrRefundOutcomeMismatch = errors.New("refund outcome names another transfer")

// RefundActivities are the side effects of RefundWorkflow.
type RefundActivities struct {
	Store      RefundStore
	Verifier   chain.Verifier
	Dispatcher DeliveryDispatcher
}

// SubmitRefundTx records the refund's transfer hash.
func (a *RefundActivities) SubmitRefundTx(ctx context.Context, in RefundSubmission) error {
	if in.RefundID == "" || in.TxHash == "" {
		return temporal.NewNonRetryableApplicationError("submission needs refund and hash", ErrTypeInvalidInput, nil)
	}
	err := a.Store.SubmitRefundTx(ctx, in.RefundID, in.TxHash, in.At)
	if errors.Is(err, apperr.ErrConflict) {
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeRefundTxClaimed, err)
	}
	return err
}

// ReplaceRefundTx records the transfer that replaced the refund's hash.
func (a *RefundActivities) ReplaceRefundTx(ctx context.Context, in RefundSubmission) error {
	if in.RefundID == "" || in.TxHash == "" {
		return temporal.NewNonRetryableApplicationError("replacement needs refund and hash", ErrTypeInvalidInput, nil)
	}
	err := a.Store.ReplaceRefundTx(ctx, in.RefundID, in.TxHash, in.At)
	if errors.Is(err, apperr.ErrConflict) {
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeRefundTxClaimed, err)
	}
	return err
}

// AdoptRefundTx records that a transfer the refund's hash replaced landed
// after all and pays it, then starts its event's deliveries.
func (a *RefundActivities) AdoptRefundTx(ctx context.Context, o RefundOutcome) (RefundFinish, error) {
	if o.RefundID == "" || o.Status != "succeeded" || o.TxHash == "" {
		return RefundFinish{}, temporal.NewNonRetryableApplicationError("an adopted transfer needs refund, status succeeded and hash", ErrTypeInvalidInput, nil)
	}
	out, err := a.finish(ctx, a.Store.AdoptRefundTx, o)
	if errors.Is(err, apperr.ErrConflict) {
		return RefundFinish{}, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeRefundTxClaimed, err)
	}
	return out, err
}

// VerifyRefundTransfer asks the chain about the refund's transfer
// (chain.VerifyRefund). A transient RPC fault is a retryable error, never
// a verdict; a permanent one is non-retryable and gives no verdict either.
func (a *RefundActivities) VerifyRefundTransfer(ctx context.Context, t chain.RefundTransfer) (chain.VerifyResult, error) {
	res, err := chain.VerifyRefund(ctx, a.Verifier, t)
	if err != nil {
		return res, verifyFault(ctx, err, "verify refund transfer "+t.TxHash, t.Network)
	}
	return res, nil
}

// FinishRefund records the refund's outcome and its effects, then starts
// the deliveries of its event. Both steps are idempotent.
func (a *RefundActivities) FinishRefund(ctx context.Context, o RefundOutcome) (RefundFinish, error) {
	if o.RefundID == "" || (o.Status != "succeeded" && o.Status != "failed") || (o.Status == "succeeded" && o.TxHash == "") {
		return RefundFinish{}, temporal.NewNonRetryableApplicationError("outcome needs refund, status and (succeeded) hash", ErrTypeInvalidInput, nil)
	}
	return a.finish(ctx, a.Store.FinishRefund, o)
}

// FinishLateRefund records the late landing of a refund failed
// TX_NOT_FOUND (RefundStore.FinishLateRefund), then starts the deliveries
// of its event. Both steps are idempotent.
func (a *RefundActivities) FinishLateRefund(ctx context.Context, o RefundOutcome) (RefundFinish, error) {
	if o.RefundID == "" || o.Status != "succeeded" || o.TxHash == "" {
		return RefundFinish{}, temporal.NewNonRetryableApplicationError("a late outcome needs refund, status succeeded and hash", ErrTypeInvalidInput, nil)
	}
	return a.finish(ctx, a.Store.FinishLateRefund, o)
}

// FinishExpiredRefundLate records the transfer found late for a refund
// that failed REFUND_EXPIRED (RefundStore.FinishExpiredRefundLate), then
// starts the deliveries of its event. Both steps are idempotent; a
// conflict (the hash backs another refund, the refund moved on) is final.
func (a *RefundActivities) FinishExpiredRefundLate(ctx context.Context, o RefundOutcome) (RefundFinish, error) {
	if o.RefundID == "" || o.Status != "succeeded" || o.TxHash == "" {
		return RefundFinish{}, temporal.NewNonRetryableApplicationError("a late outcome needs refund, status succeeded and hash", ErrTypeInvalidInput, nil)
	}
	out, err := a.finish(ctx, a.Store.FinishExpiredRefundLate, o)
	if errors.Is(err, apperr.ErrConflict) {
		return RefundFinish{}, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeRefundTxClaimed, err)
	}
	return out, err
}

// NoteRefundWatch records what a refund's watch learned while it goes on.
func (a *RefundActivities) NoteRefundWatch(ctx context.Context, e RefundWatchEnd) error {
	if e.RefundID == "" || e.TxHash == "" || e.Message == "" {
		return temporal.NewNonRetryableApplicationError("a watch's note needs refund, hash and message", ErrTypeInvalidInput, nil)
	}
	return a.Store.NoteRefundWatch(ctx, e.RefundID, e.TxHash, e.Message)
}

// EndRefundWatch records the end of a refund's late watch.
func (a *RefundActivities) EndRefundWatch(ctx context.Context, e RefundWatchEnd) error {
	if e.RefundID == "" || e.TxHash == "" || e.Message == "" {
		return temporal.NewNonRetryableApplicationError("the end of a watch needs refund, hash and message", ErrTypeInvalidInput, nil)
	}
	return a.Store.EndRefundWatch(ctx, e.RefundID, e.TxHash, e.Message)
}

func (a *RefundActivities) finish(ctx context.Context, store func(context.Context, RefundOutcome) (FinishedRefund, error), o RefundOutcome) (RefundFinish, error) {
	f, err := store(ctx, o)
	if errors.Is(err, ErrRefundOutcomeMismatch) {
		return RefundFinish{}, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeRefundOutcomeMismatch, err)
	}
	if err != nil {
		return RefundFinish{}, err
	}
	out := RefundFinish{Status: f.Status, Reason: f.Reason, Message: f.Message, FullyRefunded: f.FullyRefunded}
	if len(f.Deliveries) == 0 || a.Dispatcher == nil {
		return out, nil
	}
	return out, a.Dispatcher.Dispatch(ctx, f.Deliveries)
}
