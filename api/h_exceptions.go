package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/money"
)

// EventDispatcher starts the delivery workflows of webhook deliveries.
type EventDispatcher interface {
	Dispatch(ctx context.Context, deliveryIDs []string) error
}

// Payment exceptions: money that reached a merchant wallet without paying
// a session (underpaid, from another wallet without proof, contested,
// late, unmatched). The merchant lists them and resolves each one into a
// transaction attached to a session or a customer, or dismisses it.
func (s *Server) registerExceptions(g *gin.RouterGroup) {
	s.Handle(g, http.MethodGet, "/payment-exceptions", AuthKey, s.listExceptions)
	s.Handle(g, http.MethodGet, "/payment-exceptions/:id", AuthKey, s.getException)
	s.Handle(g, http.MethodPost, "/payment-exceptions/:id/resolve", AuthKey, s.resolveException)
	s.Handle(g, http.MethodPost, "/payment-exceptions/:id/dismiss", AuthKey, s.dismissException)
}

type exceptionJSON struct {
	ID                    string       `json:"id"`
	Kind                  string       `json:"kind"`
	Status                string       `json:"status"`
	Network               string       `json:"network"`
	TxHash                string       `json:"txHash"`
	Amount                money.Amount `json:"amount"`
	ExpectedAmount        money.Amount `json:"expectedAmount"`
	PayerAddress          string       `json:"payerAddress"`
	MerchantWalletAddress string       `json:"merchantWalletAddress"`
	SessionIDs            []string     `json:"sessionIds"`
	TransactionID         *string      `json:"transactionId"`
	// SubscriptionID: the subscription whose open invoice it paid.
	SubscriptionID *string `json:"subscriptionId"`
	Message        string  `json:"message"`
	Note           string  `json:"note"`
	ResolvedAt     *Time   `json:"resolvedAt"`
	CreatedAt      Time    `json:"createdAt"`
	UpdatedAt      Time    `json:"updatedAt"`
}

func toExceptionJSON(e *models.PaymentException) exceptionJSON {
	out := exceptionJSON{ID: e.ID, Kind: e.Kind, Status: e.Status, Network: e.Network, TxHash: e.TxHash, Amount: e.Amount,
		ExpectedAmount: e.ExpectedAmount, PayerAddress: e.PayerAddress, MerchantWalletAddress: e.MerchantWalletAddress,
		SessionIDs: append([]string{}, e.SessionIDs...), TransactionID: e.TransactionID, SubscriptionID: e.SubscriptionID, Message: e.Message, Note: e.Note,
		CreatedAt: ts(e.CreatedAt), UpdatedAt: ts(e.UpdatedAt)}
	if e.ResolvedAt != nil {
		t := ts(*e.ResolvedAt)
		out.ResolvedAt = &t
	}
	return out
}

func (s *Server) listExceptions(c *gin.Context) {
	p := principal(c)
	var v checker
	page := v.page(c.Query)
	f := models.ExceptionFilter{
		Status: v.oneOf("status", c.Query("status"), false, models.ExceptionOpen, models.ExceptionResolved, models.ExceptionDismissed),
		Kind: v.oneOf("kind", c.Query("kind"), false, models.ExceptionUnderpaid, models.ExceptionWrongPayer, models.ExceptionContested,
			models.ExceptionLate, models.ExceptionUnmatched, models.ExceptionDuplicate),
	}
	if n := c.Query("network"); n != "" {
		f.Network = v.network("network", n, p.Mode)
	}
	if h := c.Query("txHash"); h != "" {
		if f.Network != "" && !v.Has("network") {
			f.TxHash = v.txHash("txHash", f.Network, h)
		} else {
			f.TxHash = v.anyTxHash("txHash", h)
		}
	}
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	rows, more, err := s.Store.PaymentExceptions(c.Request.Context(), p.Scope(), f, page)
	if err != nil {
		fail(c, err)
		return
	}
	out := make([]exceptionJSON, 0, len(rows))
	for i := range rows {
		out = append(out, toExceptionJSON(&rows[i]))
	}
	respondList(c, out, more)
}

