package web

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/paygate/paygate/chain"
)

// pageSize is how many rows a dashboard list shows per page.
const pageSize = "50"

// modeNetworks are the networks of a mode, for filters and forms.
func modeNetworks(mode string) []option {
	names := []string{chain.NetworkBaseSepolia, chain.NetworkEthSepolia, chain.NetworkSolanaDevnet}
	if mode == "live" {
		names = []string{chain.NetworkBase, chain.NetworkEthereum, chain.NetworkPolygon, chain.NetworkSolana}
	}
	out := make([]option, 0, len(names))
	for _, n := range names {
		out = append(out, option{n, networkLabel(n)})
	}
	return out
}

// paymentStatusFilter is what the payments filter offers.
var paymentStatusFilter = []option{{"open", "In progress"}, {"complete", "Complete"}, {"failed", "Failed"},
	{"cancelled", "Cancelled"}, {"expired", "Expired"}}

// untilDay turns an inclusive date (YYYY-MM-DD) into the API's exclusive
// `until` (the next midnight, UTC); anything else is passed on as typed.
func untilDay(s string) string {
	if t, err := time.Parse("2006-01-02", s); err == nil {
		return t.Add(24 * time.Hour).Format(time.RFC3339)
	}
	return s
}

// pages builds the pager's links: the next page keeps the filters and
// continues after the last row; the first page drops the cursor. A list
// shown as a form's answer pages from its section's own page (the form's
// URL takes only POST).
func pages(c *gin.Context, hasMore bool, lastID string) map[string]string {
	q := c.Request.URL.Query()
	q.Del("done")
	path := c.Request.URL.Path
	if c.Request.Method != http.MethodGet {
		path = returnTo(c)
	}
	out := map[string]string{}
	if q.Get("after") != "" {
		q.Del("after")
		out["First"] = path + "?" + q.Encode()
	}
	if hasMore && lastID != "" {
		q.Set("after", lastID)
		out["Next"] = path + "?" + q.Encode()
	}
	return out
}

// item reads the mode's item at prefix and the page's :id into out, or
// answers the page itself (false): the live-mode notice, 404 for what is
// not an id, or the API's error.
func (p *Pages) item(c *gin.Context, prefix string, out any) bool {
	if p.liveBlocked(c) {
		return false
	}
	id := c.Param("id")
	if !validID(id) {
		p.dashError(c, &apiError{Status: http.StatusNotFound, Message: "not found"})
		return false
	}
	if _, err := p.api(c, apiCall{method: http.MethodGet, path: prefix + id, query: modeQuery(c, nil)}, out); err != nil {
		p.dashError(c, err)
		return false
	}
	return true
}

// listed is a row of a paged list: its id is the next page's cursor.
type listed interface{ listID() string }

// listPage reads one page of the mode's list at path, filtered by query
// (empty values left out), from the page's ?after= cursor; it answers the
// rows, their pager and the API's error.
func listPage[T listed](p *Pages, c *gin.Context, path string, query url.Values) ([]T, map[string]string, *apiError) {
	q := url.Values{"limit": {pageSize}, "starting_after": {c.Query("after")}}
	for k, v := range query {
		q[k] = v
	}
	var rows []T
	env, err := p.api(c, apiCall{method: http.MethodGet, path: path, query: modeQuery(c, q)}, &rows)
	last := ""
	if len(rows) > 0 {
		last = rows[len(rows)-1].listID()
	}
	return rows, pages(c, env != nil && env.HasMore, last), err
}

func (p *Pages) paymentsPage(c *gin.Context) {
	if p.liveBlocked(c) {
		return
	}
	f := map[string]string{}
	for _, k := range []string{"status", "network", "link", "since", "until", "q"} {
		f[k] = strings.TrimSpace(c.Query(k))
	}
	q := url.Values{"status": {f["status"]}, "network": {f["network"]}, "paymentLinkId": {f["link"]},
		"since": {f["since"]}, "q": {f["q"]}}
	if f["until"] != "" {
		q.Set("until", untilDay(f["until"]))
	}
	rows, pager, apiErr := listPage[dPayment](p, c, "/api/payments", q)
	status := http.StatusOK
	if apiErr != nil {
		status = apiErr.Status
	}
	var links []dLink
	_, _ = p.api(c, apiCall{method: http.MethodGet, path: "/api/payment-links", query: modeQuery(c, url.Values{"limit": {"100"}})}, &links)
	data := map[string]any{"Title": "Payments", "Payments": rows, "Filter": f, "Error": apiErr, "Links": links,
		"Networks": modeNetworks(c.Param("mode")), "Statuses": paymentStatusFilter,
		"Filtered": f["status"]+f["network"]+f["link"]+f["since"]+f["until"]+f["q"] != "", "Pager": pager}
	p.renderDash(c, status, "dash_payments.html", data)
}

