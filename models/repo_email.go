package models

import (
	"context"
	"time"

	"gorm.io/gorm"

	"github.com/paygate/paygate/apperr"
)

// An account's e-mail address is typed at sign-up by whoever signs up: it
// proves nothing until a link sent there is opened by the account's
// signed-in holder (ConfirmEmail), or a password is set from a reset link
// sent there (ResetPassword). The second proves the reader of the mailbox
// but not that they made the account: a stranger may have signed up with
// the address first, so what the account was given before is taken back
// (reclaim).

// CreateEmailConfirmation stores a confirmation link for the merchant's
// address email, valid for ttl, and ends its earlier unused ones (only the
// latest link e-mailed works), unless the merchant was sent perHour links in
// the past hour already: then it stores nothing and returns false.
//
// current is the account's address as the caller read it (ErrAddressChanged
// if it is another by now): email itself for a confirmation, the address
// being replaced for a change's link. A confirmation link read for the old
// address and stored after a change would, opened, change it back.
func (s *Store) CreateEmailConfirmation(ctx context.Context, merchantID, current, email, tokenHash string, ttl time.Duration, perHour int) (bool, error) {
	return s.createLatestLink(ctx, &EmailConfirmation{}, merchantID, current, perHour, func(tx *gorm.DB, now time.Time) error {
		return tx.Create(&EmailConfirmation{ID: NewID(), MerchantID: merchantID, Email: email, TokenHash: tokenHash,
			ExpiresAt: now.Add(ttl), CreatedAt: now}).Error
	})
}

// EmailConfirmationByHash finds an unused, unexpired confirmation link by
// its token's hash.
func (s *Store) EmailConfirmationByHash(ctx context.Context, hash string) (*EmailConfirmation, error) {
	var c EmailConfirmation
	err := s.ctx(ctx).Where("token_hash = ? AND used_at IS NULL AND expires_at > ?", hash, s.Now()).Take(&c).Error
	return &c, notFound(err)
}

// EmailConfirmationEverByHash finds a confirmation link by its token's
// hash, used, ended or expired too (to tell a link used twice from one
// that never worked).
func (s *Store) EmailConfirmationEverByHash(ctx context.Context, hash string) (*EmailConfirmation, error) {
	var c EmailConfirmation
	err := s.ctx(ctx).Where("token_hash = ?", hash).Take(&c).Error
	return &c, notFound(err)
}

// RehashEmailConfirmation does for a confirmation link what RehashAPIKey
// does for a key.
func (s *Store) RehashEmailConfirmation(ctx context.Context, id, oldHash, newHash string) error {
	return s.ctx(ctx).Model(&EmailConfirmation{}).Where("id = ? AND token_hash = ?", id, oldHash).Update("token_hash", newHash).Error
}

// ConfirmEmail uses the confirmation link id for merchantID (the signed-in
// account opening it): the merchant's address is confirmed, if it is still
// the one the link was sent to, and its other links end, all or nothing. A
// link used, ended, expired, sent to another address or belonging to
// another account is not found (apperr.ErrNotFound) and changes nothing.
func (s *Store) ConfirmEmail(ctx context.Context, merchantID, confirmationID string) (*Merchant, error) {
	var m Merchant
	previous := ""
	err := s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		now := s.Now()
		var c EmailConfirmation
		if err := tx.Where("id = ? AND merchant_id = ?", confirmationID, merchantID).Take(&c).Error; err != nil {
			return notFound(err)
		}
		// The merchant's row lock before the links' rows, in
		// ResetPassword's order.
		if err := s.lockMerchant(tx, merchantID); err != nil {
			return err
		}
		res := tx.Model(&EmailConfirmation{}).Where("id = ? AND used_at IS NULL AND expires_at > ?", c.ID, now).Update("used_at", now)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected != 1 {
			return apperr.NotFound()
		}
		var cur Merchant
		if err := tx.Select("id", "email").Where("id = ?", merchantID).Take(&cur).Error; err != nil {
			return err
		}
		if cur.Email != c.Email {
			// A link sent to another address is a change of address
			// (RequestEmailChange): opened by the account, it proves the new
			// address, which becomes the account's, confirmed.
			if err := changeEmail(tx, merchantID, c.Email, now); err != nil {
				return err
			}
			previous = cur.Email
		} else {
			res = tx.Model(&Merchant{}).Where("id = ? AND email = ? AND email_confirmed_at IS NULL", merchantID, c.Email).
				Updates(map[string]any{"email_confirmed_at": now, "updated_at": now})
			if res.Error != nil {
				return res.Error
			}
			if res.RowsAffected != 1 {
				return apperr.NotFound()
			}
		}
		if err := endConfirmations(tx, merchantID, now); err != nil {
			return err
		}
		return tx.Where("id = ?", merchantID).Take(&m).Error
	})
	if err != nil {
		return nil, err
	}
	m.PreviousEmail = previous
	return &m, nil
}

// errEmailTaken: another account has the address.
func errEmailTaken(email string) error {
	return apperr.WithHint(apperr.ErrConflict, "another account uses "+email,
		"an address belongs to one account; sign in to that one, or choose another address")
}

