package web

import (
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/paygate/paygate/chain"
)

// The merchant's own account: developers (API keys, the API reference),
// business (KYB application, settlements) and settings (receiving wallets,
// business name, logo, embed origins). These pages are the same in both
// modes.

// --- Developers ---

func (p *Pages) developersPage(c *gin.Context) {
	p.renderDevelopers(c, http.StatusOK, nil, nil)
}

func (p *Pages) renderDevelopers(c *gin.Context, status int, newKey *dKey, keyErr *apiError) {
	var keys []dKey
	_, err := p.api(c, apiCall{method: http.MethodGet, path: "/api/developer/keys"}, &keys)
	if err != nil && status == http.StatusOK {
		status = err.Status
	}
	byType := map[string]dKey{}
	for _, k := range keys {
		byType[k.KeyType] = k
	}
	rows := []map[string]any{}
	for _, typ := range []string{"test", "live"} {
		k, ok := byType[typ]
		rows = append(rows, map[string]any{"Type": typ, "Key": k, "Exists": ok})
	}
	p.renderDash(c, status, "dash_developers.html", map[string]any{"Title": "Developers", "Keys": rows, "Error": err,
		"NewKey": newKey, "KeyError": keyErr})
}

func (p *Pages) keyCreateForm(c *gin.Context) {
	var k dKey
	// No idempotency key here: a replayable answer would keep the full API
	// key in the database for a day.
	if _, err := p.api(c, apiCall{method: http.MethodPost, path: "/api/developer/keys",
		json: map[string]string{"keyType": c.PostForm("keyType")}}, &k); err != nil {
		p.renderDevelopers(c, err.Status, nil, err)
		return
	}
	p.renderDevelopers(c, http.StatusCreated, &k, nil)
}

// --- Business ---

// kybFieldNames are the KYB form's fields (SPEC.md's request fields).
var kybFieldNames = []string{"businessName", "businessType", "registrationNumber", "country", "website", "contactName",
	"contactEmail", "contactRole", "productDescription", "expectedMonthlyVolume", "primaryUseCase"}

func (p *Pages) businessPage(c *gin.Context) {
	p.renderBusiness(c, http.StatusOK, nil, nil, nil, nil)
}

func (p *Pages) renderBusiness(c *gin.Context, status int, kybForm map[string]string, kybErr *apiError, payout map[string]string, payoutErr *apiError) {
	var kyb *dKYB
	var app dKYB
	_, err := p.api(c, apiCall{method: http.MethodGet, path: "/api/kyb"}, &app)
	switch {
	case err == nil:
		kyb = &app
	case err.Status == http.StatusNotFound:
		err = nil
	}
	if kybForm == nil {
		kybForm = map[string]string{}
		if kyb != nil {
			kybForm = app.fields()
		} else {
			m := c.MustGet(merchantKey).(dMerchant)
			kybForm = map[string]string{"businessName": m.BusinessName, "contactEmail": m.Email}
		}
	}
	var balances []dBalance
	_, balErr := p.api(c, apiCall{method: http.MethodGet, path: "/api/settlements/balance"}, &balances)
	var settlements []dSettlement
	_, setErr := p.api(c, apiCall{method: http.MethodGet, path: "/api/settlements"}, &settlements)
	if balErr == nil {
		balErr = setErr
	}
	if payout == nil {
		payout = map[string]string{"network": "base", "idem": newIdempotencyKey()}
	}
	p.renderDash(c, status, "dash_business.html", map[string]any{"Title": "Business", "KYB": kyb, "KYBError": kybErr,
		"LoadError": err, "K": kybForm, "Countries": countriesByLang["en"], "Balances": balances, "Settlements": settlements,
		"BalanceError": balErr, "Payout": payout, "PayoutError": payoutErr, "LiveNetworks": modeNetworks("live")})
}

func (p *Pages) kybForm(c *gin.Context) {
	form := map[string]string{}
	body := map[string]string{}
	// Every field is sent, on an update too: one emptied is cleared (an
	// optional one), or refused with the API's message (a required one);
	// left out, it silently kept its old value under "updated".
	for _, f := range kybFieldNames {
		form[f] = strings.TrimSpace(c.PostForm(f))
		body[f] = form[f]
	}
	method, done := http.MethodPost, "kyb.submitted"
	if c.PostForm("update") != "" {
		method, done = http.MethodPatch, "kyb.updated"
	}
	if _, err := p.api(c, apiCall{method: method, path: "/api/kyb", json: body}, nil); err != nil {
		// The form sent twice (a double click, a reload): the first made
		// the application, the second is a 409. An application pending with
		// these very values is this form's own: say it was submitted.
		var app dKYB
		if method == http.MethodPost && err.Status == http.StatusConflict {
			if _, gerr := p.api(c, apiCall{method: http.MethodGet, path: "/api/kyb"}, &app); gerr == nil && app.Status == "pending" &&
				maps.Equal(app.fields(), form) {
				back(c, "/business", done, "kyb")
				return
			}
		}
		p.renderBusiness(c, err.Status, form, err, nil, nil)
		return
	}
	back(c, "/business", done, "kyb")
}

