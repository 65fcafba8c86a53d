// Package keyring encrypts small secrets at rest (webhook signing secrets)
// under keys derived from the server secret, PAYGATE_SECRET_KEY, and keeps
// the keys of previous server secrets for decryption, so the server secret
// can be rotated without losing what was sealed under the old one.
//
// A key is derived per purpose with HKDF-SHA256 (RFC 5869) from the server
// secret; it never appears anywhere. A sealed value is
//
//	pgs1.<key id>.<base64url(nonce || AES-256-GCM ciphertext and tag)>
//
// where the key id (8 hex characters, derived apart from the key) says which
// server secret sealed it, and the additional data binds the ciphertext to
// its row (a sealed secret copied onto another endpoint does not open).
package keyring

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Version prefixes every sealed value.
const Version = "pgs1"

// PurposeWebhookSecret derives the key that seals webhook signing secrets.
const PurposeWebhookSecret = "webhook-secret"

var (
	// ErrUnknownKey: the value was sealed under a server secret that is
	// neither the current nor one of the previous ones.
	ErrUnknownKey = errors.New("keyring: sealed under an unknown server secret (is PAYGATE_SECRET_KEY_PREVIOUS set?)")
	// ErrMalformed: the value is not a sealed value of this package.
	ErrMalformed = errors.New("keyring: not a sealed value")
	// ErrDecrypt: the key is known but the value does not open (tampered,
	// or sealed for another row).
	ErrDecrypt = errors.New("keyring: sealed value does not open")
)

type key struct {
	id   string
	aead cipher.AEAD
}

// Ring holds the current key of one purpose and the keys of previous server
// secrets. It is safe for concurrent use.
type Ring struct {
	purpose string
	current key
	byID    map[string]key
}

// New derives purpose's keys from the current server secret and any previous
// ones (oldest last or first: order does not matter). Empty previous
// entries are ignored.
func New(purpose, current string, previous ...string) (*Ring, error) {
	if purpose == "" || current == "" {
		return nil, errors.New("keyring: a purpose and the current server secret are required")
	}
	r := &Ring{purpose: purpose, byID: map[string]key{}}
	k, err := derive(purpose, current)
	if err != nil {
		return nil, err
	}
	r.current = k
	r.byID[k.id] = k
	for _, p := range previous {
		if p == "" || p == current {
			continue
		}
		pk, err := derive(purpose, p)
		if err != nil {
			return nil, err
		}
		if _, dup := r.byID[pk.id]; !dup {
			r.byID[pk.id] = pk
		}
	}
	return r, nil
}

func derive(purpose, secret string) (key, error) {
	k, err := hkdf.Key(sha256.New, []byte(secret), nil, "paygate/"+purpose+"/aes-256-gcm", 32)
	if err != nil {
		return key{}, err
	}
	idm, err := hkdf.Key(sha256.New, []byte(secret), nil, "paygate/"+purpose+"/key-id", 4)
	if err != nil {
		return key{}, err
	}
	block, err := aes.NewCipher(k)
	if err != nil {
		return key{}, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return key{}, err
	}
	return key{id: hex.EncodeToString(idm), aead: aead}, nil
}

// CurrentKeyID is the id of the key Seal uses.
func (r *Ring) CurrentKeyID() string { return r.current.id }

// Seal encrypts plaintext under the current key, bound to aad (the row it
// belongs to).
func (r *Ring) Seal(plaintext, aad string) (string, error) {
	nonce := make([]byte, r.current.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("keyring: nonce: %w", err)
	}
	out := r.current.aead.Seal(nonce, nonce, []byte(plaintext), []byte(r.purpose+"\x00"+aad))
	return Version + "." + r.current.id + "." + base64.RawURLEncoding.EncodeToString(out), nil
}

// Open decrypts a value Seal produced for aad. stale reports that it was
// sealed under a previous server secret: the caller should seal it again.
func (r *Ring) Open(sealed, aad string) (plaintext string, stale bool, err error) {
	id, err := KeyID(sealed)
	if err != nil {
		return "", false, err
	}
	k, ok := r.byID[id]
	if !ok {
		return "", false, ErrUnknownKey
	}
	raw, err := base64.RawURLEncoding.DecodeString(sealed[len(Version)+1+len(id)+1:])
	if err != nil || len(raw) < k.aead.NonceSize()+k.aead.Overhead() {
		return "", false, ErrMalformed
	}
	n := k.aead.NonceSize()
	pt, err := k.aead.Open(nil, raw[:n], raw[n:], []byte(r.purpose+"\x00"+aad))
	if err != nil {
		return "", false, ErrDecrypt
	}
	return string(pt), id != r.current.id, nil
}

// IsSealed reports whether v looks like a sealed value.
func IsSealed(v string) bool { return strings.HasPrefix(v, Version+".") }

// KeyID returns the key id a sealed value names.
func KeyID(sealed string) (string, error) {
	parts := strings.SplitN(sealed, ".", 3)
	if len(parts) != 3 || parts[0] != Version || len(parts[1]) != 8 {
		return "", ErrMalformed
	}
	return parts[1], nil
}
