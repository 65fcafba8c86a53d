package web

import (
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
)

// Sign-up, sign-in and sign-out are plain forms (no script needed); the
// API's /api/auth routes do the work and the session token they return is
// kept in the HttpOnly cookie.

func (p *Pages) dashHome(c *gin.Context) {
	if p.sessionToken(c) == "" {
		c.Redirect(http.StatusSeeOther, dashPrefix+"/login")
		return
	}
	c.Redirect(http.StatusSeeOther, dashPrefix+"/test/payments")
}

// safeNext is a local dashboard path to go to after signing in.
func safeNext(next string) string {
	if strings.HasPrefix(next, dashPrefix+"/") && !strings.HasPrefix(next, "//") && !strings.ContainsAny(next, "\\\r\n") &&
		!strings.HasPrefix(next, dashPrefix+"/login") {
		return next
	}
	return dashPrefix + "/test/payments"
}

func (p *Pages) loginPage(c *gin.Context) {
	p.renderDash(c, http.StatusOK, "dash_login.html", map[string]any{"Title": "Sign in", "Next": c.Query("next"),
		"SignedOut": c.Query("done") == "signed-out", "Expired": c.Query("done") == "expired",
		"PasswordSet": c.Query("done") == "password-set", "Reclaimed": c.Query("done") == "password-set-reclaimed"})
}

type authAnswer struct {
	SessionToken string    `json:"sessionToken"`
	ExpiresAt    time.Time `json:"expiresAt"`
	TestKey      *dKey     `json:"testKey"`
	Merchant     dMerchant `json:"merchant"`
}

func (p *Pages) loginForm(c *gin.Context) {
	email := strings.TrimSpace(c.PostForm("email"))
	var out authAnswer
	_, err := p.api(c, apiCall{method: http.MethodPost, path: "/api/auth/login", token: noToken,
		json: map[string]string{"email": email, "password": c.PostForm("password")}}, &out)
	if err != nil {
		p.renderDash(c, err.Status, "dash_login.html", map[string]any{"Title": "Sign in", "Error": err.Message, "Email": email,
			"Next": c.PostForm("next")})
		return
	}
	p.setSession(c, out.SessionToken, out.ExpiresAt)
	c.Redirect(http.StatusSeeOther, safeNext(c.PostForm("next")))
}

func (p *Pages) signupPage(c *gin.Context) {
	p.renderDash(c, http.StatusOK, "dash_signup.html", map[string]any{"Title": "Create your account"})
}

func (p *Pages) signupForm(c *gin.Context) {
	email, name := strings.TrimSpace(c.PostForm("email")), strings.TrimSpace(c.PostForm("businessName"))
	var out authAnswer
	_, err := p.api(c, apiCall{method: http.MethodPost, path: "/api/auth/signup", token: noToken,
		json: map[string]string{"email": email, "password": c.PostForm("password"), "businessName": name}}, &out)
	if err != nil {
		p.renderDash(c, err.Status, "dash_signup.html", map[string]any{"Title": "Create your account", "Error": err.Message,
			"Email": email, "BusinessName": name})
		return
	}
	p.setSession(c, out.SessionToken, out.ExpiresAt)
	// The test key is shown once, here.
	c.Set(merchantKey, out.Merchant)
	c.Params = append(c.Params, gin.Param{Key: "mode", Value: "test"})
	p.renderDash(c, http.StatusCreated, "dash_welcome.html", map[string]any{"Title": "Welcome", "Key": out.TestKey})
}

func (p *Pages) logoutForm(c *gin.Context) {
	if p.sessionToken(c) != "" {
		// Ends the session on the server. A 401 for the session means it
		// had ended already; any other failure (the address block's 401
		// included) leaves it valid, which the merchant must know (on a
		// shared computer, say) rather than read "signed out".
		if _, err := p.api(c, apiCall{method: http.MethodPost, path: "/api/auth/logout"}, nil); err != nil && !err.sessionEnded() {
			p.renderDash(c, err.Status, "dash_error.html", map[string]any{"Title": "Not signed out",
				"Message": "The session could not be ended on the server (" + err.Message + "); it is still valid. Please try again."})
			return
		}
	}
	p.clearSession(c)
	c.Redirect(http.StatusSeeOther, dashPrefix+"/login?done=signed-out")
}

