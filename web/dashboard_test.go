package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/gin-gonic/gin"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/auth"
	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/checkout"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
	"github.com/paygate/paygate/money"
	"github.com/paygate/paygate/ratelimit"
	"github.com/paygate/paygate/web"
	"github.com/paygate/paygate/webhook"
)

const (
	evmA = "0x52908400098527886E0F7030069857D2E4169EE7"
	evmB = "0x8617E340B3D01FA5F11F306F4090FD50E238070D"
)

// dash is the API with the pages mounted, as the service runs it (no
// Temporal: deliveries are retried by a fake).
type dash struct {
	t       *testing.T
	st      *models.Store
	srv     *httptest.Server
	retried *retrier
}

type retrier struct {
	mu  sync.Mutex
	ids []string
}

func (r *retrier) RetryDelivery(_ context.Context, d *models.WebhookDelivery) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ids = append(r.ids, d.ID)
	return nil
}

func newDash(t *testing.T, configure ...func(*web.Pages, *api.Deps)) *dash {
	t.Helper()
	st := storetest.Open(t, "sqlite")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	hasher := auth.NewHasher("dash-test-secret-dash-test-secret-dash")
	svc := &checkout.Service{Store: st, Hasher: hasher, Networks: chain.DefaultRegistry(), Tax: checkout.DefaultRates(),
		Lifetime: 30 * time.Minute, NotFoundWindow: time.Hour, Log: log}
	pcfg := web.Pages{Checkout: svc, Store: st, Log: log}
	r := &retrier{}
	deps := api.Deps{Store: st, Hasher: hasher, Checkout: svc, Logger: log, UploadDir: t.TempDir(), Deliveries: r,
		WebhookPolicy: webhook.Policy{AllowLoopbackHTTP: true}}
	for _, f := range configure {
		f(&pcfg, &deps)
	}
	pages, err := web.New(pcfg)
	if err != nil {
		t.Fatal(err)
	}
	deps.Root, deps.PageNotFound = []func(*gin.Engine){pages.Register}, pages.NotFound
	srv, err := api.New(deps)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return &dash{t: t, st: st, srv: hs, retried: r}
}

// browser is one visitor with its cookies; it does not follow redirects.
type browser struct {
	d   *dash
	jar *cookiejar.Jar
	// headers are sent with every request (e.g. Sec-Fetch-Site).
	headers map[string]string
}

func (d *dash) browser() *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{d: d, jar: jar, headers: map[string]string{}}
}

type dpage struct {
	status int
	header http.Header
	body   string
	loc    string
	doc    *goquery.Document
}

func (p dpage) text(sel string) string {
	return strings.Join(strings.Fields(p.doc.Find(sel).Text()), " ")
}

