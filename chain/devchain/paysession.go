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
	"reflect"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/ethereum/go-ethereum/signer/core/apitypes"

	"github.com/paygate/paygate/chain/contracts"
)

// PayOptions says how [Pay] pays a checkout session. The default (zero
// options but APIBase and SessionID) is the bound way: the customer signs an
// EIP-3009 TransferWithAuthorization whose nonce is the session's
// paymentReference, broadcasts transferWithAuthorization itself and submits
// the hash to the session.
type PayOptions struct {
	// APIBase is the API's base URL, e.g. "http://127.0.0.1:8080".
	APIBase string
	// SessionID is the session to pay.
	SessionID string
	// RPCURL is the chain's JSON-RPC endpoint; "" picks the dev chain of the
	// session's network ([RPCURLFromEnv] with Getenv).
	RPCURL string
	// Getenv resolves RPCURL when it is empty (os.Getenv); nil reads nothing,
	// so the default ports apply.
	Getenv func(string) string
	// Key pays (and signs); nil is the dev customer ([CustomerKey]). The
	// authorization's from is always this key's address, whatever the
	// session's typed data says (so a stranger can sign for the session).
	Key *ecdsa.PrivateKey
	// Units overrides the amount in USDC base units; nil pays what is due.
	Units *big.Int
	// Plain pays with a plain ERC-20 transfer: no authorization, so nothing
	// binds the payment to the session.
	Plain bool
	// ViaRouter pays through the dev chain's Router ([RouterAddress]), so the
	// merchant's Transfer comes from the router. Plain: approve + route.
	// Otherwise the authorization is made out to the router (to = router,
	// nonce = paymentReference) and routeWithAuthorization pays the merchant.
	ViaRouter bool
	// Relay posts the signed authorization to the API
	// (POST /api/checkout/session/{id}/authorization), whose relayer
	// broadcasts it, instead of broadcasting and submitting here.
	Relay bool
	// NoSubmit broadcasts without submitting the hash to any session.
	NoSubmit bool
	// SubmitTo submits the hash to this session instead of SessionID (an
	// attack: one payment claimed by another session).
	SubmitTo string
	// SpeedUp plays a wallet's "speed up": the authorization's call is
	// signed, its hash submitted, and the transaction replaced before it
	// reaches a node by the same call at the same account nonce and twice
	// the tip, which is broadcast. The submitted hash is never mined; the
	// session must follow the authorization to the replacement.
	SpeedUp bool
}

// SessionPayment is what [Pay] did.
type SessionPayment struct {
	// SessionID is the session paid (whose terms were used).
	SessionID string
	// Network is the session's network.
	Network string
	// RPCURL is the chain the payment went to.
	RPCURL string
	// From is the paying (signing) address.
	From string
	// To is the merchant's address.
	To string
	// Units is the amount in USDC base units.
	Units *big.Int
	// Method is how it was paid: "authorization", "plain", "router",
	// "router+authorization" or "relay".
	Method string
	// Authorization and Signature are the signed EIP-3009 authorization (nil
	// for plain payments).
	Authorization *Authorization
	Signature     []byte
	// TxHash is the transaction's hash; for a relayed payment, the hash the
	// API answered with, if any.
	TxHash string
	// SubmittedTo is the session the hash was submitted to ("" for none).
	SubmittedTo string
	// Replaced is the hash submitted and then replaced (SpeedUp); TxHash is
	// then the replacement's, broadcast after the submit.
	Replaced string
	// RelayAnswer is the API's answer to a relayed authorization.
	RelayAnswer json.RawMessage
}

// PaySession pays a checkout session the bound way ([Pay] with default
// options): reads what the session expects from the public status route of
// the API at apiBase, signs the EIP-3009 authorization for the session's
// paymentReference with key, broadcasts transferWithAuthorization on the chain
// at rpcURL from key's account, then submits the hash. units overrides the
// amount (nil pays exactly what is due), so a short payment can be shown
// failing.
func PaySession(ctx context.Context, apiBase, rpcURL string, key *ecdsa.PrivateKey, sessionID string, units *big.Int) (SessionPayment, error) {
	return Pay(ctx, PayOptions{APIBase: apiBase, RPCURL: rpcURL, Key: key, SessionID: sessionID, Units: units})
}

// sessionView is what a payer reads from GET /api/checkout/session/{id}.
type sessionView struct {
	ID                    string          `json:"id"`
	Network               string          `json:"network"`
	MerchantWalletAddress string          `json:"merchantWalletAddress"`
	TokenAddress          string          `json:"tokenAddress"`
	AmountUnits           string          `json:"amountUnits"`
	ExpiresAt             time.Time       `json:"expiresAt"`
	PaymentReference      string          `json:"paymentReference"`
	Authorization         json.RawMessage `json:"authorization"`
}

