package checkout

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/auth"
)

func TestRateTableRoundsHalfUp(t *testing.T) {
	r := RateTable{"DE": 1900, "XX": 1}
	cases := []struct {
		country string
		sub     int64
		want    int64
	}{
		{"DE", 2500, 475}, {"DE", 1, 0}, {"DE", 3, 1}, // 0.57 cent rounds to 1
		{"XX", 5000, 1}, {"XX", 4999, 0}, {"US", 123456, 0},
	}
	for _, c := range cases {
		if got, _ := r.Tax(context.Background(), c.country, c.sub); got != c.want {
			t.Errorf("tax(%s, %d) = %d, want %d", c.country, c.sub, got, c.want)
		}
	}
}

func TestParseRates(t *testing.T) {
	r, err := ParseRates("de=1000, US=725")
	if err != nil || r["DE"] != 1000 || r["US"] != 725 || r["FR"] != 2000 {
		t.Fatalf("%v %v", r, err)
	}
	for _, bad := range []string{"DE", "DE=x", "DEU=10", "DE=10001", "DE=-1"} {
		if _, err := ParseRates(bad); err == nil || !strings.HasPrefix(err.Error(), "TAX_RATES:") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestQuoteTokenSignature(t *testing.T) {
	h := auth.NewHasher(strings.Repeat("s", 32))
	now := time.Now()
	q := Quote{LinkID: "l", Network: "base_sepolia", Country: "DE", SubtotalCents: 2500, TaxCents: 475, TotalCents: 2975,
		CalculationID: "calc_1", ExpiresAt: now.Add(QuoteLifetime).Unix()}
	tok, err := signQuote(h, q)
	if err != nil {
		t.Fatal(err)
	}
	got, err := verifyQuote(h, tok, now)
	if err != nil || got != q {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	// A changed total, another server's key, an expired quote: all refused.
	body, sig, _ := strings.Cut(tok, ".")
	tampered := strings.Replace(body, "A", "B", 1) + "." + sig
	if _, err := verifyQuote(h, tampered, now); err == nil {
		t.Fatal("tampered quote accepted")
	}
	if _, err := verifyQuote(auth.NewHasher(strings.Repeat("o", 32)), tok, now); err == nil {
		t.Fatal("quote from another key accepted")
	}
	if _, err := verifyQuote(h, tok, now.Add(QuoteLifetime+time.Second)); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("expired quote: %v", err)
	}
	for _, junk := range []string{"", "abc", "a.b", "!!.??"} {
		if _, err := verifyQuote(h, junk, now); err == nil {
			t.Errorf("%q accepted", junk)
		}
	}
}

type slowTax struct{}

func (slowTax) Tax(ctx context.Context, _ string, _ int64) (int64, error) {
	<-ctx.Done()
	return 0, ctx.Err()
}

func TestQuoteTimeoutIs504(t *testing.T) {
	s := &Service{Hasher: auth.NewHasher(strings.Repeat("s", 32)), Tax: slowTax{}}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, _, err := s.quote(ctx, "l", "base_sepolia", "DE", 100)
	if err == nil || !strings.Contains(err.Error(), "tax calculation timed out") {
		t.Fatalf("want a timeout, got %v", err)
	}
}

// TestQuoteTotalWithinAPayment: a price within bounds whose tax takes the
// total past the most a payment may be is refused on the quote (400 on
// linkId): no session could be opened for it. At the bound it is quoted.
func TestQuoteTotalWithinAPayment(t *testing.T) {
	s := &Service{Hasher: auth.NewHasher(strings.Repeat("s", 32)), Tax: DefaultRates()}
	top := int64(99_999_999_999) // 999,999,999.99
	if _, _, err := s.quote(context.Background(), "l", "base_sepolia", "DE", top); !errors.Is(err, apperr.ErrBadRequest) ||
		!strings.Contains(err.Error(), "above the most a payment may be") {
		t.Fatalf("a total past the bound: %v", err)
	}
	if q, _, err := s.quote(context.Background(), "l", "base_sepolia", "US", top); err != nil || q.TotalCents != top {
		t.Fatalf("a total at the bound: %+v %v", q, err)
	}
}
