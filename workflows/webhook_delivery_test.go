package workflows

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/temporalproto"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/paygate/paygate/activities"
	"github.com/paygate/paygate/webhook"
)

// webhookTestLogger keeps test output to warnings and errors.
func webhookTestLogger() log.Logger {
	return log.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
}

// webhookCall is one AttemptDelivery call as the mock saw it.
type webhookCall struct {
	in     activities.DeliveryAttemptInput
	offset time.Duration // since the workflow started, on the test clock
}

// webhookMock mocks AttemptDelivery: outcome(n) decides call n (1-based).
type webhookMock struct {
	mu    sync.Mutex
	calls []webhookCall
}

func (m *webhookMock) install(env *testsuite.TestWorkflowEnvironment, start time.Time,
	outcome func(n int, in activities.DeliveryAttemptInput) (activities.DeliveryAttemptResult, error)) {
	env.OnActivity(webhookActivities.AttemptDelivery, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.DeliveryAttemptInput) (activities.DeliveryAttemptResult, error) {
			m.mu.Lock()
			m.calls = append(m.calls, webhookCall{in: in, offset: env.Now().Sub(start)})
			n := len(m.calls)
			m.mu.Unlock()
			return outcome(n, in)
		})
}

func (m *webhookMock) get() []webhookCall {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]webhookCall(nil), m.calls...)
}

func webhookFail(in activities.DeliveryAttemptInput) (activities.DeliveryAttemptResult, error) {
	status := activities.DeliveryStatusPending
	if in.Final {
		status = activities.DeliveryStatusFailed
	}
	return activities.DeliveryAttemptResult{StatusCode: 503, Error: "status 503", Status: status}, nil
}

func webhookOK(activities.DeliveryAttemptInput) (activities.DeliveryAttemptResult, error) {
	return activities.DeliveryAttemptResult{Delivered: true, StatusCode: 204, Status: activities.DeliveryStatusDelivered}, nil
}

func newWebhookEnv(t *testing.T) (*testsuite.TestWorkflowEnvironment, time.Time) {
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(webhookTestLogger())
	env := suite.NewTestWorkflowEnvironment()
	env.RegisterWorkflow(WebhookDeliveryWorkflow)
	env.RegisterActivity(&activities.WebhookActivities{})
	start := testClockStart
	env.SetStartTime(start)
	return env, start
}

// webhookScheduleOffsets is when each of the 8 scheduled attempts is due,
// counted from the start: 0, 1m, 6m, 36m, 2h36m, 7h36m, 17h36m, 41h36m.
func webhookScheduleOffsets() []time.Duration {
	out := []time.Duration{0}
	var at time.Duration
	for _, d := range WebhookRetryDelays() {
		at += d
		out = append(out, at)
	}
	return out
}

func webhookResult(t *testing.T, env *testsuite.TestWorkflowEnvironment) WebhookDeliveryResult {
	t.Helper()
	if !env.IsWorkflowCompleted() {
		t.Fatal("workflow did not complete")
	}
	if err := env.GetWorkflowError(); err != nil {
		t.Fatalf("workflow error: %v", err)
	}
	var res WebhookDeliveryResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	return res
}

// webhookUpserts records the DeliveryStatus values a run upserts.
func webhookUpserts(t *testing.T, env *testsuite.TestWorkflowEnvironment) *[]string {
	var got []string
	env.OnUpsertTypedSearchAttributes(mock.Anything).Run(func(args mock.Arguments) {
		sa := args.Get(0).(temporal.SearchAttributes)
		if v, ok := sa.GetKeyword(DeliveryStatusAttr); ok {
			got = append(got, v)
		} else {
			t.Errorf("upsert without DeliveryStatus: %v", sa.GetUntypedValues())
		}
	}).Return().Maybe()
	return &got
}

func webhookCheckIDs(t *testing.T, calls []webhookCall, id string, firstAttempt int) {
	t.Helper()
	for i, c := range calls {
		if c.in.DeliveryID != id {
			t.Errorf("call %d: delivery id %q, want %q", i+1, c.in.DeliveryID, id)
		}
		if c.in.Attempt != firstAttempt+i {
			t.Errorf("call %d: attempt %d, want %d", i+1, c.in.Attempt, firstAttempt+i)
		}
	}
}

func TestWebhookDeliveryWorkflowID(t *testing.T) {
	if got := WebhookDeliveryWorkflowID("0192f3a4-5b6c"); got != "webhook-delivery:0192f3a4-5b6c" {
		t.Fatal(got)
	}
	want := []time.Duration{0, time.Minute, 6 * time.Minute, 36 * time.Minute,
		2*time.Hour + 36*time.Minute, 7*time.Hour + 36*time.Minute, 17*time.Hour + 36*time.Minute, 41*time.Hour + 36*time.Minute}
	got := webhookScheduleOffsets()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("schedule %v, want %v", got, want)
	}
	WebhookRetryDelays()[0] = time.Hour // a copy: the schedule cannot be changed from outside
	if WebhookRetryDelays()[0] != time.Minute {
		t.Fatal("WebhookRetryDelays exposes the schedule")
	}
}

