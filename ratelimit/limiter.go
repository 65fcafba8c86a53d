package ratelimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
)

// Config selects what the Limiter enforces.
type Config struct {
	// Enabled turns limiting on. When false the middleware passes every
	// request through and RecordAuthFailure records nothing.
	Enabled bool
	// ExemptLoopback exempts callers whose client address is a loopback
	// address (SPEC.md: "Limits are off on localhost"): no limits, no block,
	// no headers. DefaultConfig sets it; tests turn it off.
	ExemptLoopback bool
	// Tiers are checked in order; nil means DefaultTiers().
	Tiers []Tier
	// IPv6PrefixBits, when between 1 and 127, limits IPv6 clients per
	// network of that prefix length instead of per address: an end site is
	// given a /64 (or more), so a client rotating addresses inside it would
	// otherwise get a fresh budget, and escape the brute-force block, with
	// every address. 0 or 128 limits per address. DefaultConfig sets
	// DefaultIPv6PrefixBits.
	IPv6PrefixBits int
	// AccountFailures, when its Limit is positive, limits failed sign-ins
	// per account (the e-mail address) as the auth-failure tier limits them
	// per address, so that an attacker spreading guesses over many
	// addresses still gets only Limit guesses per Window at one account.
	// Fed by RecordLoginFailure, enforced by AllowAccount. Its Match is
	// ignored.
	AccountFailures Tier
}

// DefaultIPv6PrefixBits groups IPv6 clients per /64, the smallest network an
// end site is normally given.
const DefaultIPv6PrefixBits = 64

// TierAccountFailures names the per-account failed sign-in log.
const TierAccountFailures = "account_failures"

// DefaultAccountFailures is the per-account tier of DefaultConfig: SPEC.md's
// auth-failure figures (10 in 5 minutes) applied to one account.
func DefaultAccountFailures() Tier {
	return Tier{Name: TierAccountFailures, Limit: 10, Window: 5 * time.Minute}
}

// DefaultConfig is the production configuration: enabled, SPEC.md's tiers,
// loopback exempt, IPv6 clients per /64, failed sign-ins limited per account.
func DefaultConfig() Config {
	return Config{Enabled: true, ExemptLoopback: true, Tiers: DefaultTiers(), IPv6PrefixBits: DefaultIPv6PrefixBits,
		AccountFailures: DefaultAccountFailures()}
}

// Validate reports the first problem with the configuration.
func (c Config) Validate() error {
	seen := map[string]bool{}
	auth := 0
	for i, t := range c.Tiers {
		switch {
		case t.Name == "" || strings.ContainsAny(t.Name, "{}"):
			return fmt.Errorf("ratelimit: tier %d: name %q must be non-empty without '{' or '}'", i, t.Name)
		case seen[t.Name]:
			return fmt.Errorf("ratelimit: tier %q: duplicate name", t.Name)
		case t.Limit <= 0:
			return fmt.Errorf("ratelimit: tier %q: limit must be positive", t.Name)
		case t.Window < time.Millisecond || t.Window%time.Millisecond != 0:
			return fmt.Errorf("ratelimit: tier %q: window must be a whole number of milliseconds", t.Name)
		case !t.AuthFailures && t.Match == nil:
			return fmt.Errorf("ratelimit: tier %q: Match is required", t.Name)
		}
		seen[t.Name] = true
		if t.AuthFailures {
			auth++
		}
	}
	if auth > 1 {
		return errors.New("ratelimit: at most one tier may count auth failures")
	}
	if c.IPv6PrefixBits < 0 || c.IPv6PrefixBits > 128 {
		return fmt.Errorf("ratelimit: IPv6PrefixBits %d out of range 0..128", c.IPv6PrefixBits)
	}
	if a := c.AccountFailures; a.Limit != 0 {
		switch {
		case a.Limit < 0:
			return errors.New("ratelimit: account tier: limit must be positive")
		case a.Name == "" || strings.ContainsAny(a.Name, "{}"):
			return fmt.Errorf("ratelimit: account tier: name %q must be non-empty without '{' or '}'", a.Name)
		case a.Window < time.Millisecond || a.Window%time.Millisecond != 0:
			return errors.New("ratelimit: account tier: window must be a whole number of milliseconds")
		}
	}
	return nil
}

// Limiter applies a Config over a Store. It is safe for concurrent use.
type Limiter struct {
	cfg    Config
	store  Store
	tiers  []Tier // request tiers, in order
	auth   *Tier  // the auth-failure tier, or nil
	authR  *Rule
	acctR  *Rule // the per-account failure rule, or nil
	now    func() time.Time
	logger *slog.Logger

	lastErrLog atomic.Int64
}

// Option configures a Limiter.
type Option func(*Limiter)

