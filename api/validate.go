package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/mail"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/google/uuid"
	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/checkout"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/money"
	"golang.org/x/text/language"
)

// checker collects `field: reason` problems of one request.
type checker struct{ apperr.ValidationError }

func (v *checker) err() error { return v.ValidationError.Err() }

// text checks a string's length in characters; required refuses "".
func (v *checker) text(field, s string, required bool, max int) string {
	s = strings.TrimSpace(s)
	switch {
	case s == "" && required:
		v.Add(field, "is required")
	case utf8.RuneCountInString(s) > max:
		v.Add(field, fmt.Sprintf("must be at most %d characters", max))
	case !utf8.ValidString(s):
		v.Add(field, "must be valid UTF-8")
	case strings.ContainsFunc(s, isControl):
		v.Add(field, "must not contain control characters")
	}
	return s
}

// isControl refuses NUL (which PostgreSQL cannot store) and the other C0
// controls except tab and newlines, which free text may hold.
func isControl(r rune) bool {
	return (r < 0x20 && r != '\t' && r != '\n' && r != '\r') || r == 0x7f
}

// MaxEmailLength is SPEC.md's bound: under 320 characters.
const MaxEmailLength = 319

// ParseEmail validates an e-mail address and returns it lower-cased.
func ParseEmail(s string) (string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", errors.New("is required")
	}
	if len(s) > MaxEmailLength {
		return "", errors.New("must be under 320 characters")
	}
	a, err := mail.ParseAddress(s)
	if err != nil || a.Address != s || a.Name != "" {
		return "", errors.New("must be a valid email address")
	}
	local, domain, ok := strings.Cut(s, "@")
	if !ok || local == "" || len(local) > 64 || !strings.Contains(domain, ".") ||
		strings.HasPrefix(domain, ".") || strings.HasSuffix(domain, ".") || strings.ContainsAny(domain, "[]") {
		return "", errors.New("must be a valid email address")
	}
	return strings.ToLower(s), nil
}

func (v *checker) email(field, s string, required bool) string {
	if strings.TrimSpace(s) == "" && !required {
		return ""
	}
	e, err := ParseEmail(s)
	if err != nil {
		v.Add(field, err.Error())
	}
	return e
}

// CheckCustomer checks a paying customer's details as POST
// /api/checkout/session does and returns them normalised (trimmed, the
// e-mail lower-cased, the country upper-cased); each problem is added to v
// under prefix and the field's name ("customer." in the API; the hosted
// page's form names its fields without it).
func CheckCustomer(v *apperr.ValidationError, prefix string, c checkout.Customer) checkout.Customer {
	var ck checker
	out := checkout.Customer{
		Name:    ck.text(prefix+"name", c.Name, false, 200),
		Email:   ck.email(prefix+"email", c.Email, true),
		Address: ck.text(prefix+"address", c.Address, false, 500),
		Country: ck.country(prefix+"country", c.Country, true),
	}
	v.Fields = append(v.Fields, ck.Fields...)
	return out
}

// country checks an ISO 3166-1 alpha-2 code and upper-cases it.
func (v *checker) country(field, s string, required bool) string {
	s = strings.ToUpper(strings.TrimSpace(s))
	if s == "" {
		if required {
			v.Add(field, "is required")
		}
		return ""
	}
	if !IsCountry(s) {
		v.Add(field, "must be an ISO 3166-1 alpha-2 country code such as US")
	}
	return s
}

// IsCountry reports whether code is an ISO 3166-1 alpha-2 country, upper
// case ("US"; not "XX", "EU" or "us").
func IsCountry(code string) bool {
	if len(code) != 2 || strings.ToUpper(code) != code {
		return false
	}
	r, err := language.ParseRegion(code)
	return err == nil && r.IsCountry() && r.String() == code
}

// amount parses an exact decimal amount (JSON number or numeric string).
// maxDecimals is 2 for prices, 6 for amounts paid in USDC.
func (v *checker) amount(field string, raw json.RawMessage, required bool, maxDecimals int) money.Amount {
	if len(raw) == 0 || string(raw) == "null" {
		if required {
			v.Add(field, "is required")
		}
		return 0
	}
	s := string(raw)
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		s = s[1 : len(s)-1]
	}
	var a money.Amount
	var err error
	if maxDecimals == 2 {
		a, err = money.ParsePrice(s)
	} else {
		a, err = money.ParsePayment(s)
	}
	if err != nil {
		if errors.Is(err, money.ErrRange) {
			v.Add(field, "must be between 0.01 and 999999999.99")
		} else {
			v.Add(field, err.Error())
		}
	}
	return a
}

// network checks a network name against the caller's mode: an unknown name
// and a network of the other mode are both 400 (SPEC.md Errors rule 2).
func (v *checker) network(field, name string, mode models.Mode) string {
	name = strings.TrimSpace(name)
	allowed := networksOf(mode)
	if name == "" {
		v.Add(field, "is required")
		return ""
	}
	m, ok := chain.ModeOf(name)
	switch {
	case !ok:
		v.Add(field, "must be one of "+strings.Join(allowed, ", "))
	case string(m) != string(mode):
		v.Add(field, fmt.Sprintf("%s is a %s network and cannot be used in %s mode (use a %s key)", name, m, mode, m))
	}
	return name
}

