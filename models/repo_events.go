package models

import (
	"context"
	"encoding/json"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// EventSpec is an event to record: its type, idempotency key and data.
type EventSpec struct {
	Type string
	Key  string
	Data map[string]any
}

// Envelope is the JSON every delivery posts (SPEC.md "Events": Envelope).
type Envelope struct {
	Event             string         `json:"event"`
	Data              map[string]any `json:"data"`
	WebhookDeliveryID string         `json:"webhookDeliveryId"`
	Timestamp         string         `json:"timestamp"`
}

// EmitEvent records an event once (by key) with one delivery per active
// endpoint of the merchant and mode that subscribes to its type, and
// returns the ids of the event's deliveries.
func (s *Store) EmitEvent(ctx context.Context, merchantID string, mode Mode, ev EventSpec) ([]string, error) {
	var ids []string
	err := s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		var err error
		ids, err = s.emitEvent(tx, merchantID, mode, ev, s.Now())
		return err
	})
	return ids, err
}

func (s *Store) emitEvent(tx *gorm.DB, merchantID string, mode Mode, ev EventSpec, at time.Time) ([]string, error) {
	data, err := json.Marshal(ev.Data)
	if err != nil {
		return nil, err
	}
	e := Event{ID: NewID(), MerchantID: merchantID, Mode: mode, Type: ev.Type, Key: ev.Key, Data: data, CreatedAt: at.UTC()}
	if err := tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&e).Error; err != nil {
		return nil, err
	}
	if err := tx.Where("key = ?", ev.Key).Take(&e).Error; err != nil {
		return nil, err
	}
	var endpoints []WebhookEndpoint
	if err := tx.Where("merchant_id = ? AND mode = ? AND active = ?", merchantID, mode, true).Find(&endpoints).Error; err != nil {
		return nil, err
	}
	for _, ep := range endpoints {
		if !subscribes(ep.Events, e.Type) {
			continue
		}
		id := NewID()
		body, err := json.Marshal(Envelope{Event: e.Type, Data: ev.Data, WebhookDeliveryID: id,
			Timestamp: e.CreatedAt.UTC().Format("2006-01-02T15:04:05.000Z")})
		if err != nil {
			return nil, err
		}
		d := WebhookDelivery{ID: id, MerchantID: merchantID, Mode: mode, EventID: e.ID, EndpointID: ep.ID, Event: e.Type,
			Payload: body, Status: DeliveryPending, CreatedAt: at.UTC(), UpdatedAt: at.UTC()}
		if err := tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&d).Error; err != nil {
			return nil, err
		}
	}
	var ids []string
	err = tx.Model(&WebhookDelivery{}).Where("event_id = ?", e.ID).Order("id asc").Pluck("id", &ids).Error
	return ids, err
}

func subscribes(events []string, typ string) bool {
	for _, e := range events {
		if e == typ || e == "*" {
			return true
		}
	}
	return false
}
