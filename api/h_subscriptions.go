package api

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/paygate/paygate/billing"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/money"
	"github.com/paygate/paygate/subscription"
	"github.com/paygate/paygate/workflows"
)

func (s *Server) registerSubscriptions(g *gin.RouterGroup) {
	s.Handle(g, http.MethodPost, "/subscriptions", AuthKey, s.createSubscription)
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
	// Beyond SPEC.md's fields: what a merchant needs to follow the billing.
	CustomerID            *string `json:"customerId"`
	IntervalCount         int     `json:"intervalCount"`
	TrialEnd              *Time   `json:"trialEnd"`
	MerchantWalletAddress string  `json:"merchantWalletAddress"`
	PausedAt              *Time   `json:"pausedAt"`
	CanceledAt            *Time   `json:"canceledAt"`
	CancelReason          *string `json:"cancelReason"`
	LatestSessionID       *string `json:"latestCheckoutSessionId"`
	// BillingError says why the subscription cannot be billed now (its
	// workflow holds the next invoice and tries again hourly); null when
	// nothing stands in the way.
	BillingError *string `json:"billingError"`
}

func toSubscriptionJSON(s *models.Subscription) subscriptionJSON {
	out := subscriptionJSON{ID: s.ID, Status: s.Status, Network: s.Network, BillingModel: s.BillingModel,
		CustomerWalletAddress: s.CustomerWalletAddress, CustomerEmail: s.CustomerEmail,
		CurrentPeriodStart: ts(s.CurrentPeriodStart), CurrentPeriodEnd: ts(s.CurrentPeriodEnd),
		CancelAtPeriodEnd: s.CancelAtPeriodEnd, ProductName: s.ProductName, Amount: s.Amount,
		BillingInterval: s.BillingInterval, Mode: string(s.Mode), CreatedAt: ts(s.CreatedAt), UpdatedAt: ts(s.UpdatedAt),
		CustomerID: s.CustomerID, IntervalCount: max(s.IntervalCount, 1), TrialEnd: tsPtr(s.TrialEnd),
		MerchantWalletAddress: s.MerchantWalletAddress, PausedAt: tsPtr(s.PausedAt), CanceledAt: tsPtr(s.CanceledAt),
		LatestSessionID: s.LatestSessionID}
	if s.CancelReason != "" {
		out.CancelReason = &s.CancelReason
	}
	if s.BillingError != "" {
		out.BillingError = &s.BillingError
	}
	return out
}

var subscriptionStatuses = []string{models.SubTrialing, models.SubActive, models.SubPastDue, models.SubCanceled,
	models.SubPaused, models.SubRenewalPending}

// MaxTrialDays bounds trialDays (two years).
const MaxTrialDays = 730

type createSubscriptionRequest struct {
	CustomerID            string          `json:"customerId"`
	CustomerEmail         string          `json:"customerEmail"`
	CustomerWalletAddress string          `json:"customerWalletAddress"`
	ProductID             string          `json:"productId"`
	ProductName           string          `json:"productName"`
	Amount                json.RawMessage `json:"amount"`
	BillingInterval       string          `json:"billingInterval"`
	IntervalCount         *int            `json:"intervalCount"`
	TrialDays             *int            `json:"trialDays"`
	Network               string          `json:"network"`
	BillingModel          string          `json:"billingModel"`
	MerchantWalletAddress string          `json:"merchantWalletAddress"`
}

