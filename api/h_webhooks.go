package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/webhook"
)

// Webhook endpoint management (dashboard session), manual delivery retry and
// the events list (API key).
//
// Decisions where SPEC.md is silent (DESIGN.md §4 "Webhooks"):
//   - Endpoints belong to one mode. A live endpoint needs an approved KYB
//     application (403 otherwise), as a live key does, and is always held to
//     the strict URL policy (https, public addresses only), even in the
//     embedded profile whose test endpoints may use http:// to loopback.
//   - The whsec_ secret is shown by the create and rotate-secret answers
//     only. Rotation takes effect at the next attempt. It may keep the
//     replaced secret signing beside the new one for up to seven days
//     (previousSecretExpiresIn, seconds; none by default, as for a leaked
//     secret): every attempt then carries two v1 signatures, and a
//     receiver holding either secret verifies it, so the receiver's secret
//     can be changed without deliveries failing in between.
//   - At most MaxWebhookEndpoints endpoints per merchant and mode, and one
//     per URL (a second at the same URL, created or patched, is a 409:
//     its receiver would get every event twice under two delivery ids).
//   - A manual retry makes one immediate attempt of any delivery (pending,
//     delivered or failed) whose endpoint still exists and is enabled.

func (s *Server) registerWebhooks(g *gin.RouterGroup) {
	s.Handle(g, http.MethodPost, "/webhooks", AuthSession, s.createWebhook)
	s.Handle(g, http.MethodGet, "/webhooks", AuthSession, s.listWebhooks)
	s.Handle(g, http.MethodPatch, "/webhooks/:id", AuthSession, s.patchWebhook)
	s.Handle(g, http.MethodDelete, "/webhooks/:id", AuthSession, s.deleteWebhook)
	s.Handle(g, http.MethodPost, "/webhooks/:id/rotate-secret", AuthSession, s.rotateWebhookSecret)
	s.Handle(g, http.MethodPost, "/webhooks/deliveries/:id/retry", AuthSession, s.retryDelivery)
	s.Handle(g, http.MethodGet, "/webhooks/deliveries", AuthSession, s.listDeliveries)
	s.Handle(g, http.MethodPost, "/webhooks/:id/test", AuthSession, s.sendTestEvent)
	s.Handle(g, http.MethodGet, "/events", AuthKey, s.listEvents)
}

// DeliveryRetrier makes one immediate attempt of a delivery, whether its
// workflow is still running (a retry signal) or has closed (the workflow is
// started again with SignalWithStart). worker.Retrier implements it.
type DeliveryRetrier interface {
	RetryDelivery(ctx context.Context, d *models.WebhookDelivery) error
}

// WebhookEventTypes are the event names an endpoint may subscribe to and the
// events list may be filtered by: SPEC.md's event kinds and the names of its
// events query filter.
var WebhookEventTypes = []string{
	"checkout.completed", "checkout.failed", "checkout.cancelled", "checkout.expired",
	"payment.completed", "payment.failed", "payment.refunded", "payment.exception",
	"subscription.created", "subscription.updated", "subscription.renewed",
	"subscription.renewal_due", "subscription.past_due", "subscription.canceled",
}

// MaxWebhookEndpoints bounds the endpoints of one merchant in one mode.
const MaxWebhookEndpoints = 16

// RecentDeliveriesShown is how many deliveries GET /api/webhooks lists.
const RecentDeliveriesShown = 50

// webhookEndpointJSON is a webhook endpoint (SPEC.md fields plus mode);
// Secret is set only by the create and rotate-secret answers.
type webhookEndpointJSON struct {
	ID     string   `json:"id"`
	URL    string   `json:"url"`
	Events []string `json:"events"`
	Active bool     `json:"active"`
	Mode   string   `json:"mode"`
	Secret string   `json:"secret,omitempty"`
	// PreviousSecretExpiresAt: while a rotated secret still signs beside
	// the current one, when it stops.
	PreviousSecretExpiresAt *Time `json:"previousSecretExpiresAt,omitempty"`
	CreatedAt               Time  `json:"createdAt"`
}