// numString is a JSON string or number, kept as its text.
type numString string

func (n *numString) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*n = numString(s)
		return nil
	}
	var num json.Number
	if err := json.Unmarshal(b, &num); err != nil {
		return fmt.Errorf("not a string or number: %s", b)
	}
	*n = numString(num)
	return nil
}

func (n numString) big(field string) (*big.Int, error) {
	v, ok := new(big.Int).SetString(string(n), 0)
	if !ok || v.Sign() < 0 {
		return nil, fmt.Errorf("authorization %s %q is not a non-negative integer", field, string(n))
	}
	return v, nil
}

// servedAuthorization is the session's `authorization`: EIP-712 typed data
// as eth_signTypedData_v4 takes it.
type servedAuthorization struct {
	Domain struct {
		Name              string    `json:"name"`
		Version           string    `json:"version"`
		ChainID           numString `json:"chainId"`
		VerifyingContract string    `json:"verifyingContract"`
	} `json:"domain"`
	PrimaryType string          `json:"primaryType"`
	Types       apitypes.Types  `json:"types"`
	Message     json.RawMessage `json:"message"`
}

type servedMessage struct {
	From        string    `json:"from"`
	To          string    `json:"to"`
	Value       numString `json:"value"`
	ValidAfter  numString `json:"validAfter"`
	ValidBefore numString `json:"validBefore"`
	Nonce       string    `json:"nonce"`
}

// parseReference decodes a paymentReference or nonce: 0x and 64 hex digits.
func parseReference(field, s string) ([32]byte, error) {
	var out [32]byte
	b, err := hexutil.Decode(s)
	if err != nil || len(b) != 32 {
		return out, fmt.Errorf("%s %q is not 0x and 64 hex digits", field, s)
	}
	copy(out[:], b)
	return out, nil
}

// authorizationTerms returns the domain and the authorization the session
// asks for (From is left to the payer): from the served typed data when
// there is one, checked against the session's own fields, else built from
// those fields with the token's name() and version "2".
func authorizationTerms(ctx context.Context, client *ethclient.Client, s sessionView, chainID uint64) (TokenDomain, Authorization, error) {
	token, merchant := common.HexToAddress(s.TokenAddress), common.HexToAddress(s.MerchantWalletAddress)
	var ref *[32]byte
	if s.PaymentReference != "" {
		r, err := parseReference("paymentReference", s.PaymentReference)
		if err != nil {
			return TokenDomain{}, Authorization{}, err
		}
		ref = &r
	}
	if len(s.Authorization) == 0 || string(s.Authorization) == "null" {
		if ref == nil {
			return TokenDomain{}, Authorization{}, errors.New("the session has neither paymentReference nor authorization: nothing to bind the payment to (an API without EIP-3009 sessions?); pay it with --plain")
		}
		d, err := ReadTokenDomain(ctx, client, token)
		if err != nil {
			return TokenDomain{}, Authorization{}, err
		}
		if s.ExpiresAt.IsZero() {
			return TokenDomain{}, Authorization{}, errors.New("the session has no expiresAt to sign as validBefore")
		}
		return d, Authorization{To: merchant, ValidAfter: new(big.Int), ValidBefore: big.NewInt(s.ExpiresAt.Unix()), Nonce: *ref}, nil
	}

	var sa servedAuthorization
	if err := json.Unmarshal(s.Authorization, &sa); err != nil {
		return TokenDomain{}, Authorization{}, fmt.Errorf("session authorization: %w", err)
	}
	var m servedMessage
	if err := json.Unmarshal(sa.Message, &m); err != nil {
		return TokenDomain{}, Authorization{}, fmt.Errorf("session authorization message: %w", err)
	}
	if sa.PrimaryType != TransferWithAuthorizationType {
		return TokenDomain{}, Authorization{}, fmt.Errorf("session authorization: primaryType %q, want %s", sa.PrimaryType, TransferWithAuthorizationType)
	}
	// A wallet signs the types it is given; any other types than the
	// token's give a digest the token never accepts.
	// EIP712Domain may be left out (wallets derive it from the domain).
	for name, fields := range AuthorizationTypes() {
		served, ok := sa.Types[name]
		if sa.Types != nil && (ok || name == TransferWithAuthorizationType) && !reflect.DeepEqual(served, fields) {
			return TokenDomain{}, Authorization{}, fmt.Errorf("session authorization: type %s is %v, the token's is %v", name, served, fields)
		}
	}
	id, err := sa.Domain.ChainID.big("domain.chainId")
	if err != nil {
		return TokenDomain{}, Authorization{}, err
	}
	if !id.IsUint64() || id.Uint64() != chainID {
		return TokenDomain{}, Authorization{}, fmt.Errorf("session authorization is for chain id %s, the RPC endpoint serves %d: set DEVCHAIN_RPC_URL to the session's chain", id, chainID)
	}
	if !common.IsHexAddress(sa.Domain.VerifyingContract) || common.HexToAddress(sa.Domain.VerifyingContract) != token {
		return TokenDomain{}, Authorization{}, fmt.Errorf("session authorization: verifyingContract %q is not the session's token %s", sa.Domain.VerifyingContract, token)
	}
	if !common.IsHexAddress(m.To) || common.HexToAddress(m.To) != merchant {
		return TokenDomain{}, Authorization{}, fmt.Errorf("session authorization: to %q is not the merchant %s", m.To, merchant)
	}
	nonce, err := parseReference("authorization nonce", m.Nonce)
	if err != nil {
		return TokenDomain{}, Authorization{}, err
	}
	if ref != nil && *ref != nonce {
		return TokenDomain{}, Authorization{}, fmt.Errorf("session authorization: nonce %s is not the paymentReference %s", m.Nonce, s.PaymentReference)
	}
	a := Authorization{To: merchant, Nonce: nonce}
	if a.Value, err = m.Value.big("value"); err != nil {
		return TokenDomain{}, Authorization{}, err
	}
	if a.ValidAfter, err = m.ValidAfter.big("validAfter"); err != nil {
		return TokenDomain{}, Authorization{}, err
	}
	if a.ValidBefore, err = m.ValidBefore.big("validBefore"); err != nil {
		return TokenDomain{}, Authorization{}, err
	}
	return TokenDomain{Name: sa.Domain.Name, Version: sa.Domain.Version, ChainID: chainID, VerifyingContract: token}, a, nil
}

