package chain

import (
	"errors"
	"strings"

	"github.com/ethereum/go-ethereum/common"
	"github.com/gagliardetto/solana-go"
)

// ErrInvalidAddress is the sentinel wrapped by every [ParseAddress] failure.
var ErrInvalidAddress = errors.New("invalid address")

// ErrInvalidTxHash is the sentinel wrapped by every [ParseTxHash] failure.
var ErrInvalidTxHash = errors.New("invalid transaction hash")

// ParseError is the error of [ParseAddress] and [ParseTxHash]. Its text is a
// short lowercase reason meant to follow a field name ("walletAddress: <reason>");
// errors.Is matches it against [ErrInvalidAddress] or [ErrInvalidTxHash].
type ParseError struct {
	// Reason is the human-readable reason, e.g. "must be a 0x-prefixed 20-byte hex address".
	Reason string
	kind   error
}

// Error returns the reason alone, so callers can prefix the field name.
func (e *ParseError) Error() string { return e.Reason }

// Unwrap returns the sentinel ([ErrInvalidAddress] or [ErrInvalidTxHash]).
func (e *ParseError) Unwrap() error { return e.kind }

func addrErr(reason string) error { return &ParseError{Reason: reason, kind: ErrInvalidAddress} }
func hashErr(reason string) error { return &ParseError{Reason: reason, kind: ErrInvalidTxHash} }

// Bounds of SPEC.md ("Field and value bounds").
const (
	minAddressChars = 26
	maxAddressChars = 128
	maxHashChars    = 128
)

// ParseAddress validates a wallet or token address of the given family and
// returns its canonical form.
//
// EVM: "0x" followed by 40 hex digits; a mixed-case address must carry a valid
// EIP-55 checksum (all-lower or all-upper digits carry none). The result is the
// EIP-55 form. The zero address is refused: funds sent there are burnt.
//
// Solana: base58 that decodes to exactly 32 bytes; the result is the canonical
// base58 encoding (which equals the input).
//
// Both must also fit SPEC.md's bound of 26 to 128 alphanumeric characters
// (not counting the 0x prefix).
func ParseAddress(f Family, s string) (string, error) {
	switch f {
	case FamilyEVM:
		body, ok := strings.CutPrefix(s, "0x")
		if !ok || len(body) != 2*common.AddressLength || !isHex(body) {
			return "", addrErr("must be a 0x-prefixed 20-byte hex address")
		}
		addr := common.HexToAddress(body)
		if hasLower(body) && hasUpper(body) && addr.Hex() != s {
			return "", addrErr("has an invalid EIP-55 checksum")
		}
		if addr == (common.Address{}) {
			return "", addrErr("must not be the zero address")
		}
		return addr.Hex(), nil
	case FamilySolana:
		if len(s) < minAddressChars || len(s) > maxAddressChars || !isAlnum(s) {
			return "", addrErr("must be a base58 Solana address of 32 bytes")
		}
		pk, err := solana.PublicKeyFromBase58(s)
		if err != nil || pk.String() != s {
			return "", addrErr("must be a base58 Solana address of 32 bytes")
		}
		if pk.IsZero() {
			return "", addrErr("must not be the zero address")
		}
		return pk.String(), nil
	default:
		return "", addrErr("unsupported chain family")
	}
}

// ParseTxHash validates a transaction hash of the given family and returns its
// canonical form.
//
// EVM: 64 hex digits with an optional "0x" prefix (SPEC.md); the result is
// lower-case with the prefix.
//
// Solana: a base58 transaction signature that decodes to exactly 64 bytes (the
// hex bound of SPEC.md cannot hold for Solana, see DESIGN.md).
func ParseTxHash(f Family, s string) (string, error) {
	switch f {
	case FamilyEVM:
		body := strings.TrimPrefix(s, "0x")
		if len(body) != 2*common.HashLength || !isHex(body) {
			return "", hashErr("must be 64 hex characters with an optional 0x prefix")
		}
		return "0x" + strings.ToLower(body), nil
	case FamilySolana:
		if len(s) == 0 || len(s) > maxHashChars || !isAlnum(s) {
			return "", hashErr("must be a base58 Solana signature of 64 bytes")
		}
		sig, err := solana.SignatureFromBase58(s)
		if err != nil || sig.String() != s {
			return "", hashErr("must be a base58 Solana signature of 64 bytes")
		}
		if sig.IsZero() {
			return "", hashErr("must not be the zero signature")
		}
		return sig.String(), nil
	default:
		return "", hashErr("unsupported chain family")
	}
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

func isAlnum(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return false
		}
	}
	return true
}

func hasLower(s string) bool { return strings.ContainsAny(s, "abcdef") }
func hasUpper(s string) bool { return strings.ContainsAny(s, "ABCDEF") }
