package models

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/money"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// ReasonTxNotFound is the failure of a session whose hash never appeared on
// chain within the window (chain.ReasonTxNotFound).
const ReasonTxNotFound = "TX_NOT_FOUND"

// PreBroadcastStatuses are the statuses that take a hash or a cancel.
var PreBroadcastStatuses = []string{StatusCreated, StatusWalletConnecting, StatusWalletReady}

// TerminalStatus reports whether a session status is an outcome.
func TerminalStatus(s string) bool {
	switch s {
	case StatusComplete, StatusFailed, StatusCancelled, StatusExpired:
		return true
	}
	return false
}

// CreateCheckoutSession stores a new session and its first history entry
// (source server). WorkflowStarted stays false until the workflow runs, so
// a crash in between is found and repaired.
func (s *Store) CreateCheckoutSession(ctx context.Context, cs *CheckoutSession) error {
	now := s.Now()
	cs.ID, cs.CreatedAt, cs.UpdatedAt, cs.Status = NewID(), now, now, StatusCreated
	entry := CheckoutSessionEvent{ID: NewID(), SessionID: cs.ID, Status: StatusCreated, Source: "server", CreatedAt: now}
	err := s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		if cs.CheckoutID != nil {
			// A hosted checkout's session is opened only while the checkout
			// is open, read under its row lock (PostgreSQL; SQLite has one
			// writer): a cancel committed since the caller read it is seen,
			// and one running now sees this session once it commits.
			var hc HostedCheckout
			if err := s.forUpdate(tx).Select("id", "status", "expires_at").Where("id = ?", *cs.CheckoutID).Take(&hc).Error; err != nil {
				return notFound(err)
			}
			if hc.Status == HostedOpen && !now.Before(hc.ExpiresAt) {
				hc.Status = HostedExpired // no new session, whatever is on its way
			}
			if hc.Status != HostedOpen {
				return apperr.Invalid("linkId", "the checkout is "+hc.Status)
			}
		}
		if err := tx.Create(cs).Error; err != nil {
			return err
		}
		return tx.Create(&entry).Error
	})
	if err == nil {
		s.sessionsChanged(cs.ID)
	}
	return err
}

// MarkWorkflowStarted records that a session's workflow exists.
func (s *Store) MarkWorkflowStarted(ctx context.Context, id string) error {
	return s.ctx(ctx).Model(&CheckoutSession{}).Where("id = ?", id).Update("workflow_started", true).Error
}

// MarkWorkflowsStarted records that the sessions' workflows exist, in
// statements of at most 500 sessions.
func (s *Store) MarkWorkflowsStarted(ctx context.Context, ids []string) error {
	for len(ids) > 0 {
		n := min(len(ids), 500)
		if err := s.ctx(ctx).Model(&CheckoutSession{}).Where("id IN ?", ids[:n]).Update("workflow_started", true).Error; err != nil {
			return err
		}
		ids = ids[n:]
	}
	return nil
}

// SessionsWithoutWorkflow lists sessions created before `before` whose
// workflow was never confirmed started, oldest first.
func (s *Store) SessionsWithoutWorkflow(ctx context.Context, before time.Time, limit int) ([]CheckoutSession, error) {
	var rows []CheckoutSession
	err := s.ctx(ctx).Where("workflow_started = ? AND created_at < ?", false, before).Order("id asc").Limit(limit).Find(&rows).Error
	return rows, err
}

// CheckoutSession loads a session by id (customer-facing: no owner scope).
func (s *Store) CheckoutSession(ctx context.Context, id string) (*CheckoutSession, error) {
	var cs CheckoutSession
	err := s.reader(ctx).Where("id = ?", id).Take(&cs).Error
	return &cs, notFound(err)
}

// CheckoutSessionOfMerchant loads one of the scope's sessions.
func (s *Store) CheckoutSessionOfMerchant(ctx context.Context, sc Scope, id string) (*CheckoutSession, error) {
	var cs CheckoutSession
	err := s.scoped(ctx, sc).Where("id = ?", id).Take(&cs).Error
	return &cs, notFound(err)
}

// SessionHistory lists a session's history in time order.
func (s *Store) SessionHistory(ctx context.Context, sessionID string) ([]CheckoutSessionEvent, error) {
	var rows []CheckoutSessionEvent
	err := s.reader(ctx).Where("session_id = ?", sessionID).Order("created_at asc, id asc").Find(&rows).Error
	return rows, err
}

// OpenSessionsOfLink lists a link's sessions that have no broadcast yet.
func (s *Store) OpenSessionsOfLink(ctx context.Context, linkID string) ([]CheckoutSession, error) {
	var rows []CheckoutSession
	err := s.ctx(ctx).Where("payment_link_id = ? AND status IN ?", linkID, PreBroadcastStatuses).Find(&rows).Error
	return rows, err
}

// OpenSessionsOfSubscription lists a subscription's invoice sessions that
// have no outcome yet (a broadcast one among them), oldest first.
func (s *Store) OpenSessionsOfSubscription(ctx context.Context, subscriptionID string) ([]CheckoutSession, error) {
	var rows []CheckoutSession
	err := s.ctx(ctx).Where("subscription_id = ? AND status NOT IN ?", subscriptionID, terminalStatuses).Order("id asc").Find(&rows).Error
	return rows, err
}

// OverdueSessions lists open sessions that should have ended: without a
// broadcast and expired before expiredBefore, or with a broadcast and not
// moved since movedBefore (past the not-found window).
func (s *Store) OverdueSessions(ctx context.Context, expiredBefore, movedBefore time.Time, limit int) ([]CheckoutSession, error) {
	var rows []CheckoutSession
	err := s.ctx(ctx).
		Where("(status IN ? AND expires_at < ?) OR (status IN ? AND updated_at < ?)",
			PreBroadcastStatuses, expiredBefore, []string{StatusBroadcast, StatusConfirming}, movedBefore).
		Order("id asc").Limit(limit).Find(&rows).Error
	return rows, err
}

// OpenSessionsOfDeletedLinks lists sessions without a broadcast whose link
// was deleted: their workflows must still hear of it (repair).
func (s *Store) OpenSessionsOfDeletedLinks(ctx context.Context, limit int) ([]CheckoutSession, error) {
	var rows []CheckoutSession
	err := s.ctx(ctx).Where("status IN ? AND payment_link_id IN (?)", PreBroadcastStatuses,
		s.db.Unscoped().Model(&PaymentLink{}).Select("id").Where("deleted_at IS NOT NULL")).
		Order("id asc").Limit(limit).Find(&rows).Error
	return rows, err
}

