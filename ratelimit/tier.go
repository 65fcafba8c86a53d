package ratelimit

import (
	"context"
	"net/http"
	"path"
	"strings"
	"time"
)

// Tier names used by DefaultTiers; they also name the logs in the store.
const (
	TierGlobal            = "global"
	TierCheckoutMutation  = "checkout_mutation"
	TierCheckoutPoll      = "checkout_poll"
	TierKeyManagement     = "key_management"
	TierWebhookManagement = "webhook_management"
	TierRead              = "read"
	TierHostedPageRead    = "hosted_page_read"
	TierAuthFailures      = "auth_failures"
	TierSignUp            = "sign_up"
	TierUpload            = "upload"
)

// Tier is one rate limit: at most Limit requests per sliding Window per client
// address, for the requests Match selects.
type Tier struct {
	// Name identifies the tier in the store; unique within a Config, and
	// without '{' or '}'.
	Name string
	// Limit is the number of requests (or failed authentications) allowed
	// within Window.
	Limit int
	// Window is the sliding window, a whole number of milliseconds.
	Window time.Duration
	// Match reports whether a request counts against the tier. It gets the
	// method and the URL path cleaned with path.Clean (so "/api//webhooks/"
	// matches like "/api/webhooks"). Ignored when AuthFailures is set.
	Match func(method, path string) bool
	// AuthFailures marks the tier that counts failed authentications, fed
	// only by Limiter.RecordAuthFailure. Once an address has Limit failures
	// inside Window every request from it is refused with 401 until the
	// oldest of them leaves the window. At most one tier sets it.
	AuthFailures bool
	// SkipPageReads leaves out the dashboard's own reads (GET requests the
	// pages send in process, marked with PageRead): a management tier
	// limits API clients' calls, not how often a merchant opens a page.
	SkipPageReads bool
}

type pageReadKey struct{}

// PageRead marks ctx as a read the dashboard sends to the API in process
// to render a page. Only process-internal code can set it: it is a context
// value, not anything a client sends.
func PageRead(ctx context.Context) context.Context {
	return context.WithValue(ctx, pageReadKey{}, true)
}

// isPageRead: r is a GET or HEAD marked with PageRead.
func isPageRead(r *http.Request) bool {
	return isRead(r.Method) && r.Context().Value(pageReadKey{}) != nil
}

// Rule returns the tier as the Store sees it.
func (t Tier) Rule() Rule { return Rule{Name: t.Name, Limit: t.Limit, Window: t.Window} }

// DefaultTiers returns SPEC.md's tiers, in the order they are checked:
//
//	global              100 / 10 s  every /api request
//	checkout_mutation    10 / 1 min /api/checkout/... except the GET session poll
//	checkout_poll        30 / 1 min GET /api/checkout/session/{id}
//	key_management        5 / 1 min /api/developer/keys and below
//	webhook_management   10 / 1 min /api/webhooks and below
//
// (the two management tiers leave out the dashboard's own page reads)
//
//	read                 30 / 10 s  every GET under /api
//	hosted_page_read    120 / 1 min GET of the hosted pages (/pay/{link},
//	                                /checkout/{session} and its QR code)
//	sign_up              10 / 1 h   POST /api/auth/signup
//	upload               30 / 1 h   POST /api/upload
//	auth_failures        10 / 5 min failed authentications (RecordAuthFailure)
//
// HEAD counts as GET. OPTIONS (CORS preflight, answered without touching the
// resource) counts only against the global tier.
func DefaultTiers() []Tier {
	return []Tier{
		{Name: TierGlobal, Limit: 100, Window: 10 * time.Second, Match: func(_, p string) bool {
			return under(p, "/api")
		}},
		{Name: TierCheckoutMutation, Limit: 10, Window: time.Minute, Match: func(m, p string) bool {
			return m != http.MethodOptions && under(p, "/api/checkout") && !isCheckoutPoll(m, p) || isHostedPagePost(m, p)
		}},
		{Name: TierCheckoutPoll, Limit: 30, Window: time.Minute, Match: isCheckoutPoll},
		{Name: TierKeyManagement, Limit: 5, Window: time.Minute, SkipPageReads: true, Match: func(m, p string) bool {
			return m != http.MethodOptions && under(p, "/api/developer/keys")
		}},
		{Name: TierWebhookManagement, Limit: 10, Window: time.Minute, SkipPageReads: true, Match: func(m, p string) bool {
			return m != http.MethodOptions && under(p, "/api/webhooks")
		}},
		// The dashboard's own reads are left to the global tier: a page
		// sends several (three for the payments list), so the read tier
		// stopped a merchant at the eleventh page opened in ten seconds.
		{Name: TierRead, Limit: 30, Window: 10 * time.Second, SkipPageReads: true, Match: func(m, p string) bool {
			return isRead(m) && under(p, "/api")
		}},
		// Not SPEC.md's (its tiers are the API's): each hosted page read
		// costs store reads, and a person opens a few a minute.
		{Name: TierHostedPageRead, Limit: 120, Window: time.Minute, Match: isHostedPageRead},
		// Not SPEC.md's either: a sign-up is an account with a session at
		// once, and each account may upload 20 MiB; without an address
		// tier, signing up again and again filled the disk at the global
		// tier's pace (about 15 MiB/s from one address).
		{Name: TierSignUp, Limit: 10, Window: time.Hour, Match: func(m, p string) bool {
			return m == http.MethodPost && under(p, "/api/auth/signup")
		}},
		{Name: TierUpload, Limit: 30, Window: time.Hour, Match: func(m, p string) bool {
			return m == http.MethodPost && under(p, "/api/upload")
		}},
		{Name: TierAuthFailures, Limit: 10, Window: 5 * time.Minute, AuthFailures: true},
	}
}

// isHostedPageRead matches the reads of the hosted pages: the payment
// link's page, the checkout page and its QR code (their static assets are
// not limited: fingerprinted and cached).
func isHostedPageRead(method, p string) bool {
	return isRead(method) && (under(p, "/pay") || under(p, "/checkout"))
}

// under reports whether p is prefix or a path below it.
func under(p, prefix string) bool {
	return strings.HasPrefix(p, prefix) && (len(p) == len(prefix) || p[len(prefix)] == '/')
}

func isRead(method string) bool { return method == http.MethodGet || method == http.MethodHead }

// isHostedPagePost matches the hosted checkout page's forms (POST /pay/{link},
// /checkout/{session}/submit and /cancel): the same mutations as the
// checkout API's, counted with them (the pages apply the limiter to them).
func isHostedPagePost(method, p string) bool {
	return method == http.MethodPost && (under(p, "/pay") || under(p, "/checkout"))
}

// isCheckoutPoll matches GET /api/checkout/session/{id} (and anything below).
func isCheckoutPoll(method, p string) bool {
	const prefix = "/api/checkout/session/"
	return isRead(method) && len(p) > len(prefix) && strings.HasPrefix(p, prefix)
}

// cleanPath normalises a request path for matching.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	return path.Clean(p)
}
