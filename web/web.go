// Package web serves the hosted checkout pages a customer pays on:
// GET /pay/{linkId} (a payment link) and GET /checkout/{sessionId} (a
// session, open or finished), and the merchant dashboard under /dashboard
// (dashboard.go). Templates, styles, the one small script and
// the message tables are embedded with go:embed; nothing is fetched from
// elsewhere at run time. Every page carries a strict Content-Security-Policy
// (no inline script or style, nothing from another origin) and works without
// JavaScript for the QR and manual path: the script only adds the browser
// wallet, the countdown and the live status.
package web

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"mime"
	"net/http"
	"path"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/checkout"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/ratelimit"
)

//go:embed templates/*.html static/* i18n/*.json
var files embed.FS

// views are the pages; each is parsed with layout.html at start-up, so a
// broken template stops the process instead of failing a customer.
var views = []string{"pay.html", "checkout.html", "error.html"}

// Pages serves the hosted checkout pages.
type Pages struct {
	Checkout *checkout.Service
	Store    *models.Store
	Log      *slog.Logger
	// FrameAncestors is the CSP frame-ancestors source list: "'none'" by
	// default (the page cannot be framed). An operator embedding the page
	// in a merchant's site widens it (CHECKOUT_FRAME_ANCESTORS).
	FrameAncestors string
	// API serves the API's routes the dashboard calls in process; nil
	// means the engine the pages are registered on (the API's own).
	API http.Handler
	// SecureCookies marks the dashboard's session cookie Secure (and
	// __Host-) even when TLS ends at a proxy in front of the service.
	SecureCookies bool
	// PublicURL is where customers reach the hosted pages (links' URLs);
	// empty: the request's own scheme and host.
	PublicURL string
	// Limiter, when set, limits the hosted page's forms (they count as
	// checkout mutations, as the checkout API's routes do; a refusal is a
	// page, not JSON). Without it anyone could open sessions, submit and
	// cancel through the forms without bound.
	Limiter *ratelimit.Limiter
	// ConfirmsEmail: the server e-mails address confirmation links (the
	// API has a mailer); the dashboard then asks an unconfirmed account to
	// confirm its address.
	ConfirmsEmail bool

	tmpl     map[string]*template.Template
	dashTmpl map[string]*template.Template
	cop      *http.CrossOriginProtection
	assets   map[string]asset // by file name
	msgs     map[string]map[string]string
}

type asset struct {
	body  []byte
	ctype string
	path  string // /static/<hash>/<name>
}

// New parses the templates and hashes the assets.
func New(p Pages) (*Pages, error) {
	if p.Log == nil {
		p.Log = slog.Default()
	}
	if p.FrameAncestors == "" {
		p.FrameAncestors = "'none'"
	}
	msgs, err := loadMessages()
	if err != nil {
		return nil, err
	}
	p.msgs = msgs
	p.assets = map[string]asset{}
	entries, err := fs.ReadDir(files, "static")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		b, err := files.ReadFile("static/" + e.Name())
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(b)
		ctype := mime.TypeByExtension(path.Ext(e.Name()))
		p.assets[e.Name()] = asset{body: b, ctype: ctype, path: "/static/" + hex.EncodeToString(sum[:6]) + "/" + e.Name()}
	}
	p.tmpl = map[string]*template.Template{}
	for _, v := range views {
		t, err := template.New("layout.html").Funcs(p.baseFuncs()).ParseFS(files, "templates/layout.html", "templates/"+v)
		if err != nil {
			return nil, fmt.Errorf("web: template %s: %w", v, err)
		}
		p.tmpl[v] = t
	}
	p.dashTmpl = map[string]*template.Template{}
	for _, v := range dashViews {
		t, err := template.New("dash_layout.html").Funcs(p.baseFuncs()).Funcs(p.dashFuncs()).
			ParseFS(files, "templates/dash_layout.html", "templates/dash_parts.html", "templates/"+v)
		if err != nil {
			return nil, fmt.Errorf("web: template %s: %w", v, err)
		}
		p.dashTmpl[v] = t
	}
	return &p, nil
}

// Register mounts the pages and their assets on the engine.
func (p *Pages) Register(e *gin.Engine) {
	limit := func(*gin.Context) {}
	if p.Limiter != nil {
		limit = p.Limiter.PageMiddleware(p.tooMany)
	}
	e.GET("/pay/:linkId", p.secure, limit, p.payPage)
	e.POST("/pay/:linkId", p.secure, limit, p.payForm)
	e.GET("/checkout/:sessionId", p.secure, limit, p.checkoutPage)
	e.POST("/checkout/:sessionId/cancel", p.secure, limit, p.cancelForm)
	e.POST("/checkout/:sessionId/submit", p.secure, limit, p.submitForm)
	e.GET("/checkout/:sessionId/qr.svg", p.secure, limit, p.qr)
	e.GET("/static/:hash/:name", p.static)
	e.GET("/favicon.ico", func(c *gin.Context) { c.Redirect(http.StatusMovedPermanently, p.assets["favicon.svg"].path) })
	p.registerDashboard(e)
}

// tooMany answers a hosted page's form the limiter refused: the error
// page in the customer's language, with the wait (Retry-After is set).
func (p *Pages) tooMany(c *gin.Context, status int, retryAfter int64) {
	p.render(c, status, "error.html", map[string]any{"Message": "error.tooMany", "Seconds": max(retryAfter, 1)})
	c.Abort()
}

// maxFormBytes bounds a page form's body: the longest form (a KYB
// application) is a few kilobytes. The logo form forwards its body to the
// upload route, which has its own bound.
const maxFormBytes = 64 << 10