// requireMerchant admits signed-in merchants to /dashboard/{test|live}/...
// and loads their profile (GET /api/merchant) for the page's header.
func (p *Pages) requireMerchant(c *gin.Context) {
	mode := c.Param("mode")
	if mode != "test" && mode != "live" {
		p.renderDash(c, http.StatusNotFound, "dash_error.html", map[string]any{"Title": "Not found", "Message": "There is no such page."})
		c.Abort()
		return
	}
	if p.sessionToken(c) == "" {
		c.Redirect(http.StatusSeeOther, dashPrefix+"/login?next="+url.QueryEscape(returnTo(c)))
		c.Abort()
		return
	}
	var m dMerchant
	if _, err := p.api(c, apiCall{method: http.MethodGet, path: "/api/merchant"}, &m); err != nil {
		if err.sessionEnded() {
			p.clearSession(c)
			c.Redirect(http.StatusSeeOther, dashPrefix+"/login?done=expired&next="+url.QueryEscape(returnTo(c)))
			c.Abort()
			return
		}
		p.dashError(c, err)
		c.Abort()
		return
	}
	c.Set(merchantKey, m)
	c.Next()
}

// returnTo is where to go back after signing in: the page asked for, or
// for a form (a POST cannot be replayed by a redirect) the section of the
// dashboard it was sent from.
func returnTo(c *gin.Context) string {
	if c.Request.Method == http.MethodGet {
		return c.Request.URL.RequestURI()
	}
	rest := strings.TrimPrefix(c.Request.URL.Path, dashPrefix+"/"+c.Param("mode"))
	section, _, _ := strings.Cut(strings.TrimPrefix(rest, "/"), "/")
	if section == "" {
		section = "payments"
	}
	return dashPrefix + "/" + c.Param("mode") + "/" + section
}

// liveBlocked answers the notice of a live page without an approved KYB
// application; mode-free pages (developers, business, settings) show.
func (p *Pages) liveBlocked(c *gin.Context) bool {
	m := c.MustGet(merchantKey).(dMerchant)
	if c.Param("mode") != "live" || m.LiveAllowed() {
		return false
	}
	p.renderDash(c, http.StatusForbidden, "dash_error.html", map[string]any{"Title": "Live mode is not open yet",
		"Message": "Live mode requires an approved KYB application.", "KYBLink": true})
	return true
}

// The forgotten password: a form asks for the account's e-mail address
// (POST /api/auth/password-reset); the e-mailed link opens the reset form
// (POST /api/auth/password-reset/confirm), which signs every session out
// and leads to the sign-in page.

func (p *Pages) forgotPage(c *gin.Context) {
	p.renderDash(c, http.StatusOK, "dash_forgot.html", map[string]any{"Title": "Forgot your password"})
}

func (p *Pages) forgotForm(c *gin.Context) {
	email := strings.TrimSpace(c.PostForm("email"))
	if _, err := p.api(c, apiCall{method: http.MethodPost, path: "/api/auth/password-reset", token: noToken,
		json: map[string]string{"email": email}}, nil); err != nil {
		if err.RetryAfter != "" {
			c.Header("Retry-After", err.RetryAfter)
		}
		p.renderDash(c, err.Status, "dash_forgot.html", map[string]any{"Title": "Forgot your password", "Error": err.Message, "Email": email})
		return
	}
	p.renderDash(c, http.StatusOK, "dash_forgot.html", map[string]any{"Title": "Forgot your password", "Sent": true, "Email": email})
}

func (p *Pages) resetPage(c *gin.Context) {
	p.renderDash(c, http.StatusOK, "dash_reset.html", map[string]any{"Title": "Choose a new password", "Token": c.Query("token")})
}

