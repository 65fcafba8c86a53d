package chain

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strings"
	"time"

	"filippo.io/edwards25519"
	"github.com/ethereum/go-ethereum/accounts"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/gagliardetto/solana-go"
)

// A wallet proof is a message naming a wallet and a merchant, signed by the
// wallet's key: whoever holds the key says the wallet receives that
// merchant's payments. Nothing is stored before the signature: the message
// is rebuilt from its fields, so it cannot carry anything else, and one
// signed for another merchant, another wallet or another time does not
// verify.

// WalletProofValidity is how long after its issue a proof message is taken.
const WalletProofValidity = 15 * time.Minute

// ErrBadWalletProof is wrapped by every refusal of VerifyWalletProof.
var ErrBadWalletProof = errors.New("wallet proof does not verify")

// WalletProof is what a proof message names: the wallet (canonical,
// ParseAddress), the merchant account (its id and e-mail, which the
// wallet's owner can recognise), the time of issue (UTC, to the second) and
// the server's nonce for them (the server's MAC over the others: only the
// server issues a message, so none can be dated ahead).
type WalletProof struct {
	Address, MerchantID, Account, Nonce string
	Issued                              time.Time
}

// Message is the text the wallet signs.
func (p WalletProof) Message() string {
	return "paygate wallet proof\n\n" +
		"I control this wallet. Payments to it through paygate are for the merchant account below.\n\n" +
		"Wallet: " + p.Address + "\n" +
		"Account: " + p.Account + "\n" +
		"Merchant: " + p.MerchantID + "\n" +
		"Issued: " + p.Issued.UTC().Truncate(time.Second).Format(time.RFC3339) + "\n" +
		"Nonce: " + p.Nonce
}

// VerifyWalletProof checks that signature is the wallet's own over message:
//
//   - EVM: a personal_sign signature (EIP-191: "\x19Ethereum Signed
//     Message:\n" + length + message, Keccak-256), 65 bytes r || s || v in
//     hex, v 27/28 or 0/1, whose recovered signer is the address. A smart
//     contract wallet (EIP-1271) signs nothing a key can recover: it cannot
//     be proven this way.
//   - Solana: an ed25519 signature of the message's bytes (a wallet's
//     signMessage), 64 bytes in base58, hex or base64, by the address's key.
func VerifyWalletProof(fam Family, address, message, signature string) error {
	sig := strings.TrimSpace(signature)
	switch fam {
	case FamilyEVM:
		b, err := hex.DecodeString(strings.TrimPrefix(sig, "0x"))
		if err != nil || len(b) != crypto.SignatureLength {
			return proofErr("signature: must be 65 bytes of hex (r, s, v), as personal_sign gives")
		}
		if b[64] >= 27 {
			b[64] -= 27
		}
		if b[64] > 1 {
			return proofErr("signature: its recovery byte v must be 27, 28, 0 or 1")
		}
		pub, err := crypto.SigToPub(accounts.TextHash([]byte(message)), b)
		if err != nil {
			return proofErr("signature: no signer recovers from it")
		}
		if crypto.PubkeyToAddress(*pub) != common.HexToAddress(address) {
			return proofErr("signature: signed by another wallet (" + crypto.PubkeyToAddress(*pub).Hex() + "), or over another message")
		}
		return nil
	case FamilySolana:
		pk, err := solana.PublicKeyFromBase58(address)
		if err != nil {
			return proofErr("address: not a Solana address")
		}
		if smallOrder(pk[:]) {
			// A key of small order (the identity, say) verifies a
			// signature nobody made: no one holds such a wallet's key.
			return proofErr("address: not a key anyone can sign with (a point of small order)")
		}
		b := decodeSignature(sig)
		if len(b) != ed25519.SignatureSize {
			return proofErr("signature: must be 64 bytes in base58, hex or base64, as signMessage gives")
		}
		if !ed25519.Verify(ed25519.PublicKey(pk[:]), []byte(message), b) {
			return proofErr("signature: not the wallet's over this message")
		}
		return nil
	}
	return proofErr("unsupported chain family")
}

// smallOrder says whether an ed25519 public key is a point of small order
// (or no point at all): crypto/ed25519 verifies signatures by such keys that
// no private key made.
func smallOrder(pub []byte) bool {
	p, err := new(edwards25519.Point).SetBytes(pub)
	if err != nil {
		return true
	}
	return new(edwards25519.Point).MultByCofactor(p).Equal(edwards25519.NewIdentityPoint()) == 1
}

// decodeSignature reads a 64-byte signature written in hex, base58 or
// base64 (nil when none gives 64 bytes).
func decodeSignature(s string) []byte {
	if b, err := hex.DecodeString(strings.TrimPrefix(s, "0x")); err == nil && len(b) == ed25519.SignatureSize {
		return b
	}
	if sig, err := solana.SignatureFromBase58(s); err == nil {
		return sig[:]
	}
	if b, err := base64.StdEncoding.DecodeString(s); err == nil && len(b) == ed25519.SignatureSize {
		return b
	}
	return nil
}

type walletProofError struct{ reason string }

func (e *walletProofError) Error() string { return e.reason }
func (e *walletProofError) Unwrap() error { return ErrBadWalletProof }

func proofErr(reason string) error { return &walletProofError{reason: reason} }