// fields is the application as its form's fields.
func (a dKYB) fields() map[string]string {
	return map[string]string{"businessName": a.BusinessName, "businessType": a.BusinessType,
		"registrationNumber": a.RegistrationNumber, "country": a.Country, "website": a.Website, "contactName": a.ContactName,
		"contactEmail": a.ContactEmail, "contactRole": a.ContactRole, "productDescription": a.ProductDescription,
		"expectedMonthlyVolume": a.ExpectedMonthlyVolume, "primaryUseCase": a.PrimaryUseCase}
}

func (p *Pages) settlementForm(c *gin.Context) {
	form := map[string]string{"idem": c.PostForm("idem")}
	for _, f := range []string{"amount", "network", "destinationWallet", "txHash"} {
		form[f] = strings.TrimSpace(c.PostForm(f))
	}
	if _, err := p.api(c, apiCall{method: http.MethodPost, path: "/api/settlements", idempotency: form["idem"],
		json: map[string]string{"amount": form["amount"], "token": "USDC", "network": form["network"],
			"destinationWallet": form["destinationWallet"], "txHash": form["txHash"]}}, nil); err != nil {
		idem := form["idem"]
		renewKeyOnReuse(err, &idem)
		form["idem"] = idem
		p.renderBusiness(c, err.Status, nil, nil, form, err)
		return
	}
	back(c, "/business", "settlement.recorded", "settlements")
}

// --- Settings ---

func (p *Pages) settingsPage(c *gin.Context) {
	p.renderSettings(c, http.StatusOK, savedSettings(c.MustGet(merchantKey).(dMerchant)), nil, nil)
}

// savedSettings is the settings form as the merchant saved it.
func savedSettings(m dMerchant) map[string]string {
	return map[string]string{"businessName": m.BusinessName, "evm": m.Wallets.EVM, "solana": m.Wallets.Solana,
		"embedOrigins": strings.Join(m.EmbedOrigins, "\n")}
}

func (p *Pages) renderSettings(c *gin.Context, status int, form map[string]string, formErr, logoErr *apiError) {
	p.renderSettingsProof(c, status, form, formErr, logoErr, "", nil)
}

// renderSettingsProof renders the settings page; proofErr is the refusal
// of the last proof of the wallet proofAddress.
func (p *Pages) renderSettingsProof(c *gin.Context, status int, form map[string]string, formErr, logoErr *apiError, proofAddress string, proofErr *apiError) {
	data := p.settingsData(c, proofAddress, proofErr)
	data["F"], data["FormError"], data["LogoError"] = form, formErr, logoErr
	p.renderDash(c, status, "dash_settings.html", data)
}

// dWalletProof is a saved receiving wallet on the settings page: proven
// (ProvedAt), or the message to sign for it, issued now.
type dWalletProof struct {
	// ID is the element's id: proof-evm, proof-solana, proof-<address>.
	ID, Family, Label, Address string
	ProvedAt                   time.Time
	// ProvenOn: the networks a contract wallet's proofs hold on (empty
	// with ProvedAt: a key's proof, on every network).
	ProvenOn          []string
	Message, IssuedAt string
	// Elsewhere: another merchant account proved the wallet (on the
	// networks of ElsewhereOn only, when it lists any: contract wallets'
	// proofs).
	Elsewhere   bool
	ElsewhereOn []string
	// NotProvenOn: networks on which the merchant's links or subscriptions
	// name this contract wallet where it is not proven (they take no
	// payment there).
	NotProvenOn []string
	Error       *apiError
}

