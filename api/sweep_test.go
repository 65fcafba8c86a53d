package api_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/accounts"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/getkin/kin-openapi/openapi3"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
)

// TestSweepMalformedInput walks the router's own route table and sends every
// route that takes a JSON body, query parameters or a path id a battery of
// malformed inputs, with a valid credential of the route's kind (none on the
// customer-facing checkout routes): bodies that are not JSON or not an
// object, each field of the route's OpenAPI request schema set to a value of
// the wrong type or out of its bounds (money fields to exponents, signs,
// excess decimals, NaN and 40-digit values), each required field left out,
// unknown fields, a body past the 1 MiB limit, ids of the wrong shape and
// unknown ids in the path, and bad values of each documented query
// parameter, and a network of the other mode. Every answer must be the
// exact 4xx the input calls for (400 for a malformed input, 404 for an
// unknown path id; an unknown id in a body may be either), in SPEC.md's
// error envelope with the code SPEC.md gives its status (a 400's message
// naming the field), and must match the OpenAPI document; and no table of
// the store may change (every row of every table is compared after each
// answer). No probe is a valid request: a 2xx always fails. A route with no
// entry in sweepCases fails the test.
func TestSweepMalformedInput(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		start := time.Now()
		f := newSweepFixtures(h)
		doc, err := api.OpenAPI()
		if err != nil {
			t.Fatal(err)
		}
		auths := map[string]api.Auth{}
		for _, r := range h.srv.Routes() {
			auths[r.Method+" "+r.Path] = r.Auth
		}
		sw := &sweeper{t: t, h: h, snap: openTableSnapshot(t, h.store), idempotent: map[string]bool{}}
		for _, r := range h.srv.Routes() {
			sw.idempotent[r.Method+" "+r.Path] = r.Idempotent
		}
		sw.state = sw.snap.take()
		checkSnapshotSeesWrites(t, h, sw, f)
		cases := sweepCases()
		seen := map[string]bool{}
		var uncovered []string
		for _, r := range h.srv.Engine().Routes() {
			key := r.Method + " " + r.Path
			seen[key] = true
			c, ok := cases[key]
			if !ok {
				t.Errorf("route %s has no entry in sweepCases: give it a body, an id or the reason it is not swept", key)
				continue
			}
			if c.skip != "" {
				uncovered = append(uncovered, key+": "+c.skip)
				continue
			}
			op := doc.Paths.Find(ginToOpenAPI(r.Path)).GetOperation(r.Method)
			if op == nil {
				t.Errorf("%s: not in the OpenAPI document", key)
				continue
			}
			sw.route(key, r.Method, r.Path, auths[key], op, c, f)
		}
		for key := range cases {
			if !seen[key] {
				t.Errorf("sweepCases names %s, which the router does not serve", key)
			}
		}
		sort.Strings(uncovered)
		t.Logf("%d probes on %d routes in %s; not swept:\n  %s", sw.probes, len(seen)-len(uncovered),
			time.Since(start).Round(time.Millisecond), strings.Join(uncovered, "\n  "))
	})
}

// checkSnapshotSeesWrites: the checksum changes with an insert and with an
// update of one column (else "nothing was written" would prove nothing).
func checkSnapshotSeesWrites(t *testing.T, h *harness, sw *sweeper, f *sweepFixtures) {
	ctx := context.Background()
	scope := models.Scope{MerchantID: f.a.ID, Mode: models.ModeTest}
	c := &models.Customer{MerchantID: f.a.ID, Mode: models.ModeTest, Email: "sweep-self-check@example.com"}
	if err := h.store.CreateCustomer(ctx, c); err != nil {
		t.Fatal(err)
	}
	after := sw.snap.take()
	if diffTables(sw.state, after) == "" {
		t.Fatal("the table checksum did not see a new customer")
	}
	name := "Renamed"
	if _, err := h.store.UpdateCustomer(ctx, scope, c.ID, models.CustomerUpdate{Name: &name}); err != nil {
		t.Fatal(err)
	}
	sw.state = sw.snap.take()
	if diffTables(after, sw.state) == "" {
		t.Fatal("the table checksum did not see a customer renamed")
	}
}

// sweepCase says how to sweep one route.
type sweepCase struct {
	// skip is why the route is not swept (it takes nothing but its
	// credential, or no JSON).
	skip string
	// id is a resource of merchant A (test mode) for the :id parameter: the
	// body battery and the query battery run on it.
	id func(f *sweepFixtures) string
	// body is a request body that passes the route's checks of its input
	// (the state it meets may still refuse it, e.g. a settlement above the
	// balance); each probe breaks one thing in it. Nil: the route reads no
	// body.
	body func(f *sweepFixtures) map[string]any
	// required are the fields the handler requires beyond the document's
	// required lists (which it cannot express: "productName and amount, or
	// productId").
	required []string
	// asB acts as merchant B (signed up, no KYB application).
	asB bool
	// optionalBody: the route takes its body or none (an empty body is its
	// defaults, answered 200, not a 400).
	optionalBody bool
}

// sweepFixtures are the resources the sweep's valid bodies and ids name.
type sweepFixtures struct {
	a, b                                                      merchant
	link, customer, tx, refund, sub, product, hosted, session string
	exception, endpoint, delivery                             string
	quote                                                     map[string]json.RawMessage
	proof                                                     map[string]any
}

