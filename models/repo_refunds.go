package models

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"sort"
	"strings"
	"time"

	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/money"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// RefundRequest asks for a refund of one of the scope's transactions. The
// caller has checked the shape of every field (the destination's format for
// the transaction's network included).
type RefundRequest struct {
	Scope         Scope
	TransactionID string
	// Amount is what to refund; 0 refunds the refundable remainder.
	Amount money.Amount
	Reason string
	// Destination receives the refund; "" is the payer's wallet on record.
	Destination string
	InitiatedBy string
	// Window is how long the merchant has to submit the refund's transfer.
	Window time.Duration
}

// errNoRemainder says why a refund of the remainder finds nothing to refund.
const errNoRemainder = "nothing left to refund: the transaction is fully refunded, or what remains is held by refunds in progress " +
	"or by failed refunds whose transfer is still watched"

// CreateRefund stores a pending refund and reserves its amount on the
// transaction in one database transaction. The reservation is a
// conditional update (refund_reserved + amount <= amount) taken under the
// transaction's row lock (PostgreSQL: SELECT … FOR UPDATE; SQLite: the
// write lock every transaction takes at BEGIN), so refunds of one
// transaction never exceed it, however many requests race. The refund's
// subtotal and tax parts follow the original's split (splitRefund).
func (s *Store) CreateRefund(ctx context.Context, r RefundRequest) (*Refund, error) {
	if r.InitiatedBy == "" || r.Window <= 0 {
		return nil, fmt.Errorf("models: refund needs initiatedBy and a window")
	}
	var out *Refund
	err := s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		lock := tx
		if s.Dialect() == "postgres" {
			lock = tx.Clauses(clause.Locking{Strength: "UPDATE"})
		}
		var t Transaction
		if err := lock.Where("id = ? AND merchant_id = ? AND mode = ?", r.TransactionID, r.Scope.MerchantID, r.Scope.Mode).
			Take(&t).Error; err != nil {
			return notFound(err)
		}
		switch {
		case t.Status != "completed":
			return apperr.Conflict("only completed transactions can be refunded")
		case t.Verification != VerificationVerified:
			return apperr.Conflict("the transaction is not verified on chain (verification " + t.Verification + "); it cannot be refunded")
		case t.MerchantWalletAddress == "":
			return apperr.Conflict("the transaction has no receiving wallet on record to send the refund from")
		}
		dest := r.Destination
		if dest == "" && t.Source == SourceException {
			// The sender of a payment from another wallet than its
			// session's, or that no session matched, is unproven: an
			// exchange's or a router's wallet as often as the customer's,
			// and a refund sent there is lost to the customer. So is a
			// short or late payment's, whatever its kind, unless it is
			// the wallet a session it names declared (a router's short
			// payment, sent by the customer's wallet, was underpaid with
			// the router as its payer).
			proven, err := exceptionPayerDeclared(tx, &t)
			if err != nil {
				return err
			}
			if !proven {
				return apperr.Invalid("destinationWallet", "is required for a payment recorded from a transfer that no session "+
					"declaring its sender matched: its sender may be an exchange or a router, not the customer; name the customer's wallet")
			}
		}
		if dest == "" {
			dest = t.WalletAddress
		}
		switch {
		case dest == "":
			return apperr.Invalid("destinationWallet", "is required: the transaction has no payer wallet on record")
		case strings.EqualFold(dest, t.MerchantWalletAddress):
			return apperr.Invalid("destinationWallet", "must differ from the merchant wallet the refund is sent from")
		}
		remainder := t.Amount - t.RefundReserved
		amount := r.Amount
		switch {
		case amount == 0 && remainder <= 0:
			return apperr.Invalid("amount", errNoRemainder)
		case amount == 0:
			amount = remainder
		case amount < 0:
			return apperr.Invalid("amount", "must be positive")
		case amount > remainder:
			return apperr.Invalid("amount", fmt.Sprintf("exceeds the refundable remainder of %s %s", max(remainder, 0), t.Token))
		}
		// The reservation itself: it cannot pass the transaction's amount,
		// whatever another request committed since the read above.
		res := tx.Model(&Transaction{}).Where("id = ? AND refund_reserved + ? <= amount", t.ID, int64(amount)).
			Update("refund_reserved", gorm.Expr("refund_reserved + ?", int64(amount)))
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected != 1 {
			return apperr.Invalid("amount", "exceeds the refundable remainder: another refund of this transaction was created at the same time")
		}
		sub, tax, err := s.refundSplit(tx, &t, amount, "")
		if err != nil {
			return err
		}
		now := s.Now()
		out = &Refund{ID: NewID(), MerchantID: t.MerchantID, Mode: t.Mode, TransactionID: t.ID, Amount: amount,
			SubtotalAmount: sub, TaxAmount: tax, Token: t.Token, Network: t.Network, DestinationWallet: dest,
			SourceWallet: t.MerchantWalletAddress, Status: RefundPending, Reason: r.Reason, InitiatedBy: r.InitiatedBy,
			ExpiresAt: now.Add(r.Window), CreatedAt: now, UpdatedAt: now}
		return tx.Create(out).Error
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// refundSplit splits a refund of amount of t into its subtotal and tax
// parts, after the refunds of t that did not fail other than except (the
// refund being split again, when it lands late).
func (s *Store) refundSplit(tx *gorm.DB, t *Transaction, amount money.Amount, except string) (money.Amount, money.Amount, error) {
	var taxOrig money.Amount
	if t.SessionID != nil {
		var cs CheckoutSession
		err := tx.Select("tax", "expected_amount").Where("id = ?", *t.SessionID).Take(&cs).Error
		if err != nil && !errors.Is(err, gorm.ErrRecordNotFound) {
			return 0, 0, err
		}
		taxOrig = sessionTaxOf(t.Amount, cs.Tax, cs.ExpectedAmount)
	}
	var prev struct {
		Amount int64
		Tax    int64
	}
	q := tx.Model(&Refund{}).Select("COALESCE(SUM(amount),0) AS amount, COALESCE(SUM(tax_amount),0) AS tax").
		Where("transaction_id = ? AND status <> ?", t.ID, RefundFailed)
	if except != "" {
		q = q.Where("id <> ?", except)
	}
	if err := q.Scan(&prev).Error; err != nil {
		return 0, 0, err
	}
	sub, tax := SplitRefund(t.Amount, taxOrig, money.Amount(prev.Amount), money.Amount(prev.Tax), amount)
	return sub, tax, nil
}

// sessionTaxOf is the tax in received of a session due expected with tax:
// all of it when the session was paid in full or more (an overpayment is
// pre-tax), the session's share of what arrived when less did (an
// underpayment the merchant resolved into the session), rounded down.
func sessionTaxOf(received, tax, expected money.Amount) money.Amount {
	if expected <= 0 || received >= expected || tax <= 0 {
		return tax
	}
	share := new(big.Int).Mul(big.NewInt(int64(max(received, 0))), big.NewInt(int64(tax)))
	return money.Amount(share.Quo(share, big.NewInt(int64(expected))).Int64())
}

// SplitRefund splits a refund of amount into its subtotal and tax parts, in
// proportion to the original transaction: total is what the transaction
// received and taxOrig its tax (0 for a record without a split: all
// subtotal; the tax never counts for more than the total). An overpayment
// is pre-tax: the tax was computed on the price. prevAmount and prevTax are
// what the transaction's refunds that did not fail already hold.
//
// The tax part is taken from the cumulative share: floor((prevAmount +
// amount) × taxOrig / total) less prevTax, kept within [0, amount]. So the
// refunds' parts are exact to the micro unit, never add up to more than
// the original subtotal or tax, and refunding the whole transaction (in
// one refund or several) returns exactly the original parts.
func SplitRefund(total, taxOrig, prevAmount, prevTax, amount money.Amount) (subtotal, tax money.Amount) {
	if total <= 0 || amount <= 0 {
		return max(amount, 0), 0
	}
	taxOrig = min(max(taxOrig, 0), total)
	cum := min(prevAmount+amount, total)
	share := new(big.Int).Mul(big.NewInt(int64(cum)), big.NewInt(int64(taxOrig)))
	share.Quo(share, big.NewInt(int64(total)))
	tax = money.Amount(share.Int64()) - prevTax
	tax = min(max(tax, 0), amount)
	return amount - tax, tax
}

// RefundFilter narrows a refund list; empty fields do not filter.
type RefundFilter struct {
	Status        string
	TransactionID string
}

// Refunds lists a page of the scope's refunds, newest first.
func (s *Store) Refunds(ctx context.Context, sc Scope, f RefundFilter, p Page) ([]Refund, bool, error) {
	q := equal(s.scoped(ctx, sc), "status", f.Status, "transaction_id", f.TransactionID)
	return fetchPage[Refund](q, p)
}

// RefundOf loads one of the scope's refunds.
func (s *Store) RefundOf(ctx context.Context, sc Scope, id string) (*Refund, error) {
	var r Refund
	err := s.scoped(ctx, sc).Where("id = ?", id).Take(&r).Error
	return &r, notFound(err)
}

// RefundByID loads a refund whatever its owner (workers, operators).
func (s *Store) RefundByID(ctx context.Context, id string) (*Refund, error) {
	var r Refund
	err := s.ctx(ctx).Where("id = ?", id).Take(&r).Error
	return &r, notFound(err)
}

// RefundsOfTransactions lists the refunds of each transaction, oldest first.
func (s *Store) RefundsOfTransactions(ctx context.Context, ids []string) (map[string][]Refund, error) {
	out := map[string][]Refund{}
	if len(ids) == 0 {
		return out, nil
	}
	var rows []Refund
	if err := s.ctx(ctx).Where("transaction_id IN ?", ids).Order("id asc").Find(&rows).Error; err != nil {
		return nil, err
	}
	for _, r := range rows {
		out[r.TransactionID] = append(out[r.TransactionID], r)
	}
	return out, nil
}

// MarkRefundWorkflowStarted records that a refund's workflow exists.
func (s *Store) MarkRefundWorkflowStarted(ctx context.Context, id string) error {
	return s.ctx(ctx).Model(&Refund{}).Where("id = ?", id).Update("workflow_started", true).Error
}

// RefundsWithoutWorkflow lists refunds created before `before` whose
// workflow was never confirmed started, oldest first.
func (s *Store) RefundsWithoutWorkflow(ctx context.Context, before time.Time, limit int) ([]Refund, error) {
	var rows []Refund
	err := s.ctx(ctx).Where("workflow_started = ? AND created_at < ?", false, before).Order("id asc").Limit(limit).Find(&rows).Error
	return rows, err
}

// RefundsOverdue lists, by id after after, the open refunds whose workflow
// was started and that should have moved on by before: a pending one
// whose window ended before it, a submitted one not updated since it.
// Their workflow may have closed without ending them (an operator
// terminated it, or it failed); the caller asks Temporal.
func (s *Store) RefundsOverdue(ctx context.Context, before time.Time, after string, limit int) ([]Refund, error) {
	q := s.ctx(ctx).Where("workflow_started = ? AND ((status = ? AND expires_at < ?) OR (status = ? AND updated_at < ?))",
		true, RefundPending, before.UTC(), RefundSubmitted, before.UTC())
	if after != "" {
		q = q.Where("id > ?", after)
	}
	var rows []Refund
	err := q.Order("id asc").Limit(limit).Find(&rows).Error
	return rows, err
}

// RefundSource is a wallet that owes the transfers of pending refunds on a
// network (the wallet that received their payments).
type RefundSource struct {
	Network      string
	SourceWallet string
	// Oldest is when the oldest of those refunds was created.
	Oldest time.Time
	// Count and NewestID change when a refund is added (or one leaves
	// and another comes): the mark of a new refund, whatever the clocks
	// of the processes that created them. Expired counts those that
	// failed REFUND_EXPIRED (it changes when a pending one expires).
	Count    int
	NewestID string
	Expired  int
}

// ReasonRefundExpired is the failure of a refund no transfer was
// submitted for within its window.
const ReasonRefundExpired = "REFUND_EXPIRED"

// ExpiredRefundWatch is how long after its window a refund that failed
// REFUND_EXPIRED is still watched for its transfer: a merchant who pays it
// late sees it succeed (FinishExpiredRefundLate), since the money left.
const ExpiredRefundWatch = 7 * 24 * time.Hour

// ExpiredRefundListed is how long after its window an expired refund
// still takes a transfer (listed for the watcher, or submitted by hand):
// the week, and the time a transfer sent at its end takes to be read,
// confirmed and offered (the watcher's delay of about eleven minutes),
// with room to spare.
const ExpiredRefundListed = ExpiredRefundWatch + 30*time.Minute

// awaitingTransfer narrows q to the pending refunds no transfer was
// submitted for whose window is still open at now.
func awaitingTransfer(q *gorm.DB, now time.Time) *gorm.DB {
	// The status is written into the SQL, not bound: the partial index
	// idx_refunds_awaiting_transfer (migration 0023) has this predicate,
	// and a generic plan of a prepared statement cannot prove a bound value
	// matches it.
	return q.Where("status = '"+RefundPending+"' AND tx_hash IS NULL AND expires_at > ?", now.UTC())
}

// expiredAwaitingTransfer narrows q to the refunds that failed
// REFUND_EXPIRED without a hash within ExpiredRefundWatch before now (the
// partial index idx_refunds_expired_awaiting_transfer, migration 0024: its
// predicate written into the SQL likewise).
func expiredAwaitingTransfer(q *gorm.DB, now time.Time) *gorm.DB {
	return q.Where("status = '"+RefundFailed+"' AND failure_reason = '"+ReasonRefundExpired+"' AND tx_hash IS NULL AND expires_at > ?",
		now.Add(-ExpiredRefundListed).UTC())
}

// RefundSourcesAwaitingTransfer lists, per network, the source wallets of
// the refunds a transfer may still pay: pending ones no transfer was
// submitted for whose window is still open at now, and ones that failed
// REFUND_EXPIRED within ExpiredRefundWatch (the refund watcher reads the
// transfers out of them), each with where its reading must start (its
// oldest refund's creation, an expired one's too) and the mark of a new
// one. One row per
// wallet, however many refunds it owes: a merchant's thousands of refunds
// cannot crowd another merchant's wallet out.
func (s *Store) RefundSourcesAwaitingTransfer(ctx context.Context, now time.Time) ([]RefundSource, error) {
	type key struct{ network, wallet string }
	merged := map[key]*RefundSource{}
	var order []key
	for i, scope := range []func(*gorm.DB, time.Time) *gorm.DB{awaitingTransfer, expiredAwaitingTransfer} {
		expired := i == 1
		// The oldest refund per wallet by id (ids are time-ordered: give
		// or take the clocks of the processes that created them, which the
		// caller's slack covers; and every refund has the same window),
		// joined back for its creation (an aggregate
		// of a time column is not read back alike by every driver).
		agg := scope(s.ctx(ctx).Model(&Refund{}), now).
			Select("network, source_wallet, MIN(id) AS oldest_id, MAX(id) AS newest_id, COUNT(*) AS count").Group("network, source_wallet")
		// From the oldest refund's creation, an expired one's too: its
		// transfer may have been sent inside its window while no worker
		// read the wallet (down over the window's end), and a wallet new
		// to the watcher is read from here.
		var rows []RefundSource
		if err := s.ctx(ctx).Table("(?) AS agg", agg).
			Select("agg.network AS network, agg.source_wallet AS source_wallet, o.created_at AS oldest, agg.count AS count, agg.newest_id AS newest_id").
			Joins("JOIN refunds o ON o.id = agg.oldest_id").Scan(&rows).Error; err != nil {
			return nil, err
		}
		for _, r := range rows {
			k := key{r.Network, r.SourceWallet}
			m := merged[k]
			if m == nil {
				m = &RefundSource{Network: r.Network, SourceWallet: r.SourceWallet, Oldest: r.Oldest}
				merged[k] = m
				order = append(order, k)
			}
			if r.Oldest.Before(m.Oldest) {
				m.Oldest = r.Oldest
			}
			m.Count += r.Count
			if r.NewestID > m.NewestID {
				m.NewestID = r.NewestID
			}
			if expired {
				m.Expired += r.Count
			}
		}
	}
	sort.Slice(order, func(i, j int) bool {
		if order[i].network != order[j].network {
			return order[i].network < order[j].network
		}
		return order[i].wallet < order[j].wallet
	})
	out := make([]RefundSource, 0, len(order))
	for _, k := range order {
		out = append(out, *merged[k])
	}
	return out, nil
}

// RefundsAwaitingTransferFrom lists the pending refunds of amount owed by
// source to destination on network that no transfer was submitted for and
// whose window is still open at now, oldest first, at most limit: the
// refunds a transfer of that amount from source to destination may pay.
// caseless compares the destination without regard to case (EVM
// addresses).
func (s *Store) RefundsAwaitingTransferFrom(ctx context.Context, network, source, destination string, caseless bool, amount money.Amount,
	now time.Time, limit int) ([]Refund, error) {
	return s.refundsOwedFrom(ctx, awaitingTransfer, network, source, destination, caseless, amount, now, limit)
}

// ExpiredRefundsAwaitingTransferFrom is RefundsAwaitingTransferFrom for
// the refunds that failed REFUND_EXPIRED without a hash within
// ExpiredRefundWatch before now: the refunds a transfer sent late may pay.
func (s *Store) ExpiredRefundsAwaitingTransferFrom(ctx context.Context, network, source, destination string, caseless bool,
	amount money.Amount, now time.Time, limit int) ([]Refund, error) {
	return s.refundsOwedFrom(ctx, expiredAwaitingTransfer, network, source, destination, caseless, amount, now, limit)
}

// RefundHashTaken says whether txHash backs a refund on network: of the
// merchant merchantID, or of any merchant when merchantID is "". The
// refund watcher offers a transfer whose hash backs a refund of any
// merchant to no other refund (a wallet two merchants named theirs pays one
// refund with it, not two); a merchant's own submit is refused only a hash
// that backs another refund of that merchant (a stranger who named the
// merchant's wallet theirs and submitted its hash first cannot keep the
// merchant from recording its own transfer).
func (s *Store) RefundHashTaken(ctx context.Context, merchantID, network, txHash string) (bool, error) {
	q := s.ctx(ctx).Model(&Refund{}).Where("tx_hash = ? AND network = ?", txHash, network)
	if merchantID != "" {
		q = q.Where("merchant_id = ?", merchantID)
	}
	var n int64
	err := q.Limit(1).Count(&n).Error
	return n > 0, err
}

// ExpiredWithoutTransfer says the refund failed REFUND_EXPIRED and no
// transfer backs it: one sent late may still make it succeeded
// (FinishExpiredRefundLate).
func (r *Refund) ExpiredWithoutTransfer() bool {
	return r.Status == RefundFailed && r.FailureReason == ReasonRefundExpired && r.TxHash == nil
}

func (s *Store) refundsOwedFrom(ctx context.Context, scope func(*gorm.DB, time.Time) *gorm.DB, network, source, destination string,
	caseless bool, amount money.Amount, now time.Time, limit int) ([]Refund, error) {
	q := scope(s.ctx(ctx), now).Where("network = ? AND source_wallet = ? AND amount = ?", network, source, amount)
	if caseless {
		q = q.Where("LOWER(destination_wallet) = ?", strings.ToLower(destination))
	} else {
		q = q.Where("destination_wallet = ?", destination)
	}
	var rows []Refund
	err := q.Order("created_at asc, id asc").Limit(limit).Find(&rows).Error
	return rows, err
}

// SubmitRefundTx attaches the refund's transfer: the refund moves from
// pending to submitted. The same hash again is accepted (a retried
// activity); another hash, a refund that is no longer pending, or a hash
// that already backs another refund of the merchant on that network is a
// conflict.
func (s *Store) SubmitRefundTx(ctx context.Context, refundID, txHash string, at time.Time) error {
	res := s.ctx(ctx).Model(&Refund{}).Where("id = ? AND status = ?", refundID, RefundPending).
		Updates(map[string]any{"tx_hash": txHash, "status": RefundSubmitted, "submitted_at": at.UTC(), "updated_at": s.Now()})
	if isUniqueViolation(res.Error) {
		return apperr.Conflict("this transaction hash already backs another refund")
	}
	if res.Error != nil || res.RowsAffected == 1 {
		return res.Error
	}
	r, err := s.RefundByID(ctx, refundID)
	if err != nil {
		return err
	}
	if r.TxHash != nil && *r.TxHash == txHash {
		return nil
	}
	return apperr.Conflict("refund is " + r.Status)
}

// ReplaceRefundTx points a refund at the transfer that replaced its
// submitted one (a wallet's speed-up or re-send lands under a new hash; the
// first then never does): a submitted refund takes the new hash, and a
// failed refund still watched (WatchedUntil) becomes submitted again with
// it, its amount reserved again (it still is when the refund held it), in
// one database transaction. The same hash again is accepted (a retried
// activity). A hash that backs another refund, a refund in any other
// state, or an amount refunded again since the failure (of a refund that
// gave it back) is a conflict. The transfer is verified like a first one.
func (s *Store) ReplaceRefundTx(ctx context.Context, refundID, txHash string, at time.Time) error {
	return s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		var r Refund
		// Under the row's lock: an attempt that committed late is seen by
		// its retry (which then answers as the same hash again).
		if err := s.forUpdate(tx).Where("id = ?", refundID).Take(&r).Error; err != nil {
			return notFound(err)
		}
		if r.TxHash != nil && *r.TxHash == txHash && r.Status == RefundSubmitted {
			return nil
		}
		watched := r.watchedFailure()
		if r.Status != RefundSubmitted && !watched {
			return apperr.Conflict("refund is " + r.Status)
		}
		fields := map[string]any{"tx_hash": txHash, "submitted_at": at.UTC(), "updated_at": s.Now()}
		if watched {
			if !r.AmountHeld {
				res := tx.Model(&Transaction{}).Where("id = ? AND refund_reserved + ? <= amount", r.TransactionID, int64(r.Amount)).
					Update("refund_reserved", gorm.Expr("refund_reserved + ?", int64(r.Amount)))
				if res.Error != nil {
					return res.Error
				}
				if res.RowsAffected != 1 {
					return apperr.Conflict("the refund's amount has been refunded again since it failed; record this transfer with a new refund")
				}
			}
			fields["status"], fields["failure_reason"], fields["failure_message"], fields["failed_at"] = RefundSubmitted, "", "", nil
			fields["watched_until"], fields["amount_held"] = nil, false
			// Counted again, after the refunds made while it was failed:
			// its parts are split again after theirs (as a late landing's).
			var t Transaction
			if err := tx.Select("id", "session_id", "amount").Where("id = ?", r.TransactionID).Take(&t).Error; err != nil {
				return err
			}
			sub, tax, err := s.refundSplit(tx, &t, r.Amount, r.ID)
			if err != nil {
				return err
			}
			fields["subtotal_amount"], fields["tax_amount"] = sub, tax
		}
		return repoint(tx, &r, fields)
	})
}

