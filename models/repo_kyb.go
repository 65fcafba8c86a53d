package models

import (
	"context"
	"fmt"
	"strconv"

	"github.com/paygate/paygate/apperr"
	"gorm.io/gorm"
)

// SubmitKYB stores the merchant's one application; a second is a conflict.
func (s *Store) SubmitKYB(ctx context.Context, app *KYBApplication) error {
	return s.submitKYB(ctx, app, false)
}

// ErrEmailUnconfirmed refuses what needs the account's address confirmed.
var ErrEmailUnconfirmed = apperr.WithHint(apperr.ErrForbidden, "confirm the account's e-mail address before submitting the KYB application",
	"open the link e-mailed to the account's address while signed in, or ask for a new one (POST /api/auth/email-confirmation)")

// SubmitConfirmedKYB is SubmitKYB for an account whose address must be
// confirmed (a server that confirms addresses): checked under the
// merchant's row lock, with the request's credential, so that an
// application admitted before a reset took the account back is not filed
// after it (ErrEmailUnconfirmed, or ErrCredentialEnded).
func (s *Store) SubmitConfirmedKYB(ctx context.Context, app *KYBApplication) error {
	return s.submitKYB(ctx, app, true)
}

func (s *Store) submitKYB(ctx context.Context, app *KYBApplication, confirmed bool) error {
	now := s.Now()
	app.ID, app.Status, app.SubmittedAt, app.UpdatedAt = NewID(), KYBPending, now, now
	return s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		if err := s.lockMerchant(tx, app.MerchantID); err != nil {
			return err
		}
		if confirmed {
			var m Merchant
			if err := tx.Select("email_confirmed_at").Where("id = ?", app.MerchantID).Take(&m).Error; err != nil {
				return notFound(err)
			}
			if m.EmailConfirmedAt == nil {
				return ErrEmailUnconfirmed
			}
		}
		if err := tx.Create(app).Error; err != nil {
			if isUniqueViolation(err) {
				return apperr.Conflict("a KYB application was already submitted")
			}
			return err
		}
		return tx.Model(&Merchant{}).Where("id = ?", app.MerchantID).
			Updates(map[string]any{"kyb_status": KYBPending, "updated_at": now}).Error
	})
}

// KYB loads the merchant's application.
func (s *Store) KYB(ctx context.Context, merchantID string) (*KYBApplication, error) {
	var app KYBApplication
	err := s.ctx(ctx).Where("merchant_id = ?", merchantID).Take(&app).Error
	return &app, notFound(err)
}

// UpdateKYB changes fields of a pending application; fields maps column
// names to values. A reviewed application is a conflict.
func (s *Store) UpdateKYB(ctx context.Context, merchantID string, fields map[string]any) (*KYBApplication, error) {
	err := s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		if err := s.lockMerchant(tx, merchantID); err != nil {
			return err
		}
		var app KYBApplication
		if err := tx.Where("merchant_id = ?", merchantID).Take(&app).Error; err != nil {
			return notFound(err)
		}
		if app.Status != KYBPending {
			return apperr.Conflict(fmt.Sprintf("the application was already %s and can no longer be changed", app.Status))
		}
		if len(fields) == 0 {
			return nil
		}
		fields["updated_at"] = s.Now()
		res := tx.Model(&KYBApplication{}).Where("id = ? AND status = ?", app.ID, KYBPending).Updates(fields)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return apperr.Conflict("the application was reviewed meanwhile and can no longer be changed")
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s.KYB(ctx, merchantID)
}

// ReviewKYB records an operator's decision on a pending application, updates
// the merchant's status and stores the notification, in one transaction.
//
// revision, when given, is the application's Revision as the operator read
// it: one edited since (the merchant may edit a pending application) is a
// 409 and nothing is decided; an approval applied to whatever the
// application said at that moment, not to what was reviewed.
func (s *Store) ReviewKYB(ctx context.Context, merchantID string, approve bool, note, revision string, notice *Notification) (*KYBApplication, error) {
	status := KYBRejected
	if approve {
		status = KYBApproved
	}
	now := s.Now()
	err := s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		// The merchant's row first, in ResetPassword's order (it withdraws
		// a pending application under that lock).
		if err := s.lockMerchant(tx, merchantID); err != nil {
			return err
		}
		var app KYBApplication
		if err := tx.Where("merchant_id = ?", merchantID).Take(&app).Error; err != nil {
			return notFound(err)
		}
		if app.Status != KYBPending {
			return apperr.Conflict(fmt.Sprintf("the application is already %s", app.Status))
		}
		if revision != "" && revision != app.Revision() {
			return apperr.Conflict(fmt.Sprintf("the application was edited since revision %s (it is at %s now); read it again", revision, app.Revision()))
		}
		res := tx.Model(&KYBApplication{}).Where("id = ? AND status = ?", app.ID, KYBPending).
			Updates(map[string]any{"status": status, "review_note": note, "reviewed_at": now, "updated_at": now})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return apperr.Conflict("the application was reviewed meanwhile")
		}
		if err := tx.Model(&Merchant{}).Where("id = ?", merchantID).
			Updates(map[string]any{"kyb_status": status, "updated_at": now}).Error; err != nil {
			return err
		}
		notice.ID, notice.MerchantID, notice.CreatedAt = NewID(), merchantID, now
		return tx.Create(notice).Error
	})
	if err != nil {
		return nil, err
	}
	return s.KYB(ctx, merchantID)
}

// MarkNotificationEmailed records that a notification went out by e-mail.
func (s *Store) MarkNotificationEmailed(ctx context.Context, id string) error {
	return s.ctx(ctx).Model(&Notification{}).Where("id = ?", id).Update("emailed_at", s.Now()).Error
}

// Notifications lists a merchant's notifications, newest first.
func (s *Store) Notifications(ctx context.Context, merchantID string) ([]Notification, error) {
	var out []Notification
	err := s.ctx(ctx).Where("merchant_id = ?", merchantID).Order("id desc").Find(&out).Error
	return out, err
}

// Revision names the application as it stands: it changes with every edit
// (its update time, to the microsecond both stores keep).
func (a *KYBApplication) Revision() string {
	return strconv.FormatInt(a.UpdatedAt.UnixMicro(), 36)
}
