package models

import (
	"context"
	"errors"
	"time"

	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/money"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// TransactionSource says where a transaction came from.
const (
	SourceCheckout = "checkout"
	SourceAPI      = "api"
)

// RecordTransaction stores a transaction the merchant reports and adds it
// to the link's totals and to the customer's (created when new), in one
// transaction. Within the merchant a hash backs one transaction (409
// otherwise); another merchant's record or session never blocks it. The
// record starts unverified: the worker checks it on chain, and only
// verified records count toward the settlement balance.
func (s *Store) RecordTransaction(ctx context.Context, t *Transaction) error {
	return s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		t.ID, t.CreatedAt, t.Status, t.Source = NewID(), s.Now(), "completed", SourceAPI
		if t.Verification == "" {
			t.Verification = VerificationPending
		}
		if err := dropRefutedRecord(tx, t); err != nil {
			return err
		}
		return s.applyTransaction(tx, t, "")
	})
}

// dropRefutedRecord deletes the merchant's record of t's hash that the
// chain refuted, if any: it backs nothing (its totals were taken out when
// it was refuted, and an unverified record is never refunded), and it
// kept the merchant from recording the transfer again with the right
// amount, or from attaching the transfer's exception.
func dropRefutedRecord(tx *gorm.DB, t *Transaction) error {
	return tx.Where("merchant_id = ? AND network = ? AND tx_hash = ? AND session_id IS NULL AND verification = ?",
		t.MerchantID, t.Network, t.TxHash, VerificationFailed).Delete(&Transaction{}).Error
}

// PendingRecords lists recorded transactions not yet verified on chain,
// oldest first, after the id after ("": from the first).
func (s *Store) PendingRecords(ctx context.Context, after string, limit int) ([]Transaction, error) {
	var rows []Transaction
	err := s.ctx(ctx).Where("verification = ? AND id > ?", VerificationPending, after).Order("id asc").Limit(limit).Find(&rows).Error
	return rows, err
}

// SetRecordVerification stores the chain's answer about a recorded
// transaction (verified or failed, with why). A record the chain refutes
// leaves its link's and its customer's totals, which counted it from the
// start: they show what was paid. The row is read locked, as a session
// adopting the record reads it (adoptRecord): one of the two goes first.
func (s *Store) SetRecordVerification(ctx context.Context, id, state, message string) error {
	return s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		var t Transaction
		err := s.forUpdate(tx).Where("id = ? AND verification = ?", id, VerificationPending).Take(&t).Error
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return nil // settled already (verified by the session that paid it)
		}
		if err != nil {
			return err
		}
		if err := tx.Model(&Transaction{}).Where("id = ?", id).
			Updates(map[string]any{"verification": state, "verification_message": truncate(message, 500)}).Error; err != nil {
			return err
		}
		if state != VerificationFailed {
			return nil
		}
		return countTransaction(tx, &t, -1, s.Now())
	})
}

// totalsDelta is a change of a link's and a customer's totals: the gross
// amount and count of their transactions, and what refunds gave back.
type totalsDelta struct {
	amount, count, refunded int64
}

// addToTotals adds d to the totals of the link and the customer named (nil:
// none).
func addToTotals(tx *gorm.DB, linkID, customerID *string, d totalsDelta, at time.Time) error {
	if linkID != nil {
		if err := tx.Unscoped().Model(&PaymentLink{}).Where("id = ?", *linkID).Updates(map[string]any{
			"total_collected":    gorm.Expr("total_collected + ?", d.amount),
			"total_transactions": gorm.Expr("total_transactions + ?", d.count),
			"total_refunded":     gorm.Expr("total_refunded + ?", d.refunded),
			"updated_at":         at,
		}).Error; err != nil {
			return err
		}
	}
	if customerID != nil {
		return tx.Model(&Customer{}).Where("id = ?", *customerID).Updates(map[string]any{
			"total_spent":       gorm.Expr("total_spent + ?", d.amount),
			"transaction_count": gorm.Expr("transaction_count + ?", d.count),
			"total_refunded":    gorm.Expr("total_refunded + ?", d.refunded),
			"updated_at":        at,
		}).Error
	}
	return nil
}

// countTransaction adds t to its link's and customer's totals (sign 1) or
// takes it out of them (sign -1).
func countTransaction(tx *gorm.DB, t *Transaction, sign int64, at time.Time) error {
	return addToTotals(tx, t.PaymentLinkID, t.CustomerID, totalsDelta{amount: sign * int64(t.Amount), count: sign}, at)
}

