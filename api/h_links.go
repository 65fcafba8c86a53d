package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"

	"github.com/gin-gonic/gin"
	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/money"
)

func (s *Server) registerLinks(g *gin.RouterGroup) {
	s.Handle(g, http.MethodPost, "/payment-links", AuthKey, s.createLink)
	s.Handle(g, http.MethodGet, "/payment-links", AuthKey, s.listLinks)
	s.Handle(g, http.MethodGet, "/payment-links/:id", AuthKey, s.getLink)
	s.Handle(g, http.MethodPatch, "/payment-links/:id", AuthKey, s.patchLink)
	s.Handle(g, http.MethodDelete, "/payment-links/:id", AuthSession, s.deleteLink)
}

// LinkDeleteHook lets the checkout feature fail a deleted link's open
// sessions; it runs after the link is deleted.
type LinkDeleteHook func(c *gin.Context, link *models.PaymentLink) error

type linkJSON struct {
	ID                      string            `json:"id"`
	Name                    string            `json:"name"`
	Description             string            `json:"description"`
	Amount                  money.Amount      `json:"amount"`
	Currency                string            `json:"currency"`
	Network                 string            `json:"network"`
	Networks                []string          `json:"networks"`
	Token                   string            `json:"token"`
	Active                  bool              `json:"active"`
	MerchantWalletAddress   string            `json:"merchantWalletAddress"`
	MerchantWalletAddresses map[string]string `json:"merchantWalletAddresses"`
	MerchantName            string            `json:"merchantName"`
	TotalCollected          money.Amount      `json:"totalCollected"`
	TotalTransactions       int64             `json:"totalTransactions"`
	TotalRefunded           money.Amount      `json:"totalRefunded"`
	Mode                    string            `json:"mode"`
	CreatedAt               Time              `json:"createdAt"`
	UpdatedAt               Time              `json:"updatedAt"`
}

func toLinkJSON(l *models.PaymentLink, merchantName string) linkJSON {
	return linkJSON{ID: l.ID, Name: l.Name, Description: l.Description, Amount: l.Amount, Currency: l.Currency,
		Network: l.Network, Networks: append([]string{}, l.Networks...), Token: l.Token, Active: l.Active,
		MerchantWalletAddress: l.MerchantWalletAddress, MerchantWalletAddresses: map[string]string(l.WalletAddresses),
		MerchantName: merchantName, TotalCollected: l.TotalCollected, TotalTransactions: l.TotalTransactions,
		TotalRefunded: l.TotalRefunded, Mode: string(l.Mode), CreatedAt: ts(l.CreatedAt), UpdatedAt: ts(l.UpdatedAt)}
}

type createLinkRequest struct {
	Name                    string            `json:"name"`
	Description             string            `json:"description"`
	Amount                  json.RawMessage   `json:"amount"`
	Currency                string            `json:"currency"`
	Network                 string            `json:"network"`
	Networks                []string          `json:"networks"`
	Token                   string            `json:"token"`
	MerchantWalletAddresses map[string]string `json:"merchantWalletAddresses"`
}

func (s *Server) createLink(c *gin.Context) {
	var req createLinkRequest
	if err := bindJSON(c, &req); err != nil {
		fail(c, err)
		return
	}
	p := principal(c)
	m, err := s.Store.Merchant(c.Request.Context(), p.MerchantID)
	if err != nil {
		fail(c, err)
		return
	}
	var v checker
	name := v.text("name", req.Name, true, 200)
	desc := v.text("description", req.Description, false, 2000)
	amount := v.amount("amount", req.Amount, true, 2)
	if req.Currency == "" {
		req.Currency = "USD"
	}
	v.oneOf("currency", req.Currency, true, "USD")
	if req.Token == "" {
		req.Token = "USDC"
	}
	v.oneOf("token", req.Token, true, "USDC")
	primary, networks, wallets := linkNetworks(&v, m, p.Mode, req.Network, req.Networks, req.MerchantWalletAddresses)
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	if err := s.Store.WalletsReceive(c.Request.Context(), p.MerchantID, walletFields(wallets)...); err != nil {
		fail(c, err)
		return
	}
	l := &models.PaymentLink{MerchantID: p.MerchantID, Mode: p.Mode, Name: name, Description: desc, Amount: amount,
		Currency: req.Currency, Network: primary, Networks: networks, Token: req.Token, WalletAddresses: wallets,
		MerchantWalletAddress: wallets[primary]}
	if err := s.Store.CreatePaymentLink(c.Request.Context(), l); err != nil {
		fail(c, err)
		return
	}
	respond(c, http.StatusCreated, toLinkJSON(l, m.BusinessName))
}