func newSweepFixtures(h *harness) *sweepFixtures {
	f := &sweepFixtures{a: h.withLive(h.signup()), b: h.signup()}
	iso := isolationCases()
	of := func(route string) string { return iso[route].create(h, f.a, models.ModeTest) }
	f.proof = signedProof(h, f.a)
	f.link = of("GET /api/payment-links/:id")
	f.customer = of("GET /api/customers/:id")
	f.tx = of("GET /api/transactions/:id")
	f.refund = of("GET /api/refunds/:id")
	f.sub = of("GET /api/subscriptions/:id")
	f.product = of("GET /api/v1/products/:id")
	f.hosted = of("GET /api/v1/checkouts/:id")
	f.session = of("GET /api/checkout-sessions/:id")
	f.exception = of("GET /api/payment-exceptions/:id")
	f.endpoint = of("PATCH /api/webhooks/:id")
	f.delivery = of("POST /api/webhooks/deliveries/:id/retry")
	r := h.do("POST", "/api/checkout/quote", "", map[string]any{"linkId": f.link, "network": "base_sepolia", "customer": map[string]any{"country": "US"}})
	expect(h.t, r, 200, "")
	var q struct {
		Data map[string]json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal([]byte(r.Raw), &q); err != nil {
		h.t.Fatal(err)
	}
	f.quote = q.Data
	return f
}

const sweepHash = "0x" + "9f12cd34ef56ab12cd34ef56ab12cd34ef56ab12cd34ef56ab12cd34ef56ab12"

func sweepCases() map[string]sweepCase {
	link := func(f *sweepFixtures) string { return f.link }
	customer := func(f *sweepFixtures) string { return f.customer }
	tx := func(f *sweepFixtures) string { return f.tx }
	refund := func(f *sweepFixtures) string { return f.refund }
	sub := func(f *sweepFixtures) string { return f.sub }
	product := func(f *sweepFixtures) string { return f.product }
	hosted := func(f *sweepFixtures) string { return f.hosted }
	session := func(f *sweepFixtures) string { return f.session }
	exception := func(f *sweepFixtures) string { return f.exception }
	endpoint := func(f *sweepFixtures) string { return f.endpoint }
	delivery := func(f *sweepFixtures) string { return f.delivery }
	body := func(m map[string]any) func(*sweepFixtures) map[string]any {
		return func(*sweepFixtures) map[string]any { return m }
	}
	refundBody := func(f *sweepFixtures) map[string]any { return map[string]any{"transactionId": f.tx, "amount": "0.50"} }
	submitRefund := body(map[string]any{"txHash": sweepHash})
	noInput := "takes no body, query or path input: nothing to send it but its credential"
	return map[string]sweepCase{
		"POST /api/auth/signup": {body: body(map[string]any{"email": "sweep-new@example.com", "password": "correct horse battery", "businessName": "Sweep"})},
		"POST /api/auth/login": {body: func(f *sweepFixtures) map[string]any {
			return map[string]any{"email": f.a.Email, "password": "correct horse battery"}
		}},
		"POST /api/auth/logout":        {skip: noInput + " (and a valid one ends the sweep's session)"},
		"POST /api/auth/logout-others": {skip: noInput + " (and a valid one ends the sweep's other sessions)"},
		"GET /api/auth/sessions":       {skip: noInput},
		"DELETE /api/auth/sessions/:id": {skip: "its one input is the path's id, checked by TestSignedInSessions (malformed: 400; another account's: 404); " +
			"a valid one ends a sweep session"},
		"POST /api/auth/password": {body: body(map[string]any{"currentPassword": "correct horse battery",
			"newPassword": "a new long password"})},
		"POST /api/auth/password-reset": {body: func(f *sweepFixtures) map[string]any { return map[string]any{"email": f.a.Email} }},
		"POST /api/auth/password-reset/confirm": {body: body(map[string]any{"token": "svc_reset_0123456789abcdefghijABCDEFGHIJ0123456789abc",
			"newPassword": "a new long password"})},
		"POST /api/auth/email-confirmation":         {skip: noInput + " (a valid one e-mails a link: TestEmailConfirmation)"},
		"POST /api/auth/email-confirmation/confirm": {body: body(map[string]any{"token": "svc_confirm_0123456789abcdefghijABCDEFGHIJ0123456789abc"})},
		"POST /api/auth/email-change": {skip: "a wrong password counts toward the account's sign-in lockout (the sweep's own), and a valid one " +
			"e-mails a link; TestEmailChange sends it no body, no JSON, missing, malformed and same addresses and a wrong password"},
		"GET /api/merchant":                           {skip: noInput},
		"PATCH /api/merchant":                         {body: body(map[string]any{"businessName": "Sweep"})},
		"PATCH /api/merchant/logo":                    {body: body(map[string]any{"logoUrl": "https://cdn.example.com/logo.png"})},
		"GET /api/merchant/wallet-proofs":             {skip: noInput},
		"POST /api/merchant/wallet-proofs/message":    {body: body(map[string]any{"address": evmB})},
		"POST /api/merchant/wallet-proofs":            {body: walletProofBody},
		"DELETE /api/merchant/wallet-proofs/:address": {skip: "its one input is the path's address, checked by TestWalletProofs (malformed: 400; not proven: 404)"},
		"POST /api/developer/keys":                    {body: body(map[string]any{"keyType": "test"})},
		"GET /api/developer/keys":                     {skip: noInput},
		"POST /api/kyb":                               {asB: true, body: body(map[string]any{"businessName": "Sweep", "businessType": "llc", "country": "US", "contactName": "Ann", "contactEmail": "ann@example.com"}), required: []string{"businessName", "businessType", "country", "contactName", "contactEmail"}},
		"GET /api/kyb":                                {skip: noInput},
		"PATCH /api/kyb":                              {asB: true, body: body(map[string]any{"businessName": "Sweep"})},
		"POST /api/payment-links":                     {body: body(map[string]any{"name": "Sweep", "amount": "25.50", "network": "base_sepolia"})},
		"GET /api/payment-links":                      {},
		"GET /api/payment-links/:id":                  {id: link},
		"PATCH /api/payment-links/:id":                {id: link, body: body(map[string]any{"name": "Sweep"})},
		"DELETE /api/payment-links/:id":               {id: link},
		"POST /api/customers":                         {body: body(map[string]any{"email": "sweep-customer@example.com"})},
		"GET /api/customers":                          {},
		"GET /api/customers/:id":                      {id: customer},
		"PATCH /api/customers/:id":                    {id: customer, body: body(map[string]any{"name": "Sweep"})},
		"POST /api/transactions":                      {body: body(map[string]any{"amount": "1.50", "token": "USDC", "network": "base_sepolia", "txHash": sweepHash, "walletAddress": evmB})},
		"GET /api/transactions":                       {},
		"GET /api/transactions/:id":                   {id: tx},
		"GET /api/payments":                           {},
		"GET /api/payments/:id":                       {id: session},
		"POST /api/subscriptions":                     {body: body(map[string]any{"customerEmail": "sweep-sub@example.com", "productName": "Pro", "amount": "5.00", "billingInterval": "month", "network": "base_sepolia", "customerWalletAddress": evmB}), required: []string{"customerEmail", "productName", "amount"}},
		"GET /api/subscriptions":                      {},
		"GET /api/subscriptions/:id":                  {id: sub},
		"PATCH /api/subscriptions": {body: func(f *sweepFixtures) map[string]any {
			return map[string]any{"subscriptionId": f.sub, "action": "pause"}
		}},
		"POST /api/settlements":        {body: body(map[string]any{"amount": "1.00", "token": "USDC", "network": "base", "destinationWallet": evmB, "txHash": sweepHash})},
		"GET /api/settlements":         {skip: noInput},
		"GET /api/settlements/balance": {skip: noInput},
		"GET /api/checkout/links/:id":  {id: link},
		"POST /api/checkout/quote": {body: func(f *sweepFixtures) map[string]any {
			return map[string]any{"linkId": f.link, "network": "base_sepolia", "customer": map[string]any{"country": "US"}}
		}, required: []string{"customer.country"}},
		"POST /api/checkout/session":            {body: sessionBody, required: []string{"customer.email", "customer.country"}},
		"GET /api/checkout/session/:id":         {id: session},
		"GET /api/checkout/session/:id/events":  {id: session},
		"POST /api/checkout/session/:id/wallet": {id: session, body: body(map[string]any{"status": "wallet_connecting"})},
		"POST /api/checkout/session/:id/cancel": {id: session},
		"POST /api/checkout/submit": {body: func(f *sweepFixtures) map[string]any {
			return map[string]any{"sessionId": f.session, "txHash": sweepHash}
		}},
		"POST /api/checkout/session/:id/authorization": {id: session, body: body(map[string]any{"from": evmB, "validAfter": "0", "validBefore": "99999999999", "signature": "0x" + strings.Repeat("ab", 65)})},
		"GET /api/checkout-sessions/:id":               {id: session},
		"POST /api/checkout-sessions/:id/cancel":       {id: session},
		"GET /api/openapi.json":                        {skip: noInput},
		"POST /api/upload":                             {skip: "takes a multipart/form-data file, not JSON (TestUploads sends it no file, a non-image and one over 2 MiB)"},
		"DELETE /api/upload/*key":                      {},
		"GET /uploads/*key":                            {},
		"POST /api/webhooks":                           {body: body(map[string]any{"url": "https://hooks.example.com/sweep", "events": []string{"checkout.completed"}, "mode": "test"}), required: []string{"mode"}},
		"GET /api/webhooks":                            {},
		"PATCH /api/webhooks/:id":                      {id: endpoint, body: body(map[string]any{"active": false})},
		"DELETE /api/webhooks/:id":                     {id: endpoint},
		"POST /api/webhooks/:id/rotate-secret":         {id: endpoint, body: body(map[string]any{"previousSecretExpiresIn": 3600}), optionalBody: true},
		"POST /api/webhooks/deliveries/:id/retry":      {id: delivery},
		"GET /api/webhooks/deliveries":                 {},
		"POST /api/webhooks/:id/test":                  {id: endpoint},
		"GET /api/events":                              {},
		"GET /api/payment-exceptions":                  {},
		"GET /api/payment-exceptions/:id":              {id: exception},
		"POST /api/payment-exceptions/:id/resolve":     {id: exception, body: body(map[string]any{"customerEmail": "payer@example.com"})},
		"POST /api/payment-exceptions/:id/dismiss":     {id: exception, body: body(map[string]any{"note": "sweep"})},
		"POST /api/v1/products":                        {body: body(map[string]any{"name": "Sweep", "price": "5.00"}), required: []string{"name", "price"}},
		"GET /api/v1/products":                         {},
		"GET /api/v1/products/:id":                     {id: product},
		"PATCH /api/v1/products/:id":                   {id: product, body: body(map[string]any{"name": "Sweep"})},
		"POST /api/v1/checkouts":                       {body: body(map[string]any{"name": "Sweep", "amount": "5.00", "network": "base_sepolia"}), required: []string{"name", "amount"}},
		"GET /api/v1/checkouts":                        {},
		"GET /api/v1/checkouts/:id":                    {id: hosted},
		"POST /api/v1/checkouts/:id/cancel":            {id: hosted},
		"POST /api/v1/refunds":                         {body: refundBody},
		"GET /api/v1/refunds":                          {},
		"GET /api/v1/refunds/:id":                      {id: refund},
		"POST /api/v1/refunds/:id/submit":              {id: refund, body: submitRefund},
		"POST /api/refunds":                            {body: refundBody},
		"GET /api/refunds":                             {},
		"GET /api/refunds/:id":                         {id: refund},
		"POST /api/refunds/:id/submit":                 {id: refund, body: submitRefund},
	}
}

func sessionBody(f *sweepFixtures) map[string]any {
	return map[string]any{"linkId": f.link, "quoteToken": json.RawMessage(f.quote["quoteToken"]), "walletAddress": evmB, "walletType": "evm",
		"network": "base_sepolia", "customer": map[string]any{"name": "Ann", "email": "ann@example.com", "address": "1 Main St", "country": "US"},
		"totalsSnapshot": map[string]any{"subtotalCents": f.quote["subtotalCents"], "taxCents": f.quote["taxCents"],
			"totalCents": f.quote["totalCents"], "calculationId": f.quote["calculationId"]}}
}

// Fields whose values are free bytes: a control character in them is valid.
var sweepFreeText = map[string]bool{"password": true}

// Body fields that name a resource by id.
var sweepIDFields = map[string]bool{"linkId": true, "sessionId": true, "subscriptionId": true, "customerId": true, "productId": true,
	"transactionId": true, "paymentLinkId": true}

// Money fields paid in USDC take 6 decimals; every other money field is a
// price (2 decimals).
var sweepSixDecimals = map[string]bool{"POST /api/transactions amount": true, "POST /api/settlements amount": true,
	"POST /api/refunds amount": true, "POST /api/v1/refunds amount": true}

// A missing required field may be reported under another name.
var sweepMissingAlias = map[string]string{"POST /api/subscriptions customerEmail": "customerId"}

// sweepBadQuery are the bad values of each documented query parameter. A
// parameter the document adds without an entry here fails the test.
var sweepBadQuery = map[string][]string{
	"limit":                 {"-1", "0", "abc", "100000", "1.5", "1e2", "99999999999999999999", " 5", "0x10"},
	"starting_after":        {"garbage", "1", "' OR 1=1 --", "0195c1a2-7b3c-7d4e-8f90-a1b2c3d4e5f6x", "\x00", strings.Repeat("a", 2000)},
	"since":                 {"yesterday", "2026-13-45T00:00:00Z", "1e9", "\x00", "9999-12-31T23:59:59-23:59"},
	"until":                 {"yesterday", "2026-02-30T25:00:00Z", "-1", "0001-01-01T00:00:00+01:00"},
	"status":                {"bogus", "COMPLETED", "\x00"},
	"event":                 {"bogus", "checkout.*"},
	"kind":                  {"bogus"},
	"active":                {"yes", "1", "TRUE"},
	"mode":                  {"bogus", "LIVE", "test,live"},
	"network":               {"bogus", "base"}, // base is a live network: the test key's mode refuses it
	"txHash":                {"zz", "0x1234", "\x00"},
	"paymentLinkId":         {"garbage", "\x00"},
	"transactionId":         {"garbage"},
	"endpointId":            {"garbage"},
	"sessionId":             {"garbage"},
	"customerEmail":         {"not-an-email", "a@b"},
	"customerId":            {"garbage", "' OR 1=1 --", "\x00"},
	"verification":          {"bogus", "VERIFIED", "refuted"},
	"q":                     {strings.Repeat("q", 201), "a\x00b"},
	"merchantWalletAddress": {strings.Repeat("a", 129)},
}

// probe is one request of the sweep and what it must be answered.
type probe struct {
	name   string
	method string
	path   string
	token  string
	body   []byte // nil: no body
	header map[string]string
	want   []int  // the statuses that answer it correctly
	field  string // a 400's message must name it
}

type sweeper struct {
	t      *testing.T
	h      *harness
	snap   *tableSnapshot
	state  map[string][]string
	probes int
	// idempotent: the routes kept under an Idempotency-Key.
	idempotent map[string]bool
}

func (s *sweeper) route(key, method, path string, auth api.Auth, op *openapi3.Operation, c sweepCase, f *sweepFixtures) {
	m := f.a
	if c.asB {
		m = f.b
	}
	token := ""
	switch auth {
	case api.AuthKey:
		token = m.TestKey
	case api.AuthSession:
		token = m.Session
	}
	var base map[string]any
	if c.body != nil {
		base = c.body(f)
	}
	id := ""
	if c.id != nil {
		id = c.id(f)
	}
	at := func(id string) string { return strings.Replace(path, ":id", id, 1) }
	mk := func(name string, body []byte, want []int, field string) probe {
		return probe{name: name, method: method, path: at(id), token: token, body: body, want: want, field: field}
	}
	bad := []int{http.StatusBadRequest}
	var probes []probe

	// The path: ids of the wrong shape are 400, unknown ids 404.
	switch {
	case strings.Contains(path, ":id"):
		var b []byte
		if base != nil {
			b = mustJSON(s.t, base)
		}
		for _, p := range []struct {
			id   string
			want int
		}{
			{models.NewID(), 404}, {"00000000-0000-0000-0000-000000000000", 404},
			{"not-a-uuid", 400}, {"1", 400}, {strings.ReplaceAll(models.NewID(), "-", ""), 400}, {models.NewID() + "0", 400},
			{"%7B" + models.NewID() + "%7D", 400}, {"urn:uuid:" + models.NewID(), 400}, {"%00", 400}, {"%20", 400},
			{strings.Repeat("a", 3000), 400}, {"1%27%20OR%20%271%27=%271", 400}, {"-1", 400},
		} {
			pr := probe{name: "path id " + truncate(p.id, 40), method: method, path: at(p.id), token: token, body: b, want: []int{p.want}}
			if p.want == 400 {
				pr.field = "id"
			}
			probes = append(probes, pr)
		}
	case strings.HasSuffix(path, "*key"):
		// Storage keys: outside the caller's own directory a delete is 403
		// (SPEC.md Errors rule 6); a key that names no file is 404.
		outside, absent := http.StatusForbidden, http.StatusNotFound
		if method == http.MethodGet {
			outside = http.StatusNotFound
		}
		for _, p := range []struct {
			key  string
			want int
		}{
			{"x", outside}, {"merchants/" + f.b.ID + "/" + models.NewID() + ".png", outside},
			{"merchants/" + f.a.ID + "/" + models.NewID() + ".png", absent}, {"merchants/" + f.a.ID + "/" + models.NewID() + ".exe", outside},
			{"%2e%2e/%2e%2e/etc/passwd", outside}, {"merchants/" + f.a.ID + "/%00.png", outside}, {strings.Repeat("k", 3000), outside},
		} {
			probes = append(probes, probe{name: "path key " + truncate(p.key, 40), method: method,
				path: strings.Replace(path, "*key", p.key, 1), token: token, want: []int{p.want}})
		}
	}

	// The query: every documented parameter, one bad value at a time.
	var b []byte
	if base != nil {
		b = mustJSON(s.t, base)
	}
	// The route with a trailing slash, and otherwise its valid request:
	// no such route (a redirect would be followed, the body with it).
	if !strings.HasSuffix(path, "*key") {
		probes = append(probes, probe{name: "trailing slash", method: method, path: at(id) + "/", token: token, body: b,
			want: []int{http.StatusNotFound}})
	}
	var params []string
	for _, p := range op.Parameters {
		if p.Value.In == "query" {
			params = append(params, p.Value.Name)
		}
	}
	sort.Strings(params)
	for _, name := range params {
		values, ok := sweepBadQuery[name]
		if !ok {
			s.t.Errorf("%s: query parameter %s has no bad values in sweepBadQuery", key, name)
			continue
		}
		tok := token
		if name == "mode" {
			// With an API key the key's mode decides (the document says
			// so); ?mode= is read from a dashboard session.
			tok = m.Session
		}
		for _, v := range values {
			probes = append(probes, probe{name: "query " + name + "=" + truncate(v, 40), method: method,
				path: at(id) + "?" + url.Values{name: {v}}.Encode(), token: tok, body: b, want: bad, field: name})
		}
	}
	has := func(n string) bool { return contains(params, n) }
	if has("since") && has("until") {
		probes = append(probes, probe{name: "query until before since", method: method, token: token, want: bad, field: "until",
			path: at(id) + "?since=2026-02-01T00:00:00Z&until=2026-01-01T00:00:00Z"})
	}
	if has("merchantWalletAddress") && has("limit") {
		probes = append(probes, probe{name: "query merchantWalletAddress with limit", method: method, token: token, want: bad,
			field: "merchantWalletAddress", path: at(id) + "?limit=5&merchantWalletAddress=" + evmA})
	}

	// POST routes behind the idempotency middleware: a bad key is refused,
	// and a refused request with a good key leaves no record behind.
	idem := s.idempotent[key]
	if idem {
		pr := probe{name: "Idempotency-Key of 300 characters", method: method, path: at(models.NewID()), token: token, body: b,
			header: map[string]string{api.HeaderIdempotencyKey: strings.Repeat("k", 300)}, want: bad, field: api.HeaderIdempotencyKey}
		if id == "" {
			pr.path = path
		}
		probes = append(probes, pr, probe{name: "Idempotency-Key not ASCII", method: method, path: pr.path, token: token,
			body: b, header: map[string]string{api.HeaderIdempotencyKey: "clé"}, want: bad, field: api.HeaderIdempotencyKey})
	}

	if n, _ := base["network"].(string); n != "" {
		// SPEC.md Errors rules 2 and 4: a network of the other mode, and a
		// test network with a live key, are 400s.
		other := "base"
		if n == "base" {
			other = "base_sepolia"
		}
		probes = append(probes, mk("network of the other mode", mustJSON(s.t, with(base, []string{"network"}, other)), bad, "network"))
		if auth == api.AuthKey {
			pr := mk("test network with the live key", b, bad, "network")
			pr.token = m.LiveKey
			probes = append(probes, pr)
		}
	}
	if base != nil {
		// The body as a whole.
		for _, p := range []struct{ name, body string }{
			{"not JSON", "not json"}, {"XML", "<sweep/>"}, {"empty", ""}, {"whitespace", " \n\t "}, {"truncated", `{"name":`},
			{"single quotes", `{'name':'x'}`}, {"trailing data", string(b) + ` {}`}, {"two objects", string(b) + string(b)},
			{"trailing comma", strings.TrimSuffix(string(b), "}") + ",}"}, {"array", "[]"}, {"array of the body", "[" + string(b) + "]"},
			{"string", `"` + strings.ReplaceAll(string(b), `"`, `\"`) + `"`}, {"number", "1"}, {"null", "null"}, {"true", "true"},
			{"BOM", "\ufeff" + string(b)},
		} {
			if c.optionalBody && strings.TrimSpace(p.body) == "" {
				probes = append(probes, mk("body "+p.name+" (optional)", []byte(p.body), []int{http.StatusOK}, ""))
				continue
			}
			probes = append(probes, mk("body "+p.name, []byte(p.body), bad, "body"))
		}
		probes = append(probes, mk("body over the limit", oversized(base), bad, "body"))
		probes = append(probes, mk("unknown field", mustJSON(s.t, with(base, []string{"sweepUnknown"}, json.RawMessage(`1`))), bad, "sweepUnknown"))
		// Each member of the body in another case, and twice: encoding/json
		// would take the one and keep the last of the other.
		keys := make([]string, 0, len(base))
		for k := range base {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if other := strings.ToUpper(k[:1]) + k[1:]; other != k {
				renamed := with(without(base, []string{k}), []string{other}, base[k])
				probes = append(probes, mk(k+" as "+other, mustJSON(s.t, renamed), bad, other))
			}
			twice := append(append([]byte(`{"`+k+`":`), mustJSON(s.t, base[k])...), ',')
			probes = append(probes, mk(k+" twice", append(twice, b[1:]...), bad, k))
		}
		if idem {
			probes = append(probes, probe{name: "not JSON with an Idempotency-Key", method: method, path: at(id), token: token,
				body: []byte("not json"), header: map[string]string{api.HeaderIdempotencyKey: "sweep-" + models.NewID()}, want: bad, field: "body"})
		}

		// Each field of the request schema, one at a time.
		schema := requestSchema(op)
		if schema == nil {
			s.t.Errorf("%s: the handler reads a JSON body but the OpenAPI document has no application/json request schema", key)
		} else {
			var fields []sweepField
			fieldsOf(schema, nil, &fields)
			for _, fl := range fields {
				name := strings.Join(fl.path, ".")
				for _, v := range badValues(key, fl) {
					probes = append(probes, mk(name+" = "+truncate(v, 40), mustJSON(s.t, with(base, fl.path, json.RawMessage(v))), bad, name))
				}
				if sweepIDFields[fl.path[len(fl.path)-1]] {
					probes = append(probes, mk(name+" unknown", mustJSON(s.t, with(base, fl.path, models.NewID())),
						[]int{http.StatusBadRequest, http.StatusNotFound}, ""))
				}
			}
			// Each required field left out (with the empty object).
			var required [][]string
			requiredOf(schema, nil, base, &required)
			for _, r := range c.required {
				required = append(required, strings.Split(r, "."))
			}
			if len(required) > 0 {
				probes = append(probes, mk("body {}", []byte("{}"), bad, ""))
			}
			for _, r := range required {
				name := strings.Join(r, ".")
				field := name
				if alias, ok := sweepMissingAlias[key+" "+name]; ok {
					field = alias
				}
				probes = append(probes, mk("missing "+name, mustJSON(s.t, without(base, r)), bad, field))
			}
		}
	}
	for _, p := range probes {
		s.send(key, p)
	}
}

// send makes one probe and checks its answer and the store.
func (s *sweeper) send(route string, p probe) {
	t := s.t
	t.Helper()
	s.probes++
	var rdr io.Reader
	if p.body != nil {
		rdr = bytes.NewReader(p.body)
	}
	req, err := http.NewRequestWithContext(context.Background(), p.method, s.h.http.URL+p.path, rdr)
	if err != nil {
		t.Errorf("%s [%s]: %v", route, p.name, err)
		return
	}
	if p.token != "" {
		req.Header.Set("Authorization", "Bearer "+p.token)
	}
	if p.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range p.header {
		req.Header.Set(k, v)
	}
	res, err := s.h.http.Client().Do(req)
	if err != nil {
		t.Errorf("%s [%s]: %v", route, p.name, err)
		return
	}
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	fail := func(format string, args ...any) {
		t.Errorf("%s [%s] answered %d %.300s: %s", route, p.name, res.StatusCode, raw, fmt.Sprintf(format, args...))
	}
	if problems := validated(t, req, res.StatusCode, res.Header, raw); len(problems) > 0 {
		fail("%s", strings.Join(problems, "; "))
	}
	if !containsInt(p.want, res.StatusCode) {
		fail("want %v", p.want)
	}
	if res.StatusCode >= 400 {
		if msg := envelopeProblem(res.StatusCode, res.Header, raw, p.field); msg != "" {
			fail("%s", msg)
		}
	}
	now := s.snap.take()
	if res.StatusCode >= 400 {
		if d := diffTables(s.state, now); d != "" {
			fail("the refused request changed the store: %s", d)
		}
	}
	s.state = now
}

// sweepCodes are SPEC.md's error codes by HTTP status.
var sweepCodes = map[int]string{400: "BAD_REQUEST", 401: "UNAUTHORIZED", 403: "FORBIDDEN", 404: "NOT_FOUND", 409: "CONFLICT",
	429: "RATE_LIMITED", 500: "INTERNAL_ERROR", 504: "TIMEOUT"}

// envelopeProblem checks an error answer is SPEC.md's envelope: status
// "error", a message, the code SPEC.md gives the status, an optional hint
// and nothing else; a 400's message is `field: reason` pairs joined by "; ",
// one of them naming field when it is given.
func envelopeProblem(status int, header http.Header, raw []byte, field string) string {
	if ct := header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		return "Content-Type " + ct + ", want application/json"
	}
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		return "the body is not a JSON object"
	}
	for k := range body {
		if k != "status" && k != "message" && k != "code" && k != "hint" {
			return "the envelope has a field " + k
		}
	}
	msg, _ := body["message"].(string)
	code, _ := body["code"].(string)
	if body["status"] != "error" || msg == "" {
		return "not SPEC.md's error envelope"
	}
	if want, ok := sweepCodes[status]; !ok || code != want {
		return fmt.Sprintf("code %q for %d; SPEC.md gives %q", code, status, want)
	}
	if h, ok := body["hint"]; ok {
		if s, _ := h.(string); s == "" {
			return "hint is not a non-empty string"
		}
	}
	if status != http.StatusBadRequest {
		return ""
	}
	named := field == ""
	for _, part := range strings.Split(msg, "; ") {
		name, reason, ok := strings.Cut(part, ": ")
		if !ok || name == "" || reason == "" {
			return fmt.Sprintf("message part %q is not `field: reason`", part)
		}
		// The field, a part of it, or the object that holds it.
		if name == field || strings.HasPrefix(name, field+".") || strings.HasPrefix(name, field+"[") || strings.HasPrefix(field, name+".") {
			named = true
		}
	}
	if !named {
		return "the message does not name " + field
	}
	return ""
}

