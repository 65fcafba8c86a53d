package keyring

import (
	"errors"
	"strings"
	"testing"
)

const (
	oldSecret = "old-server-secret-old-server-secret-0001"
	newSecret = "new-server-secret-new-server-secret-0002"
)

func TestSealOpen(t *testing.T) {
	r, err := New(PurposeWebhookSecret, newSecret)
	if err != nil {
		t.Fatal(err)
	}
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	a, err := r.Seal(secret, "endpoint-1")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := r.Seal(secret, "endpoint-1")
	if a == b {
		t.Fatal("two seals of one value are equal: the nonce is not fresh")
	}
	if strings.Contains(a, "MfKQ9r8") || !IsSealed(a) || !strings.HasPrefix(a, "pgs1."+r.CurrentKeyID()+".") {
		t.Fatalf("sealed value %q", a)
	}
	got, stale, err := r.Open(a, "endpoint-1")
	if err != nil || stale || got != secret {
		t.Fatalf("open: %q stale=%v %v", got, stale, err)
	}
	if _, _, err := r.Open(a, "endpoint-2"); !errors.Is(err, ErrDecrypt) {
		t.Fatalf("opened for another row: %v", err)
	}
	tampered := a[:len(a)-2] + "AA"
	if _, _, err := r.Open(tampered, "endpoint-1"); err == nil {
		t.Fatal("a tampered value opened")
	}
	for _, bad := range []string{"", secret, "pgs1.zz.abc", "pgs1.0123abcd.%%%"} {
		if _, _, err := r.Open(bad, "endpoint-1"); err == nil {
			t.Errorf("opened %q", bad)
		}
	}
	// Another purpose derives another key: the same secret does not open.
	other, _ := New("other-purpose", newSecret)
	if _, _, err := other.Open(a, "endpoint-1"); err == nil {
		t.Fatal("a key of another purpose opened the value")
	}
}

// TestRotation: values sealed under the old server secret open with a ring
// that has it as previous (stale, so the caller re-seals); without it they
// do not; re-sealed values open with the new secret alone.
func TestRotation(t *testing.T) {
	before, _ := New(PurposeWebhookSecret, oldSecret)
	sealed, _ := before.Seal("whsec_x", "ep")
	after, err := New(PurposeWebhookSecret, newSecret, "", oldSecret)
	if err != nil {
		t.Fatal(err)
	}
	if before.CurrentKeyID() == after.CurrentKeyID() {
		t.Fatal("two server secrets gave one key id")
	}
	got, stale, err := after.Open(sealed, "ep")
	if err != nil || !stale || got != "whsec_x" {
		t.Fatalf("old value with the previous secret: %q stale=%v %v", got, stale, err)
	}
	resealed, _ := after.Seal(got, "ep")
	only, _ := New(PurposeWebhookSecret, newSecret)
	if _, _, err := only.Open(sealed, "ep"); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("old value without the previous secret: %v", err)
	}
	if got, stale, err := only.Open(resealed, "ep"); err != nil || stale || got != "whsec_x" {
		t.Fatalf("re-sealed value: %q stale=%v %v", got, stale, err)
	}
	if _, err := New(PurposeWebhookSecret, ""); err == nil {
		t.Fatal("empty current secret accepted")
	}
}