// Pay pays a checkout session as a customer's wallet and the hosted page
// would, in the way opts says (see [PayOptions]; the default binds the
// payment to the session with an EIP-3009 authorization). It reads the
// session from GET /api/checkout/session/{id}, pays on its network's chain
// and, unless told otherwise, submits the hash with POST /api/checkout/submit.
func Pay(ctx context.Context, opts PayOptions) (SessionPayment, error) {
	if opts.Relay && (opts.Plain || opts.ViaRouter || opts.NoSubmit || opts.SubmitTo != "") {
		return SessionPayment{}, errors.New("relay sends the signed authorization to the API, which broadcasts and submits it: it goes with none of plain, via router, no-submit, submit-to")
	}
	if opts.NoSubmit && opts.SubmitTo != "" {
		return SessionPayment{}, errors.New("no-submit and submit-to contradict each other")
	}
	if opts.SpeedUp && (opts.Plain || opts.ViaRouter || opts.NoSubmit) {
		return SessionPayment{}, errors.New("speed-up replaces the payer's own transferWithAuthorization after its hash is submitted: it goes with none of plain, via router, no-submit")
	}
	key := opts.Key
	if key == nil {
		key = CustomerKey()
	}
	apiBase := strings.TrimSuffix(opts.APIBase, "/")
	var poll struct {
		Data struct {
			Session sessionView `json:"session"`
		} `json:"data"`
	}
	if err := callJSON(ctx, http.MethodGet, apiBase+"/api/checkout/session/"+opts.SessionID, nil, &poll); err != nil {
		return SessionPayment{}, err
	}
	s := poll.Data.Session
	if !common.IsHexAddress(s.TokenAddress) || !common.IsHexAddress(s.MerchantWalletAddress) {
		return SessionPayment{}, fmt.Errorf("session %s is on %s, which a dev chain cannot pay", opts.SessionID, s.Network)
	}
	token, merchant := common.HexToAddress(s.TokenAddress), common.HexToAddress(s.MerchantWalletAddress)
	rpcURL := opts.RPCURL
	if rpcURL == "" {
		getenv := opts.Getenv
		if getenv == nil {
			getenv = func(string) string { return "" }
		}
		var err error
		if rpcURL, err = RPCURLFromEnv(s.Network, getenv); err != nil {
			return SessionPayment{}, err
		}
	}
	client, err := ethclient.DialContext(ctx, rpcURL)
	if err != nil {
		return SessionPayment{}, fmt.Errorf("devchain: dial %s: %w", rpcURL, err)
	}
	defer client.Close()
	chainID, err := client.ChainID(ctx)
	if err != nil {
		return SessionPayment{}, fmt.Errorf("devchain: chain id at %s: %w", rpcURL, err)
	}
	payer := crypto.PubkeyToAddress(key.PublicKey)
	out := SessionPayment{SessionID: opts.SessionID, Network: s.Network, RPCURL: rpcURL, From: payer.Hex(), To: merchant.Hex()}

	units := opts.Units
	if units == nil && opts.Plain {
		v, ok := new(big.Int).SetString(s.AmountUnits, 10)
		if !ok {
			return SessionPayment{}, fmt.Errorf("session %s: amountUnits %q is not an integer", opts.SessionID, s.AmountUnits)
		}
		units = v
	}
	if units != nil && units.Sign() <= 0 {
		return SessionPayment{}, errors.New("devchain: amount must be positive")
	}
	if opts.ViaRouter {
		code, err := client.CodeAt(ctx, RouterAddress, nil)
		if err != nil {
			return SessionPayment{}, fmt.Errorf("devchain: code at the router: %w", err)
		}
		if len(code) == 0 {
			return SessionPayment{}, fmt.Errorf("no Router at %s on the chain at %s (not a dev chain?)", RouterAddress, rpcURL)
		}
	}

	var tx *types.Transaction
	if opts.Plain {
		out.Units = units
		tr, err := contracts.NewTransactor(ctx, client, key)
		if err != nil {
			return SessionPayment{}, fmt.Errorf("devchain: %w", err)
		}
		usdc := contracts.MustLoad(contracts.TestUSDC)
		if opts.ViaRouter {
			out.Method = "router"
			if _, err := tr.Transact(ctx, usdc, token, "approve", RouterAddress, units); err != nil {
				return SessionPayment{}, fmt.Errorf("approve the router: %w", err)
			}
			// The approval may still be pending: estimating the route's gas
			// against the latest block would fail, so the limit is fixed.
			tr.GasLimit = 200_000
			tx, err = tr.Transact(ctx, contracts.MustLoad(contracts.Router), RouterAddress, "route", token, merchant, units)
		} else {
			out.Method = "plain"
			tx, err = tr.Transact(ctx, usdc, token, "transfer", merchant, units)
		}
		if err != nil {
			return SessionPayment{}, fmt.Errorf("broadcast: %w", err)
		}
	} else {
		d, a, err := authorizationTerms(ctx, client, s, chainID.Uint64())
		if err != nil {
			return SessionPayment{}, fmt.Errorf("session %s: %w", opts.SessionID, err)
		}
		a.From = payer
		if units != nil {
			a.Value = units
		} else if a.Value == nil {
			v, ok := new(big.Int).SetString(s.AmountUnits, 10)
			if !ok {
				return SessionPayment{}, fmt.Errorf("session %s: amountUnits %q is not an integer", opts.SessionID, s.AmountUnits)
			}
			a.Value = v
		}
		if opts.ViaRouter {
			a.To = RouterAddress
		}
		sig, err := SignAuthorization(key, d, a)
		if err != nil {
			return SessionPayment{}, err
		}
		out.Units, out.Authorization, out.Signature = a.Value, &a, sig
		switch {
		case opts.Relay:
			out.Method = "relay"
			body, _ := json.Marshal(map[string]string{"from": payer.Hex(), "validAfter": a.ValidAfter.String(),
				"validBefore": a.ValidBefore.String(), "signature": hexutil.Encode(sig)})
			var answer json.RawMessage
			if err := callJSON(ctx, http.MethodPost, apiBase+"/api/checkout/session/"+opts.SessionID+"/authorization", body, &answer); err != nil {
				return out, fmt.Errorf("relay: %w", err)
			}
			out.RelayAnswer = answer
			out.TxHash = findTxHash(answer)
			return out, nil
		case opts.ViaRouter:
			out.Method = "router+authorization"
			tr, err := contracts.NewTransactor(ctx, client, key)
			if err != nil {
				return SessionPayment{}, fmt.Errorf("devchain: %w", err)
			}
			tx, err = tr.Transact(ctx, contracts.MustLoad(contracts.Router), RouterAddress, "routeWithAuthorization",
				token, a.From, merchant, a.Value, a.ValidAfter, a.ValidBefore, a.Nonce, sig)
			if err != nil {
				if rerr := revertError(err); rerr != nil {
					return out, fmt.Errorf("broadcast: %w", rerr)
				}
				return out, fmt.Errorf("broadcast: %w", err)
			}
		case opts.SpeedUp:
			out.Method = "authorization, sped up"
			first, fast, err := spedUp(ctx, client, key, token, a, sig)
			if err != nil {
				return out, err
			}
			out.Replaced = first.Hash().Hex()
			if err := submitHash(ctx, apiBase, opts.submitTarget(), out.Replaced); err != nil {
				return out, err
			}
			out.SubmittedTo = opts.submitTarget()
			if err := client.SendTransaction(ctx, fast); err != nil {
				return out, fmt.Errorf("broadcast the replacement: %w", err)
			}
			out.TxHash = fast.Hash().Hex()
			return out, nil
		default:
			out.Method = "authorization"
			if tx, err = BroadcastAuthorization(ctx, client, key, token, a, sig); err != nil {
				return out, fmt.Errorf("broadcast: %w", err)
			}
		}
	}
	out.TxHash = tx.Hash().Hex()
	if opts.NoSubmit {
		return out, nil
	}
	if err := submitHash(ctx, apiBase, opts.submitTarget(), out.TxHash); err != nil {
		return out, err
	}
	out.SubmittedTo = opts.submitTarget()
	return out, nil
}