func TestWebhookDeliveryWorkflowAlwaysFailing(t *testing.T) {
	env, start := newWebhookEnv(t)
	var m webhookMock
	m.install(env, start, func(_ int, in activities.DeliveryAttemptInput) (activities.DeliveryAttemptResult, error) {
		return webhookFail(in)
	})
	upserts := webhookUpserts(t, env)
	env.ExecuteWorkflow(WebhookDeliveryWorkflow, WebhookDeliveryInput{Shape: webhookTestShape, DeliveryID: "dlv_fail"})

	res := webhookResult(t, env)
	if res.State != WebhookDeliveryStateFailed || res.Attempts != 8 || res.LastStatusCode != 503 {
		t.Fatalf("result %+v", res)
	}
	// Marked for the operator's Web UI, once, at the end.
	if fmt.Sprint(*upserts) != "[failed]" {
		t.Fatalf("DeliveryStatus upserts %v, want [failed]", *upserts)
	}
	calls := m.get()
	if len(calls) != WebhookDeliveryMaxAttempts {
		t.Fatalf("%d attempts, want 8", len(calls))
	}
	webhookCheckIDs(t, calls, "dlv_fail", 1)
	for i, c := range calls {
		if want := webhookScheduleOffsets()[i]; c.offset != want {
			t.Errorf("attempt %d at +%v, want +%v", i+1, c.offset, want)
		}
		if c.in.Final != (i == 7) {
			t.Errorf("attempt %d: Final=%v", i+1, c.in.Final)
		}
	}
	if end := env.Now().Sub(start); end != 41*time.Hour+36*time.Minute {
		t.Errorf("finished at +%v", end)
	}
}

func TestWebhookDeliveryWorkflowRecoversOnAttempt4(t *testing.T) {
	env, start := newWebhookEnv(t)
	var m webhookMock
	m.install(env, start, func(n int, in activities.DeliveryAttemptInput) (activities.DeliveryAttemptResult, error) {
		if n == 4 {
			return webhookOK(in)
		}
		return webhookFail(in)
	})
	upserts := webhookUpserts(t, env)
	env.ExecuteWorkflow(WebhookDeliveryWorkflow, WebhookDeliveryInput{Shape: webhookTestShape, DeliveryID: "dlv_recover"})

	res := webhookResult(t, env)
	if res.State != WebhookDeliveryStateDelivered || res.Attempts != 4 || res.LastStatusCode != 204 {
		t.Fatalf("result %+v", res)
	}
	if len(*upserts) != 0 {
		t.Fatalf("a delivered run upserted DeliveryStatus %v", *upserts)
	}
	calls := m.get()
	if len(calls) != 4 {
		t.Fatalf("%d attempts, want 4", len(calls))
	}
	webhookCheckIDs(t, calls, "dlv_recover", 1)
	for i, c := range calls {
		if want := webhookScheduleOffsets()[i]; c.offset != want || c.in.Final {
			t.Errorf("attempt %d at +%v final=%v, want +%v", i+1, c.offset, c.in.Final, want)
		}
	}
}

// TestWebhookDeliveryWorkflowResume: a run resumed by the reconciler with
// ResumeSlot k makes attempt PreviousAttempts+1 at once as slot k+1, then
// keeps the rest of the schedule; resumed at the last slot it makes one final
// attempt.
func TestWebhookDeliveryWorkflowResume(t *testing.T) {
	env, start := newWebhookEnv(t)
	var m webhookMock
	m.install(env, start, func(_ int, in activities.DeliveryAttemptInput) (activities.DeliveryAttemptResult, error) {
		return webhookFail(in)
	})
	env.ExecuteWorkflow(WebhookDeliveryWorkflow, WebhookDeliveryInput{Shape: webhookTestShape, DeliveryID: "dlv_resume", PreviousAttempts: 5, ResumeSlot: 5})
	res := webhookResult(t, env)
	if res.State != WebhookDeliveryStateFailed || res.Attempts != 8 {
		t.Fatalf("result %+v", res)
	}
	calls := m.get()
	webhookCheckIDs(t, calls, "dlv_resume", 6)
	// Slots 6, 7, 8: at once, then after 10 h (the wait after slot 6) and
	// 24 h (after slot 7), as in the schedule.
	want := []time.Duration{0, 10 * time.Hour, 34 * time.Hour}
	if len(calls) != len(want) {
		t.Fatalf("%d attempts, want %d", len(calls), len(want))
	}
	for i, c := range calls {
		if c.offset != want[i] || c.in.Final != (i == len(want)-1) {
			t.Errorf("attempt %d at +%v final=%v, want +%v final=%v", c.in.Attempt, c.offset, c.in.Final, want[i], i == len(want)-1)
		}
	}

	env, start = newWebhookEnv(t)
	m = webhookMock{}
	m.install(env, start, func(_ int, in activities.DeliveryAttemptInput) (activities.DeliveryAttemptResult, error) {
		return webhookOK(in)
	})
	env.ExecuteWorkflow(WebhookDeliveryWorkflow, WebhookDeliveryInput{Shape: webhookTestShape, DeliveryID: "dlv_last", PreviousAttempts: 7, ResumeSlot: 99})
	res = webhookResult(t, env)
	calls = m.get()
	if res.State != WebhookDeliveryStateDelivered || len(calls) != 1 || calls[0].in.Attempt != 8 || !calls[0].in.Final || calls[0].offset != 0 {
		t.Fatalf("resumed at the last slot: %+v, calls %+v", res, calls)
	}
}

func TestWebhookDeliveryWorkflowDeliveredAtOnce(t *testing.T) {
	env, start := newWebhookEnv(t)
	var m webhookMock
	m.install(env, start, func(_ int, in activities.DeliveryAttemptInput) (activities.DeliveryAttemptResult, error) {
		return webhookOK(in)
	})
	env.ExecuteWorkflow(WebhookDeliveryWorkflow, WebhookDeliveryInput{Shape: webhookTestShape, DeliveryID: "dlv_ok"})
	res := webhookResult(t, env)
	if res.State != WebhookDeliveryStateDelivered || res.Attempts != 1 || len(m.get()) != 1 || !env.Now().Equal(start) {
		t.Fatalf("result %+v, calls %d, ended +%v", res, len(m.get()), env.Now().Sub(start))
	}
}

