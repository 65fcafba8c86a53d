package money

import (
	"encoding/json"
	"errors"
	"testing"
)

func TestParsePrice(t *testing.T) {
	cases := []struct {
		in   string
		want Amount
		err  bool
	}{
		{"0.01", 10_000, false},
		{"0.009", 0, true},
		{"0.00", 0, true},
		{"999999999.99", MaxPayment, false},
		{"1000000000.00", 0, true},
		{"999999999.991", 0, true},
		{"33.999", 0, true}, // never truncated to 33.99
		{"32.61", 32_610_000, false},
		{"32.610000", 32_610_000, false},
		{"12", 12_000_000, false},
		{"1e2", 0, true},
		{"-1", 0, true},
		{"", 0, true},
		{"1.", 0, true},
		{".5", 0, true},
		{"0x10", 0, true},
		{"NaN", 0, true},
	}
	for _, c := range cases {
		got, err := ParsePrice(c.in)
		if (err != nil) != c.err || (!c.err && got != c.want) {
			t.Errorf("ParsePrice(%q) = %v, %v; want %v, err=%v", c.in, got, err, c.want, c.err)
		}
	}
}

func TestParsePaymentPrecision(t *testing.T) {
	if a, err := ParsePayment("1.234567"); err != nil || a != 1_234_567 {
		t.Fatalf("got %v %v", a, err)
	}
	_, err := ParsePayment("1.2345678")
	var pe ErrPrecision
	if !errors.As(err, &pe) || pe.Max != 6 {
		t.Fatalf("want precision error, got %v", err)
	}
}

func TestStringAndJSON(t *testing.T) {
	cases := map[Amount]string{
		0:           "0.00",
		10_000:      "0.01",
		32_610_000:  "32.61",
		10_000_000:  "10.00",
		1_234_567:   "1.234567",
		-500_000:    "-0.50",
		MaxPayment:  "999999999.99",
		100_000_000: "100.00",
	}
	for a, want := range cases {
		if a.String() != want {
			t.Errorf("%d.String() = %s, want %s", int64(a), a.String(), want)
		}
		b, _ := json.Marshal(struct{ A Amount }{a})
		var back struct{ A Amount }
		if err := json.Unmarshal(b, &back); err != nil || back.A != a {
			t.Errorf("round trip %s: %v %v", b, back.A, err)
		}
	}
	var s struct{ A Amount }
	if err := json.Unmarshal([]byte(`{"A":"12.5"}`), &s); err != nil || s.A != 12_500_000 {
		t.Fatalf("string form: %v %v", s.A, err)
	}
}

func TestCents(t *testing.T) {
	if FromCents(3261) != 32_610_000 {
		t.Fatal("FromCents")
	}
	if c, exact := Amount(32_610_000).Cents(); c != 3261 || !exact {
		t.Fatal("Cents")
	}
	if _, exact := Amount(1).Cents(); exact {
		t.Fatal("sub-cent must not be exact")
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"0.01", "999999999.99", "1.234567", "-3", "1e5", "00012.3400", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := Parse(s, Scale)
		if err != nil {
			return
		}
		// Whatever parses must print back to a value that parses to itself.
		b, err := Parse(a.String(), Scale)
		if err != nil || b != a {
			t.Fatalf("%q -> %v -> %v (%v)", s, a, b, err)
		}
	})
}
