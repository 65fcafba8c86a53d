package api

import (
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
	Mode       models.Mode // API keys only
	KeyID      string      // API keys only
	SessionID  string      // dashboard sessions only
}

// Scope is the merchant and mode a key-authenticated request is confined to.
func (p Principal) Scope() models.Scope { return models.Scope{MerchantID: p.MerchantID, Mode: p.Mode} }

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

// requireKey admits API keys only: a dashboard session token is refused.
func (s *Server) requireKey(c *gin.Context) {
	token, ok := bearer(c)
	if !ok {
		s.unauthorized(c, "missing API key", keyHint)
		return
	}
	switch auth.KeyType(token) {
	case "session":
		s.unauthorized(c, "this route takes an API key, not a dashboard session token", keyHint)
		return
	case "":
		s.unauthorized(c, "invalid or revoked API key", keyHint)
		return
	}
	key, err := s.Store.APIKeyByHash(c.Request.Context(), s.Hasher.Hash(token))
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
	c.Next()
}

const sessionHint = "sign in with POST /api/auth/login and send Authorization: Bearer svc_sess_..."

// requireSession admits dashboard session tokens only: an API key is refused.
func (s *Server) requireSession(c *gin.Context) {
	token, ok := bearer(c)
	if !ok {
		s.unauthorized(c, "missing dashboard session token", sessionHint)
		return
	}
	switch auth.KeyType(token) {
	case "test", "live":
		s.unauthorized(c, "this dashboard route takes a session token, not an API key", sessionHint)
		return
	case "":
		s.unauthorized(c, "invalid or expired session", sessionHint)
		return
	}
	sess, err := s.Store.DashboardSessionByHash(c.Request.Context(), s.Hasher.Hash(token))
	if err != nil {
		if errors.Is(err, apperr.ErrNotFound) {
			s.unauthorized(c, "invalid or expired session", sessionHint)
			return
		}
		fail(c, err)
		return
	}
	c.Set(principalKey, Principal{MerchantID: sess.MerchantID, SessionID: sess.ID})
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
