package devchain

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"strings"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/paygate/paygate/chain/devrefund"
)

// RefundPayOptions says how [PayRefund] pays a refund.
type RefundPayOptions struct {
	// APIBase is the API's base URL, e.g. "http://127.0.0.1:8080".
	APIBase string
	// APIKey is the merchant's API key: the refund is read with
	// GET /api/refunds/{id} and its hash submitted with
	// POST /api/refunds/{id}/submit.
	APIKey string
	// RefundID is the refund to pay.
	RefundID string
	// RPCURL is the chain's JSON-RPC endpoint; "" picks the dev chain of the
	// refund's network ([RPCURLFromEnv] with Getenv).
	RPCURL string
	// Getenv resolves RPCURL when it is empty (os.Getenv); nil reads nothing.
	Getenv func(string) string
	// Key pays; nil is the dev merchant ([MerchantKey]).
	Key *ecdsa.PrivateKey
	// AnyWallet pays from Key even when it is not the refund's source
	// wallet (to watch such a refund fail); otherwise that is an error.
	AnyWallet bool
	// Units overrides the amount in USDC base units; nil pays the refund.
	Units *big.Int
	// NoSubmit broadcasts without submitting the hash.
	NoSubmit bool
}

// RefundPayment is what [PayRefund] did.
type RefundPayment struct {
	RefundID string
	Network  string
	RPCURL   string
	// From is the paying wallet, To the refund's destination.
	From, To string
	Units    *big.Int
	TxHash   string
	// Submitted is true once the API accepted the hash; Status is the
	// refund's status it answered.
	Submitted bool
	Status    string
	// Late: the refund had expired without a transfer (paid late, never
	// submitted: the worker's refund watcher records it).
	Late bool
}

// PayRefund pays a refund as the merchant's wallet would: it reads the
// refund through the API with the merchant's key, sends a plain USDC
// transfer of the refund's amount from the merchant's wallet to the
// refund's destination on the refund's dev chain, then submits the hash.
// The refund's workflow verifies the transfer and marks it succeeded.
func PayRefund(ctx context.Context, opts RefundPayOptions) (RefundPayment, error) {
	if opts.APIKey == "" {
		return RefundPayment{}, errors.New("the merchant's API key is required (PAYGATE_API_KEY or --api-key)")
	}
	key := opts.Key
	if key == nil {
		key = MerchantKey()
	}
	base := strings.TrimSuffix(opts.APIBase, "/")
	var got struct {
		Data devrefund.View `json:"data"`
	}
	if err := callAPI(ctx, http.MethodGet, base+"/api/refunds/"+opts.RefundID, opts.APIKey, nil, &got); err != nil {
		return RefundPayment{}, err
	}
	r := got.Data
	if err := r.Payable(); err != nil {
		return RefundPayment{}, err
	}
	if !common.IsHexAddress(r.TokenAddress) || !common.IsHexAddress(r.DestinationWallet) {
		return RefundPayment{}, fmt.Errorf("refund %s is on %s, which a dev chain cannot pay", opts.RefundID, r.Network)
	}
	from := crypto.PubkeyToAddress(key.PublicKey)
	if !opts.AnyWallet && !strings.EqualFold(from.Hex(), r.SourceWallet) {
		return RefundPayment{}, fmt.Errorf("refund %s must be paid from %s, the wallet that received the payment, not %s: "+
			"set the dev merchant's address %s as the merchant's EVM wallet before taking the payment "+
			"(PATCH /api/merchant {\"wallets\":{\"evm\":...}}), or pass --from with that wallet's key",
			opts.RefundID, r.SourceWallet, from.Hex(), crypto.PubkeyToAddress(MerchantKey().PublicKey).Hex())
	}
	units := opts.Units
	if units == nil {
		v, ok := new(big.Int).SetString(r.AmountUnits, 10)
		if !ok || v.Sign() <= 0 {
			return RefundPayment{}, fmt.Errorf("refund %s: amountUnits %q is not a positive integer", opts.RefundID, r.AmountUnits)
		}
		units = v
	}
	rpcURL := opts.RPCURL
	if rpcURL == "" {
		getenv := opts.Getenv
		if getenv == nil {
			getenv = func(string) string { return "" }
		}
		var err error
		if rpcURL, err = RPCURLFromEnv(r.Network, getenv); err != nil {
			return RefundPayment{}, err
		}
	}
	out := RefundPayment{RefundID: r.ID, Network: r.Network, RPCURL: rpcURL, From: from.Hex(), To: r.DestinationWallet, Units: units,
		Late: r.Late()}
	hash, err := PayUSDC(ctx, rpcURL, key, common.HexToAddress(r.TokenAddress), common.HexToAddress(r.DestinationWallet), units)
	if err != nil {
		return out, err
	}
	out.TxHash = hash
	if opts.NoSubmit {
		return out, nil
	}
	body, _ := json.Marshal(map[string]string{"txHash": hash})
	var answer struct {
		Data devrefund.View `json:"data"`
	}
	if err := callAPI(ctx, http.MethodPost, base+"/api/refunds/"+opts.RefundID+"/submit", opts.APIKey, body, &answer); err != nil {
		return out, fmt.Errorf("submit %s to refund %s: %w", hash, opts.RefundID, err)
	}
	out.Submitted, out.Status = true, answer.Data.Status
	return out, nil
}

// callAPI sends a request with a bearer credential and decodes the answer.
func callAPI(ctx context.Context, method, url, token string, body []byte, out any) error {
	var rdr io.Reader
	if body != nil {
		rdr = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rdr)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := apiClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if res.StatusCode >= 300 {
		return fmt.Errorf("%s %s: %d %s", method, url, res.StatusCode, raw)
	}
	return json.Unmarshal(raw, out)
}