// repoint writes a refund's new hash with fields, only over the state it
// was read in; a hash that backs another refund is a conflict.
func repoint(tx *gorm.DB, r *Refund, fields map[string]any) error {
	res := tx.Model(&Refund{}).Where("id = ? AND status = ?", r.ID, r.Status).Updates(fields)
	if isUniqueViolation(res.Error) {
		return apperr.Conflict("this transaction hash already backs another refund")
	}
	if res.Error != nil {
		return res.Error
	}
	if res.RowsAffected != 1 {
		return fmt.Errorf("models: refund %s changed while its hash was replaced", r.ID)
	}
	return nil
}

// forUpdate locks the rows a transaction reads (PostgreSQL: SELECT … FOR
// UPDATE; SQLite's transactions take the write lock at BEGIN).
func (s *Store) forUpdate(tx *gorm.DB) *gorm.DB {
	if s.Dialect() == "postgres" {
		return tx.Clauses(clause.Locking{Strength: "UPDATE"})
	}
	return tx
}

// AdoptRefundTx records that a transfer the refund's hash replaced landed
// after all and pays it (the replacement never did): in one database
// transaction the refund takes that hash back and succeeds, its amount
// refunded on the transaction (and reserved again when the refund had
// failed, was still watched and gave its amount back: the money left the
// merchant, so the record follows the chain, as FinishLateRefund does), and
// payment.refunded is emitted.
// A hash that backs another refund since is a conflict; a refund that is
// neither submitted nor a watched failure is answered as stored.
func (s *Store) AdoptRefundTx(ctx context.Context, o RefundOutcome) (RefundFinish, error) {
	if o.Status != RefundSucceeded || o.TxHash == "" {
		return RefundFinish{}, fmt.Errorf("models: an adopted transfer is a success with its hash")
	}
	var out RefundFinish
	err := s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		var r Refund
		if err := s.forUpdate(tx).Where("id = ?", o.RefundID).Take(&r).Error; err != nil {
			return notFound(err)
		}
		if r.Status == RefundSucceeded && r.TxHash != nil && *r.TxHash == o.TxHash {
			out = RefundFinish{Status: r.Status}
			var err error
			out.FullyRefunded, out.Deliveries, err = s.refundEventDeliveries(tx, r.ID)
			return err
		}
		watched := r.watchedFailure()
		if r.Status != RefundSubmitted && !watched {
			out = RefundFinish{Status: r.Status, Reason: r.FailureReason, Message: r.FailureMessage}
			return nil
		}
		at := o.At.UTC()
		if err := repoint(tx, &r, map[string]any{"tx_hash": o.TxHash, "status": RefundSucceeded, "succeeded_at": at,
			"failure_reason": "", "failure_message": "", "watched_until": nil, "amount_held": false, "updated_at": s.Now()}); err != nil {
			return err
		}
		r.TxHash = &o.TxHash
		var err error
		out, err = s.refunded(tx, &r, watched, at)
		return err
	})
	return out, err
}

