package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"
	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/money"
	"github.com/paygate/paygate/workflows"
)

// Products and hosted checkouts (KEY): a catalog to sell from, and one-off
// checkouts an integration creates per customer, answered with the hosted
// page's URL.
func (s *Server) registerCatalog(g *gin.RouterGroup) {
	s.Handle(g, http.MethodPost, "/v1/products", AuthKey, s.createProduct)
	s.Handle(g, http.MethodGet, "/v1/products", AuthKey, s.listProducts)
	s.Handle(g, http.MethodGet, "/v1/products/:id", AuthKey, s.getProduct)
	s.Handle(g, http.MethodPatch, "/v1/products/:id", AuthKey, s.patchProduct)
	if s.Checkout != nil {
		s.Handle(g, http.MethodPost, "/v1/checkouts", AuthKey, s.createHostedCheckout)
		s.Handle(g, http.MethodGet, "/v1/checkouts", AuthKey, s.listHostedCheckouts)
		s.Handle(g, http.MethodGet, "/v1/checkouts/:id", AuthKey, s.getHostedCheckout)
		s.Handle(g, http.MethodPost, "/v1/checkouts/:id/cancel", AuthKey, s.cancelHostedCheckout)
	}
}

type productJSON struct {
	ID          string       `json:"id"`
	Name        string       `json:"name"`
	Description string       `json:"description"`
	Price       money.Amount `json:"price"`
	Currency    string       `json:"currency"`
	ImageURL    string       `json:"imageUrl"`
	Active      bool         `json:"active"`
	Mode        string       `json:"mode"`
	CreatedAt   Time         `json:"createdAt"`
	UpdatedAt   Time         `json:"updatedAt"`
}

func toProductJSON(p *models.Product) productJSON {
	return productJSON{ID: p.ID, Name: p.Name, Description: p.Description, Price: p.Price, Currency: p.Currency, ImageURL: p.ImageURL,
		Active: p.Active, Mode: string(p.Mode), CreatedAt: ts(p.CreatedAt), UpdatedAt: ts(p.UpdatedAt)}
}

type productRequest struct {
	Name        *string         `json:"name"`
	Description *string         `json:"description"`
	Price       json.RawMessage `json:"price"`
	Currency    string          `json:"currency"`
	ImageURL    *string         `json:"imageUrl"`
	Active      *bool           `json:"active"`
}

// imageURL accepts only an image the merchant uploaded (POST /api/upload).
func (v *checker) imageURL(field, merchantID, s string) string {
	if s == "" {
		return ""
	}
	// The path POST /api/upload answers: /uploads/merchants/<own id>/<file>.
	key, ok := strings.CutPrefix(s, "/uploads/")
	if m := uploadKey.FindStringSubmatch(key); !ok || m == nil || m[1] != merchantID {
		v.Add(field, "must be the url of an image you uploaded (POST /api/upload)")
	}
	return s
}

func (s *Server) createProduct(c *gin.Context) {
	var req productRequest
	if err := bindJSON(c, &req); err != nil {
		fail(c, err)
		return
	}
	p := principal(c)
	var v checker
	prod := &models.Product{MerchantID: p.MerchantID, Mode: p.Mode, Active: true, Currency: "USD"}
	if req.Name == nil {
		v.Add("name", "is required")
	} else {
		prod.Name = v.text("name", *req.Name, true, 200)
	}
	if req.Description != nil {
		prod.Description = v.text("description", *req.Description, false, 2000)
	}
	prod.Price = v.amount("price", req.Price, true, 2)
	if req.Currency != "" {
		prod.Currency = v.oneOf("currency", req.Currency, true, "USD")
	}
	if req.ImageURL != nil {
		prod.ImageURL = v.imageURL("imageUrl", p.MerchantID, *req.ImageURL)
	}
	if req.Active != nil {
		prod.Active = *req.Active
	}
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	if err := s.Store.CreateProduct(c.Request.Context(), prod); err != nil {
		fail(c, err)
		return
	}
	respond(c, http.StatusCreated, toProductJSON(prod))
}

