package models

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/paygate/paygate/money"
)

// Release gives back a session's hash: the chain failed a transaction that
// is not the session's payment (chain.VerifyResult.Foreign: another wallet
// sent and paid it, or it was mined before the session), submitted by
// anyone who knows the session's id. The session goes back to waiting for
// its payment instead of failing.
type Release struct {
	SessionID string
	EntryID   string
	// TxHash is the hash released: nothing happens unless the session
	// still holds it.
	TxHash string
	Chain  string
	// Reason and Message are the chain's verdict on the transaction; the
	// message is kept on the session while it waits (failureMessage).
	Reason        string
	Message       string
	ReceivedUnits string
	Payer         string
	Bound         bool
	Refs          []string
	// ExpiresAt, when later than the session's expiry, becomes it: the
	// time the released hash held the session is the customer's again
	// (capped: maxReleasedLife, a hosted checkout's own expiry, and never
	// for a subscription's invoice session, whose dunning sets its end).
	ExpiresAt time.Time
	At        time.Time
}

// ReleaseResult is what a release left.
type ReleaseResult struct {
	// Released is true when the session holds no hash any more and waits
	// for a payment (also on a repeated call); false when it finished or
	// holds another hash: Status says what it is.
	Released bool
	Status   string
	// ExpiresAt is the session's expiry after the release.
	ExpiresAt time.Time
	// Deliveries are the webhook deliveries of the exception that keeps the
	// released transfer's USDC, if it moved any to the merchant.
	Deliveries []string
}

// ReleaseSessionTxHash stores a release in one transaction, once: the
// session returns to the status it had before the broadcast (a history
// entry with source chain), its hash and received amount are cleared, and
// USDC the transaction moved to the merchant is kept as a payment
// exception naming the session (wrong_payer when another wallet paid it),
// unless it carries another session's reference (that session's payment).
// A session finished meanwhile, or holding another hash, is left alone.
func (s *Store) ReleaseSessionTxHash(ctx context.Context, r Release) (ReleaseResult, error) {
	received, err := receivedUnits(r.ReceivedUnits)
	if err != nil {
		return ReleaseResult{}, err
	}
	var out ReleaseResult
	err = s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		var cs CheckoutSession
		if err := s.forUpdate(tx).Where("id = ?", r.SessionID).Take(&cs).Error; err != nil {
			return notFound(err)
		}
		out.Status = cs.Status
		var done []CheckoutSessionEvent
		if err := tx.Where("id = ?", r.EntryID).Limit(1).Find(&done).Error; err != nil {
			return err
		}
		out.ExpiresAt = cs.ExpiresAt.UTC()
		if len(done) > 0 {
			// A retry of a release that committed: it happened (nothing
			// can attach another hash while the workflow waits for it).
			// Deliveries a failed dispatch left are started by the
			// delivery reconciler.
			out.Released, out.Status = true, done[0].Status
			return nil
		}
		if !TerminalStatus(cs.Status) && cs.TxHash == nil {
			// Released already: a workflow task retried after a crash
			// asks again with another entry id (ids derive from the
			// task's clock), and only a release leaves a session the
			// workflow confirms without a hash.
			out.Released = true
			return nil
		}
		if TerminalStatus(cs.Status) || *cs.TxHash != r.TxHash {
			return nil
		}
		at := r.At.UTC()
		o := Outcome{SessionID: cs.ID, Status: StatusFailed, Reason: r.Reason, Message: r.Message, ReceivedUnits: r.ReceivedUnits,
			Payer: r.Payer, Bound: r.Bound, Refs: r.Refs}
		var exc *EventSpec
		if received > 0 {
			theirs, err := anotherSessions(tx, &cs, &o, &received)
			if err != nil {
				return err
			}
			if !theirs {
				if exc, err = s.releasedTransferException(tx, &cs, o, received, at); err != nil {
					return err
				}
			}
		}
		status, err := statusBeforeBroadcast(tx, cs.ID)
		if err != nil {
			return err
		}
		e := CheckoutSessionEvent{ID: r.EntryID, SessionID: cs.ID, Status: status, Source: "chain", Chain: r.Chain, CreatedAt: at}
		if err := tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&e).Error; err != nil {
			return err
		}
		msg := fmt.Sprintf("transaction %s does not pay this session (%s); the session waits for its payment", r.TxHash, r.Message)
		fields := map[string]any{"status": status, "tx_hash": nil, "failure_reason": "", "failure_message": truncate(msg, 500),
			"received_amount": money.Amount(0), "updated_at": s.Now()}
		if out.ExpiresAt, err = s.giveBackTime(tx, &cs, r.ExpiresAt, fields); err != nil {
			return err
		}
		if err := tx.Model(&CheckoutSession{}).Where("id = ?", cs.ID).Updates(fields).Error; err != nil {
			return err
		}
		out.Released, out.Status = true, status
		if exc != nil {
			if out.Deliveries, err = s.emitEvent(tx, cs.MerchantID, cs.Mode, *exc, at); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil && out.Released {
		s.sessionsChanged(r.SessionID)
	}
	return out, err
}

