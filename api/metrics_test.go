package api_test

import (
	"io"
	"net/http"
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
	out := scrapeMetrics(t, h.http.URL)
	for _, want := range []string{
		`paygate_http_requests_total{method="POST",route="/api/auth/signup",status="201"} 1`,
		`paygate_http_requests_total{method="POST",route="/api/payment-links",status="201"} 1`,
		`paygate_http_requests_total{method="GET",route="/api/payment-links/:id",status="200"} 1`,
		`paygate_http_requests_total{method="GET",route="/api/payment-links/:id",status="404"} 1`,
		`paygate_http_requests_total{method="GET",route="(no route)",status="404"} 1`,
		`paygate_http_request_duration_seconds_count{method="GET",route="/api/payment-links/:id",status="200"} 1`,
		`paygate_http_requests_in_flight 0`, // the scrape is served outside the router
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
