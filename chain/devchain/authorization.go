package devchain

// EIP-3009 on the Go side: the TransferWithAuthorization a customer's wallet
// signs (EIP-712, as eth_signTypedData_v4 does) and the call anyone may
// broadcast with it. The test USDC implements the token side the way Circle's
// FiatToken v2.2 does, so these helpers work against real USDC too.

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"math/big"
	"strings"

	ethereum "github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/common/math"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/ethereum/go-ethereum/signer/core/apitypes"

	"github.com/paygate/paygate/chain/contracts"
)

// TransferWithAuthorizationType is the EIP-712 primary type of [Authorization].
const TransferWithAuthorizationType = "TransferWithAuthorization"

// DomainVersion is the EIP-712 domain version of FiatToken v2 and later (and
// of the test USDC).
const DomainVersion = "2"

// transferWithAuthorizationSig is the FiatToken v2.2 overload that takes the
// signature as bytes, so EOA and EIP-1271 contract-wallet signatures go
// through the same call.
const transferWithAuthorizationSig = "transferWithAuthorization(address,address,uint256,uint256,uint256,bytes32,bytes)"

// Authorization is an EIP-3009 TransferWithAuthorization: From allows anyone
// holding its signature to move Value of the token to To once, while
// ValidAfter < block.timestamp < ValidBefore (unix seconds). Nonce is chosen by
// the signer; a checkout uses the session's paymentReference, which binds the
// payment to the session. Nil amounts count as zero.
type Authorization struct {
	From, To                       common.Address
	Value, ValidAfter, ValidBefore *big.Int
	Nonce                          [32]byte
}

// TokenDomain is a token's EIP-712 domain as FiatToken v2 builds it:
// EIP712Domain(string name,string version,uint256 chainId,address verifyingContract).
type TokenDomain struct {
	// Name is the token's name(), e.g. "USD Coin" (Base and Ethereum mainnet
	// USDC), "USDC" (Circle's Sepolia deployments), "USD Coin (paygate dev)".
	Name string
	// Version is "2" on FiatToken v2 and later ([DomainVersion]).
	Version string
	// ChainID is the chain the token lives on.
	ChainID uint64
	// VerifyingContract is the token's address.
	VerifyingContract common.Address
}

// authorizationTypes are the EIP-712 types of a TransferWithAuthorization,
// exactly as FiatToken's type hash spells them.
var authorizationTypes = apitypes.Types{
	"EIP712Domain": {
		{Name: "name", Type: "string"},
		{Name: "version", Type: "string"},
		{Name: "chainId", Type: "uint256"},
		{Name: "verifyingContract", Type: "address"},
	},
	TransferWithAuthorizationType: {
		{Name: "from", Type: "address"},
		{Name: "to", Type: "address"},
		{Name: "value", Type: "uint256"},
		{Name: "validAfter", Type: "uint256"},
		{Name: "validBefore", Type: "uint256"},
		{Name: "nonce", Type: "bytes32"},
	},
}

// AuthorizationTypes returns a copy of the EIP-712 types of a
// TransferWithAuthorization (EIP712Domain included), for comparing with typed
// data received from elsewhere.
func AuthorizationTypes() apitypes.Types {
	out := apitypes.Types{}
	for k, v := range authorizationTypes {
		out[k] = append([]apitypes.Type(nil), v...)
	}
	return out
}

func orZero(v *big.Int) *big.Int {
	if v == nil {
		return new(big.Int)
	}
	return v
}

// uint256Max is the largest value a uint256 field holds.
var uint256Max = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 256), big.NewInt(1))

// Validate reports a field that cannot be encoded as a uint256.
func (a Authorization) Validate() error {
	for _, f := range []struct {
		name string
		v    *big.Int
	}{{"value", a.Value}, {"validAfter", a.ValidAfter}, {"validBefore", a.ValidBefore}} {
		if v := orZero(f.v); v.Sign() < 0 || v.Cmp(uint256Max) > 0 {
			return fmt.Errorf("devchain: authorization %s %s is not a uint256", f.name, v)
		}
	}
	return nil
}

// AuthorizationTypedData returns the authorization as EIP-712 typed data, the
// document a wallet's eth_signTypedData_v4 signs (numbers as decimal strings,
// the nonce as 0x-hex).
func AuthorizationTypedData(d TokenDomain, a Authorization) apitypes.TypedData {
	return apitypes.TypedData{
		Types:       AuthorizationTypes(),
		PrimaryType: TransferWithAuthorizationType,
		Domain: apitypes.TypedDataDomain{
			Name:              d.Name,
			Version:           d.Version,
			ChainId:           (*math.HexOrDecimal256)(new(big.Int).SetUint64(d.ChainID)),
			VerifyingContract: d.VerifyingContract.Hex(),
		},
		Message: apitypes.TypedDataMessage{
			"from":        a.From.Hex(),
			"to":          a.To.Hex(),
			"value":       orZero(a.Value).String(),
			"validAfter":  orZero(a.ValidAfter).String(),
			"validBefore": orZero(a.ValidBefore).String(),
			"nonce":       hexutil.Encode(a.Nonce[:]),
		},
	}
}

