package activities

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/paygate/paygate/webhook"
)

// webhookFakeStore is an in-memory DeliveryStore that keeps the idempotency
// contract: one record per (delivery, attempt).
type webhookFakeStore struct {
	mu        sync.Mutex
	targets   map[string]DeliveryTarget
	records   map[string][]DeliveryAttemptRecord // by delivery, in attempt order
	loadErr   error
	recordErr error
}

func newWebhookFakeStore() *webhookFakeStore {
	return &webhookFakeStore{targets: map[string]DeliveryTarget{}, records: map[string][]DeliveryAttemptRecord{}}
}

func (s *webhookFakeStore) LoadDeliveryTarget(_ context.Context, id string) (DeliveryTarget, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.loadErr != nil {
		return DeliveryTarget{}, s.loadErr
	}
	t, ok := s.targets[id]
	if !ok {
		return DeliveryTarget{}, fmt.Errorf("delivery %s: %w", id, ErrDeliveryGone)
	}
	return t, nil
}

func (s *webhookFakeStore) RecordDeliveryAttempt(_ context.Context, r DeliveryAttemptRecord) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.recordErr != nil {
		return s.recordErr
	}
	if _, ok := s.targets[r.DeliveryID]; !ok {
		return ErrDeliveryGone
	}
	list := s.records[r.DeliveryID]
	for i := range list {
		if list[i].Attempt == r.Attempt {
			list[i] = r
			return nil
		}
	}
	s.records[r.DeliveryID] = append(list, r)
	return nil
}

func (s *webhookFakeStore) recorded(id string) []DeliveryAttemptRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]DeliveryAttemptRecord(nil), s.records[id]...)
}

// webhookReceiver is a loopback receiver answering a fixed status and
// verifying every signature.
type webhookReceiver struct {
	*httptest.Server
	status   atomic.Int32
	hits     atomic.Int32
	badSig   atomic.Int32
	lastID   atomic.Value
	lastBody atomic.Value
}

func newWebhookReceiver(t *testing.T, secret string, status int) *webhookReceiver {
	r := &webhookReceiver{}
	r.status.Store(int32(status))
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.hits.Add(1)
		if err := webhook.Verify(secret, req.Header, body, webhook.DefaultTolerance, time.Now()); err != nil {
			r.badSig.Add(1)
		}
		r.lastID.Store(req.Header.Get(webhook.HeaderID))
		r.lastBody.Store(string(body))
		w.WriteHeader(int(r.status.Load()))
	}))
	t.Cleanup(r.Close)
	return r
}

