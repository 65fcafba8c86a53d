package models

import (
	"context"
	"errors"
	"time"

	"github.com/paygate/paygate/apperr"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// ErrGone reports a delivery or endpoint that no longer exists.
var ErrGone = errors.New("gone")

// DeliveryTarget is what one delivery attempt sends where.
type DeliveryTarget struct {
	URL    string
	Secret string
	Body   []byte
	Active bool
}

// DeliveryTarget loads a delivery's payload and its endpoint as they are
// now (a rotated secret or a changed URL applies to the next attempt).
func (s *Store) DeliveryTarget(ctx context.Context, deliveryID string) (DeliveryTarget, error) {
	var d WebhookDelivery
	if err := s.ctx(ctx).Where("id = ?", deliveryID).Take(&d).Error; err != nil {
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return DeliveryTarget{}, ErrGone
		}
		return DeliveryTarget{}, err
	}
	var ep WebhookEndpoint
	if err := s.ctx(ctx).Where("id = ?", d.EndpointID).Take(&ep).Error; err != nil {
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return DeliveryTarget{}, ErrGone
		}
		return DeliveryTarget{}, err
	}
	return DeliveryTarget{URL: ep.URL, Secret: ep.Secret, Body: d.Payload, Active: ep.Active}, nil
}

// AttemptRecord is one delivery attempt to store.
type AttemptRecord struct {
	DeliveryID     string
	Attempt        int
	ResponseStatus int
	At             time.Time
	Status         string
	Error          string
}

// RecordDeliveryAttempt stores one attempt, once per (delivery, attempt),
// and moves the delivery's read model: attempts is the highest attempt
// number, status/responseStatus/lastAttemptAt follow the highest attempt,
// and delivered is never downgraded.
func (s *Store) RecordDeliveryAttempt(ctx context.Context, a AttemptRecord) error {
	return s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		var d WebhookDelivery
		if err := tx.Where("id = ?", a.DeliveryID).Take(&d).Error; err != nil {
			if errors.Is(err, gorm.ErrRecordNotFound) {
				return ErrGone
			}
			return err
		}
		var status *int
		if a.ResponseStatus > 0 {
			v := a.ResponseStatus
			status = &v
		}
		at := a.At.UTC()
		row := DeliveryAttempt{DeliveryID: a.DeliveryID, Attempt: a.Attempt, ResponseStatus: status, Error: truncate(a.Error, 500), AttemptedAt: at}
		if err := tx.Clauses(clause.OnConflict{
			Columns:   []clause.Column{{Name: "delivery_id"}, {Name: "attempt"}},
			DoUpdates: clause.AssignmentColumns([]string{"response_status", "error", "attempted_at"}),
		}).Create(&row).Error; err != nil {
			return err
		}
		if a.Attempt < d.Attempts {
			return nil // an older attempt recorded late changes nothing visible
		}
		fields := map[string]any{"attempts": a.Attempt, "response_status": status, "last_attempt_at": at, "updated_at": s.Now()}
		next := a.Status
		if next == DeliveryPending {
			// An attempt that was in flight while its endpoint was deleted
			// must not reopen the delivery: no attempt will follow.
			var live int64
			if err := tx.Model(&WebhookEndpoint{}).Where("id = ?", d.EndpointID).Count(&live).Error; err != nil {
				return err
			}
			if live == 0 {
				next = DeliveryFailed
			}
		}
		if d.Status != DeliveryDelivered {
			fields["status"] = next
		}
		return tx.Model(&WebhookDelivery{}).Where("id = ?", d.ID).Updates(fields).Error
	})
}

// WebhookDeliveryOfMerchant loads one of the merchant's deliveries.
func (s *Store) WebhookDeliveryOfMerchant(ctx context.Context, merchantID, id string) (*WebhookDelivery, error) {
	var d WebhookDelivery
	err := s.ctx(ctx).Where("merchant_id = ? AND id = ?", merchantID, id).Take(&d).Error
	return &d, notFound(err)
}

