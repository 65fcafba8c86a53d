package models

import (
	"context"
	"errors"
	"fmt"
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
	return s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(cs).Error; err != nil {
			return err
		}
		return tx.Create(&entry).Error
	})
}

// MarkWorkflowStarted records that a session's workflow exists.
func (s *Store) MarkWorkflowStarted(ctx context.Context, id string) error {
	return s.ctx(ctx).Model(&CheckoutSession{}).Where("id = ?", id).Update("workflow_started", true).Error
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
	err := s.ctx(ctx).Where("id = ?", id).Take(&cs).Error
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
	err := s.ctx(ctx).Where("session_id = ?", sessionID).Order("created_at asc, id asc").Find(&rows).Error
	return rows, err
}

// OpenSessionsOfLink lists a link's sessions that have no broadcast yet.
func (s *Store) OpenSessionsOfLink(ctx context.Context, linkID string) ([]CheckoutSession, error) {
	var rows []CheckoutSession
	err := s.ctx(ctx).Where("payment_link_id = ? AND status IN ?", linkID, PreBroadcastStatuses).Find(&rows).Error
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

// ClaimSessionTxHash makes a hash back this session, ever. Claiming again
// for the same session succeeds; a hash claimed by anything else conflicts.
func (s *Store) ClaimSessionTxHash(ctx context.Context, sessionID, network, txHash string) error {
	claim := TxHashClaim{Network: network, TxHash: txHash, SessionID: &sessionID, CreatedAt: s.Now()}
	res := s.ctx(ctx).Clauses(clause.OnConflict{DoNothing: true}).Create(&claim)
	if res.Error != nil {
		return res.Error
	}
	if res.RowsAffected == 1 {
		return nil
	}
	var existing TxHashClaim
	if err := s.ctx(ctx).Where("network = ? AND tx_hash = ?", network, txHash).Take(&existing).Error; err != nil {
		return err
	}
	if existing.SessionID != nil && *existing.SessionID == sessionID {
		return nil
	}
	return apperr.Conflict("transaction hash already attached to another session")
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
// entry id). A terminal session is never moved again.
func (s *Store) RecordSessionTransition(ctx context.Context, t Transition) error {
	return s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		e := CheckoutSessionEvent{ID: t.EntryID, SessionID: t.SessionID, Status: t.Status, Source: t.Source, Chain: t.Chain, CreatedAt: t.At.UTC()}
		res := tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&e)
		if res.Error != nil || res.RowsAffected == 0 {
			return res.Error
		}
		fields := map[string]any{"status": t.Status, "updated_at": s.Now()}
		if t.TxHash != "" {
			fields["tx_hash"] = t.TxHash
		}
		terminal := []string{StatusComplete, StatusFailed, StatusCancelled, StatusExpired}
		return tx.Model(&CheckoutSession{}).Where("id = ? AND status NOT IN ?", t.SessionID, terminal).Updates(fields).Error
	})
}

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
}

