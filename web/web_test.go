package web_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/paygate/paygate/auth"
	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/checkout"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
	"github.com/paygate/paygate/money"
	"github.com/paygate/paygate/ratelimit"
	"github.com/paygate/paygate/web"
)

type site struct {
	t    *testing.T
	st   *models.Store
	srv  *httptest.Server
	link *models.PaymentLink
}

// newSite serves the pages over a real store and checkout service (no
// Temporal: a session's workflow would be started by the repairer).
func newSite(t *testing.T, configure ...func(*web.Pages)) *site {
	st := storetest.Open(t, "sqlite")
	ctx := context.Background()
	m := &models.Merchant{Email: "shop@x.io", PasswordHash: "x", BusinessName: "Roastery <b>&</b> Co"}
	if _, err := st.CreateMerchant(ctx, m, &models.DashboardSession{TokenHash: "s"}, models.NewKey{Hash: "k", Prefix: "p", Suffix: "s", Type: models.ModeTest}); err != nil {
		t.Fatal(err)
	}
	l := &models.PaymentLink{MerchantID: m.ID, Mode: models.ModeTest, Name: `Beans <script>alert(1)</script>`, Description: "Fresh",
		Amount: money.FromCents(1850), Currency: "USD", Network: "base_sepolia", Networks: models.StringList{"base_sepolia", "solana_devnet"},
		Token: "USDC", Active: true, WalletAddresses: models.StringMap{"base_sepolia": "0x52908400098527886E0F7030069857D2E4169EE7",
			"solana_devnet": "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin"}, MerchantWalletAddress: "0x52908400098527886E0F7030069857D2E4169EE7"}
	if err := st.CreatePaymentLink(ctx, l); err != nil {
		t.Fatal(err)
	}
	svc := &checkout.Service{Store: st, Hasher: auth.NewHasher("web-test-secret-web-test-secret-web"), Networks: chain.DefaultRegistry(),
		Tax: checkout.DefaultRates(), Lifetime: 30 * time.Minute, NotFoundWindow: time.Hour}
	cfg := web.Pages{Checkout: svc, Store: st}
	for _, f := range configure {
		f(&cfg)
	}
	pages, err := web.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	gin.SetMode(gin.ReleaseMode)
	e := gin.New()
	pages.Register(e)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return &site{t: t, st: st, srv: srv, link: l}
}

type page struct {
	status int
	header http.Header
	body   string
	loc    string
}

