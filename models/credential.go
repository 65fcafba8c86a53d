package models

import (
	"context"

	"gorm.io/gorm"

	"github.com/paygate/paygate/apperr"
)

// Credential is the API key or dashboard session a request was admitted
// with (one of the two ids set).
type Credential struct {
	KeyID, SessionID string
}

type credentialKey struct{}

// WithCredential notes on ctx the credential its request was admitted
// with; the store's checked writes (lockMerchant) check it still holds
// once they hold the merchant's lock.
func WithCredential(ctx context.Context, c Credential) context.Context {
	return context.WithValue(ctx, credentialKey{}, c)
}

// ErrCredentialEnded is the answer to a write whose credential was
// revoked (a password reset, a sign-out, a replaced key) after the request
// was admitted and before the write: it changes nothing.
var ErrCredentialEnded = apperr.New(apperr.ErrUnauthorized,
	"the credential this request was sent with ended meanwhile (signed out, or the key replaced); nothing was changed")

// credentialHolds checks, in tx, that the credential on tx's context (if
// any) is still an unrevoked, unexpired one of merchantID. Under the
// merchant's row lock (PostgreSQL; SQLite has one writer, its transactions
// immediate) it sees every revocation committed before.
func (s *Store) credentialHolds(tx *gorm.DB, merchantID string) error {
	c, _ := tx.Statement.Context.Value(credentialKey{}).(Credential)
	var n int64
	switch {
	case c.SessionID != "":
		if err := tx.Model(&DashboardSession{}).Where("id = ? AND merchant_id = ? AND revoked_at IS NULL AND expires_at > ?",
			c.SessionID, merchantID, s.Now()).Count(&n).Error; err != nil {
			return err
		}
	case c.KeyID != "":
		if err := tx.Model(&APIKey{}).Where("id = ? AND merchant_id = ? AND revoked_at IS NULL", c.KeyID, merchantID).
			Count(&n).Error; err != nil {
			return err
		}
	default:
		return nil
	}
	if n == 0 {
		return ErrCredentialEnded
	}
	return nil
}
