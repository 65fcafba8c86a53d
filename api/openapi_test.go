package api_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/models/storetest"
)

var (
	oaOnce   sync.Once
	oaRouter routers.Router
	oaErr    error
)

func openapiRouter(t testing.TB) routers.Router {
	t.Helper()
	oaOnce.Do(func() {
		var doc *openapi3.T
		doc, oaErr = api.OpenAPI()
		if oaErr == nil {
			oaRouter, oaErr = legacy.NewRouter(doc)
		}
	})
	if oaErr != nil {
		t.Fatalf("OpenAPI document: %v", oaErr)
	}
	return oaRouter
}

// validateResponse checks one response against the OpenAPI document: the
// route and the status must be documented and the body must match.
func validateResponse(t testing.TB, req *http.Request, status int, header http.Header, body []byte) {
	t.Helper()
	if status == http.StatusNotFound && len(req.URL.Path) > 1 && strings.HasSuffix(req.URL.Path, "/") {
		return // a trailing slash: the router's own 404 (the document's router ignores the slash)
	}
	r := openapiRouter(t)
	route, params, err := r.FindRoute(req)
	if err != nil {
		// Storage keys contain slashes, which a path template cannot match:
		// look the route up with a one-segment key instead.
		for _, prefix := range []string{"/api/upload/", "/uploads/"} {
			if strings.HasPrefix(req.URL.Path, prefix) {
				alt := req.Clone(req.Context())
				alt.URL.Path = prefix + "key"
				route, params, err = r.FindRoute(alt)
			}
		}
	}
	if err != nil {
		if status == http.StatusNotFound || status == http.StatusMethodNotAllowed {
			return // no such route: the router's own 404/405, outside the document
		}
		t.Fatalf("%s %s is not in the OpenAPI document: %v", req.Method, req.URL.Path, err)
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}},
		Status:  status,
		Header:  header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	in.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		t.Fatalf("%s %s answered %d, which does not match the OpenAPI document: %v\nbody: %s", req.Method, req.URL.Path, status, err, body)
	}
}

// TestOpenAPIMatchesRouter: the document names exactly the router's routes.
func TestOpenAPIMatchesRouter(t *testing.T) {
	doc, err := api.OpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1") {
		t.Fatalf("document is OpenAPI %s, want 3.1", doc.OpenAPI)
	}
	h := newHarness(t, storetest.Open(t, "sqlite"))
	documented := map[string]bool{}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			documented[method+" "+path] = true
		}
	}
	var missing []string
	for _, r := range h.srv.Engine().Routes() {
		key := r.Method + " " + ginToOpenAPI(r.Path)
		if !documented[key] {
			missing = append(missing, key)
		}
		delete(documented, key)
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("route %s is not in the OpenAPI document", m)
	}
	// The operations routes are answered in front of the router (outside the
	// rate limiter): they must answer through the server's handler.
	for _, p := range []string{api.PathHealthz, api.PathReadyz} {
		if documented["GET "+p] {
			if r := h.do("GET", p, "", nil); r.Status != 200 {
				t.Errorf("GET %s answered %d", p, r.Status)
			}
			delete(documented, "GET "+p)
		}
	}
	for extra := range documented {
		t.Errorf("the OpenAPI document names %s, which the router does not serve", extra)
	}
}

func ginToOpenAPI(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		if strings.HasPrefix(s, ":") || strings.HasPrefix(s, "*") {
			parts[i] = "{" + s[1:] + "}"
		}
	}
	return strings.Join(parts, "/")
}

// TestOpenAPIServed: the document is served at /api/openapi.json.
func TestOpenAPIServed(t *testing.T) {
	h := newHarness(t, storetest.Open(t, "sqlite"))
	res, err := h.http.Client().Get(h.http.URL + "/api/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 || !bytes.Contains(body, []byte(`"openapi":"3.1.0"`)) {
		t.Fatalf("%d %.200s", res.StatusCode, body)
	}
}