// validated runs validateResponse and returns its complaints instead of
// stopping the test at the first.
func validated(t testing.TB, req *http.Request, status int, header http.Header, body []byte) []string {
	c := &collectingTB{TB: t}
	func() {
		defer func() {
			if r := recover(); r != nil && r != errCollected {
				panic(r)
			}
		}()
		validateResponse(c, req, status, header, body)
	}()
	return c.problems
}

var errCollected = new(int)

type collectingTB struct {
	testing.TB
	problems []string
}

func (c *collectingTB) Helper() {}

func (c *collectingTB) Errorf(format string, args ...any) {
	c.problems = append(c.problems, fmt.Sprintf(format, args...))
}

func (c *collectingTB) Fatalf(format string, args ...any) {
	c.Errorf(format, args...)
	panic(errCollected)
}

// sweepField is one field of a request schema.
type sweepField struct {
	path   []string
	schema *openapi3.SchemaRef
}

func requestSchema(op *openapi3.Operation) *openapi3.SchemaRef {
	if op.RequestBody == nil || op.RequestBody.Value == nil {
		return nil
	}
	mt := op.RequestBody.Value.Content.Get("application/json")
	if mt == nil || mt.Schema == nil {
		return nil
	}
	return mt.Schema
}

// fieldsOf lists the properties of a schema and of its nested objects.
func fieldsOf(s *openapi3.SchemaRef, prefix []string, out *[]sweepField) {
	names := make([]string, 0, len(s.Value.Properties))
	for n := range s.Value.Properties {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := s.Value.Properties[n]
		path := append(append([]string{}, prefix...), n)
		*out = append(*out, sweepField{path: path, schema: p})
		if len(p.Value.Properties) > 0 {
			fieldsOf(p, path, out)
		}
	}
}

