// Package checkout is the customer-facing checkout: tax quotes, session
// creation (a database row, then its workflow), and the calls that reach a
// running session's workflow (submit, wallet progress, cancel). It also
// repairs sessions whose workflow never started.
package checkout

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/auth"
	"github.com/paygate/paygate/money"
)

// TaxProvider computes the tax on a subtotal for a customer's country.
type TaxProvider interface {
	Tax(ctx context.Context, country string, subtotalCents int64) (taxCents int64, err error)
}

// RateTable is the built-in tax provider: a rate per country in basis
// points (1900 = 19 %); countries not listed pay none.
type RateTable map[string]int64

// DefaultRates are VAT standard rates of a few countries, for the sandbox.
// Production deployments set TAX_RATES or plug in a real provider.
func DefaultRates() RateTable {
	return RateTable{"DE": 1900, "FR": 2000, "GB": 2000, "NL": 2100, "ES": 2100, "IT": 2200, "AT": 2000, "IE": 2300,
		"SE": 2500, "DK": 2500, "FI": 2550, "BE": 2100, "PT": 2300, "PL": 2300, "CH": 810, "NO": 2500, "AU": 1000,
		"NZ": 1500, "JP": 1000, "CA": 500, "SG": 900, "IN": 1800}
}

// ParseRates reads "DE=1900,FR=2000" (basis points) over the defaults.
func ParseRates(s string) (RateTable, error) {
	t := DefaultRates()
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		cc, bps, ok := strings.Cut(part, "=")
		v, err := strconv.ParseInt(strings.TrimSpace(bps), 10, 64)
		cc = strings.ToUpper(strings.TrimSpace(cc))
		if !ok || err != nil || len(cc) != 2 || v < 0 || v > 10000 {
			return nil, fmt.Errorf("TAX_RATES: %q must be CC=basis points (0 to 10000)", part)
		}
		t[cc] = v
	}
	return t, nil
}

// Tax rounds half up to the cent.
func (t RateTable) Tax(_ context.Context, country string, subtotalCents int64) (int64, error) {
	return (subtotalCents*t[country] + 5000) / 10000, nil
}

// Quote is a signed tax calculation.
type Quote struct {
	LinkID        string `json:"linkId"`
	Network       string `json:"network"`
	Country       string `json:"country"`
	SubtotalCents int64  `json:"subtotalCents"`
	TaxCents      int64  `json:"taxCents"`
	TotalCents    int64  `json:"totalCents"`
	CalculationID string `json:"calculationId"`
	ExpiresAt     int64  `json:"exp"` // Unix seconds
}

// QuoteLifetime is how long a quote token is accepted.
const QuoteLifetime = 15 * time.Minute

// taxTimeout bounds the tax provider (504 TIMEOUT past it).
const taxTimeout = 5 * time.Second

// quote computes and signs a quote.
func (s *Service) quote(ctx context.Context, linkID, network, country string, subtotalCents int64) (Quote, string, error) {
	tctx, cancel := context.WithTimeout(ctx, taxTimeout)
	defer cancel()
	type answer struct {
		tax int64
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		tax, err := s.Tax.Tax(tctx, country, subtotalCents)
		ch <- answer{tax, err}
	}()
	var a answer
	select {
	case a = <-ch:
	case <-tctx.Done():
		a.err = tctx.Err()
	}
	if a.err != nil {
		if errors.Is(a.err, context.DeadlineExceeded) {
			return Quote{}, "", apperr.New(apperr.ErrTimeout, "tax calculation timed out")
		}
		return Quote{}, "", fmt.Errorf("tax provider: %w", a.err)
	}
	if total := money.FromCents(subtotalCents + a.tax); total > money.MaxPayment {
		// The price is within bounds, its tax takes the total past what a
		// payment may be (a session could not be opened for it).
		return Quote{}, "", apperr.Invalid("linkId", fmt.Sprintf("with tax the total due is %s, above the most a payment may be (%s)",
			total, money.MaxPayment))
	}
	q := Quote{LinkID: linkID, Network: network, Country: country, SubtotalCents: subtotalCents, TaxCents: a.tax,
		TotalCents: subtotalCents + a.tax, CalculationID: "calc_" + strings.ReplaceAll(uuid.NewString(), "-", ""),
		ExpiresAt: s.now().Add(QuoteLifetime).Unix()}
	tok, err := signQuote(s.Hasher, q)
	return q, tok, err
}

func signQuote(h *auth.Hasher, q Quote) (string, error) {
	body, err := json.Marshal(q)
	if err != nil {
		return "", err
	}
	sig := h.Sign("quote", body)
	return base64.RawURLEncoding.EncodeToString(body) + "." + base64.RawURLEncoding.EncodeToString(sig), nil
}

// verifyQuote checks a quote token's signature and expiry.
func verifyQuote(h *auth.Hasher, token string, now time.Time) (Quote, error) {
	body64, sig64, ok := strings.Cut(token, ".")
	if !ok {
		return Quote{}, errors.New("is not a quote token")
	}
	body, err1 := base64.RawURLEncoding.DecodeString(body64)
	sig, err2 := base64.RawURLEncoding.DecodeString(sig64)
	if err1 != nil || err2 != nil {
		return Quote{}, errors.New("is not a quote token")
	}
	if !h.Verify("quote", body, sig) {
		return Quote{}, errors.New("has an invalid signature")
	}
	var q Quote
	if err := json.Unmarshal(body, &q); err != nil {
		return Quote{}, errors.New("is not a quote token")
	}
	if now.Unix() > q.ExpiresAt {
		return Quote{}, errors.New("has expired: request a new quote")
	}
	return q, nil
}
