// Package metrics holds the service's Prometheus metrics: HTTP requests of
// the API, checkout session outcomes, webhook delivery attempts, and the
// Temporal SDK's own client and worker metrics (through [NewTemporalHandler]).
// One [Metrics] per process owns a private registry served by [Metrics.Handler].
package metrics

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Namespace prefixes paygate's own metric names.
const Namespace = "paygate"

// Checkout session outcomes (the label outcome of paygate_checkout_sessions_total).
const (
	OutcomeComplete  = "complete"
	OutcomeFailed    = "failed"
	OutcomeCancelled = "cancelled"
	OutcomeExpired   = "expired"
)

// Webhook attempt results (the label result of paygate_webhook_attempts_total).
const (
	ResultDelivered = "delivered"
	ResultFailed    = "failed"
)

// Metrics is the set of paygate's collectors on their own registry.
type Metrics struct {
	// Registry holds every collector of this process, the Temporal SDK's too.
	Registry *prometheus.Registry

	// HTTPRequests counts API requests by route (Gin's route pattern, never
	// the raw path), method and status.
	HTTPRequests *prometheus.CounterVec
	// HTTPDuration is the latency of API requests by route, method and status.
	HTTPDuration *prometheus.HistogramVec
	// HTTPInFlight is the number of API requests being served.
	HTTPInFlight prometheus.Gauge
	// CheckoutSessions counts finished checkout sessions by outcome and reason.
	CheckoutSessions *prometheus.CounterVec
	// WebhookAttempts counts webhook delivery attempts by result and the
	// receiver's status class (2xx, 4xx, 5xx, ..., or "none" without a response).
	WebhookAttempts *prometheus.CounterVec
}

// New registers paygate's collectors, plus the Go runtime and process
// collectors, on a new registry.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		Registry: reg,
		HTTPRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "http", Name: "requests_total",
			Help: "API requests by route pattern, method and status code.",
		}, []string{"route", "method", "status"}),
		HTTPDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Subsystem: "http", Name: "request_duration_seconds",
			Help:    "API request latency by route pattern, method and status code.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"route", "method", "status"}),
		HTTPInFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Subsystem: "http", Name: "requests_in_flight",
			Help: "API requests being served.",
		}),
		CheckoutSessions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "checkout", Name: "sessions_total",
			Help: "Finished checkout sessions by outcome (complete, failed, cancelled, expired) and reason code.",
		}, []string{"outcome", "reason"}),
		WebhookAttempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "webhook", Name: "attempts_total",
			Help: "Webhook delivery attempts by result (delivered, failed) and the receiver's status class.",
		}, []string{"result", "status_class"}),
	}
	reg.MustRegister(m.HTTPRequests, m.HTTPDuration, m.HTTPInFlight, m.CheckoutSessions, m.WebhookAttempts,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handler serves the registry in the Prometheus text (or OpenMetrics) format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry, EnableOpenMetrics: true})
}

// ObserveHTTP records one served request. route must be a route pattern
// ("/api/payment-links/:id"), never a raw path, so the label set stays small.
func (m *Metrics) ObserveHTTP(route, method string, status int, d time.Duration) {
	if m == nil {
		return
	}
	s := strconv.Itoa(status)
	m.HTTPRequests.WithLabelValues(route, method, s).Inc()
	m.HTTPDuration.WithLabelValues(route, method, s).Observe(d.Seconds())
}

// ObserveCheckoutOutcome counts a finished session. reason is the failure or
// cancel reason code ("" for none).
func (m *Metrics) ObserveCheckoutOutcome(outcome, reason string) {
	if m == nil {
		return
	}
	switch outcome {
	case OutcomeComplete, OutcomeFailed, OutcomeCancelled, OutcomeExpired:
	default:
		outcome = "other"
	}
	m.CheckoutSessions.WithLabelValues(outcome, reasonLabel(reason)).Inc()
}

// ObserveWebhookAttempt counts one delivery attempt; status is the
// receiver's HTTP status, 0 when no response arrived.
func (m *Metrics) ObserveWebhookAttempt(delivered bool, status int) {
	if m == nil {
		return
	}
	result := ResultFailed
	if delivered {
		result = ResultDelivered
	}
	m.WebhookAttempts.WithLabelValues(result, StatusClass(status)).Inc()
}

// reasonLabel keeps the reason label bounded: reason codes pass, anything
// else (free text, very long values) becomes "other".
func reasonLabel(reason string) string {
	if len(reason) > 64 {
		return "other"
	}
	for _, r := range reason {
		if !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return "other"
		}
	}
	return reason
}

// StatusClass turns an HTTP status into its class ("2xx"), or "none" for 0
// and anything outside 100-599.
func StatusClass(status int) string {
	if status < 100 || status > 599 {
		return "none"
	}
	return strconv.Itoa(status/100) + "xx"
}