func (b *browser) do(req *http.Request) dpage {
	b.d.t.Helper()
	for k, v := range b.headers {
		req.Header.Set(k, v)
	}
	client := &http.Client{Jar: b.jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := client.Do(req)
	if err != nil {
		b.d.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	doc, err := goquery.NewDocumentFromReader(bytes.NewReader(raw))
	if err != nil {
		b.d.t.Fatal(err)
	}
	return dpage{status: res.StatusCode, header: res.Header, body: string(raw), loc: res.Header.Get("Location"), doc: doc}
}

func (b *browser) get(path string) dpage {
	b.d.t.Helper()
	req, _ := http.NewRequest("GET", b.d.srv.URL+path, nil)
	return b.do(req)
}

func (b *browser) post(path string, form url.Values) dpage {
	b.d.t.Helper()
	req, _ := http.NewRequest("POST", b.d.srv.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return b.do(req)
}

// follow gets the page a redirect points to.
func (b *browser) follow(p dpage) dpage {
	b.d.t.Helper()
	if p.status != http.StatusSeeOther && p.status != http.StatusFound {
		b.d.t.Fatalf("want a redirect, got %d: %s", p.status, p.body)
	}
	return b.get(p.loc)
}

// account is a merchant signed up through the dashboard.
type account struct {
	*browser
	id, email, testKey, session string
}

var seq int

// signup creates a merchant through the sign-up form and sets its EVM wallet.
func (d *dash) signup(name string) account {
	d.t.Helper()
	b := d.browser()
	seq++
	email := strings.ReplaceAll(models.NewID()[24:], "-", "") + "@shop.example"
	p := b.post("/dashboard/signup", url.Values{"businessName": {name}, "email": {email}, "password": {"correct horse battery"}})
	if p.status != http.StatusCreated {
		d.t.Fatalf("signup %d: %s", p.status, p.text("main"))
	}
	a := account{browser: b, email: email, testKey: p.text("#new-key")}
	u, _ := url.Parse(d.srv.URL + "/dashboard/")
	for _, c := range b.jar.Cookies(u) {
		if c.Name == "paygate_session" {
			a.session = c.Value
		}
	}
	m := d.call("GET", "/api/merchant", a.session, nil)
	a.id = m["id"].(string)
	d.call("PATCH", "/api/merchant", a.session, map[string]any{"wallets": map[string]any{"evm": evmA}})
	return a
}

// call sends an API request and returns data (fails on an error answer).
func (d *dash) call(method, path, token string, body any) map[string]any {
	d.t.Helper()
	var rdr io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rdr = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, d.srv.URL+path, rdr)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		d.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if res.StatusCode >= 400 {
		d.t.Fatalf("%s %s: %d %s", method, path, res.StatusCode, raw)
	}
	var env struct {
		Data map[string]any `json:"data"`
	}
	_ = json.Unmarshal(raw, &env)
	return env.Data
}

// TestDashboardSignInAndOut: sign-up shows the test key once and sets an
// HttpOnly SameSite=Strict cookie; pages need it; a wrong password shows
// the API's message; sign-out ends the session on the server.
func TestDashboardSignInAndOut(t *testing.T) {
	d := newDash(t)
	anon := d.browser()
	if p := anon.get("/dashboard"); p.status != http.StatusSeeOther || p.loc != "/dashboard/login" {
		t.Fatalf("home without a session: %d %s", p.status, p.loc)
	}
	if p := anon.get("/dashboard/test/payments"); p.status != http.StatusSeeOther || !strings.HasPrefix(p.loc, "/dashboard/login?next=") {
		t.Fatalf("a page without a session: %d %s", p.status, p.loc)
	}
	login := anon.get("/dashboard/login")
	if login.status != 200 || login.doc.Find("form#login-form input[type=password]").Length() != 1 {
		t.Fatalf("login page %d", login.status)
	}
	bad := anon.post("/dashboard/signup", url.Values{"businessName": {"X"}, "email": {"nope"}, "password": {"short"}})
	if bad.status != 400 || !strings.Contains(bad.text(".error"), "email:") || !strings.Contains(bad.text(".error"), "password: must be at least 12 characters") {
		t.Fatalf("bad signup %d %q", bad.status, bad.text(".error"))
	}

	a := d.signup("Roastery")
	if !strings.HasPrefix(a.testKey, "svc_test_sk_") {
		t.Fatalf("welcome page shows key %q", a.testKey)
	}
	var cookie string
	for _, v := range a.browser.get("/dashboard/test/payments").header.Values("Set-Cookie") {
		cookie = v
	}
	_ = cookie
	p := a.get("/dashboard/test/payments")
	if p.status != 200 || !strings.Contains(p.text(".biz"), "Roastery") {
		t.Fatalf("payments %d", p.status)
	}
	// The cookie's attributes, as the sign-in sets them.
	b := d.browser()
	in := b.post("/dashboard/login", url.Values{"email": {a.email}, "password": {"correct horse battery"}, "next": {"/dashboard/test/links"}})
	if in.status != http.StatusSeeOther || in.loc != "/dashboard/test/links" {
		t.Fatalf("login %d %s", in.status, in.loc)
	}
	sc := in.header.Get("Set-Cookie")
	for _, attr := range []string{"paygate_session=svc_sess_", "Path=/dashboard", "HttpOnly", "SameSite=Strict"} {
		if !strings.Contains(sc, attr) {
			t.Errorf("cookie %q lacks %s", sc, attr)
		}
	}
	if off := b.post("/dashboard/login", url.Values{"email": {a.email}, "password": {"wrong password!"}, "next": {"https://evil.example/"}}); off.status != 401 ||
		off.text(".error") != "invalid email or password" {
		t.Fatalf("wrong password %d %q", off.status, off.text(".error"))
	}
	if in := b.post("/dashboard/login", url.Values{"email": {a.email}, "password": {"correct horse battery"}, "next": {"//evil.example/x"}}); in.loc != "/dashboard/test/payments" {
		t.Fatalf("open redirect to %s", in.loc)
	}
	// Sign out: the server forgets the session, the cookie goes.
	out := a.post("/dashboard/logout", nil)
	if out.status != http.StatusSeeOther || !strings.Contains(out.header.Get("Set-Cookie"), "Max-Age=0") {
		t.Fatalf("logout %d %q", out.status, out.header.Get("Set-Cookie"))
	}
	req, _ := http.NewRequest("GET", d.srv.URL+"/api/merchant", nil)
	req.Header.Set("Authorization", "Bearer "+a.session)
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != 401 {
		t.Fatalf("the session still works after sign-out: %v %v", res.StatusCode, err)
	}
	if p := a.get("/dashboard/test/payments"); p.status != http.StatusSeeOther {
		t.Fatalf("signed out but the page answered %d", p.status)
	}
	// A form sent after the session ended comes back to its section after
	// signing in, not to its POST-only URL (a GET there has no page).
	if p := a.post("/dashboard/test/links/"+models.NewID()+"/delete", nil); p.status != http.StatusSeeOther ||
		p.loc != "/dashboard/login?done=expired&next="+url.QueryEscape("/dashboard/test/links") &&
			p.loc != "/dashboard/login?next="+url.QueryEscape("/dashboard/test/links") {
		t.Fatalf("a form without a session: %d %s", p.status, p.loc)
	}
}

// TestPagesStrictTransport: pages served over TLS (SecureCookies: a proxy
// ends it) tell the browser to keep to https; plain-HTTP development does
// not (a browser would then refuse http://127.0.0.1 for a year).
func TestPagesStrictTransport(t *testing.T) {
	for _, secure := range []bool{false, true} {
		d := newDash(t, func(p *web.Pages, _ *api.Deps) { p.SecureCookies = secure })
		for _, path := range []string{"/dashboard/login", "/pay/" + models.NewID()} {
			p := d.browser().get(path)
			if got := p.header.Get("Strict-Transport-Security"); (got != "") != secure || (secure && !strings.Contains(got, "max-age=31536000")) {
				t.Fatalf("secure %v, %s: Strict-Transport-Security %q", secure, path, got)
			}
		}
	}
}

// TestDashboardUnknownPages: an unknown dashboard URL, or a form's URL
// opened with GET, is a dashboard page with the dashboard's headers (it
// was the API's JSON); an unknown hosted page is the customer's 404 page;
// /api keeps its JSON.
func TestDashboardUnknownPages(t *testing.T) {
	d := newDash(t)
	a := d.signup("Roastery")
	for _, path := range []string{"/dashboard/test/nope", "/dashboard/test/links/" + models.NewID() + "/delete", "/dashboard/nope/x/y"} {
		p := a.get(path)
		if p.status != http.StatusNotFound || !strings.Contains(p.header.Get("Content-Type"), "text/html") ||
			p.header.Get("X-Frame-Options") != "DENY" || !strings.Contains(p.header.Get("Content-Security-Policy"), "frame-ancestors 'none'") ||
			!strings.Contains(p.body, "There is no such page.") {
			t.Fatalf("%s: %d %v %.200s", path, p.status, p.header, p.body)
		}
	}
	if p := a.get("/checkout/" + models.NewID() + "/nope"); p.status != http.StatusNotFound || !strings.Contains(p.header.Get("Content-Type"), "text/html") {
		t.Fatalf("hosted page 404: %d %s", p.status, p.header.Get("Content-Type"))
	}
	if p := a.get("/api/nope"); p.status != http.StatusNotFound || !strings.Contains(p.header.Get("Content-Type"), "application/json") {
		t.Fatalf("api 404: %d %s", p.status, p.header.Get("Content-Type"))
	}
	// A page's URL with a trailing slash leads to the page; an API route's
	// is a 404 in the envelope (the router redirects neither itself).
	for path, want := range map[string]string{"/dashboard/test/links/": "/dashboard/test/links", "/dashboard/test/": "/dashboard/test",
		"/checkout/x/?lang=de": "/checkout/x?lang=de"} {
		if p := a.get(path); p.status != http.StatusMovedPermanently || p.loc != want {
			t.Fatalf("%s: %d %q", path, p.status, p.loc)
		}
	}
	if p := a.get("/dashboard/test/links"); p.status != http.StatusOK {
		t.Fatalf("links page: %d", p.status)
	}
	if p := a.get("/api/customers/"); p.status != http.StatusNotFound || !strings.Contains(p.body, `"code":"NOT_FOUND"`) {
		t.Fatalf("api trailing slash: %d %.200s", p.status, p.body)
	}
}

// TestDashboardRefusesCrossOrigin: a form posted from another site is
// refused before it reaches the API (CSRF), whatever the cookie.
func TestDashboardRefusesCrossOrigin(t *testing.T) {
	d := newDash(t)
	a := d.signup("Shop")
	for name, h := range map[string]map[string]string{
		"sec-fetch-site": {"Sec-Fetch-Site": "cross-site"},
		"origin":         {"Origin": "https://evil.example"},
	} {
		a.headers = h
		p := a.post("/dashboard/test/payments/"+models.NewID()+"/deliveries/"+models.NewID()+"/retry", nil)
		if p.status != http.StatusForbidden || !strings.Contains(p.text("main"), "came from another site") {
			t.Errorf("%s: %d", name, p.status)
		}
		if p := a.post("/dashboard/logout", nil); p.status != http.StatusForbidden {
			t.Errorf("%s: logout %d", name, p.status)
		}
		if p := a.post("/dashboard/login", url.Values{"email": {a.email}, "password": {"correct horse battery"}}); p.status != http.StatusForbidden {
			t.Errorf("%s: login %d", name, p.status)
		}
	}
	a.headers = map[string]string{"Sec-Fetch-Site": "same-origin"}
	if p := a.get("/dashboard/test/payments"); p.status != 200 {
		t.Fatalf("same-origin page %d", p.status)
	}
	if m := d.call("GET", "/api/merchant", a.session, nil); m["businessName"] != "Shop" {
		t.Fatalf("renamed to %v", m["businessName"])
	}
}

// TestDashboardPagesAreSafe: strict CSP, no inline script or style, the
// test/live switch says live needs KYB, data is escaped.
func TestDashboardPagesAreSafe(t *testing.T) {
	d := newDash(t)
	a := d.signup(`Bean <script>alert(1)</script>`)
	p := a.get("/dashboard/test/payments")
	csp := p.header.Get("Content-Security-Policy")
	if !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") ||
		!strings.Contains(csp, "frame-ancestors 'none'") || p.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("headers %v", p.header)
	}
	if strings.Contains(p.body, "<script>alert(1)") || !strings.Contains(p.body, "Bean &lt;script&gt;") {
		t.Fatal("business name rendered unescaped")
	}
	if regexp.MustCompile(`<script>|<script [^>]*>[^<]+</script>|style="| on[a-z]+="`).MatchString(p.body) {
		t.Fatal("inline script, style attribute or event handler")
	}
	if got := p.text("#mode-live"); !strings.Contains(got, "needs approved KYB") {
		t.Fatalf("live switch says %q", got)
	}
	live := a.get("/dashboard/live/payments")
	if live.status != http.StatusForbidden || !strings.Contains(live.text("main"), "Live mode requires an approved KYB application") {
		t.Fatalf("live without KYB: %d %s", live.status, live.text("main"))
	}
	// Its forms too: each answers the same page before it looks at its
	// input or calls the API (an id that is not one answers 404 past it).
	for _, action := range []string{"/exceptions/x/resolve", "/exceptions/x/dismiss", "/payments/x/deliveries/x/retry",
		"/payments/x/refunds", "/payments/x/refunds/x/submit", "/links", "/links/x", "/links/x/active", "/links/x/delete",
		"/webhooks", "/webhooks/x/rotate", "/webhooks/x/active", "/webhooks/x/delete", "/webhooks/x/test",
		"/webhooks/deliveries/x/retry", "/subscriptions/x/action"} {
		if r := a.post("/dashboard/live"+action, url.Values{"note": {"x"}}); r.status != http.StatusForbidden ||
			!strings.Contains(r.text("main"), "Live mode requires an approved KYB application") {
			t.Errorf("live %s without KYB: %d %s", action, r.status, r.text("main"))
		}
	}
	if p := a.get("/dashboard/prod/payments"); p.status != 404 {
		t.Fatalf("unknown mode %d", p.status)
	}
	for name, body := range web.TemplateSources() {
		if strings.HasPrefix(name, "dash_") && regexp.MustCompile(`<script>|<style|style="| on[a-z]+="`).MatchString(body) {
			t.Errorf("%s has inline script or style", name)
		}
	}
}

// paidSession makes a complete checkout session of the link directly in
// the store (the e2e tests run the real workflow).
func (d *dash) paidSession(a account, linkID, email, hash string) *models.CheckoutSession {
	d.t.Helper()
	ctx := context.Background()
	cs := &models.CheckoutSession{MerchantID: a.id, Mode: models.ModeTest, PaymentLinkID: linkID, Network: "base_sepolia", WalletType: "evm",
		WalletAddress: evmB, CustomerEmail: email, CustomerName: "Ann <i>", CustomerCountry: "DE", ExpectedAmount: 2550_0000,
		MerchantWalletAddress: evmA, TokenAddress: evmB, ExpiresAt: time.Now().Add(time.Hour)}
	if err := d.st.CreateCheckoutSession(ctx, cs); err != nil {
		d.t.Fatal(err)
	}
	if hash == "" {
		return cs
	}
	if err := d.st.ClaimSessionTxHash(ctx, cs.ID, "base_sepolia", hash); err != nil {
		d.t.Fatal(err)
	}
	if err := d.st.RecordSessionTransition(ctx, models.Transition{SessionID: cs.ID, EntryID: models.NewID(), Status: models.StatusBroadcast,
		Source: "client", TxHash: hash, At: time.Now()}); err != nil {
		d.t.Fatal(err)
	}
	if err := d.st.RecordSessionTransition(ctx, models.Transition{SessionID: cs.ID, EntryID: models.NewID(), Status: models.StatusConfirming,
		Source: "chain", Chain: "base_sepolia", At: time.Now()}); err != nil {
		d.t.Fatal(err)
	}
	if _, err := d.st.FinishSession(ctx, models.Outcome{SessionID: cs.ID, EntryID: models.NewID(), Status: models.StatusComplete, Source: "chain",
		Chain: "base_sepolia", ReceivedUnits: "25500000", Payer: evmB, Bound: true, At: time.Now()}); err != nil {
		d.t.Fatal(err)
	}
	return cs
}

// TestDashboardPayments: the list shows sessions and records newest first,
// filters and searches on the server, pages by cursor; the detail shows
// the timeline, the transaction, the customer and the deliveries with
// every attempt, and resends one; merchant B sees none of it.
func TestDashboardPayments(t *testing.T) {
	d := newDash(t)
	a := d.signup("Shop")
	link := d.call("POST", "/api/payment-links", a.testKey, map[string]any{"name": "Mug <b>bold</b>", "amount": "25.50", "network": "base_sepolia"})["id"].(string)
	ep := d.call("POST", "/api/webhooks", a.session, map[string]any{"url": "http://127.0.0.1:9/hook", "events": []string{"checkout.completed"}, "mode": "test"})
	_ = ep
	hash := "0x" + strings.Repeat("ab", 32)
	paid := d.paidSession(a, link, "ann@example.com", hash)
	for i := 0; i < 55; i++ {
		d.paidSession(a, link, "bulk@example.com", "")
	}
	p := a.get("/dashboard/test/payments")
	if p.status != 200 || p.doc.Find("#payments tbody tr").Length() != 50 || p.doc.Find(".pager a.next").Length() != 1 {
		t.Fatalf("first page: %d, %d rows", p.status, p.doc.Find("#payments tbody tr").Length())
	}
	next, _ := p.doc.Find(".pager a.next").Attr("href")
	p2 := a.get(next)
	if n := p2.doc.Find("#payments tbody tr").Length(); n != 6 || p2.doc.Find(".pager a.next").Length() != 0 {
		t.Fatalf("second page: %d rows", n)
	}
	if !strings.Contains(p2.text("#payments"), "ann@example.com") || !strings.Contains(p2.body, "Mug &lt;b&gt;bold&lt;/b&gt;") {
		t.Fatal("the oldest payment is not on the second page, or the link's name is not escaped")
	}
	for q, want := range map[string]int{"status=complete": 1, "status=open": 50, "q=" + hash[:18]: 1, "q=ANN@": 1, "q=nobody": 0,
		"link=" + link + "&status=complete": 1, "since=2000-01-01&until=2000-01-02": 0, "until=" + time.Now().UTC().Format("2006-01-02"): 50} {
		got := a.get("/dashboard/test/payments?" + q)
		rows := got.doc.Find("#payments tbody a[href*='/payments/']").Length()
		if got.status != 200 || rows != want {
			t.Errorf("%s: %d rows (status %d), want %d", q, rows, got.status, want)
		}
	}
	if bad := a.get("/dashboard/test/payments?since=yesterday"); bad.status != 400 || !strings.Contains(bad.text(".error"), "since:") {
		t.Fatalf("bad filter %d %q", bad.status, bad.text(".error"))
	}
	// A record is complete and says it is not yet seen on chain; refuted by
	// the chain, it is failed and says so.
	rec := d.call("POST", "/api/transactions", a.testKey, map[string]any{"amount": "7", "token": "USDC", "network": "base_sepolia",
		"txHash": "0x" + strings.Repeat("ef", 32), "walletAddress": "0x000000000000000000000000000000000000dEaD", "customerEmail": "rec@example.com"})
	if got := a.get("/dashboard/test/payments?q=rec@"); !strings.Contains(got.text("#payments tbody"), "complete recorded, not yet seen on chain") {
		t.Fatalf("an unverified record: %q", got.text("#payments tbody"))
	}
	if err := d.st.SetRecordVerification(context.Background(), rec["id"].(string), models.VerificationFailed, "no such transfer"); err != nil {
		t.Fatal(err)
	}
	if got := a.get("/dashboard/test/payments?q=rec@&status=failed"); !strings.Contains(got.text("#payments tbody"), "failed recorded, refuted by the chain") {
		t.Fatalf("a refuted record: %q", got.text("#payments tbody"))
	}
	if got := a.get("/dashboard/test/payments/" + rec["id"].(string)); !strings.Contains(got.text("h1"), "7.00 USDC failed") ||
		!strings.Contains(got.body, "no such transfer") {
		t.Fatalf("a refuted record's page: %q", got.text("h1"))
	}

	// A session that gave a stranger's transaction back says so while it
	// waits; once it has ended, its outcome speaks.
	stranger := "0x" + strings.Repeat("5e", 32)
	open := d.paidSession(a, link, "open@example.com", "")
	if err := d.st.RecordSessionTransition(context.Background(), models.Transition{SessionID: open.ID, EntryID: models.NewID(),
		Status: models.StatusBroadcast, Source: "client", TxHash: stranger, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if r, err := d.st.ReleaseSessionTxHash(context.Background(), models.Release{SessionID: open.ID, EntryID: models.NewID(), TxHash: stranger,
		Chain: "base_sepolia", Reason: models.ReasonInvalidTransfer, Message: "merchant received 0 units <b>", At: time.Now()}); err != nil || !r.Released {
		t.Fatalf("release %+v %v", r, err)
	}
	if got := a.get("/dashboard/test/payments/" + open.ID); !strings.Contains(got.text("#set-aside"), stranger+" does not pay this session (merchant received 0 units <b>)") ||
		strings.Contains(got.body, "<b>)") || !strings.Contains(got.text("#timeline"), "transaction set aside not this payment (Base Sepolia (test)); waiting for the payment again") {
		t.Fatalf("a released session's page: %q; timeline %q", got.text("#set-aside"), got.text("#timeline"))
	}
	if _, err := d.st.FinishSession(context.Background(), models.Outcome{SessionID: open.ID, EntryID: models.NewID(), Status: models.StatusExpired,
		Source: "server", Message: "no transaction was submitted before the session expired", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if got := a.get("/dashboard/test/payments/" + open.ID); got.doc.Find("#set-aside").Length() != 0 {
		t.Fatalf("an expired session says set aside: %q", got.text("#set-aside"))
	}

	// The detail page.
	dids, _, err := d.st.WebhookDeliveries(context.Background(), models.Scope{MerchantID: a.id, Mode: models.ModeTest},
		models.DeliveryFilter{SessionID: paid.ID}, models.Page{Limit: 10})
	if err != nil || len(dids) != 1 {
		t.Fatalf("deliveries %v %v", dids, err)
	}
	if err := d.st.RecordDeliveryAttempt(context.Background(), models.AttemptRecord{DeliveryID: dids[0].ID, Attempt: 1, ResponseStatus: 503,
		At: time.Now(), Status: models.DeliveryPending, Error: "receiver answered 503"}); err != nil {
		t.Fatal(err)
	}
	dp := a.get("/dashboard/test/payments/" + paid.ID)
	if dp.status != 200 {
		t.Fatalf("detail %d", dp.status)
	}
	for sel, want := range map[string]string{
		"#timeline":    "txn confirming seen on chain (Base Sepolia (test))",
		"#transaction": hash,
		"h1":           "25.50 USDC complete",
		"#deliveries":  "checkout.completed",
		".attempts td": "503receiver answered 503",
		"#customer-h":  "Customer",
		// Refunds are on in test mode by default: the balance and the form.
		"#refund-balance": "Refunded 0.00 of 25.50 USDC · refundable 25.50 USDC",
		"#refunds form":   "Create the refund",
	} {
		if got := dp.text(sel); !strings.Contains(got, want) {
			t.Errorf("%s: %q lacks %q", sel, got, want)
		}
	}
	if !strings.Contains(dp.body, "Ann &lt;i&gt;") {
		t.Error("customer name not shown escaped")
	}
	// An operator turned refunds off: the card says so, no form.
	if _, err := d.st.SetRefundsEnabled(context.Background(), a.id, false); err != nil {
		t.Fatal(err)
	}
	if off := a.get("/dashboard/test/payments/" + paid.ID); !strings.Contains(off.text("#refunds-off"), "not enabled") || off.doc.Find("#refund-form").Length() != 0 {
		t.Fatalf("refunds off: %q", off.text("#refunds"))
	}
	// A create sent anyway (a stale page): the API's refusal shows, though
	// no form is offered.
	if r := a.post("/dashboard/test/payments/"+paid.ID+"/refunds", url.Values{"amount": {"1"}}); r.status != http.StatusForbidden ||
		!strings.Contains(r.text("#refunds .error"), "refunds are disabled") {
		t.Fatalf("refused create: %d %q", r.status, r.text("#refunds"))
	}
	// A refund failed TX_NOT_FOUND whose transfer is still watched: shown
	// with its reason and a notice that its amount stays reserved until the
	// watch ends (nothing else is refundable: no form).
	if _, err := d.st.SetRefundsEnabled(context.Background(), a.id, true); err != nil {
		t.Fatal(err)
	}
	pd, err := d.st.PaymentOf(context.Background(), models.Scope{MerchantID: a.id, Mode: models.ModeTest}, paid.ID)
	if err != nil || pd.Transaction == nil {
		t.Fatalf("payment %v", err)
	}
	// A refund that expired without a transfer: its amount free again, a
	// transfer sent late still found for a week.
	ex, err := d.st.CreateRefund(context.Background(), models.RefundRequest{Scope: models.Scope{MerchantID: a.id, Mode: models.ModeTest},
		TransactionID: pd.Transaction.ID, Amount: money.FromCents(100), InitiatedBy: models.InitiatedByMerchant, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.st.FinishRefund(context.Background(), models.RefundOutcome{RefundID: ex.ID, Status: models.RefundFailed, Reason: models.ReasonRefundExpired,
		Message: "no refund transfer was submitted within 1h0m0s", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if got := a.get("/dashboard/test/payments/" + paid.ID).text("#refund-" + ex.ID); !strings.Contains(got, "Its amount is refundable again. A transfer of exactly 1.00 USDC from") ||
		!strings.Contains(got, "is still found on chain, and this refund then succeeds with it") {
		t.Fatalf("an expired refund: %q", got)
	}
	if action, _ := a.get("/dashboard/test/payments/" + paid.ID).doc.Find("#refund-" + ex.ID + " details form").Attr("action"); action != "/dashboard/test/payments/"+paid.ID+"/refunds/"+ex.ID+"/submit" {
		t.Fatalf("an expired refund's late hash form %q", action)
	}
	rf, err := d.st.CreateRefund(context.Background(), models.RefundRequest{Scope: models.Scope{MerchantID: a.id, Mode: models.ModeTest},
		TransactionID: pd.Transaction.ID, InitiatedBy: models.InitiatedByMerchant, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.st.SubmitRefundTx(context.Background(), rf.ID, "0x"+strings.Repeat("cd", 32), time.Now()); err != nil {
		t.Fatal(err)
	}
	watchedUntil := time.Now().Add(7 * 24 * time.Hour)
	if _, err := d.st.FinishRefund(context.Background(), models.RefundOutcome{RefundID: rf.ID, Status: models.RefundFailed, Reason: "TX_NOT_FOUND", At: time.Now(),
		Message:      "refund transaction not found on base_sepolia within 1h0m0s; it is still watched until 2026-12-03T09:00:00Z: if it lands by then, the refund succeeds",
		WatchedUntil: &watchedUntil}); err != nil {
		t.Fatal(err)
	}
	w := a.get("/dashboard/test/payments/" + paid.ID)
	if !strings.Contains(w.text("#refunds .refund"), "TX_NOT_FOUND: refund transaction not found") ||
		!strings.Contains(w.text("#refund-watched"), "Its 25.50 USDC stay reserved until then, so they cannot be refunded twice") ||
		!strings.Contains(w.text("#refund-watched"), "still watched until "+watchedUntil.UTC().Format("2006-01-02 15:04 UTC")+" (it was not found on chain in time)") ||
		!strings.Contains(w.text("#refund-balance"), "refundable 0.00 USDC") || w.doc.Find("#refund-form").Length() != 0 ||
		!strings.Contains(w.text("#refunds-none"), "still watched") {
		t.Fatalf("watched refund: %q", w.text("#refunds"))
	}
	// Its hash can be replaced (the wallet sped the transfer up).
	if action, _ := w.doc.Find("#refund-" + rf.ID + " details form").Attr("action"); action != "/dashboard/test/payments/"+paid.ID+"/refunds/"+rf.ID+"/submit" {
		t.Fatalf("replacement form %q", action)
	}
	// The transfer lands: the link's and the customer's pages count the
	// refund beside their gross totals.
	if _, err := d.st.FinishLateRefund(context.Background(), models.RefundOutcome{RefundID: rf.ID, Status: models.RefundSucceeded,
		TxHash: "0x" + strings.Repeat("cd", 32), At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if lp := a.get("/dashboard/test/links/" + link); !strings.Contains(lp.text("dl"), "Collected25.50 USDC in 1 payment · 25.50 USDC refunded") {
		t.Fatalf("the link's totals: %q", lp.text("dl"))
	}
	if pd.Transaction.CustomerID == nil {
		t.Fatal("the payment has no customer")
	}
	if cp := a.get("/dashboard/test/customers/" + *pd.Transaction.CustomerID); !strings.Contains(cp.text("#customer-refunded"), "25.50 USDC refunded") {
		t.Fatalf("the customer's totals: %q", cp.text("dl"))
	}
	// The payment's link has a page of its own: linked.
	if dp.doc.Find(".hint a[href*='/links/']").Length() != 1 {
		t.Error("the payment's link is not linked")
	}
	action, _ := dp.doc.Find("#deliveries form").Attr("action")
	r := a.post(action, nil)
	if r.status != http.StatusSeeOther || !strings.HasSuffix(r.loc, "?done=delivery.retried#deliveries") {
		t.Fatalf("resend %d %s", r.status, r.loc)
	}
	if got := a.follow(r).text(".notice"); !strings.Contains(got, "Resent") {
		t.Fatalf("notice %q", got)
	}
	if len(d.retried.ids) != 1 || d.retried.ids[0] != dids[0].ID {
		t.Fatalf("retried %v", d.retried.ids)
	}

	// Merchant B: none of it.
	b := d.signup("Other")
	if p := b.get("/dashboard/test/payments"); p.doc.Find("#payments tbody a[href*='/payments/']").Length() != 0 {
		t.Fatal("merchant B lists A's payments")
	}
	if p := b.get("/dashboard/test/payments/" + paid.ID); p.status != 404 || strings.Contains(p.body, hash) {
		t.Fatalf("merchant B opened A's payment: %d", p.status)
	}
	if p := b.post(action, nil); p.status != 404 {
		t.Fatalf("merchant B resent A's delivery: %d", p.status)
	}
	if p := a.get("/dashboard/test/payments/" + models.NewID()); p.status != 404 {
		t.Fatalf("missing payment %d", p.status)
	}
}

// TestDashboardLinks: create (errors shown at the form, values kept;
// a double submit creates once), edit, deactivate, QR code and delete;
// merchant B reaches none of A's links.
func TestDashboardLinks(t *testing.T) {
	d := newDash(t)
	a := d.signup("Shop")
	p := a.get("/dashboard/test/links")
	idem, _ := p.doc.Find("#link-form input[name=idem]").Attr("value")
	if p.status != 200 || idem == "" {
		t.Fatalf("links page %d", p.status)
	}
	bad := a.post("/dashboard/test/links", url.Values{"idem": {idem}, "name": {"Mug"}, "amount": {"33.999"}, "networks": {"base_sepolia"}})
	if bad.status != 400 || !strings.Contains(bad.text("#new-link .error"), "amount: must have at most 2 decimal places") {
		t.Fatalf("bad link %d %q", bad.status, bad.text("#new-link .error"))
	}
	if v, _ := bad.doc.Find("#name").Attr("value"); v != "Mug" {
		t.Fatalf("form lost its values: %q", v)
	}
	form := url.Values{"idem": {idem}, "name": {"Mug <b>"}, "description": {"Stoneware"}, "amount": {"12.50"},
		"networks": {"eth_sepolia", "base_sepolia"}}
	r := a.post("/dashboard/test/links", form)
	if r.status != http.StatusSeeOther || !strings.Contains(r.loc, "/dashboard/test/links/") {
		t.Fatalf("create %d %s", r.status, r.loc)
	}
	again := a.post("/dashboard/test/links", form)
	if again.loc != r.loc {
		t.Fatalf("a double submit created another link: %s then %s", r.loc, again.loc)
	}
	lp := a.follow(r)
	id := strings.TrimPrefix(strings.Split(r.loc, "?")[0], "/dashboard/test/links/")
	hosted, _ := lp.doc.Find("#hosted-url").Attr("value")
	if lp.status != 200 || !strings.Contains(lp.text(".notice"), "created") || hosted != d.srv.URL+"/pay/"+id ||
		!strings.Contains(lp.text(".facts"), "Ethereum Sepolia (test), Base Sepolia (test)") || !strings.Contains(lp.body, "Mug &lt;b&gt;") {
		t.Fatalf("link page %d %q %q", lp.status, hosted, lp.text(".facts"))
	}
	qr := a.get("/dashboard/test/links/" + id + "/qr.svg?download=1")
	if qr.status != 200 || qr.header.Get("Content-Type") != "image/svg+xml" || !strings.Contains(qr.header.Get("Content-Disposition"), "attachment") ||
		!strings.HasPrefix(qr.body, "<svg") {
		t.Fatalf("QR %d %v", qr.status, qr.header)
	}
	// Edit: an error shows at the form; a good edit saves.
	if e := a.post("/dashboard/test/links/"+id, url.Values{"name": {""}, "amount": {"12.50"}}); e.status != 400 || !strings.Contains(e.text("#edit .error"), "name:") {
		t.Fatalf("bad edit %d %q", e.status, e.text("#edit .error"))
	}
	if e := a.follow(a.post("/dashboard/test/links/"+id, url.Values{"name": {"Big mug"}, "amount": {"14"}})); !strings.Contains(e.text("h1"), "Big mug") ||
		!strings.Contains(e.text(".facts"), "14.00 USD") {
		t.Fatalf("edit: %q %q", e.text("h1"), e.text(".facts"))
	}
	off := a.follow(a.post("/dashboard/test/links/"+id+"/active", url.Values{"active": {"false"}}))
	if !strings.Contains(off.text("h1"), "inactive") || off.doc.Find("#activate").Length() != 1 {
		t.Fatalf("deactivate: %q", off.text("h1"))
	}
	if l := a.get("/dashboard/test/links?active=false"); l.doc.Find("#links tbody a").Length() != 1 {
		t.Fatal("inactive filter")
	}
	// Merchant B: not A's link, not its QR, cannot change or delete it.
	b := d.signup("Other")
	for _, path := range []string{"/dashboard/test/links/" + id, "/dashboard/test/links/" + id + "/qr.svg"} {
		if p := b.get(path); p.status != 404 {
			t.Errorf("B GET %s: %d", path, p.status)
		}
	}
	for _, path := range []string{"/dashboard/test/links/" + id, "/dashboard/test/links/" + id + "/active", "/dashboard/test/links/" + id + "/delete"} {
		if p := b.post(path, url.Values{"name": {"stolen"}, "amount": {"1"}, "active": {"true"}}); p.status != 404 {
			t.Errorf("B POST %s: %d", path, p.status)
		}
	}
	if n := b.get("/dashboard/test/links").doc.Find("#links tbody a").Length(); n != 0 {
		t.Fatalf("B lists %d links", n)
	}
	del := a.post("/dashboard/test/links/"+id+"/delete", nil)
	if del.status != http.StatusSeeOther || !strings.Contains(a.follow(del).text(".notice"), "deleted") {
		t.Fatalf("delete %d", del.status)
	}
	if p := a.get("/dashboard/test/links/" + id); p.status != 404 {
		t.Fatalf("deleted link answered %d", p.status)
	}
}

// TestDashboardWebhooks: an endpoint's secret is shown once on create and
// once on rotate; a test event lands in the delivery log, which filters
// and resends; disable and delete; merchant B reaches none of it.
func TestDashboardWebhooks(t *testing.T) {
	d := newDash(t)
	a := d.signup("Shop")
	p := a.get("/dashboard/test/webhooks")
	idem, _ := p.doc.Find("#webhook-form input[name=idem]").Attr("value")
	if bad := a.post("/dashboard/test/webhooks", url.Values{"idem": {idem}, "url": {"ftp://x"}, "events": {"checkout.completed"}}); bad.status != 400 ||
		!strings.Contains(bad.text("#new-endpoint .error"), "url:") {
		t.Fatalf("bad endpoint %d %q", bad.status, bad.text("#new-endpoint .error"))
	}
	created := a.post("/dashboard/test/webhooks", url.Values{"idem": {idem}, "url": {"http://127.0.0.1:9/hook"}, "events": {"checkout.completed", "payment.completed"}})
	secret := created.text("#new-secret")
	if created.status != 201 || !strings.HasPrefix(secret, "whsec_") || !strings.Contains(created.text(".secret"), "shown once") {
		t.Fatalf("create %d %q", created.status, created.text("main"))
	}
	list := a.get("/dashboard/test/webhooks")
	if strings.Contains(list.body, secret) || list.doc.Find(".endpoint").Length() != 1 {
		t.Fatal("the secret is shown again, or the endpoint is missing")
	}
	rotateAction, _ := list.doc.Find(".endpoint form[action$='/rotate']").Attr("action")
	if sel := list.doc.Find(".endpoint select[name=overlap] option[selected]"); sel.AttrOr("value", "") != "86400" {
		t.Fatalf("the rotation's overlap offered by default: %q", sel.AttrOr("value", ""))
	}
	rotated := a.post(rotateAction, url.Values{"overlap": {"86400"}})
	if rotated.status != 200 || !strings.HasPrefix(rotated.text("#new-secret"), "whsec_") || rotated.text("#new-secret") == secret {
		t.Fatalf("rotate %d %q", rotated.status, rotated.text("#new-secret"))
	}
	if !strings.Contains(rotated.text("#previous-secret"), "also signs every delivery until") ||
		!strings.Contains(rotated.text(".endpoint .hint"), "previous secret signs too until") {
		t.Fatalf("the overlap is not shown: %q / %q", rotated.text("#previous-secret"), rotated.text(".endpoint .hint"))
	}
	if bad := a.post(rotateAction, url.Values{"overlap": {"a day"}}); bad.status != 400 || !strings.Contains(bad.text(".error"), "how long") {
		t.Fatalf("a bad overlap: %d %q", bad.status, bad.text(".error"))
	}
	if bad := a.post(rotateAction, url.Values{"overlap": {"9999999"}}); bad.status != 400 || !strings.Contains(bad.text(".error"), "previousSecretExpiresIn") {
		t.Fatalf("an overlap past seven days: %d %q", bad.status, bad.text(".error"))
	}
	// Rotating with "stops now" ends the overlap.
	if now := a.post(rotateAction, url.Values{"overlap": {"0"}}); now.status != 200 || now.doc.Find("#previous-secret").Length() != 0 ||
		strings.Contains(now.text(".endpoint .hint"), "previous secret") {
		t.Fatalf("rotate without overlap: %d %q", now.status, now.text(".endpoint .hint"))
	}
	// The form sent twice (a double click, the answer reloaded) rotates
	// once: the same new secret both times (before, the second rotated
	// again, and the secret the receiver held stopped signing at once).
	key, _ := list.doc.Find(".endpoint form[action$='/rotate'] input[name=idem]").Attr("value")
	once := a.post(rotateAction, url.Values{"overlap": {"86400"}, "idem": {key}})
	twice := a.post(rotateAction, url.Values{"overlap": {"86400"}, "idem": {key}})
	if key == "" || once.status != 200 || twice.status != 200 || !strings.HasPrefix(once.text("#new-secret"), "whsec_") ||
		twice.text("#new-secret") != once.text("#new-secret") {
		t.Fatalf("rotate sent twice: %q %d %q / %d %q", key, once.status, once.text("#new-secret"), twice.status, twice.text("#new-secret"))
	}
	testAction, _ := list.doc.Find(".endpoint form[action$='/test']").Attr("action")
	tested := a.follow(a.post(testAction, nil))
	if !strings.Contains(tested.text(".notice"), "Test event sent") || !strings.Contains(tested.text("#log .delivery"), "webhook.test") {
		t.Fatalf("test event: %q / %q", tested.text(".notice"), tested.text("#log"))
	}
	if f := a.get("/dashboard/test/webhooks?event=checkout.completed"); f.doc.Find("#log .delivery").Length() != 0 {
		t.Fatal("event filter")
	}
	if f := a.get("/dashboard/test/webhooks?event=webhook.test&status=pending"); f.doc.Find("#log .delivery").Length() != 1 {
		t.Fatal("event and status filter")
	}
	resend, _ := tested.doc.Find("#log .delivery form").Attr("action")
	if r := a.post(resend, nil); r.status != http.StatusSeeOther || !strings.Contains(r.loc, "done=delivery.retried") || len(d.retried.ids) != 1 {
		t.Fatalf("resend %d %s %v", r.status, r.loc, d.retried.ids)
	}
	// Merchant B.
	b := d.signup("Other")
	for _, path := range []string{rotateAction, testAction, resend, strings.Replace(rotateAction, "/rotate", "/delete", 1)} {
		if r := b.post(path, nil); r.status != 404 || strings.Contains(r.body, secret) || strings.Contains(r.body, "127.0.0.1:9") {
			t.Errorf("B POST %s: %d", path, r.status)
		}
	}
	if l := b.get("/dashboard/test/webhooks"); l.doc.Find(".endpoint").Length() != 0 || l.doc.Find("#log .delivery").Length() != 0 {
		t.Fatal("B sees A's endpoints or deliveries")
	}
	// Disable: a test event is refused with the API's message; delete.
	off := a.follow(a.post(strings.Replace(rotateAction, "/rotate", "/active", 1), url.Values{"active": {"false"}}))
	if !strings.Contains(off.text(".endpoint"), "inactive") {
		t.Fatalf("disable: %q", off.text(".endpoint"))
	}
	if r := a.post(testAction, nil); r.status != 409 || !strings.Contains(r.text(".error"), "disabled") {
		t.Fatalf("test on a disabled endpoint: %d %q", r.status, r.text(".error"))
	}
	gone := a.follow(a.post(strings.Replace(rotateAction, "/rotate", "/delete", 1), nil))
	if gone.doc.Find(".endpoint").Length() != 0 || !strings.Contains(gone.text("#log .delivery"), "failed to http://127.0.0.1:9/hook") {
		t.Fatalf("delete: %q", gone.text("#log"))
	}
}

// TestDashboardAccountPages: keys (created or regenerated shown once,
// masked in the list, live refused without KYB with the API's message);
// KYB submitted then corrected; settings (wallets, name, origins) with the
// API's errors at the form; a logo upload; a payout refused on a testnet.
func TestDashboardAccountPages(t *testing.T) {
	d := newDash(t)
	a := d.signup("Shop")
	dev := a.get("/dashboard/test/developers")
	if dev.status != 200 || !strings.Contains(dev.text("#key-test"), "svc_test_sk_") || strings.Contains(dev.body, a.testKey) ||
		dev.doc.Find("#regenerate-test").Length() != 1 || dev.doc.Find("#create-live").Length() != 1 {
		t.Fatalf("developers %d %q", dev.status, dev.text("#key-list"))
	}
	regen := a.post("/dashboard/test/developers/keys", url.Values{"keyType": {"test"}})
	newKey := regen.text("#new-key")
	if regen.status != 201 || !strings.HasPrefix(newKey, "svc_test_sk_") || newKey == a.testKey {
		t.Fatalf("regenerate %d %q", regen.status, newKey)
	}
	if !strings.HasSuffix(newKey, strings.Split(regen.text("#key-test td.mono"), "…")[1]) {
		t.Fatalf("list %q does not mask the new key %q", regen.text("#key-test"), newKey)
	}
	if live := a.post("/dashboard/test/developers/keys", url.Values{"keyType": {"live"}}); live.status != 403 ||
		!strings.Contains(live.text("#keys .error"), "KYB") {
		t.Fatalf("live key without KYB: %d %q", live.status, live.text("#keys .error"))
	}

	biz := a.get("/dashboard/test/business")
	if v, _ := biz.doc.Find("#businessName").Attr("value"); biz.status != 200 || v != "Shop" {
		t.Fatalf("business %d, name %q", biz.status, v)
	}
	kyb := url.Values{"businessName": {"Shop GmbH"}, "businessType": {"GmbH"}, "country": {"DE"}, "contactName": {"Ann"},
		"contactEmail": {"nope"}}
	if bad := a.post("/dashboard/test/business/kyb", kyb); bad.status != 400 || !strings.Contains(bad.text("#kyb .error"), "contactEmail:") {
		t.Fatalf("bad KYB %d %q", bad.status, bad.text("#kyb .error"))
	}
	kyb.Set("contactEmail", "ann@shop.example")
	sent := a.follow(a.post("/dashboard/test/business/kyb", kyb))
	if !strings.Contains(sent.text(".notice"), "submitted") || !strings.Contains(sent.text("#kyb-h"), "pending") ||
		sent.doc.Find("#kyb-form input[name=update]").Length() != 1 {
		t.Fatalf("KYB: %q %q", sent.text(".notice"), sent.text("#kyb"))
	}
	// Sent twice (a double click): the second shows the first's success,
	// not its 409; with other values, the 409 stands.
	if again := a.follow(a.post("/dashboard/test/business/kyb", kyb)); !strings.Contains(again.text(".notice"), "submitted") ||
		again.text("#kyb .error") != "" {
		t.Fatalf("KYB sent twice: %q %q", again.text(".notice"), again.text("#kyb .error"))
	}
	other := url.Values{}
	for k, v := range kyb {
		other[k] = v
	}
	other.Set("country", "AT")
	if r := a.post("/dashboard/test/business/kyb", other); r.status != 409 || r.text("#kyb .error") == "" {
		t.Fatalf("another application after the first: %d %q", r.status, r.text("#kyb .error"))
	}
	// The form sends every field: one emptied is cleared (an optional
	// one; before, it kept its value under "updated").
	upd := url.Values{"update": {"1"}}
	for k, v := range kyb {
		upd[k] = v
	}
	upd.Set("website", "https://shop.example")
	upd.Set("registrationNumber", "HRB 123")
	fix := a.follow(a.post("/dashboard/test/business/kyb", upd))
	if v, _ := fix.doc.Find("#website").Attr("value"); v != "https://shop.example" || !strings.Contains(fix.text(".notice"), "updated") {
		t.Fatalf("KYB update: %q %q", v, fix.text(".notice"))
	}
	upd.Set("registrationNumber", "")
	cleared := a.follow(a.post("/dashboard/test/business/kyb", upd))
	if v, _ := cleared.doc.Find("#registrationNumber").Attr("value"); v != "" || !strings.Contains(cleared.text(".notice"), "updated") {
		t.Fatalf("KYB field cleared: %q %q", v, cleared.text(".notice"))
	}
	upd.Set("contactName", "")
	if bad := a.post("/dashboard/test/business/kyb", upd); bad.status != 400 || !strings.Contains(bad.text("#kyb .error"), "contactName:") {
		t.Fatalf("a required field emptied: %d %q", bad.status, bad.text("#kyb .error"))
	}
	if p := a.post("/dashboard/test/business/settlements", url.Values{"amount": {"1"}, "network": {"base_sepolia"},
		"destinationWallet": {evmB}, "txHash": {"0x" + strings.Repeat("1", 64)}}); p.status != 400 ||
		!strings.Contains(p.text("#settlements .error"), "network:") {
		t.Fatalf("testnet payout %d %q", p.status, p.text("#settlements .error"))
	}
	if p := a.post("/dashboard/test/business/settlements", url.Values{"amount": {"1"}, "network": {"base"},
		"destinationWallet": {evmB}, "txHash": {"0x" + strings.Repeat("1", 64)}}); p.status != 400 ||
		!strings.Contains(p.text("#settlements .error"), "amount:") {
		t.Fatalf("payout over the balance %d %q", p.status, p.text("#settlements .error"))
	}

	if bad := a.post("/dashboard/test/settings", url.Values{"businessName": {"Shop"}, "evm": {"0x1234"}, "embedOrigins": {"http://x"}}); bad.status != 400 ||
		!strings.Contains(bad.text("#profile .error"), "wallets.evm:") || !strings.Contains(bad.text("#profile .error"), "embedOrigins[0]:") {
		t.Fatalf("bad settings %d %q", bad.status, bad.text("#profile .error"))
	}
	saved := a.follow(a.post("/dashboard/test/settings", url.Values{"businessName": {"Shop & Co"}, "evm": {evmB},
		"solana": {"9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin"}, "embedOrigins": {"https://shop.example\nhttps://blog.example"}}))
	if v, _ := saved.doc.Find("#evm").Attr("value"); v != evmB || !strings.Contains(saved.text(".biz"), "Shop & Co") ||
		saved.doc.Find("#embedOrigins").Text() != "https://shop.example\nhttps://blog.example" {
		t.Fatalf("settings: %q %q %q", v, saved.text(".biz"), saved.doc.Find("#embedOrigins").Text())
	}
	// A logo: a PNG through the multipart form.
	png := []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89\x00\x00\x00\rIDATx\x9cc\xf8\x0f\x00\x00\x01\x01\x00\x05\x18\xd8N\x00\x00\x00\x00IEND\xaeB`\x82")
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, _ := mw.CreateFormFile("file", "logo.png")
	_, _ = fw.Write(png)
	_ = mw.Close()
	req, _ := http.NewRequest("POST", d.srv.URL+"/dashboard/test/settings/logo", &buf)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	up := a.do(req)
	if up.status != http.StatusSeeOther {
		t.Fatalf("logo %d %q", up.status, up.text(".error"))
	}
	logo := a.follow(up)
	src, _ := logo.doc.Find("#logo img").Attr("src")
	if !strings.HasPrefix(src, "/uploads/merchants/"+a.id+"/") || a.get(src).status != 200 {
		t.Fatalf("logo src %q", src)
	}
	var bad bytes.Buffer
	mw = multipart.NewWriter(&bad)
	fw, _ = mw.CreateFormFile("file", "x.txt")
	_, _ = fw.Write([]byte("not an image"))
	_ = mw.Close()
	req, _ = http.NewRequest("POST", d.srv.URL+"/dashboard/test/settings/logo", &bad)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	if r := a.do(req); r.status != 400 || !strings.Contains(r.text("#logo .error"), "file:") {
		t.Fatalf("bad logo %d %q", r.status, r.text("#logo .error"))
	}

	// Signed-in sessions: this one listed; another account's cannot be
	// signed out from here.
	if s := a.get("/dashboard/test/settings"); s.doc.Find("#sessions tbody tr").Length() != 1 || !strings.Contains(s.text("#sessions"), "This session") {
		t.Fatalf("sessions %q", s.text("#security"))
	}
	b := d.signup("Other")
	theirs, err := d.st.OpenDashboardSessions(context.Background(), b.id)
	if err != nil || len(theirs) != 1 {
		t.Fatalf("b's sessions %v %v", theirs, err)
	}
	if r := a.post("/dashboard/test/settings/sessions/"+theirs[0].ID+"/logout", nil); r.status != 404 || r.doc.Find("#security .error").Length() != 1 {
		t.Fatalf("another account's session: %d %q", r.status, r.text("#security"))
	}
	if r := a.post("/dashboard/test/settings/sessions/nope/logout", nil); r.status != 400 || !strings.Contains(r.text("#security .error"), "id:") {
		t.Fatalf("a malformed id: %d %q", r.status, r.text("#security"))
	}
	if r := b.get("/dashboard/test/settings"); r.status != 200 || r.doc.Find("#sessions tbody tr").Length() != 1 {
		t.Fatalf("b signed out by a: %d", r.status)
	}
}

// TestDashboardCustomersAndExceptions: customers list, search and detail
// with their payments; an exception resolved into a transaction of a
// customer, another dismissed; merchant B sees none of it.
func TestDashboardCustomersAndExceptions(t *testing.T) {
	d := newDash(t)
	a := d.signup("Shop")
	link := d.call("POST", "/api/payment-links", a.testKey, map[string]any{"name": "Mug", "amount": "25.50", "network": "base_sepolia"})["id"].(string)
	paid := d.paidSession(a, link, "ann@example.com", "0x"+strings.Repeat("ab", 32))
	d.call("POST", "/api/customers", a.testKey, map[string]any{"email": "bob@other.example", "name": "Bob"})
	list := a.get("/dashboard/test/customers")
	if n := list.doc.Find("#customers tbody a").Length(); list.status != 200 || n != 2 {
		t.Fatalf("customers %d, %d rows", list.status, n)
	}
	if n := a.get("/dashboard/test/customers?q=ANN").doc.Find("#customers tbody a").Length(); n != 1 {
		t.Fatalf("search: %d", n)
	}
	href, _ := a.get("/dashboard/test/customers?q=ann").doc.Find("#customers tbody a").Attr("href")
	cp := a.get(href)
	if cp.status != 200 || !strings.Contains(cp.text("#customer"), "25.50 USDC in 1 payment") {
		t.Fatalf("customer %d %q", cp.status, cp.text("#customer"))
	}
	if got, _ := cp.doc.Find("#payments tbody a").Attr("href"); !strings.HasSuffix(got, "/payments/"+paid.ID) {
		t.Fatalf("customer's payments link to %q", got)
	}
	// Its e-mail changed, the customer keeps its payment.
	d.call("PATCH", "/api/customers/"+strings.TrimPrefix(href, "/dashboard/test/customers/"), a.testKey, map[string]any{"email": "anne@example.com"})
	if got, _ := a.get(href).doc.Find("#payments tbody a").Attr("href"); !strings.HasSuffix(got, "/payments/"+paid.ID) {
		t.Fatalf("after an e-mail change the customer's payments link to %q", got)
	}

	ctx := context.Background()
	open := func(hash string) string {
		e := &models.PaymentException{MerchantID: a.id, Mode: models.ModeTest, Network: "base_sepolia", Kind: models.ExceptionUnmatched,
			TxHash: hash, Amount: 500_0000, PayerAddress: evmB, MerchantWalletAddress: evmA, Message: "a transfer <b>nobody</b> asked for"}
		if _, err := d.st.OpenException(ctx, e); err != nil {
			t.Fatal(err)
		}
		return e.ID
	}
	e1, e2 := open("0x"+strings.Repeat("c1", 32)), open("0x"+strings.Repeat("c2", 32))
	ex := a.get("/dashboard/test/exceptions")
	if ex.doc.Find(".exception").Length() != 2 || !strings.Contains(ex.body, "&lt;b&gt;nobody") {
		t.Fatalf("exceptions: %q", ex.text("main"))
	}
	if bad := a.post("/dashboard/test/exceptions/"+e1+"/resolve", url.Values{"customerEmail": {"nope"}}); bad.status != 400 ||
		!strings.Contains(bad.text("#exception-"+e1+" .error"), "customerEmail:") {
		t.Fatalf("bad resolve %d %q", bad.status, bad.text("#exception-"+e1))
	}
	// The subscription it renews goes to the API (alone: here with an
	// e-mail, refused, the form's error at the exception).
	if bad := a.post("/dashboard/test/exceptions/"+e1+"/resolve", url.Values{"subscriptionId": {models.NewID()}, "customerEmail": {"ann@example.com"}}); bad.status != 400 ||
		!strings.Contains(bad.text("#exception-"+e1+" .error"), "subscriptionId:") || bad.doc.Find("#sub-"+e1).Length() != 1 {
		t.Fatalf("resolve into a subscription with an e-mail %d %q", bad.status, bad.text("#exception-"+e1))
	}
	b := d.signup("Other")
	if r := b.post("/dashboard/test/exceptions/"+e1+"/dismiss", nil); r.status != 404 {
		t.Fatalf("B dismissed A's exception: %d", r.status)
	}
	if n := b.get("/dashboard/test/exceptions").doc.Find(".exception").Length(); n != 0 {
		t.Fatalf("B sees %d exceptions", n)
	}
	if n := b.get("/dashboard/test/customers").doc.Find("#customers tbody a").Length(); n != 0 {
		t.Fatalf("B sees %d customers", n)
	}
	if r := b.get(href); r.status != 404 {
		t.Fatalf("B opened A's customer: %d", r.status)
	}
	res := a.follow(a.post("/dashboard/test/exceptions/"+e1+"/resolve", url.Values{"customerEmail": {"carol@example.com"}, "note": {"phone order"}}))
	if !strings.Contains(res.text(".notice"), "resolved") || res.doc.Find(".exception").Length() != 1 {
		t.Fatalf("resolve: %q", res.text("main"))
	}
	dis := a.follow(a.post("/dashboard/test/exceptions/"+e2+"/dismiss", url.Values{"note": {"test transfer"}}))
	if !strings.Contains(dis.text(".notice"), "dismissed") || dis.doc.Find(".exception").Length() != 0 {
		t.Fatalf("dismiss: %q", dis.text("main"))
	}
	// Each form sent twice (a double click) shows its success, not the
	// second answer's 409; an action the exception's state contradicts
	// still shows the 409.
	if again := a.follow(a.post("/dashboard/test/exceptions/"+e1+"/resolve", url.Values{"customerEmail": {"carol@example.com"}})); !strings.Contains(again.text(".notice"), "resolved") {
		t.Fatalf("resolve sent twice: %q", again.text("main"))
	}
	if again := a.follow(a.post("/dashboard/test/exceptions/"+e2+"/dismiss", url.Values{"note": {"test transfer"}})); !strings.Contains(again.text(".notice"), "dismissed") {
		t.Fatalf("dismiss sent twice: %q", again.text("main"))
	}
	if r := a.post("/dashboard/test/exceptions/"+e1+"/dismiss", url.Values{}); r.status != 409 {
		t.Fatalf("dismiss of a resolved exception: %d", r.status)
	}
	if all := a.get("/dashboard/test/exceptions?status="); all.doc.Find(".exception").Length() != 2 || !strings.Contains(all.text("main"), "phone order") {
		t.Fatalf("all exceptions: %q", all.text("main"))
	}
	// The resolved transaction is a payment now.
	if n := a.get("/dashboard/test/payments?q=carol").doc.Find("#payments tbody a[href*='/payments/']").Length(); n != 1 {
		t.Fatalf("the resolved exception's payment: %d", n)
	}
}

// TestDashboardLiveMode: once KYB is approved the switch opens live mode,
// whose pages show live data only (and test pages test data only).
func TestDashboardLiveMode(t *testing.T) {
	d := newDash(t)
	a := d.signup("Shop")
	d.call("POST", "/api/payment-links", a.testKey, map[string]any{"name": "Test mug", "amount": "5", "network": "base_sepolia"})
	ctx := context.Background()
	if err := d.st.SubmitKYB(ctx, &models.KYBApplication{MerchantID: a.id, BusinessName: "Shop", BusinessType: "llc", Country: "US",
		ContactName: "A", ContactEmail: "a@example.com"}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.st.ReviewKYB(ctx, a.id, true, "", "", &models.Notification{Kind: "kyb.reviewed", Subject: "s", Body: "b"}); err != nil {
		t.Fatal(err)
	}
	if r := a.get("/dashboard/live"); r.status != http.StatusSeeOther || r.loc != "/dashboard/live/payments" {
		t.Fatalf("mode root %d %s", r.status, r.loc)
	}
	test := a.get("/dashboard/test/links")
	if href, _ := test.doc.Find("#mode-live").Attr("href"); href != "/dashboard/live/links" || strings.Contains(test.text("#mode-live"), "KYB") {
		t.Fatalf("live switch %q %q", href, test.text("#mode-live"))
	}
	live := a.get("/dashboard/live/links")
	if live.status != 200 || live.doc.Find("#links tbody a").Length() != 0 || !strings.Contains(live.text(".banner"), "real money") {
		t.Fatalf("live links %d %q", live.status, live.text("main"))
	}
	idem, _ := live.doc.Find("#link-form input[name=idem]").Attr("value")
	if bad := a.post("/dashboard/live/links", url.Values{"idem": {idem}, "name": {"Live mug"}, "amount": {"5"}, "networks": {"base_sepolia"}}); bad.status != 400 ||
		!strings.Contains(bad.text("#new-link .error"), "network:") {
		t.Fatalf("testnet in live mode: %d %q", bad.status, bad.text("#new-link .error"))
	}
	if ok := a.follow(a.post("/dashboard/live/links", url.Values{"idem": {idem}, "name": {"Live mug"}, "amount": {"5"}, "networks": {"base"}})); !strings.Contains(ok.text("h1"), "Live mug") {
		t.Fatalf("live link: %q", ok.text("main"))
	}
	if names := a.get("/dashboard/test/links").text("#links tbody"); strings.Contains(names, "Live mug") || !strings.Contains(names, "Test mug") {
		t.Fatalf("test links %q", names)
	}
	if names := a.get("/dashboard/live/links").text("#links tbody"); !strings.Contains(names, "Live mug") || strings.Contains(names, "Test mug") {
		t.Fatalf("live links %q", names)
	}

	// The balance: a live payment of 10.00 paid out whole, then refunded
	// 4.00: the refund is shown, and why the balance is below zero.
	live10 := &models.Transaction{MerchantID: a.id, Mode: models.ModeLive, Amount: money.FromCents(1000), Token: "USDC", Network: "base",
		TxHash: "0x" + strings.Repeat("7", 64), WalletAddress: evmB, MerchantWalletAddress: evmA, Verification: models.VerificationVerified}
	if err := d.st.RecordTransaction(ctx, live10); err != nil {
		t.Fatal(err)
	}
	d.call("POST", "/api/settlements?mode=live", a.session, map[string]any{"amount": "10", "token": "USDC", "network": "base",
		"destinationWallet": evmB, "txHash": "0x" + strings.Repeat("8", 64)})
	if biz := a.get("/dashboard/live/business"); !strings.Contains(biz.text("#balances tbody"), "10.00 USDC0.00 USDC10.00 USDC0.00 USDC") ||
		biz.doc.Find("#balance-negative").Length() != 0 {
		t.Fatalf("paid out: %q", biz.text("#balances tbody"))
	}
	rf, err := d.st.CreateRefund(ctx, models.RefundRequest{Scope: models.Scope{MerchantID: a.id, Mode: models.ModeLive},
		TransactionID: live10.ID, Amount: money.FromCents(400), InitiatedBy: models.InitiatedByMerchant, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	refundHash := "0x" + strings.Repeat("9", 64)
	if err := d.st.SubmitRefundTx(ctx, rf.ID, refundHash, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := d.st.FinishRefund(ctx, models.RefundOutcome{RefundID: rf.ID, Status: models.RefundSucceeded, TxHash: refundHash, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	biz := a.get("/dashboard/live/business")
	if !strings.Contains(biz.text("#balances tbody"), "10.00 USDC4.00 USDC10.00 USDC-4.00 USDC") ||
		!strings.Contains(biz.text("#balance-negative"), "Refunds made after a payout took the Base balance below zero") {
		t.Fatalf("refunded after the payout: %q %q", biz.text("#balances tbody"), biz.text("#balance-negative"))
	}
}

// TestDashboardUnderTheAddressBlock: with the API's rate limiter, a merchant
// opens many pages in a few seconds (each sends several reads in process)
// without a 429; and when strangers sharing the merchant's address have
// failed ten sign-ins, the block's 401 is shown as the block, not as a
// session that ended: the cookie stays, and sign-out says the session is
// still valid instead of "signed out" (before, both read the block as the
// session's end).
func TestDashboardUnderTheAddressBlock(t *testing.T) {
	d := newDash(t, func(p *web.Pages, deps *api.Deps) {
		cfg := ratelimit.DefaultConfig()
		cfg.ExemptLoopback = false
		lim := ratelimit.New(ratelimit.NewMemoryStore(), cfg)
		p.Limiter = lim
		deps.Limiter, deps.AuthFailures, deps.Accounts = lim.Middleware(), lim, lim
		deps.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	})
	a := d.signup("Shop")
	a.headers["X-Forwarded-For"] = "203.0.113.7"
	for i := 1; i <= 12; i++ {
		if p := a.get("/dashboard/test/payments"); p.status != http.StatusOK {
			t.Fatalf("page %d opened in a row: %d %s", i, p.status, p.text("main"))
		}
	}

	stranger := d.browser()
	stranger.headers["X-Forwarded-For"] = "203.0.113.7"
	for i := 0; i < 10; i++ {
		stranger.post("/dashboard/login", url.Values{"email": {fmt.Sprintf("x%d@nobody.example", i)}, "password": {"wrong password!!"}})
	}
	p := a.get("/dashboard/test/payments")
	if p.status != http.StatusUnauthorized || p.header.Get("Retry-After") == "" ||
		!strings.Contains(p.text("main"), "too many failed authentication attempts") {
		t.Fatalf("a page under the address block: %d %s %s", p.status, p.loc, p.text("main"))
	}
	if strings.Contains(p.header.Get("Set-Cookie"), "Max-Age=0") {
		t.Fatal("the address block dropped the session cookie")
	}
	out := a.post("/dashboard/logout", nil)
	if out.status == http.StatusSeeOther || !strings.Contains(out.text("main"), "still valid") {
		t.Fatalf("sign-out under the block: %d %s %s", out.status, out.loc, out.text("main"))
	}
	if _, err := d.st.DashboardSessionByHash(context.Background(), auth.NewHasher("dash-test-secret-dash-test-secret-dash").Hash(a.session)); err != nil {
		t.Fatalf("the session: %v (it is still valid, and the page must say so)", err)
	}
}

// TestDashboardSubscriptions: the list with its status filter and the
// subscription's page (billing, customer, the actions that apply, the
// hint on a renewal due); an action the API refuses shows its message on
// the page; merchant B sees none of it.
func TestDashboardSubscriptions(t *testing.T) {
	d := newDash(t)
	a := d.signup("Shop")
	ctx := context.Background()
	newSub := func(email, status string) *models.Subscription {
		now := time.Now().UTC()
		sub := &models.Subscription{MerchantID: a.id, Mode: models.ModeTest, Status: status, Network: "base_sepolia",
			BillingModel: models.BillingPush, CustomerEmail: email, CustomerWalletAddress: evmB, ProductName: "Coffee <club>",
			Amount: 4_200_000, BillingInterval: "month", IntervalCount: 3, MerchantWalletAddress: evmA,
			CurrentPeriodStart: now, CurrentPeriodEnd: now.AddDate(0, 3, 0)}
		if err := d.st.CreateSubscriptionFor(ctx, sub, &models.Customer{MerchantID: a.id, Mode: models.ModeTest, Email: email}); err != nil {
			t.Fatal(err)
		}
		return sub
	}
	active := newSub("ann@example.com", models.SubActive)
	due := newSub("bob@example.com", models.SubPastDue)
	list := a.get("/dashboard/test/subscriptions")
	if n := list.doc.Find("#subscriptions tbody a").Length(); list.status != 200 || n != 2 || !strings.Contains(list.body, "Coffee &lt;club&gt;") ||
		!strings.Contains(list.text("#subscriptions"), "4.20 USDC / 3 months") {
		t.Fatalf("subscriptions %d, %d rows: %q", list.status, n, list.text("#subscriptions"))
	}
	if f := a.get("/dashboard/test/subscriptions?status=past_due"); f.doc.Find("#subscriptions tbody a").Length() != 1 ||
		!strings.Contains(f.text("#subscriptions"), "bob@example.com") {
		t.Fatalf("filtered: %q", f.text("#subscriptions"))
	}
	if bad := a.get("/dashboard/test/subscriptions?status=nope"); bad.status != 400 || !strings.Contains(bad.text(".error"), "status:") {
		t.Fatalf("bad filter %d %q", bad.status, bad.text("main"))
	}
	page := a.get("/dashboard/test/subscriptions/" + active.ID)
	if page.status != 200 || !strings.Contains(page.text("#subscription"), "4.20 USDC every 3 months") ||
		page.doc.Find("#do-pause").Length() != 1 || page.doc.Find("#do-resume").Length() != 0 || page.doc.Find("#do-cancel-now").Length() != 1 ||
		page.doc.Find("#invoice-hint").Length() != 0 || page.doc.Find("#billing-error").Length() != 0 {
		t.Fatalf("active subscription %d %q", page.status, page.text("main"))
	}
	// Held (its workflow cannot open an invoice's session): the page says why.
	storetest.Exec(t, d.st, "UPDATE subscriptions SET billing_error = ? WHERE id = ?", "the receiving wallet <w> is proven by another merchant account", active.ID)
	if held := a.get("/dashboard/test/subscriptions/" + active.ID); !strings.Contains(held.text("#billing-error"), "Billing is on hold. the receiving wallet <w> is proven") {
		t.Fatalf("held subscription %q", held.text("main"))
	}
	storetest.Exec(t, d.st, "UPDATE subscriptions SET billing_error = '' WHERE id = ?", active.ID)
	if href, _ := page.doc.Find("#subscription a[href*='/customers/']").Attr("href"); !strings.HasSuffix(href, "/customers/"+*active.CustomerID) {
		t.Fatalf("customer link %q", href)
	}
	dp := a.get("/dashboard/test/subscriptions/" + due.ID)
	if dp.doc.Find("#do-pause").Length() != 0 || !strings.Contains(dp.text("#invoice-hint"), due.ID) {
		t.Fatalf("past_due subscription %q", dp.text("main"))
	}
	// No subscription service here (no Temporal): the API's error shows on
	// the page, and nothing changes.
	if r := a.post("/dashboard/test/subscriptions/"+active.ID+"/action", url.Values{"action": {"pause"}}); r.status < 400 ||
		r.doc.Find("#actions .error").Length() != 1 {
		t.Fatalf("refused action %d %q", r.status, r.text("#actions"))
	}
	if r := a.post("/dashboard/test/subscriptions/"+active.ID+"/action", url.Values{"action": {"delete"}}); r.status != 400 ||
		!strings.Contains(r.text("#actions .error"), "action:") {
		t.Fatalf("unknown action %d %q", r.status, r.text("#actions"))
	}
	b := d.signup("Other")
	if n := b.get("/dashboard/test/subscriptions").doc.Find("#subscriptions tbody a").Length(); n != 0 {
		t.Fatalf("B sees %d subscriptions", n)
	}
	if r := b.get("/dashboard/test/subscriptions/" + active.ID); r.status != 404 || strings.Contains(r.body, "ann@example.com") {
		t.Fatalf("B opened A's subscription: %d", r.status)
	}
	if r := b.post("/dashboard/test/subscriptions/"+active.ID+"/action", url.Values{"action": {"cancel_now"}}); r.status != 404 {
		t.Fatalf("B acted on A's subscription: %d", r.status)
	}
}

// TestDashboardFormSentAgainWithOtherValues: a form sent, then changed
// after going Back and sent again with its first idempotency key, is
// refused (422) once, with a new key in the form it shows: sending that
// makes the new request (before, every retry failed the same way until
// the page was reloaded).
func TestDashboardFormSentAgainWithOtherValues(t *testing.T) {
	d := newDash(t)
	a := d.signup("Shop")
	idem, _ := a.get("/dashboard/test/links").doc.Find("#link-form input[name=idem]").Attr("value")
	send := func(key, name string) dpage {
		return a.post("/dashboard/test/links", url.Values{"idem": {key}, "name": {name}, "amount": {"5"}, "networks": {"base_sepolia"}})
	}
	if first := send(idem, "Mug"); first.status != http.StatusSeeOther {
		t.Fatalf("first %d", first.status)
	}
	again := send(idem, "Cup")
	renewed, _ := again.doc.Find("#link-form input[name=idem]").Attr("value")
	if again.status != http.StatusUnprocessableEntity || renewed == "" || renewed == idem ||
		!strings.Contains(again.text("#new-link .error"), "send it again to make it as a new one") {
		t.Fatalf("sent again: %d key %q→%q %q", again.status, idem, renewed, again.text("#new-link .error"))
	}
	if ok := send(renewed, "Cup"); ok.status != http.StatusSeeOther {
		t.Fatalf("with the new key: %d %q", ok.status, ok.text("main"))
	}
	if names := a.get("/dashboard/test/links").text("#links tbody"); !strings.Contains(names, "Mug") || !strings.Contains(names, "Cup") {
		t.Fatalf("links %q", names)
	}
}

// TestDashboardPagerAfterAForm: a list shown as a form's answer pages from
// its own page: with more deliveries than a page, a refused rotation's
// answer links "Next" to the webhooks page (it linked to the form's URL,
// a 404 for a GET).
func TestDashboardPagerAfterAForm(t *testing.T) {
	d := newDash(t)
	a := d.signup("Shop")
	idem, _ := a.get("/dashboard/test/webhooks").doc.Find("#webhook-form input[name=idem]").Attr("value")
	if created := a.post("/dashboard/test/webhooks", url.Values{"idem": {idem}, "url": {"http://127.0.0.1:9/hook"},
		"events": {"checkout.completed"}}); created.status != 201 {
		t.Fatalf("create %d", created.status)
	}
	for range 51 {
		if _, err := d.st.EmitEvent(context.Background(), a.id, models.ModeTest, models.EventSpec{Type: "checkout.completed",
			Key: "k" + models.NewID(), Data: map[string]any{"livemode": false}}); err != nil {
			t.Fatal(err)
		}
	}
	rotateAction, _ := a.get("/dashboard/test/webhooks").doc.Find(".endpoint form[action$='/rotate']").Attr("action")
	refused := a.post(rotateAction, url.Values{"overlap": {"a day"}})
	if next, _ := refused.doc.Find(".pager a.next").Attr("href"); refused.status != 400 || !strings.HasPrefix(next, "/dashboard/test/webhooks?") {
		t.Fatalf("the pager of a form's answer: %d %q", refused.status, next)
	}
}

// countingReader yields left bytes of 'A' and counts what was read.
type countingReader struct{ n, left int64 }

func (r *countingReader) Read(p []byte) (int, error) {
	if r.left == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	for i := range p {
		p[i] = 'A'
	}
	r.left -= int64(len(p))
	r.n += int64(len(p))
	return len(p), nil
}

// TestFormBodiesAreBounded: a form post to a page (no credential needed)
// is read to 64 KiB at most. Before, gin parsed a multipart body of any
// size, 32 MiB in memory and the rest in temporary files, before the
// handler answered (found by an audit helper: 64 MiB read, 128 MiB
// allocated, per request).
func TestFormBodiesAreBounded(t *testing.T) {
	d := newDash(t)
	for _, path := range []string{"/dashboard/login", "/dashboard/signup", "/pay/" + models.NewID()} {
		head := "--B\r\nContent-Disposition: form-data; name=\"email\"\r\n\r\na@b.example\r\n" +
			"--B\r\nContent-Disposition: form-data; name=\"f\"; filename=\"x\"\r\nContent-Type: application/octet-stream\r\n\r\n"
		body := &countingReader{left: 64 << 20}
		// No Content-Length (chunked): the bound is the reader's.
		req, _ := http.NewRequest("POST", d.srv.URL+path, io.MultiReader(strings.NewReader(head), body, strings.NewReader("\r\n--B--\r\n")))
		req.Header.Set("Content-Type", "multipart/form-data; boundary=B")
		if res, err := http.DefaultClient.Do(req); err == nil {
			res.Body.Close()
		}
		if body.n > 8<<20 {
			t.Fatalf("%s: a stranger's form post was read to %d MiB", path, body.n>>20)
		}
		// With its length given, it is refused unread.
		big := strings.NewReader("email=" + strings.Repeat("a", 100<<10))
		req, _ = http.NewRequest("POST", d.srv.URL+path, big)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("%s: a 100 KiB form answered %d", path, res.StatusCode)
		}
	}
}