func toWebhookEndpointJSON(ep *models.WebhookEndpoint, withSecret bool) webhookEndpointJSON {
	events := []string(ep.Events)
	if events == nil {
		events = []string{}
	}
	out := webhookEndpointJSON{ID: ep.ID, URL: ep.URL, Events: events, Active: ep.Active, Mode: string(ep.Mode), CreatedAt: ts(ep.CreatedAt)}
	if ep.PreviousSecretSigns(time.Now()) {
		out.PreviousSecretExpiresAt = tsPtr(ep.PreviousSecretUntil)
	}
	if withSecret {
		out.Secret = ep.Secret
	}
	return out
}

// deliveryJSON is a webhook delivery record. The events list carries every
// field; GET /api/webhooks's recentDeliveries leave out payload,
// responseStatus and lastAttemptAt (SPEC.md "Webhook delivery record").
type deliveryJSON struct {
	ID             string          `json:"id"`
	EndpointID     string          `json:"endpointId"`
	Event          string          `json:"event"`
	Payload        models.JSONText `json:"payload,omitempty"`
	Status         string          `json:"status"`
	Attempts       int             `json:"attempts"`
	ResponseStatus *optionalInt    `json:"responseStatus,omitempty"`
	LastAttemptAt  *optionalTime   `json:"lastAttemptAt,omitempty"`
	CreatedAt      Time            `json:"createdAt"`
}

// optionalInt and optionalTime print null for a missing value while the
// field itself is present (events list) or absent (recent deliveries).
type optionalInt struct{ v *int }

func (o optionalInt) MarshalJSON() ([]byte, error) {
	if o.v == nil {
		return []byte("null"), nil
	}
	return []byte(fmt.Sprint(*o.v)), nil
}

type optionalTime struct{ v *Time }

func (o optionalTime) MarshalJSON() ([]byte, error) {
	if o.v == nil {
		return []byte("null"), nil
	}
	return o.v.MarshalJSON()
}

func toDeliveryJSON(d *models.WebhookDelivery, full bool) deliveryJSON {
	out := deliveryJSON{ID: d.ID, EndpointID: d.EndpointID, Event: d.Event, Status: d.Status, Attempts: d.Attempts, CreatedAt: ts(d.CreatedAt)}
	if full {
		out.Payload = d.Payload
		if len(out.Payload) == 0 {
			out.Payload = models.JSONText("{}")
		}
		out.ResponseStatus = &optionalInt{v: d.ResponseStatus}
		out.LastAttemptAt = &optionalTime{v: tsPtr(d.LastAttemptAt)}
	}
	return out
}

// webhookURL validates an endpoint URL under the policy of the endpoint's
// mode: live endpoints never get the embedded loopback allowance.
func (s *Server) webhookURL(v *checker, raw string, mode models.Mode) string {
	raw = strings.TrimSpace(raw)
	p := s.WebhookPolicy
	if mode == models.ModeLive {
		p.AllowLoopbackHTTP = false
	}
	if err := webhook.ValidateEndpointURL(raw, p); err != nil {
		v.Add("url", err.Error())
	}
	return raw
}

// webhookEvents validates a subscription list: non-empty, SPEC.md event
// names only; duplicates are dropped, order kept.
func webhookEvents(v *checker, events []string) []string {
	if len(events) == 0 {
		v.Add("events", "must list at least one event")
		return nil
	}
	seen := map[string]bool{}
	out := make([]string, 0, len(events))
	for _, e := range events {
		if !isWebhookEvent(e) {
			v.Add("events", "unknown event "+quoted(e, 64)+": must be among "+strings.Join(WebhookEventTypes, ", "))
			return nil
		}
		if !seen[e] {
			seen[e] = true
			out = append(out, e)
		}
	}
	return out
}

