package models_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
)

// TestRelayerLockAndLedger: the relayer's lock admits one holder at a time
// per wallet and network (another wallet is not held up), and the ledger
// keeps a nonce's transactions, replaced in place, listed while pending.
func TestRelayerLockAndLedger(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var inside, most atomic.Int32
		done := make(chan error, 4)
		for range 4 {
			go func() {
				done <- st.RelayerLocked(ctx, "base", "0xaa", func(context.Context) error {
					n := inside.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					// Another wallet's lock is free meanwhile.
					err := st.RelayerLocked(ctx, "base", "0xbb", func(context.Context) error { return nil })
					time.Sleep(20 * time.Millisecond)
					inside.Add(-1)
					return err
				})
			}()
		}
		for range 4 {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		if most.Load() != 1 {
			t.Fatalf("%d holders at once", most.Load())
		}
		// A waiter whose request ends gives up its turn.
		held := make(chan struct{})
		release := make(chan struct{})
		go func() {
			_ = st.RelayerLocked(ctx, "base", "0xaa", func(context.Context) error { close(held); <-release; return nil })
		}()
		<-held
		short, stop := context.WithTimeout(ctx, 50*time.Millisecond)
		err := st.RelayerLocked(short, "base", "0xaa", func(context.Context) error { return nil })
		stop()
		close(release)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a waiter past its deadline: %v", err)
		}

		row := &models.RelayedTransaction{Network: "base", Relayer: "0xaa", Nonce: 1 << 40, Payer: "0xcc", Reference: "0x01", ValidBefore: 1 << 40,
			ToAddress: "0xdd", Data: "0x", Gas: 21000, Tip: "1000000000000000000000", FeeCap: "2000000000000000000000",
			Hashes: models.StringList{"0x1"}, Status: "pending", SentAt: time.Now()}
		if err := st.SaveRelayed(ctx, row); err != nil {
			t.Fatal(err)
		}
		row.Hashes, row.Tip = append(row.Hashes, "0x2"), "1125000000000000000000"
		if err := st.SaveRelayed(ctx, row); err != nil {
			t.Fatal(err)
		}
		got, err := st.PendingRelayed(ctx, "base", "0xaa")
		if err != nil || len(got) != 1 || got[0].Nonce != 1<<40 || len(got[0].Hashes) != 2 || got[0].Tip != "1125000000000000000000" {
			t.Fatalf("pending %+v %v", got, err)
		}
		if mine, err := st.PendingRelayedFor(ctx, "base", "0xcc"); err != nil || len(mine) != 1 {
			t.Fatalf("the payer's %+v %v", mine, err)
		}
		row.Status, row.MinedHash = "mined", "0x2"
		if err := st.SaveRelayed(ctx, row); err != nil {
			t.Fatal(err)
		}
		if got, err := st.PendingRelayed(ctx, "base", "0xaa"); err != nil || len(got) != 0 {
			t.Fatalf("pending once mined %+v %v", got, err)
		}
		if all, err := st.RelayedTransactions(ctx, "base", "0xaa", 10); err != nil || len(all) != 1 || all[0].MinedHash != "0x2" {
			t.Fatalf("all %+v %v", all, err)
		}
	})
}

// TestRelayerLockWithASmallPool: more holders than the pool has
// connections, each running statements under the lock (as a relay does),
// all get through: waiters queue in the process, so the holder always has
// a connection for its statements (PostgreSQL; SQLite has no pool to
// exhaust).
func TestRelayerLockWithASmallPool(t *testing.T) {
	url := storetest.PostgresURL(t)
	st, err := models.Open(models.Options{DatabaseURL: url, Secrets: storetest.Keyring(), Pool: models.Pool{MaxOpen: 3}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Migrate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 8)
	for range 8 {
		go func() {
			done <- st.RelayerLocked(ctx, "base", "0xaa", func(ctx context.Context) error {
				_, err := st.PendingRelayed(ctx, "base", "0xaa")
				return err
			})
		}()
	}
	for range 8 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
