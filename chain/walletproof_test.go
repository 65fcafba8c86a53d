package chain

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/accounts"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/gagliardetto/solana-go"
)

// A wallet proof verifies only as the wallet's own signature over the
// message naming it and the merchant: an EVM personal_sign (v as 27/28 or
// 0/1) or a Solana signMessage (base58, hex or base64); another wallet's,
// another message's (another merchant, another time) or a malformed one is
// refused with ErrBadWalletProof.
func TestVerifyWalletProof(t *testing.T) {
	issued := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	key, _ := crypto.GenerateKey()
	other, _ := crypto.GenerateKey()
	evm := crypto.PubkeyToAddress(key.PublicKey).Hex()
	msg := proofMessage(evm, "m-1", issued)
	personal := func(k any, m string, v27 bool) string {
		sig, err := crypto.Sign(accounts.TextHash([]byte(m)), key)
		if k != nil {
			sig, err = crypto.Sign(accounts.TextHash([]byte(m)), other)
		}
		if err != nil {
			t.Fatal(err)
		}
		if v27 {
			sig[64] += 27
		}
		return "0x" + hex.EncodeToString(sig)
	}
	sol := solana.NewWallet().PrivateKey
	solOther := solana.NewWallet().PrivateKey
	solAddr := sol.PublicKey().String()
	solMsg := proofMessage(solAddr, "m-1", issued)
	signSol := func(k solana.PrivateKey, m string) solana.Signature {
		s, err := k.Sign([]byte(m))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	good := signSol(sol, solMsg)
	var identity solana.PublicKey
	identity[0] = 1 // y = 1, x = 0: the identity point
	if err := ed25519Verifies(identity, proofMessage(identity.String(), "m-1", issued), append([]byte{1}, make([]byte, 63)...)); !err {
		t.Fatal("crypto/ed25519 no longer verifies the small-order forgery: the case below tests nothing")
	}

	for _, c := range []struct {
		name           string
		fam            Family
		address, m, sg string
		ok             bool
	}{
		{"evm, v 27/28", FamilyEVM, evm, msg, personal(nil, msg, true), true},
		{"evm, v 0/1", FamilyEVM, evm, msg, personal(nil, msg, false), true},
		{"evm, another wallet's", FamilyEVM, evm, msg, personal(other, msg, true), false},
		{"evm, another merchant's message", FamilyEVM, evm, proofMessage(evm, "m-2", issued), personal(nil, msg, true), false},
		{"evm, another time", FamilyEVM, evm, proofMessage(evm, "m-1", issued.Add(time.Second)), personal(nil, msg, true), false},
		{"evm, short", FamilyEVM, evm, msg, "0x1234", false},
		{"evm, not hex", FamilyEVM, evm, msg, "zz", false},
		{"solana, base58", FamilySolana, solAddr, solMsg, good.String(), true},
		{"solana, hex", FamilySolana, solAddr, solMsg, hex.EncodeToString(good[:]), true},
		{"solana, base64", FamilySolana, solAddr, solMsg, base64.StdEncoding.EncodeToString(good[:]), true},
		{"solana, another wallet's", FamilySolana, solAddr, solMsg, signSol(solOther, solMsg).String(), false},
		{"solana, another merchant's message", FamilySolana, solAddr, proofMessage(solAddr, "m-2", issued), good.String(), false},
		{"solana, short", FamilySolana, solAddr, solMsg, "abc", false},
		// The identity point as a key, and the signature (R = identity,
		// s = 0) that crypto/ed25519 verifies for it over any message.
		{"solana, a key of small order", FamilySolana, identity.String(), proofMessage(identity.String(), "m-1", issued),
			hex.EncodeToString(append([]byte{1}, make([]byte, 63)...)), false},
	} {
		err := VerifyWalletProof(c.fam, c.address, c.m, c.sg)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrBadWalletProof)) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	if got := proofMessage(evm, "m-1", issued.Add(500*time.Millisecond)); got != msg {
		t.Errorf("the message's time is to the second: %q", got)
	}
}

func ed25519Verifies(pk solana.PublicKey, msg string, sig []byte) bool {
	return ed25519.Verify(ed25519.PublicKey(pk[:]), []byte(msg), sig)
}

// proofMessage is the message of a proof of address for merchant, issued
// at issued (account and nonce fixed: the server makes them).
func proofMessage(address, merchant string, issued time.Time) string {
	return WalletProof{Address: address, MerchantID: merchant, Account: "owner@example.com", Issued: issued, Nonce: "00112233"}.Message()
}
