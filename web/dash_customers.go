package web

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/gin-gonic/gin"
)

// Customers (list with search, detail with their payments) and payment
// exceptions (money that reached a wallet without paying a session:
// resolve into a transaction, or dismiss).

func (p *Pages) customersPage(c *gin.Context) {
	if p.liveBlocked(c) {
		return
	}
	search := strings.TrimSpace(c.Query("q"))
	rows, pager, err := listPage[dCustomer](p, c, "/api/customers", url.Values{"q": {search}})
	status := http.StatusOK
	if err != nil {
		status = err.Status
	}
	p.renderDash(c, status, "dash_customers.html", map[string]any{"Title": "Customers", "Customers": rows, "Error": err,
		"Q": search, "Pager": pager})
}

func (p *Pages) customerPage(c *gin.Context) {
	var cu dCustomer
	if !p.item(c, "/api/customers/", &cu) {
		return
	}
	rows, pager, err := listPage[dPayment](p, c, "/api/payments", url.Values{"customerId": {cu.ID}})
	p.renderDash(c, http.StatusOK, "dash_customer.html", map[string]any{"Title": cu.Email, "C": cu, "Payments": rows, "Error": err,
		"Pager": pager})
}

var exceptionKinds = []option{{"underpaid", "Underpaid"}, {"wrong_payer", "From another wallet"}, {"contested", "Contested"},
	{"late", "Late"}, {"unmatched", "Unmatched"}, {"duplicate", "Paid twice"}}

func (p *Pages) exceptionsPage(c *gin.Context) {
	p.renderExceptions(c, http.StatusOK, "", nil)
}

// renderExceptions lists exceptions; failedID and actionErr are a failed
// resolve's or dismiss's, shown at that exception.
func (p *Pages) renderExceptions(c *gin.Context, status int, failedID string, actionErr *apiError) {
	if p.liveBlocked(c) {
		return
	}
	f := map[string]string{"status": c.Query("status"), "kind": c.Query("kind"), "network": c.Query("network")}
	if _, ok := c.GetQuery("status"); !ok {
		f["status"] = "open"
	}
	rows, pager, err := listPage[dException](p, c, "/api/payment-exceptions",
		url.Values{"status": {f["status"]}, "kind": {f["kind"]}, "network": {f["network"]}})
	if err != nil && status == http.StatusOK {
		status = err.Status
	}
	p.renderDash(c, status, "dash_exceptions.html", map[string]any{"Title": "Payment exceptions", "Exceptions": rows, "Error": err,
		"Filter": f, "Kinds": exceptionKinds, "Networks": modeNetworks(c.Param("mode")), "Pager": pager,
		"FailedID": failedID, "ActionError": actionErr})
}

func (p *Pages) exceptionResolveForm(c *gin.Context) {
	if p.liveBlocked(c) {
		return
	}
	id := c.Param("id")
	if !validID(id) {
		p.dashError(c, &apiError{Status: http.StatusNotFound, Message: "not found"})
		return
	}
	body := map[string]string{}
	for _, f := range []string{"sessionId", "subscriptionId", "customerEmail", "customerName", "note"} {
		if v := strings.TrimSpace(c.PostForm(f)); v != "" {
			body[f] = v
		}
	}
	if _, err := p.api(c, apiCall{method: http.MethodPost, path: "/api/payment-exceptions/" + id + "/resolve", query: modeQuery(c, nil),
		json: body}, nil); err != nil {
		if p.exceptionAlready(c, id, err, "resolved") {
			back(c, "/exceptions", "exception.resolved", "")
			return
		}
		p.renderExceptions(c, err.Status, id, err)
		return
	}
	back(c, "/exceptions", "exception.resolved", "")
}

// exceptionAlready reports whether an action's 409 is the form sent twice
// (a double click): the exception is already what the action makes it,
// so the notice of its success is shown, not the second answer's error.
func (p *Pages) exceptionAlready(c *gin.Context, id string, err *apiError, status string) bool {
	if err.Status != http.StatusConflict {
		return false
	}
	var e dException
	_, gerr := p.api(c, apiCall{method: http.MethodGet, path: "/api/payment-exceptions/" + id, query: modeQuery(c, nil)}, &e)
	return gerr == nil && e.Status == status
}

func (p *Pages) exceptionDismissForm(c *gin.Context) {
	if p.liveBlocked(c) {
		return
	}
	id := c.Param("id")
	if !validID(id) {
		p.dashError(c, &apiError{Status: http.StatusNotFound, Message: "not found"})
		return
	}
	if _, err := p.api(c, apiCall{method: http.MethodPost, path: "/api/payment-exceptions/" + id + "/dismiss", query: modeQuery(c, nil),
		json: map[string]string{"note": strings.TrimSpace(c.PostForm("note"))}}, nil); err != nil {
		if p.exceptionAlready(c, id, err, "dismissed") {
			back(c, "/exceptions", "exception.dismissed", "")
			return
		}
		p.renderExceptions(c, err.Status, id, err)
		return
	}
	back(c, "/exceptions", "exception.dismissed", "")
}
