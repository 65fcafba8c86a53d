package soldev

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"strings"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"

	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/chain/devrefund"
)

// ErrNotSolanaRefund is returned by [PayRefund] for a refund on a network
// that is not Solana ([IsSolanaRefund] tells beforehand).
var ErrNotSolanaRefund = errors.New("soldev: not a Solana refund")

// feeReserve is the SOL (in lamports) a wallet needs to pay a refund's fee
// and the rent of a destination token account it may create; a merchant
// wallet holding less has its fee paid by the dev chain's mint authority.
const feeReserve = 10_000_000 // 0.01 SOL

// RefundPayOptions says how [PayRefund] pays a refund.
type RefundPayOptions struct {
	// APIBase is the API's base URL, e.g. "http://127.0.0.1:8080".
	APIBase string
	// APIKey is the merchant's API key: the refund is read with
	// GET /api/refunds/{id} and its signature submitted with
	// POST /api/refunds/{id}/submit.
	APIKey string
	// RefundID is the refund to pay.
	RefundID string
	// RPCURL is the Solana dev chain's RPC.
	RPCURL string
	// Key owns the USDC sent; nil is the dev merchant ([MerchantKey]).
	Key solana.PrivateKey
	// AnyWallet pays from Key even when it is not the refund's source
	// wallet (to watch such a refund fail); otherwise that is an error.
	AnyWallet bool
	// Units overrides the amount in USDC base units; nil pays the refund.
	Units *big.Int
	// NoSubmit sends the transfer without submitting its signature.
	NoSubmit bool
}

// RefundPayment is what [PayRefund] did.
type RefundPayment struct {
	RefundID string
	Network  string
	// From is the wallet whose USDC was sent, To the refund's destination.
	From, To solana.PublicKey
	Units    *big.Int
	// FeeSponsored says the dev chain's mint authority paid the fee (From
	// held less than 0.01 SOL), as a fee payer service would.
	FeeSponsored bool
	// Signature is the transaction signature (base58), the refund's txHash.
	Signature string
	// Submitted is true once the API accepted the signature; Status is the
	// refund's status it answered.
	Submitted bool
	Status    string
	// Late: the refund had expired without a transfer (paid late, never
	// submitted: the worker's refund watcher records it).
	Late bool
}

// readRefund reads a refund with GET /api/refunds/{id}.
func readRefund(ctx context.Context, base, apiKey, id string) (devrefund.View, error) {
	var got struct {
		Data devrefund.View `json:"data"`
	}
	err := callJSONAuth(ctx, http.MethodGet, base+"/api/refunds/"+id, apiKey, nil, &got)
	return got.Data, err
}

func isSolana(network string) bool {
	fam, ok := chain.FamilyOf(network)
	return ok && fam == chain.FamilySolana
}

// IsSolanaRefund reads the refund through the API at apiBase with the
// merchant's key and says whether it is on a Solana network ([PayRefund]
// pays it) or not (an EVM dev chain does).
func IsSolanaRefund(ctx context.Context, apiBase, apiKey, refundID string) (bool, error) {
	if apiKey == "" {
		return false, errors.New("the merchant's API key is required (PAYGATE_API_KEY or --api-key)")
	}
	r, err := readRefund(ctx, strings.TrimSuffix(apiBase, "/"), apiKey, refundID)
	return isSolana(r.Network), err
}