// RefundOutcome ends a refund: succeeded (its transfer is verified) or
// failed (a wrong transfer, none within the window).
type RefundOutcome struct {
	RefundID string
	Status   string // succeeded or failed
	// TxHash is the verified transfer (succeeded): it must be the refund's.
	TxHash  string
	Reason  string
	Message string
	At      time.Time
	// WatchedUntil, on a failure, is the end of the watch of a transfer
	// sent for the refund that may still land (Refund.WatchedUntil).
	WatchedUntil *time.Time `json:",omitempty"`
}

// RefundFinish is the outcome as stored, with the deliveries of its event.
type RefundFinish struct {
	Status        string
	Reason        string
	Message       string
	FullyRefunded bool
	Deliveries    []string
}

// ErrRefundHashMismatch marks an outcome for another transfer than the
// refund's: a bug, never retried.
var ErrRefundHashMismatch = errors.New("models: refund outcome names another transfer than the refund's")

// FinishRefund stores a refund's outcome with its effects in one database
// transaction, exactly once (the status moves only out of pending or
// submitted): succeeded adds the amount to the transaction's refunded
// amount and emits payment.refunded (key payment.refunded:<refundId>) with
// one delivery per subscribed endpoint; failed gives the reserved amount
// back, unless a transfer sent for the refund is still watched
// (o.WatchedUntil): the refund then holds it (AmountHeld) until the watch
// ends, since that transfer may still land. A repeated call answers what
// was stored, with the event's deliveries.
func (s *Store) FinishRefund(ctx context.Context, o RefundOutcome) (RefundFinish, error) {
	if o.Status != RefundSucceeded && o.Status != RefundFailed {
		return RefundFinish{}, fmt.Errorf("models: %q is not a refund outcome", o.Status)
	}
	var out RefundFinish
	err := s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		var r Refund
		if err := tx.Where("id = ?", o.RefundID).Take(&r).Error; err != nil {
			return notFound(err)
		}
		at := o.At.UTC()
		if r.Status == RefundSucceeded || r.Status == RefundFailed {
			out = RefundFinish{Status: r.Status, Reason: r.FailureReason, Message: r.FailureMessage}
			if r.Status == RefundSucceeded {
				var err error
				out.FullyRefunded, out.Deliveries, err = s.refundEventDeliveries(tx, r.ID)
				return err
			}
			return nil
		}
		if o.Status == RefundSucceeded && (r.TxHash == nil || *r.TxHash != o.TxHash) {
			return fmt.Errorf("%w: refund %s, outcome for %q", ErrRefundHashMismatch, r.ID, o.TxHash)
		}
		fields := map[string]any{"status": o.Status, "amount_held": false, "updated_at": s.Now()}
		if o.Status == RefundSucceeded {
			fields["succeeded_at"] = at
		} else {
			fields["failed_at"], fields["failure_reason"], fields["failure_message"] = at, o.Reason, truncate(o.Message, 500)
			if o.WatchedUntil != nil {
				fields["watched_until"], fields["amount_held"] = o.WatchedUntil.UTC(), true
			}
		}
		res := tx.Model(&Refund{}).Where("id = ? AND status IN ?", r.ID, []string{RefundPending, RefundSubmitted}).Updates(fields)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected != 1 {
			return fmt.Errorf("models: refund %s changed during its outcome", r.ID)
		}
		if o.Status == RefundFailed {
			out = RefundFinish{Status: RefundFailed, Reason: o.Reason, Message: o.Message}
			if o.WatchedUntil != nil {
				return nil // held while watched
			}
			return tx.Model(&Transaction{}).Where("id = ?", r.TransactionID).
				Update("refund_reserved", gorm.Expr("refund_reserved - ?", int64(r.Amount))).Error
		}
		r.TxHash = &o.TxHash
		var err error
		out, err = s.refunded(tx, &r, false, at)
		return err
	})
	return out, err
}

