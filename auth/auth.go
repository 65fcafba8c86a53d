// Package auth makes and checks the service's credentials: API keys,
// dashboard session tokens and merchant passwords. Secrets are only ever
// stored as hashes: keys and tokens as HMAC-SHA256 under the server's secret
// (a stolen database alone cannot confirm a guessed key), passwords with
// argon2id.
package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"strings"

	"golang.org/x/crypto/argon2"
)

// Key and token prefixes (SPEC.md "Authentication", DESIGN.md section 4).
const (
	TestKeyPrefix = "svc_test_sk_"
	LiveKeyPrefix = "svc_live_sk_"
	SessionPrefix = "svc_sess_"
	// ResetPrefix starts a password-reset token; it is never a bearer
	// credential.
	ResetPrefix = "svc_reset_"
	// ConfirmPrefix starts an e-mail confirmation token (the secret of the
	// link e-mailed to an account's address); never a bearer credential.
	ConfirmPrefix = "svc_confirm_"
)

// keyRandomChars is the length of a key's random part (base62, ~226 bits).
const keyRandomChars = 38

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// Hasher hashes keys and tokens under the server's secret. While the secret
// is being rotated it also knows the previous ones: hashes made under them
// can still be looked up (PreviousHashes) and signatures still verify.
type Hasher struct {
	secret   []byte
	previous [][]byte
}

// NewHasher keys the hasher with the current server secret and any previous
// ones (PAYGATE_SECRET_KEY_PREVIOUS); empty ones are ignored.
func NewHasher(secret string, previous ...string) *Hasher {
	h := &Hasher{secret: []byte(secret)}
	for _, p := range previous {
		if p != "" && p != secret {
			h.previous = append(h.previous, []byte(p))
		}
	}
	return h
}

// Hash returns the hex HMAC-SHA256 of a key or token under the current
// secret; look-ups go by it.
func (h *Hasher) Hash(token string) string { return hashUnder(h.secret, token) }

// PreviousHashes returns the token's hashes under each previous secret, for
// a look-up that missed under the current one (the row is then re-hashed).
func (h *Hasher) PreviousHashes(token string) []string {
	out := make([]string, 0, len(h.previous))
	for _, p := range h.previous {
		out = append(out, hashUnder(p, token))
	}
	return out
}

func hashUnder(secret []byte, token string) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(token))
	return hex.EncodeToString(m.Sum(nil))
}

// Sign returns an HMAC-SHA256 over data under a purpose-specific key, so
// signatures for one purpose (quote tokens, say) never verify for another.
func (h *Hasher) Sign(purpose string, data []byte) []byte { return signUnder(h.secret, purpose, data) }

// Verify reports whether mac is Sign(purpose, data) under the current or a
// previous secret, in constant time for each.
func (h *Hasher) Verify(purpose string, data, mac []byte) bool {
	ok := hmac.Equal(mac, signUnder(h.secret, purpose, data))
	for _, p := range h.previous {
		ok = hmac.Equal(mac, signUnder(p, purpose, data)) || ok
	}
	return ok
}

func signUnder(secret []byte, purpose string, data []byte) []byte {
	k := hmac.New(sha256.New, secret)
	k.Write([]byte("paygate/" + purpose))
	m := hmac.New(sha256.New, k.Sum(nil))
	m.Write(data)
	return m.Sum(nil)
}

// GeneratedKey is a new API key: the full secret (shown once) and the parts
// kept for the masked listing.
type GeneratedKey struct {
	Full   string
	Prefix string // type prefix plus the next four characters
	Suffix string // last four characters
}

// GenerateAPIKey makes a key of the given type ("test" or "live").
func GenerateAPIKey(keyType string) (GeneratedKey, error) {
	prefix := TestKeyPrefix
	if keyType == "live" {
		prefix = LiveKeyPrefix
	} else if keyType != "test" {
		return GeneratedKey{}, fmt.Errorf("auth: unknown key type %q", keyType)
	}
	r, err := randomBase62(keyRandomChars)
	if err != nil {
		return GeneratedKey{}, err
	}
	full := prefix + r
	return GeneratedKey{Full: full, Prefix: prefix + r[:4], Suffix: r[len(r)-4:]}, nil
}

// GenerateSessionToken makes a dashboard session token.
func GenerateSessionToken() (string, error) {
	r, err := randomBase62(43)
	if err != nil {
		return "", err
	}
	return SessionPrefix + r, nil
}

// GenerateResetToken makes a password-reset token (the secret of the
// link e-mailed to a merchant).
func GenerateResetToken() (string, error) {
	r, err := randomBase62(43)
	if err != nil {
		return "", err
	}
	return ResetPrefix + r, nil
}

// GenerateConfirmToken makes an e-mail confirmation token.
func GenerateConfirmToken() (string, error) {
	r, err := randomBase62(43)
	if err != nil {
		return "", err
	}
	return ConfirmPrefix + r, nil
}

func randomBase62(n int) (string, error) {
	var sb strings.Builder
	max := big.NewInt(int64(len(base62)))
	for i := 0; i < n; i++ {
		v, err := rand.Int(rand.Reader, max)
		if err != nil {
			return "", err
		}
		sb.WriteByte(base62[v.Int64()])
	}
	return sb.String(), nil
}

// KeyType tells which kind of credential a bearer token claims to be:
// "test", "live", "session" or "" for anything else.
func KeyType(token string) string {
	switch {
	case strings.HasPrefix(token, TestKeyPrefix):
		return "test"
	case strings.HasPrefix(token, LiveKeyPrefix):
		return "live"
	case strings.HasPrefix(token, SessionPrefix):
		return "session"
	}
	return ""
}

// argon2id parameters: OWASP's minimum recommendation (19 MiB, 2 passes).
const (
	argonTime    = 2
	argonMemory  = 19 * 1024
	argonThreads = 1
	argonKeyLen  = 32
)

// HashPassword hashes a password with argon2id and a random salt, in the
// PHC string format.
func HashPassword(password string) (string, error) {
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	sum := argon2.IDKey([]byte(password), salt, argonTime, argonMemory, argonThreads, argonKeyLen)
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, argonMemory, argonTime, argonThreads,
		base64.RawStdEncoding.EncodeToString(salt), base64.RawStdEncoding.EncodeToString(sum)), nil
}

// ErrPasswordMismatch reports a wrong password.
var ErrPasswordMismatch = errors.New("auth: password does not match")

// CheckPassword compares a password with a hash from HashPassword in
// constant time.
func CheckPassword(hash, password string) error {
	parts := strings.Split(hash, "$")
	if len(parts) != 6 || parts[1] != "argon2id" {
		return errors.New("auth: unknown password hash format")
	}
	var mem, t uint32
	var p uint8
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &mem, &t, &p); err != nil {
		return fmt.Errorf("auth: bad password hash parameters: %w", err)
	}
	salt, err := base64.RawStdEncoding.DecodeString(parts[4])
	if err != nil {
		return err
	}
	want, err := base64.RawStdEncoding.DecodeString(parts[5])
	if err != nil {
		return err
	}
	got := argon2.IDKey([]byte(password), salt, t, mem, p, uint32(len(want)))
	if subtle.ConstantTimeCompare(got, want) != 1 {
		return ErrPasswordMismatch
	}
	return nil
}

// dummyHash is compared against when an e-mail is unknown, so a login for a
// missing account takes as long as one with a wrong password.
var dummyHash, _ = HashPassword("paygate-dummy-password")

// BurnPasswordCheck spends the time of one password check.
func BurnPasswordCheck(password string) { _ = CheckPassword(dummyHash, password) }
