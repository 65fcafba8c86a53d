package web

// The merchant dashboard (/dashboard/...): server-rendered pages over the
// API's own routes. Every page handler calls the API in process (the same
// gin engine, through its middleware: rate limits, idempotency, logging)
// with the merchant's session token as the bearer, decodes the answer and
// renders it; nothing is read from the store directly, so the API stays
// the one source of truth and the isolation the API guarantees is the
// dashboard's too.
//
// The session token lives in an HttpOnly, SameSite=Strict cookie (Secure
// and __Host- prefixed when served over TLS) that only /dashboard reads:
// the API itself never accepts cookies, so it has no ambient credential to
// forge. Every unsafe /dashboard request passes Go's
// http.CrossOriginProtection (Sec-Fetch-Site, then Origin against Host),
// which refuses cross-origin form posts without token plumbing.

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/paygate/paygate/ratelimit"
)

// dashViews are the dashboard's pages; each is parsed with
// dash_layout.html and dash_parts.html at start-up.
var dashViews = []string{
	"dash_login.html", "dash_signup.html", "dash_welcome.html", "dash_error.html", "dash_forgot.html", "dash_reset.html",
	"dash_confirm.html",
	"dash_payments.html", "dash_payment.html", "dash_links.html", "dash_link.html",
	"dash_webhooks.html", "dash_developers.html", "dash_business.html", "dash_settings.html",
	"dash_customers.html", "dash_customer.html", "dash_exceptions.html", "dash_subscriptions.html", "dash_subscription.html",
}

const (
	// cookieName holds the session token on plain HTTP (development);
	// cookieNameSecure over TLS, where the __Host- prefix pins it to this
	// host and path /.
	cookieName       = "paygate_session"
	cookieNameSecure = "__Host-paygate_session"
	dashPrefix       = "/dashboard"
)

// registerDashboard mounts the dashboard on the engine; api is the engine
// itself unless Pages.API says otherwise.
func (p *Pages) registerDashboard(e *gin.Engine) {
	if p.API == nil {
		p.API = e
	}
	p.cop = http.NewCrossOriginProtection()
	d := e.Group(dashPrefix, p.secure, p.dashHeaders, p.sameOrigin)
	d.GET("", p.dashHome)
	d.GET("/", p.dashHome)
	d.GET("/login", p.loginPage)
	d.POST("/login", p.loginForm)
	d.GET("/signup", p.signupPage)
	d.POST("/signup", p.signupForm)
	d.POST("/logout", p.logoutForm)
	d.GET("/forgot", p.forgotPage)
	d.POST("/forgot", p.forgotForm)
	d.GET("/reset", p.resetPage)
	d.POST("/reset", p.resetForm)
	d.GET("/confirm-email", p.confirmEmailPage)
	d.POST("/confirm-email", p.confirmEmailForm)

	m := d.Group("/:mode", p.requireMerchant)
	m.GET("", func(c *gin.Context) { back(c, "/payments", "", "") })
	m.GET("/payments", p.paymentsPage)
	m.GET("/payments/:id", p.paymentPage)
	m.POST("/payments/:id/deliveries/:did/retry", p.paymentRetryForm)
	m.POST("/payments/:id/refunds", p.paymentRefundForm)
	m.POST("/payments/:id/refunds/:rid/submit", p.paymentRefundSubmitForm)
	m.GET("/links", p.linksPage)
	m.POST("/links", p.linkCreateForm)
	m.GET("/links/:id", p.linkPage)
	m.POST("/links/:id", p.linkUpdateForm)
	m.POST("/links/:id/active", p.linkActiveForm)
	m.POST("/links/:id/delete", p.linkDeleteForm)
	m.GET("/links/:id/qr.svg", p.linkQR)
	m.GET("/webhooks", p.webhooksPage)
	m.POST("/webhooks", p.webhookCreateForm)
	m.POST("/webhooks/:id/rotate", p.webhookRotateForm)
	m.POST("/webhooks/:id/active", p.webhookActiveForm)
	m.POST("/webhooks/:id/delete", p.webhookDeleteForm)
	m.POST("/webhooks/:id/test", p.webhookTestForm)
	m.POST("/webhooks/deliveries/:did/retry", p.webhookRetryForm)
	m.GET("/customers", p.customersPage)
	m.GET("/customers/:id", p.customerPage)
	m.GET("/subscriptions", p.subscriptionsPage)
	m.GET("/subscriptions/:id", p.subscriptionPage)
	m.POST("/subscriptions/:id/action", p.subscriptionActionForm)
	m.GET("/exceptions", p.exceptionsPage)
	m.POST("/exceptions/:id/resolve", p.exceptionResolveForm)
	m.POST("/exceptions/:id/dismiss", p.exceptionDismissForm)
	m.GET("/developers", p.developersPage)
	m.POST("/developers/keys", p.keyCreateForm)
	m.GET("/business", p.businessPage)
	m.POST("/business/kyb", p.kybForm)
	m.POST("/business/settlements", p.settlementForm)
	m.GET("/settings", p.settingsPage)
	m.POST("/settings", p.settingsForm)
	m.POST("/settings/logo", p.logoForm)
	m.POST("/settings/email", p.emailChangeForm)
	m.POST("/settings/wallet-proof", p.walletProofForm)
	m.POST("/settings/wallet-proof/withdraw", p.walletProofWithdrawForm)
	m.POST("/settings/password", p.passwordForm)
	m.POST("/settings/email-confirmation", p.emailConfirmationForm)
	m.POST("/settings/logout-others", p.logoutOthersForm)
	m.POST("/settings/sessions/:id/logout", p.signOutSessionForm)
}