func (p *Pages) resetForm(c *gin.Context) {
	token, pw := c.PostForm("token"), c.PostForm("password")
	data := map[string]any{"Title": "Choose a new password", "Token": token}
	if pw != c.PostForm("confirm") {
		data["Error"] = "The two passwords differ; type the same one twice."
		p.renderDash(c, http.StatusBadRequest, "dash_reset.html", data)
		return
	}
	var out struct {
		Reclaimed struct {
			Keys      int64 `json:"apiKeysRevoked"`
			Endpoints int64 `json:"webhookEndpointsRemoved"`
			Proofs    int64 `json:"walletProofsWithdrawn"`
			Wallets   bool  `json:"walletsCleared"`
			KYB       bool  `json:"kybWithdrawn"`
		} `json:"reclaimed"`
	}
	if _, err := p.api(c, apiCall{method: http.MethodPost, path: "/api/auth/password-reset/confirm", token: noToken,
		json: map[string]string{"token": token, "newPassword": pw}}, &out); err != nil {
		data["Error"], data["TokenRefused"] = err.Message, strings.HasPrefix(err.Message, "token:")
		p.renderDash(c, err.Status, "dash_reset.html", data)
		return
	}
	// Every session of the account ended, this browser's included.
	p.clearSession(c)
	done := "password-set"
	if r := out.Reclaimed; r.Keys > 0 || r.Endpoints > 0 || r.Proofs > 0 || r.Wallets || r.KYB {
		done = "password-set-reclaimed"
	}
	c.Redirect(http.StatusSeeOther, dashPrefix+"/login?done="+done)
}

// Confirming the account's e-mail address: the e-mailed link opens a page
// that, signed in, confirms it with a button (a GET changes nothing: mail
// scanners open links); signed out, it asks to sign in first, and tells a
// reader who never signed up how to take the account over.

func (p *Pages) confirmEmailPage(c *gin.Context) {
	token := c.Query("token")
	// change=1 marks the link of an address change: it words the page
	// only (the API decides what the token does).
	change, back := c.Query("change") != "", dashPrefix+"/confirm-email?token="+url.QueryEscape(token)
	if change {
		back = dashPrefix + "/confirm-email?change=1&token=" + url.QueryEscape(token)
	}
	data := map[string]any{"Title": "Confirm your e-mail address", "Token": token, "Change": change,
		"SignIn": dashPrefix + "/login?next=" + url.QueryEscape(back)}
	if p.sessionToken(c) != "" {
		var m dMerchant
		_, err := p.api(c, apiCall{method: http.MethodGet, path: "/api/merchant"}, &m)
		switch {
		case err == nil:
			data["Account"] = m
		case err.sessionEnded():
			p.clearSession(c)
		default:
			p.dashError(c, err)
			return
		}
	}
	p.renderDash(c, http.StatusOK, "dash_confirm.html", data)
}

func (p *Pages) confirmEmailForm(c *gin.Context) {
	token := c.PostForm("token")
	if p.sessionToken(c) == "" {
		c.Redirect(http.StatusSeeOther, dashPrefix+"/confirm-email?token="+url.QueryEscape(token))
		return
	}
	var before, m dMerchant
	_, _ = p.api(c, apiCall{method: http.MethodGet, path: "/api/merchant"}, &before)
	_, err := p.api(c, apiCall{method: http.MethodPost, path: "/api/auth/email-confirmation/confirm", json: map[string]string{"token": token}}, &m)
	switch {
	case err == nil && before.Email != "" && m.Email != before.Email:
		c.Redirect(http.StatusSeeOther, dashPrefix+"/test/settings?done=email.changed#email")
		return
	case err == nil || (err.Status == http.StatusConflict && strings.Contains(err.Message, "confirmed already")):
		c.Redirect(http.StatusSeeOther, dashPrefix+"/test/settings?done=email.confirmed")
		return
	}
	if err.sessionEnded() {
		p.clearSession(c)
		c.Redirect(http.StatusSeeOther, dashPrefix+"/confirm-email?token="+url.QueryEscape(token))
		return
	}
	data := map[string]any{"Title": "Confirm your e-mail address", "Token": token, "Error": err.Message, "Change": c.PostForm("change") != ""}
	var cur dMerchant
	if _, e := p.api(c, apiCall{method: http.MethodGet, path: "/api/merchant"}, &cur); e == nil {
		data["Account"] = cur
	}
	p.renderDash(c, err.Status, "dash_confirm.html", data)
}
