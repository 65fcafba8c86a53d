package models_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
)

// TestPendingDeliveriesCursorAndSettle: the reconciler's queries. Pending
// deliveries older than the cut are listed in creation order after a cursor
// (delivered ones and fresh ones are not); a settle moves only a pending row
// and never a final one; DeliveryTarget tells a live endpoint from a test one.
func TestPendingDeliveriesCursorAndSettle(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		m := newMerchant(t, st, "rec@example.com")
		ep := &models.WebhookEndpoint{MerchantID: m.ID, Mode: models.ModeTest, URL: "https://hooks.example.com/x",
			Events: models.StringList{"checkout.completed"}, Secret: "whsec_dGVzdA=="}
		if err := st.CreateWebhookEndpoint(ctx, ep); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for i := 0; i < 3; i++ {
			got, err := st.EmitEvent(ctx, m.ID, models.ModeTest, models.EventSpec{Type: "checkout.completed",
				Key: "checkout.completed:" + models.NewID(), Data: map[string]any{"livemode": false}})
			if err != nil || len(got) != 1 {
				t.Fatalf("emit: %v %v", got, err)
			}
			ids = append(ids, got[0])
		}
		if err := st.RecordDeliveryAttempt(ctx, models.AttemptRecord{DeliveryID: ids[1], Attempt: 1, ResponseStatus: 204,
			At: time.Now(), Status: models.DeliveryDelivered}); err != nil {
			t.Fatal(err)
		}
		later := st.Now().Add(time.Minute)
		if rows, _ := st.PendingDeliveries(ctx, "", st.Now().Add(-time.Hour), 10); len(rows) != 0 {
			t.Fatalf("fresh deliveries listed: %d", len(rows))
		}
		rows, err := st.PendingDeliveries(ctx, "", later, 1)
		if err != nil || len(rows) != 1 || rows[0].ID != ids[0] {
			t.Fatalf("first page: %v %v", rows, err)
		}
		rows, err = st.PendingDeliveries(ctx, rows[0].ID, later, 1)
		if err != nil || len(rows) != 1 || rows[0].ID != ids[2] {
			t.Fatalf("second page (the delivered one skipped): %v %v", rows, err)
		}
		if rows, _ := st.PendingDeliveries(ctx, ids[2], later, 1); len(rows) != 0 {
			t.Fatalf("past the end: %v", rows)
		}

		if ok, err := st.SettleDelivery(ctx, ids[0], models.DeliveryFailed); err != nil || !ok {
			t.Fatalf("settle pending: %v %v", ok, err)
		}
		if ok, err := st.SettleDelivery(ctx, ids[0], models.DeliveryDelivered); err != nil || ok {
			t.Fatalf("a settled delivery must stay as it is: %v %v", ok, err)
		}
		if ok, _ := st.SettleDelivery(ctx, ids[1], models.DeliveryFailed); ok {
			t.Fatal("a delivered delivery was downgraded")
		}
		if _, err := st.SettleDelivery(ctx, ids[2], models.DeliveryPending); err == nil {
			t.Fatal("settling to pending must be refused")
		}
		if d, _ := st.WebhookDelivery(ctx, ids[0]); d.Status != models.DeliveryFailed {
			t.Fatalf("settled row: %s", d.Status)
		}

		tgt, err := st.DeliveryTarget(ctx, ids[2])
		if err != nil || tgt.Live || tgt.URL != ep.URL {
			t.Fatalf("test endpoint target: %+v %v", tgt, err)
		}
		live := &models.WebhookEndpoint{MerchantID: m.ID, Mode: models.ModeLive, URL: "https://hooks.example.com/live",
			Events: models.StringList{"checkout.completed"}, Secret: "whsec_dGVzdA=="}
		if err := st.CreateWebhookEndpoint(ctx, live); err != nil {
			t.Fatal(err)
		}
		got, err := st.EmitEvent(ctx, m.ID, models.ModeLive, models.EventSpec{Type: "checkout.completed",
			Key: "live:" + models.NewID(), Data: map[string]any{"livemode": true}})
		if err != nil || len(got) != 1 {
			t.Fatalf("emit live: %v %v", got, err)
		}
		tgt, err = st.DeliveryTarget(ctx, got[0])
		if err != nil || !tgt.Live || tgt.URL != live.URL || tgt.Secret != live.Secret || !tgt.Active {
			t.Fatalf("live endpoint target: %+v %v", tgt, err)
		}
		if d, _ := st.WebhookDelivery(ctx, got[0]); string(tgt.Body) != string(d.Payload) || len(tgt.Body) == 0 {
			t.Fatalf("target body %s, the delivery's payload %s", tgt.Body, d.Payload)
		}
		if _, err := st.DeliveryTarget(ctx, models.NewID()); !errors.Is(err, models.ErrGone) {
			t.Fatalf("unknown delivery: %v, want ErrGone", err)
		}
		if err := st.DeleteWebhookEndpoint(ctx, m.ID, live.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := st.DeliveryTarget(ctx, got[0]); !errors.Is(err, models.ErrGone) {
			t.Fatalf("deleted endpoint: %v, want ErrGone", err)
		}
	})
}