func isWebhookEvent(e string) bool {
	for _, t := range WebhookEventTypes {
		if e == t {
			return true
		}
	}
	return false
}

type createWebhookRequest struct {
	URL    string   `json:"url"`
	Events []string `json:"events"`
	Mode   string   `json:"mode"`
}

// createWebhook registers an endpoint and answers 201 with its secret (the
// only time, besides rotate-secret, that the secret is shown).
func (s *Server) createWebhook(c *gin.Context) {
	var req createWebhookRequest
	if err := bindJSON(c, &req); err != nil {
		fail(c, err)
		return
	}
	var v checker
	mode := models.Mode(v.oneOf("mode", req.Mode, true, "test", "live"))
	ep := &models.WebhookEndpoint{Events: webhookEvents(&v, req.Events)}
	if !v.Has("mode") {
		ep.URL = s.webhookURL(&v, req.URL, mode)
	} else if strings.TrimSpace(req.URL) == "" {
		v.Add("url", "is required")
	}
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	ctx := c.Request.Context()
	p := principal(c)
	if mode == models.ModeLive {
		m, err := s.Store.Merchant(ctx, p.MerchantID)
		if err != nil {
			fail(c, err)
			return
		}
		if m.KYBStatus != models.KYBApproved {
			fail(c, apperr.WithHint(apperr.ErrForbidden, "live webhook endpoints require an approved KYB application",
				"register a test endpoint meanwhile (mode: test)"))
			return
		}
	}
	secret, err := webhook.NewSecret()
	if err != nil {
		fail(c, err)
		return
	}
	ep.MerchantID, ep.Mode, ep.Secret = p.MerchantID, mode, secret
	// The limit and the one endpoint per URL are checked with the insert.
	if err := s.Store.RegisterWebhookEndpoint(ctx, ep, MaxWebhookEndpoints); err != nil {
		fail(c, err)
		return
	}
	respond(c, http.StatusCreated, toWebhookEndpointJSON(ep, true))
}

// webhooksJSON is the answer of GET /api/webhooks.
type webhooksJSON struct {
	Endpoints        []webhookEndpointJSON `json:"endpoints"`
	RecentDeliveries []deliveryJSON        `json:"recentDeliveries"`
}

// listWebhooks answers the mode's endpoints (newest first, no secrets) and
// its RecentDeliveriesShown newest deliveries without payload.
func (s *Server) listWebhooks(c *gin.Context) {
	mode, err := dashboardMode(c)
	if err != nil {
		fail(c, err)
		return
	}
	ctx := c.Request.Context()
	sc := models.Scope{MerchantID: principal(c).MerchantID, Mode: mode}
	eps, err := s.Store.WebhookEndpoints(ctx, sc)
	if err != nil {
		fail(c, err)
		return
	}
	ds, _, err := s.Store.WebhookDeliveries(ctx, sc, models.DeliveryFilter{}, models.Page{Limit: RecentDeliveriesShown})
	if err != nil {
		fail(c, err)
		return
	}
	out := webhooksJSON{Endpoints: make([]webhookEndpointJSON, 0, len(eps)), RecentDeliveries: make([]deliveryJSON, 0, len(ds))}
	for i := range eps {
		out.Endpoints = append(out.Endpoints, toWebhookEndpointJSON(&eps[i], false))
	}
	for i := range ds {
		out.RecentDeliveries = append(out.RecentDeliveries, toDeliveryJSON(&ds[i], false))
	}
	respond(c, http.StatusOK, out)
}

type patchWebhookRequest struct {
	URL    *string   `json:"url"`
	Events *[]string `json:"events"`
	Active *bool     `json:"active"`
}

