package web

import (
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"golang.org/x/text/language"
	"golang.org/x/text/language/display"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/checkout"
	"github.com/paygate/paygate/models"
)

// transferWithAuthorizationSelector is chain.TransferWithAuthorizationSelector
// in hex, for the page's script to encode its call (no keccak in the browser).
var transferWithAuthorizationSelector = fmt.Sprintf("0x%x", chain.TransferWithAuthorizationSelector)

type option struct{ Value, Label string }

// countriesByLang are every ISO 3166-1 country with its name in each page
// language, sorted by name (computed once).
var countriesByLang = func() map[string][]option {
	out := map[string][]option{}
	for _, lang := range languages {
		namer := display.Regions(language.Make(lang))
		var list []option
		for a := 'A'; a <= 'Z'; a++ {
			for b := 'A'; b <= 'Z'; b++ {
				code := string([]rune{a, b})
				if !api.IsCountry(code) {
					continue
				}
				r, _ := language.ParseRegion(code)
				name := namer.Name(r)
				if name == "" {
					name = code
				}
				list = append(list, option{code, name})
			}
		}
		sort.Slice(list, func(i, j int) bool { return list[i].Label < list[j].Label })
		out[lang] = list
	}
	return out
}()

func validID(s string) bool {
	u, err := uuid.Parse(s)
	return err == nil && u.String() == strings.ToLower(s)
}

func (p *Pages) notFound(c *gin.Context) {
	p.render(c, http.StatusNotFound, "error.html", map[string]any{"Message": "error.notFound"})
}

// payForm is what the link page posts (and shows again on an error).
type payForm struct {
	Network, Name, Email, Country, Address, Wallet string
}

func (p *Pages) payPage(c *gin.Context) {
	p.renderPay(c, http.StatusOK, payForm{}, "")
}

func (p *Pages) renderPay(c *gin.Context, status int, f payForm, problem string) {
	id := c.Param("linkId")
	if !validID(id) {
		p.notFound(c)
		return
	}
	info, err := p.Checkout.Link(c.Request.Context(), id)
	var inactive bool
	if errors.Is(err, apperr.ErrBadRequest) { // inactive: shown, not payable
		inactive = true
		l, lerr := p.Store.PaymentLinkByID(c.Request.Context(), id)
		if lerr != nil {
			p.notFound(c)
			return
		}
		m, merr := p.Store.Merchant(c.Request.Context(), l.MerchantID)
		if merr != nil {
			p.notFound(c)
			return
		}
		info = checkout.LinkInfo{Link: l, Merchant: m}
	} else if err != nil {
		p.notFound(c)
		return
	}
	// No network left to pay on (not configured here, or each wallet
	// proven by another merchant, or the merchant's contract wallet not
	// proven there): shown as not payable, not as a form
	// without a choice.
	inactive = inactive || len(info.Networks) == 0
	var nets []map[string]any
	for _, n := range info.Networks {
		nets = append(nets, map[string]any{"Value": n.Network, "Label": networkLabel(n.Network), "Family": string(n.Family),
			"Checked": n.Network == f.Network || (f.Network == "" && n.Network == info.Link.Network)})
	}
	if f.Country == "" {
		f.Country = countryFromLanguage(c.GetHeader("Accept-Language"))
	}
	data := map[string]any{
		"Link": info.Link, "Merchant": info.Merchant, "Networks": nets, "Countries": countriesByLang[p.language(c)], "Form": f,
		"Problem": problem, "Inactive": inactive, "Test": info.Link.Mode == models.ModeTest,
		"Title": info.Link.Name,
	}
	if info.Link.CheckoutID != nil {
		// Unread (a store failure), the page is the link's alone.
		if hc, err := p.Store.HostedCheckoutByID(c.Request.Context(), *info.Link.CheckoutID); err == nil {
			p.hostedPay(c, data, hc, &f)
		} else {
			p.Log.WarnContext(c.Request.Context(), "web: hosted checkout not read", "err", err)
		}
	}
	p.render(c, status, "pay.html", data)
}