func (p *Pages) paymentPage(c *gin.Context) {
	p.renderPayment(c, http.StatusOK, nil)
}

// refundForm is the payment page's refund form as typed.
type refundForm struct {
	Amount, Reason, Destination, Idem string
	// Error is the API's refusal of the form; Failed names the refund
	// whose hash was refused; Top shows the error above the refunds (the
	// refund it names is no longer pending, so it has no hash form).
	Error  *apiError
	Failed string
	Top    bool
}

// renderPayment shows one payment: the session's timeline, the
// transaction, the customer and the webhook deliveries it caused, each
// with every attempt; problem is an action's error shown by the
// deliveries.
func (p *Pages) renderPayment(c *gin.Context, status int, problem *apiError) {
	p.renderPaymentWith(c, status, problem, refundForm{Idem: newIdempotencyKey()})
}

func (p *Pages) renderPaymentWith(c *gin.Context, status int, problem *apiError, rf refundForm) {
	if p.liveBlocked(c) {
		return
	}
	id := c.Param("id")
	if !validID(id) {
		p.dashError(c, &apiError{Status: http.StatusNotFound, Message: "not found"})
		return
	}
	d, err := p.payment(c, id)
	if err != nil {
		p.dashError(c, err)
		return
	}
	if d.Transaction != nil {
		if rf.Failed != "" {
			rf.Top = true
			for _, r := range d.Transaction.Refunds {
				if r.ID == rf.Failed && r.Status != "succeeded" {
					rf.Top = false // shown at the refund's own form
				}
			}
		}
	}
	m, _ := c.Get(merchantKey)
	merchant, _ := m.(dMerchant)
	data := map[string]any{"Title": "Payment", "P": d.Payment, "Session": d.Session, "Events": d.Events, "Tx": d.Transaction,
		"Problem": problem, "Confirmations": d.Confirmations, "Refund": rf, "RefundsOn": merchant.RefundsOn(c.Param("mode"))}
	if d.Payment.TxHash != nil {
		if n, ok := p.networks().Lookup(d.Payment.Network); ok {
			data["ExplorerURL"] = n.TxURL(*d.Payment.TxHash)
		}
	}
	// The link's page exists for the merchant's own links only (a hosted
	// checkout's single-use link is the checkout's): name it, and link it
	// where it has a page.
	if d.Payment.PaymentLinkID != nil {
		_, err := p.api(c, apiCall{method: http.MethodGet, path: "/api/payment-links/" + *d.Payment.PaymentLinkID, query: modeQuery(c, nil)}, nil)
		data["LinkPage"] = err == nil
	}
	if d.Transaction != nil && d.Transaction.CustomerID != nil {
		var cu dCustomer
		if _, err := p.api(c, apiCall{method: http.MethodGet, path: "/api/customers/" + *d.Transaction.CustomerID, query: modeQuery(c, nil)}, &cu); err == nil {
			data["Customer"] = cu
		}
	}
	if d.Payment.SessionID != nil {
		deliveries, err := p.deliveries(c, url.Values{"sessionId": {*d.Payment.SessionID}, "limit": {"100"}})
		data["Deliveries"], data["DeliveriesError"] = deliveries, err
	}
	p.renderDash(c, status, "dash_payment.html", data)
}

// deliveries reads the delivery log.
func (p *Pages) deliveries(c *gin.Context, q url.Values) ([]dDelivery, *apiError) {
	var rows []dDelivery
	_, err := p.api(c, apiCall{method: http.MethodGet, path: "/api/webhooks/deliveries", query: modeQuery(c, q)}, &rows)
	return rows, err
}

// paymentRetryForm resends one delivery of the payment.
func (p *Pages) paymentRetryForm(c *gin.Context) {
	if p.liveBlocked(c) {
		return
	}
	did := c.Param("did")
	if !validID(did) || !validID(c.Param("id")) {
		p.dashError(c, &apiError{Status: http.StatusNotFound, Message: "not found"})
		return
	}
	if _, err := p.api(c, apiCall{method: http.MethodPost, path: "/api/webhooks/deliveries/" + did + "/retry", query: modeQuery(c, nil)}, nil); err != nil {
		p.renderPayment(c, err.Status, err)
		return
	}
	back(c, "/payments/"+c.Param("id"), "delivery.retried", "deliveries")
}

