package models_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
	"github.com/paygate/paygate/money"
)

// TestWalletProofStore: a proof is recorded once per merchant and wallet
// (again: the first is answered); WalletsFree refuses a wallet another
// merchant proved unless this one proved it too; ReceivingWallets lists a
// wallet for its provers alone when one proved it (whether or not a link of
// theirs names it), and for every merchant naming it otherwise.
func TestWalletProofStore(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		a, b, c := newMerchant(t, st, "wpa@example.com"), newMerchant(t, st, "wpb@example.com"), newMerchant(t, st, "wpc@example.com")
		const shared, own = "0x52908400098527886E0F7030069857D2E4169EE7", "0x8617E340B3D01FA5F11F306F4090FD50E238070D"
		for _, m := range []*models.Merchant{a, b, c} {
			wallet := shared
			if m == c {
				wallet = own
			}
			if err := st.CreatePaymentLink(ctx, &models.PaymentLink{MerchantID: m.ID, Mode: models.ModeTest, Name: "L", Amount: money.FromCents(100),
				Currency: "USD", Network: "base_sepolia", Networks: models.StringList{"base_sepolia"}, Token: "USDC",
				WalletAddresses: models.StringMap{"base_sepolia": wallet}, MerchantWalletAddress: wallet}); err != nil {
				t.Fatal(err)
			}
		}
		receiving := func() string {
			t.Helper()
			ws, err := st.ReceivingWallets(ctx, "base_sepolia", models.ModeTest)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, w := range ws {
				name := map[string]string{a.ID: "a", b.ID: "b", c.ID: "c"}[w.MerchantID]
				out = append(out, name+"@"+w.Address[:6])
			}
			sort.Strings(out)
			return fmt.Sprint(out)
		}
		if got := receiving(); got != "[a@0x5290 b@0x5290 c@0x8617]" {
			t.Fatalf("no proof: %s", got)
		}
		if err := st.WalletsFree(ctx, b.ID, map[string]string{"a": shared, "b": own, "c": ""}); err != nil {
			t.Fatalf("no proof: %v", err)
		}

		proof := &models.WalletProof{MerchantID: a.ID, Family: "evm", Address: shared, Message: "m1", Signature: "s1", ProvedAt: time.Now()}
		if created, err := st.RecordWalletProof(ctx, proof, 0); err != nil || !created {
			t.Fatalf("first proof: %v %v", created, err)
		}
		again := &models.WalletProof{MerchantID: a.ID, Family: "evm", Address: shared, Message: "m2", Signature: "s2", ProvedAt: time.Now().Add(time.Minute)}
		if created, err := st.RecordWalletProof(ctx, again, 0); err != nil || created || again.ID != proof.ID || again.Message != "m1" {
			t.Fatalf("proven again: %v %+v %v", created, again, err)
		}
		if got := receiving(); got != "[a@0x5290 c@0x8617]" {
			t.Fatalf("a proved the shared wallet: %s", got)
		}
		if err := st.WalletsFree(ctx, b.ID, map[string]string{"mine": own, "wallets.evm": shared, "again": shared}); !errors.Is(err, apperr.ErrBadRequest) ||
			err.Error() != "again: the wallet "+shared+" is proven by another merchant account; wallets.evm: the wallet "+shared+" is proven by another merchant account" {
			t.Fatalf("b names a's wallet: %v", err)
		}
		if err := st.WalletsFree(ctx, a.ID, map[string]string{"w": shared}); err != nil {
			t.Fatalf("a names its own: %v", err)
		}
		if _, err := st.RecordWalletProof(ctx, &models.WalletProof{MerchantID: b.ID, Family: "evm", Address: shared, Message: "m", Signature: "s", ProvedAt: time.Now()}, 0); err != nil {
			t.Fatal(err)
		}
		if err := st.WalletsFree(ctx, b.ID, map[string]string{"w": shared}); err != nil {
			t.Fatalf("b proved it too: %v", err)
		}
		if got := receiving(); got != "[a@0x5290 b@0x5290 c@0x8617]" {
			t.Fatalf("a and b proved it: %s", got)
		}
		// A merchant that proved c's wallet but has no link naming it: the
		// wallet's transfers are not c's either.
		d := newMerchant(t, st, "wpd@example.com")
		if _, err := st.RecordWalletProof(ctx, &models.WalletProof{MerchantID: d.ID, Family: "evm", Address: own, Message: "m", Signature: "s", ProvedAt: time.Now()}, 0); err != nil {
			t.Fatal(err)
		}
		if got := receiving(); got != "[a@0x5290 b@0x5290]" {
			t.Fatalf("d proved c's wallet: %s", got)
		}
		if ps, err := st.WalletProofs(ctx, a.ID); err != nil || len(ps) != 1 || ps[0].Address != shared {
			t.Fatalf("a's proofs: %+v %v", ps, err)
		}
		if ps, err := st.WalletProofs(ctx, c.ID); err != nil || len(ps) != 0 {
			t.Fatalf("c's proofs: %+v %v", ps, err)
		}

		// At most max proofs a merchant (a wallet proven again is not
		// another); a withdrawn proof frees the wallet.
		third := &models.WalletProof{MerchantID: a.ID, Family: "evm", Address: own, Message: "m", Signature: "s", ProvedAt: time.Now()}
		if _, err := st.RecordWalletProof(ctx, third, 1); !errors.Is(err, apperr.ErrConflict) {
			t.Fatalf("a second wallet past a bound of one: %v", err)
		}
		if created, err := st.RecordWalletProof(ctx, &models.WalletProof{MerchantID: a.ID, Family: "evm", Address: shared, Message: "m", Signature: "s", ProvedAt: time.Now()}, 1); err != nil || created {
			t.Fatalf("the same wallet again at the bound: %v %v", created, err)
		}
		if err := st.DeleteWalletProof(ctx, d.ID, own); err != nil {
			t.Fatal(err)
		}
		if err := st.DeleteWalletProof(ctx, d.ID, own); !errors.Is(err, apperr.ErrNotFound) {
			t.Fatalf("withdrawn twice: %v", err)
		}
		if got := receiving(); got != "[a@0x5290 b@0x5290 c@0x8617]" {
			t.Fatalf("d withdrew its proof of c's wallet: %s", got)
		}
		if err := st.WalletsFree(ctx, c.ID, map[string]string{"w": own}); err != nil {
			t.Fatalf("c names its wallet once d withdrew: %v", err)
		}
	})
}
