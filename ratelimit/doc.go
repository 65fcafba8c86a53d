// Package ratelimit enforces the per-client-IP request limits of the API
// (SPEC.md "Rate limits") and the brute-force block that follows repeated
// failed authentications (SPEC.md "Authentication", item 8).
//
// A client is an IPv4 address or, by default, an IPv6 /64 (Config.IPv6PrefixBits):
// one end site holds a whole /64, so counting single IPv6 addresses would give a
// client a fresh budget, and a way out of the block, with every address it
// picks. Failed sign-ins are also counted per account (Limiter.AllowAccount,
// Limiter.RecordLoginFailure), so guesses spread over many addresses still
// meet a limit at the account they aim at; Limiter.AccountTurn checks an
// account's sign-ins one at a time across the replicas sharing the store
// (a [Leaser] lease), so each reads the failures the previous one recorded.
//
// Every limit is an exact sliding log: the store keeps the timestamp of each
// counted event and a request is admitted only when fewer than Limit events
// lie inside the last Window. There is no fixed-window approximation, so a
// client can never get 2×Limit through by straddling a window boundary.
//
// A request is checked against every [Tier] it matches in a single atomic
// store operation: it is admitted only if all of them have room, and only then
// is it recorded in all of them. A request refused by one tier therefore
// consumes no budget of any other tier, and a request refused by the
// brute-force block consumes nothing at all.
//
// Two stores implement [Store]: [MemoryStore] for a single process and
// [RedisStore] for several API replicas sharing one Redis. RedisStore falls
// back to a per-process MemoryStore while Redis is unreachable (see
// [RedisStore] for the exact behaviour).
//
// Wiring, in the API router:
//
//	store, closeStore, err := ratelimit.OpenStore(os.Getenv("REDIS_URL"), "paygate:rl:")
//	lim := ratelimit.New(store, ratelimit.DefaultConfig())
//	engine.SetTrustedProxies(trustedProxyCIDRs) // never leave gin's default (trust all)
//	api := engine.Group("/api", lim.Middleware())
//	// in the auth middleware, on every failed authentication:
//	_ = lim.RecordAuthFailure(c.Request.Context(), c.ClientIP())
//	// in the sign-in handler, before the password is checked, and on a wrong one:
//	release, err := lim.AccountTurn(ctx, c.ClientIP(), email) // release after the failure is recorded
//	if !lim.AllowAccount(c, email) { return }
//	_ = lim.RecordLoginFailure(c.Request.Context(), c.ClientIP(), email)
package ratelimit