// createSubscription creates a subscription and starts its workflow; the
// workflow then emits subscription.created (and, without a trial, the first
// invoice's subscription.renewal_due).
func (s *Server) createSubscription(c *gin.Context) {
	var req createSubscriptionRequest
	if err := bindJSON(c, &req); err != nil {
		fail(c, err)
		return
	}
	p := principal(c)
	var v checker
	r := subscription.CreateRequest{Scope: p.Scope()}
	switch {
	case req.CustomerID != "" && req.CustomerEmail != "":
		v.Add("customerId", "give customerId or customerEmail, not both")
	case req.CustomerID != "":
		r.CustomerID = v.uuidField("customerId", req.CustomerID, true)
	case req.CustomerEmail != "":
		r.CustomerEmail = v.email("customerEmail", req.CustomerEmail, true)
	default:
		v.Add("customerId", "customerId or customerEmail is required")
	}
	if req.ProductID != "" {
		// A catalog product gives the name and the price of each period.
		pid := v.uuidField("productId", req.ProductID, true)
		switch prod, err := s.Store.ProductOf(c.Request.Context(), p.Scope(), pid); {
		case v.Has("productId"):
		case err != nil:
			v.Add("productId", "no such product")
		case !prod.Active:
			v.Add("productId", "the product is not active")
		case req.ProductName != "" || len(req.Amount) > 0:
			v.Add("productId", "give a product or an amount and productName, not both")
		default:
			r.ProductName, r.Amount = prod.Name, prod.Price
		}
	} else {
		r.ProductName = v.text("productName", req.ProductName, true, 200)
		r.Amount = v.amount("amount", req.Amount, true, 2)
	}
	r.BillingInterval = billing.Interval(v.oneOf("billingInterval", req.BillingInterval, true, billing.Intervals...))
	r.IntervalCount = 1
	if req.IntervalCount != nil {
		r.IntervalCount = *req.IntervalCount
		if err := billing.CheckCount(r.BillingInterval, r.IntervalCount); err != nil && !v.Has("billingInterval") {
			v.Add("intervalCount", err.Error())
		}
	}
	if req.TrialDays != nil {
		r.TrialDays = *req.TrialDays
		if r.TrialDays < 0 || r.TrialDays > MaxTrialDays {
			v.Add("trialDays", "must be between 0 and 730")
		}
	}
	r.Network = v.network("network", req.Network, p.Mode)
	if req.BillingModel == "" {
		req.BillingModel = models.BillingPush
	}
	if req.BillingModel == "pull" {
		v.Add("billingModel", "pull payments are not available yet (use push)")
	} else {
		r.BillingModel = v.oneOf("billingModel", req.BillingModel, true, models.BillingPush)
	}
	if !v.Has("network") {
		if req.CustomerWalletAddress != "" {
			r.CustomerWalletAddress = v.address("customerWalletAddress", r.Network, req.CustomerWalletAddress)
		}
		if req.MerchantWalletAddress != "" {
			r.MerchantWalletAddress = v.address("merchantWalletAddress", r.Network, req.MerchantWalletAddress)
		}
	}
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	if s.Subscriptions == nil {
		fail(c, errors.New("api: subscriptions are not configured"))
		return
	}
	sub, err := s.Subscriptions.Create(c.Request.Context(), r)
	if err != nil {
		fail(c, err)
		return
	}
	respond(c, http.StatusCreated, toSubscriptionJSON(sub))
}

// listSubscriptions lists the key's mode; `mode` may repeat the key's mode
// and a different one is refused rather than answered with nothing.
func (s *Server) listSubscriptions(c *gin.Context) {
	p := principal(c)
	var v checker
	page := v.page(c.Query)
	status := v.oneOf("status", c.Query("status"), false, subscriptionStatuses...)
	if m := v.oneOf("mode", c.Query("mode"), false, "live", "test"); m != "" && m != string(p.Mode) && !v.Has("mode") {
		v.Add("mode", "does not match the key's mode ("+string(p.Mode)+"): use a "+m+" key")
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

// patchSubscription runs an action as an update of the subscription's
// workflow: the answer is what the workflow decided, written to the read
// model before it answered.
func (s *Server) patchSubscription(c *gin.Context) {
	var req patchSubscriptionRequest
	if err := bindJSON(c, &req); err != nil {
		fail(c, err)
		return
	}
	var v checker
	id := v.uuidField("subscriptionId", req.SubscriptionID, true)
	v.oneOf("action", req.Action, true, workflows.SubscriptionActions...)
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	if s.Subscriptions == nil {
		fail(c, errors.New("api: subscriptions are not configured"))
		return
	}
	st, err := s.Subscriptions.Act(c.Request.Context(), principal(c).Scope(), id, req.Action)
	if err != nil {
		fail(c, err)
		return
	}
	respond(c, http.StatusOK, gin.H{"subscriptionId": st.SubscriptionID, "status": st.Status, "cancelAtPeriodEnd": st.CancelAtPeriodEnd})
}