func (s *site) get(path string, hdr ...string) page {
	s.t.Helper()
	req, _ := http.NewRequest("GET", s.srv.URL+path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return s.do(req)
}

func (s *site) post(path string, form url.Values) page {
	s.t.Helper()
	req, _ := http.NewRequest("POST", s.srv.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return s.do(req)
}

func (s *site) do(req *http.Request) page {
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := client.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return page{status: res.StatusCode, header: res.Header, body: string(b), loc: res.Header.Get("Location")}
}

func TestPayPageToCheckoutWithoutJavaScript(t *testing.T) {
	s := newSite(t)
	p := s.get("/pay/" + s.link.ID)
	if p.status != 200 {
		t.Fatalf("pay page %d", p.status)
	}
	csp := p.header.Get("Content-Security-Policy")
	if !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") ||
		!strings.Contains(csp, "frame-ancestors 'none'") {
		t.Fatalf("CSP %q", csp)
	}
	// Data is escaped, never markup; no inline script or style anywhere.
	if strings.Contains(p.body, "<script>alert(1)") || !strings.Contains(p.body, "Beans &lt;script&gt;") || strings.Contains(p.body, "Roastery <b>") {
		t.Fatal("link or merchant name rendered unescaped")
	}
	if regexp.MustCompile(`<script>|<script [^>]*>[^<]+</script>|style="| on[a-z]+="`).MatchString(p.body) {
		t.Fatal("inline script, style attribute or event handler in the page")
	}

	// A bad form is shown again with the problems, nothing created.
	bad := s.post("/pay/"+s.link.ID, url.Values{"network": {"base_sepolia"}, "email": {"nope"}, "country": {"DE"}, "wallet": {"0x12"}})
	if bad.status != 400 || !strings.Contains(bad.body, "email:") || !strings.Contains(bad.body, "wallet:") || !strings.Contains(bad.body, `value="DE" selected`) {
		t.Fatalf("bad form: %d", bad.status)
	}
	ok := s.post("/pay/"+s.link.ID, url.Values{"network": {"base_sepolia"}, "name": {"Ann"}, "email": {"ann@example.com"}, "country": {"DE"},
		"address": {"Berlin"}, "wallet": {"0x75B69029bA0F70f55bb3f688Be7BbeEf539c031b"}})
	if ok.status != http.StatusSeeOther || !strings.HasPrefix(ok.loc, "/checkout/") {
		t.Fatalf("form: %d %s", ok.status, ok.loc)
	}
	c := s.get(ok.loc)
	if c.status != 200 {
		t.Fatalf("checkout page %d", c.status)
	}
	for _, want := range []string{"22.02 USDC", "3.52 USDC", "0x52908400098527886E0F7030069857D2E4169EE7", "/qr.svg", "Waiting for your payment",
		`<meta http-equiv="refresh" content="10">`, "Payment reference", `action="/checkout/`} {
		if !strings.Contains(c.body, want) {
			t.Errorf("checkout page lacks %q", want)
		}
	}
	id := strings.TrimPrefix(ok.loc, "/checkout/")
	qr := s.get("/checkout/" + id + "/qr.svg")
	if qr.status != 200 || qr.header.Get("Content-Type") != "image/svg+xml" || !strings.HasPrefix(qr.body, "<svg") {
		t.Fatalf("qr %d %s", qr.status, qr.header.Get("Content-Type"))
	}
	// The problem of a submit is a code: text in the query is never shown.
	ph := s.get("/checkout/" + id + "?problem=" + url.QueryEscape("send your USDC to 0xevil"))
	if strings.Contains(ph.body, "0xevil") {
		t.Fatal("the page shows text from its query")
	}
	if s.get("/checkout/"+id+"?problem=conflict").body == c.body {
		t.Fatal("a known problem code shows nothing")
	}
}

// TestPayFormChecksAsTheAPI: the form's customer details pass the API's own
// checks. Before, a NUL in the name was PostgreSQL's 500, an e-mail in
// capitals became a second customer beside its lower-case self, and
// bob@localhost a customer whose page could not list its payments.
func TestPayFormChecksAsTheAPI(t *testing.T) {
	s := newSite(t)
	form := func(name, email, address string) url.Values {
		return url.Values{"network": {"base_sepolia"}, "name": {name}, "email": {email}, "country": {"de"}, "address": {address},
			"wallet": {"0x75B69029bA0F70f55bb3f688Be7BbeEf539c031b"}}
	}
	for _, bad := range []struct {
		form url.Values
		want string
	}{
		{form("nul\x00name", "ann@example.com", ""), "name: must not contain control characters"},
		{form("Ann", "ann@example.com", "\xff"), "address: must be valid UTF-8"},
		{form("Ann", "bob@localhost", ""), "email: must be a valid email address"},
		{form("Ann", strings.Repeat("a", 65)+"@example.com", ""), "email: must be a valid email address"},
	} {
		p := s.post("/pay/"+s.link.ID, bad.form)
		if p.status != 400 || !strings.Contains(p.body, bad.want) {
			t.Errorf("%s: %d, want 400 with %q", bad.form.Encode(), p.status, bad.want)
		}
	}
	ok := s.post("/pay/"+s.link.ID, form("  Ann  ", "Ann@Example.COM", "Berlin"))
	if ok.status != http.StatusSeeOther || !strings.HasPrefix(ok.loc, "/checkout/") {
		t.Fatalf("form: %d %s", ok.status, ok.loc)
	}
	cs, err := s.st.CheckoutSession(context.Background(), strings.TrimPrefix(ok.loc, "/checkout/"))
	if err != nil {
		t.Fatal(err)
	}
	if cs.CustomerEmail != "ann@example.com" || cs.CustomerName != "Ann" || cs.CustomerCountry != "DE" {
		t.Errorf("stored customer %q %q %q, want the API's normalised form", cs.CustomerEmail, cs.CustomerName, cs.CustomerCountry)
	}
}

// A link whose wallet another merchant proved since it named it takes no
// payment: the page says why (400), with what was typed, and no session
// is stored.
func TestPayFormRefusesAWalletProvenElsewhere(t *testing.T) {
	s := newSite(t)
	ctx := context.Background()
	other := &models.Merchant{Email: "owner@x.io", PasswordHash: "x", BusinessName: "Owner"}
	if _, err := s.st.CreateMerchant(ctx, other, &models.DashboardSession{TokenHash: "s2"}, models.NewKey{Hash: "k2", Prefix: "p", Suffix: "s", Type: models.ModeTest}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.st.RecordWalletProof(ctx, &models.WalletProof{MerchantID: other.ID, Family: "evm", Address: s.link.WalletAddresses["base_sepolia"],
		Message: "m", Signature: "s", ProvedAt: time.Now()}, 0); err != nil {
		t.Fatal(err)
	}
	p := s.post("/pay/"+s.link.ID, url.Values{"network": {"base_sepolia"}, "email": {"ann@example.com"}, "country": {"DE"},
		"wallet": {"0x75B69029bA0F70f55bb3f688Be7BbeEf539c031b"}})
	if p.status != http.StatusBadRequest || !strings.Contains(p.body, "cannot take payments on base_sepolia") || !strings.Contains(p.body, "ann@example.com") {
		t.Fatalf("pay form: %d %.400s", p.status, p.body)
	}
	if rows, _, err := s.st.Payments(ctx, models.Scope{MerchantID: s.link.MerchantID, Mode: models.ModeTest}, models.PaymentFilter{}, models.Page{Limit: 5}); err != nil || len(rows) != 0 {
		t.Fatalf("sessions stored: %d %v", len(rows), err)
	}
	// Its Solana network is not that wallet: it still takes payments.
	if ok := s.post("/pay/"+s.link.ID, url.Values{"network": {"solana_devnet"}, "email": {"ann@example.com"}, "country": {"DE"},
		"wallet": {"8LxfxgNCjge8ihBiUF4AZA8LUUZh2SY2eVEur9QgFMVW"}}); ok.status != http.StatusSeeOther {
		t.Fatalf("the link's other network: %d", ok.status)
	}
	// The page offers only that network; once the other merchant proves
	// its wallet too, the link shows as not payable (no form without a
	// choice).
	page := s.get("/pay/" + s.link.ID)
	if page.status != http.StatusOK || strings.Contains(page.body, `value="base_sepolia"`) || !strings.Contains(page.body, `value="solana_devnet"`) {
		t.Fatalf("pay page: %d %.600s", page.status, page.body)
	}
	if _, err := s.st.RecordWalletProof(ctx, &models.WalletProof{MerchantID: other.ID, Family: "solana", Address: s.link.WalletAddresses["solana_devnet"],
		Message: "m", Signature: "s", ProvedAt: time.Now()}, 0); err != nil {
		t.Fatal(err)
	}
	page = s.get("/pay/" + s.link.ID)
	if page.status != http.StatusOK || strings.Contains(page.body, `id="pay-form"`) || !strings.Contains(page.body, "not accepting payments") {
		t.Fatalf("pay page with no network left: %d %.600s", page.status, page.body)
	}
}

// The hosted page's forms count as checkout mutations, with the API's:
// the eleventh in a minute from one address is refused, whichever form.
func TestHostedFormsAreRateLimited(t *testing.T) {
	limiter := ratelimit.New(ratelimit.NewMemoryStore(), ratelimit.Config{Enabled: true, Tiers: ratelimit.DefaultTiers()})
	s := newSite(t, func(p *web.Pages) { p.Limiter = limiter })
	form := url.Values{"network": {"base_sepolia"}, "email": {"ann@example.com"}, "country": {"FR"},
		"wallet": {"0x8617E340B3D01FA5F11F306F4090FD50E238070D"}}
	first := s.post("/pay/"+s.link.ID, form)
	if first.status != http.StatusSeeOther {
		t.Fatalf("form: %d", first.status)
	}
	for i := range 9 {
		path := first.loc + "/cancel"
		if i%2 == 0 {
			path = "/pay/" + s.link.ID
		}
		if r := s.post(path, form); r.status == http.StatusTooManyRequests {
			t.Fatalf("request %d refused", i+2)
		}
	}
	r := s.post(first.loc+"/submit", url.Values{"txHash": {"0x" + strings.Repeat("ab", 32)}})
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("the eleventh form in a minute: %d", r.status)
	}
	// A page for the customer, not the API's JSON.
	if !strings.Contains(r.body, "<html") || !strings.Contains(r.body, "Too many attempts") || strings.Contains(r.body, "RATE_LIMITED") {
		t.Fatalf("the refusal is not a page: %.300s", r.body)
	}
	if r := s.get(first.loc); r.status != http.StatusOK {
		t.Fatalf("the page itself is not limited: %d", r.status)
	}
}

// The hosted pages' reads have a tier of their own (each costs store
// reads): 120 a minute from one address, then a page saying to wait.
// Before, they were not limited at all.
func TestHostedPageReadsAreRateLimited(t *testing.T) {
	limiter := ratelimit.New(ratelimit.NewMemoryStore(), ratelimit.Config{Enabled: true, Tiers: ratelimit.DefaultTiers()})
	s := newSite(t, func(p *web.Pages) { p.Limiter = limiter })
	paths := []string{"/pay/" + s.link.ID, "/checkout/" + models.NewID(), "/checkout/" + models.NewID() + "/qr.svg"}
	for i := range 120 {
		if r := s.get(paths[i%len(paths)]); r.status == http.StatusTooManyRequests {
			t.Fatalf("read %d refused", i+1)
		}
	}
	r := s.get(paths[0])
	if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") == "" || !strings.Contains(r.body, "Too many attempts") {
		t.Fatalf("the 121st read in a minute: %d %q %.300s", r.status, r.header.Get("Retry-After"), r.body)
	}
}

func TestSolanaCheckoutShowsSolanaPay(t *testing.T) {
	s := newSite(t)
	ok := s.post("/pay/"+s.link.ID, url.Values{"network": {"solana_devnet"}, "email": {"ann@example.com"}, "country": {"FR"},
		"wallet": {"8LxfxgNCjge8ihBiUF4AZA8LUUZh2SY2eVEur9QgFMVW"}})
	if ok.status != http.StatusSeeOther {
		t.Fatalf("form: %d", ok.status)
	}
	c := s.get(ok.loc)
	if !strings.Contains(c.body, `href="solana:9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin?amount=22.20`) || !strings.Contains(c.body, "reference=") {
		t.Fatalf("no Solana Pay request on the page")
	}
	// The request names no session: a wallet would write a memo into the
	// transaction, where anyone reads it.
	session := strings.TrimPrefix(ok.loc, "/checkout/")
	if strings.Contains(c.body, "memo=") || session == "" || strings.Contains(c.body, "paygate%3A"+session) {
		t.Fatalf("the Solana Pay request publishes the session")
	}
}

// TestSolanaPayLabelFitsTheQRCode: a business name of 200 characters
// outside ASCII (2,400 bytes escaped) is cut in the Solana Pay request, so
// its QR code is drawn (it answered 500).
func TestSolanaPayLabelFitsTheQRCode(t *testing.T) {
	s := newSite(t)
	name := strings.Repeat("😀", 200)
	if _, err := s.st.UpdateMerchant(context.Background(), s.link.MerchantID, models.MerchantUpdate{BusinessName: &name}); err != nil {
		t.Fatal(err)
	}
	ok := s.post("/pay/"+s.link.ID, url.Values{"network": {"solana_devnet"}, "email": {"ann@example.com"}, "country": {"FR"},
		"wallet": {"8LxfxgNCjge8ihBiUF4AZA8LUUZh2SY2eVEur9QgFMVW"}})
	if ok.status != http.StatusSeeOther {
		t.Fatalf("form: %d", ok.status)
	}
	qr := s.get(ok.loc + "/qr.svg")
	if qr.status != 200 || !strings.HasPrefix(qr.body, "<svg") {
		t.Fatalf("qr of a long name: %d", qr.status)
	}
	c := s.get(ok.loc)
	if !strings.Contains(c.body, "label="+url.QueryEscape(strings.Repeat("😀", 7)+"…")) {
		t.Errorf("the label is not cut to fit")
	}
}

func TestLanguagesAndNotFound(t *testing.T) {
	s := newSite(t)
	if p := s.get("/pay/"+s.link.ID, "Accept-Language", "de-DE,de;q=0.9,en;q=0.5"); !strings.Contains(p.body, "Weiter zur Zahlung") || !strings.Contains(p.body, `lang="de"`) {
		t.Fatal("German not chosen by Accept-Language")
	}
	if p := s.get("/pay/"+s.link.ID+"?lang=de", "Accept-Language", "en"); !strings.Contains(p.body, "Weiter zur Zahlung") {
		t.Fatal("?lang=de not honoured")
	}
	if p := s.get("/pay/" + models.NewID()); p.status != 404 || !strings.Contains(p.body, "does not exist") {
		t.Fatalf("unknown link %d", p.status)
	}
	if p := s.get("/checkout/not-a-uuid"); p.status != 404 {
		t.Fatalf("bad id %d", p.status)
	}
}

// Concurrent renders in two languages never mix (functions are bound on a
// clone of the template per request); run with -race.
func TestConcurrentRendersKeepTheirLanguage(t *testing.T) {
	s := newSite(t)
	var wg sync.WaitGroup
	errs := make(chan string, 40)
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lang, want := "en", "Continue to payment"
			if i%2 == 1 {
				lang, want = "de", "Weiter zur Zahlung"
			}
			if p := s.get("/pay/" + s.link.ID + "?lang=" + lang); !strings.Contains(p.body, want) {
				errs <- lang
			}
		}()
	}
	wg.Wait()
	close(errs)
	for l := range errs {
		t.Errorf("a %s page rendered in another language", l)
	}
}