func newWebhookActivityEnv(t *testing.T, a *WebhookActivities) *testsuite.TestActivityEnvironment {
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(log.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	env := suite.NewTestActivityEnvironment()
	env.RegisterActivity(a)
	return env
}

const webhookTestBody = `{"event":"checkout.completed","data":{"amount":"32.61","livemode":false},"webhookDeliveryId":"dlv_1","timestamp":"2026-11-22T03:00:00.000Z"}`

func webhookSetup(t *testing.T, status int) (*WebhookActivities, *webhookFakeStore, *webhookReceiver) {
	secret, err := webhook.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	rcv := newWebhookReceiver(t, secret, status)
	store := newWebhookFakeStore()
	store.targets["dlv_1"] = DeliveryTarget{URL: rcv.URL + "/hooks", Secret: secret, Body: []byte(webhookTestBody), Active: true}
	at := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	a := &WebhookActivities{
		Store:  store,
		Sender: webhook.NewSender(webhook.Policy{AllowLoopbackHTTP: true}),
		// The signature timestamp is the attempt time; the receiver checks
		// it against the wall clock, so keep it near now.
		Now: func() time.Time { at = time.Now().UTC(); return at },
	}
	return a, store, rcv
}

func runAttempt(t *testing.T, a *WebhookActivities, in DeliveryAttemptInput) (DeliveryAttemptResult, error) {
	t.Helper()
	env := newWebhookActivityEnv(t, a)
	val, err := env.ExecuteActivity(a.AttemptDelivery, in)
	if err != nil {
		return DeliveryAttemptResult{}, err
	}
	var res DeliveryAttemptResult
	if err := val.Get(&res); err != nil {
		t.Fatal(err)
	}
	return res, nil
}

func TestWebhookAttemptDeliveryDelivered(t *testing.T) {
	a, store, rcv := webhookSetup(t, http.StatusNoContent)
	res, err := runAttempt(t, a, DeliveryAttemptInput{DeliveryID: "dlv_1", Attempt: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Delivered || res.StatusCode != 204 || res.Status != DeliveryStatusDelivered {
		t.Fatalf("result %+v", res)
	}
	if rcv.hits.Load() != 1 || rcv.badSig.Load() != 0 || rcv.lastID.Load() != "dlv_1" || rcv.lastBody.Load() != webhookTestBody {
		t.Fatalf("receiver: hits %d bad %d id %v", rcv.hits.Load(), rcv.badSig.Load(), rcv.lastID.Load())
	}
	recs := store.recorded("dlv_1")
	if len(recs) != 1 || recs[0].Attempt != 1 || recs[0].Status != DeliveryStatusDelivered || recs[0].ResponseStatus != 204 || recs[0].At.IsZero() {
		t.Fatalf("records %+v", recs)
	}
}

func TestWebhookAttemptDeliveryFailedIsAResult(t *testing.T) {
	for _, tc := range []struct {
		final bool
		want  string
	}{{false, DeliveryStatusPending}, {true, DeliveryStatusFailed}} {
		a, store, _ := webhookSetup(t, http.StatusInternalServerError)
		res, err := runAttempt(t, a, DeliveryAttemptInput{DeliveryID: "dlv_1", Attempt: 3, Final: tc.final})
		if err != nil {
			t.Fatalf("a failed HTTP attempt must not be an activity error: %v", err)
		}
		if res.Delivered || res.StatusCode != 500 || res.Status != tc.want || res.Error == "" {
			t.Fatalf("final=%v: %+v", tc.final, res)
		}
		recs := store.recorded("dlv_1")
		if len(recs) != 1 || recs[0].Attempt != 3 || recs[0].Status != tc.want || recs[0].ResponseStatus != 500 {
			t.Fatalf("final=%v: records %+v", tc.final, recs)
		}
	}
}

func TestWebhookAttemptDeliveryRedirectFails(t *testing.T) {
	a, store, rcv := webhookSetup(t, http.StatusFound)
	res, err := runAttempt(t, a, DeliveryAttemptInput{DeliveryID: "dlv_1", Attempt: 1})
	if err != nil || res.Delivered || res.StatusCode != 302 {
		t.Fatalf("%+v %v", res, err)
	}
	if rcv.hits.Load() != 1 || store.recorded("dlv_1")[0].Status != DeliveryStatusPending {
		t.Fatal("redirect not recorded as a failed attempt")
	}
}

func TestWebhookAttemptDeliveryInactiveEndpoint(t *testing.T) {
	a, store, rcv := webhookSetup(t, http.StatusNoContent)
	tgt := store.targets["dlv_1"]
	tgt.Active = false
	store.targets["dlv_1"] = tgt
	res, err := runAttempt(t, a, DeliveryAttemptInput{DeliveryID: "dlv_1", Attempt: 8, Final: true})
	if err != nil || res.Delivered || res.Status != DeliveryStatusFailed || res.Error != "endpoint disabled" {
		t.Fatalf("%+v %v", res, err)
	}
	if rcv.hits.Load() != 0 {
		t.Fatal("sent to a disabled endpoint")
	}
}

// TestWebhookAttemptDeliveryUnsigned: an endpoint whose secret the
// server's keys do not open is a failed attempt that says so, on the usual
// schedule, nothing sent (before, a store error: retried an hour per
// attempt, never recorded, and the reconciler began again for ever).
func TestWebhookAttemptDeliveryUnsigned(t *testing.T) {
	a, store, rcv := webhookSetup(t, http.StatusNoContent)
	tgt := store.targets["dlv_1"]
	tgt.Secret, tgt.Unsigned = "", "the endpoint's signing secret cannot be opened with this server's keys"
	store.targets["dlv_1"] = tgt
	res, err := runAttempt(t, a, DeliveryAttemptInput{DeliveryID: "dlv_1", Attempt: 2})
	if err != nil || res.Delivered || res.Status != DeliveryStatusPending || !strings.Contains(res.Error, "cannot be opened") {
		t.Fatalf("%+v %v", res, err)
	}
	if recs := store.recorded("dlv_1"); len(recs) != 1 || !strings.Contains(recs[0].Error, "rotate the endpoint's secret") {
		t.Fatalf("records %+v", recs)
	}
	if rcv.hits.Load() != 0 {
		t.Fatal("sent unsigned")
	}
}

// TestWebhookAttemptDeliveryLiveEndpointIsStrict: a live endpoint whose URL
// points at the worker's own loopback is refused at dial time even by a
// Sender with the development loopback allowance, and the refusal is
// recorded as a failed attempt; the receiver is never reached.
func TestWebhookAttemptDeliveryLiveEndpointIsStrict(t *testing.T) {
	a, store, rcv := webhookSetup(t, http.StatusNoContent)
	tgt := store.targets["dlv_1"]
	tgt.Live = true
	store.targets["dlv_1"] = tgt
	res, err := runAttempt(t, a, DeliveryAttemptInput{DeliveryID: "dlv_1", Attempt: 1})
	if err != nil || res.Delivered || res.Status != DeliveryStatusPending || res.Error != "url: must use https" {
		t.Fatalf("%+v %v", res, err)
	}
	if rcv.hits.Load() != 0 {
		t.Fatal("a live endpoint reached a loopback receiver")
	}
}

func TestWebhookAttemptDeliveryGoneIsNonRetryable(t *testing.T) {
	a, _, rcv := webhookSetup(t, http.StatusNoContent)
	_, err := runAttempt(t, a, DeliveryAttemptInput{DeliveryID: "dlv_missing", Attempt: 1})
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != DeliveryGoneErrorType || !appErr.NonRetryable() {
		t.Fatalf("err = %v, want non-retryable %s", err, DeliveryGoneErrorType)
	}
	if rcv.hits.Load() != 0 {
		t.Fatal("sent a gone delivery")
	}
}

func TestWebhookAttemptDeliveryStoreErrorsAreRetryable(t *testing.T) {
	boom := errors.New("connection reset by peer")

	a, store, rcv := webhookSetup(t, http.StatusNoContent)
	store.loadErr = boom
	_, err := runAttempt(t, a, DeliveryAttemptInput{DeliveryID: "dlv_1", Attempt: 1})
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.NonRetryable() {
		t.Fatalf("load error: %v, want retryable", err)
	}
	if rcv.hits.Load() != 0 {
		t.Fatal("sent although the target could not be loaded")
	}

	a, store, _ = webhookSetup(t, http.StatusNoContent)
	store.recordErr = boom
	_, err = runAttempt(t, a, DeliveryAttemptInput{DeliveryID: "dlv_1", Attempt: 1})
	if !errors.As(err, &appErr) || appErr.NonRetryable() {
		t.Fatalf("record error: %v, want retryable", err)
	}

	a, store, _ = webhookSetup(t, http.StatusNoContent)
	store.recordErr = fmt.Errorf("update: %w", ErrDeliveryGone)
	_, err = runAttempt(t, a, DeliveryAttemptInput{DeliveryID: "dlv_1", Attempt: 1})
	if !errors.As(err, &appErr) || !appErr.NonRetryable() || appErr.Type() != DeliveryGoneErrorType {
		t.Fatalf("record gone: %v, want non-retryable", err)
	}
}

func TestWebhookAttemptDeliveryIdempotentRecord(t *testing.T) {
	a, store, _ := webhookSetup(t, http.StatusServiceUnavailable)
	for i := 0; i < 2; i++ { // an activity retry of the same attempt
		if _, err := runAttempt(t, a, DeliveryAttemptInput{DeliveryID: "dlv_1", Attempt: 2}); err != nil {
			t.Fatal(err)
		}
	}
	if recs := store.recorded("dlv_1"); len(recs) != 1 {
		t.Fatalf("records %+v, want one for attempt 2", recs)
	}
}

func TestWebhookAttemptDeliveryRejectsBadInput(t *testing.T) {
	a, _, _ := webhookSetup(t, http.StatusNoContent)
	for _, in := range []DeliveryAttemptInput{{DeliveryID: "", Attempt: 1}, {DeliveryID: "dlv_1", Attempt: 0}} {
		_, err := runAttempt(t, a, in)
		var appErr *temporal.ApplicationError
		if !errors.As(err, &appErr) || !appErr.NonRetryable() {
			t.Fatalf("%+v: err = %v", in, err)
		}
	}
}