// requiredOf lists the required fields of a schema and of the nested
// objects the base body has.
func requiredOf(s *openapi3.SchemaRef, prefix []string, base map[string]any, out *[][]string) {
	for _, n := range s.Value.Required {
		*out = append(*out, append(append([]string{}, prefix...), n))
	}
	for n, p := range s.Value.Properties {
		if sub, ok := base[n].(map[string]any); ok && len(p.Value.Properties) > 0 {
			requiredOf(p, append(append([]string{}, prefix...), n), sub, out)
		}
	}
}

func isMoney(s *openapi3.SchemaRef) bool {
	return strings.HasSuffix(s.Ref, "/Amount") || s.Value.Type.Includes("number")
}

// badValues are the JSON values a field of this schema must refuse.
func badValues(route string, f sweepField) []string {
	s := f.schema.Value
	name := f.path[len(f.path)-1]
	long := `"` + strings.Repeat("a", 10000) + `"`
	switch {
	case isMoney(f.schema):
		v := []string{`"1e3"`, `"-1"`, `"0.001"`, `"NaN"`, `"12.5.0"`, `"1234567890123456789012345678901234567890"`, `"0"`, `""`,
			`"Infinity"`, `"+5"`, `" 5"`, `"0x10"`, `"1,000"`, `".5"`, `"5."`, `"-0.00"`, `"1.0000001"`, `"5 USD"`, `"１"`, `"1e-2"`,
			`1e3`, `-1`, `0.001`, `1e400`, `1234567890123456789012345678901234567890`, `0`, `-0`, `1.0000001`, `1E2`, `1000000000`,
			`true`, `{}`, `[]`, `["5"]`, `{"amount":5}`}
		if !sweepSixDecimals[route+" "+name] {
			v = append(v, `"12.345"`, `12.345`)
		}
		return v
	case s.Type.Is("integer"):
		return []string{`"12"`, `"1e400"`, `12.345`, `1e400`, `-1`, `99999999999999999999`, `9223372036854775807`, `true`, `{}`, `[]`}
	case s.Type.Is("boolean"):
		return []string{`"true"`, `1`, `0`, `"yes"`, `{}`, `[]`}
	case s.Type.Is("array"):
		return []string{`"x"`, `1`, `true`, `{}`, `[1]`, `[{}]`, `[[]]`, `["a\u0000b"]`}
	case s.Type.Is("object") && len(s.Properties) > 0:
		return []string{`"x"`, `1`, `true`, `[]`}
	case s.Type.Is("object"):
		return []string{`"x"`, `1`, `true`, `[]`, `{"k":1}`, `{"k":{}}`, `{"k":"a\u0000b"}`, `{"k":` + long + `}`, `{"":"x"}`}
	}
	v := []string{`12`, `12.5`, `true`, `{}`, `[]`, `["x"]`, long}
	if !sweepFreeText[name] {
		v = append(v, `"a\u0000b"`, `"a\u001bb"`)
	}
	if len(s.Enum) > 0 || s.Const != nil {
		v = append(v, `"sweep-bogus"`)
	}
	if sweepIDFields[name] {
		v = append(v, `"garbage"`, `"`+strings.ReplaceAll(models.NewID(), "-", "")+`"`)
	}
	return v
}