// Every message key a template uses exists (New checks that every language
// has every key of English).
func TestTemplateKeysExist(t *testing.T) {
	en, err := web.Messages("en")
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range web.TemplateSources() {
		for _, m := range regexp.MustCompile(`\{\{t "([a-zA-Z0-9_.]+)"`).FindAllStringSubmatch(body, -1) {
			if _, ok := en[m[1]]; !ok {
				t.Errorf("%s uses unknown message %q", name, m[1])
			}
		}
	}
}

// Every ISO 3166-1 country can be chosen, named in the page's language.
func TestEveryCountryOffered(t *testing.T) {
	s := newSite(t)
	p := s.get("/pay/" + s.link.ID)
	if n := strings.Count(p.body, "<option value=\""); n < 240 {
		t.Fatalf("%d countries offered", n)
	}
	if !strings.Contains(p.body, `value="AR" >Argentina`) || !strings.Contains(s.get("/pay/"+s.link.ID+"?lang=de").body, `value="DE" >Deutschland`) {
		t.Fatal("country names missing")
	}
	ok := s.post("/pay/"+s.link.ID, url.Values{"network": {"base_sepolia"}, "email": {"ana@example.com"}, "country": {"AR"},
		"wallet": {"0x75B69029bA0F70f55bb3f688Be7BbeEf539c031b"}})
	if ok.status != http.StatusSeeOther {
		t.Fatalf("a customer from Argentina: %d", ok.status)
	}
}

