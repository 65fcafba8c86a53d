package api

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/gin-gonic/gin"
	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/auth"
	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/models"
)

func (s *Server) registerAuth(g *gin.RouterGroup) {
	s.Handle(g, http.MethodPost, "/auth/signup", AuthNone, s.signup)
	s.Handle(g, http.MethodPost, "/auth/login", AuthNone, s.login)
	s.Handle(g, http.MethodPost, "/auth/logout", AuthSession, s.logout)
	s.Handle(g, http.MethodPost, "/auth/logout-others", AuthSession, s.logoutOthers)
	s.Handle(g, http.MethodGet, "/auth/sessions", AuthSession, s.listSessions)
	s.Handle(g, http.MethodDelete, "/auth/sessions/:id", AuthSession, s.revokeSession)
	s.Handle(g, http.MethodPost, "/auth/password", AuthSession, s.changePassword)
	s.Handle(g, http.MethodPost, "/auth/password-reset", AuthNone, s.requestPasswordReset)
	s.Handle(g, http.MethodPost, "/auth/password-reset/confirm", AuthNone, s.confirmPasswordReset)
	s.Handle(g, http.MethodPost, "/auth/email-confirmation", AuthSession, s.requestEmailConfirmation)
	s.Handle(g, http.MethodPost, "/auth/email-confirmation/confirm", AuthSession, s.confirmEmail)
	s.Handle(g, http.MethodPost, "/auth/email-change", AuthSession, s.requestEmailChange)
}

func (s *Server) registerMerchant(g *gin.RouterGroup) {
	s.Handle(g, http.MethodGet, "/merchant", AuthSession, s.getMerchant)
	s.Handle(g, http.MethodPatch, "/merchant", AuthSession, s.patchMerchant)
	s.Handle(g, http.MethodPatch, "/merchant/logo", AuthSession, s.patchMerchantLogo)
}

// Password bounds: 12 characters at least (DESIGN.md), 256 at most so a
// huge body cannot make hashing expensive.
const (
	minPassword = 12
	maxPassword = 256
)

type walletsJSON struct {
	EVM    string `json:"evm"`
	Solana string `json:"solana"`
}

type merchantJSON struct {
	ID    string `json:"id"`
	Email string `json:"email"`
	// EmailConfirmed: the account's holder opened a link sent to Email
	// (h_email.go); EmailConfirmedAt is when.
	EmailConfirmed   bool        `json:"emailConfirmed"`
	EmailConfirmedAt *Time       `json:"emailConfirmedAt"`
	BusinessName     string      `json:"businessName"`
	Wallets          walletsJSON `json:"wallets"`
	LogoURL          string      `json:"logoUrl"`
	EmbedOrigins     []string    `json:"embedOrigins"`
	KYBStatus        string      `json:"kybStatus"`
	// RefundsEnabled says in which modes the merchant may create refunds
	// (on in test mode by default; an operator enables live mode).
	RefundsEnabled refundsFlagJSON `json:"refundsEnabled"`
	CreatedAt      Time            `json:"createdAt"`
	UpdatedAt      Time            `json:"updatedAt"`
}

type refundsFlagJSON struct {
	Test bool `json:"test"`
	Live bool `json:"live"`
}

func toMerchantJSON(m *models.Merchant) merchantJSON {
	return merchantJSON{ID: m.ID, Email: m.Email, EmailConfirmed: m.EmailConfirmedAt != nil, EmailConfirmedAt: tsPtr(m.EmailConfirmedAt),
		BusinessName: m.BusinessName,
		Wallets:      walletsJSON{EVM: m.WalletEVM, Solana: m.WalletSolana}, LogoURL: m.LogoURL, EmbedOrigins: append([]string{}, m.EmbedOrigins...),
		KYBStatus: m.KYBStatus, RefundsEnabled: refundsFlagJSON{Test: m.RefundsOn(models.ModeTest), Live: m.RefundsOn(models.ModeLive)},
		CreatedAt: ts(m.CreatedAt), UpdatedAt: ts(m.UpdatedAt)}
}

type keyCreatedJSON struct {
	FullKey   string `json:"fullKey"`
	KeyType   string `json:"keyType"`
	KeyPrefix string `json:"keyPrefix"`
	KeySuffix string `json:"keySuffix"`
}

type signupRequest struct {
	Email        string `json:"email"`
	Password     string `json:"password"`
	BusinessName string `json:"businessName"`
}