func TestWebhookDeliveryWorkflowRetrySignalWhileWaiting(t *testing.T) {
	env, start := newWebhookEnv(t)
	var m webhookMock
	// Attempt 1 fails at +0; a retry at +20s fails too; the scheduled
	// attempt 2 still comes at +1m (the signal does not reset the schedule)
	// and fails; a retry at +3m delivers.
	m.install(env, start, func(n int, in activities.DeliveryAttemptInput) (activities.DeliveryAttemptResult, error) {
		if n == 4 {
			return webhookOK(in)
		}
		return webhookFail(in)
	})
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(WebhookRetrySignal, nil) }, 20*time.Second)
	env.RegisterDelayedCallback(func() {
		// Two signals in one burst make one attempt.
		env.SignalWorkflow(WebhookRetrySignal, nil)
		env.SignalWorkflow(WebhookRetrySignal, nil)
	}, 3*time.Minute)
	env.ExecuteWorkflow(WebhookDeliveryWorkflow, WebhookDeliveryInput{Shape: webhookTestShape, DeliveryID: "dlv_signal"})

	res := webhookResult(t, env)
	if res.State != WebhookDeliveryStateDelivered || res.Attempts != 4 {
		t.Fatalf("result %+v", res)
	}
	calls := m.get()
	want := []time.Duration{0, 20 * time.Second, time.Minute, 3 * time.Minute}
	if len(calls) != len(want) {
		t.Fatalf("%d attempts, want %d", len(calls), len(want))
	}
	webhookCheckIDs(t, calls, "dlv_signal", 1)
	for i, c := range calls {
		if c.offset != want[i] || c.in.Final {
			t.Errorf("attempt %d at +%v final=%v, want +%v", i+1, c.offset, c.in.Final, want[i])
		}
	}
	if env.Now().Sub(start) != 3*time.Minute {
		t.Errorf("ended at +%v, want +3m (pending timer cancelled)", env.Now().Sub(start))
	}
}

// TestWebhookDeliveryRetryPastTheLimitContinues: the 21st retry of one
// run, in the 10 h wait before slot 7, is answered: the run continues as
// new with one extra attempt at once and slot 7 at its due time (before, it
// was acknowledged and ignored until slot 7, nearly ten hours later). The
// continued run is then executed: its retry at once, slot 7 when due.
func TestWebhookDeliveryRetryPastTheLimitContinues(t *testing.T) {
	env, start := newWebhookEnv(t)
	var m webhookMock
	m.install(env, start, func(_ int, in activities.DeliveryAttemptInput) (activities.DeliveryAttemptResult, error) {
		return webhookFail(in)
	})
	offsets := webhookScheduleOffsets()
	for i := 1; i <= webhookMaxExtraAttempts+1; i++ { // one a minute after slot 6
		env.RegisterDelayedCallback(func() { env.SignalWorkflow(WebhookRetrySignal, nil) }, offsets[5]+time.Duration(i)*time.Minute)
	}
	env.ExecuteWorkflow(WebhookDeliveryWorkflow, WebhookDeliveryInput{Shape: webhookTestShape, DeliveryID: "dlv_limit"})
	if !env.IsWorkflowCompleted() {
		t.Fatal("workflow did not complete")
	}
	var can *workflow.ContinueAsNewError
	if err := env.GetWorkflowError(); !errors.As(err, &can) {
		t.Fatalf("the 21st retry: %v, want the run continued as new", err)
	}
	if got := env.Now().Sub(start); got != offsets[5]+time.Duration(webhookMaxExtraAttempts+1)*time.Minute {
		t.Errorf("continued at +%v, want at the 21st retry", got)
	}
	if n := len(m.get()); n != 6+webhookMaxExtraAttempts {
		t.Errorf("%d attempts before continuing, want 6 scheduled and %d extra", n, webhookMaxExtraAttempts)
	}
	var next WebhookDeliveryInput
	if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &next); err != nil {
		t.Fatal(err)
	}
	want := WebhookDeliveryInput{DeliveryID: "dlv_limit", PreviousAttempts: 6 + webhookMaxExtraAttempts, ResumeSlot: 6,
		RetryFirst: true, NextAttemptAt: start.Add(offsets[6]), Shape: ShapeCurrent}
	if !next.NextAttemptAt.Equal(want.NextAttemptAt) {
		t.Errorf("next slot due %v, want %v", next.NextAttemptAt, want.NextAttemptAt)
	}
	next.NextAttemptAt = want.NextAttemptAt
	if next != want {
		t.Fatalf("continued with %+v, want %+v", next, want)
	}

	// The continued run: the retry at once (an extra attempt), then slot 7
	// at its due time, delivered.
	env2, start2 := newWebhookEnv(t)
	at := start.Add(offsets[5] + time.Duration(webhookMaxExtraAttempts+1)*time.Minute)
	env2.SetStartTime(at)
	var m2 webhookMock
	m2.install(env2, start2, func(n int, in activities.DeliveryAttemptInput) (activities.DeliveryAttemptResult, error) {
		if n == 2 {
			return webhookOK(in)
		}
		return webhookFail(in)
	})
	env2.ExecuteWorkflow(WebhookDeliveryWorkflow, next)
	if res := webhookResult(t, env2); res.State != WebhookDeliveryStateDelivered || res.Attempts != 6+webhookMaxExtraAttempts+2 {
		t.Fatalf("continued run: %+v", res)
	}
	calls := m2.get()
	if len(calls) != 2 || calls[0].in.Slot != 0 || calls[0].in.Attempt != 27 || !start2.Add(calls[0].offset).Equal(at) ||
		calls[1].in.Slot != 7 || calls[1].in.Attempt != 28 || !start2.Add(calls[1].offset).Equal(start.Add(offsets[6])) {
		t.Fatalf("continued run's attempts: %+v", calls)
	}
}