// refunded records on its transaction a refund that has just succeeded
// (its amount refunded; when the refund had failed, its parts split again,
// and its amount reserved again if it gave it back), emits
// payment.refunded and answers the outcome with the event's deliveries.
func (s *Store) refunded(tx *gorm.DB, r *Refund, failed bool, at time.Time) (RefundFinish, error) {
	reserveAgain := failed && !r.AmountHeld
	fields := map[string]any{"refunded_amount": gorm.Expr("refunded_amount + ?", int64(r.Amount))}
	if reserveAgain {
		fields["refund_reserved"] = gorm.Expr("refund_reserved + ?", int64(r.Amount))
	}
	if err := tx.Model(&Transaction{}).Where("id = ?", r.TransactionID).Updates(fields).Error; err != nil {
		return RefundFinish{}, err
	}
	var t Transaction
	if err := tx.Select("id", "session_id", "amount", "refunded_amount", "payment_link_id", "customer_id").
		Where("id = ?", r.TransactionID).Take(&t).Error; err != nil {
		return RefundFinish{}, err
	}
	if err := countRefund(tx, &t, r.Amount, at); err != nil {
		return RefundFinish{}, err
	}
	if failed {
		// Landing late, it counts again after the refunds made while it
		// was failed (their tax parts were split without it): its own
		// parts are split again after theirs, so the refunds' tax parts
		// still add up to the cumulative share, to the micro unit.
		sub, tax, err := s.refundSplit(tx, &t, r.Amount, r.ID)
		if err != nil {
			return RefundFinish{}, err
		}
		if sub != r.SubtotalAmount || tax != r.TaxAmount {
			if err := tx.Model(&Refund{}).Where("id = ?", r.ID).
				Updates(map[string]any{"subtotal_amount": sub, "tax_amount": tax}).Error; err != nil {
				return RefundFinish{}, err
			}
			r.SubtotalAmount, r.TaxAmount = sub, tax
		}
	}
	full := t.RefundedAmount >= t.Amount
	r.Status = RefundSucceeded
	ids, err := s.emitEvent(tx, r.MerchantID, r.Mode, EventSpec{Type: "payment.refunded", Key: refundEventKey(r.ID),
		Data: RefundedEventData(r, full)}, at)
	if err != nil {
		return RefundFinish{}, err
	}
	return RefundFinish{Status: RefundSucceeded, FullyRefunded: full, Deliveries: ids}, nil
}

