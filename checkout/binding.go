package checkout

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/gagliardetto/solana-go"

	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/workflows"
)

// NewPaymentReference makes a session's payment reference: 32 random bytes,
// as the nonce of an EIP-3009 authorization (0x + 64 hex) on EVM networks,
// as a Solana Pay reference key (base58) on Solana.
func NewPaymentReference(f chain.Family) (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	if f == chain.FamilySolana {
		return solana.PublicKeyFromBytes(b[:]).String(), nil
	}
	return "0x" + hex.EncodeToString(b[:]), nil
}

// TypedAuthorization is the EIP-712 TransferWithAuthorization a wallet
// signs to pay a session (eth_signTypedData_v4's argument). Numbers are
// decimal strings.
type TypedAuthorization struct {
	Types       map[string][]TypedField `json:"types"`
	PrimaryType string                  `json:"primaryType"`
	Domain      TypedDomain             `json:"domain"`
	Message     AuthorizationMessage    `json:"message"`
}

// TypedField is one field of an EIP-712 type.
type TypedField struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// TypedDomain is the token's EIP-712 domain.
type TypedDomain struct {
	Name              string `json:"name"`
	Version           string `json:"version"`
	ChainID           string `json:"chainId"`
	VerifyingContract string `json:"verifyingContract"`
}

// AuthorizationMessage is what the payer authorizes: the amount due to the
// merchant's wallet, valid until the session ends, with the session's
// reference as the nonce.
type AuthorizationMessage struct {
	From        string `json:"from"`
	To          string `json:"to"`
	Value       string `json:"value"`
	ValidAfter  string `json:"validAfter"`
	ValidBefore string `json:"validBefore"`
	Nonce       string `json:"nonce"`
}

// Instructions are what a wallet needs to pay a session the bound way.
type Instructions struct {
	// Reference is the session's payment reference.
	Reference string
	// Authorization is the EIP-3009 authorization to sign (EVM).
	Authorization *TypedAuthorization
	// Relayer is true when the service broadcasts a signed authorization.
	Relayer bool
	// SolanaPayURL is the Solana Pay transfer request (Solana).
	SolanaPayURL string
}

// PaymentInstructions answers how a session is paid with proof; nothing
// for a session without a reference or on an unknown network.
func (s *Service) PaymentInstructions(cs *models.CheckoutSession, label string) Instructions {
	if cs.PaymentReference == nil {
		return Instructions{}
	}
	in := Instructions{Reference: *cs.PaymentReference}
	n, ok := s.Networks.Lookup(cs.Network)
	if !ok {
		return in
	}
	units := cs.ExpectedAmount.Units()
	switch n.Family {
	case chain.FamilyEVM:
		from := cs.WalletAddress
		in.Authorization = &TypedAuthorization{
			Types: map[string][]TypedField{
				"EIP712Domain": {{"name", "string"}, {"version", "string"}, {"chainId", "uint256"}, {"verifyingContract", "address"}},
				"TransferWithAuthorization": {{"from", "address"}, {"to", "address"}, {"value", "uint256"},
					{"validAfter", "uint256"}, {"validBefore", "uint256"}, {"nonce", "bytes32"}},
			},
			PrimaryType: "TransferWithAuthorization",
			Domain: TypedDomain{Name: n.TokenName, Version: n.TokenVersion, ChainID: strconv.FormatUint(n.ChainID, 10),
				VerifyingContract: n.USDC},
			Message: AuthorizationMessage{From: from, To: cs.MerchantWalletAddress, Value: strconv.FormatInt(units, 10),
				ValidAfter: "0", ValidBefore: strconv.FormatInt(cs.ExpiresAt.Unix(), 10), Nonce: *cs.PaymentReference},
		}
		in.Relayer = s.Relayer.Enabled(cs.Network)
	case chain.FamilySolana:
		q := url.Values{}
		q.Set("amount", cs.ExpectedAmount.String())
		q.Set("spl-token", n.USDC)
		q.Set("reference", *cs.PaymentReference)
		if label != "" {
			q.Set("label", solanaPayLabel(label))
		}
		// No memo: a wallet writes it into the transaction, so it would
		// publish the session's id, the handle of its public submit and
		// cancel routes, while the payment waits to be found by its
		// reference. The reference already ties the transfer to the session.
		in.SolanaPayURL = "solana:" + cs.MerchantWalletAddress + "?" + q.Encode()
	}
	return in
}

