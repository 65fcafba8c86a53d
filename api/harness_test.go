package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/auth"
	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/checkout"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
	"github.com/paygate/paygate/subscription"
)

const (
	evmA   = "0x52908400098527886E0F7030069857D2E4169EE7"
	evmB   = "0x8617E340B3D01FA5F11F306F4090FD50E238070D"
	solA   = "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v"
	hash64 = "0x" + "ab12cd34ef56ab12cd34ef56ab12cd34ef56ab12cd34ef56ab12cd34ef56ab12"
)

// harness is one API over one fresh store, driven through real HTTP.
type harness struct {
	t     testing.TB
	store *models.Store
	srv   *api.Server
	http  *httptest.Server
}

func newHarness(t testing.TB, st *models.Store, mutate ...func(*api.Deps)) *harness {
	t.Helper()
	d := api.Deps{Store: st, Hasher: auth.NewHasher("test-secret-test-secret-test-secret!"), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		UploadDir: t.TempDir()}
	// The checkout service without a Temporal client: enough for every
	// route that answers from the store (the e2e tests run the workflows).
	d.Checkout = &checkout.Service{Store: st, Hasher: d.Hasher, Networks: chain.DefaultRegistry(), Tax: checkout.DefaultRates(),
		Lifetime: 30 * time.Minute, NotFoundWindow: time.Hour, Log: d.Logger}
	// Likewise subscriptions: creation and every refusal that comes before
	// the workflow (TestSubscriptionsOnTemporal runs the workflows).
	d.Subscriptions = &subscription.Service{Store: st, Networks: chain.DefaultRegistry(), Log: d.Logger}
	// The status poll's cache runs in every API test: it is dropped by the
	// store's change feed, which the harness runs.
	d.SessionChanges = st.SessionChanges()
	// Not a request's log: tests that read the request logs (or close the
	// store under the API) must not see the feed's.
	d.SessionChanges.SetLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	feedCtx, stopFeed := context.WithCancel(context.Background())
	feedDone := make(chan struct{})
	go func() { defer close(feedDone); d.SessionChanges.Run(feedCtx) }()
	t.Cleanup(func() { stopFeed(); <-feedDone })
	for _, m := range mutate {
		m(&d)
	}
	srv, err := api.New(d)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return &harness{t: t, store: st, srv: srv, http: hs}
}

// forEachStore runs fn against an API on every dialect.
func forEachStore(t *testing.T, fn func(t *testing.T, h *harness)) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) { fn(t, newHarness(t, st)) })
}

// resp is a decoded response.
type resp struct {
	Status int
	Body   map[string]any
	Raw    string
	Header http.Header
}

func (r resp) data() map[string]any {
	m, _ := r.Body["data"].(map[string]any)
	return m
}

func (r resp) list() []any {
	l, _ := r.Body["data"].([]any)
	return l
}

func (r resp) str(path ...string) string {
	var cur any = r.Body
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return ""
		}
		cur = m[p]
	}
	s, _ := cur.(string)
	return s
}

// decimal is the exact JSON number text at path ("" when absent). Money is
// compared as that text, never as the float64 a generic decode would give.
func (r resp) decimal(path ...string) string {
	var cur any
	d := json.NewDecoder(strings.NewReader(r.Raw))
	d.UseNumber()
	if d.Decode(&cur) != nil {
		return ""
	}
	for _, p := range path {
		m, _ := cur.(map[string]any)
		cur = m[p]
	}
	n, _ := cur.(json.Number)
	return string(n)
}

// do sends a request; body may be a string (sent as is) or a value (JSON).
func (h *harness) do(method, path, token string, body any) resp {
	h.t.Helper()
	return h.doWith(method, path, token, body, nil)
}

// doWith sends a request with extra headers.
func (h *harness) doWith(method, path, token string, body any, headers map[string]string) resp {
	h.t.Helper()
	var rdr io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rdr = strings.NewReader(b)
	default:
		buf, err := json.Marshal(b)
		if err != nil {
			h.t.Fatal(err)
		}
		rdr = bytes.NewReader(buf)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, h.http.URL+path, rdr)
	if err != nil {
		h.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if rdr != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	res, err := h.http.Client().Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	// Every response the suite receives must match the OpenAPI document.
	validateResponse(h.t, req, res.StatusCode, res.Header, raw)
	out := resp{Status: res.StatusCode, Raw: string(raw), Header: res.Header}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out.Body); err != nil {
			h.t.Fatalf("%s %s: response is not JSON: %q", method, path, raw)
		}
	}
	return out
}

