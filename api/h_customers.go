package api

import (
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/gin-gonic/gin"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/money"
)

func (s *Server) registerCustomers(g *gin.RouterGroup) {
	s.Handle(g, http.MethodPost, "/customers", AuthKey, s.createCustomer)
	s.Handle(g, http.MethodGet, "/customers", AuthKey, s.listCustomers)
	s.Handle(g, http.MethodGet, "/customers/:id", AuthKey, s.getCustomer)
	s.Handle(g, http.MethodPatch, "/customers/:id", AuthKey, s.patchCustomer)
}

// customerJSON is a customer; Metadata is nil (absent) in list items.
type customerJSON struct {
	ID               string             `json:"id"`
	Email            string             `json:"email"`
	Name             string             `json:"name"`
	WalletAddress    string             `json:"walletAddress"`
	Country          string             `json:"country"`
	Metadata         *map[string]string `json:"metadata,omitempty"`
	TotalSpent       money.Amount       `json:"totalSpent"`
	TransactionCount int64              `json:"transactionCount"`
	TotalRefunded    money.Amount       `json:"totalRefunded"`
	CreatedAt        Time               `json:"createdAt"`
	UpdatedAt        Time               `json:"updatedAt"`
}

func toCustomerJSON(c *models.Customer, withMetadata bool) customerJSON {
	out := customerJSON{ID: c.ID, Email: c.Email, Name: c.Name, WalletAddress: c.WalletAddress, Country: c.Country,
		TotalSpent: c.TotalSpent, TransactionCount: c.TransactionCount, TotalRefunded: c.TotalRefunded,
		CreatedAt: ts(c.CreatedAt), UpdatedAt: ts(c.UpdatedAt)}
	if withMetadata {
		md := map[string]string(c.Metadata)
		if md == nil {
			md = map[string]string{}
		}
		out.Metadata = &md
	}
	return out
}

// Metadata bounds (as Stripe's): 50 keys, keys up to 40 characters, values
// up to 500; no NUL.
func checkMetadata(v *checker, md map[string]string) {
	if len(md) > models.MaxMetadataKeys {
		v.Add("metadata", "must have at most 50 keys")
	}
	for k, val := range md {
		if k == "" || utf8.RuneCountInString(k) > 40 {
			v.Add("metadata", "keys must be 1 to 40 characters")
			return
		}
		if utf8.RuneCountInString(val) > 500 {
			v.Add(memberPath("metadata", k), "must be at most 500 characters")
		} else if strings.ContainsFunc(k+val, isControl) {
			v.Add(memberPath("metadata", k), "must not contain control characters")
		}
	}
}

type createCustomerRequest struct {
	Email         string            `json:"email"`
	Name          string            `json:"name"`
	Country       string            `json:"country"`
	WalletAddress string            `json:"walletAddress"`
	Metadata      map[string]string `json:"metadata"`
}

func (s *Server) createCustomer(c *gin.Context) {
	var req createCustomerRequest
	if err := bindJSON(c, &req); err != nil {
		fail(c, err)
		return
	}
	var v checker
	cust := &models.Customer{
		Email:         v.email("email", req.Email, true),
		Name:          v.text("name", req.Name, false, 200),
		Country:       v.country("country", req.Country, false),
		WalletAddress: v.anyAddress("walletAddress", req.WalletAddress),
		Metadata:      models.StringMap{},
	}
	checkMetadata(&v, req.Metadata)
	for k, val := range req.Metadata {
		if val != "" {
			cust.Metadata[k] = val
		}
	}
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	p := principal(c)
	cust.MerchantID, cust.Mode = p.MerchantID, p.Mode
	if err := s.Store.CreateCustomer(c.Request.Context(), cust); err != nil {
		fail(c, err)
		return
	}
	respond(c, http.StatusCreated, toCustomerJSON(cust, true))
}

func (s *Server) getCustomer(c *gin.Context) {
	id, err := pathID(c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	cust, err := s.Store.Customer(c.Request.Context(), principal(c).Scope(), id)
	if err != nil {
		fail(c, err)
		return
	}
	respond(c, http.StatusOK, toCustomerJSON(cust, true))
}

type patchCustomerRequest struct {
	Email         *string           `json:"email"`
	Name          *string           `json:"name"`
	Country       *string           `json:"country"`
	WalletAddress *string           `json:"walletAddress"`
	Metadata      map[string]string `json:"metadata"`
}

// patchCustomer changes only the fields sent. Metadata merges key by key;
// a key set to "" is removed.
func (s *Server) patchCustomer(c *gin.Context) {
	id, err := pathID(c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	var req patchCustomerRequest
	if err := bindJSON(c, &req); err != nil {
		fail(c, err)
		return
	}
	var v checker
	var u models.CustomerUpdate
	if req.Email != nil {
		e := v.email("email", *req.Email, true)
		u.Email = &e
	}
	if req.Name != nil {
		n := v.text("name", *req.Name, false, 200)
		u.Name = &n
	}
	if req.Country != nil {
		cc := v.country("country", *req.Country, false)
		u.Country = &cc
	}
	if req.WalletAddress != nil {
		w := v.anyAddress("walletAddress", *req.WalletAddress)
		u.WalletAddress = &w
	}
	if req.Metadata != nil {
		checkMetadata(&v, req.Metadata)
		u.Metadata = req.Metadata
	}
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	cust, err := s.Store.UpdateCustomer(c.Request.Context(), principal(c).Scope(), id, u)
	if err != nil {
		fail(c, err)
		return
	}
	respond(c, http.StatusOK, toCustomerJSON(cust, true))
}

func (s *Server) listCustomers(c *gin.Context) {
	var v checker
	page := v.page(c.Query)
	f := models.CustomerFilter{Search: v.text("q", c.Query("q"), false, 200)}
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	rows, more, err := s.Store.CustomerList(c.Request.Context(), principal(c).Scope(), f, page)
	if err != nil {
		fail(c, err)
		return
	}
	out := make([]customerJSON, 0, len(rows))
	for i := range rows {
		out = append(out, toCustomerJSON(&rows[i], false))
	}
	respondList(c, out, more)
}