func (s *Server) listLinks(c *gin.Context) {
	p := principal(c)
	m, err := s.Store.Merchant(c.Request.Context(), p.MerchantID)
	if err != nil {
		fail(c, err)
		return
	}
	var v checker
	wallet := v.text("merchantWalletAddress", c.Query("merchantWalletAddress"), false, 128)
	// SPEC.md lists every link at once; with limit, starting_after, active
	// or q the answer is a page with hasMore instead (the dashboard's).
	q := c.Request.URL.Query()
	if q.Has("limit") || q.Has("starting_after") || q.Has("active") || q.Has("q") {
		page := v.page(c.Query)
		f := models.LinkFilter{Search: v.text("q", c.Query("q"), false, 200)}
		switch a := v.oneOf("active", c.Query("active"), false, "true", "false"); a {
		case "true", "false":
			active := a == "true"
			f.Active = &active
		}
		if wallet != "" {
			v.Add("merchantWalletAddress", "cannot be combined with limit, starting_after, active or q")
		}
		if err := v.err(); err != nil {
			fail(c, err)
			return
		}
		links, more, err := s.Store.PaymentLinkPage(c.Request.Context(), p.Scope(), f, page)
		if err != nil {
			fail(c, err)
			return
		}
		out := make([]linkJSON, 0, len(links))
		for i := range links {
			out = append(out, toLinkJSON(&links[i], m.BusinessName))
		}
		respondList(c, out, more)
		return
	}
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	links, err := s.Store.PaymentLinks(c.Request.Context(), p.Scope(), wallet)
	if err != nil {
		fail(c, err)
		return
	}
	out := make([]linkJSON, 0, len(links))
	for i := range links {
		out = append(out, toLinkJSON(&links[i], m.BusinessName))
	}
	respondArray(c, out)
}

