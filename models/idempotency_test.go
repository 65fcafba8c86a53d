package models_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
)

// TestIdempotencyClaims: a key's request keeps it while it renews its
// claim, however long it runs; one that stopped renewing for over a minute
// is taken over by a retry, and from then on the request taken over can
// neither forget the key (the retry would lose its record and a third
// request run again) nor store its answer over the retry's.
func TestIdempotencyClaims(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		now := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
		st.SetClock(func() time.Time { return now })
		m := newMerchant(t, st, "idem@example.com")
		begin := func(want string) *models.IdempotencyKey {
			t.Helper()
			state, rec, err := st.BeginIdempotent(ctx, m.ID, "test", "k1", "hash")
			if err != nil || state != want {
				t.Fatalf("begin at %s: %q %v, want %q", now.Format(time.TimeOnly), state, err, want)
			}
			return rec
		}

		first := begin(models.IdemNew)
		// Slow, but renewing: never taken over.
		for range 5 {
			now = now.Add(45 * time.Second)
			if err := st.RenewIdempotent(ctx, first); err != nil {
				t.Fatal(err)
			}
			begin(models.IdemRunning)
		}
		// Silent for over a minute (its process died, or stalled): a retry
		// takes the key over under a claim of its own.
		now = now.Add(61 * time.Second)
		retry := begin(models.IdemNew)
		if retry.Claim == first.Claim || retry.ID != first.ID {
			t.Fatalf("takeover kept the claim: %+v / %+v", first, retry)
		}
		// The request taken over fails: the retry's claim stays.
		if err := st.ForgetIdempotent(ctx, first); err != nil {
			t.Fatal(err)
		}
		begin(models.IdemRunning)
		if err := st.RenewIdempotent(ctx, first); !errors.Is(err, models.ErrIdempotencyLost) {
			t.Fatalf("renewal of a claim taken over: %v", err)
		}
		if err := st.FinishIdempotent(ctx, first, 201, `{"first":true}`); !errors.Is(err, models.ErrIdempotencyLost) {
			t.Fatalf("answer of a claim taken over: %v", err)
		}
		if err := st.FinishIdempotent(ctx, retry, 201, `{"retry":true}`); err != nil {
			t.Fatal(err)
		}
		if got := begin(models.IdemReplay); got.ResponseBody != `{"retry":true}` {
			t.Fatalf("replayed %q, want the retry's answer", got.ResponseBody)
		}

		// A key written before claims existed (claim '') is taken over and
		// finished as any other.
		state, old, err := st.BeginIdempotent(ctx, m.ID, "test", "k2", "hash")
		if err != nil || state != models.IdemNew {
			t.Fatal(state, err)
		}
		storetest.Exec(t, st, "UPDATE idempotency_keys SET claim = '' WHERE id = ?", old.ID)
		now = now.Add(2 * time.Minute)
		state, took, err := st.BeginIdempotent(ctx, m.ID, "test", "k2", "hash")
		if err != nil || state != models.IdemNew || took.Claim == "" {
			t.Fatalf("takeover of a key without claim: %q %+v %v", state, took, err)
		}
		if err := st.FinishIdempotent(ctx, took, 200, "{}"); err != nil {
			t.Fatal(err)
		}
	})
}