func TestWebhookDeliveryWorkflowStatusQuery(t *testing.T) {
	env, start := newWebhookEnv(t)
	var m webhookMock
	m.install(env, start, func(n int, in activities.DeliveryAttemptInput) (activities.DeliveryAttemptResult, error) {
		if n == 3 {
			return webhookOK(in)
		}
		return webhookFail(in)
	})
	var st WebhookDeliveryStatus
	var queryErr error
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(WebhookStatusQuery)
		if err == nil {
			err = v.Get(&st)
		}
		queryErr = err
	}, 3*time.Minute)
	env.ExecuteWorkflow(WebhookDeliveryWorkflow, WebhookDeliveryInput{Shape: webhookTestShape, DeliveryID: "dlv_query"})
	webhookResult(t, env)
	if queryErr != nil {
		t.Fatal(queryErr)
	}
	// At +3m: attempts at +0 and +1m failed, the next is due at +6m.
	if st.DeliveryID != "dlv_query" || st.State != WebhookDeliveryStatePending || st.Attempts != 2 ||
		st.ScheduledAttempts != 2 || st.LastStatusCode != 503 || st.LastError != "status 503" ||
		!st.NextAttemptAt.Equal(start.Add(6*time.Minute)) {
		t.Fatalf("status %+v", st)
	}
}

func TestWebhookDeliveryWorkflowManualRetryAfterFailed(t *testing.T) {
	for _, tc := range []struct {
		name      string
		delivered bool
		want      string
	}{{"delivers", true, WebhookDeliveryStateDelivered}, {"fails again", false, WebhookDeliveryStateFailed}} {
		t.Run(tc.name, func(t *testing.T) {
			env, start := newWebhookEnv(t)
			var m webhookMock
			m.install(env, start, func(_ int, in activities.DeliveryAttemptInput) (activities.DeliveryAttemptResult, error) {
				if tc.delivered {
					return webhookOK(in)
				}
				return webhookFail(in)
			})
			// SignalWithStart on a closed workflow starts a new run with the
			// manual input and delivers the retry signal to it.
			env.RegisterDelayedCallback(func() { env.SignalWorkflow(WebhookRetrySignal, nil) }, 0)
			env.ExecuteWorkflow(WebhookDeliveryWorkflow, WebhookDeliveryInput{Shape: webhookTestShape, DeliveryID: "dlv_manual", ManualRetry: true, PreviousAttempts: 8})

			res := webhookResult(t, env)
			if res.State != tc.want || res.Attempts != 9 {
				t.Fatalf("result %+v", res)
			}
			calls := m.get()
			if len(calls) != 1 || calls[0].offset != 0 || !calls[0].in.Final {
				t.Fatalf("calls %+v, want one immediate final attempt", calls)
			}
			webhookCheckIDs(t, calls, "dlv_manual", 9)
		})
	}
}

func TestWebhookDeliveryWorkflowGoneStops(t *testing.T) {
	env, start := newWebhookEnv(t)
	var m webhookMock
	m.install(env, start, func(n int, in activities.DeliveryAttemptInput) (activities.DeliveryAttemptResult, error) {
		if n == 2 {
			return activities.DeliveryAttemptResult{}, temporal.NewNonRetryableApplicationError("gone", activities.DeliveryGoneErrorType, nil)
		}
		return webhookFail(in)
	})
	env.ExecuteWorkflow(WebhookDeliveryWorkflow, WebhookDeliveryInput{Shape: webhookTestShape, DeliveryID: "dlv_gone"})
	res := webhookResult(t, env)
	if res.State != WebhookDeliveryStateGone || len(m.get()) != 2 {
		t.Fatalf("result %+v after %d calls", res, len(m.get()))
	}
}

// A store hiccup is retried by Temporal within the same attempt: same
// delivery id, same attempt number.
func TestWebhookDeliveryWorkflowActivityRetryKeepsAttemptNumber(t *testing.T) {
	env, start := newWebhookEnv(t)
	var m webhookMock
	m.install(env, start, func(n int, in activities.DeliveryAttemptInput) (activities.DeliveryAttemptResult, error) {
		if n <= 2 {
			return activities.DeliveryAttemptResult{}, errors.New("database is locked")
		}
		return webhookOK(in)
	})
	env.ExecuteWorkflow(WebhookDeliveryWorkflow, WebhookDeliveryInput{Shape: webhookTestShape, DeliveryID: "dlv_flaky"})
	res := webhookResult(t, env)
	calls := m.get()
	if res.State != WebhookDeliveryStateDelivered || res.Attempts != 1 || len(calls) != 3 {
		t.Fatalf("result %+v after %d calls", res, len(calls))
	}
	for _, c := range calls {
		if c.in.DeliveryID != "dlv_flaky" || c.in.Attempt != 1 {
			t.Fatalf("call %+v", c.in)
		}
	}
}

func TestWebhookDeliveryWorkflowRejectsEmptyID(t *testing.T) {
	env, _ := newWebhookEnv(t)
	env.ExecuteWorkflow(WebhookDeliveryWorkflow, WebhookDeliveryInput{})
	if err := env.GetWorkflowError(); err == nil {
		t.Fatal("want an error for an empty delivery id")
	}
}

// --- the real activity, an in-memory store and a real loopback receiver ---

// webhookMemStore is an in-memory activities.DeliveryStore, idempotent by
// (delivery, attempt) as the interface requires.
type webhookMemStore struct {
	mu      sync.Mutex
	targets map[string]activities.DeliveryTarget
	records map[string][]activities.DeliveryAttemptRecord
}

