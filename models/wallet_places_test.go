package models_test

import (
	"context"
	"testing"
	"time"

	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
)

// TestWalletPlaces: the places of a network's wallet reads are stored in
// one statement, moved by a later one, kept apart per network, and read
// back only when stored since the time asked.
func TestWalletPlaces(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		before := time.Now().Add(-time.Second)
		if err := st.SaveWalletPlaces(ctx, "solana_devnet", map[string]string{"w1": "a", "w2": "b"}); err != nil {
			t.Fatal(err)
		}
		if err := st.SaveWalletPlaces(ctx, "solana_devnet", map[string]string{"w2": "c"}); err != nil {
			t.Fatal(err)
		}
		if err := st.SaveWalletPlaces(ctx, "solana", map[string]string{"w1": "live"}); err != nil {
			t.Fatal(err)
		}
		if err := st.SaveWalletPlaces(ctx, "solana", nil); err != nil {
			t.Fatal(err)
		}
		got, err := st.WalletPlacesOf(ctx, "solana_devnet", before)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got["w1"] != "a" || got["w2"] != "c" {
			t.Fatalf("places %v", got)
		}
		if got, err = st.WalletPlacesOf(ctx, "solana", before); err != nil || len(got) != 1 || got["w1"] != "live" {
			t.Fatalf("the other network's places %v %v", got, err)
		}
		if got, err = st.WalletPlacesOf(ctx, "solana_devnet", time.Now().Add(time.Minute)); err != nil || len(got) != 0 {
			t.Fatalf("places stored before the time asked: %v %v", got, err)
		}
	})
}
