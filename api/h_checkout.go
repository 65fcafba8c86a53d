package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/checkout"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/money"
	"github.com/paygate/paygate/workflows"
)

func (s *Server) registerCheckout(g *gin.RouterGroup) {
	if s.Checkout == nil {
		return
	}
	// Customer-facing: no credential (SPEC.md "Checkout").
	s.Handle(g, http.MethodGet, "/checkout/links/:id", AuthNone, s.checkoutLink)
	s.Handle(g, http.MethodPost, "/checkout/quote", AuthNone, s.checkoutQuote)
	s.Handle(g, http.MethodPost, "/checkout/session", AuthNone, s.createCheckoutSession)
	s.Handle(g, http.MethodGet, "/checkout/session/:id", AuthNone, s.getCheckoutSession)
	s.Handle(g, http.MethodGet, "/checkout/session/:id/events", AuthNone, s.checkoutEvents)
	s.Handle(g, http.MethodPost, "/checkout/session/:id/wallet", AuthNone, s.checkoutWallet)
	s.Handle(g, http.MethodPost, "/checkout/session/:id/cancel", AuthNone, s.customerCancel)
	s.Handle(g, http.MethodPost, "/checkout/submit", AuthNone, s.checkoutSubmit)
	s.Handle(g, http.MethodPost, "/checkout/session/:id/authorization", AuthNone, s.checkoutAuthorization)
	// Merchant-facing: read and cancel a session of the key's mode.
	s.Handle(g, http.MethodGet, "/checkout-sessions/:id", AuthKey, s.merchantGetSession)
	s.Handle(g, http.MethodPost, "/checkout-sessions/:id/cancel", AuthKey, s.merchantCancel)
}

type networkInfoJSON struct {
	Network        string `json:"network"`
	Family         string `json:"family"`
	ChainID        uint64 `json:"chainId,omitempty"`
	ReceiveAddress string `json:"merchantWalletAddress"`
	TokenAddress   string `json:"tokenAddress"`
	TokenDecimals  uint8  `json:"tokenDecimals"`
	ExplorerURL    string `json:"explorerUrl,omitempty"`
}

func toNetworkInfo(n checkout.NetworkInfo) networkInfoJSON {
	return networkInfoJSON{Network: n.Network, Family: string(n.Family), ChainID: n.ChainID, ReceiveAddress: n.ReceiveAddress,
		TokenAddress: n.TokenAddress, TokenDecimals: n.TokenDecimals, ExplorerURL: n.ExplorerURL}
}

