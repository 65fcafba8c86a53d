package ratelimit

import (
	"context"
	"time"
)

// Rule is one sliding-log limit as a Store sees it: at most Limit events per
// Window, kept under Name for each subject (client address).
type Rule struct {
	// Name identifies the log within a subject; the tier name.
	Name string
	// Limit is the number of events the window holds.
	Limit int
	// Window is the length of the sliding window, at millisecond resolution.
	Window time.Duration
}

// State describes one rule's log for one subject after a store operation.
type State struct {
	// Count is the number of events inside the window. Logs written only by
	// Store.Add are capped at the rule's Limit, so Count never exceeds Limit.
	Count int
	// Reset is when the window next frees a slot: while Count >= Limit, the
	// moment Count drops below Limit; otherwise when the oldest event leaves
	// the window. It equals the operation's now when the log is empty.
	Reset time.Time
}

// Remaining is how many more events the window admits now.
func (s State) Remaining(limit int) int {
	if r := limit - s.Count; r > 0 {
		return r
	}
	return 0
}

// Result is the outcome of Store.Take.
type Result struct {
	// Blocked reports that the block rule held Limit or more events: the
	// request is refused and nothing was recorded.
	Blocked bool
	// Block is the block rule's state; set when Blocked.
	Block State
	// Allowed reports that every rule had room and the event was recorded in
	// each of them. False when Blocked.
	Allowed bool
	// States holds one State per rule, in the order given, when not Blocked.
	// When Allowed they include the event just recorded.
	States []State
}

// Store keeps sliding logs per subject. Implementations must make each call
// atomic with respect to every other call on the same subject, also across
// processes when the store is shared.
type Store interface {
	// Take checks, as one atomic step at time now, first the block rule (when
	// block is not nil: if its log holds block.Limit or more events the result
	// is Blocked and nothing is recorded) and then every rule. Only if every
	// rule holds fewer than its Limit events is one event recorded in each of
	// them (Allowed). With no rules Take is a read-only block check.
	Take(ctx context.Context, subject string, now time.Time, block *Rule, rules []Rule) (Result, error)
	// Add records one event in rule's log unconditionally (used for failed
	// authentications), dropping the oldest events beyond rule.Limit, and
	// returns the resulting state.
	Add(ctx context.Context, subject string, now time.Time, rule Rule) (State, error)
}

// Storage works in integer Unix milliseconds.
func ms(d time.Duration) int64 { return d.Milliseconds() }

// resetOf computes State.Reset from a log's ascending timestamps (already
// trimmed to the window).
func resetOf(ts []int64, limit int, window, now int64) int64 {
	n := len(ts)
	switch {
	case n == 0:
		return now
	case n >= limit && limit > 0:
		return ts[n-limit] + window
	default:
		return ts[0] + window
	}
}

// Leaser grants short exclusive leases on a key, across every process that
// shares the store (the per-account sign-in turn). MemoryStore and
// RedisStore implement it.
type Leaser interface {
	// Lease takes key for ttl unless someone holds it. It returns the
	// release (safe to call more than once; it frees only this lease) and
	// true, or false when the key is held.
	Lease(ctx context.Context, key string, ttl time.Duration) (release func(), ok bool, err error)
}