// dashHeaders: dashboard pages are never cached, framed or indexed.
// dashCSP is the dashboard's Content-Security-Policy.
const dashCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

func (p *Pages) dashHeaders(c *gin.Context) {
	setDashHeaders(c.Writer.Header())
	c.Next()
}

// setDashHeaders sets what the dashboard's pages add to every page's
// headers: no script or frame from elsewhere, no indexing.
func setDashHeaders(h http.Header) {
	h.Set("Content-Security-Policy", dashCSP)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Robots-Tag", "noindex")
}

// NotFound answers a request that matched no route (or not its method)
// under the dashboard or the hosted pages with a page of theirs, headers
// included, and reports whether the path was theirs (api.Deps.PageNotFound):
// an unknown dashboard URL, or a form's URL opened with GET, was the API's
// JSON.
func (p *Pages) NotFound(c *gin.Context) bool {
	path := c.Request.URL.Path
	if trimmed := strings.TrimRight(path, "/"); trimmed != path && isPagePath(trimmed) &&
		(c.Request.Method == http.MethodGet || c.Request.Method == http.MethodHead) {
		// A page's URL typed with a trailing slash: the page (the router
		// redirects no trailing slash itself, so that the API's routes
		// answer one with a 404).
		u := *c.Request.URL
		u.Path, u.RawPath = trimmed, ""
		c.Redirect(http.StatusMovedPermanently, u.RequestURI())
		c.Abort()
		return true
	}
	switch {
	case path == dashPrefix || strings.HasPrefix(path, dashPrefix+"/"):
		p.pageHeaders(c)
		setDashHeaders(c.Writer.Header())
		p.renderDash(c, http.StatusNotFound, "dash_error.html", map[string]any{"Title": "Not found", "Message": "There is no such page."})
	case strings.HasPrefix(path, "/pay/") || strings.HasPrefix(path, "/checkout/"):
		p.pageHeaders(c)
		p.render(c, http.StatusNotFound, "error.html", map[string]any{"Message": "error.notFound"})
	default:
		return false
	}
	c.Abort()
	return true
}

