package web

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/paygate/paygate/api"
)

// Webhooks: the mode's endpoints (create shows the whsec_ secret once,
// rotate shows the new one once, enable/disable, delete, send a test
// event) and the delivery log across them with filters and resend.

type webhookForm struct {
	URL    string
	Events []string
	Idem   string
}

// webhookView is what a webhooks page shows besides the lists.
type webhookView struct {
	form      webhookForm
	formErr   *apiError
	secret    *dEndpoint // a new or rotated endpoint, secret shown once
	actionErr *apiError
}

func (p *Pages) webhooksPage(c *gin.Context) {
	p.renderWebhooks(c, http.StatusOK, webhookView{form: webhookForm{Idem: newIdempotencyKey(), Events: []string{"checkout.completed"}}})
}

func (p *Pages) renderWebhooks(c *gin.Context, status int, v webhookView) {
	if p.liveBlocked(c) {
		return
	}
	var hooks struct {
		Endpoints []dEndpoint `json:"endpoints"`
	}
	_, err := p.api(c, apiCall{method: http.MethodGet, path: "/api/webhooks", query: modeQuery(c, nil)}, &hooks)
	switch {
	case err != nil && v.secret != nil:
		// The secret is shown once, and it is in force already: the page
		// shows it whatever else failed.
		if v.actionErr == nil {
			v.actionErr = err
		}
	case err != nil:
		p.dashError(c, err)
		return
	}
	f := map[string]string{}
	for _, k := range []string{"event", "status", "endpoint", "since", "until"} {
		f[k] = strings.TrimSpace(c.Query(k))
	}
	q := url.Values{"event": {f["event"]}, "status": {f["status"]}, "endpointId": {f["endpoint"]}, "since": {f["since"]}}
	if f["until"] != "" {
		q.Set("until", untilDay(f["until"]))
	}
	rows, pager, logErr := listPage[dDelivery](p, c, "/api/webhooks/deliveries", q)
	if logErr != nil && status == http.StatusOK {
		status = logErr.Status
	}
	if v.form.Idem == "" {
		v.form.Idem = newIdempotencyKey()
	}
	// Each endpoint's rotate form carries its own key: the form sent twice
	// (a double click, the answer page reloaded) rotates once and shows
	// the same new secret, instead of rotating again and ending, at once,
	// the secret the receiver holds (the first rotation's new secret would
	// become the "previous" one, shown to no one).
	rotateKeys := map[string]string{}
	for _, ep := range hooks.Endpoints {
		rotateKeys[ep.ID] = newIdempotencyKey()
	}
	p.renderDash(c, status, "dash_webhooks.html", map[string]any{"Title": "Webhooks", "Endpoints": hooks.Endpoints,
		"Deliveries": rows, "LogError": logErr, "Filter": f, "Filtered": f["event"]+f["status"]+f["endpoint"]+f["since"]+f["until"] != "",
		"Pager": pager, "Events": api.WebhookEventTypes,
		"LogEvents": append([]string{"webhook.test"}, api.WebhookEventTypes...), "Form": v.form, "FormError": v.formErr,
		"NewSecret": v.secret, "ActionError": v.actionErr, "Overlaps": rotateOverlaps, "RotateKeys": rotateKeys})
}

func (p *Pages) webhookCreateForm(c *gin.Context) {
	if p.liveBlocked(c) {
		return
	}
	f := webhookForm{URL: strings.TrimSpace(c.PostForm("url")), Events: c.PostFormArray("events"), Idem: c.PostForm("idem")}
	events := f.Events
	if events == nil {
		events = []string{}
	}
	var ep dEndpoint
	if _, err := p.api(c, apiCall{method: http.MethodPost, path: "/api/webhooks", idempotency: f.Idem,
		json: map[string]any{"url": f.URL, "events": events, "mode": c.Param("mode")}}, &ep); err != nil {
		renewKeyOnReuse(err, &f.Idem)
		p.renderWebhooks(c, err.Status, webhookView{form: f, formErr: err})
		return
	}
	p.renderWebhooks(c, http.StatusCreated, webhookView{secret: &ep})
}