// ClaimSessionTxHash checks that a hash may be attached to this session.
// Claims are provisional and per merchant: the hash conflicts only with a
// transaction of the same merchant (a completed session or a record) that
// is not this session's. Other open sessions holding the same hash do not
// block it: the chain decides which one the transfer is bound to, so a
// stranger's submit can never lock a genuine payment out.
func (s *Store) ClaimSessionTxHash(ctx context.Context, sessionID, network, txHash string) error {
	var cs CheckoutSession
	if err := s.ctx(ctx).Select("id", "merchant_id").Where("id = ?", sessionID).Take(&cs).Error; err != nil {
		return notFound(err)
	}
	var t Transaction
	err := s.ctx(ctx).Select("id", "session_id", "verification").Where("merchant_id = ? AND network = ? AND tx_hash = ?", cs.MerchantID, network, txHash).Take(&t).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if t.SessionID != nil && *t.SessionID == sessionID {
		return nil
	}
	if t.SessionID == nil && t.Verification == VerificationFailed {
		// A record the chain refuted (a mistyped amount, say) backs
		// nothing: the session that paid with the hash adopts it.
		return nil
	}
	return apperr.Conflict("transaction hash already attached to another session or recorded transaction")
}

// Transition is a session status change with its history entry.
type Transition struct {
	SessionID string
	EntryID   string
	Status    string
	Source    string
	Chain     string
	TxHash    string
	At        time.Time
}

// RecordSessionTransition stores a status change and its entry (once per
// entry id). A terminal session is never moved again, and its history
// takes no entry after the outcome's (a transition arriving late, as a
// payment's sighting after the expiry, is dropped whole).
func (s *Store) RecordSessionTransition(ctx context.Context, t Transition) error {
	err := s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		e := CheckoutSessionEvent{ID: t.EntryID, SessionID: t.SessionID, Status: t.Status, Source: t.Source, Chain: t.Chain, CreatedAt: t.At.UTC()}
		res := tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&e)
		if res.Error != nil || res.RowsAffected == 0 {
			return res.Error
		}
		fields := map[string]any{"status": t.Status, "updated_at": s.Now()}
		if t.TxHash != "" {
			// A note of a hash given back before (ReleaseSessionTxHash)
			// is not about this one.
			fields["tx_hash"], fields["failure_message"] = t.TxHash, ""
		}
		terminal := []string{StatusComplete, StatusFailed, StatusCancelled, StatusExpired}
		res = tx.Model(&CheckoutSession{}).Where("id = ? AND status NOT IN ?", t.SessionID, terminal).Updates(fields)
		if res.Error == nil && res.RowsAffected == 0 {
			return errFinished
		}
		return res.Error
	})
	if errors.Is(err, errFinished) {
		return nil
	}
	if err == nil {
		s.sessionsChanged(t.SessionID)
	}
	return err
}

// errFinished rolls back a transition that came after the session's
// outcome.
var errFinished = errors.New("models: session finished")

// Outcome ends a session.
type Outcome struct {
	SessionID     string
	EntryID       string
	Status        string // complete, failed, cancelled, expired
	Source        string
	Chain         string
	Reason        string
	Message       string
	ReceivedUnits string
	Payer         string
	At            time.Time
	// Bound is true when the transfer carries the session's own payment
	// reference (chain.VerifyResult.Bound).
	Bound bool
	// Refs are references the transfer carries (chain.VerifyResult.Refs):
	// one that is another session's means the transfer is that session's.
	Refs []string
	// PaidBy, when set, is the transaction that used the payer's
	// authorization after the submitted one reverted
	// (chain.VerifyResult.PaidBy): the session's hash becomes it, and the
	// payment is recorded with it.
	PaidBy string
	// BlockTime is when the transfer was mined (zero when unknown): an
	// unproven transfer is contested by every session it could have paid
	// then (checkUnboundClaim).
	BlockTime time.Time
}

// FinishResult is the outcome as stored: a complete verdict becomes a
// failure when the store finds the transfer belongs elsewhere.
type FinishResult struct {
	Status  string
	Reason  string
	Message string
	// Deliveries are the webhook deliveries of the emitted events.
	Deliveries []string
	// SubscriptionID is the subscription whose invoice the session pays
	// ("" for a session of a payment link): its workflow is told.
	SubscriptionID string
}

// Failure reasons decided by the store when it finishes a session.
const (
	// ReasonTxContested: sessions without proof claim the same transfer;
	// it became a payment exception for the merchant to attach.
	ReasonTxContested = "TX_CONTESTED"
	// ReasonInvalidTransfer is chain.ReasonInvalidTransfer.
	ReasonInvalidTransfer = "INVALID_TRANSFER"
	// ReasonCheckoutPaid: the session's hosted checkout (single-use) was
	// paid through another of its sessions first; this payment became a
	// duplicate exception for the merchant to refund.
	ReasonCheckoutPaid = "CHECKOUT_ALREADY_PAID"
	// ReasonInvoicePaid: the subscription invoice the session pays was
	// paid through another of its sessions first; this payment became a
	// duplicate exception for the merchant to refund.
	ReasonInvoicePaid = "INVOICE_ALREADY_PAID"
)

// FinishSession stores a session's outcome and all its effects in one
// transaction, exactly once: the history entry, the status, for a complete
// session the transaction with the link's and the customer's totals, and
// the events with one delivery per subscribed endpoint. It returns the
// delivery ids of the session's events (also on a repeated call).
func (s *Store) FinishSession(ctx context.Context, o Outcome) (FinishResult, error) {
	if !TerminalStatus(o.Status) {
		return FinishResult{}, fmt.Errorf("models: %q is not an outcome", o.Status)
	}
	received, err := receivedUnits(o.ReceivedUnits)
	if err != nil {
		return FinishResult{}, err
	}
	out, err := s.finishPlain(ctx, o, received)
	if errors.Is(err, errNotPlain) {
		out, err = s.finish(ctx, o, received)
	}
	if err == nil {
		s.sessionsChanged(o.SessionID)
	}
	return out, err
}

// receivedUnits parses a verdict's received amount in token units ("":
// nothing).
func receivedUnits(units string) (money.Amount, error) {
	if units == "" {
		return 0, nil
	}
	v, err := strconv.ParseInt(units, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("models: received units %q: not a non-negative int64", units)
	}
	return money.Amount(v), nil
}

// errNotPlain: the outcome takes FinishSession's general path.
var errNotPlain = errors.New("models: not a plain outcome")