func (s *Server) signup(c *gin.Context) {
	var req signupRequest
	if err := bindJSON(c, &req); err != nil {
		fail(c, err)
		return
	}
	var v checker
	email := v.email("email", req.Email, true)
	checkPassword(&v, "password", req.Password)
	name := v.text("businessName", req.BusinessName, true, 200)
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	hash, err := s.hashPassword(c.Request.Context(), req.Password)
	if err != nil {
		fail(c, err)
		return
	}
	token, err := auth.GenerateSessionToken()
	if err != nil {
		fail(c, err)
		return
	}
	key, err := auth.GenerateAPIKey("test")
	if err != nil {
		fail(c, err)
		return
	}
	m := &models.Merchant{Email: email, PasswordHash: hash, BusinessName: name}
	sess := s.newDashboardSession(c, "", token)
	if _, err := s.Store.CreateMerchant(c.Request.Context(), m, sess,
		models.NewKey{Hash: s.Hasher.Hash(key.Full), Prefix: key.Prefix, Suffix: key.Suffix, Type: models.ModeTest}); err != nil {
		fail(c, err)
		return
	}
	// The address is asked to be confirmed; the account works meanwhile (a
	// link not sent now is asked for again from the dashboard).
	confirmationSent := false
	if s.confirmationsOn() {
		var err error
		if confirmationSent, err = s.sendConfirmation(c, m); err != nil {
			s.Logger.Error("e-mail confirmation not stored", "merchantId", m.ID, "err", err, "requestId", requestID(c))
		}
	}
	respond(c, http.StatusCreated, gin.H{
		"emailConfirmationSent": confirmationSent,
		"merchant":              toMerchantJSON(m),
		"sessionToken":          token,
		"expiresAt":             ts(sess.ExpiresAt),
		"testKey":               keyCreatedJSON{FullKey: key.Full, KeyType: "test", KeyPrefix: key.Prefix, KeySuffix: key.Suffix},
	})
}

// checkGivenPassword checks a password given to be compared with the
// account's (sign-in, the current one of a change): present, and not so
// long that hashing it costs more than a real one (in bytes: any password
// set had at most maxPassword characters).
func checkGivenPassword(v *checker, field, p string) {
	if p == "" {
		v.Add(field, "is required")
	} else if len(p) > 4*maxPassword {
		v.Add(field, "must be at most 256 characters")
	}
}

// checkPassword checks a new password (the field's value).
func checkPassword(v *checker, field, p string) {
	switch n := len([]rune(p)); {
	case n == 0:
		v.Add(field, "is required")
	case n < minPassword:
		v.Add(field, "must be at least 12 characters")
	case n > maxPassword:
		v.Add(field, "must be at most 256 characters")
	}
}

type loginRequest struct {
	Email    string `json:"email"`
	Password string `json:"password"`
}

func (s *Server) login(c *gin.Context) {
	var req loginRequest
	if err := bindJSON(c, &req); err != nil {
		fail(c, err)
		return
	}
	var v checker
	email := v.email("email", req.Email, true)
	checkGivenPassword(&v, "password", req.Password)
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	// One sign-in of an account at a time: its failures are counted
	// before the next is let through the check below.
	release, err := s.accountTurn(c, email)
	if err != nil {
		fail(c, err)
		return
	}
	defer release()
	// Per account, whatever the address: an attacker rotating addresses
	// (or a whole IPv6 network) still gets only so many guesses at one
	// account. Unknown addresses are limited alike, so the answer does not
	// tell which exist.
	if s.Accounts != nil && !s.Accounts.AllowAccount(c, email) {
		return
	}
	m, err := s.Store.MerchantByEmail(c.Request.Context(), email)
	if err != nil && !errors.Is(err, apperr.ErrNotFound) {
		fail(c, err)
		return
	}
	var wrong bool
	if werr := s.passwords.hash(c.Request.Context(), func() {
		if err != nil {
			auth.BurnPasswordCheck(req.Password)
			wrong = true
			return
		}
		wrong = auth.CheckPassword(m.PasswordHash, req.Password) != nil
	}); werr != nil {
		fail(c, werr)
		return
	}
	if wrong {
		s.loginFailed(c, email)
		return
	}
	token, err := auth.GenerateSessionToken()
	if err != nil {
		fail(c, err)
		return
	}
	sess := s.newDashboardSession(c, m.ID, token)
	if err := s.Store.SignIn(c.Request.Context(), sess, m.PasswordHash); err != nil {
		if errors.Is(err, models.ErrPasswordChanged) {
			// A reset (or a change) committed while the password was
			// checked: the old password opens no session after it.
			s.loginFailed(c, email)
			return
		}
		fail(c, err)
		return
	}
	respond(c, http.StatusOK, gin.H{"sessionToken": token, "expiresAt": ts(sess.ExpiresAt), "merchant": toMerchantJSON(m)})
}

func (s *Server) logout(c *gin.Context) {
	if err := s.Store.RevokeDashboardSession(c.Request.Context(), principal(c).SessionID); err != nil {
		fail(c, err)
		return
	}
	respondMessage(c, http.StatusOK, "signed out")
}

func (s *Server) getMerchant(c *gin.Context) {
	m, err := s.Store.Merchant(c.Request.Context(), principal(c).MerchantID)
	if err != nil {
		fail(c, err)
		return
	}
	respond(c, http.StatusOK, toMerchantJSON(m))
}

type patchMerchantRequest struct {
	BusinessName *string `json:"businessName"`
	Wallets      *struct {
		EVM    *string `json:"evm"`
		Solana *string `json:"solana"`
	} `json:"wallets"`
	LogoURL      *string   `json:"logoUrl"`
	EmbedOrigins *[]string `json:"embedOrigins"`
}