// endpointAction runs a change of one endpoint and shows its result.
func (p *Pages) endpointAction(c *gin.Context, call apiCall, done string) {
	if !validID(c.Param("id")) {
		p.dashError(c, &apiError{Status: http.StatusNotFound, Message: "not found"})
		return
	}
	var ep dEndpoint
	if _, err := p.api(c, call, &ep); err != nil {
		p.renderWebhooks(c, err.Status, webhookView{actionErr: err})
		return
	}
	if ep.Secret != "" {
		p.renderWebhooks(c, http.StatusOK, webhookView{secret: &ep})
		return
	}
	back(c, "/webhooks", done, "endpoints")
}

// rotateOverlaps are the dashboard's choices of how long a rotated secret
// keeps signing beside the new one (the API takes any number of seconds up
// to seven days).
var rotateOverlaps = []option{{"0", "stops now (the secret leaked)"}, {"3600", "for 1 hour"}, {"86400", "for 24 hours"}, {"604800", "for 7 days"}}

// webhookRotateForm rotates; a form without a choice (a page from before
// the choice) stops the old secret at once, as the API does without one.
func (p *Pages) webhookRotateForm(c *gin.Context) {
	if p.liveBlocked(c) {
		return
	}
	v := c.PostForm("overlap")
	if v == "" {
		v = "0"
	}
	overlap, err := strconv.Atoi(v)
	if err != nil {
		p.renderWebhooks(c, http.StatusBadRequest, webhookView{actionErr: &apiError{Status: http.StatusBadRequest,
			Message: "Choose how long the old secret keeps signing."}})
		return
	}
	p.endpointAction(c, apiCall{method: http.MethodPost, path: "/api/webhooks/" + c.Param("id") + "/rotate-secret", query: modeQuery(c, nil),
		idempotency: c.PostForm("idem"),
		json:        map[string]any{"previousSecretExpiresIn": overlap}}, "")
}

func (p *Pages) webhookActiveForm(c *gin.Context) {
	if p.liveBlocked(c) {
		return
	}
	active := c.PostForm("active") == "true"
	done := "webhook.disabled"
	if active {
		done = "webhook.enabled"
	}
	p.endpointAction(c, apiCall{method: http.MethodPatch, path: "/api/webhooks/" + c.Param("id"), query: modeQuery(c, nil),
		json: map[string]any{"active": active}}, done)
}

func (p *Pages) webhookDeleteForm(c *gin.Context) {
	if p.liveBlocked(c) {
		return
	}
	p.endpointAction(c, apiCall{method: http.MethodDelete, path: "/api/webhooks/" + c.Param("id"), query: modeQuery(c, nil)}, "webhook.deleted")
}

func (p *Pages) webhookTestForm(c *gin.Context) {
	if p.liveBlocked(c) {
		return
	}
	if !validID(c.Param("id")) {
		p.dashError(c, &apiError{Status: http.StatusNotFound, Message: "not found"})
		return
	}
	if _, err := p.api(c, apiCall{method: http.MethodPost, path: "/api/webhooks/" + c.Param("id") + "/test", query: modeQuery(c, nil)}, nil); err != nil {
		p.renderWebhooks(c, err.Status, webhookView{actionErr: err})
		return
	}
	back(c, "/webhooks", "webhook.tested", "log")
}

func (p *Pages) webhookRetryForm(c *gin.Context) {
	if p.liveBlocked(c) {
		return
	}
	did := c.Param("did")
	if !validID(did) {
		p.dashError(c, &apiError{Status: http.StatusNotFound, Message: "not found"})
		return
	}
	if _, err := p.api(c, apiCall{method: http.MethodPost, path: "/api/webhooks/deliveries/" + did + "/retry", query: modeQuery(c, nil)}, nil); err != nil {
		p.renderWebhooks(c, err.Status, webhookView{actionErr: err})
		return
	}
	back(c, "/webhooks", "delivery.retried", "delivery-"+did)
}