// patchWebhook changes the fields sent (url, events, active). Changes apply
// from the next attempt of every delivery, pending ones included; a disabled
// endpoint gets no new deliveries and its pending attempts fail.
func (s *Server) patchWebhook(c *gin.Context) {
	id, err := pathID(c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	var req patchWebhookRequest
	if err := bindJSON(c, &req); err != nil {
		fail(c, err)
		return
	}
	ctx := c.Request.Context()
	p := principal(c)
	ep, err := s.Store.WebhookEndpoint(ctx, p.MerchantID, id)
	if err == nil {
		err = inMode(c, ep.Mode)
	}
	if err != nil {
		fail(c, err)
		return
	}
	var v checker
	var u models.WebhookEndpointUpdate
	if req.URL == nil && req.Events == nil && req.Active == nil {
		v.Add("body", "must set at least one of url, events, active")
	}
	if req.URL != nil {
		url := s.webhookURL(&v, *req.URL, ep.Mode)
		u.URL = &url
	}
	if req.Events != nil {
		u.Events = webhookEvents(&v, *req.Events)
	}
	u.Active = req.Active
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	ep, err = s.Store.UpdateWebhookEndpoint(ctx, p.MerchantID, id, u)
	if err != nil {
		fail(c, err)
		return
	}
	respond(c, http.StatusOK, toWebhookEndpointJSON(ep, false))
}

// deleteWebhook removes an endpoint; it gets no new deliveries, its pending
// ones are marked failed (their workflows stop at their next attempt) and
// every delivery record is kept for GET /api/events.
func (s *Server) deleteWebhook(c *gin.Context) {
	id, err := pathID(c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	if err := s.endpointInMode(c, id); err != nil {
		fail(c, err)
		return
	}
	if err := s.Store.DeleteWebhookEndpoint(c.Request.Context(), principal(c).MerchantID, id); err != nil {
		fail(c, err)
		return
	}
	respondMessage(c, http.StatusOK, "webhook endpoint deleted")
}

type rotateSecretRequest struct {
	// PreviousSecretExpiresIn is how long, in seconds, the replaced secret
	// keeps signing beside the new one (0, the default, to 604800).
	PreviousSecretExpiresIn *int64 `json:"previousSecretExpiresIn"`
}

// rotateWebhookSecret replaces the endpoint's secret and shows the new one
// once. The next attempt of every delivery is signed with it, and with the
// replaced one too while the overlap asked for lasts. The body is optional.
func (s *Server) rotateWebhookSecret(c *gin.Context) {
	id, err := pathID(c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	var req rotateSecretRequest
	if err := bindOptionalJSON(c, &req); err != nil {
		fail(c, err)
		return
	}
	var overlap time.Duration
	if n := req.PreviousSecretExpiresIn; n != nil {
		maxSeconds := int64(models.MaxSecretOverlap / time.Second)
		if *n < 0 || *n > maxSeconds {
			fail(c, apperr.Invalid("previousSecretExpiresIn", fmt.Sprintf("must be from 0 to %d seconds (seven days)", maxSeconds)))
			return
		}
		overlap = time.Duration(*n) * time.Second
	}
	if err := s.endpointInMode(c, id); err != nil {
		fail(c, err)
		return
	}
	secret, err := webhook.NewSecret()
	if err != nil {
		fail(c, err)
		return
	}
	ep, err := s.Store.RotateWebhookSecret(c.Request.Context(), principal(c).MerchantID, id, secret, overlap)
	if err != nil {
		fail(c, err)
		return
	}
	respond(c, http.StatusOK, toWebhookEndpointJSON(ep, true))
}

// inMode: with ?mode= (the dashboard's pages send it) a thing of the other
// mode is not found, so a test-mode page cannot rotate, disable, delete,
// test or resend anything live. Without it the session routes act on any
// endpoint or delivery of the merchant, as before.
func inMode(c *gin.Context, mode models.Mode) error {
	if c.Query("mode") == "" {
		return nil
	}
	want, err := dashboardMode(c)
	if err != nil {
		return err
	}
	if mode != want {
		return apperr.New(apperr.ErrNotFound, "not found in "+string(want)+" mode")
	}
	return nil
}

// endpointInMode loads the merchant's endpoint and checks it against
// ?mode= (inMode).
func (s *Server) endpointInMode(c *gin.Context, id string) error {
	if c.Query("mode") == "" {
		return nil
	}
	ep, err := s.Store.WebhookEndpoint(c.Request.Context(), principal(c).MerchantID, id)
	if err != nil {
		return err
	}
	return inMode(c, ep.Mode)
}

// errRetryUnavailable is returned when the API runs without a Temporal
// client to retry through (a wiring mistake: every command sets one).
var errRetryUnavailable = errors.New("manual delivery retry is not configured (no Deliveries dependency)")

// retryDelivery asks for one immediate attempt of a delivery and answers the
// delivery as it is now (its status changes when the attempt is recorded;
// watch GET /api/events or GET /api/webhooks).
func (s *Server) retryDelivery(c *gin.Context) {
	id, err := pathID(c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	ctx := c.Request.Context()
	p := principal(c)
	d, err := s.Store.WebhookDeliveryOfMerchant(ctx, p.MerchantID, id)
	if err == nil {
		err = inMode(c, d.Mode)
	}
	if err != nil {
		fail(c, err)
		return
	}
	ep, err := s.Store.WebhookEndpoint(ctx, p.MerchantID, d.EndpointID)
	switch {
	case errors.Is(err, apperr.ErrNotFound):
		fail(c, apperr.Conflict("the endpoint of this delivery was deleted; nothing to retry"))
		return
	case err != nil:
		fail(c, err)
		return
	case !ep.Active:
		fail(c, apperr.WithHint(apperr.ErrConflict, "the endpoint of this delivery is disabled",
			"enable it with PATCH /api/webhooks/"+ep.ID+` {"active": true}, then retry`))
		return
	}
	if s.Deliveries == nil {
		fail(c, errRetryUnavailable)
		return
	}
	if err := s.Deliveries.RetryDelivery(ctx, d); err != nil {
		fail(c, fmt.Errorf("retry delivery %s: %w", d.ID, err))
		return
	}
	respond(c, http.StatusOK, toDeliveryJSON(d, false))
}

// listEvents is GET /api/events: the key's mode's deliveries with payload,
// newest first, filtered by event, status and creation time, paginated by
// starting_after and limit.
func (s *Server) listEvents(c *gin.Context) {
	var v checker
	page := v.page(c.Query)
	f := models.DeliveryFilter{
		Event:  v.oneOf("event", c.Query("event"), false, WebhookEventTypes...),
		Status: v.oneOf("status", c.Query("status"), false, models.DeliveryPending, models.DeliveryDelivered, models.DeliveryFailed),
		Since:  v.timeParam("since", c.Query("since")),
		Until:  v.timeParam("until", c.Query("until")),
	}
	if f.Since != nil && f.Until != nil && !f.Until.After(*f.Since) {
		v.Add("until", "must be after since")
	}
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	rows, more, err := s.Store.WebhookDeliveries(c.Request.Context(), principal(c).Scope(), f, page)
	if err != nil {
		fail(c, err)
		return
	}
	out := make([]deliveryJSON, 0, len(rows))
	for i := range rows {
		out = append(out, toDeliveryJSON(&rows[i], true))
	}
	respondList(c, out, more)
}

// attemptJSON is one POST of a delivery: when, the receiver's HTTP status
// (null when none came back) and the error, if it failed.
type attemptJSON struct {
	Attempt        int          `json:"attempt"`
	AttemptedAt    Time         `json:"attemptedAt"`
	ResponseStatus *optionalInt `json:"responseStatus"`
	Error          string       `json:"error"`
}

// deliveryLogJSON is a delivery with its payload, the session its event is
// about and every attempt (GET /api/webhooks/deliveries).
type deliveryLogJSON struct {
	deliveryJSON
	SessionID   *string       `json:"sessionId"`
	EndpointURL string        `json:"endpointUrl"`
	AttemptLog  []attemptJSON `json:"attemptLog"`
}

// listDeliveries is the delivery log across the mode's endpoints, newest
// first, filtered by event, status, endpointId, sessionId (the deliveries a
// payment caused), since and until, with every attempt of each delivery.
func (s *Server) listDeliveries(c *gin.Context) {
	mode, err := dashboardMode(c)
	if err != nil {
		fail(c, err)
		return
	}
	var v checker
	page := v.page(c.Query)
	f := models.DeliveryFilter{
		Event:      v.oneOf("event", c.Query("event"), false, append([]string{models.EventTest}, WebhookEventTypes...)...),
		Status:     v.oneOf("status", c.Query("status"), false, models.DeliveryPending, models.DeliveryDelivered, models.DeliveryFailed),
		EndpointID: v.uuidField("endpointId", c.Query("endpointId"), false),
		SessionID:  v.uuidField("sessionId", c.Query("sessionId"), false),
		Since:      v.timeParam("since", c.Query("since")),
		Until:      v.timeParam("until", c.Query("until")),
	}
	if f.Since != nil && f.Until != nil && !f.Until.After(*f.Since) {
		v.Add("until", "must be after since")
	}
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	ctx := c.Request.Context()
	rows, more, err := s.Store.WebhookDeliveries(ctx, models.Scope{MerchantID: principal(c).MerchantID, Mode: mode}, f, page)
	if err != nil {
		fail(c, err)
		return
	}
	ids := make([]string, 0, len(rows))
	for _, d := range rows {
		ids = append(ids, d.ID)
	}
	attempts, err := s.Store.DeliveryAttempts(ctx, ids)
	if err != nil {
		fail(c, err)
		return
	}
	epIDs := make([]string, 0, len(rows))
	for _, d := range rows {
		epIDs = append(epIDs, d.EndpointID)
	}
	urls, err := s.Store.EndpointURLs(ctx, principal(c).MerchantID, epIDs)
	if err != nil {
		fail(c, err)
		return
	}
	out := make([]deliveryLogJSON, 0, len(rows))
	for i := range rows {
		d := deliveryLogJSON{deliveryJSON: toDeliveryJSON(&rows[i], true), SessionID: rows[i].SessionID,
			EndpointURL: urls[rows[i].EndpointID], AttemptLog: []attemptJSON{}}
		for _, a := range attempts[rows[i].ID] {
			d.AttemptLog = append(d.AttemptLog, attemptJSON{Attempt: a.Attempt, AttemptedAt: ts(a.AttemptedAt),
				ResponseStatus: &optionalInt{v: a.ResponseStatus}, Error: a.Error})
		}
		out = append(out, d)
	}
	respondList(c, out, more)
}

// sendTestEvent posts a webhook.test event to one endpoint, whatever events
// it subscribes to, and answers the new delivery (watch it in the delivery
// log). A disabled endpoint is a 409.
func (s *Server) sendTestEvent(c *gin.Context) {
	id, err := pathID(c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	ctx := c.Request.Context()
	if err := s.endpointInMode(c, id); err != nil {
		fail(c, err)
		return
	}
	d, err := s.Store.SendTestEvent(ctx, principal(c).MerchantID, id)
	if err != nil {
		fail(c, err)
		return
	}
	if s.Dispatcher != nil {
		// Without it (or if this fails) the delivery reconciler starts it.
		if err := s.Dispatcher.Dispatch(ctx, []string{d.ID}); err != nil {
			s.Logger.WarnContext(ctx, "test event not dispatched; the reconciler will", "deliveryId", d.ID, "err", err)
		}
	}
	respond(c, http.StatusCreated, toDeliveryJSON(d, true))
}