// networksOf lists the network names of a mode, sorted.
func networksOf(mode models.Mode) []string {
	var out []string
	for _, n := range []string{"base", "ethereum", "polygon", "solana", "base_sepolia", "eth_sepolia", "solana_devnet"} {
		if m, _ := chain.ModeOf(n); string(m) == string(mode) {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// address validates a wallet address for a network's family.
func (v *checker) address(field, network, s string) string {
	fam, ok := chain.FamilyOf(network)
	if !ok {
		return s
	}
	return v.addressOfFamily(field, fam, s)
}

func (v *checker) addressOfFamily(field string, fam chain.Family, s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		v.Add(field, "is required")
		return ""
	}
	a, err := chain.ParseAddress(fam, s)
	if err != nil {
		v.Add(field, err.Error())
		return s
	}
	return a
}

// anyAddress accepts an EVM or a Solana address (customer wallets).
func (v *checker) anyAddress(field, s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return ""
	}
	if a, err := chain.ParseAddress(chain.FamilyEVM, s); err == nil {
		return a
	}
	if a, err := chain.ParseAddress(chain.FamilySolana, s); err == nil {
		return a
	}
	v.Add(field, "must be an EVM (0x + 40 hex) or Solana (base58, 32 bytes) address")
	return s
}

// txHash validates a transaction hash for a network's family.
func (v *checker) txHash(field, network, s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		v.Add(field, "is required")
		return ""
	}
	fam, ok := chain.FamilyOf(network)
	if !ok {
		return s
	}
	h, err := chain.ParseTxHash(fam, s)
	if err != nil {
		v.Add(field, err.Error())
		return s
	}
	return h
}

// uuidField validates an id given in a body or query.
func (v *checker) uuidField(field, s string, required bool) string {
	s = strings.TrimSpace(s)
	if s == "" {
		if required {
			v.Add(field, "is required")
		}
		return ""
	}
	u, err := uuid.Parse(s)
	if err != nil || len(s) != 36 {
		v.Add(field, "must be a UUID")
		return s
	}
	return u.String()
}

// webURL validates an absolute http(s) URL a browser or merchant will follow.
func (v *checker) webURL(field, s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return ""
	}
	if len(s) >= 2048 {
		v.Add(field, "must be under 2048 characters")
		return s
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
		v.Add(field, "must be an absolute http(s) URL")
	}
	return s
}

// page reads `limit` (1 to 100, default 25) and `starting_after` (a UUID).
func (v *checker) page(q func(string) string) models.Page {
	p := models.Page{Limit: 25}
	if raw := q("limit"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > 100 {
			v.Add("limit", "must be an integer between 1 and 100")
		} else {
			p.Limit = n
		}
	}
	p.StartingAfter = v.uuidField("starting_after", q("starting_after"), false)
	return p
}

// timeParam reads an ISO 8601 timestamp from the query.
func (v *checker) timeParam(field, raw string) *time.Time {
	if raw == "" {
		return nil
	}
	t, err := time.Parse(time.RFC3339Nano, raw)
	if err != nil {
		if d, derr := time.Parse("2006-01-02", raw); derr == nil {
			t = d
		} else {
			v.Add(field, "must be an ISO 8601 date-time such as 2026-01-31T12:00:00Z")
			return nil
		}
	}
	t = t.UTC()
	// SQLite compares times as text: a year past 9999 in UTC (9999-12-31
	// at -23:59) would sort before every row and invert the filter.
	if t.Year() < 1 || t.Year() > 9999 {
		v.Add(field, "must be between the years 0001 and 9999 in UTC")
		return nil
	}
	return &t
}

// oneOf checks s is one of the allowed values.
func (v *checker) oneOf(field, s string, required bool, allowed ...string) string {
	if s == "" {
		if required {
			v.Add(field, "is required")
		}
		return ""
	}
	for _, a := range allowed {
		if s == a {
			return s
		}
	}
	v.Add(field, "must be one of "+strings.Join(allowed, ", "))
	return s
}

// pathID validates the :id path parameter; a malformed id is a 400.
func pathID(raw string) (string, error) {
	var v checker
	id := v.uuidField("id", raw, true)
	return id, v.err()
}

// uint256 parses a non-negative decimal integer of at most 78 digits ("0"
// when optional and empty).
func (v *checker) uint256(field, s string, required bool) *big.Int {
	if s == "" {
		if required {
			v.Add(field, "is required")
		}
		return new(big.Int)
	}
	// Length and digits first: parsing a decimal string costs time that
	// grows faster than its length, and a body may hold a megabyte of it.
	if len(s) > 78 || !allDigits(s) {
		v.Add(field, "must be a non-negative integer in decimal of at most 78 digits")
		return new(big.Int)
	}
	n, _ := new(big.Int).SetString(s, 10)
	if n.BitLen() > 256 {
		// 78 digits reach past 2^256: ABI packing would wrap such a
		// value round (a validBefore far in the future becoming a past
		// time on chain).
		v.Add(field, "must be below 2^256")
		return new(big.Int)
	}
	return n
}

func allDigits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s != ""
}

// hexBytes parses 0x-prefixed hex of minLen to maxLen bytes.
func (v *checker) hexBytes(field, s string, minLen, maxLen int) []byte {
	if s == "" {
		v.Add(field, "is required")
		return nil
	}
	b, err := hexutil.Decode(s)
	if err != nil || len(b) < minLen || len(b) > maxLen {
		v.Add(field, fmt.Sprintf("must be 0x-prefixed hex of %d to %d bytes", minLen, maxLen))
		return nil
	}
	return b
}