// TestRecordDeliveryAttemptRules: each attempt is stored once per number;
// the delivery's read model follows its highest attempt, an older attempt
// recorded late changes nothing visible, delivered is never downgraded,
// and an attempt of a delivery that is gone is refused and not stored.
func TestRecordDeliveryAttemptRules(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		_, _, id := newDelivery(t, st, "attempts@example.com")
		t0 := time.Now().UTC().Truncate(time.Second)
		record := func(n, code int, status, msg string) {
			t.Helper()
			if err := st.RecordDeliveryAttempt(ctx, models.AttemptRecord{DeliveryID: id, Attempt: n, ResponseStatus: code,
				At: t0.Add(time.Duration(n) * time.Minute), Status: status, Error: msg}); err != nil {
				t.Fatalf("attempt %d: %v", n, err)
			}
		}
		expect := func(step string, attempts, code int, status string, last time.Time) {
			t.Helper()
			d, err := st.WebhookDelivery(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			got := 0
			if d.ResponseStatus != nil {
				got = *d.ResponseStatus
			}
			if d.Attempts != attempts || got != code || d.Status != status || d.LastAttemptAt == nil || !d.LastAttemptAt.Equal(last) {
				t.Fatalf("%s: attempts %d, response %d, %s, last %v; want %d, %d, %s, %v", step, d.Attempts, got, d.Status,
					d.LastAttemptAt, attempts, code, status, last)
			}
		}
		record(1, 500, models.DeliveryPending, "HTTP 500")
		expect("first attempt", 1, 500, models.DeliveryPending, t0.Add(time.Minute))
		record(3, 204, models.DeliveryDelivered, "")
		expect("delivered", 3, 204, models.DeliveryDelivered, t0.Add(3*time.Minute))
		record(2, 503, models.DeliveryPending, "HTTP 503")
		expect("an older attempt recorded late", 3, 204, models.DeliveryDelivered, t0.Add(3*time.Minute))
		record(4, 0, models.DeliveryFailed, "connection refused")
		expect("a later failure (a manual retry)", 4, 0, models.DeliveryDelivered, t0.Add(4*time.Minute))
		record(4, 0, models.DeliveryFailed, "connection refused again") // the activity retried after its commit

		all, err := st.DeliveryAttempts(ctx, []string{id})
		if err != nil {
			t.Fatal(err)
		}
		rows := all[id]
		if len(rows) != 4 {
			t.Fatalf("%d attempts stored, want 4: %+v", len(rows), rows)
		}
		for _, a := range rows {
			if a.Attempt == 2 && (a.ResponseStatus == nil || *a.ResponseStatus != 503) {
				t.Fatalf("the late attempt was not stored as sent: %+v", a)
			}
			if a.Attempt == 4 && (a.ResponseStatus != nil || a.Error != "connection refused again") {
				t.Fatalf("attempt 4 recorded twice keeps the last record: %+v", a)
			}
		}

		gone := models.NewID()
		err = st.RecordDeliveryAttempt(ctx, models.AttemptRecord{DeliveryID: gone, Attempt: 1, ResponseStatus: 200, At: t0,
			Status: models.DeliveryDelivered})
		if !errors.Is(err, models.ErrGone) {
			t.Fatalf("an attempt of an unknown delivery: %v, want ErrGone", err)
		}
		if all, err := st.DeliveryAttempts(ctx, []string{gone}); err != nil || len(all[gone]) != 0 {
			t.Fatalf("an unknown delivery's attempt was stored: %v %v", all, err)
		}
	})
}

// newDelivery makes a merchant with one test-mode endpoint subscribed to
// checkout.completed, and one delivery of that event to it.
func newDelivery(t *testing.T, st *models.Store, email string) (*models.Merchant, *models.WebhookEndpoint, string) {
	t.Helper()
	ctx := context.Background()
	m := newMerchant(t, st, email)
	ep := &models.WebhookEndpoint{MerchantID: m.ID, Mode: models.ModeTest, URL: "https://hooks.example.com/x",
		Events: models.StringList{"checkout.completed"}, Secret: "whsec_dGVzdA=="}
	if err := st.CreateWebhookEndpoint(ctx, ep); err != nil {
		t.Fatal(err)
	}
	ids, err := st.EmitEvent(ctx, m.ID, models.ModeTest, models.EventSpec{Type: "checkout.completed",
		Key: "checkout.completed:" + models.NewID(), Data: map[string]any{"livemode": false}})
	if err != nil || len(ids) != 1 {
		t.Fatalf("emit: %v %v", ids, err)
	}
	return m, ep, ids[0]
}

// TestDeliveryScheduledAttempts: the delivery keeps the highest schedule
// slot attempted; extra attempts (slot 0) count in attempts only, and a
// slot recorded again or late never lowers it.
func TestDeliveryScheduledAttempts(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		_, _, id := newDelivery(t, st, "slots@example.com")
		at := time.Now().UTC()
		steps := []struct{ attempt, slot, attempts, scheduled int }{
			{1, 1, 1, 1}, // slot 1
			{2, 0, 2, 1}, // a support retry
			{3, 0, 3, 1},
			{4, 2, 4, 2}, // slot 2
			{4, 2, 4, 2}, // the same attempt recorded again (a retried activity)
			{5, 0, 5, 2},
		}
		for i, s := range steps {
			if err := st.RecordDeliveryAttempt(ctx, models.AttemptRecord{DeliveryID: id, Attempt: s.attempt, Slot: s.slot,
				ResponseStatus: 500, At: at, Status: models.DeliveryPending, Error: "HTTP 500"}); err != nil {
				t.Fatal(err)
			}
			d, err := st.WebhookDelivery(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if d.Attempts != s.attempts || d.ScheduledAttempts != s.scheduled {
				t.Fatalf("step %d: attempts %d, scheduled %d; want %d, %d", i, d.Attempts, d.ScheduledAttempts, s.attempts, s.scheduled)
			}
		}
	})
}