// walletProofs lists the merchant's saved wallets with their proofs, or
// the API's refusal to answer.
func (p *Pages) walletProofs(c *gin.Context, failedAddress string, failed *apiError) ([]dWalletProof, *apiError) {
	m := c.MustGet(merchantKey).(dMerchant)
	var rows []struct {
		Address  string    `json:"address"`
		Family   string    `json:"family"`
		Network  *string   `json:"network"`
		ProvedAt time.Time `json:"provedAt"`
	}
	if _, err := p.api(c, apiCall{method: http.MethodGet, path: "/api/merchant/wallet-proofs"}, &rows); err != nil {
		return nil, err
	}
	// One entry a wallet: a contract wallet may be proven on several
	// networks; a key's proof covers them all.
	var proven []dWalletProof
	everywhere := map[string]bool{}
	for _, r := range rows {
		i := slices.IndexFunc(proven, func(w dWalletProof) bool { return w.Address == r.Address })
		if i < 0 {
			proven = append(proven, dWalletProof{Family: r.Family, Address: r.Address, ProvedAt: r.ProvedAt})
			i = len(proven) - 1
		}
		if r.Network == nil {
			everywhere[r.Address] = true
		} else {
			proven[i].ProvenOn = append(proven[i].ProvenOn, *r.Network)
		}
	}
	for i := range proven {
		if everywhere[proven[i].Address] {
			proven[i].ProvenOn = nil
		}
	}
	var out []dWalletProof
	for _, w := range []dWalletProof{{ID: "proof-evm", Family: "evm", Label: "EVM wallet", Address: m.Wallets.EVM},
		{ID: "proof-solana", Family: "solana", Label: "Solana wallet", Address: m.Wallets.Solana}} {
		if w.Address == "" {
			continue
		}
		for _, pr := range proven {
			if pr.Address == w.Address {
				w.ProvedAt, w.ProvenOn = pr.ProvedAt, pr.ProvenOn
			}
		}
		if err := p.proofMessage(c, &w); err != nil {
			return nil, err
		}
		if w.Address == failedAddress {
			w.Error = failed
		}
		out = append(out, w)
	}
	// The other wallets it proved (a former default, a link's own wallet):
	// each withdrawable here too.
	for _, pr := range proven {
		if pr.Address == m.Wallets.EVM || pr.Address == m.Wallets.Solana {
			continue
		}
		w := dWalletProof{ID: "proof-" + pr.Address, Family: pr.Family, Label: "Also proven (" + pr.Family + ")", Address: pr.Address,
			ProvedAt: pr.ProvedAt, ProvenOn: pr.ProvenOn}
		if err := p.proofMessage(c, &w); err != nil {
			return nil, err
		}
		if w.Address == failedAddress {
			w.Error = failed
		}
		out = append(out, w)
	}
	return out, nil
}

// proofMessage gives w the message to sign when it has one to prove: not
// proven, or a contract wallet proven on some networks (it may be proven
// on another).
func (p *Pages) proofMessage(c *gin.Context, w *dWalletProof) *apiError {
	if !w.ProvedAt.IsZero() && len(w.ProvenOn) == 0 {
		return nil
	}
	var msg struct {
		Message     string   `json:"message"`
		IssuedAt    string   `json:"issuedAt"`
		Elsewhere   bool     `json:"provenByAnotherMerchant"`
		ElsewhereOn []string `json:"provenByAnotherMerchantOn"`
		NotProvenOn []string `json:"notProvenOn"`
	}
	if _, err := p.api(c, apiCall{method: http.MethodPost, path: "/api/merchant/wallet-proofs/message",
		json: map[string]string{"address": w.Address}}, &msg); err != nil {
		return err
	}
	w.Message, w.IssuedAt, w.Elsewhere, w.ElsewhereOn, w.NotProvenOn = msg.Message, msg.IssuedAt, msg.Elsewhere, msg.ElsewhereOn, msg.NotProvenOn
	return nil
}

// walletProofWithdrawForm withdraws the proof of a wallet (DELETE
// /api/merchant/wallet-proofs/{address}).
func (p *Pages) walletProofWithdrawForm(c *gin.Context) {
	addr := strings.TrimSpace(c.PostForm("address"))
	if _, err := p.api(c, apiCall{method: http.MethodDelete, path: "/api/merchant/wallet-proofs/" + url.PathEscape(addr)}, nil); err != nil {
		p.renderSettingsProof(c, err.Status, savedSettings(c.MustGet(merchantKey).(dMerchant)), nil, nil, addr, err)
		return
	}
	back(c, "/settings", "wallet.withdrawn", "proofs")
}

