package api

import (
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/paygate/paygate/models"
)

func (s *Server) registerKYB(g *gin.RouterGroup) {
	s.Handle(g, http.MethodPost, "/kyb", AuthSession, s.submitKYB)
	s.Handle(g, http.MethodGet, "/kyb", AuthSession, s.getKYB)
	s.Handle(g, http.MethodPatch, "/kyb", AuthSession, s.patchKYB)
}

// kybRequest carries SPEC.md's KYB fields; pointers tell PATCH which were sent.
type kybRequest struct {
	BusinessName          *string `json:"businessName"`
	BusinessType          *string `json:"businessType"`
	RegistrationNumber    *string `json:"registrationNumber"`
	Country               *string `json:"country"`
	Website               *string `json:"website"`
	ContactName           *string `json:"contactName"`
	ContactEmail          *string `json:"contactEmail"`
	ContactRole           *string `json:"contactRole"`
	ProductDescription    *string `json:"productDescription"`
	ExpectedMonthlyVolume *string `json:"expectedMonthlyVolume"`
	PrimaryUseCase        *string `json:"primaryUseCase"`
}

// kybFields validates the fields that were sent and returns them by column.
// On submission (full) the identifying fields are required.
func kybFields(v *checker, r kybRequest, full bool) map[string]any {
	out := map[string]any{}
	str := func(field, column string, p *string, required bool, max int) {
		if p == nil {
			if full && required {
				v.Add(field, "is required")
			}
			return
		}
		out[column] = v.text(field, *p, required, max)
	}
	str("businessName", "business_name", r.BusinessName, true, 200)
	str("businessType", "business_type", r.BusinessType, true, 100)
	str("registrationNumber", "registration_number", r.RegistrationNumber, false, 100)
	str("contactName", "contact_name", r.ContactName, true, 200)
	str("contactRole", "contact_role", r.ContactRole, false, 100)
	str("productDescription", "product_description", r.ProductDescription, false, 2000)
	str("expectedMonthlyVolume", "expected_monthly_volume", r.ExpectedMonthlyVolume, false, 100)
	str("primaryUseCase", "primary_use_case", r.PrimaryUseCase, false, 500)
	if r.Country != nil || full {
		cv := ""
		if r.Country != nil {
			cv = *r.Country
		}
		out["country"] = v.country("country", cv, true)
	}
	if r.ContactEmail != nil || full {
		ev := ""
		if r.ContactEmail != nil {
			ev = *r.ContactEmail
		}
		out["contact_email"] = v.email("contactEmail", ev, true)
	}
	if r.Website != nil {
		out["website"] = v.webURL("website", *r.Website)
	}
	return out
}

func (s *Server) submitKYB(c *gin.Context) {
	var req kybRequest
	if err := bindJSON(c, &req); err != nil {
		fail(c, err)
		return
	}
	var v checker
	f := kybFields(&v, req, true)
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	get := func(k string) string { s, _ := f[k].(string); return s }
	app := &models.KYBApplication{MerchantID: principal(c).MerchantID,
		BusinessName: get("business_name"), BusinessType: get("business_type"), RegistrationNumber: get("registration_number"),
		Country: get("country"), Website: get("website"), ContactName: get("contact_name"), ContactEmail: get("contact_email"),
		ContactRole: get("contact_role"), ProductDescription: get("product_description"),
		ExpectedMonthlyVolume: get("expected_monthly_volume"), PrimaryUseCase: get("primary_use_case")}
	submit := s.Store.SubmitKYB
	if s.confirmationsOn() {
		submit = s.Store.SubmitConfirmedKYB
	}
	if err := submit(c.Request.Context(), app); err != nil {
		fail(c, err)
		return
	}
	respondMessage(c, http.StatusCreated, "KYB application submitted; you will be notified by email when it is reviewed")
}

type kybJSON struct {
	ID                    string `json:"id"`
	Status                string `json:"status"`
	BusinessName          string `json:"businessName"`
	BusinessType          string `json:"businessType"`
	RegistrationNumber    string `json:"registrationNumber"`
	Country               string `json:"country"`
	Website               string `json:"website"`
	ContactName           string `json:"contactName"`
	ContactEmail          string `json:"contactEmail"`
	ContactRole           string `json:"contactRole"`
	ProductDescription    string `json:"productDescription"`
	ExpectedMonthlyVolume string `json:"expectedMonthlyVolume"`
	PrimaryUseCase        string `json:"primaryUseCase"`
	ReviewNote            string `json:"reviewNote,omitempty"`
	SubmittedAt           Time   `json:"submittedAt"`
	ReviewedAt            *Time  `json:"reviewedAt"`
	UpdatedAt             Time   `json:"updatedAt"`
}

func toKYBJSON(a *models.KYBApplication) kybJSON {
	return kybJSON{ID: a.ID, Status: a.Status, BusinessName: a.BusinessName, BusinessType: a.BusinessType,
		RegistrationNumber: a.RegistrationNumber, Country: a.Country, Website: a.Website, ContactName: a.ContactName,
		ContactEmail: a.ContactEmail, ContactRole: a.ContactRole, ProductDescription: a.ProductDescription,
		ExpectedMonthlyVolume: a.ExpectedMonthlyVolume, PrimaryUseCase: a.PrimaryUseCase, ReviewNote: a.ReviewNote,
		SubmittedAt: ts(a.SubmittedAt), ReviewedAt: tsPtr(a.ReviewedAt), UpdatedAt: ts(a.UpdatedAt)}
}

func (s *Server) getKYB(c *gin.Context) {
	app, err := s.Store.KYB(c.Request.Context(), principal(c).MerchantID)
	if err != nil {
		fail(c, err)
		return
	}
	respond(c, http.StatusOK, toKYBJSON(app))
}

func (s *Server) patchKYB(c *gin.Context) {
	var req kybRequest
	if err := bindJSON(c, &req); err != nil {
		fail(c, err)
		return
	}
	var v checker
	f := kybFields(&v, req, false)
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	app, err := s.Store.UpdateKYB(c.Request.Context(), principal(c).MerchantID, f)
	if err != nil {
		fail(c, err)
		return
	}
	respond(c, http.StatusOK, toKYBJSON(app))
}