// changeEmail makes email the merchant's address, confirmed (inside the
// merchant's row lock), unless another account has it.
func changeEmail(tx *gorm.DB, merchantID, email string, now time.Time) error {
	if taken, err := emailTaken(tx, merchantID, email); err != nil || taken {
		if err == nil {
			err = errEmailTaken(email)
		}
		return err
	}
	err := tx.Model(&Merchant{}).Where("id = ?", merchantID).
		Updates(map[string]any{"email": email, "email_confirmed_at": now, "updated_at": now}).Error
	if isUniqueViolation(err) { // signed up with it since the count
		return errEmailTaken(email)
	}
	if err != nil {
		return err
	}
	// Reset links went to the old address: its reader must not take the
	// account back with one (the owner may be leaving a lost mailbox).
	return endLinks(tx, &PasswordReset{}, merchantID, now)
}

// EmailTaken reports whether an account other than merchantID has email.
func (s *Store) EmailTaken(ctx context.Context, merchantID, email string) (bool, error) {
	return emailTaken(s.ctx(ctx), merchantID, email)
}

func emailTaken(db *gorm.DB, merchantID, email string) (bool, error) {
	var n int64
	err := db.Model(&Merchant{}).Where("email = ? AND id <> ?", email, merchantID).Count(&n).Error
	return n > 0, err
}

// endConfirmations marks the merchant's unused confirmation links used.
func endConfirmations(tx *gorm.DB, merchantID string, now time.Time) error {
	return endLinks(tx, &EmailConfirmation{}, merchantID, now)
}

// Reclaimed is what a password reset took back from an account whose
// address was not confirmed: whoever signed up with it may not be the
// address's owner, who now holds the account.
type Reclaimed struct {
	// KeysRevoked counts the API keys revoked, EndpointsRemoved the webhook
	// endpoints removed, ProofsWithdrawn the wallet proofs withdrawn.
	KeysRevoked, EndpointsRemoved, ProofsWithdrawn int64
	// WalletsCleared: a default receiving wallet or an embedding origin
	// was set and is no more.
	WalletsCleared bool
	// KYBWithdrawn: a pending application was withdrawn.
	KYBWithdrawn bool
}

// Any reports whether anything was taken back.
func (r Reclaimed) Any() bool {
	return r.KeysRevoked > 0 || r.EndpointsRemoved > 0 || r.ProofsWithdrawn > 0 || r.WalletsCleared || r.KYBWithdrawn
}

// reclaim takes back, in tx, what an unconfirmed account was given that
// reaches its owner's money or data from outside once they hold it: its
// API keys, its webhook endpoints (their pending deliveries fail), its
// default receiving wallets and their proofs, the origins that may frame
// its pages, and a pending KYB application (a rejected one stays, with the
// operator's note: the mailbox's owner may be who was rejected). Test-mode
// records (links, customers, sessions) stay: they move no money.
func reclaim(tx *gorm.DB, m *Merchant, now time.Time) (Reclaimed, error) {
	var r Reclaimed
	res := tx.Model(&APIKey{}).Where("merchant_id = ? AND revoked_at IS NULL", m.ID).Update("revoked_at", now)
	if res.Error != nil {
		return r, res.Error
	}
	r.KeysRevoked = res.RowsAffected
	var endpoints []string
	if err := tx.Model(&WebhookEndpoint{}).Where("merchant_id = ?", m.ID).Pluck("id", &endpoints).Error; err != nil {
		return r, err
	}
	if len(endpoints) > 0 {
		if err := tx.Model(&WebhookDelivery{}).Where("endpoint_id IN ? AND status = ?", endpoints, DeliveryPending).
			Updates(map[string]any{"status": DeliveryFailed, "updated_at": now}).Error; err != nil {
			return r, err
		}
		res = tx.Where("merchant_id = ?", m.ID).Delete(&WebhookEndpoint{})
		if res.Error != nil {
			return r, res.Error
		}
		r.EndpointsRemoved = res.RowsAffected
	}
	res = tx.Where("merchant_id = ?", m.ID).Delete(&WalletProof{})
	if res.Error != nil {
		return r, res.Error
	}
	r.ProofsWithdrawn = res.RowsAffected
	if m.WalletEVM != "" || m.WalletSolana != "" || len(m.EmbedOrigins) > 0 {
		r.WalletsCleared = true
		if err := tx.Model(&Merchant{}).Where("id = ?", m.ID).Updates(map[string]any{"wallet_evm": "", "wallet_solana": "",
			"embed_origins": StringList{}, "updated_at": now}).Error; err != nil {
			return r, err
		}
	}
	if m.KYBStatus == KYBPending {
		if err := tx.Where("merchant_id = ? AND status = ?", m.ID, KYBPending).Delete(&KYBApplication{}).Error; err != nil {
			return r, err
		}
		if err := tx.Model(&Merchant{}).Where("id = ?", m.ID).Updates(map[string]any{"kyb_status": KYBNone, "updated_at": now}).Error; err != nil {
			return r, err
		}
		r.KYBWithdrawn = true
	}
	return r, nil
}

// EmailConfirmationAllowedAt is when the merchant may be sent another
// confirmation link, perHour being the most an hour: an hour after the
// oldest of the last perHour links (now, or earlier, when fewer were sent).
func (s *Store) EmailConfirmationAllowedAt(ctx context.Context, merchantID string, perHour int) (time.Time, error) {
	var at []time.Time
	if err := s.ctx(ctx).Model(&EmailConfirmation{}).Where("merchant_id = ?", merchantID).Order("created_at desc").
		Offset(perHour-1).Limit(1).Pluck("created_at", &at).Error; err != nil {
		return time.Time{}, err
	}
	if len(at) == 0 {
		return s.Now(), nil
	}
	return at[0].Add(time.Hour), nil
}
