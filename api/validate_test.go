package api

import (
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