func (s *Server) patchMerchant(c *gin.Context) {
	var req patchMerchantRequest
	if err := bindJSON(c, &req); err != nil {
		fail(c, err)
		return
	}
	var v checker
	var u models.MerchantUpdate
	if req.BusinessName != nil {
		n := v.text("businessName", *req.BusinessName, true, 200)
		u.BusinessName = &n
	}
	if req.Wallets != nil {
		// An empty string removes the default wallet of that family.
		if w := req.Wallets.EVM; w != nil {
			a := ""
			if strings.TrimSpace(*w) != "" {
				a = v.addressOfFamily("wallets.evm", chain.FamilyEVM, *w)
			}
			u.WalletEVM = &a
		}
		if w := req.Wallets.Solana; w != nil {
			a := ""
			if strings.TrimSpace(*w) != "" {
				a = v.addressOfFamily("wallets.solana", chain.FamilySolana, *w)
			}
			u.WalletSolana = &a
		}
	}
	if req.LogoURL != nil {
		l := v.logoURL("logoUrl", *req.LogoURL, principal(c).MerchantID)
		u.LogoURL = &l
	}
	if req.EmbedOrigins != nil {
		origins := v.embedOrigins("embedOrigins", *req.EmbedOrigins)
		u.EmbedOrigins = &origins
	}
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	if u.WalletEVM != nil || u.WalletSolana != nil {
		// A wallet named anew must not be one another merchant proved; one
		// saved as it was (the settings form sends both) is not named anew.
		cur, err := s.Store.Merchant(c.Request.Context(), principal(c).MerchantID)
		if err != nil {
			fail(c, err)
			return
		}
		var named []models.NamedWallet
		for _, w := range []struct {
			field string
			to    *string
			was   string
		}{{"wallets.evm", u.WalletEVM, cur.WalletEVM}, {"wallets.solana", u.WalletSolana, cur.WalletSolana}} {
			if w.to != nil && *w.to != w.was {
				// A default is for every network of its family: a contract
				// wallet another merchant proved on one network is refused
				// where a link or a session uses it there.
				named = append(named, models.NamedWallet{Field: w.field, Address: *w.to})
			}
		}
		if err := s.Store.WalletsFree(c.Request.Context(), principal(c).MerchantID, named...); err != nil {
			fail(c, err)
			return
		}
	}
	m, err := s.Store.UpdateMerchant(c.Request.Context(), principal(c).MerchantID, u)
	if err != nil {
		fail(c, err)
		return
	}
	s.dropReplacedImage(c.Request.Context(), m.ID, m.ReplacedLogoURL)
	respond(c, http.StatusOK, toMerchantJSON(m))
}

type logoRequest struct {
	LogoURL string `json:"logoUrl"`
}

func (s *Server) patchMerchantLogo(c *gin.Context) {
	var req logoRequest
	if err := bindJSON(c, &req); err != nil {
		fail(c, err)
		return
	}
	var v checker
	if strings.TrimSpace(req.LogoURL) == "" {
		v.Add("logoUrl", "is required")
	}
	l := v.logoURL("logoUrl", req.LogoURL, principal(c).MerchantID)
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	m, err := s.Store.UpdateMerchant(c.Request.Context(), principal(c).MerchantID, models.MerchantUpdate{LogoURL: &l})
	if err != nil {
		fail(c, err)
		return
	}
	s.dropReplacedImage(c.Request.Context(), m.ID, m.ReplacedLogoURL)
	respondMessage(c, http.StatusOK, "logo updated")
}

// embedOrigins checks the sites allowed to frame the merchant's hosted
// pages: at most 10 https origins (scheme and host, no path).
func (v *checker) embedOrigins(field string, list []string) []string {
	if len(list) > 10 {
		v.Add(field, "at most 10 origins")
		return nil
	}
	out := []string{}
	for i, o := range list {
		u, err := url.Parse(o)
		if err != nil || u.Scheme != "https" || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" ||
			u.User != nil || strings.ContainsAny(o, " ;'\"*") {
			v.Add(fmt.Sprintf("%s[%d]", field, i), "must be an https origin such as https://shop.example")
			continue
		}
		out = append(out, "https://"+u.Host)
	}
	return out
}

// logoURL checks a logo's address: an absolute http(s) URL, or the path of
// an image the merchant uploaded (/uploads/merchants/<own id>/...), which
// is what the hosted pages show (they load nothing from other origins).
func (v *checker) logoURL(field, s, merchantID string) string {
	s = strings.TrimSpace(s)
	if key, ok := strings.CutPrefix(s, "/uploads/"); ok {
		if m := uploadKey.FindStringSubmatch(key); m == nil || m[1] != merchantID {
			v.Add(field, "must be an absolute http(s) URL or the path of an image you uploaded")
		}
		return s
	}
	return v.webURL(field, s)
}
