package models

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/paygate/paygate/apperr"
)

// RecordWalletProof stores a verified proof (chain.VerifyWalletProof) that
// p.MerchantID controls p.Address. Proving a wallet again keeps the first
// proof, which is returned with created false. A merchant holding max
// proofs already proves no other wallet (apperr.ErrConflict).
func (s *Store) RecordWalletProof(ctx context.Context, p *WalletProof, max int) (created bool, err error) {
	p.ID, p.ProvedAt = NewID(), p.ProvedAt.UTC()
	err = s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		// Under the merchant's row lock: two proofs at once count each
		// other (PostgreSQL; SQLite writes one transaction at a time).
		var m Merchant
		if err := s.forUpdate(tx).Select("id").Where("id = ?", p.MerchantID).Take(&m).Error; err != nil {
			return notFound(err)
		}
		var n int64
		if err := tx.Model(&WalletProof{}).Where("merchant_id = ? AND address <> ?", p.MerchantID, p.Address).Count(&n).Error; err != nil {
			return err
		}
		if max > 0 && n >= int64(max) {
			return apperr.WithHint(apperr.ErrConflict, fmt.Sprintf("the account holds %d wallet proofs, the most it may", max),
				"withdraw the proof of a wallet you no longer use (DELETE /api/merchant/wallet-proofs/{address})")
		}
		res := tx.Clauses(clause.OnConflict{DoNothing: true}).Create(p)
		if res.Error != nil {
			return res.Error
		}
		created = res.RowsAffected == 1
		return nil
	})
	if err != nil || created {
		return created, err
	}
	var first WalletProof
	if err := s.ctx(ctx).Where("merchant_id = ? AND address = ?", p.MerchantID, p.Address).Take(&first).Error; err != nil {
		return false, err
	}
	*p = first
	return false, nil
}

// DeleteWalletProof withdraws the merchant's proof of address (not found:
// apperr.ErrNotFound).
func (s *Store) DeleteWalletProof(ctx context.Context, merchantID, address string) error {
	res := s.ctx(ctx).Where("merchant_id = ? AND address = ?", merchantID, address).Delete(&WalletProof{})
	if res.Error != nil {
		return res.Error
	}
	if res.RowsAffected == 0 {
		return apperr.NotFound()
	}
	return nil
}

// WalletProofs lists the wallets the merchant proved, oldest proof first.
func (s *Store) WalletProofs(ctx context.Context, merchantID string) ([]WalletProof, error) {
	var out []WalletProof
	err := s.ctx(ctx).Where("merchant_id = ?", merchantID).Order("proved_at asc, id asc").Find(&out).Error
	return out, err
}

// WalletsFree refuses a wallet that another merchant proved and merchantID
// did not: it is that merchant's, and a payment to it would not be this
// one's. wallets maps the request's field that names a wallet to the
// wallet (canonical; "" is skipped). The refusal is a 400 naming each such
// field, with a hint (not a 409: SPEC.md's 409s say "this exists already",
// and POST /api/transactions' 409 means the hash is recorded).
func (s *Store) WalletsFree(ctx context.Context, merchantID string, wallets map[string]string) error {
	var want []string
	for _, a := range wallets {
		if a != "" && !slices.Contains(want, a) {
			want = append(want, a)
		}
	}
	if len(want) == 0 {
		return nil
	}
	provers, err := s.WalletProvers(ctx, want)
	if err != nil {
		return err
	}
	var problems []string
	for _, field := range slices.Sorted(maps.Keys(wallets)) {
		if by := provers[wallets[field]]; len(by) > 0 && !by[merchantID] {
			problems = append(problems, field+": the wallet "+wallets[field]+" is proven by another merchant account")
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return apperr.WithHint(apperr.ErrBadRequest, strings.Join(problems, "; "),
		"if it is yours, prove it on this account first (POST /api/merchant/wallet-proofs), then name it")
}

// walletProverBatch bounds the addresses of one WalletProvers query.
const walletProverBatch = 500

// WalletProvers says, of each address (canonical), which merchants proved
// it (none: absent).
func (s *Store) WalletProvers(ctx context.Context, addresses []string) (map[string]map[string]bool, error) {
	out := map[string]map[string]bool{}
	for start := 0; start < len(addresses); start += walletProverBatch {
		var proofs []WalletProof
		batch := addresses[start:min(start+walletProverBatch, len(addresses))]
		if err := s.ctx(ctx).Select("merchant_id", "address").Where("address IN ?", batch).Find(&proofs).Error; err != nil {
			return nil, err
		}
		for _, p := range proofs {
			if out[p.Address] == nil {
				out[p.Address] = map[string]bool{}
			}
			out[p.Address][p.MerchantID] = true
		}
	}
	return out, nil
}