// FinishLateRefund records the late landing of a refund's transfer: a
// refund failed and still watched (its transfer unseen for the not-found
// window, its amount held) whose transfer then verified becomes succeeded,
// in one database transaction: the amount is refunded on the transaction
// and payment.refunded is emitted, as a success on time would have. A
// refund that gave its amount back (failed before migration 20261128_0019)
// reserves it again: the money left the merchant's wallet, so the record
// follows the chain even when a refund made since has reserved the same
// amount (the transaction then shows more refunded than it received, and no
// further refund can be created). A refund that is not a watched failure
// is answered as stored; o.TxHash must be the refund's.
func (s *Store) FinishLateRefund(ctx context.Context, o RefundOutcome) (RefundFinish, error) {
	if o.Status != RefundSucceeded || o.TxHash == "" {
		return RefundFinish{}, fmt.Errorf("models: a late refund outcome is a success with its hash")
	}
	var out RefundFinish
	err := s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		var r Refund
		if err := tx.Where("id = ?", o.RefundID).Take(&r).Error; err != nil {
			return notFound(err)
		}
		if r.TxHash == nil || *r.TxHash != o.TxHash {
			return fmt.Errorf("%w: refund %s, late outcome for %q", ErrRefundHashMismatch, r.ID, o.TxHash)
		}
		if r.Status == RefundSucceeded {
			out = RefundFinish{Status: r.Status}
			var err error
			out.FullyRefunded, out.Deliveries, err = s.refundEventDeliveries(tx, r.ID)
			return err
		}
		if !r.watchedFailure() {
			out = RefundFinish{Status: r.Status, Reason: r.FailureReason, Message: r.FailureMessage}
			return nil
		}
		at := o.At.UTC()
		res := tx.Model(&Refund{}).Scopes(watchedFailed).Where("id = ?", r.ID).
			Updates(map[string]any{"status": RefundSucceeded, "succeeded_at": at, "failure_reason": "", "failure_message": "",
				"watched_until": nil, "amount_held": false, "updated_at": s.Now()})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected != 1 {
			return fmt.Errorf("models: refund %s changed during its late outcome", r.ID)
		}
		var err error
		out, err = s.refunded(tx, &r, true, at)
		return err
	})
	return out, err
}