// finishPlain stores an outcome that moves no money (an expiry, a cancel,
// a failure with nothing received: the expiry storm's) on an open session
// in two round trips on PostgreSQL: the session read with its merchant's
// endpoints (one statement), then every write built ahead and sent
// together. The first write is guarded: the history entry takes the
// session's row lock and its session id from a read of the row that
// finds none (a NOT NULL failure, rolling back the whole) once another
// outcome is stored since the read. errNotPlain: a payment, money to keep
// as an exception, a session finished already, or a write refused by a
// constraint (the guard, or a retry's entry or event there already): the
// general path answers, which handles each.
func (s *Store) finishPlain(ctx context.Context, o Outcome, received money.Amount) (FinishResult, error) {
	if o.Status == StatusComplete || keepsTransfer(o, received) {
		return FinishResult{}, errNotPlain
	}
	cs, endpoints, err := s.sessionWithEndpoints(ctx, o.SessionID)
	if err != nil {
		return FinishResult{}, err
	}
	if TerminalStatus(cs.Status) {
		return FinishResult{}, errNotPlain
	}
	at := o.At.UTC()
	paidBy := settle(&cs, &o)
	entry, fields := s.outcomeWrites(&cs, o, received, paidBy, at)
	dry := s.dry(ctx)
	var stmts []pending
	add := func(db *gorm.DB) error {
		st, err := built(db)
		stmts = append(stmts, st)
		return err
	}
	// The guard's read locks the row on PostgreSQL: an outcome being
	// stored meanwhile is waited for, then the row read again as it
	// committed. SQLite has no row locks; its one writer runs the batch
	// apart from every other write.
	lock := ""
	if s.Dialect() == "postgres" {
		lock = " FOR UPDATE"
	}
	unchanged := gorm.Expr("(SELECT id FROM checkout_sessions WHERE id = ? AND status = ?"+lock+")", cs.ID, cs.Status)
	if err := add(dry.Model(&CheckoutSessionEvent{}).Create(map[string]any{"id": entry.ID,
		"session_id": unchanged, "status": entry.Status, "source": entry.Source, "chain": entry.Chain, "created_at": entry.CreatedAt})); err != nil {
		return FinishResult{}, err
	}
	update := len(stmts)
	if err := add(dry.Model(&CheckoutSession{}).Where("id = ? AND status = ?", cs.ID, cs.Status).Updates(fields)); err != nil {
		return FinishResult{}, err
	}
	var ids []string
	for _, ev := range sessionEvents(&cs, nil, o, nil) {
		e, err := newEvent(cs.MerchantID, cs.Mode, ev, at)
		if err != nil {
			return FinishResult{}, err
		}
		if err := add(dry.Create(&e)); err != nil {
			return FinishResult{}, err
		}
		for _, ep := range endpoints {
			if !subscribes(ep.Events, e.Type) {
				continue
			}
			d, err := newDelivery(e, ep.ID, ev.Data, at)
			if err != nil {
				return FinishResult{}, err
			}
			if err := add(dry.Create(&d)); err != nil {
				return FinishResult{}, err
			}
			ids = append(ids, d.ID)
		}
	}
	rows, err := s.pipeline(ctx, stmts)
	if err != nil {
		if isConstraintViolation(err) {
			err = errNotPlain
		}
		return FinishResult{}, err
	}
	if rows[update] != 1 {
		// The guard held the row: this cannot be. Failing, the activity
		// is retried, and the general path mends what was written.
		return FinishResult{}, fmt.Errorf("models: session %s changed under its lock (%d rows updated)", cs.ID, rows[update])
	}
	slices.Sort(ids)
	out := FinishResult{Status: o.Status, Reason: o.Reason, Message: o.Message, Deliveries: ids}
	if cs.SubscriptionID != nil {
		out.SubscriptionID = *cs.SubscriptionID
	}
	return out, nil
}

// sessionWithEndpoints reads a session and its merchant's active webhook
// endpoints of its mode in one statement (a join: the session's columns
// on every endpoint's row, or on one row without an endpoint).
func (s *Store) sessionWithEndpoints(ctx context.Context, id string) (CheckoutSession, []WebhookEndpoint, error) {
	var rows []struct {
		CheckoutSession `gorm:"embedded"`
		EndpointID      *string
		EndpointEvents  StringList
	}
	err := s.ctx(ctx).Model(&CheckoutSession{}).
		Select("checkout_sessions.*, webhook_endpoints.id AS endpoint_id, webhook_endpoints.events AS endpoint_events").
		Joins("LEFT JOIN webhook_endpoints ON webhook_endpoints.merchant_id = checkout_sessions.merchant_id AND "+
			"webhook_endpoints.mode = checkout_sessions.mode AND webhook_endpoints.active = ? AND webhook_endpoints.deleted_at IS NULL", true).
		Where("checkout_sessions.id = ?", id).Find(&rows).Error
	if err != nil {
		return CheckoutSession{}, nil, err
	}
	if len(rows) == 0 {
		return CheckoutSession{}, nil, apperr.NotFound()
	}
	var endpoints []WebhookEndpoint
	for _, r := range rows {
		if r.EndpointID != nil {
			endpoints = append(endpoints, WebhookEndpoint{ID: *r.EndpointID, Events: r.EndpointEvents})
		}
	}
	return rows[0].CheckoutSession, endpoints, nil
}

// keepsTransfer: a failed transfer that did reach the merchant is kept as
// a payment exception (failedTransferException).
func keepsTransfer(o Outcome, received money.Amount) bool {
	return o.Status == StatusFailed && o.Reason == ReasonInvalidTransfer && received > 0
}

// settle fits o to what is stored and answers whether the session takes
// the hash of the transaction that paid it (o.PaidBy): then cs has it too
// (the checks and the events read it).
func settle(cs *CheckoutSession, o *Outcome) (paidBy bool) {
	if TerminalStatus(cs.Status) {
		// Finished already (an activity retried after its commit): answer
		// what was stored, whatever this call asks.
		o.Status, o.Reason, o.Message = cs.Status, cs.FailureReason, cs.FailureMessage
		return false
	}
	// Backed by the transaction that carried the payer's authorization
	// (the submitted one reverted): the payment is recorded with it.
	if o.PaidBy != "" && (cs.TxHash == nil || *cs.TxHash != o.PaidBy) {
		cs.TxHash = &o.PaidBy
		return true
	}
	return false
}

// outcomeWrites are an outcome's history entry and the session's new
// fields.
func (s *Store) outcomeWrites(cs *CheckoutSession, o Outcome, received money.Amount, paidBy bool, at time.Time) (CheckoutSessionEvent, map[string]any) {
	e := CheckoutSessionEvent{ID: o.EntryID, SessionID: cs.ID, Status: o.Status, Source: o.Source, Chain: o.Chain, CreatedAt: at}
	fields := map[string]any{"status": o.Status, "failure_reason": o.Reason, "failure_message": truncate(o.Message, 500),
		"received_amount": received, "updated_at": s.Now()}
	if o.Status == StatusComplete {
		fields["completed_at"], fields["failure_message"] = at, ""
	}
	if paidBy {
		fields["tx_hash"] = o.PaidBy
	}
	return e, fields
}

