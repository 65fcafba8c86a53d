package models_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
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
		if err := st.WalletsFree(ctx, b.ID, nw("a", shared), nw("b", own), nw("c", "")); err != nil {
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
		if err := st.WalletsFree(ctx, b.ID, nw("mine", own), nw("wallets.evm", shared), nw("again", shared)); !errors.Is(err, apperr.ErrBadRequest) ||
			err.Error() != "again: the wallet "+shared+" is proven by another merchant account; wallets.evm: the wallet "+shared+" is proven by another merchant account" {
			t.Fatalf("b names a's wallet: %v", err)
		}
		if err := st.WalletsFree(ctx, a.ID, nw("w", shared)); err != nil {
			t.Fatalf("a names its own: %v", err)
		}
		if _, err := st.RecordWalletProof(ctx, &models.WalletProof{MerchantID: b.ID, Family: "evm", Address: shared, Message: "m", Signature: "s", ProvedAt: time.Now()}, 0); err != nil {
			t.Fatal(err)
		}
		if err := st.WalletsFree(ctx, b.ID, nw("w", shared)); err != nil {
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
		if err := st.WalletsFree(ctx, c.ID, nw("w", own)); err != nil {
			t.Fatalf("c names its wallet once d withdrew: %v", err)
		}
	})
}

// nw names a wallet for every network of its family.
func nw(field, address string) models.NamedWallet {
	return models.NamedWallet{Field: field, Address: address}
}