func (s *Server) listProducts(c *gin.Context) {
	var v checker
	page := v.page(c.Query)
	var active *bool
	if a := v.oneOf("active", c.Query("active"), false, "true", "false"); a != "" {
		b := a == "true"
		active = &b
	}
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	rows, more, err := s.Store.Products(c.Request.Context(), principal(c).Scope(), active, page)
	if err != nil {
		fail(c, err)
		return
	}
	out := make([]productJSON, 0, len(rows))
	for i := range rows {
		out = append(out, toProductJSON(&rows[i]))
	}
	respondList(c, out, more)
}

func (s *Server) getProduct(c *gin.Context) {
	id, err := pathID(c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	p, err := s.Store.ProductOf(c.Request.Context(), principal(c).Scope(), id)
	if err != nil {
		fail(c, err)
		return
	}
	respond(c, http.StatusOK, toProductJSON(p))
}

func (s *Server) patchProduct(c *gin.Context) {
	id, err := pathID(c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	var req productRequest
	if err := bindJSON(c, &req); err != nil {
		fail(c, err)
		return
	}
	p := principal(c)
	var v checker
	var u models.ProductUpdate
	if req.Name != nil {
		n := v.text("name", *req.Name, true, 200)
		u.Name = &n
	}
	if req.Description != nil {
		d := v.text("description", *req.Description, false, 2000)
		u.Description = &d
	}
	if len(req.Price) > 0 {
		a := v.amount("price", req.Price, true, 2)
		u.Price = &a
	}
	if req.Currency != "" {
		v.oneOf("currency", req.Currency, true, "USD")
	}
	if req.ImageURL != nil {
		img := v.imageURL("imageUrl", p.MerchantID, *req.ImageURL)
		u.ImageURL = &img
	}
	u.Active = req.Active
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	replaced := ""
	if u.ImageURL != nil {
		if was, err := s.Store.ProductOf(c.Request.Context(), p.Scope(), id); err == nil && was.ImageURL != *u.ImageURL {
			replaced = was.ImageURL
		}
	}
	prod, err := s.Store.UpdateProduct(c.Request.Context(), p.Scope(), id, u)
	if err != nil {
		fail(c, err)
		return
	}
	// The image it showed before, once nothing shows it (as a logo's).
	s.dropReplacedImage(c.Request.Context(), p.MerchantID, replaced)
	respond(c, http.StatusOK, toProductJSON(prod))
}

type hostedJSON struct {
	ID                 string            `json:"id"`
	URL                string            `json:"url"`
	Status             string            `json:"status"`
	Name               string            `json:"name"`
	Amount             money.Amount      `json:"amount"`
	Currency           string            `json:"currency"`
	ProductID          *string           `json:"productId"`
	PaymentLinkID      string            `json:"paymentLinkId"`
	Metadata           map[string]string `json:"metadata"`
	ExternalCustomerID *string           `json:"externalCustomerId"`
	CustomerEmail      string            `json:"customerEmail"`
	SuccessURL         string            `json:"successUrl"`
	CancelURL          string            `json:"cancelUrl"`
	SessionID          *string           `json:"sessionId"`
	Livemode           bool              `json:"livemode"`
	ExpiresAt          Time              `json:"expiresAt"`
	CreatedAt          Time              `json:"createdAt"`
}

// publicBase is where the hosted pages are: PublicURL, else the request's host.
func (s *Server) publicBase(c *gin.Context) string {
	if s.PublicURL != "" {
		return strings.TrimSuffix(s.PublicURL, "/")
	}
	scheme := "http"
	if c.Request.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + c.Request.Host
}

func (s *Server) toHostedJSON(c *gin.Context, hc *models.HostedCheckout) hostedJSON {
	out := hostedJSON{ID: hc.ID, URL: s.publicBase(c) + "/pay/" + hc.PaymentLinkID, Status: hc.Status, Name: hc.Name, Amount: hc.Amount,
		Currency: hc.Currency, ProductID: hc.ProductID, PaymentLinkID: hc.PaymentLinkID, Metadata: map[string]string(hc.Metadata),
		CustomerEmail: hc.CustomerEmail, SuccessURL: hc.SuccessURL, CancelURL: hc.CancelURL, SessionID: hc.SessionID,
		Livemode: hc.Mode == models.ModeLive, ExpiresAt: ts(hc.ExpiresAt), CreatedAt: ts(hc.CreatedAt)}
	if out.Metadata == nil {
		out.Metadata = map[string]string{}
	}
	if hc.ExternalCustomerID != "" {
		out.ExternalCustomerID = &hc.ExternalCustomerID
	}
	return out
}

type hostedRequest struct {
	ProductID               string            `json:"productId"`
	Name                    string            `json:"name"`
	Description             string            `json:"description"`
	Amount                  json.RawMessage   `json:"amount"`
	Network                 string            `json:"network"`
	Networks                []string          `json:"networks"`
	MerchantWalletAddresses map[string]string `json:"merchantWalletAddresses"`
	Metadata                map[string]string `json:"metadata"`
	ExternalCustomerID      string            `json:"externalCustomerId"`
	CustomerEmail           string            `json:"customerEmail"`
	SuccessURL              string            `json:"successUrl"`
	CancelURL               string            `json:"cancelUrl"`
	ExpiresInMinutes        *int              `json:"expiresInMinutes"`
}

// metadata checks Stripe's limits: 50 keys, keys up to 40 characters,
// values up to 500.
func (v *checker) metadata(field string, m map[string]string) map[string]string {
	if len(m) > 50 {
		v.Add(field, "has more than 50 keys")
		return nil
	}
	out := models.StringMap{}
	for k, val := range m {
		switch {
		case k == "" || len([]rune(k)) > 40:
			v.Add(field, "key "+quoted(k, 40)+" must be 1 to 40 characters")
		case len([]rune(val)) > 500:
			v.Add(memberPath(field, k), "must be at most 500 characters")
		case strings.ContainsFunc(k+val, isControl):
			v.Add(memberPath(field, k), "must not contain control characters")
		default:
			out[k] = val
		}
	}
	return out
}

// returnURL accepts an absolute http(s) URL (where the page sends the
// customer back), https only in live mode: a plain-http return of a
// customer who paid is open to anyone on the way (the checkout's and the
// session's ids ride in it), and no shop in production takes orders so.
// {CHECKOUT_ID} and {SESSION_ID} in it are replaced when the page sends
// the customer there.
func (v *checker) returnURL(field, s string, mode models.Mode) string {
	if s == "" {
		return ""
	}
	u, err := url.Parse(s) // refuses control characters (a NUL among them)
	switch {
	case len(s) >= 2048 || err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil ||
		!utf8.ValidString(s) || strings.ContainsAny(s, " \"<>"):
		v.Add(field, "must be an absolute http(s) URL under 2048 characters")
	case mode == models.ModeLive && u.Scheme != "https":
		v.Add(field, "must be an https URL in live mode")
	}
	return s
}

// createHostedCheckout creates a one-off checkout for a product or an
// amount and answers the hosted page's URL.
func (s *Server) createHostedCheckout(c *gin.Context) {
	var req hostedRequest
	if err := bindJSON(c, &req); err != nil {
		fail(c, err)
		return
	}
	ctx := c.Request.Context()
	p := principal(c)
	m, err := s.Store.Merchant(ctx, p.MerchantID)
	if err != nil {
		fail(c, err)
		return
	}
	var v checker
	hc := &models.HostedCheckout{MerchantID: p.MerchantID, Mode: p.Mode, Currency: "USD"}
	desc := v.text("description", req.Description, false, 2000)
	if pid := v.uuidField("productId", req.ProductID, false); pid != "" && !v.Has("productId") {
		prod, err := s.Store.ProductOf(ctx, p.Scope(), pid)
		switch {
		case errors.Is(err, apperr.ErrNotFound):
			v.Add("productId", "no such product")
		case err != nil:
			// A store failure is no answer about the product (a 400 would
			// tell the caller to drop a valid order).
			fail(c, err)
			return
		case !prod.Active:
			v.Add("productId", "the product is not active")
		default:
			hc.ProductID, hc.Name, hc.Amount = &prod.ID, prod.Name, prod.Price
			if desc == "" {
				desc = prod.Description
			}
			// A null amount is no amount (clients send unset fields so).
			if (len(req.Amount) > 0 && string(bytes.TrimSpace(req.Amount)) != "null") || req.Name != "" {
				v.Add("productId", "give a product or an amount and name, not both")
			}
		}
	} else if strings.TrimSpace(req.ProductID) == "" {
		hc.Name = v.text("name", req.Name, true, 200)
		hc.Amount = v.amount("amount", req.Amount, true, 2)
	}
	primary, networks, wallets := linkNetworks(&v, m, p.Mode, req.Network, req.Networks, req.MerchantWalletAddresses)
	hc.Metadata = v.metadata("metadata", req.Metadata)
	hc.ExternalCustomerID = v.text("externalCustomerId", req.ExternalCustomerID, false, 255)
	hc.CustomerEmail = v.email("customerEmail", req.CustomerEmail, false)
	hc.SuccessURL = v.returnURL("successUrl", req.SuccessURL, p.Mode)
	hc.CancelURL = v.returnURL("cancelUrl", req.CancelURL, p.Mode)
	minutes := 24 * 60
	if req.ExpiresInMinutes != nil {
		minutes = *req.ExpiresInMinutes
		if minutes < 5 || minutes > 24*60 {
			v.Add("expiresInMinutes", "must be 5 to 1440")
		}
	}
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	if err := s.Store.WalletsReceive(ctx, p.MerchantID, walletFields(wallets)...); err != nil {
		fail(c, err)
		return
	}
	hc.ExpiresAt = s.Store.Now().Add(time.Duration(minutes) * time.Minute)
	l := &models.PaymentLink{MerchantID: p.MerchantID, Mode: p.Mode, Name: hc.Name, Description: desc, Amount: hc.Amount,
		Currency: hc.Currency, Network: primary, Networks: networks, Token: "USDC", WalletAddresses: wallets,
		MerchantWalletAddress: wallets[primary], ProductID: hc.ProductID}
	if err := s.Store.CreateHostedCheckout(ctx, hc, l); err != nil {
		fail(c, err)
		return
	}
	respond(c, http.StatusCreated, s.toHostedJSON(c, hc))
}

func (s *Server) listHostedCheckouts(c *gin.Context) {
	var v checker
	page := v.page(c.Query)
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	rows, more, err := s.Store.HostedCheckouts(c.Request.Context(), principal(c).Scope(), page)
	if err != nil {
		fail(c, err)
		return
	}
	out := make([]hostedJSON, 0, len(rows))
	for i := range rows {
		out = append(out, s.toHostedJSON(c, &rows[i]))
	}
	respondList(c, out, more)
}

func (s *Server) getHostedCheckout(c *gin.Context) {
	id, err := pathID(c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	hc, err := s.Store.HostedCheckoutOf(c.Request.Context(), principal(c).Scope(), id)
	if err != nil {
		fail(c, err)
		return
	}
	respond(c, http.StatusOK, s.toHostedJSON(c, hc))
}

// cancelHostedCheckout cancels an open checkout: its link takes no new
// session and its open sessions are cancelled. While one of its sessions
// holds a broadcast transfer the cancel is a 409 (the transfer would
// complete the checkout); one broadcast while the cancel runs still
// finishes through verification: the customer's money has moved.
func (s *Server) cancelHostedCheckout(c *gin.Context) {
	id, err := pathID(c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	ctx := c.Request.Context()
	hc, err := s.Store.CancelHostedCheckout(ctx, principal(c).Scope(), id)
	if err != nil {
		fail(c, err)
		return
	}
	// Its open sessions are cancelled now where the workers answer; any
	// not reached (or created while this ran) are cancelled by the
	// checkout repairer (OpenSessionsOfClosedCheckouts).
	open, err := s.Store.OpenSessionsOfLink(ctx, hc.PaymentLinkID)
	if err != nil {
		s.Logger.WarnContext(ctx, "hosted checkout cancelled; its sessions are left to the repairer", "checkoutId", hc.ID, "err", err)
	}
	for i := range open {
		if _, err := s.Checkout.Cancel(context.WithoutCancel(ctx), &open[i], workflows.CancelByMerchant); err != nil {
			s.Logger.WarnContext(ctx, "hosted checkout cancelled; a session is left to the repairer", "sessionId", open[i].ID, "err", err)
		}
	}
	respond(c, http.StatusOK, s.toHostedJSON(c, hc))
}
