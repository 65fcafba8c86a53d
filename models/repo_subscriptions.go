package models

import (
	"context"
	"fmt"

	"github.com/paygate/paygate/apperr"
	"gorm.io/gorm"
)

// CreateSubscription stores a subscription (the subscription workflow's
// entry point; tests use it directly).
func (s *Store) CreateSubscription(ctx context.Context, sub *Subscription) error {
	now := s.Now()
	sub.ID, sub.CreatedAt, sub.UpdatedAt = NewID(), now, now
	return s.ctx(ctx).Create(sub).Error
}

// Subscriptions lists a page of the scope's subscriptions, newest first,
// optionally of one status.
func (s *Store) Subscriptions(ctx context.Context, sc Scope, status string, p Page) ([]Subscription, bool, error) {
	return fetchPage[Subscription](equal(s.scoped(ctx, sc), "status", status), p)
}

// Subscription loads one of the scope's subscriptions.
func (s *Store) Subscription(ctx context.Context, sc Scope, id string) (*Subscription, error) {
	var sub Subscription
	err := s.scoped(ctx, sc).Where("id = ?", id).Take(&sub).Error
	return &sub, notFound(err)
}

// Subscription actions of PATCH /api/subscriptions.
const (
	ActionCancel = "cancel"
	ActionPause  = "pause"
	ActionResume = "resume"
)

// ApplySubscriptionAction cancels at period end, pauses an active
// subscription or resumes a paused one. The check and the write are one
// conditional update, so two racing requests cannot both move it.
func (s *Store) ApplySubscriptionAction(ctx context.Context, sc Scope, id, action string) (*Subscription, error) {
	var out Subscription
	err := s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Where("merchant_id = ? AND mode = ? AND id = ?", sc.MerchantID, sc.Mode, id).Take(&out).Error; err != nil {
			return notFound(err)
		}
		var from, to string
		fields := map[string]any{"updated_at": s.Now()}
		switch action {
		case ActionCancel:
			if out.Status == SubCanceled {
				return apperr.Invalid("action", "the subscription is already canceled")
			}
			fields["cancel_at_period_end"] = true
		case ActionPause:
			from, to = SubActive, SubPaused
		case ActionResume:
			from, to = SubPaused, SubActive
		default:
			return apperr.Invalid("action", "must be one of cancel, pause, resume")
		}
		q := tx.Model(&Subscription{}).Where("id = ?", id)
		if from != "" {
			if out.Status != from {
				return apperr.Invalid("action", fmt.Sprintf("cannot %s a subscription that is %s", action, out.Status))
			}
			fields["status"] = to
			q = q.Where("status = ?", from)
		}
		res := q.Updates(fields)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return apperr.Conflict("the subscription changed meanwhile; read it and try again")
		}
		return tx.Where("id = ?", id).Take(&out).Error
	})
	if err != nil {
		return nil, err
	}
	return &out, nil
}