// secure sets the security headers of every page, and bounds a form's body
// before anything reads it: gin's PostForm parses multipart bodies into 32
// MiB of memory and the rest into temporary files, so a stranger's form
// post of any size was read whole (found by an audit helper).
func (p *Pages) secure(c *gin.Context) {
	p.pageHeaders(c)
	if c.Request.Method == http.MethodPost && c.Request.Body != nil && !strings.HasSuffix(c.FullPath(), "/settings/logo") {
		if c.Request.ContentLength > maxFormBytes {
			p.render(c, http.StatusRequestEntityTooLarge, "error.html", map[string]any{"Message": "error.tooLarge"})
			c.Abort()
			return
		}
		c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, maxFormBytes)
	}
	c.Next()
}

// pageHeaders sets the security headers of every page (secure's, for a
// handler outside the pages' routes: NotFound).
func (p *Pages) pageHeaders(c *gin.Context) {
	h := c.Writer.Header()
	p.frame(c, nil)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Permissions-Policy", "camera=(), microphone=(), geolocation=(), payment=()")
	h.Set("Cache-Control", "no-store")
	if p.secureRequest(c) {
		// Served over TLS (or behind a proxy that ends it): the browser
		// keeps to https for a year, so a later visit typed as http is
		// not a plain-text page a network can rewrite (the sign-in form).
		h.Set("Strict-Transport-Security", "max-age=31536000; includeSubDomains")
	}
}

// frame sets the page's CSP with who may frame it: the operator's
// setting, widened by the merchant's own embed origins (PATCH
// /api/merchant embedOrigins) on that merchant's pages.
func (p *Pages) frame(c *gin.Context, merchantOrigins []string) {
	ancestors := p.FrameAncestors
	if len(merchantOrigins) > 0 {
		if ancestors == "'none'" {
			ancestors = ""
		}
		ancestors = strings.TrimSpace(ancestors + " " + strings.Join(merchantOrigins, " "))
	}
	h := c.Writer.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
		"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors "+ancestors)
	if ancestors == "'none'" {
		h.Set("X-Frame-Options", "DENY")
	} else {
		h.Del("X-Frame-Options")
	}
}

func (p *Pages) static(c *gin.Context) {
	a, ok := p.assets[c.Param("name")]
	if !ok || a.path != "/static/"+c.Param("hash")+"/"+c.Param("name") {
		c.Status(http.StatusNotFound)
		return
	}
	c.Header("Cache-Control", "public, max-age=31536000, immutable")
	c.Header("X-Content-Type-Options", "nosniff")
	c.Data(http.StatusOK, a.ctype, a.body)
}

// render executes a view with the request's language bound on a clone of
// the parsed template (never on the shared one: concurrent requests in
// other languages must not see each other's functions).
func (p *Pages) render(c *gin.Context, status int, view string, data map[string]any) {
	lang := p.language(c)
	t, err := p.tmpl[view].Clone()
	if err != nil {
		p.Log.ErrorContext(c.Request.Context(), "web: clone template", "err", err)
		c.Status(http.StatusInternalServerError)
		return
	}
	t.Funcs(template.FuncMap{"t": p.translator(lang)})
	if m, ok := data["Merchant"].(*models.Merchant); ok && m != nil {
		p.frame(c, m.EmbedOrigins)
	}
	data["Lang"] = lang
	data["JSMessages"] = p.jsMessages(lang)
	data["Langs"] = languages
	data["Path"] = c.Request.URL.Path
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout.html", data); err != nil {
		p.Log.ErrorContext(c.Request.Context(), "web: render", "view", view, "err", err)
		c.Status(http.StatusInternalServerError)
		return
	}
	c.Data(status, "text/html; charset=utf-8", buf.Bytes())
}

// jsMessages are the messages the script shows, as JSON for a data attribute.
func (p *Pages) jsMessages(lang string) string {
	out := map[string]string{}
	tr := p.translator(lang)
	for k := range p.msgs["en"] {
		if strings.HasPrefix(k, "checkout.step.") || strings.HasPrefix(k, "checkout.error.") || strings.HasPrefix(k, "status.") ||
			k == "checkout.copied" {
			out[k] = tr(k)
		}
	}
	b, _ := json.Marshal(out)
	return string(b)
}

func (p *Pages) baseFuncs() template.FuncMap {
	return template.FuncMap{
		"t":     func(key string, args ...any) string { return key }, // replaced per request
		"asset": func(name string) string { return p.assets[name].path },
		// localImage: only an uploaded image is shown (the CSP allows no
		// other origin, and the page must not load a third party's).
		"localImage": func(u string) bool { return strings.HasPrefix(u, "/uploads/") && !strings.Contains(u, "..") },
		"short": func(s string) string {
			if len(s) <= 14 {
				return s
			}
			return s[:8] + "…" + s[len(s)-6:]
		},
	}
}

// networkLabel is a network's display name.
func networkLabel(n string) string {
	switch n {
	case chain.NetworkBase:
		return "Base"
	case chain.NetworkEthereum:
		return "Ethereum"
	case chain.NetworkPolygon:
		return "Polygon"
	case chain.NetworkSolana:
		return "Solana"
	case chain.NetworkBaseSepolia:
		return "Base Sepolia (test)"
	case chain.NetworkEthSepolia:
		return "Ethereum Sepolia (test)"
	case chain.NetworkSolanaDevnet:
		return "Solana Devnet (test)"
	}
	return strings.ReplaceAll(n, "_", " ")
}