// PayRefund pays a Solana refund as the merchant's wallet would: it reads
// the refund through the API with the merchant's key, sends a
// transferChecked of the refund's mint from the merchant's associated token
// account to the destination's (created idempotently when missing) on the
// dev chain at opts.RPCURL, then submits the signature. The refund's
// workflow verifies the transfer and the refund succeeds. A refund on a
// network that is not Solana gives [ErrNotSolanaRefund].
func PayRefund(ctx context.Context, opts RefundPayOptions) (RefundPayment, error) {
	if opts.APIKey == "" {
		return RefundPayment{}, errors.New("the merchant's API key is required (PAYGATE_API_KEY or --api-key)")
	}
	key := opts.Key
	if key == nil {
		key = MerchantKey()
	}
	base := strings.TrimSuffix(opts.APIBase, "/")
	r, err := readRefund(ctx, base, opts.APIKey, opts.RefundID)
	if err != nil {
		return RefundPayment{}, err
	}
	if !isSolana(r.Network) {
		return RefundPayment{}, fmt.Errorf("%w: refund %s is on %q", ErrNotSolanaRefund, opts.RefundID, r.Network)
	}
	if err := r.Payable(); err != nil {
		return RefundPayment{}, err
	}
	mint, err := solana.PublicKeyFromBase58(r.TokenAddress)
	if err != nil {
		return RefundPayment{}, fmt.Errorf("soldev: refund %s: tokenAddress: %w", opts.RefundID, err)
	}
	to, err := solana.PublicKeyFromBase58(r.DestinationWallet)
	if err != nil {
		return RefundPayment{}, fmt.Errorf("soldev: refund %s: destinationWallet: %w", opts.RefundID, err)
	}
	from := key.PublicKey()
	if !opts.AnyWallet && from.String() != r.SourceWallet {
		return RefundPayment{}, fmt.Errorf("refund %s must be paid from %s, the wallet that received the payment, not %s: "+
			"set the dev merchant's address %s as the merchant's Solana wallet before taking the payment "+
			"(PATCH /api/merchant {\"wallets\":{\"solana\":...}})", opts.RefundID, r.SourceWallet, from, MerchantAddress)
	}
	units := opts.Units
	if units == nil {
		v, ok := new(big.Int).SetString(r.AmountUnits, 10)
		if !ok {
			return RefundPayment{}, fmt.Errorf("refund %s: amountUnits %q is not an integer", opts.RefundID, r.AmountUnits)
		}
		units = v
	}
	if units.Sign() <= 0 || !units.IsUint64() {
		return RefundPayment{}, fmt.Errorf("soldev: amount %s out of range", units)
	}

	out := RefundPayment{RefundID: r.ID, Network: r.Network, From: from, To: to, Units: units, Late: r.Late()}
	sent, err := SendToken(ctx, opts.RPCURL, key, mint, to, units.Uint64())
	if err != nil {
		return out, err
	}
	out.Signature, out.FeeSponsored = sent.Signature, sent.FeeSponsored
	if opts.NoSubmit {
		return out, nil
	}
	body, _ := json.Marshal(map[string]string{"txHash": out.Signature})
	var answer struct {
		Data devrefund.View `json:"data"`
	}
	if err := callJSONAuth(ctx, http.MethodPost, base+"/api/refunds/"+opts.RefundID+"/submit", opts.APIKey, body, &answer); err != nil {
		return out, fmt.Errorf("submit %s to refund %s: %w", out.Signature, opts.RefundID, err)
	}
	out.Submitted, out.Status = true, answer.Data.Status
	return out, nil
}

// Sent is what [SendToken] did.
type Sent struct {
	// Signature is the transaction signature (base58).
	Signature string
	// FeeSponsored says the dev chain's mint authority paid the fee.
	FeeSponsored bool
}

// SendToken sends units of mint from the owner's associated token account
// to the wallet to's (created idempotently when missing) on the dev chain's
// RPC at rpcURL, as a plain wallet transfer, carrying refs as Solana Pay
// references when given (a test's stranger naming a session). An owner
// holding less than 0.01 SOL has its fee (and the rent of a created
// account) paid by the dev chain's mint authority.
func SendToken(ctx context.Context, rpcURL string, owner solana.PrivateKey, mint, to solana.PublicKey, units uint64, refs ...solana.PublicKey) (Sent, error) {
	client := rpc.New(rpcURL)
	from := owner.PublicKey()
	t, err := newTransfer(ctx, client, from, mint, to, units, refs)
	if err != nil {
		return Sent{}, err
	}
	var out Sent
	signers := []solana.PrivateKey{owner}
	bal, err := client.GetBalance(ctx, from, rpc.CommitmentConfirmed)
	if err != nil {
		return Sent{}, fmt.Errorf("soldev: getBalance %s: %w", from, err)
	}
	if bal.Value < feeReserve {
		sponsor := MintAuthorityKey()
		t.feePayer, out.FeeSponsored = sponsor.PublicKey(), true
		signers = []solana.PrivateKey{sponsor, owner}
	}
	sig, err := send(ctx, client, t.instructions(), signers, sendOptions{})
	if err != nil {
		return Sent{}, fmt.Errorf("soldev: send: %w", err)
	}
	out.Signature = sig.String()
	return out, nil
}