// AuthorizationDigest returns the EIP-712 digest of the authorization under
// the token's domain: keccak256("\x19\x01" || domainSeparator || structHash),
// the hash the token checks the signature against. It is computed by
// go-ethereum's EIP-712 encoder (signer/core/apitypes), the one its wallet
// signer uses. It panics when a value is not a uint256 ([Authorization.Validate]
// says so without panicking; [SignAuthorization] checks first).
func AuthorizationDigest(d TokenDomain, a Authorization) common.Hash {
	hash, _, err := apitypes.TypedDataAndHash(AuthorizationTypedData(d, a))
	if err != nil {
		panic(fmt.Sprintf("devchain: EIP-712 hash of an authorization: %v", err))
	}
	return common.BytesToHash(hash)
}

// SignAuthorization signs the authorization's digest with key and returns
// the 65-byte signature r || s || v with v = 27 or 28 (low s), as a wallet's
// eth_signTypedData_v4 does. The key is not checked against a.From: the owner
// of an EIP-1271 contract wallet signs for the wallet (a.From is the wallet).
func SignAuthorization(key *ecdsa.PrivateKey, d TokenDomain, a Authorization) ([]byte, error) {
	if key == nil {
		return nil, errors.New("devchain: nil key")
	}
	if err := a.Validate(); err != nil {
		return nil, err
	}
	digest := AuthorizationDigest(d, a)
	sig, err := crypto.Sign(digest[:], key)
	if err != nil {
		return nil, fmt.Errorf("devchain: sign authorization: %w", err)
	}
	sig[crypto.RecoveryIDOffset] += 27
	return sig, nil
}

// AuthorizationCalldata packs the call transferWithAuthorization(from, to,
// value, validAfter, validBefore, nonce, bytes signature), for a broadcaster
// that keeps its own [contracts.Transactor] (one per key, so concurrent
// broadcasts do not reuse a transaction nonce).
func AuthorizationCalldata(a Authorization, sig []byte) ([]byte, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	if len(sig) == 0 {
		return nil, errors.New("devchain: empty authorization signature")
	}
	return contracts.MustLoad(contracts.TestUSDC).PackSig(transferWithAuthorizationSig,
		a.From, a.To, orZero(a.Value), orZero(a.ValidAfter), orZero(a.ValidBefore), a.Nonce, sig)
}

// BroadcastAuthorization sends transferWithAuthorization (the bytes-signature
// overload) to token from broadcasterKey's account, which pays the gas: the
// customer's own wallet or a relayer. It returns once the node accepts the
// transaction. A call the token would refuse fails gas estimation and comes
// back as a [*RevertError]; other errors are the node's or the network's.
func BroadcastAuthorization(ctx context.Context, client contracts.Backend, broadcasterKey *ecdsa.PrivateKey, token common.Address, a Authorization, sig []byte) (*types.Transaction, error) {
	data, err := AuthorizationCalldata(a, sig)
	if err != nil {
		return nil, err
	}
	tr, err := contracts.NewTransactor(ctx, client, broadcasterKey)
	if err != nil {
		return nil, fmt.Errorf("devchain: %w", err)
	}
	tx, err := tr.Send(ctx, &token, data)
	if err != nil {
		if rerr := revertError(err); rerr != nil {
			return nil, rerr
		}
		return nil, fmt.Errorf("devchain: broadcast authorization: %w", err)
	}
	return tx, nil
}

// SimulateAuthorization runs the same call as [BroadcastAuthorization] with
// eth_call on the latest block, from no particular account, and returns nil
// when the token would accept it. A refusal is a [*RevertError] (match its
// reason with errors.Is: [ErrAuthorizationExpired], [ErrAuthorizationUsed],
// [ErrInvalidSignature], ...); any other error is a failure to ask (network,
// node) and says nothing about the authorization. The latest block's
// timestamp is not the one the transaction will be mined with: an
// authorization about to expire may pass here and still revert.
func SimulateAuthorization(ctx context.Context, client ethereum.ContractCaller, token common.Address, a Authorization, sig []byte) error {
	data, err := AuthorizationCalldata(a, sig)
	if err != nil {
		return err
	}
	if _, err := client.CallContract(ctx, ethereum.CallMsg{To: &token, Data: data}, nil); err != nil {
		if rerr := revertError(err); rerr != nil {
			return rerr
		}
		return fmt.Errorf("devchain: simulate authorization: %w", err)
	}
	return nil
}

