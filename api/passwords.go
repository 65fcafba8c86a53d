package api

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/paygate/paygate/apperr"
)

// passwordGate bounds the password hashing of the routes anyone can call
// (sign-up, sign-in). Each argon2id hash takes 19 MiB and tens of
// milliseconds of a core: without a bound, a burst of sign-ups or sign-ins
// from a few addresses, within the rate limits, ran them all at once. It
// also gives each account one sign-in at a time in this process, so the
// per-account failure count is read after the previous attempt was
// counted: parallel guesses at one account passed the check together
// (argon2 is slow) and got far more than the tier's ten.
type passwordGate struct {
	slots chan struct{}
	wait  time.Duration

	mu    sync.Mutex
	turns map[string]*accountTurn
}

// accountTurn is one account's sign-in turn: a channel of one slot, and
// how many requests hold or wait for it (the entry goes when none do, so
// addresses typed by strangers do not pile up).
type accountTurn struct {
	slot  chan struct{}
	users int
}

// passwordWait is how long a request waits for a hashing slot or its
// account's turn before it is answered 503 with Retry-After.
const passwordWait = 5 * time.Second

func newPasswordGate() *passwordGate {
	return &passwordGate{slots: make(chan struct{}, max(2, 2*runtime.GOMAXPROCS(0))), wait: passwordWait,
		turns: map[string]*accountTurn{}}
}

var errPasswordBusy = apperr.Unavailable("too many sign-ins are being checked right now; retry shortly", 2*time.Second)

// hash runs fn (one password hash or check) in one of the gate's slots.
func (g *passwordGate) hash(ctx context.Context, fn func()) error {
	t := time.NewTimer(g.wait)
	defer t.Stop()
	select {
	case g.slots <- struct{}{}:
	case <-t.C:
		return errPasswordBusy
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-g.slots }()
	fn()
	return nil
}

// account takes the account's sign-in turn (the e-mail address, compared
// case-insensitively) and returns its release.
func (g *passwordGate) account(ctx context.Context, email string) (func(), error) {
	key := strings.ToLower(strings.TrimSpace(email))
	g.mu.Lock()
	turn := g.turns[key]
	if turn == nil {
		turn = &accountTurn{slot: make(chan struct{}, 1)}
		g.turns[key] = turn
	}
	turn.users++
	g.mu.Unlock()
	leave := func() {
		g.mu.Lock()
		if turn.users--; turn.users == 0 {
			delete(g.turns, key)
		}
		g.mu.Unlock()
	}
	t := time.NewTimer(g.wait)
	defer t.Stop()
	select {
	case turn.slot <- struct{}{}:
		return func() { <-turn.slot; leave() }, nil
	case <-t.C:
		leave()
		return nil, errPasswordBusy
	case <-ctx.Done():
		leave()
		return nil, ctx.Err()
	}
}
