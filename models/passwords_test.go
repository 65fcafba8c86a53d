package models_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
)

// TestPasswordWritesRace: two password changes checked against the same
// password, written at once: one wins, the other is told the password
// changed meanwhile (not written over it); a reset link used twice at once
// sets the password once.
func TestPasswordWritesRace(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		m := newMerchant(t, st, "race@example.com")
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = st.ChangePassword(ctx, m.ID, "x", []string{"new-a", "new-b"}[i], "")
			}()
		}
		wg.Wait()
		won := 0
		for _, err := range errs {
			switch {
			case err == nil:
				won++
			case !errors.Is(err, models.ErrPasswordChanged):
				t.Fatalf("change: %v", err)
			}
		}
		if won != 1 {
			t.Fatalf("%d changes won (%v)", won, errs)
		}

		if ok, err := st.CreatePasswordReset(ctx, m.ID, m.Email, "reset-hash", time.Hour, 5); err != nil || !ok {
			t.Fatalf("create reset: %v %v", ok, err)
		}
		r, err := st.PasswordResetByHash(ctx, "reset-hash")
		if err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _, errs[i] = st.ResetPassword(ctx, r.ID, []string{"reset-a", "reset-b"}[i])
			}()
		}
		wg.Wait()
		used := 0
		for _, err := range errs {
			switch {
			case err == nil:
				used++
			case !errors.Is(err, apperr.ErrNotFound):
				t.Fatalf("reset: %v", err)
			}
		}
		if used != 1 {
			t.Fatalf("the link set the password %d times (%v)", used, errs)
		}
		if _, err := st.PasswordResetByHash(ctx, "reset-hash"); !errors.Is(err, apperr.ErrNotFound) {
			t.Fatalf("a used link is still found: %v", err)
		}
	})
}
