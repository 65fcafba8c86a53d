// Package money holds the service's only representation of an amount of
// money: an integer count of micro-units (10^-6 of a dollar, which is also one
// base unit of USDC on every supported network). Floats never appear: amounts
// are parsed from and printed to exact decimal text.
package money

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Scale is the number of decimal places an Amount carries.
const Scale = 6

// unit is 10^Scale: the number of micro-units in one whole unit.
const unit = 1_000_000

// Amount is a non-negative or negative count of micro-units. The zero value is
// zero dollars. USDC has 6 decimals on every network, so an Amount is also the
// token's raw on-chain unit count.
type Amount int64

// Bounds of a price or a payment amount (SPEC.md "Field and value bounds").
const (
	MinPayment Amount = 10_000              // 0.01
	MaxPayment Amount = 999_999_999_990_000 // 999,999,999.99
	maxAmount  Amount = math.MaxInt64 / 10  // guards parsing against overflow
	centUnits  Amount = unit / 100          // micro-units in one cent
)

// ErrSyntax reports text that is not a plain decimal number.
var ErrSyntax = errors.New("must be a decimal number such as 12.34")

// ErrPrecision reports more decimal places than allowed.
type ErrPrecision struct{ Max int }

func (e ErrPrecision) Error() string {
	return fmt.Sprintf("must have at most %d decimal places", e.Max)
}

// ErrRange reports a value outside the accepted range.
var ErrRange = errors.New("is out of range")

// Parse reads an exact decimal string ("12", "12.5", "0.000001") with at most
// maxDecimals places (at most Scale). Exponents, signs other than a leading
// "-", hex, NaN and infinities are refused; nothing is ever rounded.
func Parse(s string, maxDecimals int) (Amount, error) {
	if maxDecimals > Scale || maxDecimals < 0 {
		maxDecimals = Scale
	}
	neg := false
	if strings.HasPrefix(s, "-") {
		neg = true
		s = s[1:]
	}
	intPart, frac, hasDot := strings.Cut(s, ".")
	if intPart == "" || (hasDot && frac == "") {
		return 0, ErrSyntax
	}
	if !allDigits(intPart) || !allDigits(frac) {
		return 0, ErrSyntax
	}
	// Trailing zeros carry no precision: "1.2300" is 1.23.
	frac = strings.TrimRight(frac, "0")
	if len(frac) > maxDecimals {
		return 0, ErrPrecision{Max: maxDecimals}
	}
	intPart = strings.TrimLeft(intPart, "0")
	if len(intPart) > 13 { // > 9,999,999,999,999 whole units cannot fit below maxAmount
		return 0, ErrRange
	}
	var whole int64
	if intPart != "" {
		v, err := strconv.ParseInt(intPart, 10, 64)
		if err != nil || v > int64(maxAmount)/unit {
			return 0, ErrRange
		}
		whole = v
	}
	var micro int64
	if frac != "" {
		padded := frac + strings.Repeat("0", Scale-len(frac))
		v, err := strconv.ParseInt(padded, 10, 64)
		if err != nil {
			return 0, ErrSyntax
		}
		micro = v
	}
	a := Amount(whole*unit + micro)
	if a > maxAmount {
		return 0, ErrRange
	}
	if neg {
		a = -a
	}
	return a, nil
}

// ParsePrice reads a price: at most 2 decimals, 0.01 to 999,999,999.99.
func ParsePrice(s string) (Amount, error) {
	a, err := Parse(s, 2)
	if err != nil {
		return 0, err
	}
	if a < MinPayment || a > MaxPayment {
		return 0, errRangeText
	}
	return a, nil
}

// ParsePayment reads an amount paid in tokens: at most 6 decimals (USDC's
// precision), 0.01 to 999,999,999.99.
func ParsePayment(s string) (Amount, error) {
	a, err := Parse(s, Scale)
	if err != nil {
		return 0, err
	}
	if a < MinPayment || a > MaxPayment {
		return 0, errRangeText
	}
	return a, nil
}

var errRangeText = fmt.Errorf("must be between 0.01 and 999999999.99: %w", ErrRange)

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// FromCents converts an integer number of cents.
func FromCents(c int64) Amount { return Amount(c) * centUnits }

// Cents returns the amount in whole cents and whether it had no finer part.
func (a Amount) Cents() (int64, bool) { return int64(a / centUnits), a%centUnits == 0 }

// Units returns the raw micro-unit count (USDC base units).
func (a Amount) Units() int64 { return int64(a) }

// String prints the exact decimal value with at least two decimals and no
// trailing zeros beyond them: 32.61, 10.00, 1.234567, -0.50.
func (a Amount) String() string {
	neg := a < 0
	v := int64(a)
	if neg {
		v = -v
	}
	whole := v / unit
	frac := fmt.Sprintf("%06d", v%unit)
	frac = strings.TrimRight(frac, "0")
	for len(frac) < 2 {
		frac += "0"
	}
	s := strconv.FormatInt(whole, 10) + "." + frac
	if neg {
		s = "-" + s
	}
	return s
}

// MarshalJSON encodes the amount as an exact JSON number (32.61).
func (a Amount) MarshalJSON() ([]byte, error) { return []byte(a.String()), nil }

// UnmarshalJSON decodes a JSON number or numeric string with up to six
// decimals, exactly.
func (a *Amount) UnmarshalJSON(b []byte) error {
	s := string(b)
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		s = s[1 : len(s)-1]
	}
	v, err := Parse(s, Scale)
	if err != nil {
		return err
	}
	*a = v
	return nil
}

// Value stores the amount as a BIGINT of micro-units.
func (a Amount) Value() (driver.Value, error) { return int64(a), nil }

// Scan reads a BIGINT of micro-units.
func (a *Amount) Scan(src any) error {
	switch v := src.(type) {
	case int64:
		*a = Amount(v)
	case nil:
		*a = 0
	case []byte:
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil {
			return fmt.Errorf("money: scan %q: %w", v, err)
		}
		*a = Amount(n)
	default:
		return fmt.Errorf("money: cannot scan %T", src)
	}
	return nil
}

// Add returns a+b, refusing overflow.
func (a Amount) Add(b Amount) (Amount, error) {
	if (b > 0 && a > math.MaxInt64-b) || (b < 0 && a < math.MinInt64-b) {
		return 0, ErrRange
	}
	return a + b, nil
}