// hostedPay adds a hosted checkout's parts to its pay page: the e-mail the
// merchant gave, filled in on the first view; once it takes no session,
// why (paid, expired, cancelled) and the way back to the shop.
func (p *Pages) hostedPay(c *gin.Context, data map[string]any, hc *models.HostedCheckout, f *payForm) {
	if c.Request.Method == http.MethodGet && f.Email == "" {
		f.Email = hc.CustomerEmail
		data["Form"] = *f
	}
	if !data["Inactive"].(bool) {
		return
	}
	back, session := hc.CancelURL, ""
	switch hc.Status {
	case models.HostedComplete:
		back = hc.SuccessURL
		if hc.SessionID != nil {
			session = *hc.SessionID
		}
		data["Closed"] = "pay.closed.complete"
	case models.HostedCancelled:
		data["Closed"] = "pay.closed.cancelled"
	case models.HostedExpired:
		data["Closed"] = "pay.closed.expired"
	default:
		// Open: past its end with a payment on its way (no way back to the
		// cart: the customer's money may be that payment), or not payable
		// here (no network left): the link's own words.
		if !p.Store.Now().Before(hc.ExpiresAt) {
			data["Closed"] = "pay.closed.confirming"
		}
		return
	}
	data["ReturnURL"] = returnURL(back, hc.ID, session)
}

// countryFromLanguage guesses the country from Accept-Language ("de-DE").
func countryFromLanguage(h string) string {
	for _, part := range strings.Split(h, ",") {
		tag := strings.TrimSpace(strings.SplitN(part, ";", 2)[0])
		if _, region, ok := strings.Cut(tag, "-"); ok {
			if r := strings.ToUpper(region); api.IsCountry(r) {
				return r
			}
		}
	}
	return ""
}

// payForm creates the session from the link page's form: the tax quote and
// the session are made on the server, so the page works without JavaScript.
func (p *Pages) payForm(c *gin.Context) {
	id := c.Param("linkId")
	if !validID(id) {
		p.notFound(c)
		return
	}
	f := payForm{Network: c.PostForm("network"), Name: strings.TrimSpace(c.PostForm("name")), Email: strings.TrimSpace(c.PostForm("email")),
		Country: strings.ToUpper(strings.TrimSpace(c.PostForm("country"))), Address: strings.TrimSpace(c.PostForm("address")),
		Wallet: strings.TrimSpace(c.PostForm("wallet"))}
	var v apperr.ValidationError
	fam, known := chain.FamilyOf(f.Network)
	if !known {
		v.Add("network", "choose a network")
	}
	// The API's checks of the same fields, so both ways in store the same
	// customer (one e-mail in one case, no byte PostgreSQL refuses).
	customer := api.CheckCustomer(&v, "", checkout.Customer{Name: f.Name, Email: f.Email, Address: f.Address, Country: f.Country})
	wallet := ""
	if known {
		w, err := chain.ParseAddress(fam, f.Wallet)
		if err != nil {
			v.Add("wallet", err.Error())
		}
		wallet = w
	}
	if err := v.Err(); err != nil {
		p.renderPay(c, http.StatusBadRequest, f, err.Error())
		return
	}
	ctx := c.Request.Context()
	q, err := p.Checkout.Quote(ctx, checkout.QuoteRequest{LinkID: id, Network: f.Network, Country: customer.Country})
	if err == nil {
		var created checkout.Created
		created, err = p.Checkout.CreateSession(ctx, checkout.CreateRequest{LinkID: id, QuoteToken: q.Token, WalletAddress: wallet,
			WalletType: string(fam), Network: f.Network,
			Customer: customer,
			Totals: checkout.Totals{SubtotalCents: q.Quote.SubtotalCents, TaxCents: q.Quote.TaxCents, TotalCents: q.Quote.TotalCents,
				CalculationID: q.Quote.CalculationID}})
		if err == nil {
			c.Redirect(http.StatusSeeOther, "/checkout/"+created.Session.ID+langQuery(c))
			return
		}
	}
	if errors.Is(err, apperr.ErrNotFound) {
		p.notFound(c)
		return
	}
	if errors.Is(err, apperr.ErrBadRequest) || errors.Is(err, apperr.ErrTimeout) {
		p.renderPay(c, http.StatusBadRequest, f, err.Error())
		return
	}
	p.Log.ErrorContext(ctx, "web: session not created", "err", err)
	p.renderPay(c, http.StatusInternalServerError, f, "something went wrong on our side; please try again")
}

func langQuery(c *gin.Context) string {
	if l := c.Query("lang"); l != "" {
		return "?lang=" + url.QueryEscape(l)
	}
	return ""
}