func (s *Server) getLink(c *gin.Context) {
	id, err := pathID(c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	p := principal(c)
	l, err := s.Store.PaymentLink(c.Request.Context(), p.Scope(), id)
	if err != nil {
		fail(c, err)
		return
	}
	s.respondLink(c, l)
}

func (s *Server) respondLink(c *gin.Context, l *models.PaymentLink) {
	m, err := s.Store.Merchant(c.Request.Context(), l.MerchantID)
	if err != nil {
		fail(c, err)
		return
	}
	respond(c, http.StatusOK, toLinkJSON(l, m.BusinessName))
}

type patchLinkRequest struct {
	Name        *string         `json:"name"`
	Description *string         `json:"description"`
	Amount      json.RawMessage `json:"amount"`
	Active      *bool           `json:"active"`
}

func (s *Server) patchLink(c *gin.Context) {
	id, err := pathID(c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	var req patchLinkRequest
	if err := bindJSON(c, &req); err != nil {
		fail(c, err)
		return
	}
	p := principal(c)
	if _, err := s.Store.PaymentLink(c.Request.Context(), p.Scope(), id); err != nil {
		fail(c, err)
		return
	}
	var v checker
	u := models.PaymentLinkUpdate{Active: req.Active}
	if req.Name != nil {
		n := v.text("name", *req.Name, true, 200)
		u.Name = &n
	}
	if req.Description != nil {
		d := v.text("description", *req.Description, false, 2000)
		u.Description = &d
	}
	if req.Amount != nil {
		a := v.amount("amount", req.Amount, true, 2)
		u.Amount = &a
	}
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	l, err := s.Store.UpdatePaymentLink(c.Request.Context(), p.Scope(), id, u)
	if err != nil {
		fail(c, err)
		return
	}
	s.respondLink(c, l)
}

func (s *Server) deleteLink(c *gin.Context) {
	id, err := pathID(c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	// A session acts on either mode's links; a ?mode= it names is kept
	// (the other mode's link is a 404, as on the webhook routes).
	if c.Query("mode") != "" {
		l, err := s.Store.PaymentLinkOfMerchant(c.Request.Context(), principal(c).MerchantID, id)
		if err == nil {
			err = inMode(c, l.Mode)
		}
		if err != nil {
			fail(c, err)
			return
		}
	}
	l, err := s.Store.DeletePaymentLink(c.Request.Context(), principal(c).MerchantID, id)
	if err != nil {
		fail(c, err)
		return
	}
	if s.OnLinkDeleted != nil {
		if err := s.OnLinkDeleted(c, l); err != nil {
			fail(c, err)
			return
		}
	}
	respondMessage(c, http.StatusOK, "payment link deleted")
}

// walletFields names each of a link's receiving wallets (by network) by
// the request field that sets it, for Store.WalletsFree's refusal.
func walletFields(wallets map[string]string) []models.NamedWallet {
	out := make([]models.NamedWallet, 0, len(wallets))
	for n, w := range wallets {
		out = append(out, models.NamedWallet{Field: "merchantWalletAddresses." + n, Address: w, Network: n})
	}
	return out
}

// linkNetworks validates a link's primary and other networks (the primary
// first, each once) and their receiving wallets: the ones given, else the
// merchant's default wallet of each network's family.
func linkNetworks(v *checker, m *models.Merchant, mode models.Mode, network string, others []string, given map[string]string) (string, []string, map[string]string) {
	primary := v.network("network", network, mode)
	// No more entries than the mode has networks: a long list would be
	// answered with a problem per entry.
	if n := len(networksOf(mode)); len(others) > n || len(given) > n {
		if len(others) > n {
			v.Add("networks", fmt.Sprintf("must list at most %d networks (those of %s mode)", n, mode))
		}
		if len(given) > n {
			v.Add("merchantWalletAddresses", fmt.Sprintf("must name at most %d networks (those of %s mode)", n, mode))
		}
		return primary, nil, nil
	}
	// The accepted networks: the primary first, then the others, each once.
	networks := []string{primary}
	seen := map[string]bool{primary: true}
	for i, n := range others {
		field := "networks[" + strconv.Itoa(i) + "]"
		n = v.network(field, n, mode)
		if !seen[n] {
			seen[n] = true
			networks = append(networks, n)
		}
	}
	wallets := map[string]string{}
	var extra []string
	for n := range given {
		if !seen[n] {
			extra = append(extra, n)
		}
	}
	sort.Strings(extra)
	for _, n := range extra {
		v.Add(memberPath("merchantWalletAddresses", n), "is not one of the link's networks")
	}
	if !v.Has("network") {
		for _, n := range networks {
			fam, ok := chain.FamilyOf(n)
			if !ok {
				continue
			}
			field := "merchantWalletAddresses." + n
			if a, given := given[n]; given {
				wallets[n] = v.addressOfFamily(field, fam, a)
				continue
			}
			def := m.WalletEVM
			if fam == chain.FamilySolana {
				def = m.WalletSolana
			}
			if def == "" {
				v.Add(field, "is required: no default "+string(fam)+" wallet is set on the merchant profile")
				continue
			}
			wallets[n] = def
		}
	}
	return primary, networks, wallets
}