// Why a token refuses an authorization; a [*RevertError] unwraps to one of
// them when the revert says so.
var (
	// ErrAuthorizationExpired: block.timestamp >= validBefore.
	ErrAuthorizationExpired = errors.New("authorization expired")
	// ErrAuthorizationNotYetValid: block.timestamp <= validAfter.
	ErrAuthorizationNotYetValid = errors.New("authorization not yet valid")
	// ErrAuthorizationUsed: the authorizer's nonce was used or canceled.
	ErrAuthorizationUsed = errors.New("authorization nonce used or canceled")
	// ErrInvalidSignature: the signature is malformed or not the authorizer's
	// over this digest (another chain, token, amount, payee, ...).
	ErrInvalidSignature = errors.New("invalid authorization signature")
	// ErrInsufficientBalance: the authorizer holds less than the value.
	ErrInsufficientBalance = errors.New("insufficient token balance")
)

// RevertError is a transferWithAuthorization the token refuses.
type RevertError struct {
	// Reason is the decoded revert: a custom error with its arguments (test
	// USDC), a revert string (FiatToken), or "execution reverted".
	Reason string
	// Data is the raw revert data.
	Data []byte
	// Kind is one of the Err* reasons above, or nil when the revert is of
	// another kind.
	Kind error
}

func (e *RevertError) Error() string {
	return "devchain: the token refuses the authorization: " + e.Reason
}

// Unwrap returns Kind, so errors.Is(err, ErrAuthorizationExpired) works.
func (e *RevertError) Unwrap() error { return e.Kind }

// customErrorKinds maps the test USDC's custom errors to reasons.
var customErrorKinds = map[string]error{
	"AuthorizationExpired":        ErrAuthorizationExpired,
	"AuthorizationNotYetValid":    ErrAuthorizationNotYetValid,
	"AuthorizationUsedOrCanceled": ErrAuthorizationUsed,
	"InvalidSignature":            ErrInvalidSignature,
	"InvalidSignatureLength":      ErrInvalidSignature,
	"InvalidSignatureS":           ErrInvalidSignature,
	"InvalidSignatureV":           ErrInvalidSignature,
	"InsufficientBalance":         ErrInsufficientBalance,
}

// fiatTokenReasons maps FiatToken v2.2's revert strings (a prefix each) to
// reasons. These are another contract's messages, not our own errors: the
// string is all the chain gives.
var fiatTokenReasons = []struct {
	prefix string
	kind   error
}{
	{"FiatTokenV2: authorization is expired", ErrAuthorizationExpired},
	{"FiatTokenV2: authorization is not yet valid", ErrAuthorizationNotYetValid},
	{"FiatTokenV2: authorization is used or canceled", ErrAuthorizationUsed},
	{"FiatTokenV2: invalid signature", ErrInvalidSignature},
	{"ECRecover: invalid signature", ErrInvalidSignature},
	{"ERC20: transfer amount exceeds balance", ErrInsufficientBalance},
}

// revertError decodes err when it is a node's "execution reverted" answer
// (JSON-RPC error code 3, with the revert data); otherwise it returns nil.
func revertError(err error) *RevertError {
	data, ok := ethclient.RevertErrorData(err)
	if !ok {
		return nil
	}
	out := &RevertError{Reason: "execution reverted", Data: data}
	if len(data) < 4 {
		return out
	}
	if reason, err := abi.UnpackRevert(data); err == nil {
		out.Reason = reason
		for _, r := range fiatTokenReasons {
			if strings.HasPrefix(reason, r.prefix) {
				out.Kind = r.kind
			}
		}
		return out
	}
	usdc := contracts.MustLoad(contracts.TestUSDC)
	if e, err := usdc.ABI.ErrorByID([4]byte(data[:4])); err == nil {
		out.Reason = e.Name + "()"
		if args, err := e.Unpack(data); err == nil {
			if list, ok := args.([]any); ok {
				parts := make([]string, len(list))
				for i, v := range list {
					if b, ok := v.([32]byte); ok {
						v = hexutil.Encode(b[:])
					}
					parts[i] = fmt.Sprint(v)
				}
				out.Reason = e.Name + "(" + strings.Join(parts, ", ") + ")"
			}
		}
		out.Kind = customErrorKinds[e.Name]
	}
	return out
}

// ReadTokenDomain builds a FiatToken v2 token's EIP-712 domain from the chain:
// its name(), version [DomainVersion], the chain id of client, and the token
// address.
func ReadTokenDomain(ctx context.Context, client interface {
	ethereum.ContractCaller
	ethereum.ChainIDReader
}, token common.Address) (TokenDomain, error) {
	id, err := client.ChainID(ctx)
	if err != nil {
		return TokenDomain{}, fmt.Errorf("devchain: chain id: %w", err)
	}
	out, err := contracts.Call(ctx, client, contracts.MustLoad(contracts.TestUSDC), token, "name")
	if err != nil {
		return TokenDomain{}, fmt.Errorf("devchain: name of token %s: %w", token, err)
	}
	name, ok := out[0].(string)
	if !ok {
		return TokenDomain{}, fmt.Errorf("devchain: name of token %s: not a string", token)
	}
	return TokenDomain{Name: name, Version: DomainVersion, ChainID: id.Uint64(), VerifyingContract: token}, nil
}
