package api

import (
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/money"
)

func (s *Server) registerSubscriptions(g *gin.RouterGroup) {
	s.Handle(g, http.MethodGet, "/subscriptions", AuthKey, s.listSubscriptions)
	s.Handle(g, http.MethodGet, "/subscriptions/:id", AuthKey, s.getSubscription)
	s.Handle(g, http.MethodPatch, "/subscriptions", AuthKey, s.patchSubscription)
}

type subscriptionJSON struct {
	ID                    string       `json:"id"`
	Status                string       `json:"status"`
	Network               string       `json:"network"`
	BillingModel          string       `json:"billingModel"`
	CustomerWalletAddress string       `json:"customerWalletAddress"`
	CustomerEmail         string       `json:"customerEmail"`
	CurrentPeriodStart    Time         `json:"currentPeriodStart"`
	CurrentPeriodEnd      Time         `json:"currentPeriodEnd"`
	CancelAtPeriodEnd     bool         `json:"cancelAtPeriodEnd"`
	ProductName           string       `json:"productName"`
	Amount                money.Amount `json:"amount"`
	BillingInterval       string       `json:"billingInterval"`
	Mode                  string       `json:"mode"`
	CreatedAt             Time         `json:"createdAt"`
	UpdatedAt             Time         `json:"updatedAt"`
}

func toSubscriptionJSON(s *models.Subscription) subscriptionJSON {
	return subscriptionJSON{ID: s.ID, Status: s.Status, Network: s.Network, BillingModel: s.BillingModel,
		CustomerWalletAddress: s.CustomerWalletAddress, CustomerEmail: s.CustomerEmail,
		CurrentPeriodStart: ts(s.CurrentPeriodStart), CurrentPeriodEnd: ts(s.CurrentPeriodEnd),
		CancelAtPeriodEnd: s.CancelAtPeriodEnd, ProductName: s.ProductName, Amount: s.Amount,
		BillingInterval: s.BillingInterval, Mode: string(s.Mode), CreatedAt: ts(s.CreatedAt), UpdatedAt: ts(s.UpdatedAt)}
}

var subscriptionStatuses = []string{models.SubTrialing, models.SubActive, models.SubPastDue, models.SubCanceled,
	models.SubPaused, models.SubRenewalPending}

// listSubscriptions lists the key's mode; `mode` may repeat the key's mode
// and a different one is refused rather than answered with nothing.
func (s *Server) listSubscriptions(c *gin.Context) {
	p := principal(c)
	var v checker
	page := v.page(c.Query)
	status := v.oneOf("status", c.Query("status"), false, subscriptionStatuses...)
	if m := v.oneOf("mode", c.Query("mode"), false, "live", "test"); m != "" && m != string(p.Mode) && !v.Has("mode") {
		v.Add("mode", "does not match the key's mode ("+string(p.Mode)+"); use a "+m+" key")
	}
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	rows, more, err := s.Store.Subscriptions(c.Request.Context(), p.Scope(), status, page)
	if err != nil {
		fail(c, err)
		return
	}
	out := make([]subscriptionJSON, 0, len(rows))
	for i := range rows {
		out = append(out, toSubscriptionJSON(&rows[i]))
	}
	respondList(c, out, more)
}

func (s *Server) getSubscription(c *gin.Context) {
	id, err := pathID(c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	sub, err := s.Store.Subscription(c.Request.Context(), principal(c).Scope(), id)
	if err != nil {
		fail(c, err)
		return
	}
	respond(c, http.StatusOK, toSubscriptionJSON(sub))
}

type patchSubscriptionRequest struct {
	SubscriptionID string `json:"subscriptionId"`
	Action         string `json:"action"`
}

func (s *Server) patchSubscription(c *gin.Context) {
	var req patchSubscriptionRequest
	if err := bindJSON(c, &req); err != nil {
		fail(c, err)
		return
	}
	var v checker
	id := v.uuidField("subscriptionId", req.SubscriptionID, true)
	v.oneOf("action", req.Action, true, models.ActionCancel, models.ActionPause, models.ActionResume)
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	sub, err := s.Store.ApplySubscriptionAction(c.Request.Context(), principal(c).Scope(), id, req.Action)
	if err != nil {
		fail(c, err)
		return
	}
	respond(c, http.StatusOK, gin.H{"subscriptionId": sub.ID, "status": sub.Status, "cancelAtPeriodEnd": sub.CancelAtPeriodEnd})
}