// with returns a copy of body with path set to v.
func with(body map[string]any, path []string, v any) map[string]any {
	out := copyBody(body)
	cur := out
	for _, p := range path[:len(path)-1] {
		next, ok := cur[p].(map[string]any)
		if !ok {
			next = map[string]any{}
		}
		next = copyBody(next)
		cur[p] = next
		cur = next
	}
	cur[path[len(path)-1]] = v
	return out
}

// without returns a copy of body without path.
func without(body map[string]any, path []string) map[string]any {
	out := copyBody(body)
	cur := out
	for _, p := range path[:len(path)-1] {
		next, ok := cur[p].(map[string]any)
		if !ok {
			return out
		}
		next = copyBody(next)
		cur[p] = next
		cur = next
	}
	delete(cur, path[len(path)-1])
	return out
}

func copyBody(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// oversized is the body with a field that takes it past the 1 MiB limit.
func oversized(base map[string]any) []byte {
	b, _ := json.Marshal(with(base, []string{"sweepPadding"}, strings.Repeat("p", 1<<20)))
	return b
}

func mustJSON(t testing.TB, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func truncate(s string, n int) string {
	q := strings.Trim(fmt.Sprintf("%q", s), `"`)
	if len(q) > n {
		return fmt.Sprintf("%s...(%d bytes)", q[:n], len(s))
	}
	return q
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func containsInt(list []int, n int) bool {
	for _, x := range list {
		if x == n {
			return true
		}
	}
	return false
}

// tableSnapshot reads every row of every table of a test store, over a
// connection of its own, in one query.
type tableSnapshot struct {
	t     testing.TB
	db    *gorm.DB
	query string
}

// Columns a refused request may still write: the minute a key was last used
// (SPEC.md's lastUsedAt, recorded for every authenticated request).
var sweepVolatile = map[string]bool{"api_keys.last_used_at": true}

func openTableSnapshot(t testing.TB, st *models.Store) *tableSnapshot {
	t.Helper()
	where := storetest.URL(t, st)
	dial := models.SQLiteDialector(where)
	if st.Dialect() == "postgres" {
		dial = postgres.Open(where)
	}
	db, err := gorm.Open(dial, &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if sqlDB, err := db.DB(); err == nil {
		t.Cleanup(func() { _ = sqlDB.Close() })
	}
	tables, err := db.Migrator().GetTables()
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(tables)
	var parts []string
	for _, table := range tables {
		cols, err := db.Migrator().ColumnTypes(table)
		if err != nil {
			t.Fatal(err)
		}
		var exprs []string
		for _, c := range cols {
			if !sweepVolatile[table+"."+c.Name()] {
				exprs = append(exprs, fmt.Sprintf(`COALESCE(CAST(%q AS TEXT), '<null>')`, c.Name()))
			}
		}
		if len(exprs) == 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf(`SELECT '%s' AS t, %s AS r FROM %q`, table, strings.Join(exprs, ` || '|' || `), table))
	}
	if len(parts) < 10 {
		t.Fatalf("the store has only %d tables: %v", len(parts), tables)
	}
	return &tableSnapshot{t: t, db: db, query: strings.Join(parts, " UNION ALL ")}
}

// take returns every row of every table, by table, sorted.
func (s *tableSnapshot) take() map[string][]string {
	rows, err := s.db.Raw(s.query).Rows()
	if err != nil {
		s.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var table, row string
		if err := rows.Scan(&table, &row); err != nil {
			s.t.Fatal(err)
		}
		out[table] = append(out[table], row)
	}
	if err := rows.Err(); err != nil {
		s.t.Fatal(err)
	}
	for _, r := range out {
		sort.Strings(r)
	}
	return out
}

// diffTables describes what changed between two snapshots ("" if nothing).
func diffTables(before, after map[string][]string) string {
	var out []string
	names := map[string]bool{}
	for k := range before {
		names[k] = true
	}
	for k := range after {
		names[k] = true
	}
	for k := range names {
		b, a := before[k], after[k]
		if strings.Join(b, "\n") == strings.Join(a, "\n") {
			continue
		}
		var added []string
		old := map[string]bool{}
		for _, r := range b {
			old[r] = true
		}
		for _, r := range a {
			if !old[r] {
				added = append(added, truncate(r, 200))
			}
		}
		out = append(out, fmt.Sprintf("%s: %d rows -> %d, new or changed %v", k, len(b), len(a), added))
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

// walletProofBody is a wallet proof of merchant A that verifies.
func walletProofBody(f *sweepFixtures) map[string]any { return f.proof }

// signedProof is a wallet proof of m that verifies: a fresh key's
// personal_sign over the message the API issues now.
func signedProof(h *harness, m merchant) map[string]any {
	h.t.Helper()
	key, _ := crypto.GenerateKey()
	wallet := crypto.PubkeyToAddress(key.PublicKey).Hex()
	r := h.do("POST", "/api/merchant/wallet-proofs/message", m.Session, map[string]any{"address": wallet})
	expect(h.t, r, 200, "")
	sig, _ := crypto.Sign(accounts.TextHash([]byte(r.str("data", "message"))), key)
	return map[string]any{"address": wallet, "issuedAt": r.str("data", "issuedAt"), "signature": "0x" + hex.EncodeToString(sig)}
}