// finish is FinishSession's general path: one transaction of GORM calls,
// its reads and writes interleaved.
func (s *Store) finish(ctx context.Context, o Outcome, received money.Amount) (FinishResult, error) {
	var out FinishResult
	err := s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		// Read under the row's lock: an outcome stored meanwhile (the
		// plain path, or another call of this one) is waited for and
		// read as it committed, so this one does not overwrite it.
		var cs CheckoutSession
		if err := s.forUpdate(tx).Where("id = ?", o.SessionID).Take(&cs).Error; err != nil {
			return notFound(err)
		}
		open := !TerminalStatus(cs.Status)
		at := o.At.UTC()
		paidBy := settle(&cs, &o)
		// The link (its totals, its token for the events) matters to a
		// payment only: an expiry, a cancel or a failure does without the
		// read.
		var link *PaymentLink
		var err error
		if o.Status == StatusComplete {
			if link, err = s.linkUnscoped(tx, cs.PaymentLinkID); err != nil {
				return err
			}
		}
		var txn *Transaction
		var exc *EventSpec
		if open {
			if o.Status == StatusComplete && !o.Bound {
				if exc, err = s.checkUnboundClaim(tx, &cs, &o, &received, at); err != nil {
					return err
				}
			}
			if o.Status == StatusComplete && cs.CheckoutID != nil {
				if exc, err = s.checkHostedOnce(tx, &cs, &o, received, at); err != nil {
					return err
				}
			}
			if o.Status == StatusComplete && cs.SubscriptionID != nil && cs.InvoiceNumber > 0 {
				if exc, err = s.checkInvoiceOnce(tx, &cs, &o, received, at); err != nil {
					return err
				}
			}
			if o.Status == StatusComplete {
				var conflict bool
				if txn, conflict, err = s.sessionTransaction(tx, &cs, link, received, o.Payer, at); err != nil {
					return err
				}
				if !conflict {
					if err := completeHosted(tx, &cs, at); err != nil {
						return err
					}
				}
				if conflict {
					// Another session of this merchant completed with the same
					// transfer first: neither had proof, so it is contested.
					o.Status, o.Reason = StatusFailed, ReasonTxContested
					o.Message = "another checkout session already completed with this transfer; the merchant will review it"
					if exc, err = s.contest(tx, &cs, received, o.Payer, at); err != nil {
						return err
					}
				}
			}
			if keepsTransfer(o, received) {
				// A transfer short of this session, or from another wallet
				// than it declared, that carries another session's
				// reference is that session's payment: not kept as this
				// one's exception (a stranger submitting a customer's
				// payment to a dearer session made it an "underpayment").
				if _, err := anotherSessions(tx, &cs, &o, &received); err != nil {
					return err
				}
			}
			if keepsTransfer(o, received) {
				if exc, err = s.failedTransferException(tx, &cs, o, received, at); err != nil {
					return err
				}
			}
		} else if o.Status == StatusComplete {
			var t Transaction
			if err := tx.Where("session_id = ?", cs.ID).Take(&t).Error; err != nil {
				return err
			}
			txn = &t
		}
		// What the checks above decided (contested, another session's
		// transfer) is what is stored. A session finished already keeps
		// its row and history as they are (a retried call's entry is
		// there; another caller's outcome lost to the stored one).
		if open {
			e, fields := s.outcomeWrites(&cs, o, received, paidBy, at)
			if err := tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&e).Error; err != nil {
				return err
			}
			if err := tx.Model(&CheckoutSession{}).Where("id = ?", cs.ID).Updates(fields).Error; err != nil {
				return err
			}
		}
		var deliveries []string
		for _, ev := range sessionEvents(&cs, link, o, txn) {
			got, err := s.emitEvent(tx, cs.MerchantID, cs.Mode, ev, at)
			if err != nil {
				return err
			}
			deliveries = append(deliveries, got...)
		}
		if exc != nil {
			more, err := s.emitEvent(tx, cs.MerchantID, cs.Mode, *exc, at)
			if err != nil {
				return err
			}
			deliveries = append(deliveries, more...)
		}
		out = FinishResult{Status: o.Status, Reason: o.Reason, Message: o.Message, Deliveries: deliveries}
		if cs.SubscriptionID != nil {
			out.SubscriptionID = *cs.SubscriptionID
		}
		return nil
	})
	return out, err
}

// checkUnboundClaim decides whether a transfer without the session's proof
// may complete it. It may not when the transfer carries another session's
// reference (it is that session's payment), or when another session of the
// merchant without proof holds the same hash, or held it and the transfer
// was contested before: then o becomes a failure, and a contested transfer
// a payment exception the merchant resolves.
func (s *Store) checkUnboundClaim(tx *gorm.DB, cs *CheckoutSession, o *Outcome, received *money.Amount, at time.Time) (*EventSpec, error) {
	if theirs, err := anotherSessions(tx, cs, o, received); err != nil || theirs {
		return nil, err
	}
	var rivals int64
	if err := tx.Model(&CheckoutSession{}).Where("merchant_id = ? AND network = ? AND tx_hash = ? AND id <> ? AND status NOT IN ?",
		cs.MerchantID, cs.Network, *cs.TxHash, cs.ID, []string{StatusFailed, StatusCancelled, StatusExpired}).Count(&rivals).Error; err != nil {
		return nil, err
	}
	// Money already held as an exception (of any kind: a wrong payer's, an
	// underpayment, an unmatched transfer, a contested one) is the
	// merchant's to attach: an unproven claim naming its sender does not
	// take it (a stranger may declare any wallet).
	var held int64
	if err := tx.Model(&PaymentException{}).Where("merchant_id = ? AND network = ? AND tx_hash = ?",
		cs.MerchantID, cs.Network, *cs.TxHash).Count(&held).Error; err != nil {
		return nil, err
	}
	var could []string
	if rivals == 0 && held == 0 && o.Payer != "" {
		// A transfer names its sender, not its session: any other session
		// of the merchant that declares the sender and was open when the
		// transfer was mined could be the one it pays, whether or not it
		// has claimed it yet (its customer may rely on the watcher, or a
		// stranger may have opened this one to take it). Only when there is
		// no such session is the claim this session's alone.
		var err error
		if could, err = s.couldBePaidBy(tx, cs, o); err != nil {
			return nil, err
		}
	}
	if rivals == 0 && held == 0 && len(could) == 0 {
		return nil, nil
	}
	o.Status, o.Reason = StatusFailed, ReasonTxContested
	switch {
	case rivals > 0:
		o.Message = "another checkout session claims the same transfer and neither proved it; the merchant will review it"
	case held > 0:
		o.Message = "this transfer is held as a payment exception and nothing proves it this session's; the merchant will review it"
	default:
		o.Message = "another checkout session declaring the same wallet could be the one this transfer pays, and nothing proves it this session's; the merchant will review it"
	}
	return s.contest(tx, cs, *received, o.Payer, at, could...)
}