// sessionView is everything the checkout page shows.
func (p *Pages) sessionView(c *gin.Context, cs *models.CheckoutSession) (map[string]any, error) {
	ctx := c.Request.Context()
	link, err := p.Store.PaymentLinkAnyState(ctx, cs.PaymentLinkID)
	if err != nil {
		return nil, err
	}
	m, err := p.Store.Merchant(ctx, cs.MerchantID)
	if err != nil {
		return nil, err
	}
	hist, err := p.Store.SessionHistory(ctx, cs.ID)
	if err != nil {
		return nil, err
	}
	n, _ := p.Checkout.Networks.Lookup(cs.Network)
	ins := p.Checkout.PaymentInstructions(cs, m.BusinessName)
	data := map[string]any{"Session": cs, "Link": link, "Merchant": m, "History": hist, "NetworkLabel": networkLabel(cs.Network),
		"Family": string(n.Family), "Title": link.Name, "Test": cs.Mode == models.ModeTest, "Due": cs.ExpectedAmount.String(),
		"Subtotal": cs.Subtotal.String(), "Tax": cs.Tax.String(), "HasTax": cs.Tax > 0, "Status": cs.Status,
		"Terminal": models.TerminalStatus(cs.Status), "Open": !models.TerminalStatus(cs.Status) && cs.TxHash == nil,
		"ExpiresAt": cs.ExpiresAt.UTC().Format(time.RFC3339), "ExpiresHuman": cs.ExpiresAt.UTC().Format("15:04 MST"),
		"Reference": ins.Reference, "Units": strconv.FormatInt(cs.ExpectedAmount.Units(), 10),
		// html/template refuses solana: and ethereum: URLs; this one is
		// built here from validated addresses and configured mints only.
		"PayURI": template.URL(payURI(cs, n, ins)),
		// Released is the note of a transaction set aside (below).
		"Released": "",
	}
	// "Start again" only while the link takes a new session (a hosted
	// checkout's link ends with the checkout).
	data["Again"] = link.Active && (link.ExpiresAt == nil || p.Store.Now().Before(*link.ExpiresAt))
	if cs.CheckoutID != nil {
		if hc, err := p.Store.HostedCheckoutByID(ctx, *cs.CheckoutID); err == nil {
			data["SuccessURL"], data["CancelURL"] = returnURL(hc.SuccessURL, hc.ID, cs.ID), returnURL(hc.CancelURL, hc.ID, cs.ID)
		}
	}
	if cs.TxHash != nil {
		data["TxHash"] = *cs.TxHash
		data["ExplorerURL"] = n.TxURL(*cs.TxHash)
	} else if !models.TerminalStatus(cs.Status) && cs.FailureMessage != "" {
		// A transaction submitted here was not the customer's payment
		// (another wallet's, anyone's who knew the session's id) and was
		// given back: the session still waits for the payment.
		data["Released"] = cs.FailureMessage
	}
	if cs.CompletedAt != nil {
		data["CompletedAt"] = cs.CompletedAt.UTC().Format("2006-01-02 15:04 MST")
	}
	if cs.Status == models.StatusFailed {
		reason := "outcome.failed." + cs.FailureReason
		if _, ok := p.msgs["en"][reason]; !ok {
			reason = ""
		}
		data["FailureKey"] = reason
		if cs.ReceivedAmount > 0 && cs.ReceivedAmount < cs.ExpectedAmount {
			data["Received"] = cs.ReceivedAmount.String()
			data["StillDue"] = (cs.ExpectedAmount - cs.ReceivedAmount).String()
		}
	}
	if n.Family == chain.FamilyEVM && ins.Authorization != nil {
		auth, _ := json.Marshal(ins.Authorization)
		data["Wallet"] = map[string]any{
			"Authorization": string(auth), "Relayer": ins.Relayer, "ChainID": strconv.FormatUint(n.ChainID, 10),
			"ChainHex": "0x" + strconv.FormatUint(n.ChainID, 16), "ChainName": networkLabel(cs.Network), "RPC": publicRPC(n),
			"Token": n.USDC, "Selector": transferWithAuthorizationSelector,
		}
	}
	return data, nil
}

// returnURL is a hosted checkout's return URL with its placeholders filled
// in: {CHECKOUT_ID} with the checkout's id and {SESSION_ID} with the
// session's (empty where the customer opened none). Both are UUIDs, safe
// anywhere in a URL.
func returnURL(u, checkoutID, sessionID string) string {
	return strings.NewReplacer("{CHECKOUT_ID}", checkoutID, "{SESSION_ID}", sessionID).Replace(u)
}