// maxLabelEscaped bounds the Solana Pay label as sent (URL-escaped). A
// business name of 200 characters outside ASCII is about 2,400 bytes
// escaped, more than the checkout page's QR code holds (its image answered
// 500, leaving the customer nothing to scan); a wallet shows a line of it.
const maxLabelEscaped = 96

// solanaPayLabel is label, cut at a character boundary with an ellipsis
// where its escaped form would pass maxLabelEscaped.
func solanaPayLabel(label string) string {
	if len(url.QueryEscape(label)) <= maxLabelEscaped {
		return label
	}
	r := []rune(label)
	for len(r) > 0 && len(url.QueryEscape(string(r)+"…")) > maxLabelEscaped {
		r = r[:len(r)-1]
	}
	return strings.TrimSpace(string(r)) + "…"
}

// RelayMinValidity is the least time an authorization must have left for
// the relayer to broadcast it.
const RelayMinValidity = time.Minute

// AuthorizationRequest is a signed authorization for a session, sent by
// the checkout page for the relayer to broadcast.
type AuthorizationRequest struct {
	From        string
	ValidAfter  *big.Int
	ValidBefore *big.Int
	Signature   []byte
}

// Relay broadcasts a session's signed EIP-3009 authorization from the
// operator's relayer and attaches the transaction to the session, so the
// customer pays without gas. The token refuses a bad signature before any
// gas is spent (400).
func (s *Service) Relay(ctx context.Context, sessionID string, r AuthorizationRequest) (workflows.SubmitResult, error) {
	cs, err := s.Store.CheckoutSession(ctx, sessionID)
	if err != nil {
		return workflows.SubmitResult{}, err
	}
	if err := precheck(cs, s.now()); err != nil {
		return workflows.SubmitResult{}, err
	}
	if cs.PaymentReference == nil {
		return workflows.SubmitResult{}, apperr.Invalid("sessionId", "this session has no payment reference: pay it with a transfer and submit the hash")
	}
	if !s.Relayer.Enabled(cs.Network) {
		return workflows.SubmitResult{}, apperr.Invalid("network",
			fmt.Sprintf("no relayer on %s: broadcast transferWithAuthorization from the wallet and submit its hash", cs.Network))
	}
	if !r.ValidBefore.IsInt64() || !r.ValidAfter.IsInt64() {
		// A time past int64 seconds is no time a chain has: one past
		// 2^256 would be packed wrapped round, into the past, and the
		// relayer's transaction revert on its gas.
		return workflows.SubmitResult{}, apperr.Invalid("validBefore", "validAfter and validBefore must be Unix times in seconds")
	}
	if r.ValidBefore.Cmp(big.NewInt(s.now().Unix())) <= 0 {
		return workflows.SubmitResult{}, apperr.Invalid("validBefore", "is in the past")
	}
	if r.ValidBefore.Cmp(big.NewInt(s.now().Add(RelayMinValidity).Unix())) < 0 {
		// It could expire before a block takes it: the token would revert
		// the relayer's transaction, its gas spent for nothing.
		return workflows.SubmitResult{}, apperr.Invalid("validBefore",
			fmt.Sprintf("expires in under %s: too soon to relay, broadcast transferWithAuthorization from the wallet", RelayMinValidity))
	}
	a := chain.Authorization{From: common.HexToAddress(r.From), To: common.HexToAddress(cs.MerchantWalletAddress),
		Value: big.NewInt(cs.ExpectedAmount.Units()), ValidAfter: r.ValidAfter, ValidBefore: r.ValidBefore,
		Nonce: common.HexToHash(*cs.PaymentReference), Signature: r.Signature}
	relayCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	hash, err := s.Relayer.Relay(relayCtx, cs.Network, a)
	if errors.Is(err, chain.ErrRelayBusy) {
		return workflows.SubmitResult{}, apperr.Conflict("a relayed payment from this wallet is still waiting to be mined; retry in a few seconds")
	}
	if errors.Is(err, chain.ErrAuthorizationRejected) {
		return workflows.SubmitResult{}, apperr.Invalid("signature", "the token refuses this authorization (wrong signer, amount, recipient, expiry or nonce, or too little USDC)")
	}
	if err != nil {
		return workflows.SubmitResult{}, fmt.Errorf("relay: %w", err)
	}
	return s.submit(ctx, cs.ID, hash, "client")
}