// anotherSessions reports whether an unproven transfer carries another
// session's reference: then it is that session's payment (the session it is
// bound to completes with it), and o becomes a failure of this one with
// nothing received, so that no exception keeps it as this session's.
func anotherSessions(tx *gorm.DB, cs *CheckoutSession, o *Outcome, received *money.Amount) (bool, error) {
	if o.Bound {
		return false, nil
	}
	if carried, err := carriesAnotherReference(tx, cs.ID, o.Refs); err != nil || !carried {
		return false, err
	}
	o.Status, o.Reason = StatusFailed, ReasonInvalidTransfer
	o.Message = "this transfer carries the payment reference of another checkout session"
	o.ReceivedUnits, *received = "0", 0
	return true, nil
}

// CarriesAnotherReference reports whether refs (the references a
// transaction carries, chain.VerifyResult.Refs) hold the payment reference
// of a session other than sessionID: a transfer bound to that session,
// which the store would never let pay this one (anotherSessions).
func (s *Store) CarriesAnotherReference(ctx context.Context, sessionID string, refs []string) (bool, error) {
	return carriesAnotherReference(s.ctx(ctx), sessionID, refs)
}

func carriesAnotherReference(tx *gorm.DB, sessionID string, refs []string) (bool, error) {
	if len(refs) == 0 {
		return false, nil
	}
	var n int64
	if err := tx.Model(&CheckoutSession{}).Where("payment_reference IN ? AND id <> ?", refs, sessionID).Count(&n).Error; err != nil {
		return false, err
	}
	return n > 0, nil
}

// checkHostedOnce keeps a hosted checkout single-use: a session whose
// checkout another of its sessions has paid already (two tabs, both
// broadcast while the checkout was open) does not complete; its payment
// is a duplicate exception for the merchant to refund, naming both
// sessions. The checkout's row is read under its lock (after the
// session's, the order completeHosted keeps), so of two sessions finishing
// at once the second sees the first's completion.
func (s *Store) checkHostedOnce(tx *gorm.DB, cs *CheckoutSession, o *Outcome, received money.Amount, at time.Time) (*EventSpec, error) {
	var hc HostedCheckout
	if err := s.forUpdate(tx).Where("id = ?", *cs.CheckoutID).Take(&hc).Error; err != nil {
		return nil, err
	}
	if hc.Status != HostedComplete || hc.SessionID == nil || *hc.SessionID == cs.ID || cs.TxHash == nil {
		return nil, nil // a payment always has its hash; without one there is nothing to hold
	}
	return s.holdDuplicate(tx, cs, o, received, at, ReasonCheckoutPaid, "checkout", *hc.SessionID, "hosted checkout "+hc.ID)
}

// checkInvoiceOnce lets one session of a subscription's invoice complete:
// a session whose invoice another of its sessions has paid already (an
// older session's transfer confirmed after the next one was opened, a
// customer paying both links of the invoice) does not complete; its
// payment is a duplicate exception for the merchant to refund, naming both
// sessions. The subscription's row is locked (after the session's) so that
// of two sessions finishing at once the second sees the first's completion.
func (s *Store) checkInvoiceOnce(tx *gorm.DB, cs *CheckoutSession, o *Outcome, received money.Amount, at time.Time) (*EventSpec, error) {
	var sub Subscription
	if err := s.forUpdate(tx).Select("id").Where("id = ?", *cs.SubscriptionID).Take(&sub).Error; err != nil {
		return nil, err
	}
	var paid []string
	if err := tx.Model(&CheckoutSession{}).Where("subscription_id = ? AND invoice_number = ? AND status = ? AND id <> ?",
		sub.ID, cs.InvoiceNumber, StatusComplete, cs.ID).Order("id asc").Limit(1).Pluck("id", &paid).Error; err != nil {
		return nil, err
	}
	if len(paid) == 0 || cs.TxHash == nil {
		return nil, nil // a payment always has its hash; without one there is nothing to hold
	}
	return s.holdDuplicate(tx, cs, o, received, at, ReasonInvoicePaid, "invoice", paid[0],
		fmt.Sprintf("invoice %d of subscription %s", cs.InvoiceNumber, sub.ID))
}

// holdDuplicate fails a session whose payment paid something (what: the
// checkout, the invoice; named in full by paidWhat) that session paidBy
// had paid already, and keeps the money as a duplicate exception naming
// both sessions, for the merchant to refund. It returns the exception's
// event when it is new.
func (s *Store) holdDuplicate(tx *gorm.DB, cs *CheckoutSession, o *Outcome, received money.Amount, at time.Time,
	reason, what, paidBy, paidWhat string) (*EventSpec, error) {
	o.Status, o.Reason = StatusFailed, reason
	o.Message = "this " + what + " was already paid through another checkout session; the merchant holds this payment to refund it"
	_, ev, err := s.upsertException(tx, &PaymentException{MerchantID: cs.MerchantID, Mode: cs.Mode, Network: cs.Network, TxHash: *cs.TxHash,
		Kind: ExceptionDuplicate, Amount: received, ExpectedAmount: cs.ExpectedAmount, PayerAddress: o.Payer,
		MerchantWalletAddress: cs.MerchantWalletAddress, SessionIDs: StringList{cs.ID, paidBy},
		Message: "a second payment of " + paidWhat + ", which session " + paidBy + " had paid"}, at)
	return ev, err
}

// couldBePaidBy lists the merchant's other sessions an unproven transfer
// could have paid: on the same network and receiving wallet, declaring its
// sender, holding no hash, created before it was mined (with the block
// clocks' slack) and open then (not ended before it; a cancelled session's
// customer ended it). The amount does not narrow them: a short payment is
// still its session's.
func (s *Store) couldBePaidBy(tx *gorm.DB, cs *CheckoutSession, o *Outcome) ([]string, error) {
	mined := o.BlockTime
	if mined.IsZero() {
		mined = o.At // unknown (an old verdict): the sessions open now
	}
	var ids []string
	err := tx.Model(&CheckoutSession{}).
		Where("merchant_id = ? AND network = ? AND id <> ? AND tx_hash IS NULL AND LOWER(wallet_address) = LOWER(?) AND LOWER(merchant_wallet_address) = LOWER(?)",
			cs.MerchantID, cs.Network, cs.ID, o.Payer, cs.MerchantWalletAddress).
		Where("status IN ? AND expires_at > ? AND created_at <= ?",
			append(append([]string(nil), PreBroadcastStatuses...), StatusExpired), mined.UTC(), mined.UTC().Add(BlockClockSlack)).
		Order("id asc").Limit(20).Pluck("id", &ids).Error
	return ids, err
}

// BlockClockSlack is how much older than a session a block may claim to
// be and still have paid it: block timestamps follow their producers'
// clocks, not ours.
const BlockClockSlack = 10 * time.Minute