func (s *webhookMemStore) LoadDeliveryTarget(_ context.Context, id string) (activities.DeliveryTarget, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.targets[id]
	if !ok {
		return t, activities.ErrDeliveryGone
	}
	return t, nil
}

func (s *webhookMemStore) RecordDeliveryAttempt(_ context.Context, r activities.DeliveryAttemptRecord) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, old := range s.records[r.DeliveryID] {
		if old.Attempt == r.Attempt {
			s.records[r.DeliveryID][i] = r
			return nil
		}
	}
	s.records[r.DeliveryID] = append(s.records[r.DeliveryID], r)
	return nil
}

func (s *webhookMemStore) get(id string) []activities.DeliveryAttemptRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]activities.DeliveryAttemptRecord(nil), s.records[id]...)
}

// webhookRealReceiver answers with failUntil failures (503) then 204, and
// checks every signature and webhook-id.
type webhookRealReceiver struct {
	*httptest.Server
	hits   atomic.Int32
	ids    sync.Map // webhook-id -> count
	badSig atomic.Int32
}

func newWebhookRealSetup(t *testing.T, failUntil int32) (*webhookRealReceiver, *webhookMemStore, *activities.WebhookActivities) {
	secret, err := webhook.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"event":"checkout.completed","data":{"amount":"32.61","livemode":false},"webhookDeliveryId":"dlv_real","timestamp":"2026-11-22T03:00:00.000Z"}`)
	r := &webhookRealReceiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		got, _ := io.ReadAll(req.Body)
		n := r.hits.Add(1)
		if string(got) != string(body) || webhook.Verify(secret, req.Header, got, webhook.DefaultTolerance, time.Now()) != nil {
			r.badSig.Add(1)
		}
		r.ids.Store(req.Header.Get(webhook.HeaderID), true)
		if failUntil < 0 || n <= failUntil {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.Close)
	store := &webhookMemStore{
		targets: map[string]activities.DeliveryTarget{"dlv_real": {URL: r.URL + "/hooks", Secret: secret, Body: body, Active: true}},
		records: map[string][]activities.DeliveryAttemptRecord{},
	}
	acts := &activities.WebhookActivities{
		Store:  store,
		Sender: webhook.NewSender(webhook.Policy{AllowLoopbackHTTP: true}, webhook.WithTimeout(5*time.Second)),
	}
	return r, store, acts
}

// newWebhookRealEnv runs the workflow with the real activity; the returned
// func lists the test-clock offsets at which attempts started.
func newWebhookRealEnv(t *testing.T, acts *activities.WebhookActivities) (*testsuite.TestWorkflowEnvironment, func() []time.Duration) {
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(webhookTestLogger())
	env := suite.NewTestWorkflowEnvironment()
	env.RegisterWorkflow(WebhookDeliveryWorkflow)
	env.RegisterActivity(acts)
	start := testClockStart
	env.SetStartTime(start)
	var mu sync.Mutex
	var offsets []time.Duration
	started := func() {
		mu.Lock()
		defer mu.Unlock()
		offsets = append(offsets, env.Now().Sub(start))
	}
	env.SetOnActivityStartedListener(func(*activity.Info, context.Context, converter.EncodedValues) { started() })
	env.SetOnLocalActivityStartedListener(func(*activity.Info, context.Context, []any) { started() })
	return env, func() []time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return append([]time.Duration(nil), offsets...)
	}
}

func TestWebhookDeliveryWorkflowRealActivityAlwaysFailing(t *testing.T) {
	rcv, store, acts := newWebhookRealSetup(t, -1)
	env, offsets := newWebhookRealEnv(t, acts)
	env.ExecuteWorkflow(WebhookDeliveryWorkflow, WebhookDeliveryInput{Shape: webhookTestShape, DeliveryID: "dlv_real"})

	res := webhookResult(t, env)
	if res.State != WebhookDeliveryStateFailed || res.Attempts != 8 || res.LastStatusCode != 503 {
		t.Fatalf("result %+v", res)
	}
	if got, want := fmt.Sprint(offsets()), fmt.Sprint(webhookScheduleOffsets()); got != want {
		t.Fatalf("attempts at %s, want %s", got, want)
	}
	if rcv.hits.Load() != 8 || rcv.badSig.Load() != 0 {
		t.Fatalf("receiver: %d hits, %d bad signatures", rcv.hits.Load(), rcv.badSig.Load())
	}
	webhookCheckReceiverIDs(t, rcv, "dlv_real")
	recs := store.get("dlv_real")
	if len(recs) != 8 {
		t.Fatalf("%d records, want 8", len(recs))
	}
	for i, r := range recs {
		want := activities.DeliveryStatusPending
		if i == 7 {
			want = activities.DeliveryStatusFailed
		}
		if r.Attempt != i+1 || r.Status != want || r.ResponseStatus != 503 {
			t.Errorf("record %d: %+v", i+1, r)
		}
	}

	// Support retries the failed delivery: SignalWithStart starts a manual
	// run, the receiver has recovered, and attempt 9 delivers.
	rcv2, store2, acts2 := newWebhookRealSetup(t, 0)
	store2.records["dlv_real"] = recs
	env2, offsets2 := newWebhookRealEnv(t, acts2)
	env2.RegisterDelayedCallback(func() { env2.SignalWorkflow(WebhookRetrySignal, nil) }, 0)
	env2.ExecuteWorkflow(WebhookDeliveryWorkflow, WebhookDeliveryInput{Shape: webhookTestShape, DeliveryID: "dlv_real", ManualRetry: true, PreviousAttempts: len(recs)})
	res = webhookResult(t, env2)
	if res.State != WebhookDeliveryStateDelivered || res.Attempts != 9 || len(offsets2()) != 1 || rcv2.hits.Load() != 1 {
		t.Fatalf("manual retry: %+v, %d attempts", res, len(offsets2()))
	}
	recs = store2.get("dlv_real")
	if last := recs[len(recs)-1]; len(recs) != 9 || last.Attempt != 9 || last.Status != activities.DeliveryStatusDelivered || last.ResponseStatus != 204 {
		t.Fatalf("records after manual retry: %+v", recs)
	}
}

func TestWebhookDeliveryWorkflowRealActivityRecoversOnAttempt4(t *testing.T) {
	rcv, store, acts := newWebhookRealSetup(t, 3)
	env, offsets := newWebhookRealEnv(t, acts)
	env.ExecuteWorkflow(WebhookDeliveryWorkflow, WebhookDeliveryInput{Shape: webhookTestShape, DeliveryID: "dlv_real"})

	res := webhookResult(t, env)
	if res.State != WebhookDeliveryStateDelivered || res.Attempts != 4 || res.LastStatusCode != 204 {
		t.Fatalf("result %+v", res)
	}
	if got, want := fmt.Sprint(offsets()), fmt.Sprint(webhookScheduleOffsets()[:4]); got != want {
		t.Fatalf("attempts at %s, want %s", got, want)
	}
	webhookCheckReceiverIDs(t, rcv, "dlv_real")
	recs := store.get("dlv_real")
	if len(recs) != 4 || recs[3].Status != activities.DeliveryStatusDelivered || recs[2].Status != activities.DeliveryStatusPending {
		t.Fatalf("records %+v", recs)
	}
}

func TestWebhookDeliveryWorkflowRealActivityRetrySignal(t *testing.T) {
	rcv, store, acts := newWebhookRealSetup(t, 1)
	env, offsets := newWebhookRealEnv(t, acts)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(WebhookRetrySignal, nil) }, 10*time.Second)
	env.ExecuteWorkflow(WebhookDeliveryWorkflow, WebhookDeliveryInput{Shape: webhookTestShape, DeliveryID: "dlv_real"})
	res := webhookResult(t, env)
	if res.State != WebhookDeliveryStateDelivered || res.Attempts != 2 {
		t.Fatalf("result %+v", res)
	}
	if got := fmt.Sprint(offsets()); got != fmt.Sprint([]time.Duration{0, 10 * time.Second}) {
		t.Fatalf("attempts at %s", got)
	}
	if rcv.hits.Load() != 2 || len(store.get("dlv_real")) != 2 {
		t.Fatalf("hits %d records %d", rcv.hits.Load(), len(store.get("dlv_real")))
	}
}

// webhookCheckReceiverIDs asserts every attempt carried the same webhook-id.
func webhookCheckReceiverIDs(t *testing.T, rcv *webhookRealReceiver, id string) {
	t.Helper()
	var ids []string
	rcv.ids.Range(func(k, _ any) bool { ids = append(ids, k.(string)); return true })
	if len(ids) != 1 || ids[0] != id {
		t.Fatalf("webhook-id headers seen: %v, want only %q", ids, id)
	}
}

// A retry signal that arrives while the 8th attempt is running must not be
// lost when that attempt fails: one more final attempt answers it.
func TestWebhookDeliveryWorkflowRetryDuringFinalAttempt(t *testing.T) {
	env, start := newWebhookEnv(t)
	var m webhookMock
	m.install(env, start, func(n int, in activities.DeliveryAttemptInput) (activities.DeliveryAttemptResult, error) {
		if n == 8 {
			env.SignalWorkflow(WebhookRetrySignal, nil)
		}
		return webhookFail(in)
	})
	env.ExecuteWorkflow(WebhookDeliveryWorkflow, WebhookDeliveryInput{Shape: webhookTestShape, DeliveryID: "dlv_late"})
	res := webhookResult(t, env)
	calls := m.get()
	if res.State != WebhookDeliveryStateFailed || res.Attempts != 9 || len(calls) != 9 {
		t.Fatalf("result %+v after %d calls", res, len(calls))
	}
	if !calls[7].in.Final || !calls[8].in.Final || calls[8].offset != calls[7].offset {
		t.Fatalf("late retry: %+v / %+v", calls[7], calls[8])
	}
	webhookCheckIDs(t, calls, "dlv_late", 1)
}

// TestWebhookDeliveryLateRetriesPastTheLimitContinue: retries that keep
// arriving while a failed delivery's final attempts run are answered twenty
// times in the run; the twenty-first continues it as a one-attempt manual
// run (before, it was dropped with the closing workflow).
func TestWebhookDeliveryLateRetriesPastTheLimitContinue(t *testing.T) {
	env, start := newWebhookEnv(t)
	var m webhookMock
	m.install(env, start, func(_ int, in activities.DeliveryAttemptInput) (activities.DeliveryAttemptResult, error) {
		env.SignalWorkflow(WebhookRetrySignal, nil) // a retry during every attempt
		return webhookFail(in)
	})
	env.ExecuteWorkflow(WebhookDeliveryWorkflow, WebhookDeliveryInput{Shape: webhookTestShape, DeliveryID: "dlv_late",
		PreviousAttempts: 7, ResumeSlot: WebhookDeliveryMaxAttempts - 1})
	var can *workflow.ContinueAsNewError
	if err := env.GetWorkflowError(); !errors.As(err, &can) {
		t.Fatalf("the retry past the limit: %v, want the run continued as new", err)
	}
	if n := len(m.get()); n != 1+webhookMaxExtraAttempts {
		t.Fatalf("%d attempts, want the final slot and %d extra", n, webhookMaxExtraAttempts)
	}
	var next WebhookDeliveryInput
	if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &next); err != nil {
		t.Fatal(err)
	}
	if want := (WebhookDeliveryInput{DeliveryID: "dlv_late", ManualRetry: true, PreviousAttempts: 7 + 1 + webhookMaxExtraAttempts,
		Shape: ShapeCurrent}); next != want {
		t.Fatalf("continued with %+v, want %+v", next, want)
	}
}

// --- replay over histories recorded on a real Temporal dev server ---

// webhookHistoryFiles are the saved histories; regenerate them with
// TestWebhookDeliveryRecordHistories.
var webhookHistoryFiles = []string{
	"testdata/webhook_delivery_retry_signal.json",
	"testdata/webhook_delivery_manual_retry.json",
}

// webhookLocalHistoryFiles are the same two runs in the local shape
// (ShapeLocalEffects: each attempt a local activity).
var webhookLocalHistoryFiles = []string{
	"testdata/webhook_delivery_local_retry_signal.json",
	"testdata/webhook_delivery_local_manual_retry.json",
}

// webhookContinueHistoryFile is a run that answered twenty retries and
// continued as new at the twenty-first (delivery-retry-continue, version 1).
const webhookContinueHistoryFile = "testdata/webhook_delivery_local_retry_continue.json"

// webhookFailedHistoryFiles are a one-attempt manual run that fails,
// recorded before the run marked a failed delivery with the DeliveryStatus
// search attribute (no marker of delivery-failed-attribute) and after.
var webhookFailedHistoryFiles = []string{
	"testdata/webhook_delivery_local_manual_failed_v0.json",
	"testdata/webhook_delivery_local_manual_failed.json",
}

// webhookAllHistoryFiles is every saved delivery history, of both shapes.
func webhookAllHistoryFiles() []string {
	return append(append(append(append([]string(nil), webhookHistoryFiles...), webhookLocalHistoryFiles...), webhookContinueHistoryFile),
		webhookFailedHistoryFiles...)
}

// TestWebhookDeliveryReplay replays every saved history against the current
// workflow code: a change that is not deterministic fails here.
func TestWebhookDeliveryReplay(t *testing.T) {
	replayHistories(t, webhookAllHistoryFiles(), WebhookDeliveryWorkflow)
}

// webhookDeliveryWaitFirst is WebhookDeliveryWorkflow with one change that
// breaks determinism: it waits before the first attempt.
func webhookDeliveryWaitFirst(ctx workflow.Context, in WebhookDeliveryInput) (WebhookDeliveryResult, error) {
	if err := workflow.Sleep(ctx, time.Second); err != nil {
		return WebhookDeliveryResult{}, err
	}
	return WebhookDeliveryWorkflow(ctx, in)
}

// TestWebhookDeliveryReplayDetectsNondeterminism proves the replay test has
// teeth: a changed workflow fails against the saved histories.
func TestWebhookDeliveryReplayDetectsNondeterminism(t *testing.T) {
	replayMustDiverge(t, webhookAllHistoryFiles(), "WebhookDeliveryWorkflow", webhookDeliveryWaitFirst)
}

// TestWebhookDeliveryRecordHistories records the histories replayed above
// from a real Temporal server. It runs only when WEBHOOK_RECORD_TEMPORAL is
// set to the server's host:port, e.g.
//
//	.cache/bin/temporal server start-dev --headless --port 7399 &
//	WEBHOOK_RECORD_TEMPORAL=127.0.0.1:7399 go test ./workflows/ -run TestWebhookDeliveryRecordHistories
//
// Existing files are kept; delete one to record it again.
func TestWebhookDeliveryRecordHistories(t *testing.T) {
	addr := os.Getenv("WEBHOOK_RECORD_TEMPORAL")
	if addr == "" {
		t.Skip("set WEBHOOK_RECORD_TEMPORAL=host:port of a dev server to re-record the replay histories")
	}
	c, err := client.Dial(client.Options{HostPort: addr, Logger: webhookTestLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	recordWebhookHistories(t, c, ShapeRemoteEffects, webhookHistoryFiles)
	recordWebhookHistories(t, c, ShapeLocalEffects, webhookLocalHistoryFiles)
	recordWebhookContinueHistory(t, c)
	for _, f := range webhookFailedHistoryFiles {
		recordWebhookFailedHistory(t, c, f)
	}
}

// startWebhookRecorder runs a worker of the delivery workflow and acts on
// queue; the answer stops it.
func startWebhookRecorder(t *testing.T, c client.Client, queue string, acts *activities.WebhookActivities) (stop func()) {
	t.Helper()
	w := worker.New(c, queue, worker.Options{})
	w.RegisterWorkflow(WebhookDeliveryWorkflow)
	w.RegisterActivity(acts)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	return w.Stop
}

// recordWebhookFailedHistory records a one-attempt manual run against a
// receiver that always fails, into file unless it exists (each of the
// files is recorded by the code of its time).
func recordWebhookFailedHistory(t *testing.T, c client.Client, file string) {
	if _, err := os.Stat(file); err == nil {
		t.Logf("kept the saved %s", file)
		return
	}
	_, _, acts := newWebhookRealSetup(t, 1<<30)
	queue := "webhook-record-failed-" + time.Now().UTC().Format("150405.000")
	defer startWebhookRecorder(t, c, queue, acts)()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id := WebhookDeliveryWorkflowID("dlv_real") + "-" + queue
	run, err := c.SignalWithStartWorkflow(ctx, id, WebhookRetrySignal, nil, client.StartWorkflowOptions{ID: id, TaskQueue: queue},
		WebhookDeliveryWorkflow, WebhookDeliveryInput{Shape: ShapeCurrent, DeliveryID: "dlv_real", ManualRetry: true, PreviousAttempts: 8})
	if err != nil {
		t.Fatal(err)
	}
	var res WebhookDeliveryResult
	if err := run.Get(ctx, &res); err != nil || res.State != WebhookDeliveryStateFailed || res.Attempts != 9 {
		t.Fatalf("failed manual run: %+v %v", res, err)
	}
	webhookSaveHistory(ctx, t, c, id, run.GetRunID(), file)
}

// recordWebhookContinueHistory records a run that answers twenty retries
// against a receiver that always fails and continues as new at the
// twenty-first; the continued run is terminated once it has started.
func recordWebhookContinueHistory(t *testing.T, c client.Client) {
	if _, err := os.Stat(webhookContinueHistoryFile); err == nil {
		t.Logf("kept the saved %s", webhookContinueHistoryFile)
		return
	}
	_, store, acts := newWebhookRealSetup(t, 1<<30)
	queue := "webhook-record-continue-" + time.Now().UTC().Format("150405.000")
	defer startWebhookRecorder(t, c, queue, acts)()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id := WebhookDeliveryWorkflowID("dlv_real") + "-" + queue
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, WebhookDeliveryWorkflow,
		WebhookDeliveryInput{Shape: ShapeCurrent, DeliveryID: "dlv_real"})
	if err != nil {
		t.Fatal(err)
	}
	waitRecords := func(n int) {
		for len(store.get("dlv_real")) < n {
			select {
			case <-ctx.Done():
				t.Fatalf("attempt %d never happened", n)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	waitRecords(1)
	for n := 2; n <= webhookMaxExtraAttempts+2; n++ { // the last retry is answered by the continued run
		if err := c.SignalWorkflow(ctx, id, "", WebhookRetrySignal, nil); err != nil {
			t.Fatal(err)
		}
		waitRecords(n)
	}
	var res WebhookDeliveryResult
	var can *workflow.ContinueAsNewError
	if err := run.GetWithOptions(ctx, &res, client.WorkflowRunGetOptions{DisableFollowingRuns: true}); !errors.As(err, &can) {
		t.Fatalf("first run: %+v %v, want continued as new", res, err)
	}
	webhookSaveHistory(ctx, t, c, id, run.GetRunID(), webhookContinueHistoryFile)
	if err := c.TerminateWorkflow(ctx, id, "", "recorded"); err != nil {
		t.Fatal(err)
	}
}

// recordWebhookHistories runs the recorded deliveries in one shape and
// saves their histories to files; a saved history is the record of the
// code that wrote it, so an existing file is kept (delete it to record it
// again).
func recordWebhookHistories(t *testing.T, c client.Client, shape int, files []string) {
	// Receiver: the first POST fails, every later one succeeds.
	rcv, store, acts := newWebhookRealSetup(t, 1)
	queue := fmt.Sprintf("webhook-record-%d-%s", shape, time.Now().UTC().Format("150405.000"))
	w := worker.New(c, queue, worker.Options{})
	w.RegisterWorkflow(WebhookDeliveryWorkflow)
	w.RegisterActivity(acts)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// 1. Attempt 1 fails, the retry signal makes attempt 2 at once, which
	// delivers; the 1-minute timer is cancelled.
	id1 := WebhookDeliveryWorkflowID("dlv_real") + "-" + queue
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id1, TaskQueue: queue}, WebhookDeliveryWorkflow, WebhookDeliveryInput{Shape: shape, DeliveryID: "dlv_real"})
	if err != nil {
		t.Fatal(err)
	}
	firstRunID := run.GetRunID()
	for len(store.get("dlv_real")) < 1 {
		select {
		case <-ctx.Done():
			t.Fatal("attempt 1 never happened")
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := c.SignalWorkflow(ctx, id1, "", WebhookRetrySignal, nil); err != nil {
		t.Fatal(err)
	}
	var res WebhookDeliveryResult
	if err := run.Get(ctx, &res); err != nil || res.State != WebhookDeliveryStateDelivered || res.Attempts != 2 {
		t.Fatalf("run 1: %+v %v", res, err)
	}

	// 2. The manual path: SignalWithStart on a closed workflow id starts a
	// one-attempt run that delivers attempt 3.
	run, err = c.SignalWithStartWorkflow(ctx, id1, WebhookRetrySignal, nil,
		client.StartWorkflowOptions{ID: id1, TaskQueue: queue}, WebhookDeliveryWorkflow,
		WebhookDeliveryInput{Shape: shape, DeliveryID: "dlv_real", ManualRetry: true, PreviousAttempts: 2})
	if err != nil {
		t.Fatal(err)
	}
	manualRunID := run.GetRunID()
	if err := run.Get(ctx, &res); err != nil || res.State != WebhookDeliveryStateDelivered || res.Attempts != 3 {
		t.Fatalf("run 2: %+v %v", res, err)
	}
	if rcv.hits.Load() != 3 {
		t.Fatalf("receiver hits %d, want 3", rcv.hits.Load())
	}

	for i, runID := range []string{firstRunID, manualRunID} {
		if _, err := os.Stat(files[i]); err == nil {
			t.Logf("kept the saved %s", files[i])
			continue
		}
		webhookSaveHistory(ctx, t, c, id1, runID, files[i])
	}
}

func webhookSaveHistory(ctx context.Context, t *testing.T, c client.Client, id, runID, file string) {
	t.Helper()
	hist := &historypb.History{}
	it := c.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		hist.Events = append(hist.Events, ev)
	}
	data, err := temporalproto.CustomJSONMarshalOptions{Indent: "  "}.Marshal(hist)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, append(data, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("saved %d events of %s to %s", len(hist.Events), id, file)
}