func (s *Server) checkoutLink(c *gin.Context) {
	id, err := pathID(c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	info, err := s.Checkout.Link(c.Request.Context(), id)
	if err != nil {
		fail(c, err)
		return
	}
	nets := make([]networkInfoJSON, 0, len(info.Networks))
	for _, n := range info.Networks {
		nets = append(nets, toNetworkInfo(n))
	}
	l := info.Link
	respond(c, http.StatusOK, gin.H{"id": l.ID, "name": l.Name, "description": l.Description, "amount": l.Amount,
		"currency": l.Currency, "token": l.Token, "networks": nets, "merchantName": info.Merchant.BusinessName,
		"merchantLogoUrl": info.Merchant.LogoURL, "livemode": l.Mode == models.ModeLive})
}

type customerBody struct {
	Name    string `json:"name"`
	Email   string `json:"email"`
	Address string `json:"address"`
	Country string `json:"country"`
}

type quoteRequest struct {
	LinkID   string       `json:"linkId"`
	Network  string       `json:"network"`
	Customer customerBody `json:"customer"`
}

func (s *Server) checkoutQuote(c *gin.Context) {
	var req quoteRequest
	if err := bindJSON(c, &req); err != nil {
		fail(c, err)
		return
	}
	var v checker
	linkID := v.uuidField("linkId", req.LinkID, true)
	network := v.text("network", req.Network, true, 32)
	country := v.country("customer.country", req.Customer.Country, true)
	v.text("customer.name", req.Customer.Name, false, 200)
	v.email("customer.email", req.Customer.Email, false)
	v.text("customer.address", req.Customer.Address, false, 500)
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	q, err := s.Checkout.Quote(c.Request.Context(), checkout.QuoteRequest{LinkID: linkID, Network: network, Country: country})
	if err != nil {
		fail(c, err)
		return
	}
	respond(c, http.StatusOK, gin.H{"quoteToken": q.Token, "calculationId": q.Quote.CalculationID,
		"subtotalCents": q.Quote.SubtotalCents, "taxCents": q.Quote.TaxCents, "totalCents": q.Quote.TotalCents,
		"currency": "USD", "expiresAt": ts(unixTime(q.Quote.ExpiresAt))})
}

type totalsBody struct {
	SubtotalCents *int64 `json:"subtotalCents"`
	TaxCents      *int64 `json:"taxCents"`
	TotalCents    *int64 `json:"totalCents"`
	CalculationID string `json:"calculationId"`
}

type createSessionRequest struct {
	LinkID         string        `json:"linkId"`
	QuoteToken     string        `json:"quoteToken"`
	WalletAddress  string        `json:"walletAddress"`
	WalletType     string        `json:"walletType"`
	Network        string        `json:"network"`
	Customer       *customerBody `json:"customer"`
	TotalsSnapshot *totalsBody   `json:"totalsSnapshot"`
}

// sessionJSON is a checkout session as SPEC.md shows it, plus what a wallet
// needs to pay it.
type sessionJSON struct {
	ID                    string        `json:"id"`
	PaymentLinkID         string        `json:"paymentLinkId"`
	WalletAddress         string        `json:"walletAddress"`
	WalletType            string        `json:"walletType"`
	Network               string        `json:"network"`
	ExpectedAmount        money.Amount  `json:"expectedAmount"`
	Status                string        `json:"status"`
	Customer              *customerBody `json:"customer,omitempty"`
	TxHash                *string       `json:"txHash,omitempty"`
	FailureReason         string        `json:"failureReason,omitempty"`
	FailureMessage        string        `json:"failureMessage,omitempty"`
	MerchantWalletAddress string        `json:"merchantWalletAddress"`
	TokenAddress          string        `json:"tokenAddress"`
	TokenDecimals         int           `json:"tokenDecimals"`
	AmountUnits           string        `json:"amountUnits"`
	ExpiresAt             Time          `json:"expiresAt"`
	CreatedAt             Time          `json:"createdAt"`
	// PaymentReference binds a payment to the session: the nonce of the
	// EIP-3009 authorization (EVM) or the Solana Pay reference key.
	PaymentReference string `json:"paymentReference,omitempty"`
	// Authorization is the EIP-712 TransferWithAuthorization to sign (EVM).
	Authorization *checkout.TypedAuthorization `json:"authorization,omitempty"`
	// Relayer says whether POST .../authorization broadcasts for the customer.
	Relayer *bool `json:"relayer,omitempty"`
	// SolanaPayURL is the Solana Pay transfer request (Solana).
	SolanaPayURL string `json:"solanaPayUrl,omitempty"`
}

// sessionOut is a session with its payment instructions.
func (s *Server) sessionOut(cs *models.CheckoutSession, withCustomer bool) sessionJSON {
	out := toSessionJSON(cs, withCustomer)
	if s.Checkout == nil {
		return out
	}
	in := s.Checkout.PaymentInstructions(cs, "")
	out.PaymentReference, out.Authorization, out.SolanaPayURL = in.Reference, in.Authorization, in.SolanaPayURL
	if in.Authorization != nil {
		out.Relayer = &in.Relayer
	}
	return out
}

func toSessionJSON(cs *models.CheckoutSession, withCustomer bool) sessionJSON {
	out := sessionJSON{ID: cs.ID, PaymentLinkID: cs.PaymentLinkID, WalletAddress: cs.WalletAddress, WalletType: cs.WalletType,
		Network: cs.Network, ExpectedAmount: cs.ExpectedAmount, Status: cs.Status, TxHash: cs.TxHash,
		FailureReason: cs.FailureReason, FailureMessage: cs.FailureMessage, MerchantWalletAddress: cs.MerchantWalletAddress,
		TokenAddress: cs.TokenAddress, TokenDecimals: money.Scale, AmountUnits: fmt.Sprint(cs.ExpectedAmount.Units()),
		ExpiresAt: ts(cs.ExpiresAt), CreatedAt: ts(cs.CreatedAt)}
	if withCustomer {
		out.Customer = &customerBody{Name: cs.CustomerName, Email: cs.CustomerEmail, Address: cs.CustomerAddress, Country: cs.CustomerCountry}
	}
	return out
}

func (s *Server) createCheckoutSession(c *gin.Context) {
	var req createSessionRequest
	if err := bindJSON(c, &req); err != nil {
		fail(c, err)
		return
	}
	var v checker
	r := checkout.CreateRequest{
		LinkID:     v.uuidField("linkId", req.LinkID, true),
		QuoteToken: v.text("quoteToken", req.QuoteToken, true, 2048),
		WalletType: v.oneOf("walletType", req.WalletType, true, "evm", "solana"),
		Network:    v.text("network", req.Network, true, 32),
	}
	if n := r.Network; n != "" {
		r.WalletAddress = v.address("walletAddress", n, req.WalletAddress)
	}
	if req.Customer == nil {
		v.Add("customer", "is required")
	} else {
		r.Customer = CheckCustomer(&v.ValidationError, "customer.", checkout.Customer{Name: req.Customer.Name,
			Email: req.Customer.Email, Address: req.Customer.Address, Country: req.Customer.Country})
	}
	if t := req.TotalsSnapshot; t == nil {
		v.Add("totalsSnapshot", "is required")
	} else {
		cents := func(field string, p *int64) int64 {
			if p == nil {
				v.Add("totalsSnapshot."+field, "is required")
				return 0
			}
			if *p < 0 {
				v.Add("totalsSnapshot."+field, "must not be negative")
			}
			return *p
		}
		r.Totals = checkout.Totals{SubtotalCents: cents("subtotalCents", t.SubtotalCents), TaxCents: cents("taxCents", t.TaxCents),
			TotalCents: cents("totalCents", t.TotalCents), CalculationID: v.text("totalsSnapshot.calculationId", t.CalculationID, true, 64)}
	}
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	created, err := s.Checkout.CreateSession(c.Request.Context(), r)
	if err != nil {
		fail(c, err)
		return
	}
	out := s.sessionOut(created.Session, true)
	body := gin.H{"id": out.ID, "paymentLinkId": out.PaymentLinkID, "walletAddress": out.WalletAddress,
		"walletType": out.WalletType, "network": out.Network, "expectedAmount": out.ExpectedAmount, "status": out.Status,
		"customer": out.Customer, "expiresAt": out.ExpiresAt, "createdAt": out.CreatedAt,
		"merchantWalletAddress": out.MerchantWalletAddress, "tokenAddress": out.TokenAddress, "tokenDecimals": out.TokenDecimals,
		"amountUnits": out.AmountUnits, "chainId": created.Network.ChainID, "paymentReference": out.PaymentReference}
	if out.Authorization != nil {
		body["authorization"], body["relayer"] = out.Authorization, out.Relayer
	}
	if out.SolanaPayURL != "" {
		body["solanaPayUrl"] = out.SolanaPayURL
	}
	respond(c, http.StatusCreated, body)
}

type historyJSON struct {
	ID        string `json:"id"`
	SessionID string `json:"sessionId"`
	Status    string `json:"status"`
	Source    string `json:"source"`
	Chain     string `json:"chain,omitempty"`
	CreatedAt Time   `json:"createdAt"`
}

func (s *Server) respondSession(c *gin.Context, cs *models.CheckoutSession, withCustomer bool) {
	h, err := s.Store.SessionHistory(c.Request.Context(), cs.ID)
	if err != nil {
		fail(c, err)
		return
	}
	respond(c, http.StatusOK, s.sessionWithHistory(cs, h, withCustomer))
}

// sessionWithHistory is the poll's data: the session and its history.
func (s *Server) sessionWithHistory(cs *models.CheckoutSession, h []models.CheckoutSessionEvent, withCustomer bool) gin.H {
	events := make([]historyJSON, 0, len(h))
	for _, e := range h {
		events = append(events, historyJSON{ID: e.ID, SessionID: e.SessionID, Status: e.Status, Source: e.Source, Chain: e.Chain, CreatedAt: ts(e.CreatedAt)})
	}
	return gin.H{"session": s.sessionOut(cs, withCustomer), "events": events}
}

// getCheckoutSession is the status poll. It is public, so it does not show
// the customer's personal data.
func (s *Server) getCheckoutSession(c *gin.Context) {
	id, err := pathID(c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	var start uint64
	if s.polls != nil {
		var body []byte
		var ok bool
		if body, start, ok = s.polls.get(id); ok {
			c.Data(http.StatusOK, "application/json; charset=utf-8", body)
			return
		}
	}
	cs, err := s.Store.CheckoutSession(c.Request.Context(), id)
	if err != nil {
		fail(c, err)
		return
	}
	if s.polls == nil {
		s.respondSession(c, cs, false)
		return
	}
	h, err := s.Store.SessionHistory(c.Request.Context(), cs.ID)
	if err != nil {
		fail(c, err)
		return
	}
	body, err := json.Marshal(itemBody{Status: "success", Data: s.sessionWithHistory(cs, h, false)})
	if err != nil {
		fail(c, err)
		return
	}
	s.polls.put(id, body, start)
	c.Data(http.StatusOK, "application/json; charset=utf-8", body)
}

type walletRequest struct {
	Status string `json:"status"`
}

func (s *Server) checkoutWallet(c *gin.Context) {
	id, err := pathID(c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	defer s.sessionMoved(id)
	var req walletRequest
	if err := bindJSON(c, &req); err != nil {
		fail(c, err)
		return
	}
	var v checker
	v.oneOf("status", req.Status, true, models.StatusWalletConnecting, models.StatusWalletReady)
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	cs, err := s.Checkout.Wallet(c.Request.Context(), id, req.Status)
	if err != nil {
		fail(c, err)
		return
	}
	respond(c, http.StatusOK, toSessionJSON(cs, false))
}

func (s *Server) customerCancel(c *gin.Context) {
	s.cancelSession(c, nil, workflows.CancelByCustomer)
}

func (s *Server) merchantCancel(c *gin.Context) {
	sc := principal(c).Scope()
	s.cancelSession(c, &sc, workflows.CancelByMerchant)
}

func (s *Server) cancelSession(c *gin.Context, sc *models.Scope, source string) {
	id, err := pathID(c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	defer s.sessionMoved(id)
	var cs *models.CheckoutSession
	if sc != nil {
		cs, err = s.Store.CheckoutSessionOfMerchant(c.Request.Context(), *sc, id)
	} else {
		cs, err = s.Store.CheckoutSession(c.Request.Context(), id)
	}
	if err != nil {
		fail(c, err)
		return
	}
	cs, err = s.Checkout.Cancel(c.Request.Context(), cs, source)
	if err != nil {
		fail(c, err)
		return
	}
	respond(c, http.StatusOK, toSessionJSON(cs, false))
}

func (s *Server) merchantGetSession(c *gin.Context) {
	id, err := pathID(c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	cs, err := s.Store.CheckoutSessionOfMerchant(c.Request.Context(), principal(c).Scope(), id)
	if err != nil {
		fail(c, err)
		return
	}
	s.respondSession(c, cs, true)
}

type submitRequest struct {
	SessionID string `json:"sessionId"`
	TxHash    string `json:"txHash"`
}

func (s *Server) checkoutSubmit(c *gin.Context) {
	var req submitRequest
	if err := bindJSON(c, &req); err != nil {
		fail(c, err)
		return
	}
	var v checker
	id := v.uuidField("sessionId", req.SessionID, true)
	hash := strings.TrimSpace(req.TxHash)
	if hash == "" {
		v.Add("txHash", "is required")
	} else if len(hash) > 128 {
		v.Add("txHash", "must be at most 128 characters")
	}
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	defer s.sessionMoved(id)
	res, err := s.Checkout.Submit(c.Request.Context(), id, hash)
	if err != nil {
		fail(c, err)
		return
	}
	respond(c, http.StatusOK, gin.H{"status": res.Status, "txHash": res.TxHash, "sessionId": res.SessionID, "nextAction": res.NextAction})
}

type authorizationRequest struct {
	From        string `json:"from"`
	ValidAfter  string `json:"validAfter"`
	ValidBefore string `json:"validBefore"`
	Signature   string `json:"signature"`
}

// checkoutAuthorization takes the customer's signed EIP-3009 authorization
// of the session (the `authorization` object of the session, signed with
// eth_signTypedData_v4) and has the operator's relayer broadcast it, so the
// customer needs no gas; the transaction is attached to the session.
func (s *Server) checkoutAuthorization(c *gin.Context) {
	id, err := pathID(c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	defer s.sessionMoved(id)
	var req authorizationRequest
	if err := bindJSON(c, &req); err != nil {
		fail(c, err)
		return
	}
	var v checker
	from := v.addressOfFamily("from", chain.FamilyEVM, req.From)
	after := v.uint256("validAfter", req.ValidAfter, false)
	before := v.uint256("validBefore", req.ValidBefore, true)
	sig := v.hexBytes("signature", req.Signature, 65, 4096)
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	res, err := s.Checkout.Relay(c.Request.Context(), id, checkout.AuthorizationRequest{From: from, ValidAfter: after, ValidBefore: before, Signature: sig})
	if err != nil {
		fail(c, err)
		return
	}
	respond(c, http.StatusOK, gin.H{"status": res.Status, "txHash": res.TxHash, "sessionId": res.SessionID, "nextAction": res.NextAction})
}
