package models

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/paygate/paygate/apperr"
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
	e, err := newEvent(merchantID, mode, ev, at)
	if err != nil {
		return nil, err
	}
	res := tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&e)
	if res.Error != nil {
		return nil, res.Error
	}
	// A new event (the common case) has no deliveries but the ones made
	// below. One stored before (an activity retried after its commit) is
	// read back, and its deliveries are the ones made then, with one more
	// for an endpoint created since.
	fresh := res.RowsAffected == 1
	if !fresh {
		// Into a fresh value: Take on e, whose new id is set, would add
		// "id = <new id>" to the query and find nothing.
		var stored Event
		if err := tx.Where("key = ?", ev.Key).Take(&stored).Error; err != nil {
			return nil, err
		}
		e = stored
	}
	endpoints, err := activeEndpoints(tx, merchantID, mode)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, ep := range endpoints {
		if !subscribes(ep.Events, e.Type) {
			continue
		}
		d, err := newDelivery(e, ep.ID, ev.Data, at)
		if err != nil {
			return nil, err
		}
		r := tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&d)
		if r.Error != nil {
			return nil, r.Error
		}
		if r.RowsAffected == 0 {
			fresh = false // a delivery was there already: the stored ids answer
		}
		ids = append(ids, d.ID)
	}
	if fresh {
		slices.Sort(ids)
		return ids, nil
	}
	ids = nil
	if err := tx.Model(&WebhookDelivery{}).Where("event_id = ?", e.ID).Pluck("id", &ids).Error; err != nil {
		return nil, err
	}
	// Byte order, as above (a database's collation may order text otherwise).
	slices.Sort(ids)
	return ids, nil
}

// newEvent is the row of an event.
func newEvent(merchantID string, mode Mode, ev EventSpec, at time.Time) (Event, error) {
	data, err := json.Marshal(ev.Data)
	if err != nil {
		return Event{}, err
	}
	return Event{ID: NewID(), MerchantID: merchantID, Mode: mode, Type: ev.Type, Key: ev.Key, Data: data, CreatedAt: at.UTC()}, nil
}

// newDelivery is the row of e's delivery to an endpoint, pending since
// at, its payload the envelope sent (data is the event's data).
func newDelivery(e Event, endpointID string, data map[string]any, at time.Time) (WebhookDelivery, error) {
	id := NewID()
	body, err := json.Marshal(Envelope{Event: e.Type, Data: data, WebhookDeliveryID: id,
		Timestamp: e.CreatedAt.UTC().Format("2006-01-02T15:04:05.000Z")})
	if err != nil {
		return WebhookDelivery{}, err
	}
	at = at.UTC()
	return WebhookDelivery{ID: id, MerchantID: e.MerchantID, Mode: e.Mode, EventID: e.ID, EndpointID: endpointID, Event: e.Type,
		SessionID: eventSessionID(e.Data), Payload: body, Status: DeliveryPending, CreatedAt: at, UpdatedAt: at}, nil
}

// activeEndpoints are a merchant's active endpoints of a mode.
func activeEndpoints(db *gorm.DB, merchantID string, mode Mode) ([]WebhookEndpoint, error) {
	var endpoints []WebhookEndpoint
	err := db.Where("merchant_id = ? AND mode = ? AND active = ?", merchantID, mode, true).Find(&endpoints).Error
	return endpoints, err
}

func subscribes(events []string, typ string) bool {
	for _, e := range events {
		if e == typ || e == "*" {
			return true
		}
	}
	return false
}

// eventSessionID is the checkout session an event's data names, if any.
func eventSessionID(data []byte) *string {
	var d struct {
		SessionID string `json:"sessionId"`
	}
	if json.Unmarshal(data, &d) != nil || len(d.SessionID) != 36 {
		return nil
	}
	return &d.SessionID
}

// EventTest is the type of the event the dashboard's "send test event"
// posts to one endpoint.
const EventTest = "webhook.test"

// SendTestEvent records a test event and one delivery of it to the
// endpoint (whatever events it subscribes to), and returns the delivery.
// A disabled endpoint is a conflict.
func (s *Store) SendTestEvent(ctx context.Context, merchantID, endpointID string) (*WebhookDelivery, error) {
	var d WebhookDelivery
	err := s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		var ep WebhookEndpoint
		if err := tx.Where("merchant_id = ? AND id = ?", merchantID, endpointID).Take(&ep).Error; err != nil {
			return notFound(err)
		}
		if !ep.Active {
			return apperr.Conflict("the endpoint is disabled; enable it to send a test event")
		}
		at := s.Now()
		data := map[string]any{"endpointId": ep.ID, "livemode": ep.Mode == ModeLive,
			"message": "a test event sent from the dashboard; no payment is behind it"}
		raw, err := json.Marshal(data)
		if err != nil {
			return err
		}
		e := Event{ID: NewID(), MerchantID: merchantID, Mode: ep.Mode, Type: EventTest, Key: EventTest + ":" + NewID(), Data: raw, CreatedAt: at}
		if err := tx.Create(&e).Error; err != nil {
			return err
		}
		id := NewID()
		body, err := json.Marshal(Envelope{Event: e.Type, Data: data, WebhookDeliveryID: id, Timestamp: at.Format("2006-01-02T15:04:05.000Z")})
		if err != nil {
			return err
		}
		d = WebhookDelivery{ID: id, MerchantID: merchantID, Mode: ep.Mode, EventID: e.ID, EndpointID: ep.ID, Event: e.Type,
			Payload: body, Status: DeliveryPending, CreatedAt: at, UpdatedAt: at}
		return tx.Create(&d).Error
	})
	if err != nil {
		return nil, err
	}
	return &d, nil
}