// TestContractWalletProofScope: a contract wallet's proof (EIP-1271, checked
// on one network) holds on that network only: the same address elsewhere
// may be another party's contract, so there it keeps no one out and takes
// no one's transfers. A merchant proves it once per network; the proofs
// count as one wallet toward the bound, and a withdrawal ends them all.
func TestContractWalletProofScope(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		a, b := newMerchant(t, st, "cwa@example.com"), newMerchant(t, st, "cwb@example.com")
		const safe = "0x52908400098527886E0F7030069857D2E4169EE7"
		for _, m := range []*models.Merchant{a, b} {
			if err := st.CreatePaymentLink(ctx, &models.PaymentLink{MerchantID: m.ID, Mode: models.ModeTest, Name: "L", Amount: money.FromCents(100),
				Currency: "USD", Network: "base_sepolia", Networks: models.StringList{"base_sepolia", "polygon_amoy"}, Token: "USDC",
				WalletAddresses: models.StringMap{"base_sepolia": safe, "polygon_amoy": safe}, MerchantWalletAddress: safe}); err != nil {
				t.Fatal(err)
			}
		}
		receiving := func(network string) string {
			t.Helper()
			ws, err := st.ReceivingWallets(ctx, network, models.ModeTest)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, w := range ws {
				out = append(out, map[string]string{a.ID: "a", b.ID: "b"}[w.MerchantID])
			}
			sort.Strings(out)
			return fmt.Sprint(out)
		}
		prove := func(m *models.Merchant, network string, max int) (bool, error) {
			return st.RecordWalletProof(ctx, &models.WalletProof{MerchantID: m.ID, Family: "evm", Address: safe, Network: network,
				Message: "m", Signature: "0x" + strings.Repeat("ab", 65*3), ProvedAt: time.Now()}, max)
		}
		if created, err := prove(a, "polygon_amoy", 0); err != nil || !created {
			t.Fatalf("a proves the contract on polygon_amoy: %v %v", created, err)
		}
		if got := receiving("polygon_amoy"); got != "[a]" {
			t.Fatalf("polygon_amoy: %s", got)
		}
		if got := receiving("base_sepolia"); got != "[a b]" {
			t.Fatalf("base_sepolia, where nobody proved it: %s", got)
		}
		on := func(network string) models.NamedWallet {
			return models.NamedWallet{Field: "merchantWalletAddresses." + network, Address: safe, Network: network}
		}
		if err := st.WalletsFree(ctx, b.ID, on("base_sepolia"), nw("wallets.evm", safe)); err != nil {
			t.Fatalf("b names it on base_sepolia, and as its default: %v", err)
		}
		if err := st.WalletsFree(ctx, b.ID, on("base_sepolia"), on("polygon_amoy")); !errors.Is(err, apperr.ErrBadRequest) ||
			!strings.HasPrefix(err.Error(), "merchantWalletAddresses.polygon_amoy: the wallet") || strings.Contains(err.Error(), "base_sepolia:") {
			t.Fatalf("b names it on polygon_amoy: %v", err)
		}
		provers, err := st.WalletProvers(ctx, []string{safe})
		if err != nil || len(provers.On(safe, "")) != 0 || !provers.On(safe, "polygon_amoy")[a.ID] || len(provers.On(safe, "base_sepolia")) != 0 {
			t.Fatalf("provers %+v %v", provers, err)
		}
		// a's own contract wallet, proven on polygon_amoy only: it takes
		// payments to come there only (on base_sepolia the address may hold
		// no contract, or another's); a transfer that happened may still be
		// recorded, and a default is checked where it is used.
		for _, c := range []struct {
			network string
			bar     models.WalletBar
			on      string
		}{{"polygon_amoy", models.WalletUnbarred, "[]"}, {"base_sepolia", models.WalletContractElsewhere, "[polygon_amoy]"}, {"", models.WalletUnbarred, "[]"}} {
			if bar, on := provers.Bar(safe, c.network, a.ID); bar != c.bar || fmt.Sprint(on) != c.on {
				t.Fatalf("a's bar on %q: %v %v", c.network, bar, on)
			}
		}
		if bar, _ := provers.Bar(safe, "polygon_amoy", b.ID); bar != models.WalletProvenByOther {
			t.Fatalf("b's bar on polygon_amoy: %v", bar)
		}
		if err := st.WalletsReceive(ctx, a.ID, on("polygon_amoy"), nw("wallets.evm", safe)); err != nil {
			t.Fatalf("a names it on polygon_amoy: %v", err)
		}
		if err := st.WalletsReceive(ctx, a.ID, on("polygon_amoy"), on("base_sepolia")); !errors.Is(err, apperr.ErrBadRequest) ||
			err.Error() != "merchantWalletAddresses.base_sepolia: the wallet "+safe+" is a contract wallet proven on polygon_amoy only: on base_sepolia the same address may hold no contract, or someone else's" {
			t.Fatalf("a names it on base_sepolia: %v", err)
		}
		if err := st.WalletsFree(ctx, a.ID, on("base_sepolia")); err != nil {
			t.Fatalf("a records a transfer to it on base_sepolia: %v", err)
		}
		// a's link names it on base_sepolia too: that network takes no
		// payment now; b proved nothing, so nothing of b's is barred.
		notProven := func(m *models.Merchant) string {
			t.Helper()
			got, err := st.WalletNotProvenOn(ctx, m.ID, safe)
			if err != nil {
				t.Fatal(err)
			}
			return fmt.Sprint(got)
		}
		if got := notProven(a); got != "[base_sepolia]" {
			t.Fatalf("a's links not proven on: %s", got)
		}
		if got := notProven(b); got != "[]" {
			t.Fatalf("b's links not proven on: %s", got)
		}
		if err := st.WalletsReceive(ctx, b.ID, on("polygon_amoy"), on("base_sepolia")); !errors.Is(err, apperr.ErrBadRequest) ||
			!strings.HasPrefix(err.Error(), "merchantWalletAddresses.polygon_amoy: the wallet") || strings.Contains(err.Error(), "base_sepolia:") {
			t.Fatalf("b names it to receive: %v", err)
		}

		// Once per network; both count as one wallet toward the bound.
		if created, err := prove(a, "base_sepolia", 1); err != nil || !created {
			t.Fatalf("a proves it on base_sepolia too: %v %v", created, err)
		}
		if created, err := prove(a, "polygon_amoy", 1); err != nil || created {
			t.Fatalf("again on polygon_amoy: %v %v", created, err)
		}
		if got := receiving("base_sepolia"); got != "[a]" {
			t.Fatalf("base_sepolia after a's second proof: %s", got)
		}
		if err := st.WalletsReceive(ctx, a.ID, on("polygon_amoy"), on("base_sepolia")); err != nil {
			t.Fatalf("a names it on both, proven on both: %v", err)
		}
		if got := notProven(a); got != "[]" {
			t.Fatalf("a's links not proven on, proven on both: %s", got)
		}
		if ps, err := st.WalletProofs(ctx, a.ID); err != nil || len(ps) != 2 || ps[0].Network != "polygon_amoy" || ps[1].Network != "base_sepolia" {
			t.Fatalf("a's proofs: %+v %v", ps, err)
		}
		if err := st.DeleteWalletProof(ctx, a.ID, safe); err != nil {
			t.Fatal(err)
		}
		if got := receiving("polygon_amoy"); got != "[a b]" {
			t.Fatalf("withdrawn: %s", got)
		}
	})
}
