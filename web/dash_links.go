package web

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/gin-gonic/gin"
)

// Payment links: list with create form, one link's page with its hosted
// URL, QR code (server-drawn SVG, to copy or download), edit, activate or
// deactivate, and delete.

// linkForm is what the create and edit forms post.
type linkForm struct {
	Name, Description, Amount string
	Networks                  []string
	Idem                      string
}

func readLinkForm(c *gin.Context) linkForm {
	return linkForm{Name: strings.TrimSpace(c.PostForm("name")), Description: strings.TrimSpace(c.PostForm("description")),
		Amount: strings.TrimSpace(c.PostForm("amount")), Networks: c.PostFormArray("networks"), Idem: c.PostForm("idem")}
}

func (p *Pages) linksPage(c *gin.Context) {
	p.renderLinks(c, http.StatusOK, linkForm{Idem: newIdempotencyKey()}, nil)
}

func (p *Pages) renderLinks(c *gin.Context, status int, form linkForm, formErr *apiError) {
	if p.liveBlocked(c) {
		return
	}
	f := map[string]string{"q": strings.TrimSpace(c.Query("q")), "active": c.Query("active")}
	rows, pager, err := listPage[dLink](p, c, "/api/payment-links", url.Values{"q": {f["q"]}, "active": {f["active"]}})
	if err != nil && status == http.StatusOK {
		status = err.Status
	}
	if len(form.Networks) == 0 && formErr == nil {
		form.Networks = []string{modeNetworks(c.Param("mode"))[0].Value}
	}
	p.renderDash(c, status, "dash_links.html", map[string]any{"Title": "Payment links", "Links": rows, "Error": err, "Filter": f,
		"Form": form, "FormError": formErr, "Networks": modeNetworks(c.Param("mode")), "Pager": pager,
		"Filtered": f["q"]+f["active"] != ""})
}

func (p *Pages) linkCreateForm(c *gin.Context) {
	if p.liveBlocked(c) {
		return
	}
	f := readLinkForm(c)
	body := map[string]any{"name": f.Name, "description": f.Description, "amount": f.Amount}
	if len(f.Networks) > 0 {
		body["network"], body["networks"] = f.Networks[0], f.Networks
	} else {
		body["network"] = ""
	}
	var l dLink
	if _, err := p.api(c, apiCall{method: http.MethodPost, path: "/api/payment-links", query: modeQuery(c, nil), json: body,
		idempotency: f.Idem}, &l); err != nil {
		renewKeyOnReuse(err, &f.Idem)
		p.renderLinks(c, err.Status, f, err)
		return
	}
	back(c, "/links/"+l.ID, "link.created", "")
}

// publicBase is where customers reach the hosted pages.
func (p *Pages) publicBase(c *gin.Context) string {
	if p.PublicURL != "" {
		return strings.TrimSuffix(p.PublicURL, "/")
	}
	scheme := "http"
	if c.Request.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + c.Request.Host
}

func (p *Pages) linkPage(c *gin.Context) {
	p.renderLink(c, http.StatusOK, nil, nil, nil)
}

// renderLink shows one link; form and formErr are a failed edit's,
// actionErr a failed activation or deletion's.
func (p *Pages) renderLink(c *gin.Context, status int, form *linkForm, formErr, actionErr *apiError) {
	var l dLink
	if !p.item(c, "/api/payment-links/", &l) {
		return
	}
	if form == nil {
		form = &linkForm{Name: l.Name, Description: l.Description, Amount: l.Amount.String()}
	}
	p.renderDash(c, status, "dash_link.html", map[string]any{"Title": l.Name, "L": l, "URL": p.publicBase(c) + "/pay/" + l.ID,
		"Form": form, "FormError": formErr, "ActionError": actionErr})
}

func (p *Pages) linkUpdateForm(c *gin.Context) {
	if p.liveBlocked(c) {
		return
	}
	f := readLinkForm(c)
	if !validID(c.Param("id")) {
		p.dashError(c, &apiError{Status: http.StatusNotFound, Message: "not found"})
		return
	}
	body := map[string]any{"name": f.Name, "description": f.Description, "amount": f.Amount}
	if _, err := p.api(c, apiCall{method: http.MethodPatch, path: "/api/payment-links/" + c.Param("id"), query: modeQuery(c, nil), json: body}, nil); err != nil {
		p.renderLink(c, err.Status, &f, err, nil)
		return
	}
	back(c, "/links/"+c.Param("id"), "link.updated", "")
}

func (p *Pages) linkActiveForm(c *gin.Context) {
	if p.liveBlocked(c) {
		return
	}
	active := c.PostForm("active") == "true"
	if !validID(c.Param("id")) {
		p.dashError(c, &apiError{Status: http.StatusNotFound, Message: "not found"})
		return
	}
	if _, err := p.api(c, apiCall{method: http.MethodPatch, path: "/api/payment-links/" + c.Param("id"), query: modeQuery(c, nil),
		json: map[string]any{"active": active}}, nil); err != nil {
		p.renderLink(c, err.Status, nil, nil, err)
		return
	}
	done := "link.deactivated"
	if active {
		done = "link.activated"
	}
	back(c, "/links/"+c.Param("id"), done, "")
}

func (p *Pages) linkDeleteForm(c *gin.Context) {
	if p.liveBlocked(c) {
		return
	}
	if !validID(c.Param("id")) {
		p.dashError(c, &apiError{Status: http.StatusNotFound, Message: "not found"})
		return
	}
	// DELETE is a SESSION route (no mode): the link's page already proved
	// it is this mode's by loading it; check again so a live page cannot
	// delete a test link by id.
	if _, err := p.api(c, apiCall{method: http.MethodGet, path: "/api/payment-links/" + c.Param("id"), query: modeQuery(c, nil)}, nil); err != nil {
		p.dashError(c, err)
		return
	}
	if _, err := p.api(c, apiCall{method: http.MethodDelete, path: "/api/payment-links/" + c.Param("id")}, nil); err != nil {
		p.renderLink(c, err.Status, nil, nil, err)
		return
	}
	back(c, "/links", "link.deleted", "")
}

// linkQR draws the link's hosted page URL as an SVG QR code (inline, or as
// a file with ?download=1).
func (p *Pages) linkQR(c *gin.Context) {
	id := c.Param("id")
	if !validID(id) {
		c.Status(http.StatusNotFound)
		return
	}
	if _, err := p.api(c, apiCall{method: http.MethodGet, path: "/api/payment-links/" + id, query: modeQuery(c, nil)}, nil); err != nil {
		c.Status(err.Status)
		return
	}
	svg, err := QRSVG(p.publicBase(c) + "/pay/" + id)
	if err != nil {
		c.Status(http.StatusInternalServerError)
		return
	}
	if c.Query("download") != "" {
		c.Header("Content-Disposition", `attachment; filename="paygate-link-`+id+`.svg"`)
	}
	c.Header("Cache-Control", "private, max-age=300")
	c.Data(http.StatusOK, "image/svg+xml", svg)
}