// countRefund adds a succeeded refund of t to its link's and customer's
// TotalRefunded.
func countRefund(tx *gorm.DB, t *Transaction, amount money.Amount, at time.Time) error {
	return addToTotals(tx, t.PaymentLinkID, t.CustomerID, totalsDelta{refunded: int64(amount)}, at)
}

// applyTransaction inserts t and adds it to the link's and the customer's
// totals. The caller holds the hash claim. country is the customer's
// (ISO 3166-1 alpha-2, "" unknown: a checkout collects it, a record does
// not), kept on a customer that has none.
func (s *Store) applyTransaction(tx *gorm.DB, t *Transaction, country string) error {
	if t.CustomerEmail != "" {
		id, err := s.upsertCustomerSpend(tx, t, country)
		if err != nil {
			return err
		}
		t.CustomerID = &id
	}
	if err := tx.Create(t).Error; err != nil {
		if isUniqueViolation(err) {
			return apperr.Conflict("transaction already recorded")
		}
		return err
	}
	if t.PaymentLinkID != nil {
		var link PaymentLink
		if err := tx.Unscoped().Select("total_collected").Where("id = ?", *t.PaymentLinkID).Take(&link).Error; err != nil {
			return notFound(err)
		}
		if _, err := link.TotalCollected.Add(t.Amount); err != nil {
			return apperr.Invalid("amount", "would overflow the payment link's total")
		}
		if err := tx.Unscoped().Model(&PaymentLink{}).Where("id = ?", *t.PaymentLinkID).Updates(map[string]any{
			"total_collected":    gorm.Expr("total_collected + ?", int64(t.Amount)),
			"total_transactions": gorm.Expr("total_transactions + 1"),
			"updated_at":         t.CreatedAt,
		}).Error; err != nil {
			return err
		}
	}
	return nil
}

// upsertCustomerSpend creates the payer as a customer when new (insert or
// nothing, so two payments racing on one new e-mail both succeed) and adds
// the payment to its totals; a name, wallet or country it lacks is taken
// from the payment.
func (s *Store) upsertCustomerSpend(tx *gorm.DB, t *Transaction, country string) (string, error) {
	now := t.CreatedAt
	c := Customer{ID: NewID(), MerchantID: t.MerchantID, Mode: t.Mode, Email: t.CustomerEmail,
		Name: t.CustomerName, WalletAddress: t.WalletAddress, Country: country, Metadata: StringMap{}, CreatedAt: now, UpdatedAt: now}
	if err := tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&c).Error; err != nil {
		return "", err
	}
	var existing Customer
	if err := tx.Where("merchant_id = ? AND mode = ? AND email = ?", t.MerchantID, t.Mode, t.CustomerEmail).Take(&existing).Error; err != nil {
		return "", err
	}
	if _, err := existing.TotalSpent.Add(t.Amount); err != nil {
		return "", apperr.Invalid("amount", "would overflow the customer's total")
	}
	fields := map[string]any{
		"total_spent":       gorm.Expr("total_spent + ?", int64(t.Amount)),
		"transaction_count": gorm.Expr("transaction_count + 1"),
		"updated_at":        now,
	}
	if existing.Name == "" && t.CustomerName != "" {
		fields["name"] = t.CustomerName
	}
	if existing.WalletAddress == "" && t.WalletAddress != "" {
		fields["wallet_address"] = t.WalletAddress
	}
	if existing.Country == "" && country != "" {
		fields["country"] = country
	}
	if err := tx.Model(&Customer{}).Where("id = ?", existing.ID).Updates(fields).Error; err != nil {
		return "", err
	}
	return existing.ID, nil
}

// TransactionFilter narrows a transaction list; empty fields do not filter.
type TransactionFilter struct {
	Status        string
	Verification  string
	Network       string
	TxHash        string
	PaymentLinkID string
	CustomerEmail string
	Since, Until  *time.Time
}

// Transactions lists a page of the scope's transactions, newest first.
func (s *Store) Transactions(ctx context.Context, sc Scope, f TransactionFilter, p Page) ([]Transaction, bool, error) {
	q := equal(s.scoped(ctx, sc), "status", f.Status, "verification", f.Verification, "network", f.Network, "tx_hash", f.TxHash,
		"payment_link_id", f.PaymentLinkID, "customer_email", f.CustomerEmail)
	return fetchPage[Transaction](createdBetween(q, f.Since, f.Until), p)
}

// Transaction loads one of the scope's transactions.
func (s *Store) Transaction(ctx context.Context, sc Scope, id string) (*Transaction, error) {
	var t Transaction
	err := s.scoped(ctx, sc).Where("id = ?", id).Take(&t).Error
	return &t, notFound(err)
}