// WithClock replaces time.Now, so tests can slide windows without sleeping.
func WithClock(now func() time.Time) Option {
	return func(l *Limiter) { l.now = now }
}

// WithLogger sets the logger for store errors (default slog.Default()).
func WithLogger(lg *slog.Logger) Option {
	return func(l *Limiter) { l.logger = lg }
}

// New returns a Limiter enforcing cfg over store (a nil store means a new
// MemoryStore). A nil cfg.Tiers means DefaultTiers(). New panics if cfg.Validate fails: call it first to handle
// a configuration error gracefully.
func New(store Store, cfg Config, opts ...Option) *Limiter {
	if cfg.Tiers == nil {
		cfg.Tiers = DefaultTiers()
	}
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	if store == nil {
		store = NewMemoryStore()
	}
	l := &Limiter{cfg: cfg, store: store, now: time.Now, logger: slog.Default()}
	for _, t := range cfg.Tiers {
		if t.AuthFailures {
			r := t.Rule()
			l.auth, l.authR = &t, &r
			continue
		}
		l.tiers = append(l.tiers, t)
	}
	if cfg.AccountFailures.Limit > 0 {
		r := cfg.AccountFailures.Rule()
		l.acctR = &r
	}
	for _, o := range opts {
		o(l)
	}
	return l
}

// Middleware returns the Gin handler that refuses requests from a blocked
// address (401) and requests over any matched tier (429), and otherwise sets
// the X-RateLimit-* headers of the most restrictive matched tier and calls the
// next handler. Mount it first on /api. The client address is c.ClientIP(),
// so the engine's trusted proxies decide whether X-Forwarded-For counts.
//
// If the store fails (the stores of this package do not: RedisStore falls back
// to memory) the request is let through and the error logged: limits protect
// capacity, and an outage of the limiter should not become an outage of
// payments.
func (l *Limiter) Middleware() gin.HandlerFunc {
	return l.middleware(func(c *gin.Context, status int, body any, _ int64) { c.AbortWithStatusJSON(status, body) })
}

// PageMiddleware is Middleware for pages a person sees: a refused request
// (its headers set: Retry-After, X-RateLimit-*) is answered by refuse,
// which renders a page with status (429, or 401 for a blocked address) and
// retryAfter seconds, and must abort the request.
func (l *Limiter) PageMiddleware(refuse func(c *gin.Context, status int, retryAfter int64)) gin.HandlerFunc {
	return l.middleware(func(c *gin.Context, status int, _ any, retryAfter int64) { refuse(c, status, retryAfter) })
}

func (l *Limiter) middleware(refuse func(c *gin.Context, status int, body any, retryAfter int64)) gin.HandlerFunc {
	if !l.cfg.Enabled {
		return func(c *gin.Context) { c.Next() }
	}
	return func(c *gin.Context) {
		subject, loopback := l.subject(c.ClientIP())
		if loopback && l.cfg.ExemptLoopback {
			c.Next()
			return
		}
		method, p := c.Request.Method, cleanPath(c.Request.URL.Path)
		matched := make([]Tier, 0, len(l.tiers))
		rules := make([]Rule, 0, len(l.tiers))
		pageRead := isPageRead(c.Request)
		for _, t := range l.tiers {
			if t.Match(method, p) && !(pageRead && t.SkipPageReads) {
				matched = append(matched, t)
				rules = append(rules, t.Rule())
			}
		}
		if len(rules) == 0 && l.authR == nil {
			c.Next()
			return
		}
		now := l.now()
		res, err := l.store.Take(c.Request.Context(), subject, now, l.authR, rules)
		if err != nil {
			l.logStoreError(err)
			c.Next()
			return
		}
		switch {
		case res.Blocked:
			retry := retryAfter(now, res.Block.Reset)
			l.setHeaders(c, l.auth.Limit, 0, res.Block.Reset)
			c.Header("Retry-After", strconv.FormatInt(retry, 10))
			refuse(c, http.StatusUnauthorized, errorBody{
				Status: "error",
				Message: fmt.Sprintf("too many failed authentication attempts from this address; try again in %d seconds",
					retry),
				Code: "UNAUTHORIZED",
			}, retry)
		case !res.Allowed:
			// Report the refusing tier that frees last: the request can pass
			// only once every refusing tier has a slot.
			worst := -1
			for i, st := range res.States {
				if st.Count >= matched[i].Limit && (worst < 0 || st.Reset.After(res.States[worst].Reset)) {
					worst = i
				}
			}
			t, st := matched[worst], res.States[worst]
			retry := retryAfter(now, st.Reset)
			l.setHeaders(c, t.Limit, 0, st.Reset)
			c.Header("Retry-After", strconv.FormatInt(retry, 10))
			refuse(c, http.StatusTooManyRequests, rateLimitedBody{
				Status: "error",
				Message: fmt.Sprintf("rate limit exceeded: %d requests per %s; try again in %d seconds",
					t.Limit, humanDuration(t.Window), retry),
				Code:       "RATE_LIMITED",
				RetryAfter: retry,
			}, retry)
		default:
			if best := mostRestrictive(matched, res.States); best >= 0 {
				st := res.States[best]
				l.setHeaders(c, matched[best].Limit, st.Remaining(matched[best].Limit), st.Reset)
			}
			c.Next()
		}
	}
}