// FinishSession stores a session's outcome and all its effects in one
// transaction, exactly once: the history entry, the status, for a complete
// session the transaction with the link's and the customer's totals, and
// the events with one delivery per subscribed endpoint. It returns the
// delivery ids of the session's events (also on a repeated call).
func (s *Store) FinishSession(ctx context.Context, o Outcome) ([]string, error) {
	if !TerminalStatus(o.Status) {
		return nil, fmt.Errorf("models: %q is not an outcome", o.Status)
	}
	var deliveries []string
	err := s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		var cs CheckoutSession
		if err := tx.Where("id = ?", o.SessionID).Take(&cs).Error; err != nil {
			return notFound(err)
		}
		if TerminalStatus(cs.Status) && cs.Status != o.Status {
			return fmt.Errorf("models: session %s is already %s, cannot become %s", cs.ID, cs.Status, o.Status)
		}
		at := o.At.UTC()
		e := CheckoutSessionEvent{ID: o.EntryID, SessionID: cs.ID, Status: o.Status, Source: o.Source, Chain: o.Chain, CreatedAt: at}
		if err := tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&e).Error; err != nil {
			return err
		}
		var received money.Amount
		if o.ReceivedUnits != "" {
			v, err := strconv.ParseInt(o.ReceivedUnits, 10, 64)
			if err != nil || v < 0 {
				return fmt.Errorf("models: received units %q: not a non-negative int64", o.ReceivedUnits)
			}
			received = money.Amount(v)
		}
		fields := map[string]any{"status": o.Status, "failure_reason": o.Reason, "failure_message": truncate(o.Message, 500),
			"received_amount": received, "updated_at": s.Now()}
		if o.Status == StatusComplete {
			fields["completed_at"] = at
		}
		if err := tx.Model(&CheckoutSession{}).Where("id = ?", cs.ID).Updates(fields).Error; err != nil {
			return err
		}
		if o.Reason == ReasonTxNotFound {
			// The hash was never seen: release it, so a transfer that lands
			// late can still be recorded (POST /api/transactions) or back a
			// new session instead of being lost to this failed one.
			if err := tx.Where("session_id = ?", cs.ID).Delete(&TxHashClaim{}).Error; err != nil {
				return err
			}
		}
		link, err := s.linkUnscoped(tx, cs.PaymentLinkID)
		if err != nil {
			return err
		}
		var txn *Transaction
		if o.Status == StatusComplete {
			if txn, err = s.sessionTransaction(tx, &cs, link, received, o.Payer, at); err != nil {
				return err
			}
		}
		deliveries, err = s.emitSessionEvents(tx, &cs, link, o, txn, at)
		return err
	})
	return deliveries, err
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
func (s *Store) sessionTransaction(tx *gorm.DB, cs *CheckoutSession, link *PaymentLink, received money.Amount, payer string, at time.Time) (*Transaction, error) {
	var existing Transaction
	err := tx.Where("session_id = ?", cs.ID).Take(&existing).Error
	if err == nil {
		return &existing, nil
	}
	if !errors.Is(err, gorm.ErrRecordNotFound) {
		return nil, err
	}
	if cs.TxHash == nil {
		return nil, fmt.Errorf("models: completed session %s has no hash", cs.ID)
	}
	wallet := payer
	if wallet == "" {
		wallet = cs.WalletAddress
	}
	t := &Transaction{ID: NewID(), MerchantID: cs.MerchantID, Mode: cs.Mode, PaymentLinkID: &link.ID, SessionID: &cs.ID,
		Amount: received, Token: link.Token, Network: cs.Network, TxHash: *cs.TxHash, Status: "completed",
		CustomerEmail: cs.CustomerEmail, CustomerName: cs.CustomerName, WalletAddress: wallet,
		MerchantWalletAddress: cs.MerchantWalletAddress, Source: SourceCheckout, CreatedAt: at}
	if err := tx.Model(&TxHashClaim{}).Where("network = ? AND tx_hash = ?", t.Network, t.TxHash).
		Update("transaction_id", t.ID).Error; err != nil {
		return nil, err
	}
	if err := s.applyTransaction(tx, t); err != nil {
		return nil, err
	}
	return t, nil
}

// emitSessionEvents records the events of an outcome (SPEC.md "Events").
func (s *Store) emitSessionEvents(tx *gorm.DB, cs *CheckoutSession, link *PaymentLink, o Outcome, txn *Transaction, at time.Time) ([]string, error) {
	live := cs.Mode == ModeLive
	amount := cs.ExpectedAmount.String()
	var txHash any
	if cs.TxHash != nil {
		txHash = *cs.TxHash
	}
	var events []EventSpec
	switch o.Status {
	case StatusComplete:
		data := map[string]any{"sessionId": cs.ID, "paymentLinkId": cs.PaymentLinkID, "productId": nil, "externalCustomerId": nil,
			"customerId": txn.CustomerID, "metadata": map[string]string{}, "txHash": txHash,
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
	var ids []string
	for _, ev := range events {
		ev.Key = ev.Type + ":" + cs.ID
		got, err := s.emitEvent(tx, cs.MerchantID, cs.Mode, ev, at)
		if err != nil {
			return nil, err
		}
		ids = append(ids, got...)
	}
	return ids, nil
}
