package metrics

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/client"
)

// TemporalBuckets are the histogram buckets (seconds) of the Temporal SDK's
// timers: 1 ms to about 9 minutes, doubling.
var TemporalBuckets = prometheus.ExponentialBuckets(0.001, 2, 20)

// NewTemporalHandler returns a client.MetricsHandler that records the
// Temporal SDK's client and worker metrics (temporal_request,
// temporal_workflow_task_schedule_to_start_latency, temporal_activity_execution_failed,
// ...) on reg. Set it as client.Options.MetricsHandler.
//
// Counters become Prometheus counters, gauges gauges and timers histograms in
// seconds ([TemporalBuckets]), under the SDK's own names. Prometheus needs a
// fixed label set per metric name while the SDK's tags vary a little between
// call sites: the label names are fixed by a metric's first use, a tag
// unknown to them is dropped and a missing one is the empty string.
//
// This is a small adapter over client_golang rather than the SDK's
// contrib/tally handler with tally's Prometheus reporter, which would add
// the tally modules to go.mod for what fits in a page.
func NewTemporalHandler(reg prometheus.Registerer) client.MetricsHandler {
	return &temporalHandler{fams: &families{reg: reg, byName: map[string]*family{}}}
}

type temporalHandler struct {
	fams *families
	tags map[string]string
}

// families holds one Prometheus vector per SDK metric name.
type families struct {
	reg    prometheus.Registerer
	mu     sync.Mutex
	byName map[string]*family
}

type kind int

const (
	kindCounter kind = iota
	kindGauge
	kindTimer
)

type family struct {
	kind   kind
	labels []string
	// Exactly one of these is set; all are nil when registration failed
	// (the metric is then dropped).
	counter *prometheus.CounterVec
	gauge   *prometheus.GaugeVec
	timer   *prometheus.HistogramVec
}

func (f *family) values(tags map[string]string) []string {
	out := make([]string, len(f.labels))
	for i, l := range f.labels {
		out[i] = tags[l]
	}
	return out
}

// get returns the family of name, creating and registering it with the
// label names of tags on first use. A name already used with another kind,
// or refused by the registry, yields nil.
func (fs *families) get(name string, k kind, tags map[string]string) *family {
	name = sanitize(name)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f, ok := fs.byName[name]; ok {
		if f.kind != k {
			return nil
		}
		return f
	}
	labels := make([]string, 0, len(tags))
	for _, t := range slices.Sorted(maps.Keys(tags)) {
		labels = append(labels, t)
	}
	f := &family{kind: k, labels: labels}
	help := "Temporal SDK metric " + name + "."
	var c prometheus.Collector
	switch k {
	case kindCounter:
		f.counter = prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
		c = f.counter
	case kindGauge:
		f.gauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
		c = f.gauge
	case kindTimer:
		f.timer = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help + " Seconds.", Buckets: TemporalBuckets}, labels)
		c = f.timer
	}
	if err := fs.reg.Register(c); err != nil {
		f.counter, f.gauge, f.timer = nil, nil, nil
	}
	fs.byName[name] = f
	return f
}

// WithTags returns a handler whose metrics carry tags on top of these.
func (h *temporalHandler) WithTags(tags map[string]string) client.MetricsHandler {
	merged := make(map[string]string, len(h.tags)+len(tags))
	for k, v := range h.tags {
		merged[sanitize(k)] = v
	}
	for k, v := range tags {
		merged[sanitize(k)] = v
	}
	return &temporalHandler{fams: h.fams, tags: merged}
}

// Counter returns the counter of name with this handler's tags.
func (h *temporalHandler) Counter(name string) client.MetricsCounter {
	f := h.fams.get(name, kindCounter, h.tags)
	if f == nil || f.counter == nil {
		return client.MetricsNopHandler.Counter(name)
	}
	c, err := f.counter.GetMetricWithLabelValues(f.values(h.tags)...)
	if err != nil {
		return client.MetricsNopHandler.Counter(name)
	}
	return counterFunc(func(d int64) {
		if d > 0 {
			c.Add(float64(d))
		}
	})
}

// Gauge returns the gauge of name with this handler's tags.
func (h *temporalHandler) Gauge(name string) client.MetricsGauge {
	f := h.fams.get(name, kindGauge, h.tags)
	if f == nil || f.gauge == nil {
		return client.MetricsNopHandler.Gauge(name)
	}
	g, err := f.gauge.GetMetricWithLabelValues(f.values(h.tags)...)
	if err != nil {
		return client.MetricsNopHandler.Gauge(name)
	}
	return gaugeFunc(g.Set)
}

// Timer returns the timer (a histogram in seconds) of name with this
// handler's tags.
func (h *temporalHandler) Timer(name string) client.MetricsTimer {
	f := h.fams.get(name, kindTimer, h.tags)
	if f == nil || f.timer == nil {
		return client.MetricsNopHandler.Timer(name)
	}
	o, err := f.timer.GetMetricWithLabelValues(f.values(h.tags)...)
	if err != nil {
		return client.MetricsNopHandler.Timer(name)
	}
	return timerFunc(func(d time.Duration) { o.Observe(d.Seconds()) })
}

type counterFunc func(int64)

func (f counterFunc) Inc(d int64) { f(d) }

type gaugeFunc func(float64)

func (f gaugeFunc) Update(v float64) { f(v) }

type timerFunc func(time.Duration)

func (f timerFunc) Record(d time.Duration) { f(d) }

// sanitize makes s a valid Prometheus metric or label name.
func sanitize(s string) string {
	if s == "" {
		return "_"
	}
	var b strings.Builder
	for i, r := range s {
		ok := r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || (i > 0 && r >= '0' && r <= '9')
		if ok {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}
