package api

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"
	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/money"
	"github.com/paygate/paygate/refund"
)

// Refunds (non-custodial: the merchant's wallet that received the payment
// sends the USDC back; the refund's workflow verifies that transfer).
// SPEC.md names the dashboard route POST /api/v1/refunds (SESSION, the
// merchant: initiatedBy merchant); its initiatedBy `api` names an API-key
// route too, so every refund route exists twice: under /api/v1 with a
// dashboard session (mode from `?mode=` or the body's `mode`, default test)
// and under /api with an API key (the key's mode).
func (s *Server) registerRefunds(g *gin.RouterGroup) {
	if s.Refunds == nil {
		return
	}
	s.Handle(g, http.MethodPost, "/v1/refunds", AuthSession, s.createRefund)
	s.Handle(g, http.MethodGet, "/v1/refunds", AuthSession, s.listRefunds)
	s.Handle(g, http.MethodGet, "/v1/refunds/:id", AuthSession, s.getRefund)
	s.Handle(g, http.MethodPost, "/v1/refunds/:id/submit", AuthSession, s.submitRefund)
	s.Handle(g, http.MethodPost, "/refunds", AuthKey, s.createRefund)
	s.Handle(g, http.MethodGet, "/refunds", AuthKey, s.listRefunds)
	s.Handle(g, http.MethodGet, "/refunds/:id", AuthKey, s.getRefund)
	s.Handle(g, http.MethodPost, "/refunds/:id/submit", AuthKey, s.submitRefund)
}

