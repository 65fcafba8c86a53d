package api_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/metrics"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
)

func newMetrics() *metrics.Metrics { return metrics.New() }

func scrapeMetrics(t *testing.T, url string) string {
	t.Helper()
	res, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 {
		t.Fatalf("/metrics answered %d: %s", res.StatusCode, b)
	}
	return string(b)
}

// TestRequestMetricsByRoute: requests are counted and timed by Gin's route
// pattern, method and status; raw paths (ids) never become labels.
func TestRequestMetricsByRoute(t *testing.T) {
	st := storetest.Open(t, "sqlite")
	m := metrics.New()
	h := newHarness(t, st, func(d *api.Deps) { d.Metrics = m })
	mer := h.signup()
	id := h.link(mer.TestKey, nil)
	expect(t, h.do("GET", "/api/payment-links/"+id, mer.TestKey, nil), 200, "")
	missing := models.NewID()
	expect(t, h.do("GET", "/api/payment-links/"+missing, mer.TestKey, nil), 404, "NOT_FOUND")
	expect(t, h.do("GET", "/api/no/such/route/"+missing, "", nil), 404, "NOT_FOUND")
	ops := httptest.NewServer(api.OpsHandler(m.Handler(), nil, nil))
	defer ops.Close()
	out := scrapeMetrics(t, ops.URL)
	for _, want := range []string{
		`paygate_http_requests_total{method="POST",route="/api/auth/signup",status="201"} 1`,
		`paygate_http_requests_total{method="POST",route="/api/payment-links",status="201"} 1`,
		`paygate_http_requests_total{method="GET",route="/api/payment-links/:id",status="200"} 1`,
		`paygate_http_requests_total{method="GET",route="/api/payment-links/:id",status="404"} 1`,
		`paygate_http_requests_total{method="GET",route="(no route)",status="404"} 1`,
		`paygate_http_request_duration_seconds_count{method="GET",route="/api/payment-links/:id",status="200"} 1`,
		`paygate_http_requests_in_flight 0`, // the scrape is served by another listener
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %s", want)
		}
	}
	for _, raw := range []string{id, missing, mer.TestKey} {
		if strings.Contains(out, raw) {
			t.Errorf("raw value %s became a label", raw)
		}
	}
}

// TestMetricsNotOnAPIPort: the API's handler does not serve /metrics (it
// tells anyone checkout outcomes and volumes): GET /metrics there is the
// router's 404, while the operational handler serves it with the probes.
func TestMetricsNotOnAPIPort(t *testing.T) {
	st := storetest.Open(t, "sqlite")
	m := metrics.New()
	h := newHarness(t, st, func(d *api.Deps) { d.Metrics = m })
	h.signup()
	res, err := http.Get(h.http.URL + api.PathMetrics)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusNotFound || strings.Contains(string(body), "paygate_http_requests_total") {
		t.Fatalf("GET /metrics on the API port: %d %.200s", res.StatusCode, body)
	}
	ops := httptest.NewServer(api.OpsHandler(m.Handler(), []api.ReadyCheck{{Name: "store", Check: st.Ping}}, nil))
	defer ops.Close()
	if out := scrapeMetrics(t, ops.URL); !strings.Contains(out, `route="/api/auth/signup"`) {
		t.Errorf("operational listener lacks the API's request metrics")
	}
	for _, p := range []string{api.PathHealthz, api.PathReadyz} {
		res, err := http.Get(ops.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Errorf("operational %s: %d", p, res.StatusCode)
		}
	}
}
