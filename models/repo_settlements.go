package models

import (
	"context"
	"fmt"

	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/money"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// Balance is what a merchant can still pay out on one network and token:
// completed live transactions less settlements, less succeeded refunds and
// the amounts that refunds in progress (pending, submitted) hold.
type Balance struct {
	Network   string
	Token     string
	Collected money.Amount
	Settled   money.Amount
	// Refunded is what succeeded refunds returned.
	Refunded money.Amount
	// RefundsPending is what refunds in progress hold: a failed refund
	// gives it back, a succeeded one moves it to Refunded.
	RefundsPending money.Amount
	Available      money.Amount
}

// Balances lists the merchant's live balances per network and token.
func (s *Store) Balances(ctx context.Context, merchantID string) ([]Balance, error) {
	return s.balances(s.ctx(ctx), merchantID)
}

func (s *Store) balances(tx *gorm.DB, merchantID string) ([]Balance, error) {
	type row struct {
		Network string
		Token   string
		Total   int64
	}
	var in, out, refunded, held []row
	if err := tx.Model(&Transaction{}).Select("network, token, COALESCE(SUM(amount),0) AS total").
		Where("merchant_id = ? AND mode = ? AND status = ? AND verification = ?", merchantID, ModeLive, "completed", VerificationVerified).
		Group("network, token").Scan(&in).Error; err != nil {
		return nil, err
	}
	if err := tx.Model(&Settlement{}).Select("network, token, COALESCE(SUM(amount),0) AS total").
		Where("merchant_id = ? AND mode = ?", merchantID, ModeLive).
		Group("network, token").Scan(&out).Error; err != nil {
		return nil, err
	}
	if err := tx.Model(&Refund{}).Select("network, token, COALESCE(SUM(amount),0) AS total").
		Where("merchant_id = ? AND mode = ? AND status = ?", merchantID, ModeLive, RefundSucceeded).
		Group("network, token").Scan(&refunded).Error; err != nil {
		return nil, err
	}
	if err := tx.Model(&Refund{}).Select("network, token, COALESCE(SUM(amount),0) AS total").
		Where("merchant_id = ? AND mode = ? AND status IN ?", merchantID, ModeLive, []string{RefundPending, RefundSubmitted}).
		Group("network, token").Scan(&held).Error; err != nil {
		return nil, err
	}
	idx := map[[2]string]*Balance{}
	var order [][2]string
	get := func(n, t string) *Balance {
		k := [2]string{n, t}
		if b, ok := idx[k]; ok {
			return b
		}
		b := &Balance{Network: n, Token: t}
		idx[k] = b
		order = append(order, k)
		return b
	}
	for _, r := range in {
		get(r.Network, r.Token).Collected = money.Amount(r.Total)
	}
	for _, r := range out {
		get(r.Network, r.Token).Settled = money.Amount(r.Total)
	}
	for _, r := range refunded {
		get(r.Network, r.Token).Refunded = money.Amount(r.Total)
	}
	for _, r := range held {
		get(r.Network, r.Token).RefundsPending = money.Amount(r.Total)
	}
	res := make([]Balance, 0, len(order))
	for _, k := range order {
		b := idx[k]
		b.Available = b.Collected - b.Settled - b.Refunded - b.RefundsPending
		res = append(res, *b)
	}
	return res, nil
}

// CreateSettlement records a payout if the balance of its network and token
// covers it. The merchant row is locked (PostgreSQL) or the write lock held
// (SQLite) so two payouts cannot both spend the same balance.
func (s *Store) CreateSettlement(ctx context.Context, st *Settlement) error {
	return s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		lock := tx
		if s.Dialect() == "postgres" {
			lock = tx.Clauses(clause.Locking{Strength: "UPDATE"})
		}
		var m Merchant
		if err := lock.Where("id = ?", st.MerchantID).Take(&m).Error; err != nil {
			return notFound(err)
		}
		bals, err := s.balances(tx, st.MerchantID)
		if err != nil {
			return err
		}
		var avail money.Amount
		for _, b := range bals {
			if b.Network == st.Network && b.Token == st.Token {
				avail = b.Available
			}
		}
		if st.Amount > avail {
			return apperr.Invalid("amount", fmt.Sprintf("exceeds the available balance of %s %s on %s", avail, st.Token, st.Network))
		}
		st.ID, st.CreatedAt, st.Status, st.Mode = NewID(), s.Now(), "completed", ModeLive
		if err := tx.Create(st).Error; err != nil {
			if isUniqueViolation(err) {
				return apperr.Conflict("a settlement with this txHash was already recorded")
			}
			return err
		}
		return nil
	})
}

// Settlements lists the merchant's payouts, newest first.
func (s *Store) Settlements(ctx context.Context, merchantID string) ([]Settlement, error) {
	var rows []Settlement
	err := s.ctx(ctx).Where("merchant_id = ?", merchantID).Order("id desc").Find(&rows).Error
	return rows, err
}
