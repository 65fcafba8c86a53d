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
	// ReceivedUnits and Payer describe a verified transfer.
	ReceivedUnits string
	Payer         string
	At            time.Time
	// Bound: the transfer carries the session's own payment reference.
	Bound bool
	// Refs: references the transfer carries (chain.VerifyResult.Refs).
	Refs []string
	// PaidBy: the transaction that carried the payer's authorization when
	// the submitted one reverted (chain.VerifyResult.PaidBy); the session
	// is then backed by it.
	PaidBy string
	// BlockTime is when the transfer was mined (chain.VerifyResult.BlockTime;
	// zero when unknown): which other sessions it could have paid.
	BlockTime time.Time
}

// SessionFinish is the outcome as stored: the store may turn a complete
// verdict into a failure (the transfer is bound to another session, or is
// contested). An empty Status means the outcome was stored as asked
// (histories recorded before this result existed).
type SessionFinish struct {
	Status  string
	Reason  string
	Message string
}

// FinishedSession is what the store did: the stored outcome and the
// webhook deliveries of its events.
type FinishedSession struct {
	Status     string
	Reason     string
	Message    string
	Deliveries []string
	// SubscriptionID is the subscription whose invoice the session pays.
	SubscriptionID string
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
	// their webhook deliveries) in one transaction, and returns the outcome
	// as stored with the ids of the deliveries to dispatch (also when they
	// existed already).
	FinishSession(ctx context.Context, o SessionOutcome) (FinishedSession, error)
	// ReleaseSessionTxHash gives the session's hash back (the session
	// returns to its status before the broadcast) and keeps the USDC the
	// released transaction moved to the merchant as a payment exception,
	// with the ids of that exception's deliveries to dispatch.
	ReleaseSessionTxHash(ctx context.Context, r SessionRelease) (ReleasedSession, error)
	// ReplaceSessionTxHash sets aside the session's hash, which the chain
	// has not shown, for a transfer found on chain, in one write
	// (idempotent: a session holding the new hash answers Replaced).
	ReplaceSessionTxHash(ctx context.Context, r SessionReplacement) (ReplacedSession, error)
}

// SessionReplacement swaps an unseen hash (Held) for a transfer found on
// chain (TxHash), with the two history entries it writes.
type SessionReplacement struct {
	SessionID        string
	Held             string
	TxHash           string
	Chain            string
	ReleaseEntryID   string
	BroadcastEntryID string
	// ExpiresAt is the expiry asked for (the time Held held the session
	// given back; the store caps it).
	ExpiresAt time.Time
	At        time.Time
}

// ReplacedSession is what a replacement left: Replaced when the session
// holds the new hash; Status is the status its release entry returned to;
// ExpiresAt its expiry as stored.
type ReplacedSession struct {
	Replaced  bool
	Status    string
	ExpiresAt time.Time
}

// SessionRelease gives back the hash of a session whose transaction the
// chain failed as no payment of its customer's (chain.VerifyResult.Foreign).
type SessionRelease struct {
	SessionID     string
	EntryID       string
	TxHash        string
	Chain         string
	Reason        string
	Message       string
	ReceivedUnits string
	Payer         string
	Bound         bool
	Refs          []string
	// ExpiresAt is the session's expiry from now on: the time the hash
	// held the session is given back (never earlier than it was).
	ExpiresAt time.Time
	At        time.Time
}

// ReleasedSession is what a release left: Released when the session waits
// for its payment again (Status is its status then), else the session
// finished or holds another hash meanwhile.
type ReleasedSession struct {
	Released   bool
	Status     string
	ExpiresAt  time.Time
	Deliveries []string
}

// SessionReleased is the release activity's answer to the workflow: its
// ExpiresAt is the session's expiry as stored (the store caps how much a
// release gives back).
type SessionReleased struct {
	Released  bool
	Status    string
	ExpiresAt time.Time
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
	// Subscriptions, when set, is told when a session paying a
	// subscription's invoice ends.
	Subscriptions SubscriptionNotifier
}