func (s *Server) getException(c *gin.Context) {
	id, err := pathID(c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	e, err := s.Store.PaymentExceptionOf(c.Request.Context(), principal(c).Scope(), id)
	if err != nil {
		fail(c, err)
		return
	}
	respond(c, http.StatusOK, toExceptionJSON(e))
}

type resolveExceptionRequest struct {
	SessionID      string `json:"sessionId"`
	SubscriptionID string `json:"subscriptionId"`
	CustomerEmail  string `json:"customerEmail"`
	CustomerName   string `json:"customerName"`
	Note           string `json:"note"`
}

// resolveException records the exception's transfer as a transaction of
// the merchant, attached to a session (which must not have one) or to a
// customer, and emits payment.completed for it; or, given a
// subscriptionId, pays that subscription's open invoice with it (its
// workflow voids the invoice's session and renews the period).
func (s *Server) resolveException(c *gin.Context) {
	id, err := pathID(c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	var req resolveExceptionRequest
	if err := bindJSON(c, &req); err != nil {
		fail(c, err)
		return
	}
	var v checker
	r := models.Resolution{
		SessionID:      v.uuidField("sessionId", req.SessionID, false),
		SubscriptionID: v.uuidField("subscriptionId", req.SubscriptionID, false),
		CustomerEmail:  v.email("customerEmail", req.CustomerEmail, false),
		CustomerName:   v.text("customerName", req.CustomerName, false, 200),
		Note:           v.text("note", req.Note, false, 500),
	}
	if r.SubscriptionID != "" && (r.SessionID != "" || r.CustomerEmail != "" || r.CustomerName != "") {
		v.Add("subscriptionId", "pays the subscription's open invoice for its customer: give it without sessionId, customerEmail or customerName")
	}
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	if r.SubscriptionID != "" {
		s.resolveIntoInvoice(c, id, r)
		return
	}
	e, t, ids, err := s.Store.ResolveException(c.Request.Context(), principal(c).Scope(), id, r)
	if err != nil {
		fail(c, err)
		return
	}
	s.dispatch(c, ids)
	respond(c, http.StatusOK, gin.H{"exception": toExceptionJSON(e), "transaction": toTransactionJSON(t)})
}

// resolveIntoInvoice pays a subscription's open invoice with the
// exception's transfer. The read model answers what is plainly refused
// (the exception closed, no such subscription, another network) before the
// workflow is asked, and an exception already resolved into this
// subscription as it stands (a client retrying after a timeout).
func (s *Server) resolveIntoInvoice(c *gin.Context, id string, r models.Resolution) {
	ctx, sc := c.Request.Context(), principal(c).Scope()
	e, err := s.Store.PaymentExceptionOf(ctx, sc, id)
	if err != nil {
		fail(c, err)
		return
	}
	sub, err := s.Store.Subscription(ctx, sc, r.SubscriptionID)
	switch {
	case errors.Is(err, apperr.ErrNotFound):
		fail(c, apperr.Invalid("subscriptionId", "no such subscription"))
		return
	case err != nil:
		fail(c, err)
		return
	case e.Status == models.ExceptionResolved && e.SubscriptionID != nil && *e.SubscriptionID == sub.ID:
		s.answerResolvedInvoice(c, e, sub)
		return
	case e.Status != models.ExceptionOpen:
		fail(c, apperr.Conflict("the payment exception is already "+e.Status))
		return
	case e.Amount <= 0:
		fail(c, apperr.Invalid("id", "the payment exception has no amount to record"))
		return
	case sub.Network != e.Network:
		fail(c, apperr.Invalid("subscriptionId", "the subscription bills on "+sub.Network+", the transfer was on "+e.Network))
		return
	case s.Subscriptions == nil:
		fail(c, errors.New("api: subscriptions are not configured"))
		return
	}
	if _, err := s.Subscriptions.SettleFromException(ctx, sc, sub.ID, e.ID, r.Note); err != nil {
		fail(c, err)
		return
	}
	// The workflow wrote the read model before it answered.
	if e, err = s.Store.PaymentExceptionOf(ctx, sc, id); err != nil {
		fail(c, err)
		return
	}
	s.answerResolvedInvoice(c, e, sub)
}

// answerResolvedInvoice answers an exception resolved into sub's invoice:
// the exception, its transaction and the subscription as they stand.
func (s *Server) answerResolvedInvoice(c *gin.Context, e *models.PaymentException, sub *models.Subscription) {
	ctx, sc := c.Request.Context(), principal(c).Scope()
	if e.TransactionID == nil {
		fail(c, fmt.Errorf("api: exception %s paid subscription %s without a transaction", e.ID, sub.ID))
		return
	}
	t, err := s.Store.Transaction(ctx, sc, *e.TransactionID)
	if err == nil {
		sub, err = s.Store.Subscription(ctx, sc, sub.ID)
	}
	if err != nil {
		fail(c, err)
		return
	}
	respond(c, http.StatusOK, gin.H{"exception": toExceptionJSON(e), "transaction": toTransactionJSON(t), "subscription": toSubscriptionJSON(sub)})
}

type dismissExceptionRequest struct {
	Note string `json:"note"`
}

func (s *Server) dismissException(c *gin.Context) {
	id, err := pathID(c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	var req dismissExceptionRequest
	if err := bindJSON(c, &req); err != nil {
		fail(c, err)
		return
	}
	var v checker
	note := v.text("note", req.Note, false, 500)
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	e, err := s.Store.DismissException(c.Request.Context(), principal(c).Scope(), id, note)
	if err != nil {
		fail(c, err)
		return
	}
	respond(c, http.StatusOK, toExceptionJSON(e))
}

// dispatch starts the deliveries of events the request emitted. A failure
// is logged: the deliveries are stored and the event is listed either way.
func (s *Server) dispatch(c *gin.Context, ids []string) {
	if len(ids) == 0 || s.Dispatcher == nil {
		return
	}
	if err := s.Dispatcher.Dispatch(c.Request.Context(), ids); err != nil {
		s.Logger.WarnContext(c.Request.Context(), "deliveries not started", "err", err)
	}
}