// walletProofForm records a wallet's signature (POST
// /api/merchant/wallet-proofs); a refusal shows beside that wallet, with a
// message issued anew.
func (p *Pages) walletProofForm(c *gin.Context) {
	body := map[string]string{}
	for _, f := range []string{"address", "issuedAt", "signature", "network"} {
		if v := strings.TrimSpace(c.PostForm(f)); v != "" || f != "network" {
			body[f] = v
		}
	}
	var proof struct {
		Network *string `json:"network"`
	}
	if _, err := p.api(c, apiCall{method: http.MethodPost, path: "/api/merchant/wallet-proofs", json: body}, &proof); err != nil {
		p.renderSettingsProof(c, err.Status, savedSettings(c.MustGet(merchantKey).(dMerchant)), nil, nil, body["address"], err)
		return
	}
	if proof.Network != nil {
		back(c, "/settings", "wallet.proven.contract", "proofs")
		return
	}
	back(c, "/settings", "wallet.proven", "proofs")
}

func (p *Pages) settingsForm(c *gin.Context) {
	form := map[string]string{}
	for _, f := range []string{"businessName", "evm", "solana", "embedOrigins"} {
		form[f] = strings.TrimSpace(c.PostForm(f))
	}
	origins := []string{}
	for _, o := range strings.Fields(form["embedOrigins"]) {
		origins = append(origins, o)
	}
	body := map[string]any{"businessName": form["businessName"], "wallets": map[string]string{"evm": form["evm"], "solana": form["solana"]},
		"embedOrigins": origins}
	if _, err := p.api(c, apiCall{method: http.MethodPatch, path: "/api/merchant", json: body}, nil); err != nil {
		p.renderSettings(c, err.Status, form, err, nil)
		return
	}
	back(c, "/settings", "settings.saved", "")
}

// logoForm passes the uploaded file to POST /api/upload as it came (the
// API checks type and size) and makes it the logo.
func (p *Pages) logoForm(c *gin.Context) {
	form := savedSettings(c.MustGet(merchantKey).(dMerchant))
	var up struct {
		URL string `json:"url"`
	}
	if _, err := p.api(c, apiCall{method: http.MethodPost, path: "/api/upload", raw: c.Request.Body,
		contentType: c.GetHeader("Content-Type")}, &up); err != nil {
		p.renderSettings(c, err.Status, form, nil, err)
		return
	}
	if _, err := p.api(c, apiCall{method: http.MethodPatch, path: "/api/merchant/logo", json: map[string]string{"logoUrl": up.URL}}, nil); err != nil {
		// The file uploaded for it is not the logo: it would hold a place
		// of the upload quota, listed nowhere.
		if key, ok := strings.CutPrefix(up.URL, "/uploads/"); ok {
			_, _ = p.api(c, apiCall{method: http.MethodDelete, path: "/api/upload/" + key}, nil)
		}
		p.renderSettings(c, err.Status, form, nil, err)
		return
	}
	back(c, "/settings", "logo.saved", "logo")
}

// passwordForm changes the password (POST /api/auth/password); the new one
// is typed twice.
func (p *Pages) passwordForm(c *gin.Context) {
	cur, pw := c.PostForm("currentPassword"), c.PostForm("newPassword")
	if pw != c.PostForm("confirmPassword") {
		p.renderSettingsPassword(c, http.StatusBadRequest, &apiError{Status: http.StatusBadRequest, Code: "BAD_REQUEST",
			Message: "confirmPassword: differs from the new password; type the same one twice"})
		return
	}
	if _, err := p.api(c, apiCall{method: http.MethodPost, path: "/api/auth/password",
		json: map[string]string{"currentPassword": cur, "newPassword": pw}}, nil); err != nil {
		if err.sessionEnded() {
			p.clearSession(c)
			c.Redirect(http.StatusSeeOther, dashPrefix+"/login?done=expired&next="+url.QueryEscape(returnTo(c)))
			return
		}
		p.renderSettingsPassword(c, err.Status, err)
		return
	}
	back(c, "/settings", "password.changed", "security")
}

// logoutOthersForm signs out every other session of the account (POST
// /api/auth/logout-others).
func (p *Pages) logoutOthersForm(c *gin.Context) {
	if _, err := p.api(c, apiCall{method: http.MethodPost, path: "/api/auth/logout-others"}, nil); err != nil {
		p.renderSettingsPassword(c, err.Status, err)
		return
	}
	back(c, "/settings", "sessions.signedout", "security")
}

// signOutSessionForm signs out one other session of the account (POST
// /settings/sessions/{id}/logout: DELETE /api/auth/sessions/{id}).
func (p *Pages) signOutSessionForm(c *gin.Context) {
	if _, err := p.api(c, apiCall{method: http.MethodDelete, path: "/api/auth/sessions/" + url.PathEscape(c.Param("id"))}, nil); err != nil {
		p.renderSettingsPassword(c, err.Status, err)
		return
	}
	back(c, "/settings", "session.signedout", "security")
}