// contest records (or extends) the contested exception of a session's
// hash, naming the sessions that hold it and those it could pay (also), and
// returns its event when it is new.
func (s *Store) contest(tx *gorm.DB, cs *CheckoutSession, received money.Amount, payer string, at time.Time, also ...string) (*EventSpec, error) {
	var holders []string
	if err := tx.Model(&CheckoutSession{}).Where("merchant_id = ? AND network = ? AND tx_hash = ?", cs.MerchantID, cs.Network, *cs.TxHash).
		Order("id asc").Pluck("id", &holders).Error; err != nil {
		return nil, err
	}
	holders = append(holders, also...)
	_, ev, err := s.upsertException(tx, &PaymentException{MerchantID: cs.MerchantID, Mode: cs.Mode, Network: cs.Network, TxHash: *cs.TxHash,
		Kind: ExceptionContested, Amount: received, ExpectedAmount: cs.ExpectedAmount, PayerAddress: payer,
		MerchantWalletAddress: cs.MerchantWalletAddress, SessionIDs: holders,
		Message: "several checkout sessions without proof claim this transfer"}, at)
	return ev, err
}

// failedTransferException keeps the USDC of a failed transfer that did
// reach the merchant as a payment exception: short of the amount due, or
// not provably the session's payer's.
func (s *Store) failedTransferException(tx *gorm.DB, cs *CheckoutSession, o Outcome, received money.Amount, at time.Time) (*EventSpec, error) {
	kind := ExceptionWrongPayer
	if received < cs.ExpectedAmount {
		kind = ExceptionUnderpaid
	}
	_, ev, err := s.upsertException(tx, &PaymentException{MerchantID: cs.MerchantID, Mode: cs.Mode, Network: cs.Network, TxHash: *cs.TxHash,
		Kind: kind, Amount: received, ExpectedAmount: cs.ExpectedAmount, PayerAddress: o.Payer,
		MerchantWalletAddress: cs.MerchantWalletAddress, SessionIDs: StringList{cs.ID}, Message: truncate(o.Message, 500)}, at)
	return ev, err
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) > n {
		return string(r[:n])
	}
	return s
}

func (s *Store) linkUnscoped(tx *gorm.DB, id string) (*PaymentLink, error) {
	var l PaymentLink
	err := tx.Unscoped().Where("id = ?", id).Take(&l).Error
	return &l, notFound(err)
}

// sessionTransaction creates the transaction of a completed session once
// (transactions.session_id is unique) with the link's and customer's totals.
// A transaction of the merchant with the same hash that the merchant
// recorded is adopted (linked to the session, counted once); one of another
// session is a conflict.
func (s *Store) sessionTransaction(tx *gorm.DB, cs *CheckoutSession, link *PaymentLink, received money.Amount, payer string, at time.Time) (*Transaction, bool, error) {
	var existing Transaction
	err := tx.Where("session_id = ?", cs.ID).Take(&existing).Error
	if err == nil {
		return &existing, false, nil
	}
	if !errors.Is(err, gorm.ErrRecordNotFound) {
		return nil, false, err
	}
	if cs.TxHash == nil {
		return nil, false, fmt.Errorf("models: completed session %s has no hash", cs.ID)
	}
	// Locked as the record's verification locks it (SetRecordVerification).
	err = s.forUpdate(tx).Where("merchant_id = ? AND network = ? AND tx_hash = ?", cs.MerchantID, cs.Network, *cs.TxHash).Take(&existing).Error
	switch {
	case err == nil && existing.SessionID == nil:
		return s.adoptRecord(tx, cs, link, &existing, received, at)
	case err == nil:
		return nil, true, nil
	case !errors.Is(err, gorm.ErrRecordNotFound):
		return nil, false, err
	}
	wallet := payer
	if wallet == "" {
		wallet = cs.WalletAddress
	}
	t := &Transaction{ID: NewID(), MerchantID: cs.MerchantID, Mode: cs.Mode, PaymentLinkID: &link.ID, SessionID: &cs.ID,
		Amount: received, Token: link.Token, Network: cs.Network, TxHash: *cs.TxHash, Status: "completed",
		Verification: VerificationVerified, CustomerEmail: cs.CustomerEmail, CustomerName: cs.CustomerName, WalletAddress: wallet,
		MerchantWalletAddress: cs.MerchantWalletAddress, Source: SourceCheckout, CreatedAt: at}
	if err := s.applyTransaction(tx, t, cs.CustomerCountry); err != nil {
		return nil, false, err
	}
	return t, false, nil
}

// adoptRecord links a transaction the merchant recorded to the session the
// transfer turned out to pay: it is verified now, with the amount the chain
// shows the session received (a record typed with another amount is
// corrected, and the totals with it; one judged failed, and so taken out of
// the totals, is counted again), and it is counted toward the session's
// link once (moved off another link the record named).
func (s *Store) adoptRecord(tx *gorm.DB, cs *CheckoutSession, link *PaymentLink, t *Transaction, received money.Amount, at time.Time) (*Transaction, bool, error) {
	if received <= 0 {
		received = t.Amount // an outcome without the amount (not the workflow's)
	}
	if err := recountAdopted(tx, t, link, received, at); err != nil {
		return nil, false, err
	}
	fields := map[string]any{"session_id": cs.ID,
		"verification": VerificationVerified, "verification_message": "", "amount": received, "payment_link_id": link.ID}
	if t.CustomerID == nil && cs.CustomerEmail != "" {
		// A record made without a customer (the field is optional): the
		// session's customer paid it, and is counted as a completed
		// checkout's is (SPEC.md: customers come with completed payments).
		paid := *t
		paid.Amount, paid.CustomerEmail, paid.CustomerName, paid.CreatedAt = received, cs.CustomerEmail, cs.CustomerName, at
		id, err := s.upsertCustomerSpend(tx, &paid, cs.CustomerCountry)
		if err != nil {
			return nil, false, err
		}
		if t.RefundedAmount > 0 {
			if err := addToTotals(tx, nil, &id, totalsDelta{refunded: int64(t.RefundedAmount)}, at); err != nil {
				return nil, false, err
			}
		}
		fields["customer_id"], fields["customer_email"], fields["customer_name"] = id, cs.CustomerEmail, cs.CustomerName
		t.CustomerID, t.CustomerEmail, t.CustomerName = &id, cs.CustomerEmail, cs.CustomerName
	}
	if err := tx.Model(&Transaction{}).Where("id = ?", t.ID).Updates(fields).Error; err != nil {
		return nil, false, err
	}
	t.SessionID, t.Verification, t.VerificationMessage, t.Amount, t.PaymentLinkID = &cs.ID, VerificationVerified, "", received, &link.ID
	return t, false, nil
}