// payURI is what the QR code carries: an EIP-681 transfer of the token
// (EVM) or the Solana Pay transfer request (Solana).
func payURI(cs *models.CheckoutSession, n chain.Network, ins checkout.Instructions) string {
	switch n.Family {
	case chain.FamilySolana:
		return ins.SolanaPayURL
	case chain.FamilyEVM:
		return fmt.Sprintf("ethereum:%s@%d/transfer?address=%s&uint256=%d", n.USDC, n.ChainID, cs.MerchantWalletAddress, cs.ExpectedAmount.Units())
	}
	return ""
}

// publicRPC is an RPC URL a wallet may be told to add: a local dev chain's,
// or the network's default public endpoint (never the configured one, which
// may carry a provider's API key).
func publicRPC(n chain.Network) string {
	if u, err := url.Parse(n.RPCURL); err == nil && (u.Hostname() == "127.0.0.1" || u.Hostname() == "localhost") {
		return n.RPCURL
	}
	d, _ := chain.DefaultRegistry().Lookup(n.Name)
	return d.RPCURL
}

func (p *Pages) checkoutPage(c *gin.Context) {
	id := c.Param("sessionId")
	if !validID(id) {
		p.notFound(c)
		return
	}
	cs, err := p.Store.CheckoutSession(c.Request.Context(), id)
	if err != nil {
		p.notFound(c)
		return
	}
	data, err := p.sessionView(c, cs)
	if err != nil {
		p.Log.ErrorContext(c.Request.Context(), "web: session page", "sessionId", id, "err", err)
		p.notFound(c)
		return
	}
	switch pr := c.Query("problem"); pr {
	case "invalid", "conflict", "expired", "other":
		data["ProblemKey"] = "problem." + pr
	}
	p.render(c, http.StatusOK, "checkout.html", data)
}

// cancelForm cancels a session from the page without JavaScript.
func (p *Pages) cancelForm(c *gin.Context) {
	id := c.Param("sessionId")
	if !validID(id) {
		p.notFound(c)
		return
	}
	cs, err := p.Store.CheckoutSession(c.Request.Context(), id)
	if err != nil {
		p.notFound(c)
		return
	}
	if _, err := p.Checkout.Cancel(c.Request.Context(), cs, "customer"); err != nil && !errors.Is(err, apperr.ErrConflict) &&
		!errors.Is(err, apperr.ErrNotFound) {
		p.Log.WarnContext(c.Request.Context(), "web: cancel", "sessionId", id, "err", err)
	}
	c.Redirect(http.StatusSeeOther, "/checkout/"+id+langQuery(c))
}

// submitForm attaches a transaction hash from the page without JavaScript.
func (p *Pages) submitForm(c *gin.Context) {
	id := c.Param("sessionId")
	if !validID(id) {
		p.notFound(c)
		return
	}
	back := "/checkout/" + id + langQuery(c)
	if _, err := p.Checkout.Submit(c.Request.Context(), id, strings.TrimSpace(c.PostForm("txHash"))); err != nil {
		// A code, never the text: a page must not show words a link's
		// author chose (phishing on our origin).
		code := "other"
		switch {
		case errors.Is(err, apperr.ErrBadRequest):
			code = "invalid"
		case errors.Is(err, apperr.ErrConflict):
			code = "conflict"
		case errors.Is(err, apperr.ErrNotFound):
			code = "expired"
		}
		sep := "?"
		if strings.Contains(back, "?") {
			sep = "&"
		}
		back += sep + "problem=" + code
	}
	c.Redirect(http.StatusSeeOther, back)
}

// qr draws the payment request of a session as an SVG QR code.
func (p *Pages) qr(c *gin.Context) {
	id := c.Param("sessionId")
	if !validID(id) {
		c.Status(http.StatusNotFound)
		return
	}
	cs, err := p.Store.CheckoutSession(c.Request.Context(), id)
	if err != nil {
		c.Status(http.StatusNotFound)
		return
	}
	m, err := p.Store.Merchant(c.Request.Context(), cs.MerchantID)
	if err != nil {
		c.Status(http.StatusNotFound)
		return
	}
	n, _ := p.Checkout.Networks.Lookup(cs.Network)
	svg, err := QRSVG(payURI(cs, n, p.Checkout.PaymentInstructions(cs, m.BusinessName)))
	if err != nil {
		c.Status(http.StatusInternalServerError)
		return
	}
	c.Header("Cache-Control", "private, max-age=300")
	c.Data(http.StatusOK, "image/svg+xml", svg)
}
