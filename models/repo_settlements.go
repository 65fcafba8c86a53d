package models

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/money"
	"gorm.io/gorm"
)

// Balance is what a merchant can still pay out on one network and token:
// completed live transactions less settlements, less succeeded refunds and
// the amounts that refunds in progress (pending, submitted) hold, or that
// failed refunds whose transfer is still watched hold (Refund.AmountHeld).
type Balance struct {
	Network   string
	Token     string
	Collected money.Amount
	Settled   money.Amount
	// Refunded is what succeeded refunds returned.
	Refunded money.Amount
	// RefundsPending is what refunds in progress hold, and failed refunds
	// whose transfer is still watched: a failed refund gives it back (at
	// its watch's end), a succeeded one moves it to Refunded.
	RefundsPending money.Amount
	Available      money.Amount
}

// balancePart is one sum of balances: its kind (in, out, refunded, held),
// network and token.
type balancePart struct {
	Kind    string
	Network string
	Token   string
	Total   int64
}

// balanceKinds orders the parts of balances.
var balanceKinds = map[string]int{"in": 0, "out": 1, "refunded": 2, "held": 3}

// Balances lists the merchant's live balances per network and token.
func (s *Store) Balances(ctx context.Context, merchantID string) ([]Balance, error) {
	return s.balances(s.ctx(ctx), merchantID)
}

func (s *Store) balances(tx *gorm.DB, merchantID string) ([]Balance, error) {
	// One statement, so one snapshot: as four queries (PostgreSQL's read
	// committed takes a snapshot per statement), a refund succeeding
	// between the read of succeeded refunds and the read of those in
	// progress was in neither, and a settlement could pay it out again.
	var rows []balancePart
	if err := tx.Raw(`SELECT kind, network, token, COALESCE(SUM(amount), 0) AS total FROM (
			SELECT 'in' AS kind, network, token, amount FROM transactions
				WHERE merchant_id = ? AND mode = ? AND status = ? AND verification = ?
			UNION ALL SELECT 'out', network, token, amount FROM settlements WHERE merchant_id = ? AND mode = ?
			UNION ALL SELECT 'refunded', network, token, amount FROM refunds WHERE merchant_id = ? AND mode = ? AND status = ?
			UNION ALL SELECT 'held', network, token, amount FROM refunds WHERE merchant_id = ? AND mode = ?
				AND (status IN ? OR (status = ? AND amount_held = ?))
		) parts GROUP BY kind, network, token`,
		merchantID, ModeLive, "completed", VerificationVerified,
		merchantID, ModeLive,
		merchantID, ModeLive, RefundSucceeded,
		merchantID, ModeLive, []string{RefundPending, RefundSubmitted}, RefundFailed, true).Scan(&rows).Error; err != nil {
		return nil, err
	}
	// Balances with money collected first, then by network and token.
	slices.SortFunc(rows, func(a, b balancePart) int {
		return cmp.Or(cmp.Compare(balanceKinds[a.Kind], balanceKinds[b.Kind]), cmp.Compare(a.Network, b.Network), cmp.Compare(a.Token, b.Token))
	})
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
	for _, r := range rows {
		b := get(r.Network, r.Token)
		switch r.Kind {
		case "in":
			b.Collected = money.Amount(r.Total)
		case "out":
			b.Settled = money.Amount(r.Total)
		case "refunded":
			b.Refunded = money.Amount(r.Total)
		case "held":
			b.RefundsPending = money.Amount(r.Total)
		}
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
		if err := s.lockMerchant(tx, st.MerchantID); err != nil {
			return err
		}
		if err := payoutIsItsOwn(tx, st); err != nil {
			return err
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

// payoutIsItsOwn refuses a payout that is not a transfer out of the
// merchant's funds: one to its own default receiving wallet (it moves
// nothing, and the transfer could then be recorded as a payment too), or
// whose hash is a payment it received or a refund it sent on that network
// (the books would count one transfer twice).
func payoutIsItsOwn(tx *gorm.DB, st *Settlement) error {
	var m Merchant
	if err := tx.Select("wallet_evm", "wallet_solana").Where("id = ?", st.MerchantID).Take(&m).Error; err != nil {
		return notFound(err)
	}
	if st.DestinationWallet != "" && (st.DestinationWallet == m.WalletEVM || st.DestinationWallet == m.WalletSolana) {
		return apperr.Invalid("destinationWallet", "is the account's receiving wallet: a payout to it moves nothing")
	}
	for _, model := range []any{&Transaction{}, &Refund{}} {
		var n int64
		if err := tx.Model(model).Where("merchant_id = ? AND network = ? AND tx_hash = ?", st.MerchantID, st.Network, st.TxHash).
			Count(&n).Error; err != nil {
			return err
		}
		if n > 0 {
			what := "a payment the account received"
			if _, ok := model.(*Refund); ok {
				what = "a refund the account sent"
			}
			return apperr.Conflict("this txHash is " + what + " on " + st.Network + ", not a payout")
		}
	}
	return nil
}

// Settlements lists the merchant's payouts, newest first.
func (s *Store) Settlements(ctx context.Context, merchantID string) ([]Settlement, error) {
	var rows []Settlement
	err := s.ctx(ctx).Where("merchant_id = ?", merchantID).Order("id desc").Find(&rows).Error
	return rows, err
}
