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
