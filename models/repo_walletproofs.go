package models

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/paygate/paygate/apperr"
)

// RecordWalletProof stores a verified proof (chain.VerifyWalletProof, or
// chain.VerifyContractWalletProof on p.Network) that p.MerchantID controls
// p.Address. Proving a wallet again (on the same network, for a contract
// wallet) keeps the first proof, which is returned with created false. A
// merchant proving max wallets already proves no other (apperr.ErrConflict).
func (s *Store) RecordWalletProof(ctx context.Context, p *WalletProof, max int) (created bool, err error) {
	p.ID, p.ProvedAt = NewID(), p.ProvedAt.UTC()
	err = s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		// Under the merchant's row lock: two proofs at once count each
		// other (PostgreSQL; SQLite writes one transaction at a time).
		if err := s.lockMerchant(tx, p.MerchantID); err != nil {
			return err
		}
		var n int64
		if err := tx.Model(&WalletProof{}).Where("merchant_id = ? AND address <> ?", p.MerchantID, p.Address).
			Distinct("address").Count(&n).Error; err != nil {
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
	if err := s.ctx(ctx).Where("merchant_id = ? AND address = ? AND network = ?", p.MerchantID, p.Address, p.Network).Take(&first).Error; err != nil {
		return false, err
	}
	*p = first
	return false, nil
}

// DeleteWalletProof withdraws the merchant's proofs of address, on every
// network (not found: apperr.ErrNotFound).
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
	err := s.ctx(ctx).Where("merchant_id = ?", merchantID).Order("proved_at asc, id asc").Limit(maxWalletProofRows).Find(&out).Error
	return out, err
}

// maxWalletProofRows bounds the list of a merchant's proofs (a wallet
// counts once toward the API's limit, however many networks a contract
// wallet is proven on).
const maxWalletProofRows = 1000

// NamedWallet is a wallet a request names (canonical; "" is skipped), the
// request's field that names it, and the network it is to receive on (""
// for every network of its family: a merchant's default wallet, checked
// again on each network a link or a session uses it on).
type NamedWallet struct{ Field, Address, Network string }

// WalletsFree refuses a wallet that another merchant proved, where it is
// named, and merchantID did not: it is that merchant's, and a payment to it
// would not be this one's. The refusal is a 400 naming each such field,
// with a hint (not a 409: SPEC.md's 409s say "this exists already", and
// POST /api/transactions' 409 means the hash is recorded).
func (s *Store) WalletsFree(ctx context.Context, merchantID string, wallets ...NamedWallet) error {
	return s.walletsBarred(ctx, merchantID, false, wallets)
}

// WalletsReceive is WalletsFree for wallets named to receive payments yet
// to come (a link's, a hosted checkout's, a subscription's, a session's),
// and it also refuses merchantID's own contract wallet on a network where
// merchantID has not proven it (Provers.Bar).
func (s *Store) WalletsReceive(ctx context.Context, merchantID string, wallets ...NamedWallet) error {
	return s.walletsBarred(ctx, merchantID, true, wallets)
}