// maxReleasedLife bounds how long after its creation a session may stay
// open by the time released hashes gave back: anyone who knows a session's
// id can hold it with a hash for a while, again and again, and must not
// keep it open for ever.
const maxReleasedLife = time.Hour

// releasedExpiry is the expiry a release may give a session: the one asked
// for, no later than maxReleasedLife after its creation nor than its hosted
// checkout's expiry; a subscription invoice session keeps its own.
func (s *Store) releasedExpiry(tx *gorm.DB, cs *CheckoutSession, want time.Time) (time.Time, error) {
	if cs.SubscriptionID != nil || !want.After(cs.ExpiresAt) {
		return cs.ExpiresAt, nil
	}
	if limit := cs.CreatedAt.Add(maxReleasedLife); want.After(limit) {
		want = limit
	}
	if cs.CheckoutID != nil {
		var hc HostedCheckout
		if err := tx.Select("expires_at").Where("id = ?", *cs.CheckoutID).Take(&hc).Error; err != nil {
			return time.Time{}, err
		}
		if want.After(hc.ExpiresAt) {
			want = hc.ExpiresAt
		}
	}
	if want.Before(cs.ExpiresAt) {
		return cs.ExpiresAt, nil
	}
	return want, nil
}

// giveBackTime sets in fields the expiry a release may give the session
// (releasedExpiry) when it is later than the session's own, and answers
// the session's expiry from then on.
func (s *Store) giveBackTime(tx *gorm.DB, cs *CheckoutSession, want time.Time, fields map[string]any) (time.Time, error) {
	until, err := s.releasedExpiry(tx, cs, want)
	if err != nil {
		return time.Time{}, err
	}
	if !until.After(cs.ExpiresAt) {
		return cs.ExpiresAt.UTC(), nil
	}
	fields["expires_at"] = until.UTC()
	return until.UTC(), nil
}

// releasedTransferException keeps a released transfer's USDC for the
// merchant: wrong_payer when another wallet than the session declares
// paid it, else as a failed transfer is kept (underpaid, wrong_payer).
func (s *Store) releasedTransferException(tx *gorm.DB, cs *CheckoutSession, o Outcome, received money.Amount, at time.Time) (*EventSpec, error) {
	if o.Payer == "" || cs.WalletAddress == "" || sameWallet(o.Payer, cs.WalletAddress) {
		return s.failedTransferException(tx, cs, o, received, at)
	}
	_, ev, err := s.upsertException(tx, &PaymentException{MerchantID: cs.MerchantID, Mode: cs.Mode, Network: cs.Network, TxHash: *cs.TxHash,
		Kind: ExceptionWrongPayer, Amount: received, ExpectedAmount: cs.ExpectedAmount, PayerAddress: o.Payer,
		MerchantWalletAddress: cs.MerchantWalletAddress, SessionIDs: StringList{cs.ID}, Message: truncate(o.Message, 500)}, at)
	return ev, err
}

// statusBeforeBroadcast is the last status a session had before a
// broadcast (its history's latest pre-broadcast entry).
func statusBeforeBroadcast(tx *gorm.DB, sessionID string) (string, error) {
	var e CheckoutSessionEvent
	err := tx.Where("session_id = ? AND status IN ?", sessionID, PreBroadcastStatuses).Order("created_at DESC, id DESC").Take(&e).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return StatusCreated, nil
	}
	return e.Status, err
}