// ClaimTxHash checks that a submitted hash may back the session: it
// conflicts only with a transaction of the same merchant that is not this
// session's (claims of open sessions are provisional; the chain decides).
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
		return res, verifyFault(ctx, err, "verify "+req.TxHash, req.Network)
	}
	return res, nil
}

// ErrVerifierMisconfigured is the application error type of a permanent
// verifier fault (chain.IsPermanent): the workflow logs it as an error and
// keeps looking, since only an operator can fix it.
const ErrVerifierMisconfigured = "VerifierMisconfigured"

// verifyFault turns a verifier error into the activity's error: permanent
// faults are non-retryable ErrVerifierMisconfigured, the rest retryable.
func verifyFault(ctx context.Context, err error, what, network string) error {
	if chain.IsPermanent(err) {
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrVerifierMisconfigured, err)
	}
	activity.GetLogger(ctx).Warn("chain verification failed; will retry", "what", what, "network", network, "err", err)
	return fmt.Errorf("%s on %s: %w", what, network, err)
}

// FinishSession records the session's outcome and its effects, then starts
// the webhook deliveries of the events it emitted and, for a session that
// pays a subscription's invoice, signals the subscription's workflow. Every
// step is idempotent, so a retry after a crash repeats none (a repeated
// signal carries the same outcome, which the workflow has already taken).
func (a *CheckoutActivities) FinishSession(ctx context.Context, o SessionOutcome) (SessionFinish, error) {
	if o.SessionID == "" || o.EntryID == "" {
		return SessionFinish{}, temporal.NewNonRetryableApplicationError("outcome needs session and entry", ErrTypeInvalidInput, nil)
	}
	f, err := a.Store.FinishSession(ctx, o)
	if err != nil {
		return SessionFinish{}, err
	}
	out := SessionFinish{Status: f.Status, Reason: f.Reason, Message: f.Message}
	if len(f.Deliveries) > 0 && a.Dispatcher != nil {
		if err := a.Dispatcher.Dispatch(ctx, f.Deliveries); err != nil {
			return out, err
		}
	}
	if f.SubscriptionID != "" && a.Subscriptions != nil {
		if err := a.Subscriptions.SessionFinished(ctx, f.SubscriptionID, SessionNotice{SessionID: o.SessionID, Status: f.Status, Reason: f.Reason}); err != nil {
			return out, fmt.Errorf("tell subscription %s: %w", f.SubscriptionID, err)
		}
	}
	return out, nil
}

// ReplaceTxHash sets aside a session's hash that the chain has not shown
// for a transfer found on chain paying the session (the workflow checked
// both). Idempotent.
func (a *CheckoutActivities) ReplaceTxHash(ctx context.Context, r SessionReplacement) (ReplacedSession, error) {
	if r.SessionID == "" || r.Held == "" || r.TxHash == "" || r.ReleaseEntryID == "" || r.BroadcastEntryID == "" {
		return ReplacedSession{}, temporal.NewNonRetryableApplicationError("replacement needs session, both hashes and both entries", ErrTypeInvalidInput, nil)
	}
	return a.Store.ReplaceSessionTxHash(ctx, r)
}

// ReleaseTxHash gives back the hash of a session whose transaction is not
// its customer's payment (a stranger's, submitted by anyone who knows the
// session's id), then starts the deliveries of the exception keeping what
// it paid the merchant. Idempotent, as FinishSession.
func (a *CheckoutActivities) ReleaseTxHash(ctx context.Context, r SessionRelease) (SessionReleased, error) {
	if r.SessionID == "" || r.EntryID == "" || r.TxHash == "" {
		return SessionReleased{}, temporal.NewNonRetryableApplicationError("release needs session, entry and hash", ErrTypeInvalidInput, nil)
	}
	got, err := a.Store.ReleaseSessionTxHash(ctx, r)
	if err != nil {
		return SessionReleased{}, err
	}
	if len(got.Deliveries) > 0 && a.Dispatcher != nil {
		if err := a.Dispatcher.Dispatch(ctx, got.Deliveries); err != nil {
			return SessionReleased{}, err
		}
	}
	return SessionReleased{Released: got.Released, Status: got.Status, ExpiresAt: got.ExpiresAt}, nil
}