// WebhookDelivery loads a delivery by id (operator commands).
func (s *Store) WebhookDelivery(ctx context.Context, id string) (*WebhookDelivery, error) {
	var d WebhookDelivery
	err := s.ctx(ctx).Where("id = ?", id).Take(&d).Error
	return &d, notFound(err)
}

// CreateWebhookEndpoint stores an endpoint.
func (s *Store) CreateWebhookEndpoint(ctx context.Context, ep *WebhookEndpoint) error {
	now := s.Now()
	ep.ID, ep.CreatedAt, ep.UpdatedAt, ep.Active = NewID(), now, now, true
	return s.ctx(ctx).Create(ep).Error
}

// WebhookEndpoints lists the merchant's endpoints of a mode, newest first.
func (s *Store) WebhookEndpoints(ctx context.Context, sc Scope) ([]WebhookEndpoint, error) {
	var rows []WebhookEndpoint
	err := s.scoped(ctx, sc).Order("id desc").Find(&rows).Error
	return rows, err
}

// WebhookEndpoint loads one of the merchant's endpoints (any mode).
func (s *Store) WebhookEndpoint(ctx context.Context, merchantID, id string) (*WebhookEndpoint, error) {
	var ep WebhookEndpoint
	err := s.ctx(ctx).Where("merchant_id = ? AND id = ?", merchantID, id).Take(&ep).Error
	return &ep, notFound(err)
}

// WebhookEndpointUpdate holds the fields PATCH may change.
type WebhookEndpointUpdate struct {
	URL    *string
	Events []string
	Active *bool
	Secret *string
}

// UpdateWebhookEndpoint applies the fields that were sent.
func (s *Store) UpdateWebhookEndpoint(ctx context.Context, merchantID, id string, u WebhookEndpointUpdate) (*WebhookEndpoint, error) {
	fields := map[string]any{"updated_at": s.Now()}
	if u.URL != nil {
		fields["url"] = *u.URL
	}
	if u.Events != nil {
		fields["events"] = StringList(u.Events)
	}
	if u.Active != nil {
		fields["active"] = *u.Active
	}
	if u.Secret != nil {
		fields["secret"] = *u.Secret
	}
	res := s.ctx(ctx).Model(&WebhookEndpoint{}).Where("merchant_id = ? AND id = ?", merchantID, id).Updates(fields)
	if res.Error != nil {
		return nil, res.Error
	}
	if res.RowsAffected == 0 {
		return nil, apperr.NotFound()
	}
	return s.WebhookEndpoint(ctx, merchantID, id)
}

// DeleteWebhookEndpoint removes an endpoint. Its pending deliveries can no
// longer be delivered, so the read model marks them failed at once; their
// workflows stop as gone at their next attempt.
func (s *Store) DeleteWebhookEndpoint(ctx context.Context, merchantID, id string) error {
	return s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		res := tx.Where("merchant_id = ? AND id = ?", merchantID, id).Delete(&WebhookEndpoint{})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return apperr.NotFound()
		}
		return tx.Model(&WebhookDelivery{}).Where("endpoint_id = ? AND status = ?", id, DeliveryPending).
			Updates(map[string]any{"status": DeliveryFailed, "updated_at": s.Now()}).Error
	})
}

// DeliveryFilter narrows the events list.
type DeliveryFilter struct {
	Event        string
	Status       string
	Since, Until *time.Time
}

// WebhookDeliveries lists a page of the scope's deliveries, newest first.
func (s *Store) WebhookDeliveries(ctx context.Context, sc Scope, f DeliveryFilter, p Page) ([]WebhookDelivery, bool, error) {
	q := equal(s.scoped(ctx, sc), "event", f.Event, "status", f.Status)
	return fetchPage[WebhookDelivery](createdBetween(q, f.Since, f.Until), p)
}
