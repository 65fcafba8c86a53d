package activities

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/chain"
)

// Application error types the checkout activities fail with; the workflow
// and the API recognise them by type, never by text.
const (
	// ErrTypeTxHashClaimed: the hash already backs another session or a
	// recorded transaction (SPEC.md: 409).
	ErrTypeTxHashClaimed = "TxHashClaimed"
	// ErrTypeInvalidInput: the activity was called with input it can never
	// accept; retrying does not help.
	ErrTypeInvalidInput = "InvalidInput"
)

// SessionTransition is one move of a session: its new status and the
// history entry that records it. EntryID makes the write idempotent.
type SessionTransition struct {
	SessionID string
	EntryID   string
	Status    string
	Source    string // server, client or chain
	Chain     string // network, for chain entries
	TxHash    string // set with the broadcast
	At        time.Time
}

// SessionOutcome ends a session: complete, failed, cancelled or expired.
type SessionOutcome struct {
	SessionID string
	EntryID   string
	Status    string
	Source    string
	Chain     string
	Reason    string // failure or cancel reason code
	Message   string
	// ReceivedUnits and Payer describe a verified transfer (complete only).
	ReceivedUnits string
	Payer         string
	At            time.Time
}

// CheckoutStore is what the checkout activities need from the store. Every
// method is idempotent: an activity retried after a crash writes nothing
// twice (unique keys: history entry id, transaction per session, event key,
// delivery per event and endpoint).
type CheckoutStore interface {
	// ClaimSessionTxHash makes txHash back this session, ever; a hash that
	// backs anything else is an apperr.ErrConflict. Claiming again for the
	// same session succeeds.
	ClaimSessionTxHash(ctx context.Context, sessionID, network, txHash string) error
	// RecordSessionTransition stores the new status and its history entry.
	RecordSessionTransition(ctx context.Context, t SessionTransition) error
	// FinishSession stores the outcome with its effects (for complete: the
	// transaction, link totals, customer; for every outcome: the events and
	// their webhook deliveries) in one transaction, and returns the ids of
	// the deliveries to dispatch (also when they existed already).
	FinishSession(ctx context.Context, o SessionOutcome) ([]string, error)
}

// DeliveryDispatcher starts the delivery workflow of each delivery id; a
// delivery whose workflow exists already is left alone.
type DeliveryDispatcher interface {
	Dispatch(ctx context.Context, deliveryIDs []string) error
}

// CheckoutActivities are the side effects of CheckoutSessionWorkflow.
type CheckoutActivities struct {
	Store      CheckoutStore
	Verifier   chain.Verifier
	Dispatcher DeliveryDispatcher
}

// ClaimTxHash claims a submitted hash for the session.
func (a *CheckoutActivities) ClaimTxHash(ctx context.Context, in ClaimTxHashInput) error {
	if in.SessionID == "" || in.TxHash == "" || in.Network == "" {
		return temporal.NewNonRetryableApplicationError("claim needs session, network and hash", ErrTypeInvalidInput, nil)
	}
	err := a.Store.ClaimSessionTxHash(ctx, in.SessionID, in.Network, in.TxHash)
	if errors.Is(err, apperr.ErrConflict) {
		return temporal.NewNonRetryableApplicationError("transaction hash already attached to another session or transaction",
			ErrTypeTxHashClaimed, err)
	}
	return err
}

// ClaimTxHashInput names a hash to claim for a session.
type ClaimTxHashInput struct {
	SessionID string
	Network   string
	TxHash    string
}

// RecordTransition writes a status change and its history entry.
func (a *CheckoutActivities) RecordTransition(ctx context.Context, t SessionTransition) error {
	if t.SessionID == "" || t.EntryID == "" || t.Status == "" {
		return temporal.NewNonRetryableApplicationError("transition needs session, entry and status", ErrTypeInvalidInput, nil)
	}
	return a.Store.RecordSessionTransition(ctx, t)
}

// VerifyTransfer asks the chain about the submitted transaction. A transient
// RPC fault is a retryable error, never a verdict; a permanent one (unknown
// network, an RPC endpoint serving another chain) is non-retryable so the
// workflow can say so, and still gives no verdict.
func (a *CheckoutActivities) VerifyTransfer(ctx context.Context, req chain.VerifyRequest) (chain.VerifyResult, error) {
	res, err := a.Verifier.Verify(ctx, req)
	if err != nil {
		if chain.IsPermanent(err) {
			return res, temporal.NewNonRetryableApplicationError(err.Error(), "VerifierMisconfigured", err)
		}
		activity.GetLogger(ctx).Warn("chain verification failed; will retry", "network", req.Network, "err", err)
		return res, fmt.Errorf("verify %s on %s: %w", req.TxHash, req.Network, err)
	}
	return res, nil
}

// FinishSession records the session's outcome and its effects, then starts
// the webhook deliveries of the events it emitted. Both steps are
// idempotent, so a retry after a crash repeats neither.
func (a *CheckoutActivities) FinishSession(ctx context.Context, o SessionOutcome) error {
	if o.SessionID == "" || o.EntryID == "" {
		return temporal.NewNonRetryableApplicationError("outcome needs session and entry", ErrTypeInvalidInput, nil)
	}
	ids, err := a.Store.FinishSession(ctx, o)
	if err != nil {
		return err
	}
	if len(ids) == 0 || a.Dispatcher == nil {
		return nil
	}
	return a.Dispatcher.Dispatch(ctx, ids)
}
