package api

import (
	"math/big"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/paygate/paygate/apperr"
)

func TestParseEmail(t *testing.T) {
	good := map[string]string{"a@b.co": "a@b.co", "Ann.Lee+tag@Shop.Example.com": "ann.lee+tag@shop.example.com"}
	for in, want := range good {
		if got, err := ParseEmail(in); err != nil || got != want {
			t.Errorf("ParseEmail(%q) = %q, %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "a", "a@b", "@b.co", "a@.co", "a@b.co.", "a b@c.co", "<a@b.co>", "a@[127.0.0.1]", strings.Repeat("a", 65) + "@b.co"} {
		if _, err := ParseEmail(bad); err == nil {
			t.Errorf("ParseEmail(%q) accepted", bad)
		}
	}
}

func TestErrorStatusMapping(t *testing.T) {
	cases := []struct {
		err    error
		status int
		code   string
	}{
		{apperr.Invalid("x", "y"), http.StatusBadRequest, CodeBadRequest},
		{apperr.New(apperr.ErrUnauthorized, "u"), http.StatusUnauthorized, CodeUnauthorized},
		{apperr.Forbidden("f"), http.StatusForbidden, CodeForbidden},
		{apperr.NotFound(), http.StatusNotFound, CodeNotFound},
		{apperr.Conflict("c"), http.StatusConflict, CodeConflict},
		{apperr.New(apperr.ErrTimeout, "t"), http.StatusGatewayTimeout, CodeTimeout},
		{apperr.Unavailable("u", 5*time.Second), http.StatusServiceUnavailable, CodeUnavailable},
		{http.ErrHandlerTimeout, http.StatusInternalServerError, CodeInternal},
	}
	for _, c := range cases {
		if s, code := ErrorStatus(c.err); s != c.status || code != c.code {
			t.Errorf("%v -> %d %s, want %d %s", c.err, s, code, c.status, c.code)
		}
	}
	v := &apperr.ValidationError{}
	v.Add("amount", "is required")
	v.Add("network", "must be one of base")
	if v.Error() != "amount: is required; network: must be one of base" {
		t.Fatal(v.Error())
	}
}

func FuzzParseEmail(f *testing.F) {
	for _, s := range []string{"a@b.co", "x", "a@b", "Ann <a@b.co>", "a@@b.co", "\x00@b.co"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e, err := ParseEmail(s)
		if err != nil {
			return
		}
		if len(e) > MaxEmailLength || !strings.Contains(e, "@") || strings.ToLower(e) != e {
			t.Fatalf("accepted %q as %q", s, e)
		}
		// Normalising is idempotent.
		if again, err := ParseEmail(e); err != nil || again != e {
			t.Fatalf("%q -> %q -> %q (%v)", s, e, again, err)
		}
	})
}

func TestUint256(t *testing.T) {
	// The largest uint256 is accepted; 2^256 (78 digits too) would be
	// packed wrapped round to 0 (a validBefore far ahead becoming a past
	// time on chain, the relayer's transaction reverting on its gas).
	maxUint := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 256), big.NewInt(1)).String()
	wraps := new(big.Int).Add(new(big.Int).Lsh(big.NewInt(1), 256), big.NewInt(5)).String()
	max := strings.Repeat("9", 78)
	for in, ok := range map[string]bool{"0": true, "1700000000": true, maxUint: true, wraps: false, max: false, max + "9": false, "-1": false, "+1": false,
		"1e3": false, " 1": false, "0x10": false, strings.Repeat("1", 1<<20): false} {
		var v checker
		n := v.uint256("validBefore", in, true)
		if got := v.err() == nil; got != ok {
			t.Errorf("uint256(%.20q) accepted = %v, want %v", in, got, ok)
		}
		if ok && n.String() != in {
			t.Errorf("uint256(%.20q) = %s", in, n)
		}
	}
}

func TestCountry(t *testing.T) {
	for in, want := range map[string]string{"US": "US", "de": "DE", " fr ": "FR"} {
		var v checker
		if got := v.country("country", in, true); got != want || v.err() != nil {
			t.Errorf("country(%q) = %q, %v", in, got, v.err())
		}
	}
	for _, bad := range []string{"XX", "ZZ", "EU", "USA", "U", "1A", "Ü1"} {
		var v checker
		if v.country("country", bad, true); v.err() == nil {
			t.Errorf("country(%q) accepted", bad)
		}
	}
}
