package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
)

func getJSON(t *testing.T, url string) (int, api.HealthBody) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var b api.HealthBody
	if err := json.NewDecoder(res.Body).Decode(&b); err != nil {
		t.Fatalf("GET %s: not JSON: %v", url, err)
	}
	return res.StatusCode, b
}

// TestHealthAndReadiness: /healthz answers while the process runs, /readyz
// follows the store, on every dialect: a closed store (a dead database)
// makes it 503 naming the store.
func TestHealthAndReadiness(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		h := newHarness(t, st)
		if code, b := getJSON(t, h.http.URL+"/healthz"); code != 200 || b.Status != "ok" {
			t.Fatalf("healthz %d %+v", code, b)
		}
		if code, b := getJSON(t, h.http.URL+"/readyz"); code != 200 || b.Status != "ok" || b.Checks["store"] != "ok" {
			t.Fatalf("readyz %d %+v", code, b)
		}
		_ = st.Close()
		code, b := getJSON(t, h.http.URL+"/readyz")
		if code != http.StatusServiceUnavailable || b.Status != "unavailable" || len(b.Failed) != 1 || b.Failed[0] != "store" || b.Checks["store"] != "failed" {
			t.Fatalf("readyz with the store down: %d %+v", code, b)
		}
		if code, _ := getJSON(t, h.http.URL+"/healthz"); code != 200 {
			t.Fatalf("healthz must not depend on the store: %d", code)
		}
	})
}

// TestReadinessNamesFailedCheck: each check is reported by name; only the
// failing one is listed, and its error text is not shown to the caller.
func TestReadinessNamesFailedCheck(t *testing.T) {
	st := storetest.Open(t, "sqlite")
	h := newHarness(t, st, func(d *api.Deps) {
		d.Ready = []api.ReadyCheck{
			{Name: "store", Check: st.Ping},
			{Name: "temporal", Check: func(context.Context) error { return errors.New("dial tcp 10.0.0.7:7233: connection refused") }},
		}
	})
	res, err := http.Get(h.http.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var raw map[string]any
	_ = json.NewDecoder(res.Body).Decode(&raw)
	if res.StatusCode != 503 || raw["status"] != "unavailable" {
		t.Fatalf("readyz %d %v", res.StatusCode, raw)
	}
	checks := raw["checks"].(map[string]any)
	if checks["store"] != "ok" || checks["temporal"] != "failed" {
		t.Fatalf("checks %v", checks)
	}
	if b, _ := json.Marshal(raw); strings.Contains(string(b), "10.0.0.7") {
		t.Fatalf("error detail leaked: %s", b)
	}
}

// TestOpsRoutesBypassRateLimiter: /healthz and /readyz are not behind the
// /api limiter (a limiter refusing everything).
func TestOpsRoutesBypassRateLimiter(t *testing.T) {
	st := storetest.Open(t, "sqlite")
	h := newHarness(t, st, func(d *api.Deps) {
		d.Limiter = func(c *gin.Context) { c.AbortWithStatus(http.StatusTooManyRequests) }
		d.Metrics = newMetrics()
	})
	// Plain HTTP: the stand-in limiter's bare 429 is not SPEC.md's body.
	res, err := http.Post(h.http.URL+"/api/auth/login", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 429 {
		t.Fatalf("the limiter must guard /api: %d", res.StatusCode)
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		res, err := http.Get(h.http.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Errorf("%s answered %d behind a refusing limiter", p, res.StatusCode)
		}
	}
	// They are not resources of SPEC.md: neither route table (the isolation
	// tests walk the engine's) lists them.
	for _, r := range h.srv.Routes() {
		if r.Path == api.PathHealthz || r.Path == api.PathReadyz || r.Path == api.PathMetrics {
			t.Errorf("route table has %s %s", r.Method, r.Path)
		}
	}
	for _, r := range h.srv.Engine().Routes() {
		if r.Path == api.PathHealthz || r.Path == api.PathReadyz || r.Path == api.PathMetrics {
			t.Errorf("engine routes have %s %s", r.Method, r.Path)
		}
	}
}
