package auth

import (
	"strings"
	"testing"
)

func TestGenerateAPIKey(t *testing.T) {
	for _, typ := range []string{"test", "live"} {
		k, err := GenerateAPIKey(typ)
		if err != nil {
			t.Fatal(err)
		}
		want := "svc_" + typ + "_sk_"
		if !strings.HasPrefix(k.Full, want) || len(k.Full) != len(want)+keyRandomChars {
			t.Fatalf("key %q", k.Full)
		}
		if k.Prefix != k.Full[:len(want)+4] || k.Suffix != k.Full[len(k.Full)-4:] {
			t.Fatalf("mask %q %q of %q", k.Prefix, k.Suffix, k.Full)
		}
		if KeyType(k.Full) != typ {
			t.Fatal("KeyType")
		}
	}
	if _, err := GenerateAPIKey("prod"); err == nil {
		t.Fatal("unknown type accepted")
	}
}

func TestPassword(t *testing.T) {
	h, err := HashPassword("correct horse battery")
	if err != nil {
		t.Fatal(err)
	}
	if CheckPassword(h, "correct horse battery") != nil {
		t.Fatal("right password refused")
	}
	if CheckPassword(h, "correct horse batterY") != ErrPasswordMismatch {
		t.Fatal("wrong password accepted")
	}
}

func TestHasherDomainSeparation(t *testing.T) {
	h := NewHasher("0123456789abcdef0123456789abcdef")
	if string(h.Sign("quote", []byte("x"))) == string(h.Sign("other", []byte("x"))) {
		t.Fatal("purposes must not share signatures")
	}
	if h.Hash("a") == NewHasher("another-secret-another-secret-xx").Hash("a") {
		t.Fatal("hash must depend on the secret")
	}
}

// TestHasherRotation: with previous secrets the hasher still recognises
// hashes and signatures made under them; the current secret always hashes.
func TestHasherRotation(t *testing.T) {
	old := NewHasher("old-secret-old-secret-old-secret-old")
	h := NewHasher("new-secret-new-secret-new-secret-new", "", "old-secret-old-secret-old-secret-old")
	if h.Hash("svc_test_sk_x") == old.Hash("svc_test_sk_x") {
		t.Fatal("the current secret must hash")
	}
	prev := h.PreviousHashes("svc_test_sk_x")
	if len(prev) != 1 || prev[0] != old.Hash("svc_test_sk_x") {
		t.Fatalf("previous hashes %v", prev)
	}
	sig := old.Sign("quote", []byte("body"))
	if !h.Verify("quote", []byte("body"), sig) || !h.Verify("quote", []byte("body"), h.Sign("quote", []byte("body"))) {
		t.Fatal("a signature under the previous or the current secret must verify")
	}
	if h.Verify("other", []byte("body"), sig) || h.Verify("quote", []byte("body2"), sig) ||
		NewHasher("new-secret-new-secret-new-secret-new").Verify("quote", []byte("body"), sig) {
		t.Fatal("a signature verified for another purpose, body, or without its secret")
	}
}
