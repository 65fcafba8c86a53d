package api

import (
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/money"
)

// Payments: checkout sessions and the transactions recorded without one,
// in one list, newest first (the dashboard's payments page; an integration
// may use it too). A session's transaction is shown with its session.
func (s *Server) registerPayments(g *gin.RouterGroup) {
	s.Handle(g, http.MethodGet, "/payments", AuthKey, s.listPayments)
	s.Handle(g, http.MethodGet, "/payments/:id", AuthKey, s.getPayment)
}

// paymentStatuses are the values of the payments list's status filter.
var paymentStatuses = []string{models.PaymentOpen, models.StatusCreated, models.StatusWalletConnecting, models.StatusWalletReady,
	models.StatusBroadcast, models.StatusConfirming, models.StatusComplete, models.StatusFailed, models.StatusCancelled, models.StatusExpired}

// paymentJSON is one payment: a checkout session (kind checkout) or a
// transaction without a session (kind record).
type paymentJSON struct {
	ID              string       `json:"id"`
	Kind            string       `json:"kind"`
	Status          string       `json:"status"`
	Amount          money.Amount `json:"amount"`
	Token           string       `json:"token"`
	Network         string       `json:"network"`
	PaymentLinkID   *string      `json:"paymentLinkId"`
	PaymentLinkName string       `json:"paymentLinkName"`
	TxHash          *string      `json:"txHash"`
	WalletAddress   string       `json:"walletAddress"`
	CustomerEmail   string       `json:"customerEmail"`
	CustomerName    string       `json:"customerName"`
	SessionID       *string      `json:"sessionId"`
	TransactionID   *string      `json:"transactionId"`
	FailureReason   string       `json:"failureReason,omitempty"`
	// Verification is a record's: pending until the chain bears it out.
	Verification string `json:"verification,omitempty"`
	CreatedAt    Time   `json:"createdAt"`
}

func toPaymentJSON(p *models.Payment) paymentJSON {
	return paymentJSON{ID: p.ID, Kind: p.Kind, Status: p.Status, Amount: p.Amount, Token: p.Token, Network: p.Network,
		PaymentLinkID: p.PaymentLinkID, PaymentLinkName: p.PaymentLinkName, TxHash: p.TxHash, WalletAddress: p.WalletAddress,
		CustomerEmail: p.CustomerEmail, CustomerName: p.CustomerName, SessionID: p.SessionID, TransactionID: p.TransactionID,
		FailureReason: p.FailureReason, Verification: p.Verification, CreatedAt: ts(p.CreatedAt)}
}

// listPayments is GET /api/payments: filters status (open, or a session
// status; complete includes records, failed the records the chain
// refuted), network, paymentLinkId, since, until
// q (part of a transaction hash, payer wallet or customer e-mail),
// customerEmail and customerId (a customer's payments, whatever e-mail each
// was paid under, and the sessions opened under its current one that no
// other customer paid);
// limit and starting_after page through both kinds at once.
func (s *Server) listPayments(c *gin.Context) {
	p := principal(c)
	var v checker
	page := v.page(c.Query)
	f := models.PaymentFilter{
		Status:        v.oneOf("status", c.Query("status"), false, paymentStatuses...),
		PaymentLinkID: v.uuidField("paymentLinkId", c.Query("paymentLinkId"), false),
		Since:         v.timeParam("since", c.Query("since")),
		Until:         v.timeParam("until", c.Query("until")),
		Search:        v.text("q", c.Query("q"), false, 200),
	}
	if e := c.Query("customerEmail"); e != "" {
		f.CustomerEmail = v.email("customerEmail", e, false)
	}
	f.CustomerID = v.uuidField("customerId", c.Query("customerId"), false)
	if n := c.Query("network"); n != "" {
		f.Network = v.network("network", n, p.Mode)
	}
	if f.Since != nil && f.Until != nil && !f.Until.After(*f.Since) {
		v.Add("until", "must be after since")
	}
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	rows, more, err := s.Store.Payments(c.Request.Context(), p.Scope(), f, page)
	if err != nil {
		fail(c, err)
		return
	}
	out := make([]paymentJSON, 0, len(rows))
	for i := range rows {
		out = append(out, toPaymentJSON(&rows[i]))
	}
	respondList(c, out, more)
}

// paymentDetailJSON is one payment with its session (and history) and its
// transaction, each null when there is none.
type paymentDetailJSON struct {
	Payment     paymentJSON      `json:"payment"`
	Session     *sessionJSON     `json:"session"`
	Events      []historyJSON    `json:"events"`
	Transaction *transactionJSON `json:"transaction"`
	// Confirmations is how deep a confirming session's transfer is, from
	// its workflow (absent otherwise).
	Confirmations *confirmationsJSON `json:"confirmations,omitempty"`
}

type confirmationsJSON struct {
	Count    uint64 `json:"count"`
	Required uint64 `json:"required"`
}

// getPayment is GET /api/payments/{id}: id is a session's or a
// transaction's (a session's transaction answers its session's payment).
func (s *Server) getPayment(c *gin.Context) {
	id, err := pathID(c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	d, err := s.Store.PaymentOf(c.Request.Context(), principal(c).Scope(), id)
	if err != nil {
		fail(c, err)
		return
	}
	out := paymentDetailJSON{Payment: toPaymentJSON(&d.Payment), Events: make([]historyJSON, 0, len(d.History))}
	if d.Session != nil {
		sj := toSessionJSON(d.Session, true)
		out.Session = &sj
		if d.Session.Status == models.StatusConfirming && s.Checkout != nil {
			if have, need, ok := s.Checkout.Confirmations(c.Request.Context(), d.Session.ID); ok {
				out.Confirmations = &confirmationsJSON{Count: have, Required: need}
			}
		}
	}
	for _, e := range d.History {
		out.Events = append(out.Events, historyJSON{ID: e.ID, SessionID: e.SessionID, Status: e.Status, Source: e.Source, Chain: e.Chain, CreatedAt: ts(e.CreatedAt)})
	}
	if d.Transaction != nil {
		tj := toTransactionJSON(d.Transaction)
		out.Transaction = &tj
	}
	respond(c, http.StatusOK, out)
}
