package web

import (
	"net/http"
	"net/url"
	"slices"

	"github.com/gin-gonic/gin"
)

// Subscriptions: the list with a status filter, and a subscription's page
// with its billing and the actions of PATCH /api/subscriptions (cancel at
// the period's end, cancel now, pause, resume), all through the API.

// subscriptionStatuses are the list's filter, in the order of a life.
var subscriptionStatuses = []option{{"trialing", "Trialing"}, {"active", "Active"}, {"renewal_pending", "Renewal due"},
	{"past_due", "Past due"}, {"paused", "Paused"}, {"canceled", "Canceled"}}

// subscriptionActions are the actions the page offers, with their notices.
var subscriptionActions = []string{"cancel", "cancel_now", "pause", "resume"}

func (p *Pages) subscriptionsPage(c *gin.Context) {
	if p.liveBlocked(c) {
		return
	}
	status := c.Query("status")
	rows, pager, err := listPage[dSubscription](p, c, "/api/subscriptions", url.Values{"status": {status}})
	code := http.StatusOK
	if err != nil {
		code = err.Status
	}
	p.renderDash(c, code, "dash_subscriptions.html", map[string]any{"Title": "Subscriptions", "Subscriptions": rows, "Error": err,
		"Status": status, "Statuses": subscriptionStatuses, "Pager": pager})
}

func (p *Pages) subscriptionPage(c *gin.Context) {
	p.renderSubscription(c, http.StatusOK, nil)
}

// renderSubscription shows a subscription; actionErr is a failed action's,
// shown above the actions.
func (p *Pages) renderSubscription(c *gin.Context, status int, actionErr *apiError) {
	var sub dSubscription
	if !p.item(c, "/api/subscriptions/", &sub) {
		return
	}
	p.renderDash(c, status, "dash_subscription.html", map[string]any{"Title": sub.ProductName, "S": sub, "ActionError": actionErr})
}

func (p *Pages) subscriptionActionForm(c *gin.Context) {
	if p.liveBlocked(c) {
		return
	}
	id, action := c.Param("id"), c.PostForm("action")
	if !validID(id) {
		p.dashError(c, &apiError{Status: http.StatusNotFound, Message: "not found"})
		return
	}
	if !slices.Contains(subscriptionActions, action) {
		p.renderSubscription(c, http.StatusBadRequest, &apiError{Status: http.StatusBadRequest, Message: "action: must be one of cancel, cancel_now, pause, resume"})
		return
	}
	var got dSubscription // the answer: status and cancelAtPeriodEnd
	if _, err := p.api(c, apiCall{method: http.MethodPatch, path: "/api/subscriptions", query: modeQuery(c, nil),
		json: map[string]string{"subscriptionId": id, "action": action}}, &got); err != nil {
		p.renderSubscription(c, err.Status, err)
		return
	}
	done := "subscription." + action
	if action == "cancel" {
		// What the workflow did: a renewal due ends it now, unless a
		// payment of it is being confirmed (then its verdict decides).
		switch {
		case got.Status == "canceled":
			done = "subscription.cancel_now"
		case got.InvoiceOpen():
			done = "subscription.cancel_pending"
		}
	}
	back(c, "/subscriptions/"+id, done, "")
}