// FinishExpiredRefundLate records the transfer of a refund that failed
// REFUND_EXPIRED without one, found on chain after the window (verified:
// o.TxHash from the refund's source wallet to its destination, of its
// amount, mined after its creation): the refund takes the hash and becomes
// succeeded, its amount refunded (and reserved again: the failure gave it
// back) and payment.refunded emitted, in one database transaction. The
// money left the merchant's wallet, so the record follows the chain even
// when a refund made since has taken the same amount (the transaction then
// shows more refunded than it received, as FinishLateRefund's). The same
// hash again answers what was stored; a hash that backs another refund of
// the merchant, or a refund in any other state, is an apperr.ErrConflict.
func (s *Store) FinishExpiredRefundLate(ctx context.Context, o RefundOutcome) (RefundFinish, error) {
	if o.Status != RefundSucceeded || o.TxHash == "" {
		return RefundFinish{}, fmt.Errorf("models: a late refund outcome is a success with its hash")
	}
	var out RefundFinish
	err := s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		var r Refund
		if err := s.forUpdate(tx).Where("id = ?", o.RefundID).Take(&r).Error; err != nil {
			return notFound(err)
		}
		switch {
		case r.Status == RefundSucceeded && r.TxHash != nil && *r.TxHash == o.TxHash:
			out = RefundFinish{Status: r.Status}
			var err error
			out.FullyRefunded, out.Deliveries, err = s.refundEventDeliveries(tx, r.ID)
			return err
		case !r.ExpiredWithoutTransfer():
			return apperr.Conflict("refund is " + r.Status + ", not expired without a transfer")
		}
		// A hash that backs another refund of the merchant is a conflict
		// (the unique index is per merchant, as for every submit: a refund
		// of another merchant who named the wallet theirs too does not keep
		// this one from its own transfer).
		at := o.At.UTC()
		res := tx.Model(&Refund{}).Where("id = ? AND status = ? AND failure_reason = ? AND tx_hash IS NULL", r.ID, RefundFailed, ReasonRefundExpired).
			Updates(map[string]any{"tx_hash": o.TxHash, "status": RefundSucceeded, "submitted_at": at, "succeeded_at": at,
				"failure_reason": "", "failure_message": "", "updated_at": s.Now()})
		if isUniqueViolation(res.Error) {
			return apperr.Conflict("this transaction hash already backs another refund")
		}
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected != 1 {
			return fmt.Errorf("models: refund %s changed during its late outcome", r.ID)
		}
		r.TxHash = &o.TxHash
		var err error
		out, err = s.refunded(tx, &r, true, at)
		return err
	})
	return out, err
}