// isPagePath reports whether path is under the dashboard or the hosted pages.
func isPagePath(path string) bool {
	return path == dashPrefix || strings.HasPrefix(path, dashPrefix+"/") ||
		strings.HasPrefix(path, "/pay/") || strings.HasPrefix(path, "/checkout/")
}

// sameOrigin refuses cross-origin unsafe requests (CSRF) with
// http.CrossOriginProtection; safe methods pass.
func (p *Pages) sameOrigin(c *gin.Context) {
	if err := p.cop.Check(c.Request); err != nil {
		p.renderDash(c, http.StatusForbidden, "dash_error.html", map[string]any{"Title": "Refused",
			"Message": "This request came from another site and was refused. Use the dashboard's own forms."})
		c.Abort()
		return
	}
	c.Next()
}

// --- the session cookie ---

func (p *Pages) secureRequest(c *gin.Context) bool {
	return c.Request.TLS != nil || p.SecureCookies
}

func (p *Pages) sessionToken(c *gin.Context) string {
	name := cookieName
	if p.secureRequest(c) {
		name = cookieNameSecure
	}
	v, err := c.Cookie(name)
	if err != nil || !strings.HasPrefix(v, "svc_sess_") {
		return ""
	}
	return v
}

func (p *Pages) setSession(c *gin.Context, token string, expires time.Time) {
	ck := &http.Cookie{Name: cookieName, Value: token, Path: dashPrefix, HttpOnly: true, SameSite: http.SameSiteStrictMode}
	if p.secureRequest(c) {
		ck.Name, ck.Path, ck.Secure = cookieNameSecure, "/", true
	}
	if !expires.IsZero() {
		ck.Expires = expires
	} else {
		ck.MaxAge = -1
	}
	http.SetCookie(c.Writer, ck)
}

func (p *Pages) clearSession(c *gin.Context) { p.setSession(c, "", time.Time{}) }

// --- calling the API ---

// apiError is an error answer of the API: its status and SPEC.md envelope.
type apiError struct {
	Status  int
	Code    string
	Message string
	Hint    string
	// RetryAfter is the answer's Retry-After header: set on a 401 when the
	// rate limiter blocks the address, not the session.
	RetryAfter string
}

func (e *apiError) Error() string { return e.Message }

// renewKeyOnReuse: a form's idempotency key answered 422 (the form was
// sent before with other values, and that request was done: the merchant
// went Back and changed it) is replaced by a new one, so that sending the
// form again makes the new request instead of failing the same way; the
// message says what happened.
func renewKeyOnReuse(err *apiError, key *string) {
	if err == nil || err.Code != "IDEMPOTENCY_KEY_REUSED" {
		return
	}
	*key = newIdempotencyKey()
	err.Message = "This form was sent before with other values, and that request was done (see the list). " +
		"This one was not: send it again to make it as a new one."
	err.Hint = ""
}

// sessionEnded reports whether the API refused the session itself (expired,
// signed out, revoked). The address block of failed authentications is a
// 401 too, with Retry-After; the session is still valid then.
func (e *apiError) sessionEnded() bool {
	return e.Status == http.StatusUnauthorized && e.RetryAfter == ""
}

// apiEnvelope is the API's response envelope.
type apiEnvelope struct {
	Status  string          `json:"status"`
	Data    json.RawMessage `json:"data"`
	HasMore bool            `json:"hasMore"`
	Message string          `json:"message"`
	Code    string          `json:"code"`
	Hint    string          `json:"hint"`
}

// bufferWriter collects a response of the in-process API call.
type bufferWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (w *bufferWriter) Header() http.Header { return w.header }
func (w *bufferWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.body.Write(b)
}
func (w *bufferWriter) WriteHeader(s int) {
	if w.status == 0 {
		w.status = s
	}
}

// noToken is apiCall.token for a call without a credential (sign-in).
const noToken = "-"

// apiCall describes one request to the API.
type apiCall struct {
	method, path string
	query        url.Values
	json         any       // a JSON body
	raw          io.Reader // or a raw body with contentType
	contentType  string
	token        string // "" uses the request's session cookie; noToken sends none
	idempotency  string
}