// recountAdopted moves the totals from the record t as it was counted to
// what the adopting session received on its link: the record comes out as
// recorded (unless a refutation took it out already) and goes in as paid;
// what its refunds gave back moves to the session's link.
func recountAdopted(tx *gorm.DB, t *Transaction, link *PaymentLink, received money.Amount, at time.Time) error {
	if t.Verification != VerificationFailed {
		if err := countTransaction(tx, t, -1, at); err != nil {
			return err
		}
	}
	paid := *t
	paid.Amount, paid.PaymentLinkID = received, &link.ID
	if err := countTransaction(tx, &paid, 1, at); err != nil {
		return err
	}
	if t.RefundedAmount == 0 {
		return nil
	}
	// Its refunds (a verified record can be refunded before a session
	// adopts it) move with it to the session's link.
	refunded := int64(t.RefundedAmount)
	if err := addToTotals(tx, t.PaymentLinkID, nil, totalsDelta{refunded: -refunded}, at); err != nil {
		return err
	}
	return addToTotals(tx, &link.ID, nil, totalsDelta{refunded: refunded}, at)
}

// sessionEvents are the events of an outcome (SPEC.md "Events"), keyed
// by type and session: a payment's need its link and transaction.
func sessionEvents(cs *CheckoutSession, link *PaymentLink, o Outcome, txn *Transaction) []EventSpec {
	live := cs.Mode == ModeLive
	amount := cs.ExpectedAmount.String()
	var txHash any
	if cs.TxHash != nil {
		txHash = *cs.TxHash
	}
	var events []EventSpec
	switch o.Status {
	case StatusComplete:
		var productID, externalID any
		if cs.ProductID != nil {
			productID = *cs.ProductID
		}
		if cs.ExternalCustomerID != "" {
			externalID = cs.ExternalCustomerID
		}
		metadata := map[string]string(cs.Metadata)
		if metadata == nil {
			metadata = map[string]string{}
		}
		data := map[string]any{"sessionId": cs.ID, "paymentLinkId": cs.PaymentLinkID, "productId": productID, "externalCustomerId": externalID,
			"checkoutId": cs.CheckoutID, "customerId": txn.CustomerID, "metadata": metadata, "txHash": txHash,
			"merchantWalletAddress": cs.MerchantWalletAddress, "amount": txn.Amount.String(), "expectedAmount": amount,
			"network": cs.Network, "token": link.Token, "livemode": live}
		pay := map[string]any{"transactionId": txn.ID, "sessionId": cs.ID, "paymentLinkId": cs.PaymentLinkID, "customerId": txn.CustomerID,
			"customerEmail": cs.CustomerEmail, "txHash": txHash, "walletAddress": txn.WalletAddress,
			"merchantWalletAddress": cs.MerchantWalletAddress, "amount": txn.Amount.String(), "token": link.Token,
			"network": cs.Network, "livemode": live}
		events = []EventSpec{{Type: "checkout.completed", Data: data}, {Type: "payment.completed", Data: pay}}
	case StatusFailed:
		data := map[string]any{"sessionId": cs.ID, "paymentLinkId": cs.PaymentLinkID, "txHash": txHash, "network": cs.Network,
			"amount": amount, "reason": o.Reason, "message": o.Message, "livemode": live}
		events = []EventSpec{{Type: "checkout.failed", Data: data}, {Type: "payment.failed", Data: data}}
	case StatusCancelled:
		events = []EventSpec{{Type: "checkout.cancelled", Data: map[string]any{"sessionId": cs.ID, "paymentLinkId": cs.PaymentLinkID,
			"network": cs.Network, "amount": amount, "reason": "customer_cancelled", "livemode": live}}}
	case StatusExpired:
		events = []EventSpec{{Type: "checkout.expired", Data: map[string]any{"sessionId": cs.ID, "paymentLinkId": cs.PaymentLinkID,
			"network": cs.Network, "amount": amount, "expiresAt": cs.ExpiresAt.UTC().Format("2006-01-02T15:04:05.000Z"), "livemode": live}}}
	}
	for i := range events {
		events[i].Key = events[i].Type + ":" + cs.ID
	}
	return events
}

// WatchedReferences lists the payment references of a network's sessions
// that expire, or expired, after endedAfter and have no transaction hash
// (open ones, whose payment is found without a submit, and recently ended
// ones, whose late payment becomes an exception), hold one being confirmed
// (it may be a stranger's that the chain shows not to be their payment and
// the session gives back: their own, paid meanwhile, is attached then) or
// failed on the one they hold (a stranger's hash, a short payment: a
// payment bound to them after is late). By expiry, not creation: an
// invoice session is open for days, a checkout's for 30 minutes.
func (s *Store) WatchedReferences(ctx context.Context, network string, endedAfter time.Time, limit int) ([]string, error) {
	var refs []string
	err := s.ctx(ctx).Model(&CheckoutSession{}).
		Where("network = ? AND payment_reference IS NOT NULL AND (tx_hash IS NULL OR status IN ?) AND expires_at > ?", network, watchedWithHash, endedAfter).
		Order("id desc").Limit(limit).Pluck("payment_reference", &refs).Error
	return refs, err
}

// watchedWithHash are the statuses of sessions holding a hash whose
// reference is watched (WatchedReferences).
var watchedWithHash = []string{StatusBroadcast, StatusConfirming, StatusFailed}

// foundWithHash are the statuses of sessions holding a hash whose
// reference a scan that found it on chain looks up (WatchedAmong) and
// whose wallets it reads (WatchedWallets): the watched ones, and completed
// ones, whose payment made again (a Solana Pay code scanned twice, the
// customer's second wallet signing the reference) is a duplicate or late
// exception naming them. Completed sessions' references are not listed
// one by one (WatchedReferences: a Solana call each, every pass).
var foundWithHash = []string{StatusBroadcast, StatusConfirming, StatusFailed, StatusComplete}

// WatchedWallets lists the receiving wallets of a network's watched
// sessions (WatchedReferences' sessions, and completed ones: foundWithHash),
// each once.
func (s *Store) WatchedWallets(ctx context.Context, network string, endedAfter time.Time) ([]string, error) {
	var wallets []string
	err := s.ctx(ctx).Model(&CheckoutSession{}).Distinct("merchant_wallet_address").
		Where("network = ? AND payment_reference IS NOT NULL AND (tx_hash IS NULL OR status IN ?) AND expires_at > ?", network, foundWithHash, endedAfter).
		Order("merchant_wallet_address").Pluck("merchant_wallet_address", &wallets).Error
	return wallets, err
}

// AnyFoundWatched reports whether a network has a session whose reference
// a scan that finds references on chain looks up (WatchedAmong's
// sessions): the EVM authorization scan runs only then.
func (s *Store) AnyFoundWatched(ctx context.Context, network string, endedAfter time.Time) (bool, error) {
	var ids []string
	err := s.ctx(ctx).Model(&CheckoutSession{}).
		Where("network = ? AND payment_reference IS NOT NULL AND (tx_hash IS NULL OR status IN ?) AND expires_at > ?", network, foundWithHash, endedAfter).
		Limit(1).Pluck("id", &ids).Error
	return len(ids) > 0, err
}