func (s *Store) walletsBarred(ctx context.Context, merchantID string, receive bool, wallets []NamedWallet) error {
	var want []string
	for _, w := range wallets {
		if w.Address != "" && !slices.Contains(want, w.Address) {
			want = append(want, w.Address)
		}
	}
	if len(want) == 0 {
		return nil
	}
	provers, err := s.WalletProvers(ctx, want)
	if err != nil {
		return err
	}
	wallets = slices.Clone(wallets)
	slices.SortFunc(wallets, func(a, b NamedWallet) int { return strings.Compare(a.Field, b.Field) })
	var problems, hints []string
	hint := func(h string) {
		if !slices.Contains(hints, h) {
			hints = append(hints, h)
		}
	}
	for _, w := range wallets {
		bar, on := provers.Bar(w.Address, w.Network, merchantID)
		switch {
		case bar == WalletProvenByOther:
			problems = append(problems, w.Field+": the wallet "+w.Address+" is proven by another merchant account")
			hint("if it is yours, prove it on this account first (POST /api/merchant/wallet-proofs), then name it")
		case bar == WalletContractElsewhere && receive:
			problems = append(problems, w.Field+": the wallet "+w.Address+" is "+ContractElsewhereReason(w.Network, on))
			hint("prove the contract wallet on each network it is to receive on (POST /api/merchant/wallet-proofs with network), or name another wallet")
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return apperr.WithHint(apperr.ErrBadRequest, strings.Join(problems, "; "), strings.Join(hints, "; "))
}

// WalletNotProvenOn lists the networks on which the merchant's active
// links (hosted checkouts' included) and its subscriptions still billing
// name address to receive, and Provers.Bar bars it as the merchant's
// contract wallet proven on other networks only: they take no new payment
// there until it is proven there too. Sorted; nil when none.
func (s *Store) WalletNotProvenOn(ctx context.Context, merchantID, address string) ([]string, error) {
	provers, err := s.WalletProvers(ctx, []string{address})
	if err != nil {
		return nil, err
	}
	// Asked of a network no proof names: barred as a contract wallet
	// there only when the merchant proved it on other networks alone.
	if bar, _ := provers.Bar(address, "\x00", merchantID); bar != WalletContractElsewhere {
		return nil, nil // proven by its key, or not by this merchant: nothing barred
	}
	var uses []string
	use := func(network string) {
		if bar, _ := provers.Bar(address, network, merchantID); bar == WalletContractElsewhere && !slices.Contains(uses, network) {
			uses = append(uses, network)
		}
	}
	var links []PaymentLink
	if err := s.ctx(ctx).Select("wallet_addresses").Where("merchant_id = ? AND active = ?", merchantID, true).Find(&links).Error; err != nil {
		return nil, err
	}
	for _, l := range links {
		for network, w := range l.WalletAddresses {
			if strings.EqualFold(w, address) {
				use(network)
			}
		}
	}
	var subs []Subscription
	if err := s.ctx(ctx).Select("network").Where("merchant_id = ? AND merchant_wallet_address = ? AND status <> ?", merchantID, address, SubCanceled).
		Find(&subs).Error; err != nil {
		return nil, err
	}
	for _, sub := range subs {
		use(sub.Network)
	}
	slices.Sort(uses)
	return uses, nil
}

// WalletBar reads the proofs of address and answers Provers.Bar for a
// payment to it on network ("" address: unbarred).
func (s *Store) WalletBar(ctx context.Context, address, network, merchantID string) (WalletBar, []string, error) {
	if address == "" {
		return WalletUnbarred, nil, nil
	}
	provers, err := s.WalletProvers(ctx, []string{address})
	if err != nil {
		return WalletUnbarred, nil, err
	}
	bar, on := provers.Bar(address, network, merchantID)
	return bar, on, nil
}

// ContractElsewhereReason says why a contract wallet proven on the
// networks on, and not on network, receives nothing there.
func ContractElsewhereReason(network string, on []string) string {
	return "a contract wallet proven on " + strings.Join(on, ", ") + " only: on " + network +
		" the same address may hold no contract, or someone else's"
}

// WalletBar is why a payment to an address on a network would not reach
// a merchant, as far as the proofs of it tell.
type WalletBar int

const (
	// WalletUnbarred: nothing the proofs say keeps the payment from the
	// merchant.
	WalletUnbarred WalletBar = iota
	// WalletProvenByOther: another merchant proved the address there, and
	// this one did not.
	WalletProvenByOther
	// WalletContractElsewhere: the merchant proved the address only as a
	// contract wallet (EIP-1271), on other networks. No key signs for it,
	// so on this network it is whatever contract was deployed at that
	// address there, if any: the merchant's only if deployed the same way,
	// which the proof there would show.
	WalletContractElsewhere
)

// Bar answers what keeps a payment to address on network from merchantID
// (network "": every network of its family, as a merchant's default
// wallet; only another's key proof bars it there). For
// WalletContractElsewhere it also lists the networks the merchant proved
// the contract on, sorted.
func (p Provers) Bar(address, network, merchantID string) (WalletBar, []string) {
	if by := p.On(address, network); len(by) > 0 {
		if by[merchantID] {
			return WalletUnbarred, nil
		}
		return WalletProvenByOther, nil
	}
	if network == "" {
		return WalletUnbarred, nil
	}
	var on []string
	for _, sc := range p[address] {
		if sc.MerchantID == merchantID && !slices.Contains(on, sc.Network) {
			on = append(on, sc.Network)
		}
	}
	if len(on) == 0 {
		return WalletUnbarred, nil
	}
	slices.Sort(on)
	return WalletContractElsewhere, on
}

// walletProverBatch bounds the addresses of one WalletProvers query.
const walletProverBatch = 500

// Provers are the proofs of some addresses: address → who proved it where.
type Provers map[string][]ProofScope

// ProofScope is one merchant's proof of an address: on every network of
// its family (Network ""), or a contract wallet's on one network.
type ProofScope struct{ MerchantID, Network string }

// On answers the merchants whose proof of address holds on network (""
// asks about every network at once: only the proofs that hold on all of
// them count); nil when none does.
func (p Provers) On(address, network string) map[string]bool {
	var out map[string]bool
	for _, sc := range p[address] {
		if sc.Network == "" || (network != "" && sc.Network == network) {
			if out == nil {
				out = map[string]bool{}
			}
			out[sc.MerchantID] = true
		}
	}
	return out
}

// ProvenByOthers says where another merchant's proof of address keeps
// merchantID from naming it: everywhere (a key's proof, and merchantID has
// none), or on the networks listed (contract wallets' proofs on networks
// where merchantID proved it neither way).
func (p Provers) ProvenByOthers(address, merchantID string) (everywhere bool, networks []string) {
	mine := p.On(address, "")[merchantID]
	if mine {
		return false, nil
	}
	for _, sc := range p[address] {
		switch {
		case sc.MerchantID == merchantID:
		case sc.Network == "":
			everywhere = true
		case !p.On(address, sc.Network)[merchantID] && !slices.Contains(networks, sc.Network):
			networks = append(networks, sc.Network)
		}
	}
	if everywhere {
		return true, nil
	}
	slices.Sort(networks)
	return false, networks
}

// WalletProvers reads who proved each address (canonical), and where.
func (s *Store) WalletProvers(ctx context.Context, addresses []string) (Provers, error) {
	out := Provers{}
	for start := 0; start < len(addresses); start += walletProverBatch {
		var proofs []WalletProof
		batch := addresses[start:min(start+walletProverBatch, len(addresses))]
		if err := s.ctx(ctx).Select("merchant_id", "address", "network").Where("address IN ?", batch).Find(&proofs).Error; err != nil {
			return nil, err
		}
		for _, p := range proofs {
			out[p.Address] = append(out[p.Address], ProofScope{MerchantID: p.MerchantID, Network: p.Network})
		}
	}
	return out, nil
}
