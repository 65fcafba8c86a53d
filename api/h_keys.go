package api

import (
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/auth"
	"github.com/paygate/paygate/models"
)

func (s *Server) registerKeys(g *gin.RouterGroup) {
	s.Handle(g, http.MethodPost, "/developer/keys", AuthSession, s.createKey)
	s.Handle(g, http.MethodGet, "/developer/keys", AuthSession, s.listKeys)
}

type createKeyRequest struct {
	KeyType string `json:"keyType"`
}

// createKey creates the merchant's key of a type, or regenerates it: the
// previous key of that type stops working at once.
func (s *Server) createKey(c *gin.Context) {
	var req createKeyRequest
	if err := bindJSON(c, &req); err != nil {
		fail(c, err)
		return
	}
	var v checker
	v.oneOf("keyType", req.KeyType, true, "test", "live")
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	p := principal(c)
	if req.KeyType == "live" {
		m, err := s.Store.Merchant(c.Request.Context(), p.MerchantID)
		if err != nil {
			fail(c, err)
			return
		}
		if m.KYBStatus != models.KYBApproved {
			fail(c, apperr.WithHint(apperr.ErrForbidden, "live keys require an approved KYB application",
				"submit your business details with POST /api/kyb; test keys work meanwhile"))
			return
		}
	}
	key, err := auth.GenerateAPIKey(req.KeyType)
	if err != nil {
		fail(c, err)
		return
	}
	if _, err := s.Store.ReplaceAPIKey(c.Request.Context(), p.MerchantID, models.NewKey{
		Hash: s.Hasher.Hash(key.Full), Prefix: key.Prefix, Suffix: key.Suffix, Type: models.Mode(req.KeyType),
	}); err != nil {
		fail(c, err)
		return
	}
	respond(c, http.StatusCreated, keyCreatedJSON{FullKey: key.Full, KeyType: req.KeyType, KeyPrefix: key.Prefix, KeySuffix: key.Suffix})
}

type keyJSON struct {
	KeyType    string `json:"keyType"`
	KeyPrefix  string `json:"keyPrefix"`
	KeySuffix  string `json:"keySuffix"`
	LastUsedAt *Time  `json:"lastUsedAt"`
	CreatedAt  Time   `json:"createdAt"`
}

func (s *Server) listKeys(c *gin.Context) {
	keys, err := s.Store.APIKeys(c.Request.Context(), principal(c).MerchantID)
	if err != nil {
		fail(c, err)
		return
	}
	out := make([]keyJSON, 0, len(keys))
	for _, k := range keys {
		out = append(out, keyJSON{KeyType: string(k.KeyType), KeyPrefix: k.KeyPrefix, KeySuffix: k.KeySuffix,
			LastUsedAt: tsPtr(k.LastUsedAt), CreatedAt: ts(k.CreatedAt)})
	}
	respondArray(c, out)
}
