// Package chaos is the fault-injection suite of the whole stack (make
// chaos). Its tests carry the build tag chaos, so `go test ./...` skips
// them: they start a Temporal dev server, a dev chain, throwaway PostgreSQL
// clusters (initdb/pg_ctl on free ports in temporary folders, never the
// machine's shared server) and a throwaway Redis, run `paygate api` and
// `paygate worker` as separate processes, inject faults (SIGKILL of the
// worker during an expiry storm and during payments, SIGKILL and restart of
// the Temporal server, PostgreSQL stopped and restarted, webhook receivers
// that hang, reset connections, fail then succeed or answer slowly, Redis
// stopped under the rate limiter) and check that every session ends in the
// right state, every event is delivered at least once under one webhook-id,
// no transaction or customer row is duplicated, and no 5xx answer stays
// unresolved after the client's retries. It prints a table of its figures.
//
//	go test -tags chaos -count=1 -v ./chaos/
package chaos