// TestHostedCheckoutPages: a hosted checkout's pay page fills in the
// e-mail its merchant gave; the return URLs carry the checkout's and the
// session's ids where the merchant put their placeholders; once the
// checkout is expired, cancelled or paid, its page says which and leads back
// to the shop, and a session's page offers no "Start again" (before: a
// bare "not accepting payments", and a button to a page that took nothing).
func TestHostedCheckoutPages(t *testing.T) {
	s := newSite(t, func(p *web.Pages) { p.Checkout.Now = p.Store.Now }) // one clock
	ctx := context.Background()
	hc := &models.HostedCheckout{MerchantID: s.link.MerchantID, Mode: models.ModeTest, Name: "Order A-1", Amount: money.FromCents(1200),
		Currency: "USD", CustomerEmail: "ann@example.com", SuccessURL: "https://shop.example/thanks?c={CHECKOUT_ID}&s={SESSION_ID}",
		CancelURL: "https://shop.example/cart/{CHECKOUT_ID}", ExpiresAt: time.Now().Add(time.Hour)}
	l := &models.PaymentLink{MerchantID: s.link.MerchantID, Mode: models.ModeTest, Name: "Order A-1", Amount: money.FromCents(1200),
		Currency: "USD", Network: "base_sepolia", Networks: models.StringList{"base_sepolia"}, Token: "USDC",
		WalletAddresses: models.StringMap{"base_sepolia": s.link.MerchantWalletAddress}, MerchantWalletAddress: s.link.MerchantWalletAddress}
	if err := s.st.CreateHostedCheckout(ctx, hc, l); err != nil {
		t.Fatal(err)
	}
	p := s.get("/pay/" + l.ID)
	if p.status != 200 || !strings.Contains(p.body, `value="ann@example.com"`) {
		t.Fatalf("pay page %d lacks the checkout's e-mail", p.status)
	}
	// The customer's own e-mail, sent with a problem, is shown as sent.
	bad := s.post("/pay/"+l.ID, url.Values{"network": {"base_sepolia"}, "email": {"bob@example.com"}, "country": {"DE"}, "wallet": {"0x12"}})
	if bad.status != 400 || !strings.Contains(bad.body, `value="bob@example.com"`) {
		t.Fatalf("form with a problem: %d", bad.status)
	}
	ok := s.post("/pay/"+l.ID, url.Values{"network": {"base_sepolia"}, "name": {"Ann"}, "email": {"ann@example.com"}, "country": {"DE"},
		"address": {"Berlin"}, "wallet": {"0x75B69029bA0F70f55bb3f688Be7BbeEf539c031b"}})
	if ok.status != http.StatusSeeOther {
		t.Fatalf("form: %d", ok.status)
	}
	session := strings.TrimPrefix(ok.loc, "/checkout/")
	at := time.Now()
	if _, err := s.st.FinishSession(ctx, models.Outcome{SessionID: session, EntryID: models.NewID(), Source: "chain", At: at,
		Status: models.StatusExpired}); err != nil {
		t.Fatal(err)
	}
	c := s.get(ok.loc)
	if !strings.Contains(c.body, `href="/pay/`+l.ID+`"`) || !strings.Contains(c.body, `href="https://shop.example/cart/`+hc.ID+`"`) {
		t.Fatalf("expired session of an open checkout: no way to start again or back to the shop")
	}

	// The checkout's own end: the pay page says so and leads back; the
	// session's page has no "Start again".
	s.st.SetClock(func() time.Time { return hc.ExpiresAt.Add(time.Second) })
	defer s.st.SetClock(time.Now)
	p = s.get("/pay/" + l.ID)
	if !strings.Contains(p.body, "This checkout has expired.") || !strings.Contains(p.body, `href="https://shop.example/cart/`+hc.ID+`"`) ||
		strings.Contains(p.body, `id="pay-form"`) {
		t.Fatalf("pay page of an expired checkout:\n%s", p.body)
	}
	if c = s.get(ok.loc); strings.Contains(c.body, `href="/pay/`+l.ID+`"`) {
		t.Fatal("an expired checkout's session offers to start again")
	}
	s.st.SetClock(time.Now)
	if _, err := s.st.CancelHostedCheckout(ctx, models.Scope{MerchantID: hc.MerchantID, Mode: models.ModeTest}, hc.ID); err != nil {
		t.Fatal(err)
	}
	if p = s.get("/pay/" + l.ID); !strings.Contains(p.body, "This checkout was cancelled by the shop.") {
		t.Fatal("pay page of a cancelled checkout does not say so")
	}

	// Paid: the page leads to the success URL with both ids.
	hc2 := *hc
	hc2.ID, hc2.ExpiresAt = "", time.Now().Add(time.Hour)
	l2 := *l
	l2.ID = ""
	if err := s.st.CreateHostedCheckout(ctx, &hc2, &l2); err != nil {
		t.Fatal(err)
	}
	ok = s.post("/pay/"+l2.ID, url.Values{"network": {"base_sepolia"}, "name": {"Ann"}, "email": {"ann@example.com"}, "country": {"DE"},
		"address": {"Berlin"}, "wallet": {"0x75B69029bA0F70f55bb3f688Be7BbeEf539c031b"}})
	paid := strings.TrimPrefix(ok.loc, "/checkout/")
	hash := "0x" + strings.Repeat("ab", 32)
	if err := s.st.RecordSessionTransition(ctx, models.Transition{SessionID: paid, EntryID: models.NewID(), Status: models.StatusBroadcast,
		Source: "client", TxHash: hash, At: at}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.st.FinishSession(ctx, models.Outcome{SessionID: paid, EntryID: models.NewID(), Source: "chain", At: at,
		Status: models.StatusComplete, ReceivedUnits: "12000000", Bound: true}); err != nil {
		t.Fatal(err)
	}
	back := `href="https://shop.example/thanks?c=` + hc2.ID + `&amp;s=` + paid + `"`
	if c = s.get(ok.loc); !strings.Contains(c.body, back) || strings.Contains(c.body, "{CHECKOUT_ID}") {
		t.Fatalf("paid session's page lacks %s", back)
	}
	if p = s.get("/pay/" + l2.ID); !strings.Contains(p.body, "This checkout has been paid.") || !strings.Contains(p.body, back) {
		t.Fatal("pay page of a paid checkout")
	}
}

// TestHostedCheckoutPageWhileAPaymentIsConfirmed: past its end with a
// payment broadcast in time, the checkout is open (the API says so) and its
// pay page says the payment is being confirmed, with no way back to the
// cart; one not payable here (no network served) keeps the link's words.
// Before, both said "This checkout has expired." and led back to the cart
// (found by a review helper).
func TestHostedCheckoutPageWhileAPaymentIsConfirmed(t *testing.T) {
	s := newSite(t, func(p *web.Pages) { p.Checkout.Now = p.Store.Now })
	ctx := context.Background()
	create := func(network string) (*models.HostedCheckout, *models.PaymentLink) {
		hc := &models.HostedCheckout{MerchantID: s.link.MerchantID, Mode: models.ModeTest, Name: "Order", Amount: money.FromCents(1200),
			Currency: "USD", CancelURL: "https://shop.example/cart", ExpiresAt: time.Now().Add(time.Hour)}
		l := &models.PaymentLink{MerchantID: s.link.MerchantID, Mode: models.ModeTest, Name: "Order", Amount: money.FromCents(1200),
			Currency: "USD", Network: network, Networks: models.StringList{network}, Token: "USDC",
			WalletAddresses: models.StringMap{network: s.link.MerchantWalletAddress}, MerchantWalletAddress: s.link.MerchantWalletAddress}
		if err := s.st.CreateHostedCheckout(ctx, hc, l); err != nil {
			t.Fatal(err)
		}
		return hc, l
	}
	_, elsewhere := create("not_served_here")
	if p := s.get("/pay/" + elsewhere.ID); !strings.Contains(p.body, "not accepting payments") || strings.Contains(p.body, "shop.example/cart") {
		t.Fatal("an open checkout not payable here is not told as the link's")
	}
	hc, l := create("base_sepolia")
	ok := s.post("/pay/"+l.ID, url.Values{"network": {"base_sepolia"}, "name": {"Ann"}, "email": {"ann@example.com"}, "country": {"DE"},
		"address": {"Berlin"}, "wallet": {"0x75B69029bA0F70f55bb3f688Be7BbeEf539c031b"}})
	if err := s.st.RecordSessionTransition(ctx, models.Transition{SessionID: strings.TrimPrefix(ok.loc, "/checkout/"), EntryID: models.NewID(),
		Status: models.StatusBroadcast, Source: "client", TxHash: "0x" + strings.Repeat("cd", 32), At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	s.st.SetClock(func() time.Time { return hc.ExpiresAt.Add(time.Minute) })
	defer s.st.SetClock(time.Now)
	p := s.get("/pay/" + l.ID)
	if !strings.Contains(p.body, "is being confirmed on chain") || strings.Contains(p.body, "has expired") || strings.Contains(p.body, "shop.example/cart") {
		t.Fatalf("pay page while a payment is confirmed past the end:\n%s", p.body)
	}
}