// RecordAuthFailure counts one failed authentication from ip (as returned by
// gin's c.ClientIP()). Call it on every 401 for a missing, malformed, expired
// or revoked credential and on every wrong password. Once the address reaches
// the auth-failure tier's limit inside its window (10 in 5 minutes by
// default), the middleware refuses all its requests with 401: ten failures
// block, so an address gets exactly ten guesses per window (SPEC.md
// Authentication item 8). The block check and the recording are separate
// steps of one request, so requests already past the check when the tenth
// failure lands still reach the auth check; that overshoot is bounded by the
// address's requests in flight at that moment. Does nothing
// when limiting is disabled, no tier counts auth failures, or ip is an
// exempt loopback address.
func (l *Limiter) RecordAuthFailure(ctx context.Context, ip string) error {
	if !l.cfg.Enabled || l.authR == nil {
		return nil
	}
	subject, loopback := l.subject(ip)
	if loopback && l.cfg.ExemptLoopback {
		return nil
	}
	_, err := l.store.Add(ctx, subject, l.now(), *l.authR)
	return err
}

// AllowAccount is the per-account guard of a sign-in: before the password is
// checked, it refuses the request when account (the e-mail address as typed;
// compared case-insensitively) has reached the account tier's limit of
// failures inside its window, whatever address they came from. It answers
// as the address block does (401 UNAUTHORIZED, Retry-After and the
// X-RateLimit-* headers), aborts the request and returns false. The password
// is not checked while the account is blocked, so the right one cannot be
// found by guessing on. It returns true when limiting is off, no account
// tier is configured, the caller is an exempt loopback address, or the store
// fails (limits protect; they must not lock everybody out).
func (l *Limiter) AllowAccount(c *gin.Context, account string) bool {
	if !l.cfg.Enabled || l.acctR == nil {
		return true
	}
	if _, loopback := l.subject(c.ClientIP()); loopback && l.cfg.ExemptLoopback {
		return true
	}
	now := l.now()
	res, err := l.store.Take(c.Request.Context(), accountSubject(account), now, l.acctR, nil)
	if err != nil {
		l.logStoreError(err)
		return true
	}
	if !res.Blocked {
		return true
	}
	retry := retryAfter(now, res.Block.Reset)
	l.setHeaders(c, l.acctR.Limit, 0, res.Block.Reset)
	c.Header("Retry-After", strconv.FormatInt(retry, 10))
	c.AbortWithStatusJSON(http.StatusUnauthorized, errorBody{
		Status: "error",
		Message: fmt.Sprintf("too many failed sign-in attempts for this account; try again in %d seconds",
			retry),
		Code: "UNAUTHORIZED",
	})
	return false
}

// ErrAccountBusy: another sign-in of the account is being checked (by any
// replica) and did not finish within the turn's wait.
var ErrAccountBusy = errors.New("ratelimit: another sign-in of this account is being checked")

// Account turns: one password check of an account at a time across every
// replica sharing the store, so that each reads the failures the previous
// one recorded (AllowAccount's count is otherwise read by parallel guesses
// before any is counted). A holder that dies frees it after the ttl.
const (
	accountTurnTTL  = 30 * time.Second
	accountTurnWait = 5 * time.Second
)