// renderSettingsPassword renders the settings page with the refusal of the
// password or sessions form.
// emailChangeForm asks for a change of the account's address (POST
// /api/auth/email-change): a link goes to the new address.
func (p *Pages) emailChangeForm(c *gin.Context) {
	newEmail := strings.TrimSpace(c.PostForm("newEmail"))
	if _, err := p.api(c, apiCall{method: http.MethodPost, path: "/api/auth/email-change",
		json: map[string]string{"newEmail": newEmail, "currentPassword": c.PostForm("currentPassword")}}, nil); err != nil {
		if err.sessionEnded() {
			p.clearSession(c)
			c.Redirect(http.StatusSeeOther, dashPrefix+"/login?done=expired&next="+url.QueryEscape(returnTo(c)))
			return
		}
		if err.RetryAfter != "" {
			c.Header("Retry-After", err.RetryAfter)
		}
		data := p.settingsData(c, "", nil)
		data["F"], data["EmailError"], data["NewEmail"] = savedSettings(c.MustGet(merchantKey).(dMerchant)), err, newEmail
		p.renderDash(c, err.Status, "dash_settings.html", data)
		return
	}
	back(c, "/settings", "email.change.sent", "email")
}

func (p *Pages) renderSettingsPassword(c *gin.Context, status int, e *apiError) {
	if e.RetryAfter != "" {
		c.Header("Retry-After", e.RetryAfter)
	}
	data := p.settingsData(c, "", nil)
	data["F"], data["SecurityError"] = savedSettings(c.MustGet(merchantKey).(dMerchant)), e
	p.renderDash(c, status, "dash_settings.html", data)
}

// settingsData is what every rendering of the settings page shows besides
// its forms: the wallet proofs (proofErr the refusal of the last proof of
// proofAddress) and the signed-in sessions.
func (p *Pages) settingsData(c *gin.Context, proofAddress string, proofErr *apiError) map[string]any {
	proofs, proofsErr := p.walletProofs(c, proofAddress, proofErr)
	var sessions []dSignedIn
	_, sessionsErr := p.api(c, apiCall{method: http.MethodGet, path: "/api/auth/sessions"}, &sessions)
	var contract []option // the EVM networks a contract wallet is proven on
	for _, mode := range []string{"test", "live"} {
		for _, o := range modeNetworks(mode) {
			if fam, _ := chain.FamilyOf(o.Value); fam == chain.FamilyEVM {
				contract = append(contract, o)
			}
		}
	}
	return map[string]any{"Title": "Settings", "Proofs": proofs, "ProofsError": proofsErr, "Sessions": sessions, "SessionsError": sessionsErr,
		"ContractNetworks": contract}
}

// Browser names the session's browser and system from its User-Agent
// ("Firefox on Linux"); the whole string is shown on hover.
func (s dSignedIn) Browser() string {
	ua := s.UserAgent
	browser := "Unknown browser"
	for _, b := range []struct{ mark, name string }{{"Edg/", "Edge"}, {"OPR/", "Opera"}, {"Firefox/", "Firefox"},
		{"HeadlessChrome/", "Chrome (headless)"}, {"Chromium/", "Chromium"}, {"Chrome/", "Chrome"}, {"Safari/", "Safari"},
		{"curl/", "curl"}} {
		if strings.Contains(ua, b.mark) {
			browser = b.name
			break
		}
	}
	for _, o := range []struct{ mark, name string }{{"Windows", "Windows"}, {"Android", "Android"}, {"iPhone", "iOS"},
		{"iPad", "iPadOS"}, {"CrOS", "ChromeOS"}, {"Mac OS X", "macOS"}, {"Linux", "Linux"}} {
		if strings.Contains(ua, o.mark) {
			return browser + " on " + o.name
		}
	}
	return browser
}

// emailConfirmationForm e-mails a new confirmation link (the banner's
// "Send the link again").
func (p *Pages) emailConfirmationForm(c *gin.Context) {
	if _, err := p.api(c, apiCall{method: http.MethodPost, path: "/api/auth/email-confirmation"}, nil); err != nil {
		if err.Status == http.StatusConflict && strings.Contains(err.Message, "confirmed already") {
			back(c, "/settings", "email.confirmed", "")
			return
		}
		p.dashError(c, err)
		return
	}
	back(c, "/settings", "confirmation.sent", "")
}
