package api

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/auth"
	"github.com/paygate/paygate/models"
)

// principalKey holds the authenticated caller in the Gin context.
const principalKey = "principal"

// Principal is the authenticated caller: a merchant and, for API keys, the
// key's mode, which scopes every read and write.
type Principal struct {
	MerchantID string
	Mode       models.Mode // API keys, and sessions on KEY routes (?mode=)
	KeyID      string      // API keys only
	SessionID  string      // dashboard sessions only
}

// Scope is the merchant and mode a key-authenticated request is confined to.
func (p Principal) Scope() models.Scope { return models.Scope{MerchantID: p.MerchantID, Mode: p.Mode} }

// admitted notes on the request's context the credential it was admitted
// with: the store's checked writes see whether it still holds when they
// write (models.WithCredential).
func admitted(c *gin.Context, cred models.Credential) {
	c.Request = c.Request.WithContext(models.WithCredential(c.Request.Context(), cred))
}

func principal(c *gin.Context) Principal {
	p, _ := c.Get(principalKey)
	return p.(Principal)
}

const keyHint = "send a valid key in the Authorization header: Authorization: Bearer svc_test_sk_..."

func bearer(c *gin.Context) (string, bool) {
	h := c.GetHeader("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return "", false
	}
	return strings.TrimSpace(token), true
}

// unauthorized answers 401 and counts the failure against the client IP.
func (s *Server) unauthorized(c *gin.Context, message, hint string) {
	if s.AuthFailures != nil {
		if err := s.AuthFailures.RecordAuthFailure(c.Request.Context(), c.ClientIP()); err != nil {
			s.Logger.Warn("could not record an authentication failure", "err", err, "requestId", requestID(c))
		}
	}
	fail(c, apperr.WithHint(apperr.ErrUnauthorized, message, hint))
}

// loginFailed answers a failed sign-in (401) and counts it against the
// client address and, with Deps.Accounts, the account.
func (s *Server) loginFailed(c *gin.Context, email string) {
	if s.Accounts == nil {
		s.unauthorized(c, "invalid email or password", "")
		return
	}
	s.recordLoginFailure(c, email)
	fail(c, apperr.WithHint(apperr.ErrUnauthorized, "invalid email or password", ""))
}

// recordLoginFailure counts a wrong password for the account (a sign-in's,
// or the current one of a password change) against the client address and
// the account, with Deps.Accounts.
func (s *Server) recordLoginFailure(c *gin.Context, email string) {
	if s.Accounts == nil {
		return
	}
	if err := s.Accounts.RecordLoginFailure(c.Request.Context(), c.ClientIP(), email); err != nil {
		s.Logger.Warn("could not record a failed password check", "err", err, "requestId", requestID(c))
	}
}

// lookupRotating finds a credential by its hash under the current server
// secret and, while PAYGATE_SECRET_KEY is being rotated, under the previous
// ones; a credential found under a previous secret is hashed again under the
// current one, so it keeps working once the previous secret is dropped.
func lookupRotating[T any](c *gin.Context, s *Server, token string, byHash func(context.Context, string) (*T, error),
	idOf func(*T) string, rehash func(ctx context.Context, id, oldHash, newHash string) error) (*T, error) {
	ctx := c.Request.Context()
	current := s.Hasher.Hash(token)
	v, err := byHash(ctx, current)
	if !errors.Is(err, apperr.ErrNotFound) {
		return v, err
	}
	for _, old := range s.Hasher.PreviousHashes(token) {
		pv, perr := byHash(ctx, old)
		if errors.Is(perr, apperr.ErrNotFound) {
			continue
		}
		if perr != nil {
			return nil, perr
		}
		if rerr := rehash(ctx, idOf(pv), old, current); rerr != nil {
			s.Logger.WarnContext(ctx, "could not re-hash a credential under the current secret", "err", rerr)
		}
		return pv, nil
	}
	return v, err
}

