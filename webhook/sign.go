// Package webhook signs webhook deliveries the Standard Webhooks way and sends
// them over HTTP with guards against server-side request forgery.
//
// Signing: every delivery carries three headers, webhook-id (the delivery id,
// stable across attempts), webhook-timestamp (Unix seconds of the attempt) and
// webhook-signature ("v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">"),
// keyed by the base64-decoded part of the endpoint's whsec_ secret. Any
// Standard Webhooks library verifies them.
//
// Sending: ValidateEndpointURL checks a URL when an endpoint is registered,
// and Sender re-checks every resolved address when it dials, so a name that
// later resolves to a private address is still refused.
package webhook

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Header names defined by the Standard Webhooks specification.
const (
	// HeaderID carries the delivery id; receivers use it to drop duplicates.
	HeaderID = "webhook-id"
	// HeaderTimestamp carries the attempt's Unix time in seconds.
	HeaderTimestamp = "webhook-timestamp"
	// HeaderSignature carries one or more space-separated "v1,<base64>" signatures.
	HeaderSignature = "webhook-signature"
)

// SecretPrefix starts every endpoint secret.
const SecretPrefix = "whsec_"

// secretBytes is the size of the random key inside a new secret.
const secretBytes = 32

// DefaultTolerance is the timestamp tolerance receivers usually apply (the
// reference libraries use five minutes).
const DefaultTolerance = 5 * time.Minute

// Errors returned by Sign and Verify. Verify's errors all wrap
// ErrVerification, so a caller can test for any verification failure at once.
var (
	// ErrInvalidSecret: the secret is empty or not base64 after its prefix.
	ErrInvalidSecret = errors.New("webhook: invalid secret")
	// ErrVerification is wrapped by every Verify failure.
	ErrVerification = errors.New("webhook: verification failed")
	// ErrMissingHeaders: one of the three signature headers is absent.
	ErrMissingHeaders = fmt.Errorf("%w: missing required headers", ErrVerification)
	// ErrInvalidTimestamp: webhook-timestamp is not an integer.
	ErrInvalidTimestamp = fmt.Errorf("%w: invalid timestamp", ErrVerification)
	// ErrTimestampOutOfTolerance: the timestamp is too old or too far in the future.
	ErrTimestampOutOfTolerance = fmt.Errorf("%w: timestamp outside tolerance", ErrVerification)
	// ErrNoMatchingSignature: no v1 signature in the header matches the body.
	ErrNoMatchingSignature = fmt.Errorf("%w: no matching signature", ErrVerification)
)

// NewSecret returns a fresh endpoint secret: "whsec_" followed by the
// standard base64 encoding of 32 random bytes.
func NewSecret() (string, error) {
	key := make([]byte, secretBytes)
	if _, err := rand.Read(key); err != nil {
		return "", fmt.Errorf("webhook: generate secret: %w", err)
	}
	return SecretPrefix + base64.StdEncoding.EncodeToString(key), nil
}

// secretKey decodes the HMAC key of a secret. The whsec_ prefix is optional,
// as in the reference libraries.
func secretKey(secret string) ([]byte, error) {
	raw := strings.TrimPrefix(secret, SecretPrefix)
	key, err := base64.StdEncoding.DecodeString(raw)
	if err != nil || len(key) == 0 {
		return nil, ErrInvalidSecret
	}
	return key, nil
}

// signature computes the raw HMAC-SHA256 of "{id}.{timestamp}.{body}".
func signature(key []byte, msgID string, unix int64, body []byte) []byte {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(msgID))
	mac.Write([]byte{'.'})
	mac.Write([]byte(strconv.FormatInt(unix, 10)))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return mac.Sum(nil)
}

// Sign returns the webhook-signature header value for one attempt:
// "v1,<base64 HMAC-SHA256 of "{msgID}.{unix seconds of ts}.{body}">".
func Sign(secret, msgID string, ts time.Time, body []byte) (string, error) {
	key, err := secretKey(secret)
	if err != nil {
		return "", err
	}
	return "v1," + base64.StdEncoding.EncodeToString(signature(key, msgID, ts.Unix(), body)), nil
}

// Verify checks a received delivery: the three headers are present, the
// timestamp is within tolerance of now (either side), and one of the v1
// signatures matches the body. Signatures are compared in constant time.
// Receivers should pass the raw body exactly as received.
func Verify(secret string, headers http.Header, body []byte, tolerance time.Duration, now time.Time) error {
	key, err := secretKey(secret)
	if err != nil {
		return err
	}
	msgID := headers.Get(HeaderID)
	tsHeader := headers.Get(HeaderTimestamp)
	sigHeader := headers.Get(HeaderSignature)
	if msgID == "" || tsHeader == "" || sigHeader == "" {
		return ErrMissingHeaders
	}
	// The header is signed as sent: only plain digits, so "+0170…" cannot
	// stand for the timestamp that was signed.
	unix, err := strconv.ParseInt(tsHeader, 10, 64)
	if err != nil || unix < 0 || strconv.FormatInt(unix, 10) != tsHeader {
		return ErrInvalidTimestamp
	}
	ts := time.Unix(unix, 0)
	if now.Sub(ts) > tolerance || ts.Sub(now) > tolerance {
		return ErrTimestampOutOfTolerance
	}
	want := signature(key, msgID, unix, body)
	for _, versioned := range strings.Fields(sigHeader) {
		version, encoded, ok := strings.Cut(versioned, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(encoded)
		if err != nil {
			continue
		}
		if subtle.ConstantTimeCompare(got, want) == 1 {
			return nil
		}
	}
	return ErrNoMatchingSignature
}
