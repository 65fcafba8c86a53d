package models

import (
	"context"
	"time"

	"gorm.io/gorm"

	"github.com/paygate/paygate/apperr"
)

// A merchant's password and dashboard sessions: changing the password,
// signing out the other sessions, and the e-mailed reset link.

// ErrPasswordChanged reports that the password changed between its check
// and the write of the new one (another session changed it meanwhile).
var ErrPasswordChanged = apperr.Conflict("the password was changed meanwhile; sign in again with the new one")

// ChangePassword replaces the merchant's password hash, from oldHash (the
// one the current password was checked against) to newHash, signs out every
// other dashboard session of the merchant (all but keepSessionID) and ends
// its unused reset links, all or nothing. It returns how many sessions it
// signed out.
func (s *Store) ChangePassword(ctx context.Context, merchantID, oldHash, newHash, keepSessionID string) (int64, error) {
	var revoked int64
	err := s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		now := s.Now()
		res := tx.Model(&Merchant{}).Where("id = ? AND password_hash = ?", merchantID, oldHash).
			Updates(map[string]any{"password_hash": newHash, "updated_at": now})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected != 1 {
			return ErrPasswordChanged
		}
		n, err := revokeSessions(tx, merchantID, keepSessionID, now)
		if err != nil {
			return err
		}
		revoked = n
		return endResets(tx, merchantID, now)
	})
	return revoked, err
}

// RevokeOtherDashboardSessions signs out every dashboard session of the
// merchant but keepSessionID, and returns how many it signed out.
func (s *Store) RevokeOtherDashboardSessions(ctx context.Context, merchantID, keepSessionID string) (int64, error) {
	return revokeSessions(s.ctx(ctx), merchantID, keepSessionID, s.Now())
}

// maxListedSessions bounds the account's list of sessions (the newest).
const maxListedSessions = 100

// OpenDashboardSessions lists the merchant's signed-in sessions (not
// revoked, not expired), the newest first, at most maxListedSessions.
func (s *Store) OpenDashboardSessions(ctx context.Context, merchantID string) ([]DashboardSession, error) {
	var out []DashboardSession
	err := s.ctx(ctx).Where("merchant_id = ? AND revoked_at IS NULL AND expires_at > ?", merchantID, s.Now()).
		Order("created_at DESC, id DESC").Limit(maxListedSessions).Find(&out).Error
	return out, err
}

// RevokeOwnDashboardSession signs out one of the merchant's open sessions;
// another merchant's, an unknown or an ended one is not found.
func (s *Store) RevokeOwnDashboardSession(ctx context.Context, merchantID, id string) error {
	now := s.Now()
	res := s.ctx(ctx).Model(&DashboardSession{}).Where("id = ? AND merchant_id = ? AND revoked_at IS NULL AND expires_at > ?", id, merchantID, now).
		Update("revoked_at", now)
	if res.Error != nil {
		return res.Error
	}
	if res.RowsAffected == 0 {
		return apperr.NotFound()
	}
	return nil
}

// revokeSessions signs out the merchant's open sessions but keep ("" for
// all of them).
func revokeSessions(tx *gorm.DB, merchantID, keep string, now time.Time) (int64, error) {
	q := tx.Model(&DashboardSession{}).Where("merchant_id = ? AND revoked_at IS NULL AND expires_at > ?", merchantID, now)
	if keep != "" {
		q = q.Where("id <> ?", keep)
	}
	res := q.Update("revoked_at", now)
	return res.RowsAffected, res.Error
}

// endResets marks the merchant's unused reset links used.
func endResets(tx *gorm.DB, merchantID string, now time.Time) error {
	return endLinks(tx, &PasswordReset{}, merchantID, now)
}

// endLinks marks the merchant's unused e-mailed links of model's kind
// (PasswordReset, EmailConfirmation) used.
func endLinks(tx *gorm.DB, model any, merchantID string, now time.Time) error {
	return tx.Model(model).Where("merchant_id = ? AND used_at IS NULL", merchantID).Update("used_at", now).Error
}

// CreatePasswordReset stores a reset link for the merchant, valid for ttl,
// and ends its earlier unused ones (only the latest link e-mailed works),
// unless the merchant was sent perHour links in the past hour already: then
// it stores nothing and returns false (a stranger cannot fill a merchant's
// mailbox).
//
// sentTo is the address the link is e-mailed to, as the caller read it: if
// the account's address is another by now (changed meanwhile), nothing is
// stored and the answer is ErrAddressChanged (a link read for the old
// address must not reach its reader after the change).
func (s *Store) CreatePasswordReset(ctx context.Context, merchantID, sentTo, tokenHash string, ttl time.Duration, perHour int) (bool, error) {
	return s.createLatestLink(ctx, &PasswordReset{}, merchantID, sentTo, perHour, func(tx *gorm.DB, now time.Time) error {
		return tx.Create(&PasswordReset{ID: NewID(), MerchantID: merchantID, TokenHash: tokenHash, ExpiresAt: now.Add(ttl), CreatedAt: now}).Error
	})
}

