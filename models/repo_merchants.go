package models

import (
	"context"
	"errors"
	"time"

	"github.com/paygate/paygate/apperr"
	"gorm.io/gorm"
)

// NewKey is an API key to store: its hash and masked parts (never the key).
type NewKey struct {
	Hash   string
	Prefix string
	Suffix string
	Type   Mode
}

// CreateMerchant stores a new merchant together with its first dashboard
// session and its test key, all or nothing. A taken e-mail is a conflict.
func (s *Store) CreateMerchant(ctx context.Context, m *Merchant, sess *DashboardSession, key NewKey) (*APIKey, error) {
	now := s.Now()
	m.ID, m.CreatedAt, m.UpdatedAt = NewID(), now, now
	if m.KYBStatus == "" {
		m.KYBStatus = KYBNone
	}
	sess.ID, sess.MerchantID, sess.CreatedAt = NewID(), m.ID, now
	k := &APIKey{ID: NewID(), MerchantID: m.ID, KeyType: key.Type, KeyHash: key.Hash,
		KeyPrefix: key.Prefix, KeySuffix: key.Suffix, CreatedAt: now}
	err := s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(m).Error; err != nil {
			if isUniqueViolation(err) {
				return apperr.WithHint(apperr.ErrConflict, "an account with this email already exists",
					"if the address is yours and you do not know the account's password, choose one from the sign-in page's \"Forgot your password\" (POST /api/auth/password-reset)")
			}
			return err
		}
		if err := tx.Create(sess).Error; err != nil {
			return err
		}
		return tx.Create(k).Error
	})
	if err != nil {
		return nil, err
	}
	return k, nil
}

// MerchantByEmail finds a merchant by its sign-in e-mail.
func (s *Store) MerchantByEmail(ctx context.Context, email string) (*Merchant, error) {
	var m Merchant
	err := s.ctx(ctx).Where("email = ?", email).Take(&m).Error
	return &m, notFound(err)
}

// Merchant loads a merchant by id.
func (s *Store) Merchant(ctx context.Context, id string) (*Merchant, error) {
	var m Merchant
	err := s.ctx(ctx).Where("id = ?", id).Take(&m).Error
	return &m, notFound(err)
}

// MerchantUpdate holds the profile fields a merchant may change; nil leaves a
// field as it is.
type MerchantUpdate struct {
	BusinessName *string
	WalletEVM    *string
	WalletSolana *string
	LogoURL      *string
	EmbedOrigins *[]string
}

// UpdateMerchant applies the fields that were sent.
func (s *Store) UpdateMerchant(ctx context.Context, id string, u MerchantUpdate) (*Merchant, error) {
	fields := map[string]any{}
	if u.BusinessName != nil {
		fields["business_name"] = *u.BusinessName
	}
	if u.WalletEVM != nil {
		fields["wallet_evm"] = *u.WalletEVM
	}
	if u.WalletSolana != nil {
		fields["wallet_solana"] = *u.WalletSolana
	}
	if u.LogoURL != nil {
		fields["logo_url"] = *u.LogoURL
	}
	if u.EmbedOrigins != nil {
		fields["embed_origins"] = StringList(*u.EmbedOrigins)
	}
	replaced := ""
	if len(fields) > 0 {
		fields["updated_at"] = s.Now()
		if err := s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
			if err := s.lockMerchant(tx, id); err != nil {
				return err
			}
			if u.LogoURL != nil {
				var was []string
				if err := tx.Model(&Merchant{}).Where("id = ?", id).Pluck("logo_url", &was).Error; err != nil {
					return err
				}
				if len(was) == 1 && was[0] != *u.LogoURL {
					replaced = was[0]
				}
			}
			return tx.Model(&Merchant{}).Where("id = ?", id).Updates(fields).Error
		}); err != nil {
			return nil, err
		}
	}
	m, err := s.Merchant(ctx, id)
	if err == nil {
		m.ReplacedLogoURL = replaced
	}
	return m, err
}

// ImageInUse reports whether one of the merchant's products (any mode,
// archived ones too) or its logo shows the image at url.
func (s *Store) ImageInUse(ctx context.Context, merchantID, url string) (bool, error) {
	var n int64
	if err := s.ctx(ctx).Unscoped().Model(&Product{}).Where("merchant_id = ? AND image_url = ?", merchantID, url).Count(&n).Error; err != nil || n > 0 {
		return n > 0, err
	}
	err := s.ctx(ctx).Model(&Merchant{}).Where("id = ? AND logo_url = ?", merchantID, url).Count(&n).Error
	return n > 0, err
}

// CreateDashboardSession stores a new signed-in session.
func (s *Store) CreateDashboardSession(ctx context.Context, sess *DashboardSession) error {
	sess.ID, sess.CreatedAt = NewID(), s.Now()
	return s.ctx(ctx).Create(sess).Error
}