// EndRefundWatch records that the watch of a failed refund with txHash
// ended without a transfer paying it: message replaces its failure
// message, it is no longer watched, and the amount it held is given back
// on its transaction, in one database transaction (once: a retry finds it
// no longer watched). A refund in any other state is left as it is.
func (s *Store) EndRefundWatch(ctx context.Context, refundID, txHash, message string) error {
	_, err := s.closeWatch(ctx, func(q *gorm.DB) *gorm.DB {
		return q.Scopes(watchedFailed).Where("id = ? AND tx_hash = ?", refundID, txHash)
	}, message)
	return err
}

// closeWatch ends the watch of the refund `which` selects (under its row's
// lock): message replaces its failure message, it is no longer watched,
// and the amount it held is given back on its transaction, in one database
// transaction. It reports whether an amount was given back.
func (s *Store) closeWatch(ctx context.Context, which func(*gorm.DB) *gorm.DB, message string) (bool, error) {
	released := false
	err := s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		var r Refund
		if err := s.forUpdate(tx).Scopes(which).Take(&r).Error; err != nil {
			if errors.Is(err, gorm.ErrRecordNotFound) {
				return nil
			}
			return err
		}
		res := tx.Model(&Refund{}).Scopes(which).Where("amount_held = ?", r.AmountHeld).
			Updates(map[string]any{"failure_message": truncate(message, 500), "watched_until": nil, "amount_held": false, "updated_at": s.Now()})
		if res.Error != nil || res.RowsAffected != 1 || !r.AmountHeld {
			return res.Error
		}
		released = true
		return tx.Model(&Transaction{}).Where("id = ?", r.TransactionID).
			Update("refund_reserved", gorm.Expr("refund_reserved - ?", int64(r.Amount))).Error
	})
	return released && err == nil, err
}

// LapsedRefundHolds lists failed refunds that still hold their amount
// though their watch ended before `before` (WatchedUntil), or that hold it
// with no watch at all (a worker from before migration 20261128_0019 ended
// the watch without giving it back): the workflow that would have given it
// back is gone (terminated by an operator, say). By id, after the id
// `after` (a pass pages through them all).
func (s *Store) LapsedRefundHolds(ctx context.Context, before time.Time, after string, limit int) ([]Refund, error) {
	var rows []Refund
	err := s.ctx(ctx).Where("status = ? AND amount_held = ? AND (watched_until IS NULL OR watched_until < ?) AND id > ?",
		RefundFailed, true, before.UTC(), after).Order("id asc").Limit(limit).Find(&rows).Error
	return rows, err
}