// requireKey admits API keys, and dashboard sessions acting in a mode
// (sessionAsKey).
func (s *Server) requireKey(c *gin.Context) {
	token, ok := bearer(c)
	if !ok {
		s.unauthorized(c, "missing API key", keyHint)
		return
	}
	switch auth.KeyType(token) {
	case "session":
		s.sessionAsKey(c, token)
		return
	case "":
		s.unauthorized(c, "invalid or revoked API key", keyHint)
		return
	}
	key, err := lookupRotating(c, s, token, s.Store.APIKeyByHash, func(k *models.APIKey) string { return k.ID }, s.Store.RehashAPIKey)
	if err != nil {
		if errors.Is(err, apperr.ErrNotFound) {
			s.unauthorized(c, "invalid or revoked API key", keyHint)
			return
		}
		fail(c, err)
		return
	}
	// lastUsedAt is kept to the minute: most requests write nothing.
	if key.LastUsedAt == nil || s.Store.Now().Sub(*key.LastUsedAt) >= time.Minute {
		if err := s.Store.TouchAPIKey(c.Request.Context(), key.ID); err != nil {
			s.Logger.WarnContext(c.Request.Context(), "could not record key use", "err", err)
		}
	}
	c.Set(principalKey, Principal{MerchantID: key.MerchantID, Mode: key.KeyType, KeyID: key.ID})
	admitted(c, models.Credential{KeyID: key.ID})
	c.Next()
}

const sessionHint = "sign in with POST /api/auth/login and send Authorization: Bearer svc_sess_..."

// sessionAsKey admits a dashboard session on a KEY route, acting in the
// mode of `?mode=test|live` (default test) as that mode's key would: the
// dashboard reads and changes links, customers, transactions, payments and
// deliveries through the same routes as an integration. Live mode needs an
// approved KYB application, as a live key does (403 otherwise).
func (s *Server) sessionAsKey(c *gin.Context, token string) {
	sess, ok := s.session(c, token)
	if !ok {
		return
	}
	mode, err := dashboardMode(c)
	if err != nil {
		fail(c, err)
		return
	}
	if mode == models.ModeLive {
		m, err := s.Store.Merchant(c.Request.Context(), sess.MerchantID)
		if err != nil {
			fail(c, err)
			return
		}
		if m.KYBStatus != models.KYBApproved {
			fail(c, apperr.WithHint(apperr.ErrForbidden, "live mode requires an approved KYB application",
				"submit it with POST /api/kyb; meanwhile use mode=test"))
			return
		}
	}
	c.Set(principalKey, Principal{MerchantID: sess.MerchantID, Mode: mode, SessionID: sess.ID})
	admitted(c, models.Credential{SessionID: sess.ID})
	c.Next()
}

// session looks up a dashboard session token; on failure it has answered.
func (s *Server) session(c *gin.Context, token string) (*models.DashboardSession, bool) {
	sess, err := lookupRotating(c, s, token, s.Store.DashboardSessionByHash, func(d *models.DashboardSession) string { return d.ID },
		s.Store.RehashDashboardSession)
	if err != nil {
		if errors.Is(err, apperr.ErrNotFound) {
			s.unauthorized(c, "invalid or expired session", sessionHint)
			return nil, false
		}
		fail(c, err)
		return nil, false
	}
	return sess, true
}

// requireSession admits dashboard session tokens only: an API key is refused.
func (s *Server) requireSession(c *gin.Context) {
	token, ok := bearer(c)
	if !ok {
		s.unauthorized(c, "missing dashboard session token", sessionHint)
		return
	}
	switch auth.KeyType(token) {
	case "test", "live":
		// Not a failed sign-in: the key is not looked up (a 401 for any key
		// tells a guesser nothing), so it is not counted against the
		// address either. Counted, an integration calling a dashboard route
		// by mistake locked its own address, and every merchant behind the
		// same NAT, out of every route.
		fail(c, apperr.WithHint(apperr.ErrUnauthorized, "this dashboard route takes a session token, not an API key", sessionHint))
		return
	case "":
		s.unauthorized(c, "invalid or expired session", sessionHint)
		return
	}
	sess, ok := s.session(c, token)
	if !ok {
		return
	}
	c.Set(principalKey, Principal{MerchantID: sess.MerchantID, SessionID: sess.ID})
	admitted(c, models.Credential{SessionID: sess.ID})
	c.Next()
}

// dashboardMode reads `?mode=test|live` (default test) on dashboard routes.
func dashboardMode(c *gin.Context) (models.Mode, error) {
	switch m := c.Query("mode"); m {
	case "", "test":
		return models.ModeTest, nil
	case "live":
		return models.ModeLive, nil
	default:
		return "", apperr.Invalid("mode", "must be test or live")
	}
}