// WatchedAmong answers which of refs are watched references of a network
// (WatchedReferences' sessions: no transaction hash, one being confirmed
// or failed; and completed ones, foundWithHash; expiring after
// endedAfter), for a scan that found them on chain without listing them
// first.
func (s *Store) WatchedAmong(ctx context.Context, network string, refs []string, endedAfter time.Time) (map[string]bool, error) {
	out := map[string]bool{}
	for start := 0; start < len(refs); start += 500 {
		var got []string
		if err := s.ctx(ctx).Model(&CheckoutSession{}).
			Where("network = ? AND payment_reference IN ? AND (tx_hash IS NULL OR status IN ?) AND expires_at > ?",
				network, refs[start:min(start+500, len(refs))], foundWithHash, endedAfter).
			Pluck("payment_reference", &got).Error; err != nil {
			return nil, err
		}
		for _, r := range got {
			out[r] = true
		}
	}
	return out, nil
}

// SessionByReference loads the session of a payment reference.
func (s *Store) SessionByReference(ctx context.Context, ref string) (*CheckoutSession, error) {
	var cs CheckoutSession
	err := s.ctx(ctx).Where("payment_reference = ?", ref).Take(&cs).Error
	return &cs, notFound(err)
}

// OpenSessionsPaidBy lists a merchant's open sessions on a network that a
// plain transfer (txHash) of units from wallet would pay: declaring that
// wallet and due exactly that amount (the QR code's), without a hash and
// not expired; or, only when no such session is open, holding another hash
// the chain has not shown (txn_broadcast: the transfer may take its place,
// workflows' replace). A session waiting for its payment comes first: a
// hash held elsewhere (made up by a stranger, or the customer's own
// dropped one of an earlier session) must not make the match ambiguous.
func (s *Store) OpenSessionsPaidBy(ctx context.Context, merchantID, network, wallet, txHash string, units int64) ([]CheckoutSession, error) {
	var rows []CheckoutSession
	q := func() *gorm.DB {
		return s.ctx(ctx).Where("merchant_id = ? AND network = ? AND LOWER(wallet_address) = LOWER(?) AND expected_amount = ?", merchantID, network, wallet, units)
	}
	if err := q().Where("status IN ? AND tx_hash IS NULL AND expires_at > ?", PreBroadcastStatuses, s.Now()).Limit(2).Find(&rows).Error; err != nil || len(rows) > 0 {
		return rows, err
	}
	err := q().Where("status = ? AND tx_hash <> ?", StatusBroadcast, txHash).Limit(2).Find(&rows).Error
	return rows, err
}

// AnySessionDeclaring reports whether a merchant has an open session on a
// network declaring wallet and due exactly units: one a plain transfer of
// units from wallet may pay once it is free (held by another hash now).
func (s *Store) AnySessionDeclaring(ctx context.Context, merchantID, network, wallet string, units int64) (bool, error) {
	var ids []string
	err := s.ctx(ctx).Model(&CheckoutSession{}).
		Where("merchant_id = ? AND network = ? AND LOWER(wallet_address) = LOWER(?) AND expected_amount = ? AND status NOT IN ?",
			merchantID, network, wallet, units, []string{StatusComplete, StatusFailed, StatusCancelled, StatusExpired}).
		Limit(1).Pluck("id", &ids).Error
	return len(ids) > 0, err
}

// AnySessionDue reports whether a merchant has a session on a network,
// created before at and not ended, that is due exactly units at the
// receiving wallet: it may still take a transfer of units that reached the
// wallet at at (its customer submitting the hash late).
func (s *Store) AnySessionDue(ctx context.Context, merchantID, network, wallet string, units int64, at time.Time) (bool, error) {
	var ids []string
	err := s.ctx(ctx).Model(&CheckoutSession{}).
		Where("merchant_id = ? AND network = ? AND LOWER(merchant_wallet_address) = LOWER(?) AND expected_amount = ? AND created_at <= ? AND status NOT IN ?",
			merchantID, network, wallet, units, at, []string{StatusComplete, StatusFailed, StatusCancelled, StatusExpired}).
		Limit(1).Pluck("id", &ids).Error
	return len(ids) > 0, err
}

// ChainCursorOf is the stored scan cursor of a network and kind (0: none).
func (s *Store) ChainCursorOf(ctx context.Context, network, kind string) (uint64, error) {
	var c ChainCursor
	err := s.ctx(ctx).Where("network = ? AND kind = ?", network, kind).Take(&c).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return 0, nil
	}
	return c.Block, err
}

// SaveChainCursor stores a scan cursor as given. It may move back: the
// watcher stores it behind what it holds in memory only (a restart scans
// those blocks again); two workers storing theirs leave either, and both
// hold what they read.
func (s *Store) SaveChainCursor(ctx context.Context, network, kind string, block uint64) error {
	c := ChainCursor{Network: network, Kind: kind, Block: block, UpdatedAt: s.Now()}
	return s.ctx(ctx).Clauses(clause.OnConflict{
		Columns:   []clause.Column{{Name: "network"}, {Name: "kind"}},
		DoUpdates: clause.AssignmentColumns([]string{"block", "updated_at"}),
	}).Create(&c).Error
}

// WalletPlacesOf are the stored places of a network's wallet reads that
// were stored at or after since (an older one would have the read start
// further back than the window it covers).
func (s *Store) WalletPlacesOf(ctx context.Context, network string, since time.Time) (map[string]string, error) {
	var rows []WalletPlace
	if err := s.ctx(ctx).Where("network = ? AND updated_at >= ?", network, since).Find(&rows).Error; err != nil {
		return nil, err
	}
	out := make(map[string]string, len(rows))
	for _, r := range rows {
		out[r.Wallet] = r.Place
	}
	return out, nil
}

// SaveWalletPlaces stores the places of a network's wallet reads (one
// statement).
func (s *Store) SaveWalletPlaces(ctx context.Context, network string, places map[string]string) error {
	if len(places) == 0 {
		return nil
	}
	now := s.Now()
	rows := make([]WalletPlace, 0, len(places))
	for w, p := range places {
		rows = append(rows, WalletPlace{Network: network, Wallet: w, Place: p, UpdatedAt: now})
	}
	// One order for every statement: two workers storing at once on
	// PostgreSQL lock the rows in the same order.
	slices.SortFunc(rows, func(a, b WalletPlace) int { return cmp.Compare(a.Wallet, b.Wallet) })
	return s.ctx(ctx).Clauses(clause.OnConflict{
		Columns:   []clause.Column{{Name: "network"}, {Name: "wallet"}},
		DoUpdates: clause.AssignmentColumns([]string{"place", "updated_at"}),
	}).Create(&rows).Error
}