// sameWallet compares wallet addresses: EVM hex without regard to case,
// Solana base58 exactly.
func sameWallet(a, b string) bool {
	if strings.HasPrefix(a, "0x") || strings.HasPrefix(a, "0X") {
		return strings.EqualFold(a, b)
	}
	return a == b
}

// SessionReleases counts the hashes a session gave back (its history's
// entries back to a status before the broadcast, from the chain): a submit
// after each is a new request to its workflow, not a retry of an earlier.
func (s *Store) SessionReleases(ctx context.Context, sessionID string) (int64, error) {
	var n int64
	err := s.ctx(ctx).Model(&CheckoutSessionEvent{}).
		Where("session_id = ? AND source = ? AND status IN ?", sessionID, "chain", PreBroadcastStatuses).Count(&n).Error
	return n, err
}

// Replacement sets aside the hash holding a session, which the chain has
// not shown, for a transfer found on chain that pays the session (the
// checkout workflow's replace).
type Replacement struct {
	SessionID string
	// Held is the hash set aside; TxHash the one that takes its place.
	Held   string
	TxHash string
	Chain  string
	// ReleaseEntryID and BroadcastEntryID are the two history entries:
	// back to the status before the broadcast (source chain, as a release
	// writes), then the broadcast of TxHash (source chain).
	ReleaseEntryID   string
	BroadcastEntryID string
	// ExpiresAt, when later, becomes the session's expiry (the time Held
	// held it, capped as a release caps it).
	ExpiresAt time.Time
	At        time.Time
}

// ReplacementResult is what a replacement left.
type ReplacementResult struct {
	// Replaced is true when the session holds TxHash (also on a repeated
	// call); false when it finished or holds neither hash, or Held was
	// seen (the session is confirming it).
	Replaced bool
	// Status is the status the release entry returned to.
	Status    string
	ExpiresAt time.Time
}

// ReplaceSessionTxHash swaps the session's hash in one transaction, so no
// one ever reads the session without a hash between the two: the release
// entry and the broadcast entry are written, the hash becomes TxHash and
// the note of an earlier release is cleared. Held moved no USDC (it is not
// on chain), so nothing is kept as an exception. A session already
// holding TxHash answers Replaced: a workflow task retried after a crash
// writes again with other entry ids (they derive from its clock).
func (s *Store) ReplaceSessionTxHash(ctx context.Context, r Replacement) (ReplacementResult, error) {
	var out ReplacementResult
	err := s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		var cs CheckoutSession
		if err := s.forUpdate(tx).Where("id = ?", r.SessionID).Take(&cs).Error; err != nil {
			return notFound(err)
		}
		out.Status, out.ExpiresAt = cs.Status, cs.ExpiresAt.UTC()
		if TerminalStatus(cs.Status) || cs.TxHash == nil {
			return nil
		}
		if *cs.TxHash == r.TxHash {
			status, err := statusBeforeBroadcast(tx, cs.ID)
			out.Replaced, out.Status = true, status
			return err
		}
		if *cs.TxHash != r.Held || cs.Status != StatusBroadcast {
			return nil
		}
		status, err := statusBeforeBroadcast(tx, cs.ID)
		if err != nil {
			return err
		}
		at := r.At.UTC()
		for _, e := range []CheckoutSessionEvent{
			{ID: r.ReleaseEntryID, SessionID: cs.ID, Status: status, Source: "chain", Chain: r.Chain, CreatedAt: at},
			{ID: r.BroadcastEntryID, SessionID: cs.ID, Status: StatusBroadcast, Source: "chain", Chain: r.Chain, CreatedAt: at},
		} {
			if err := tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&e).Error; err != nil {
				return err
			}
		}
		fields := map[string]any{"tx_hash": r.TxHash, "failure_reason": "", "failure_message": "", "updated_at": s.Now()}
		if out.ExpiresAt, err = s.giveBackTime(tx, &cs, r.ExpiresAt, fields); err != nil {
			return err
		}
		if err := tx.Model(&CheckoutSession{}).Where("id = ?", cs.ID).Updates(fields).Error; err != nil {
			return err
		}
		out.Replaced, out.Status = true, status
		return nil
	})
	if err == nil && out.Replaced {
		s.sessionsChanged(r.SessionID)
	}
	return out, err
}