// ErrAddressChanged: the account's e-mail address is no longer the one a
// link was to be sent to (a change was made meanwhile).
var ErrAddressChanged = apperr.Conflict("the account's e-mail address changed meanwhile; ask again")

// createLatestLink stores, with create, an e-mailed link of model's kind
// for the merchant and ends its earlier unused ones, unless perHour of them
// were made in the past hour: then it stores nothing and returns false.
// With sentTo, the account's address must still be it (ErrAddressChanged);
// it is read under the merchant's row lock, which an address change holds,
// so a link is stored before a change (which ends it) or not at all.
func (s *Store) createLatestLink(ctx context.Context, model any, merchantID, sentTo string, perHour int, create func(tx *gorm.DB, now time.Time) error) (bool, error) {
	created := false
	err := s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		now := s.Now()
		var cur Merchant
		if err := s.forUpdate(tx).Select("id", "email").Where("id = ?", merchantID).Take(&cur).Error; err != nil {
			return notFound(err)
		}
		if sentTo != "" && cur.Email != sentTo {
			return ErrAddressChanged
		}
		var recent int64
		if err := tx.Model(model).Where("merchant_id = ? AND created_at > ?", merchantID, now.Add(-time.Hour)).
			Count(&recent).Error; err != nil {
			return err
		}
		if recent >= int64(perHour) {
			return nil
		}
		if err := endLinks(tx, model, merchantID, now); err != nil {
			return err
		}
		created = true
		return create(tx, now)
	})
	return created && err == nil, err
}

// PasswordResetByHash finds an unused, unexpired reset link by its token's
// hash.
func (s *Store) PasswordResetByHash(ctx context.Context, hash string) (*PasswordReset, error) {
	var r PasswordReset
	err := s.ctx(ctx).Where("token_hash = ? AND used_at IS NULL AND expires_at > ?", hash, s.Now()).Take(&r).Error
	return &r, notFound(err)
}

// RehashPasswordReset does for a reset link what RehashAPIKey does for a
// key.
func (s *Store) RehashPasswordReset(ctx context.Context, id, oldHash, newHash string) error {
	return s.ctx(ctx).Model(&PasswordReset{}).Where("id = ? AND token_hash = ?", id, oldHash).Update("token_hash", newHash).Error
}

// ResetPassword uses the reset link id: it sets the merchant's password
// hash, signs out every dashboard session of the merchant and ends its
// other reset links, all or nothing. The link proves its user reads the
// account's mail: an unconfirmed address is confirmed by it, and what the
// account was given before is taken back (reclaim; returned), since whoever
// signed up with the address may not be its owner, unless an operator
// approved the account's KYB application. A link used, ended or
// expired meanwhile is not found (apperr.ErrNotFound) and changes nothing.
func (s *Store) ResetPassword(ctx context.Context, resetID, newHash string) (*Merchant, Reclaimed, error) {
	var m Merchant
	var took Reclaimed
	err := s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		now := s.Now()
		var r PasswordReset
		if err := tx.Where("id = ?", resetID).Take(&r).Error; err != nil {
			return notFound(err)
		}
		// The merchant's row lock first (PostgreSQL), as the checked
		// writes (lockMerchant), a confirmation, a sign-in (SignIn) and a
		// KYB decision take it: each is seen, or waits and then finds its
		// credential or password ended.
		var before Merchant
		if err := s.forUpdate(tx).Where("id = ?", r.MerchantID).Take(&before).Error; err != nil {
			return err
		}
		res := tx.Model(&PasswordReset{}).Where("id = ? AND used_at IS NULL AND expires_at > ?", resetID, now).Update("used_at", now)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected != 1 {
			return apperr.NotFound()
		}
		fields := map[string]any{"password_hash": newHash, "updated_at": now}
		if before.EmailConfirmedAt == nil {
			// An account an operator approved is taken as the address's
			// (as the migration took those approved before confirmations):
			// its live keys, endpoints and wallets are not pulled from
			// under its payments.
			if before.KYBStatus != KYBApproved {
				var err error
				if took, err = reclaim(tx, &before, now); err != nil {
					return err
				}
			}
			fields["email_confirmed_at"] = now
		}
		if err := tx.Model(&Merchant{}).Where("id = ?", r.MerchantID).Updates(fields).Error; err != nil {
			return err
		}
		if _, err := revokeSessions(tx, r.MerchantID, "", now); err != nil {
			return err
		}
		if err := endResets(tx, r.MerchantID, now); err != nil {
			return err
		}
		if err := endConfirmations(tx, r.MerchantID, now); err != nil {
			return err
		}
		return tx.Where("id = ?", r.MerchantID).Take(&m).Error
	})
	if err != nil {
		return nil, Reclaimed{}, err
	}
	return &m, took, nil
}