// ReleaseRefundHold gives back the amount a failed refund holds (its watch
// over without the workflow that would have ended it): message replaces its
// failure message, and it is no longer watched, in one database
// transaction. It reports whether it gave anything back (false: the refund
// no longer holds it; its workflow ended the watch, say).
func (s *Store) ReleaseRefundHold(ctx context.Context, refundID, message string) (bool, error) {
	return s.closeWatch(ctx, func(q *gorm.DB) *gorm.DB {
		return q.Where("id = ? AND status = ? AND amount_held = ?", refundID, RefundFailed, true)
	}, message)
}

// NoteRefundWatch replaces the failure message of a failed refund with
// txHash that is still watched (the watch goes on); a refund in any other
// state is left as it is.
func (s *Store) NoteRefundWatch(ctx context.Context, refundID, txHash, message string) error {
	return s.ctx(ctx).Model(&Refund{}).Scopes(watchedFailed).Where("id = ? AND tx_hash = ?", refundID, txHash).
		Updates(map[string]any{"failure_message": truncate(message, 500), "updated_at": s.Now()}).Error
}

// watchedFailure says the refund failed while a transfer sent for it is
// still watched: it may still succeed, or be submitted again. A refund
// failed TX_NOT_FOUND by a worker from before migration 20261127_0014
// (one still running in a rolling deploy, or an activity it scheduled)
// has no watchedUntil, only its message to say so: it counts too, until
// the watch's end rewrites the message.
func (r *Refund) watchedFailure() bool {
	return r.Status == RefundFailed && (r.WatchedUntil != nil ||
		(r.FailureReason == ReasonTxNotFound && strings.Contains(r.FailureMessage, legacyWatchedPhrase)))
}

// legacyWatchedPhrase is what the failure message of a watched TX_NOT_FOUND
// refund says (the workflow's wording since the late watch began).
const legacyWatchedPhrase = "still watched until"

// watchedFailed narrows a refunds query to watchedFailure's rows.
func watchedFailed(q *gorm.DB) *gorm.DB {
	return q.Where("status = ? AND (watched_until IS NOT NULL OR (failure_reason = ? AND failure_message LIKE ?))",
		RefundFailed, ReasonTxNotFound, "%"+legacyWatchedPhrase+"%")
}

func refundEventKey(refundID string) string { return "payment.refunded:" + refundID }

// refundEventDeliveries answers the stored payment.refunded event of a
// refund: its fullyRefunded and its deliveries.
func (s *Store) refundEventDeliveries(tx *gorm.DB, refundID string) (bool, []string, error) {
	var e Event
	if err := tx.Where("key = ?", refundEventKey(refundID)).Take(&e).Error; err != nil {
		return false, nil, err
	}
	var data struct {
		FullyRefunded bool `json:"fullyRefunded"`
	}
	_ = json.Unmarshal(e.Data, &data)
	var ids []string
	err := tx.Model(&WebhookDelivery{}).Where("event_id = ?", e.ID).Order("id asc").Pluck("id", &ids).Error
	return data.FullyRefunded, ids, err
}

// RefundedEventData is the data of payment.refunded, exactly SPEC.md's
// fields: amount is this refund's total (subtotalAmount + taxAmount), and
// fullyRefunded says whether the transaction's succeeded refunds now add
// up to all of it.
func RefundedEventData(r *Refund, fullyRefunded bool) map[string]any {
	var hash, reason any
	if r.TxHash != nil {
		hash = *r.TxHash
	}
	if r.Reason != "" {
		reason = r.Reason
	}
	return map[string]any{"refundId": r.ID, "transactionId": r.TransactionID, "txHash": hash,
		"merchantWalletAddress": r.SourceWallet, "amount": r.Amount.String(), "subtotalAmount": r.SubtotalAmount.String(),
		"taxAmount": r.TaxAmount.String(), "feeReversed": r.FeeReversed.String(), "token": r.Token, "network": r.Network,
		"reason": reason, "fullyRefunded": fullyRefunded, "initiatedBy": r.InitiatedBy, "livemode": r.Mode == ModeLive}
}

// SetRefundsEnabled sets the merchant's refunds flag (an operator's
// decision: on turns refunds on in both modes, off in both).
func (s *Store) SetRefundsEnabled(ctx context.Context, merchantID string, on bool) (*Merchant, error) {
	res := s.ctx(ctx).Model(&Merchant{}).Where("id = ?", merchantID).
		Updates(map[string]any{"refunds_enabled": on, "updated_at": s.Now()})
	if res.Error != nil {
		return nil, res.Error
	}
	if res.RowsAffected == 0 {
		return nil, apperr.NotFound()
	}
	return s.Merchant(ctx, merchantID)
}

// exceptionPayerDeclared reports whether a transaction recorded from a
// payment exception came from the wallet a session the exception names
// declared (the customer's, as far as the store knows).
func exceptionPayerDeclared(tx *gorm.DB, t *Transaction) (bool, error) {
	var excs []PaymentException
	if err := tx.Select("kind", "payer_address", "session_ids").Where("merchant_id = ? AND network = ? AND tx_hash = ?",
		t.MerchantID, t.Network, t.TxHash).Find(&excs).Error; err != nil {
		return false, err
	}
	for _, e := range excs {
		if e.Kind == ExceptionWrongPayer || e.Kind == ExceptionUnmatched || e.PayerAddress == "" || len(e.SessionIDs) == 0 {
			continue
		}
		var wallets []string
		if err := tx.Model(&CheckoutSession{}).Where("id IN ? AND merchant_id = ?", []string(e.SessionIDs), t.MerchantID).
			Pluck("wallet_address", &wallets).Error; err != nil {
			return false, err
		}
		for _, w := range wallets {
			if w != "" && sameWallet(w, e.PayerAddress) {
				return true, nil
			}
		}
	}
	return false, nil
}