// SignIn stores a new signed-in session for a password checked against
// checkedHash, under the merchant's row lock: if the password changed
// since (a reset taking the account back, committed while the password was
// checked), nothing is stored and the answer is ErrPasswordChanged; the old
// password opens no session after the reset signed every session out.
func (s *Store) SignIn(ctx context.Context, sess *DashboardSession, checkedHash string) error {
	sess.ID, sess.CreatedAt = NewID(), s.Now()
	return s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		var m Merchant
		if err := s.forUpdate(tx).Select("id", "password_hash").Where("id = ?", sess.MerchantID).Take(&m).Error; err != nil {
			return notFound(err)
		}
		if m.PasswordHash != checkedHash {
			return ErrPasswordChanged
		}
		return tx.Create(sess).Error
	})
}

// DashboardSessionByHash finds an unrevoked, unexpired session by token hash.
func (s *Store) DashboardSessionByHash(ctx context.Context, hash string) (*DashboardSession, error) {
	var sess DashboardSession
	err := s.ctx(ctx).Where("token_hash = ? AND revoked_at IS NULL AND expires_at > ?", hash, s.Now()).Take(&sess).Error
	return &sess, notFound(err)
}

// RevokeDashboardSession ends a session (logout).
func (s *Store) RevokeDashboardSession(ctx context.Context, id string) error {
	now := s.Now()
	return s.ctx(ctx).Model(&DashboardSession{}).Where("id = ? AND revoked_at IS NULL", id).Update("revoked_at", now).Error
}

// ReplaceAPIKey creates the merchant's key of k.Type and revokes the previous
// key of that type in the same transaction: the old key stops working the
// moment the new one exists.
func (s *Store) ReplaceAPIKey(ctx context.Context, merchantID string, k NewKey) (*APIKey, error) {
	now := s.Now()
	key := &APIKey{ID: NewID(), MerchantID: merchantID, KeyType: k.Type, KeyHash: k.Hash,
		KeyPrefix: k.Prefix, KeySuffix: k.Suffix, CreatedAt: now}
	err := s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		if err := s.lockMerchant(tx, merchantID); err != nil {
			return err
		}
		if err := tx.Model(&APIKey{}).
			Where("merchant_id = ? AND key_type = ? AND revoked_at IS NULL", merchantID, k.Type).
			Update("revoked_at", now).Error; err != nil {
			return err
		}
		if err := tx.Create(key).Error; err != nil {
			if isUniqueViolation(err) {
				return apperr.Conflict("a key of this type was created at the same moment; try again")
			}
			return err
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return key, nil
}

// APIKeyByHash finds an unrevoked key by hash.
func (s *Store) APIKeyByHash(ctx context.Context, hash string) (*APIKey, error) {
	var k APIKey
	err := s.ctx(ctx).Where("key_hash = ? AND revoked_at IS NULL", hash).Take(&k).Error
	return &k, notFound(err)
}

// APIKeys lists the merchant's unrevoked keys, live first.
func (s *Store) APIKeys(ctx context.Context, merchantID string) ([]APIKey, error) {
	var keys []APIKey
	err := s.ctx(ctx).Where("merchant_id = ? AND revoked_at IS NULL", merchantID).Order("key_type asc").Find(&keys).Error
	return keys, err
}

// TouchAPIKey records a use of the key, at most once a minute so that a
// busy integration does not turn every read into a write.
func (s *Store) TouchAPIKey(ctx context.Context, id string) error {
	now := s.Now()
	return s.ctx(ctx).Model(&APIKey{}).
		Where("id = ? AND (last_used_at IS NULL OR last_used_at < ?)", id, now.Add(-time.Minute)).
		Update("last_used_at", now).Error
}

// notFound turns GORM's missing-row error into the domain's not-found.
func notFound(err error) error {
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return apperr.NotFound()
	}
	return err
}

// RehashAPIKey replaces a key's hash (found under a previous server secret)
// with its hash under the current one, so the key keeps working once the
// previous secret is dropped.
func (s *Store) RehashAPIKey(ctx context.Context, id, oldHash, newHash string) error {
	return s.ctx(ctx).Model(&APIKey{}).Where("id = ? AND key_hash = ?", id, oldHash).Update("key_hash", newHash).Error
}

// RehashDashboardSession does for a dashboard session what RehashAPIKey
// does for a key.
func (s *Store) RehashDashboardSession(ctx context.Context, id, oldHash, newHash string) error {
	return s.ctx(ctx).Model(&DashboardSession{}).Where("id = ? AND token_hash = ?", id, oldHash).Update("token_hash", newHash).Error
}