// AccountTurn waits for the account's sign-in turn (the e-mail address,
// compared case-insensitively) across the replicas sharing the store and
// returns its release; call it before AllowAccount and release after the
// failure, if any, is recorded. ErrAccountBusy when the turn does not come
// within 5 s. A no-op when limiting is off, no account tier is configured,
// the caller is an exempt loopback address, the store grants no leases or
// fails (limits protect; they must not lock everybody out).
func (l *Limiter) AccountTurn(ctx context.Context, ip, account string) (func(), error) {
	noop := func() {}
	if !l.cfg.Enabled || l.acctR == nil {
		return noop, nil
	}
	if _, loopback := l.subject(ip); loopback && l.cfg.ExemptLoopback {
		return noop, nil
	}
	ls, ok := l.store.(Leaser)
	if !ok {
		return noop, nil
	}
	key := "turn:" + accountSubject(account)
	deadline := time.Now().Add(accountTurnWait)
	pause := 5 * time.Millisecond
	for {
		release, ok, err := ls.Lease(ctx, key, accountTurnTTL)
		if err != nil {
			l.logStoreError(err)
			return noop, nil
		}
		if ok {
			return release, nil
		}
		if !time.Now().Before(deadline) {
			return nil, ErrAccountBusy
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
		pause = min(2*pause, 50*time.Millisecond)
	}
}

// RecordLoginFailure counts a failed sign-in (a wrong password, or an
// unknown e-mail address: both look the same from outside) against the
// client address, as RecordAuthFailure does, and against the account. Call
// it only for attempts AllowAccount let through, so that a blocked account's
// refused attempts do not keep it blocked longer.
func (l *Limiter) RecordLoginFailure(ctx context.Context, ip, account string) error {
	err := l.RecordAuthFailure(ctx, ip)
	if !l.cfg.Enabled || l.acctR == nil {
		return err
	}
	if _, loopback := l.subject(ip); loopback && l.cfg.ExemptLoopback {
		return err
	}
	_, aerr := l.store.Add(ctx, accountSubject(account), l.now(), *l.acctR)
	return errors.Join(err, aerr)
}

// accountSubject keys an account's failures: a digest of the lower-cased
// address, so that no e-mail address is written to Redis and no character of
// one can reach a key (braces would change the Cluster hash tag).
func accountSubject(account string) string {
	sum := sha256.Sum256([]byte(strings.ToLower(strings.TrimSpace(account))))
	return "account:" + hex.EncodeToString(sum[:16])
}

// subject turns a client address into the key limits are kept under, and
// reports whether it is loopback. IPv4-mapped IPv6 addresses count as IPv4;
// an unparsable address (no RemoteAddr, a bad platform header) shares the
// single subject "unknown".
func (l *Limiter) subject(ip string) (string, bool) {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return "unknown", false
	}
	a = a.Unmap().WithZone("")
	if a.Is6() && l.cfg.IPv6PrefixBits > 0 && l.cfg.IPv6PrefixBits < 128 {
		p, _ := a.Prefix(l.cfg.IPv6PrefixBits)
		return p.String(), a.IsLoopback()
	}
	return a.String(), a.IsLoopback()
}

func (l *Limiter) setHeaders(c *gin.Context, limit, remaining int, reset time.Time) {
	c.Header("X-RateLimit-Limit", strconv.Itoa(limit))
	c.Header("X-RateLimit-Remaining", strconv.Itoa(remaining))
	c.Header("X-RateLimit-Reset", strconv.FormatInt(reset.UnixMilli(), 10))
}

// logStoreError logs at most one store error per 10 seconds.
func (l *Limiter) logStoreError(err error) {
	now := time.Now().UnixNano()
	last := l.lastErrLog.Load()
	if now-last >= int64(10*time.Second) && l.lastErrLog.CompareAndSwap(last, now) {
		l.logger.Error("ratelimit: store failed; request let through unlimited", "error", err)
	}
}

// mostRestrictive picks the matched tier with the fewest remaining requests,
// the one freeing later on a tie; -1 when none matched.
func mostRestrictive(tiers []Tier, states []State) int {
	best := -1
	for i, st := range states {
		if best < 0 {
			best = i
			continue
		}
		r, br := st.Remaining(tiers[i].Limit), states[best].Remaining(tiers[best].Limit)
		if r < br || (r == br && st.Reset.After(states[best].Reset)) {
			best = i
		}
	}
	return best
}

// retryAfter is the whole seconds, rounded up, from now until reset; at least 1.
func retryAfter(now, reset time.Time) int64 {
	d := reset.UnixMilli() - now.UnixMilli()
	s := (d + 999) / 1000
	if s < 1 {
		s = 1
	}
	return s
}

// humanDuration renders a window for messages: "10 seconds", "1 minute".
func humanDuration(d time.Duration) string {
	unit, n := "second", int64(d/time.Second)
	switch {
	case d%time.Second != 0:
		return d.String()
	case d >= time.Hour && d%time.Hour == 0:
		unit, n = "hour", int64(d/time.Hour)
	case d >= time.Minute && d%time.Minute == 0:
		unit, n = "minute", int64(d/time.Minute)
	}
	if n == 1 {
		return "1 " + unit
	}
	return strconv.FormatInt(n, 10) + " " + unit + "s"
}

// rateLimitedBody is the 429 body, fields in SPEC.md's order.
type rateLimitedBody struct {
	Status     string `json:"status"`
	Message    string `json:"message"`
	Code       string `json:"code"`
	RetryAfter int64  `json:"retryAfter"`
}

// errorBody is the blocked-address 401 body.
type errorBody struct {
	Status  string `json:"status"`
	Message string `json:"message"`
	Code    string `json:"code"`
}
