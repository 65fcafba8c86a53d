package metrics_test

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/paygate/paygate/activities"
	"github.com/paygate/paygate/metrics"
)

func scrape(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("/metrics answered %d", rec.Code)
	}
	b, _ := io.ReadAll(rec.Body)
	return string(b)
}

func TestObserve(t *testing.T) {
	m := metrics.New()
	m.ObserveHTTP("/api/payment-links/:id", "GET", 200, 30*time.Millisecond)
	m.ObserveCheckoutOutcome("complete", "")
	m.ObserveCheckoutOutcome("failed", "UNDERPAID")
	m.ObserveCheckoutOutcome("failed", "free text with spaces")
	m.ObserveCheckoutOutcome("weird", "")
	m.ObserveWebhookAttempt(true, 204)
	m.ObserveWebhookAttempt(false, 0)
	m.ObserveWebhookAttempt(false, 503)
	var nilM *metrics.Metrics
	nilM.ObserveHTTP("/x", "GET", 200, 0) // a nil Metrics records nothing
	out := scrape(t, m)
	for _, want := range []string{
		`paygate_http_requests_total{method="GET",route="/api/payment-links/:id",status="200"} 1`,
		`paygate_http_request_duration_seconds_bucket{method="GET",route="/api/payment-links/:id",status="200",le="0.05"} 1`,
		`paygate_checkout_sessions_total{outcome="complete",reason=""} 1`,
		`paygate_checkout_sessions_total{outcome="failed",reason="UNDERPAID"} 1`,
		`paygate_checkout_sessions_total{outcome="failed",reason="other"} 1`,
		`paygate_checkout_sessions_total{outcome="other",reason=""} 1`,
		`paygate_webhook_attempts_total{result="delivered",status_class="2xx"} 1`,
		`paygate_webhook_attempts_total{result="failed",status_class="none"} 1`,
		`paygate_webhook_attempts_total{result="failed",status_class="5xx"} 1`,
		`go_goroutines`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %s", want)
		}
	}
}

func TestStatusClass(t *testing.T) {
	for in, want := range map[int]string{0: "none", 99: "none", 200: "2xx", 302: "3xx", 404: "4xx", 599: "5xx", 600: "none"} {
		if got := metrics.StatusClass(in); got != want {
			t.Errorf("StatusClass(%d) = %s, want %s", in, got, want)
		}
	}
}

func TestTemporalHandler(t *testing.T) {
	m := metrics.New()
	h := metrics.NewTemporalHandler(m.Registry)
	ns := h.WithTags(map[string]string{"namespace": "default"})
	ns.WithTags(map[string]string{"operation": "StartWorkflowExecution"}).Counter("temporal_request").Inc(2)
	// The same name with another tag set: unknown tags are dropped, missing ones empty.
	ns.WithTags(map[string]string{"task-queue": "q"}).Counter("temporal_request").Inc(1)
	ns.Gauge("temporal_num_pollers").Update(3)
	ns.WithTags(map[string]string{"operation": "PollWorkflowTaskQueue"}).Timer("temporal_request_latency").Record(20 * time.Millisecond)
	// A name reused with another kind is dropped, not a panic.
	ns.Timer("temporal_request").Record(time.Second)
	h.Counter("temporal_request").Inc(-1) // negative deltas are ignored
	out := scrape(t, m)
	for _, want := range []string{
		`temporal_request{namespace="default",operation="StartWorkflowExecution"} 2`,
		`temporal_request{namespace="default",operation=""} 1`,
		`temporal_num_pollers{namespace="default"} 3`,
		`temporal_request_latency_bucket{namespace="default",operation="PollWorkflowTaskQueue",le="0.032"} 1`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %s in\n%s", want, grep(out, "temporal_"))
		}
	}
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, f := range fams {
		if f.GetName() == "temporal_request" && len(f.GetMetric()) != 3 {
			t.Fatalf("temporal_request series: %d", len(f.GetMetric()))
		}
	}
}

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestOutcomeInterceptor: successful FinishSession and AttemptDelivery
// executions are counted by outcome; failed executions are not.
func TestOutcomeInterceptor(t *testing.T) {
	m := metrics.New()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{metrics.NewOutcomeInterceptor(m)}})
	fail := false
	env.RegisterActivityWithOptions(func(_ context.Context, o activities.SessionOutcome) error {
		if fail {
			return context.DeadlineExceeded
		}
		return nil
	}, activity.RegisterOptions{Name: "FinishSession"})
	env.RegisterActivityWithOptions(func(_ context.Context, in activities.DeliveryAttemptInput) (activities.DeliveryAttemptResult, error) {
		if in.Attempt == 1 {
			return activities.DeliveryAttemptResult{Delivered: false, StatusCode: 500, Status: "pending"}, nil
		}
		return activities.DeliveryAttemptResult{Delivered: true, StatusCode: 200, Status: "delivered"}, nil
	}, activity.RegisterOptions{Name: "AttemptDelivery"})

	for _, o := range []activities.SessionOutcome{{SessionID: "s", EntryID: "e", Status: "complete"},
		{SessionID: "s", EntryID: "e", Status: "failed", Reason: "LINK_DELETED"}, {SessionID: "s", EntryID: "e", Status: "expired"}} {
		if _, err := env.ExecuteActivity("FinishSession", o); err != nil {
			t.Fatal(err)
		}
	}
	fail = true
	if _, err := env.ExecuteActivity("FinishSession", activities.SessionOutcome{Status: "cancelled"}); err == nil {
		t.Fatal("want the activity error")
	}
	for _, a := range []int{1, 2} {
		if _, err := env.ExecuteActivity("AttemptDelivery", activities.DeliveryAttemptInput{DeliveryID: "d", Attempt: a}); err != nil {
			t.Fatal(err)
		}
	}
	for labels, want := range map[[2]string]float64{{"complete", ""}: 1, {"failed", "LINK_DELETED"}: 1, {"expired", ""}: 1, {"cancelled", ""}: 0} {
		if got := value(m.CheckoutSessions.WithLabelValues(labels[0], labels[1])); got != want {
			t.Errorf("sessions %v = %v, want %v", labels, got, want)
		}
	}
	if got := value(m.WebhookAttempts.WithLabelValues("failed", "5xx")); got != 1 {
		t.Errorf("failed 5xx attempts = %v", got)
	}
	if got := value(m.WebhookAttempts.WithLabelValues("delivered", "2xx")); got != 1 {
		t.Errorf("delivered 2xx attempts = %v", got)
	}
}

// value reads a counter's current value.
func value(c prometheus.Counter) float64 {
	var d dto.Metric
	if err := c.Write(&d); err != nil {
		panic(err)
	}
	return d.GetCounter().GetValue()
}