// expect checks status and, for errors, the envelope and code.
func expect(t testing.TB, r resp, status int, code string) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d: %s", r.Status, status, r.Raw)
	}
	if status >= 400 {
		if r.Body["status"] != "error" || r.Body["code"] != code || r.str("message") == "" {
			t.Fatalf("want error envelope with code %s, got %s", code, r.Raw)
		}
	} else if r.Body["status"] != "success" {
		t.Fatalf("want success envelope, got %s", r.Raw)
	}
}

// expectMessage checks a 400's message names the field with the reason.
func expectField(t testing.TB, r resp, field string) {
	t.Helper()
	expect(t, r, http.StatusBadRequest, "BAD_REQUEST")
	msg := r.str("message")
	named := false
	for _, part := range strings.Split(msg, "; ") {
		// Every part is `field: reason` (SPEC.md): a reason holding "; "
		// would split into a part naming no field.
		if name, reason, ok := strings.Cut(part, ": "); !ok || name == "" || strings.Contains(name, " ") || reason == "" {
			t.Fatalf("message %q: part %q is not `field: reason`", msg, part)
		}
		named = named || strings.HasPrefix(part, field+": ")
	}
	if !named {
		t.Fatalf("message %q does not name %q as `field: reason`", msg, field)
	}
}

// merchant is a signed-up merchant's credentials.
type merchant struct {
	ID      string
	Email   string
	Session string
	TestKey string
	LiveKey string
}

var signupSeq int

// signup creates a merchant with default wallets set.
func (h *harness) signup() merchant {
	h.t.Helper()
	signupSeq++
	email := "m" + strings.ReplaceAll(models.NewID()[24:], "-", "") + "@example.com"
	r := h.do("POST", "/api/auth/signup", "", map[string]any{"email": email, "password": "correct horse battery", "businessName": "Shop"})
	expect(h.t, r, 201, "")
	m := merchant{ID: r.str("data", "merchant", "id"), Email: email, Session: r.str("data", "sessionToken"), TestKey: r.str("data", "testKey", "fullKey")}
	expect(h.t, h.do("PATCH", "/api/merchant", m.Session, map[string]any{"wallets": map[string]any{"evm": evmA, "solana": solA}}), 200, "")
	return m
}

// withLive approves the merchant's KYB and creates a live key.
func (h *harness) withLive(m merchant) merchant {
	h.t.Helper()
	ctx := context.Background()
	if err := h.store.SubmitKYB(ctx, &models.KYBApplication{MerchantID: m.ID, BusinessName: "Shop", BusinessType: "llc",
		Country: "US", ContactName: "A", ContactEmail: "a@example.com"}); err != nil {
		h.t.Fatal(err)
	}
	if _, err := h.store.ReviewKYB(ctx, m.ID, true, "", "", &models.Notification{Kind: "kyb.reviewed", Subject: "s", Body: "b"}); err != nil {
		h.t.Fatal(err)
	}
	r := h.do("POST", "/api/developer/keys", m.Session, map[string]any{"keyType": "live"})
	expect(h.t, r, 201, "")
	m.LiveKey = r.str("data", "fullKey")
	return m
}

// link creates a payment link with the key and returns its id.
func (h *harness) link(key string, body map[string]any) string {
	h.t.Helper()
	if body == nil {
		body = map[string]any{"name": "T-shirt", "amount": 25.5, "network": "base_sepolia"}
	}
	r := h.do("POST", "/api/payment-links", key, body)
	expect(h.t, r, 201, "")
	return r.str("data", "id")
}

// sessionRequest is the body of POST /api/checkout/session for link on
// network, paid from wallet, with quote's token and totals (the customer
// Ann in Berlin, DE).
func sessionRequest(link string, quote resp, wallet, network string) map[string]any {
	return map[string]any{
		"linkId": link, "quoteToken": quote.str("data", "quoteToken"), "walletAddress": wallet, "walletType": "evm",
		"network": network, "customer": map[string]any{"name": "Ann", "email": "ann@example.com", "address": "Berlin", "country": "DE"},
		"totalsSnapshot": map[string]any{"subtotalCents": quote.data()["subtotalCents"], "taxCents": quote.data()["taxCents"],
			"totalCents": quote.data()["totalCents"], "calculationId": quote.str("data", "calculationId")}}
}