// submitTarget is the session a hash is submitted to.
func (o PayOptions) submitTarget() string {
	if o.SubmitTo != "" {
		return o.SubmitTo
	}
	return o.SessionID
}

// submitHash submits a transaction hash to a session (POST
// /api/checkout/submit).
func submitHash(ctx context.Context, apiBase, sessionID, hash string) error {
	body, _ := json.Marshal(map[string]string{"sessionId": sessionID, "txHash": hash})
	var answer map[string]any
	if err := callJSON(ctx, http.MethodPost, apiBase+"/api/checkout/submit", body, &answer); err != nil {
		return fmt.Errorf("submit %s to %s: %w", hash, sessionID, err)
	}
	return nil
}

// spedUp signs the payer's transferWithAuthorization call of a twice at
// their next account nonce: first as a wallet shows it, then its
// replacement at twice the tip (fee cap raised alike), as a wallet's
// "speed up" does. Neither is sent.
func spedUp(ctx context.Context, client *ethclient.Client, key *ecdsa.PrivateKey, token common.Address, a Authorization, sig []byte) (first, fast *types.Transaction, err error) {
	data, err := AuthorizationCalldata(a, sig)
	if err != nil {
		return nil, nil, err
	}
	from := crypto.PubkeyToAddress(key.PublicKey)
	id, err := client.ChainID(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("devchain: chain id: %w", err)
	}
	nonce, err := client.PendingNonceAt(ctx, from)
	if err != nil {
		return nil, nil, fmt.Errorf("devchain: nonce: %w", err)
	}
	head, err := client.HeaderByNumber(ctx, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("devchain: head: %w", err)
	}
	tip, err := client.SuggestGasTipCap(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("devchain: gas tip: %w", err)
	}
	if tip.Sign() <= 0 {
		tip = big.NewInt(1)
	}
	gas, err := client.EstimateGas(ctx, ethereum.CallMsg{From: from, To: &token, Data: data})
	if err != nil {
		if rerr := revertError(err); rerr != nil {
			return nil, nil, rerr
		}
		return nil, nil, fmt.Errorf("devchain: estimate gas: %w", err)
	}
	sign := func(tip *big.Int) (*types.Transaction, error) {
		feeCap := new(big.Int).Add(tip, new(big.Int).Mul(head.BaseFee, big.NewInt(2)))
		return types.SignNewTx(key, types.LatestSignerForChainID(id), &types.DynamicFeeTx{
			ChainID: id, Nonce: nonce, GasTipCap: tip, GasFeeCap: feeCap, Gas: gas + gas/5, To: &token, Data: data})
	}
	if first, err = sign(tip); err != nil {
		return nil, nil, fmt.Errorf("devchain: sign: %w", err)
	}
	if fast, err = sign(new(big.Int).Mul(tip, big.NewInt(2))); err != nil {
		return nil, nil, fmt.Errorf("devchain: sign: %w", err)
	}
	return first, fast, nil
}

// findTxHash looks for a txHash in the API's answer ({"data": {"txHash"}}
// or at the top).
func findTxHash(raw json.RawMessage) string {
	var v struct {
		TxHash string `json:"txHash"`
		Data   struct {
			TxHash string `json:"txHash"`
		} `json:"data"`
	}
	if json.Unmarshal(raw, &v) != nil {
		return ""
	}
	if v.Data.TxHash != "" {
		return v.Data.TxHash
	}
	return v.TxHash
}

var apiClient = &http.Client{Timeout: 30 * time.Second}

func callJSON(ctx context.Context, method, url string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
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