// refundJSON is a refund record: the payment.refunded fields plus its
// state, its wallets and what a wallet needs to pay it.
type refundJSON struct {
	ID                string       `json:"id"`
	TransactionID     string       `json:"transactionId"`
	Amount            money.Amount `json:"amount"`
	SubtotalAmount    money.Amount `json:"subtotalAmount"`
	TaxAmount         money.Amount `json:"taxAmount"`
	FeeReversed       money.Amount `json:"feeReversed"`
	Token             string       `json:"token"`
	Network           string       `json:"network"`
	DestinationWallet string       `json:"destinationWallet"`
	SourceWallet      string       `json:"sourceWallet"`
	Status            string       `json:"status"`
	TxHash            *string      `json:"txHash"`
	Reason            *string      `json:"reason"`
	InitiatedBy       string       `json:"initiatedBy"`
	FailureReason     *string      `json:"failureReason"`
	FailureMessage    *string      `json:"failureMessage"`
	// WatchedUntil, on a failed refund, is the end of the watch of a
	// transfer sent for it that may still land (and make it succeeded).
	WatchedUntil *Time `json:"watchedUntil"`
	// AmountHeld: the failed refund keeps its amount reserved while that
	// transfer is watched (models.Refund.AmountHeld).
	AmountHeld bool   `json:"amountHeld"`
	Mode       string `json:"mode"`
	// TokenAddress and AmountUnits tell the merchant's wallet what to send.
	TokenAddress string `json:"tokenAddress"`
	AmountUnits  string `json:"amountUnits"`
	ExpiresAt    Time   `json:"expiresAt"`
	SubmittedAt  *Time  `json:"submittedAt"`
	SucceededAt  *Time  `json:"succeededAt"`
	FailedAt     *Time  `json:"failedAt"`
	CreatedAt    Time   `json:"createdAt"`
	UpdatedAt    Time   `json:"updatedAt"`
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func (s *Server) refundOut(r *models.Refund) refundJSON {
	out := refundJSON{ID: r.ID, TransactionID: r.TransactionID, Amount: r.Amount, SubtotalAmount: r.SubtotalAmount,
		TaxAmount: r.TaxAmount, FeeReversed: r.FeeReversed, Token: r.Token, Network: r.Network,
		DestinationWallet: r.DestinationWallet, SourceWallet: r.SourceWallet, Status: r.Status, TxHash: r.TxHash,
		Reason: nullable(r.Reason), InitiatedBy: r.InitiatedBy, FailureReason: nullable(r.FailureReason),
		FailureMessage: nullable(r.FailureMessage), Mode: string(r.Mode), AmountUnits: fmtUnits(r.Amount),
		ExpiresAt: ts(r.ExpiresAt), SubmittedAt: tsPtr(r.SubmittedAt), SucceededAt: tsPtr(r.SucceededAt),
		FailedAt: tsPtr(r.FailedAt), CreatedAt: ts(r.CreatedAt), UpdatedAt: ts(r.UpdatedAt), WatchedUntil: tsPtr(r.WatchedUntil),
		AmountHeld: r.AmountHeld}
	if n, ok := s.Networks.Lookup(r.Network); ok {
		out.TokenAddress = n.USDC
	}
	return out
}

func fmtUnits(a money.Amount) string { return strconv.FormatInt(a.Units(), 10) }

// refundScope is the caller's merchant and mode: the key's mode, or on
// dashboard routes `?mode=` (default test), which a body's mode must match.
func refundScope(c *gin.Context, bodyMode string) (models.Scope, error) {
	p := principal(c)
	if p.SessionID == "" {
		return p.Scope(), nil
	}
	mode, err := dashboardMode(c)
	if err != nil {
		return models.Scope{}, err
	}
	switch {
	case bodyMode == "":
	case bodyMode != "test" && bodyMode != "live":
		return models.Scope{}, apperr.Invalid("mode", "must be test or live")
	case c.Query("mode") != "" && bodyMode != string(mode):
		return models.Scope{}, apperr.Invalid("mode", "the body's mode and the query's differ")
	default:
		mode = models.Mode(bodyMode)
	}
	return models.Scope{MerchantID: p.MerchantID, Mode: mode}, nil
}

type createRefundRequest struct {
	TransactionID     string          `json:"transactionId"`
	Amount            json.RawMessage `json:"amount"`
	Reason            string          `json:"reason"`
	DestinationWallet string          `json:"destinationWallet"`
	// Mode is taken on dashboard routes only (an API key has its own).
	Mode *string `json:"mode"`
}

// createRefund refunds (part of) a transaction: 201 with the refund, which
// is pending until the merchant's transfer is submitted and verified.
func (s *Server) createRefund(c *gin.Context) {
	var req createRefundRequest
	if err := bindJSON(c, &req); err != nil {
		fail(c, err)
		return
	}
	p := principal(c)
	var v checker
	if req.Mode != nil && p.SessionID == "" {
		v.Add("mode", "is not a known field (an API key's mode is the key's)")
	}
	txID := v.uuidField("transactionId", req.TransactionID, true)
	amount := v.amount("amount", req.Amount, false, money.Scale)
	reason := v.text("reason", req.Reason, false, 500)
	dest := v.text("destinationWallet", req.DestinationWallet, false, 128)
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	bodyMode := ""
	if req.Mode != nil {
		bodyMode = *req.Mode
	}
	sc, err := refundScope(c, bodyMode)
	if err != nil {
		fail(c, err)
		return
	}
	by := models.InitiatedByAPI
	if p.SessionID != "" {
		by = models.InitiatedByMerchant
	}
	r, err := s.Refunds.Create(c.Request.Context(), refund.CreateRequest{Scope: sc, TransactionID: txID, Amount: amount,
		Reason: reason, Destination: dest, InitiatedBy: by})
	if err != nil {
		fail(c, err)
		return
	}
	respond(c, http.StatusCreated, s.refundOut(r))
}

func (s *Server) listRefunds(c *gin.Context) {
	var v checker
	page := v.page(c.Query)
	f := models.RefundFilter{
		Status:        v.oneOf("status", c.Query("status"), false, models.RefundPending, models.RefundSubmitted, models.RefundSucceeded, models.RefundFailed),
		TransactionID: v.uuidField("transactionId", c.Query("transactionId"), false),
	}
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	sc, err := refundScope(c, "")
	if err != nil {
		fail(c, err)
		return
	}
	rows, more, err := s.Store.Refunds(c.Request.Context(), sc, f, page)
	if err != nil {
		fail(c, err)
		return
	}
	out := make([]refundJSON, 0, len(rows))
	for i := range rows {
		out = append(out, s.refundOut(&rows[i]))
	}
	respondList(c, out, more)
}

func (s *Server) getRefund(c *gin.Context) {
	id, err := pathID(c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	sc, err := refundScope(c, "")
	if err != nil {
		fail(c, err)
		return
	}
	r, err := s.Store.RefundOf(c.Request.Context(), sc, id)
	if err != nil {
		fail(c, err)
		return
	}
	respond(c, http.StatusOK, s.refundOut(r))
}

type submitRefundRequest struct {
	TxHash string `json:"txHash"`
}

// submitRefund attaches the merchant's transfer (its hash) to a pending
// refund: 200 with the refund, now submitted; the workflow verifies it.
func (s *Server) submitRefund(c *gin.Context) {
	id, err := pathID(c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	var req submitRefundRequest
	if err := bindJSON(c, &req); err != nil {
		fail(c, err)
		return
	}
	var v checker
	v.text("txHash", req.TxHash, true, 128)
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	sc, err := refundScope(c, "")
	if err != nil {
		fail(c, err)
		return
	}
	r, err := s.Refunds.Submit(c.Request.Context(), sc, id, req.TxHash)
	if err != nil {
		fail(c, err)
		return
	}
	respond(c, http.StatusOK, s.refundOut(r))
}

// refundsOf loads the refunds of the transactions, oldest first.
func (s *Server) refundsOf(ctx context.Context, txs ...*models.Transaction) (map[string][]refundJSON, error) {
	ids := make([]string, 0, len(txs))
	for _, t := range txs {
		ids = append(ids, t.ID)
	}
	rows, err := s.Store.RefundsOfTransactions(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := map[string][]refundJSON{}
	for id, rs := range rows {
		for i := range rs {
			out[id] = append(out[id], s.refundOut(&rs[i]))
		}
	}
	return out, nil
}