// api sends a request to the API in process, as the browser's client: its
// address and forwarding headers (rate limits count it), the request id
// (logs correlate) and the session as the bearer. out, when not nil,
// receives data; the envelope comes back for hasMore and message.
func (p *Pages) api(c *gin.Context, call apiCall, out any) (*apiEnvelope, *apiError) {
	var body io.Reader = call.raw
	ctype := call.contentType
	if call.json != nil {
		b, err := json.Marshal(call.json)
		if err != nil {
			return nil, &apiError{Status: 500, Message: "could not encode the request"}
		}
		body, ctype = bytes.NewReader(b), "application/json"
	}
	target := call.path
	if len(call.query) > 0 {
		target += "?" + call.query.Encode()
	}
	ctx := c.Request.Context()
	if call.method == http.MethodGet {
		// A read to render a page: the management tiers limit API
		// clients, not how often a merchant opens the webhooks page.
		ctx = ratelimit.PageRead(ctx)
	}
	req, err := http.NewRequestWithContext(ctx, call.method, target, body)
	if err != nil {
		return nil, &apiError{Status: 500, Message: "could not build the request"}
	}
	req.RemoteAddr = c.Request.RemoteAddr
	req.Host = c.Request.Host
	for _, h := range []string{"X-Forwarded-For", "X-Real-Ip", "User-Agent"} {
		if v := c.Request.Header.Get(h); v != "" {
			req.Header.Set(h, v)
		}
	}
	if id := c.Writer.Header().Get("X-Request-Id"); id != "" {
		req.Header.Set("X-Request-Id", id)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if call.idempotency != "" {
		req.Header.Set("Idempotency-Key", call.idempotency)
	}
	token := call.token
	if token == "" {
		token = p.sessionToken(c)
	}
	if token != "" && token != noToken {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	w := &bufferWriter{header: http.Header{}}
	p.API.ServeHTTP(w, req)
	var env apiEnvelope
	if err := json.Unmarshal(w.body.Bytes(), &env); err != nil {
		p.Log.ErrorContext(c.Request.Context(), "dashboard: API answer is not JSON", "path", call.path, "status", w.status)
		return nil, &apiError{Status: http.StatusBadGateway, Message: "the service answered something unexpected; please try again"}
	}
	if w.status >= 400 || env.Status == "error" {
		if env.Message == "" {
			env.Message = http.StatusText(w.status)
		}
		return &env, &apiError{Status: w.status, Code: env.Code, Message: env.Message, Hint: env.Hint,
			RetryAfter: w.header.Get("Retry-After")}
	}
	if out != nil && len(env.Data) > 0 {
		if err := json.Unmarshal(env.Data, out); err != nil {
			p.Log.ErrorContext(c.Request.Context(), "dashboard: decode API answer", "path", call.path, "err", err)
			return &env, &apiError{Status: http.StatusBadGateway, Message: "the service answered something unexpected; please try again"}
		}
	}
	return &env, nil
}

// modeQuery is ?mode= for the page's mode (KEY routes and mode-scoped
// SESSION routes read it).
func modeQuery(c *gin.Context, extra url.Values) url.Values {
	q := url.Values{}
	for k, v := range extra {
		if len(v) > 0 && v[0] != "" {
			q[k] = v
		}
	}
	q.Set("mode", c.Param("mode"))
	return q
}

// newIdempotencyKey is put in each create form: a double submit replays the
// first answer instead of creating twice.
func newIdempotencyKey() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return "dash_" + hex.EncodeToString(b)
}

// --- rendering ---

const merchantKey = "dashMerchant"

// dashFuncs are the dashboard templates' helpers.
func (p *Pages) dashFuncs() template.FuncMap {
	return template.FuncMap{
		"when": func(t time.Time) string {
			if t.IsZero() {
				return "—"
			}
			return t.UTC().Format("2006-01-02 15:04:05 UTC")
		},
		"whenPtr": func(t *time.Time) string {
			if t == nil || t.IsZero() {
				return "—"
			}
			return t.UTC().Format("2006-01-02 15:04:05 UTC")
		},
		"network": networkLabel,
		"label":   func(s string) string { return strings.ReplaceAll(s, "_", " ") },
		"deref": func(s *string) string {
			if s == nil {
				return ""
			}
			return *s
		},
		"deref2": func(i *int) int {
			if i == nil {
				return 0
			}
			return *i
		},
		"intp": func(i *int) string {
			if i == nil {
				return "—"
			}
			return fmt.Sprint(*i)
		},
		"has": func(list []string, s string) bool {
			for _, x := range list {
				if x == s {
					return true
				}
			}
			return false
		},
		"join": strings.Join,
		// nonzero says an amount the API printed ("0.00", "12.5") is not zero.
		"nonzero": func(amount json.Number) bool { return strings.ContainsAny(string(amount), "123456789") },
		"negative": func(amount json.Number) bool {
			return strings.HasPrefix(string(amount), "-") && strings.ContainsAny(string(amount), "123456789")
		},
		"list": func(s ...string) []string { return s },
		"plural": func(n int64, one, many string) string {
			if n == 1 {
				return "1 " + one
			}
			return fmt.Sprintf("%d %s", n, many)
		},
		"dict": func(kv ...any) map[string]any {
			m := map[string]any{}
			for i := 0; i+1 < len(kv); i += 2 {
				m[fmt.Sprint(kv[i])] = kv[i+1]
			}
			return m
		},
	}
}

type menuItem struct{ Path, Label string }

// menu is the dashboard's navigation, in the order a merchant needs it.
var menu = []menuItem{
	{"/payments", "Payments"}, {"/links", "Payment links"}, {"/customers", "Customers"}, {"/subscriptions", "Subscriptions"},
	{"/webhooks", "Webhooks"},
	{"/developers", "Developers"}, {"/business", "Business"}, {"/exceptions", "Exceptions"}, {"/settings", "Settings"},
}

// renderDash renders a dashboard view with the merchant and mode of the
// request (when signed in) and the page's data.
func (p *Pages) renderDash(c *gin.Context, status int, view string, data map[string]any) {
	t, err := p.dashTmpl[view].Clone()
	if err != nil {
		p.Log.ErrorContext(c.Request.Context(), "dashboard: clone template", "err", err)
		c.Status(http.StatusInternalServerError)
		return
	}
	t.Funcs(template.FuncMap{"t": p.translator("en")})
	if data == nil {
		data = map[string]any{}
	}
	if m, ok := c.Get(merchantKey); ok {
		data["Merchant"] = m
		data["Mode"] = c.Param("mode")
		data["Live"] = c.Param("mode") == "live"
		data["Base"] = dashPrefix + "/" + c.Param("mode")
		data["Path"] = strings.TrimPrefix(c.Request.URL.Path, dashPrefix+"/"+c.Param("mode"))
		data["Menu"] = menu
		section := "/payments"
		for _, it := range menu {
			if rest := data["Path"].(string); rest == it.Path || strings.HasPrefix(rest, it.Path+"/") {
				section = it.Path
			}
		}
		data["Section"] = section
		data["Unconfirmed"] = p.ConfirmsEmail && !m.(dMerchant).EmailConfirmed
	}
	if _, ok := data["Notice"]; !ok {
		data["Notice"] = notice(c)
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "dash_layout.html", data); err != nil {
		p.Log.ErrorContext(c.Request.Context(), "dashboard: render", "view", view, "err", err)
		c.Status(http.StatusInternalServerError)
		return
	}
	c.Data(status, "text/html; charset=utf-8", buf.Bytes())
}

// dashError shows an API error as a page (for pages that cannot show
// anything without their data).
func (p *Pages) dashError(c *gin.Context, e *apiError) {
	status := e.Status
	if status < 400 {
		status = http.StatusInternalServerError
	}
	if e.RetryAfter != "" {
		c.Header("Retry-After", e.RetryAfter)
	}
	p.renderDash(c, status, "dash_error.html", map[string]any{"Title": http.StatusText(status), "Message": e.Message, "Hint": e.Hint})
}

// back redirects (303) to a page of the dashboard in the request's mode,
// with a done code for the notice and a fragment to scroll to.
func back(c *gin.Context, path, done, fragment string) {
	target := dashPrefix + "/" + c.Param("mode") + path
	if done != "" {
		sep := "?"
		if strings.Contains(target, "?") {
			sep = "&"
		}
		target += sep + "done=" + url.QueryEscape(done)
	}
	if fragment != "" {
		target += "#" + fragment
	}
	c.Redirect(http.StatusSeeOther, target)
}

// notices are the messages a done code shows (never text from the query).
var notices = map[string]string{
	"link.created": "Payment link created.", "link.updated": "Payment link saved.", "link.deleted": "Payment link deleted.",
	"link.activated": "Payment link activated.", "link.deactivated": "Payment link deactivated: it takes no new payments.",
	"delivery.retried": "Resent: one attempt is on its way; reload in a few seconds to see its result below.",
	"webhook.deleted":  "Webhook endpoint deleted.", "webhook.enabled": "Webhook endpoint enabled.",
	"webhook.disabled": "Webhook endpoint disabled: it gets no new deliveries.",
	"webhook.tested":   "Test event sent: its delivery shows in the log below.",
	"kyb.submitted":    "Business verification submitted: we review it and tell you by e-mail.",
	"kyb.updated":      "Business verification updated.", "settlement.recorded": "Payout recorded.",
	"exception.resolved": "Exception resolved into a transaction.", "exception.dismissed": "Exception dismissed.",
	"refund.created":   "Refund created: send its transfer from your wallet; it is found on chain, or enter its transaction hash below.",
	"refund.submitted": "Transaction hash attached: the refund succeeds once the transfer is confirmed on chain.",
	"refund.recorded":  "Transfer recorded: it was confirmed on chain, and the refund succeeded with it.",
	"email.confirmed":  "E-mail address confirmed: you can apply for live mode (Business).",
	"email.changed":    "E-mail address changed: sign in with the new one from now on. The old one was told.",
	"email.change.sent": "A link is on its way to the new address: open it while signed in, within 48 hours, to make the change. " +
		"Until then nothing changes.",
	"confirmation.sent": "A new confirmation link is on its way to your e-mail address; open it while signed in, within 48 hours. " +
		"Earlier links no longer work.",
	"settings.saved": "Settings saved.", "logo.saved": "Logo uploaded: your hosted pages show it.",
	"password.changed":       "Password changed: use the new one from now on. Every other session of your account is signed out.",
	"sessions.signedout":     "Every other session of your account is signed out; this one stays signed in.",
	"session.signedout":      "That session is signed out.",
	"wallet.proven":          "Wallet proven: it is yours on paygate, and no other account can name it.",
	"wallet.proven.contract": "Contract wallet proven on that network: there it is yours on paygate, and no other account can name it.",
	"wallet.withdrawn":       "Wallet proof withdrawn: another account may now name the wallet.",
	"subscription.cancel":    "The subscription ends with its current period.",
	"subscription.cancel_pending": "Cancellation taken: a payment of the renewal due is being confirmed; if it lands, the subscription " +
		"ends with the period it pays, otherwise at once.",
	"subscription.cancel_now": "Subscription canceled: nothing more is billed.",
	"subscription.pause":      "Subscription paused: no invoice while paused; resuming moves its dates by the pause.",
	"subscription.resume":     "Subscription resumed: its period ends later by the time it was paused.",
}

// notice is the request's done message, if any.
func notice(c *gin.Context) string { return notices[c.Query("done")] }