// payment reads one payment, its transaction read from the transaction's
// own route, which carries its refunds and balances.
func (p *Pages) payment(c *gin.Context, id string) (*dPaymentDetail, *apiError) {
	var d dPaymentDetail
	if _, err := p.api(c, apiCall{method: http.MethodGet, path: "/api/payments/" + id, query: modeQuery(c, nil)}, &d); err != nil {
		return nil, err
	}
	if d.Transaction != nil {
		var full dTransaction
		if _, err := p.api(c, apiCall{method: http.MethodGet, path: "/api/transactions/" + d.Transaction.ID, query: modeQuery(c, nil)}, &full); err != nil {
			return nil, err
		}
		d.Transaction = &full
	}
	return &d, nil
}

// paymentRefundForm creates a refund of the payment's transaction (the
// dashboard's refund route: initiatedBy merchant). An empty amount
// refunds what is left; an empty destination is the payer's wallet.
func (p *Pages) paymentRefundForm(c *gin.Context) {
	if p.liveBlocked(c) {
		return
	}
	id := c.Param("id")
	if !validID(id) {
		p.dashError(c, &apiError{Status: http.StatusNotFound, Message: "not found"})
		return
	}
	f := refundForm{Amount: strings.TrimSpace(c.PostForm("amount")), Reason: strings.TrimSpace(c.PostForm("reason")),
		Destination: strings.TrimSpace(c.PostForm("destinationWallet")), Idem: c.PostForm("idem")}
	var d dPaymentDetail
	if _, err := p.api(c, apiCall{method: http.MethodGet, path: "/api/payments/" + id, query: modeQuery(c, nil)}, &d); err != nil {
		p.dashError(c, err)
		return
	}
	if d.Transaction == nil {
		p.dashError(c, &apiError{Status: http.StatusConflict, Message: "this payment has no transaction to refund"})
		return
	}
	body := map[string]any{"transactionId": d.Transaction.ID}
	if f.Amount != "" {
		body["amount"] = f.Amount
	}
	if f.Reason != "" {
		body["reason"] = f.Reason
	}
	if f.Destination != "" {
		body["destinationWallet"] = f.Destination
	}
	var r dRefund
	if _, err := p.api(c, apiCall{method: http.MethodPost, path: "/api/v1/refunds", query: modeQuery(c, nil), json: body,
		idempotency: f.Idem}, &r); err != nil {
		renewKeyOnReuse(err, &f.Idem)
		f.Error = err
		p.renderPaymentWith(c, err.Status, nil, f)
		return
	}
	back(c, "/payments/"+id, "refund.created", "refund-"+r.ID)
}

// paymentRefundSubmitForm attaches the hash of the transfer the merchant
// sent to one of the payment's refunds: a pending one's first, or one that
// replaced a submitted or watched refund's (a speed-up).
func (p *Pages) paymentRefundSubmitForm(c *gin.Context) {
	if p.liveBlocked(c) {
		return
	}
	id, rid := c.Param("id"), c.Param("rid")
	if !validID(id) || !validID(rid) {
		p.dashError(c, &apiError{Status: http.StatusNotFound, Message: "not found"})
		return
	}
	// The refund must be one of this payment's (the API keeps it to the
	// merchant; this keeps the answer on the right page).
	d, err := p.payment(c, id)
	if err != nil {
		p.dashError(c, err)
		return
	}
	if d.Transaction == nil || !slices.ContainsFunc(d.Transaction.Refunds, func(r dRefund) bool { return r.ID == rid }) {
		p.dashError(c, &apiError{Status: http.StatusNotFound, Message: "not found"})
		return
	}
	hash := strings.TrimSpace(c.PostForm("txHash"))
	var got dRefund
	if _, err := p.api(c, apiCall{method: http.MethodPost, path: "/api/v1/refunds/" + rid + "/submit", query: modeQuery(c, nil),
		json: map[string]string{"txHash": hash}}, &got); err != nil {
		p.renderPaymentWith(c, err.Status, nil, refundForm{Idem: newIdempotencyKey(), Error: err, Failed: rid})
		return
	}
	done := "refund.submitted"
	if got.Status == "succeeded" {
		done = "refund.recorded" // an expired refund's transfer, sent late, verified
	}
	back(c, "/payments/"+id, done, "refund-"+rid)
}

// networks is the chain registry (explorer links).
func (p *Pages) networks() *chain.Registry {
	if p.Checkout != nil && p.Checkout.Networks != nil {
		return p.Checkout.Networks
	}
	return chain.DefaultRegistry()
}
