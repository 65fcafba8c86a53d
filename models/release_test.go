package models_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
	"github.com/paygate/paygate/money"
)

// TestReleaseSessionTxHash: a session whose transaction the chain showed
// to be a stranger's gives the hash back, once: it returns to its status
// before the broadcast without the hash, the USDC the stranger moved to
// the merchant is a wrong_payer exception naming the session (with its
// event for the webhook), and a retry writes nothing again. A session
// holding another hash, or finished, is left alone; a released session
// takes a new hash and completes.
func TestReleaseSessionTxHash(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		f := newLinkFixture(t, st, "release@example.com", "payment.exception")
		cs := f.session("0x" + strings.Repeat("1", 64))
		storetest.Exec(t, st, "UPDATE checkout_sessions SET wallet_address = ? WHERE id = ?", "0x"+strings.Repeat("c", 40), cs.ID)
		stranger := "0x" + strings.Repeat("5", 64)
		move := func(status, hash string) {
			t.Helper()
			if err := st.RecordSessionTransition(ctx, models.Transition{SessionID: cs.ID, EntryID: models.NewID(), Status: status,
				Source: "client", TxHash: hash, At: time.Now()}); err != nil {
				t.Fatal(err)
			}
		}
		move(models.StatusWalletReady, "")
		move(models.StatusBroadcast, stranger)
		before, err := st.CheckoutSession(ctx, cs.ID)
		if err != nil {
			t.Fatal(err)
		}
		later := before.ExpiresAt.Add(7 * time.Minute).Truncate(time.Second)
		r := models.Release{SessionID: cs.ID, EntryID: models.NewID(), TxHash: stranger, Chain: "base_sepolia",
			Reason: models.ReasonInvalidTransfer, Message: "merchant received 1 units, expected 5000000", ReceivedUnits: "1",
			Payer: "0x" + strings.Repeat("d", 40), ExpiresAt: later, At: time.Now()}
		// Another hash than the session's: nothing.
		other := r
		other.EntryID, other.TxHash = models.NewID(), "0x"+strings.Repeat("6", 64)
		if got, err := st.ReleaseSessionTxHash(ctx, other); err != nil || got.Released || got.Status != models.StatusBroadcast {
			t.Fatalf("release of another hash: %+v %v", got, err)
		}
		first, err := st.ReleaseSessionTxHash(ctx, r)
		if err != nil || !first.Released || first.Status != models.StatusWalletReady || len(first.Deliveries) != 1 {
			t.Fatalf("release: %+v %v", first, err)
		}
		again, err := st.ReleaseSessionTxHash(ctx, r)
		if err != nil || !again.Released || again.Status != models.StatusWalletReady || len(again.Deliveries) != 0 {
			t.Fatalf("the release retried: %+v %v", again, err)
		}
		got, err := st.CheckoutSession(ctx, cs.ID)
		if err == nil && !got.ExpiresAt.Equal(later) {
			t.Errorf("expires at %v, want the time the hash held it given back: %v", got.ExpiresAt, later)
		}
		if err != nil || got.Status != models.StatusWalletReady || got.TxHash != nil || got.FailureReason != "" ||
			!strings.Contains(got.FailureMessage, stranger) || !strings.Contains(got.FailureMessage, "waits for its payment") {
			t.Fatalf("released session: %+v %v", got, err)
		}
		exc, _, err := st.PaymentExceptions(ctx, models.Scope{MerchantID: f.m.ID, Mode: models.ModeTest},
			models.ExceptionFilter{TxHash: stranger}, models.Page{Limit: 5})
		if err != nil || len(exc) != 1 || exc[0].Kind != models.ExceptionWrongPayer || exc[0].Amount != 1 ||
			len(exc[0].SessionIDs) != 1 || exc[0].SessionIDs[0] != cs.ID {
			t.Fatalf("the stranger's USDC: %+v %v", exc, err)
		}
		if n := storetest.Exec(t, st, "UPDATE checkout_session_events SET chain = chain WHERE session_id = ? AND status = ? AND source = ?",
			cs.ID, models.StatusWalletReady, "chain"); n != 1 {
			t.Errorf("%d release entries in the history, want 1", n)
		}
		if first.ExpiresAt.IsZero() || !first.ExpiresAt.Equal(later) {
			t.Errorf("the release answered expiry %v, want %v", first.ExpiresAt, later)
		}
		// Holds again and again give back at most an hour after creation.
		capped := f.session("0x" + strings.Repeat("2", 64))
		held := "0x" + strings.Repeat("9", 64)
		if err := st.RecordSessionTransition(ctx, models.Transition{SessionID: capped.ID, EntryID: models.NewID(), Status: models.StatusBroadcast,
			Source: "client", TxHash: held, At: time.Now()}); err != nil {
			t.Fatal(err)
		}
		long := r
		long.SessionID, long.EntryID, long.TxHash, long.ExpiresAt = capped.ID, models.NewID(), held, time.Now().Add(5*time.Hour)
		got2, err := st.ReleaseSessionTxHash(ctx, long)
		if err != nil || !got2.Released {
			t.Fatalf("release: %+v %v", got2, err)
		}
		stored, err := st.CheckoutSession(ctx, capped.ID)
		if err != nil || !stored.ExpiresAt.Equal(stored.CreatedAt.Add(time.Hour)) || !got2.ExpiresAt.Equal(stored.ExpiresAt) {
			t.Fatalf("a long hold gave back up to %v (answered %v), want an hour after creation %v: %v", stored.ExpiresAt, got2.ExpiresAt,
				stored.CreatedAt.Add(time.Hour), err)
		}

		// The customer's payment next.
		mine := "0x" + strings.Repeat("7", 64)
		if err := st.ClaimSessionTxHash(ctx, cs.ID, "base_sepolia", mine); err != nil {
			t.Fatal(err)
		}
		move(models.StatusBroadcast, mine)
		done, err := st.FinishSession(ctx, models.Outcome{SessionID: cs.ID, EntryID: models.NewID(), Status: models.StatusComplete,
			Source: "chain", Chain: "base_sepolia", ReceivedUnits: "5000000", Payer: "0x" + strings.Repeat("c", 40), Bound: true, At: time.Now()})
		if err != nil || done.Status != models.StatusComplete {
			t.Fatalf("the customer's payment: %+v %v", done, err)
		}
		late := r
		late.EntryID, late.TxHash = models.NewID(), mine
		if got, err := st.ReleaseSessionTxHash(ctx, late); err != nil || got.Released || got.Status != models.StatusComplete {
			t.Fatalf("release of a finished session: %+v %v", got, err)
		}
	})
}

// A plain transfer from a session's declared wallet, of exactly its
// amount, may pay it while it waits for a broadcast (not expired) or while
// another hash the chain has not shown holds it (txn_broadcast); never a
// session whose hash was seen, nor one holding this very transfer.
func TestOpenSessionsPaidBy(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		f := newLinkFixture(t, st, "paidby@example.com")
		payer := "0x" + strings.Repeat("c", 40)
		plain := "0x" + strings.Repeat("7", 64)
		open := func(ref, status, hash string, expired bool) *models.CheckoutSession {
			t.Helper()
			cs := f.session(ref)
			storetest.Exec(t, st, "UPDATE checkout_sessions SET wallet_address = ? WHERE id = ?", payer, cs.ID)
			until := time.Now().Add(30 * time.Minute)
			if expired {
				until = time.Now().Add(-time.Minute)
			}
			storetest.Exec(t, st, "UPDATE checkout_sessions SET expires_at = ? WHERE id = ?", until, cs.ID)
			if status != models.StatusCreated {
				if err := st.RecordSessionTransition(ctx, models.Transition{SessionID: cs.ID, EntryID: models.NewID(), Status: status,
					Source: "client", TxHash: hash, At: time.Now()}); err != nil {
					t.Fatal(err)
				}
			}
			return cs
		}
		find := func(units int64, from string) []string {
			t.Helper()
			rows, err := st.OpenSessionsPaidBy(ctx, f.m.ID, "base_sepolia", from, plain, units)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, r := range rows {
				ids = append(ids, r.ID)
			}
			return ids
		}
		due := money.FromCents(500).Units()
		waiting := open("0x"+strings.Repeat("1", 64), models.StatusCreated, "", false)
		if got := find(due, strings.ToUpper(payer[:2])+payer[2:]); len(got) != 1 || got[0] != waiting.ID {
			t.Fatalf("a waiting session: %v", got)
		}
		if got := find(due-1, payer); len(got) != 0 {
			t.Fatalf("another amount: %v", got)
		}
		if got := find(due, "0x"+strings.Repeat("d", 40)); len(got) != 0 {
			t.Fatalf("another wallet: %v", got)
		}
		// Waiting sessions that expired, held by this very transfer or by
		// a hash the chain has shown (confirming) are not offered it.
		storetest.Exec(t, st, "UPDATE checkout_sessions SET expires_at = ? WHERE id = ?", time.Now().Add(-time.Minute), waiting.ID)
		open("0x"+strings.Repeat("2", 64), models.StatusCreated, "", true)
		open("0x"+strings.Repeat("3", 64), models.StatusBroadcast, plain, false)
		seen := open("0x"+strings.Repeat("4", 64), models.StatusBroadcast, "0x"+strings.Repeat("8", 64), false)
		if err := st.RecordSessionTransition(ctx, models.Transition{SessionID: seen.ID, EntryID: models.NewID(), Status: models.StatusConfirming,
			Source: "chain", At: time.Now()}); err != nil {
			t.Fatal(err)
		}
		if got := find(due, payer); len(got) != 0 {
			t.Fatalf("expired, held by it, or seen: %v", got)
		}
		// Held by a hash the chain has not shown, even past its expiry
		// (the hash holds it): offered.
		held := open("0x"+strings.Repeat("5", 64), models.StatusBroadcast, "0x"+strings.Repeat("9", 64), true)
		if got := find(due, payer); len(got) != 1 || got[0] != held.ID {
			t.Fatalf("held by an unseen hash: %v", got)
		}
		// A session waiting for its payment comes first: the held one does
		// not make the match ambiguous.
		next := open("0x"+strings.Repeat("6", 64), models.StatusCreated, "", false)
		if got := find(due, payer); len(got) != 1 || got[0] != next.ID {
			t.Fatalf("a waiting session and a held one: %v", got)
		}
	})
}

// ReplaceSessionTxHash swaps a broadcast session's unseen hash for another
// in one write, once: two history entries (back to the status before the
// broadcast, then the broadcast of the new hash, both from the chain), the
// hold's time given back; a repeat with other entry ids (a retried
// workflow task) answers Replaced and writes nothing. A session holding
// another hash, confirming or finished is left alone. A release repeated
// with another entry id answers Released.
func TestReplaceSessionTxHash(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		f := newLinkFixture(t, st, "replace@example.com")
		held, plain := "0x"+strings.Repeat("a", 64), "0x"+strings.Repeat("b", 64)
		move := func(cs *models.CheckoutSession, status, hash string) {
			t.Helper()
			if err := st.RecordSessionTransition(ctx, models.Transition{SessionID: cs.ID, EntryID: models.NewID(), Status: status,
				Source: "client", TxHash: hash, At: time.Now()}); err != nil {
				t.Fatal(err)
			}
		}
		cs := f.session("0x" + strings.Repeat("1", 64))
		move(cs, models.StatusWalletReady, "")
		move(cs, models.StatusBroadcast, held)
		before, err := st.CheckoutSession(ctx, cs.ID)
		if err != nil {
			t.Fatal(err)
		}
		later := before.ExpiresAt.Add(2 * time.Minute).Truncate(time.Second)
		r := models.Replacement{SessionID: cs.ID, Held: held, TxHash: plain, Chain: "base_sepolia", ReleaseEntryID: models.NewID(),
			BroadcastEntryID: models.NewID(), ExpiresAt: later, At: time.Now()}
		got, err := st.ReplaceSessionTxHash(ctx, r)
		if err != nil || !got.Replaced || got.Status != models.StatusWalletReady || !got.ExpiresAt.Equal(later) {
			t.Fatalf("replace: %+v %v", got, err)
		}
		again := r
		again.ReleaseEntryID, again.BroadcastEntryID = models.NewID(), models.NewID()
		if got, err := st.ReplaceSessionTxHash(ctx, again); err != nil || !got.Replaced || got.Status != models.StatusWalletReady {
			t.Fatalf("replace retried: %+v %v", got, err)
		}
		after, err := st.CheckoutSession(ctx, cs.ID)
		if err != nil || after.Status != models.StatusBroadcast || after.TxHash == nil || *after.TxHash != plain || after.FailureMessage != "" ||
			!after.ExpiresAt.Equal(later) {
			t.Fatalf("replaced session: %+v %v", after, err)
		}
		if n := storetest.Exec(t, st, "UPDATE checkout_session_events SET chain = chain WHERE session_id = ? AND source = ?", cs.ID, "chain"); n != 2 {
			t.Errorf("%d entries from the chain, want 2 (the release, the broadcast)", n)
		}
		// Holding another hash, or the new one seen (confirming): nothing.
		other := r
		other.Held, other.TxHash, other.ReleaseEntryID, other.BroadcastEntryID = held, "0x"+strings.Repeat("c", 64), models.NewID(), models.NewID()
		if got, err := st.ReplaceSessionTxHash(ctx, other); err != nil || got.Replaced {
			t.Fatalf("replacing a hash the session no longer holds: %+v %v", got, err)
		}
		move(cs, models.StatusConfirming, "")
		other.Held = plain
		if got, err := st.ReplaceSessionTxHash(ctx, other); err != nil || got.Replaced || got.Status != models.StatusConfirming {
			t.Fatalf("replacing a seen hash: %+v %v", got, err)
		}
		// A release that committed, asked again by a retried workflow task
		// with another entry id, answers released.
		rel := f.session("0x" + strings.Repeat("2", 64))
		move(rel, models.StatusBroadcast, "0x"+strings.Repeat("d", 64))
		first := models.Release{SessionID: rel.ID, EntryID: models.NewID(), TxHash: "0x" + strings.Repeat("d", 64), Chain: "base_sepolia",
			Reason: models.ReasonInvalidTransfer, Message: "paid nothing", At: time.Now()}
		if got, err := st.ReleaseSessionTxHash(ctx, first); err != nil || !got.Released {
			t.Fatalf("release: %+v %v", got, err)
		}
		retried := first
		retried.EntryID = models.NewID()
		if got, err := st.ReleaseSessionTxHash(ctx, retried); err != nil || !got.Released || got.Status != models.StatusCreated {
			t.Fatalf("release retried with another entry id: %+v %v", got, err)
		}
	})
}

// TestTransferOfAFailedSessionIsUnaccounted: a session failed TX_NOT_FOUND
// keeps its hash, and a transfer of that hash mined later (a dropped
// transaction broadcast again) counted as accounted for: the unmatched
// scan dropped it, recorded nowhere. A failed session holds no money (one
// that received some keeps it as an exception); an open one still
// accounts for its hash.
func TestTransferOfAFailedSessionIsUnaccounted(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		m := newMerchant(t, st, "notfound@x.io")
		cs := baseSessionDue(t, st, m, "0x00000000000000000000000000000000000000aa", "0x00000000000000000000000000000000000000cc", 500)
		h := "0x" + strings.Repeat("ab", 32)
		broadcastHash(t, st, cs, h)
		if held, err := st.TransferAccountedFor(ctx, cs.MerchantID, cs.Network, h); err != nil || !held {
			t.Fatalf("a session confirming the hash: accounted %v %v", held, err)
		}
		if _, err := st.FinishSession(ctx, models.Outcome{SessionID: cs.ID, EntryID: models.NewID(), Source: "chain", At: time.Now(),
			Status: models.StatusFailed, Reason: models.ReasonTxNotFound, ReceivedUnits: "0"}); err != nil {
			t.Fatal(err)
		}
		if held, err := st.TransferAccountedFor(ctx, cs.MerchantID, cs.Network, h); err != nil || held {
			t.Fatalf("after the session failed TX_NOT_FOUND: accounted %v %v", held, err)
		}
	})
}

// TestRefutedRecordGivesWay: a record the chain refuted (the merchant
// typed the wrong amount) blocked its hash for good: recording it again
// was a 409, the unmatched scan counted it accounted for (no exception),
// and a customer's session submitting the hash was refused. It backs
// nothing now: the transfer is unaccounted for, its exception opens, a
// session may claim the hash, and the merchant records it again.
func TestRefutedRecordGivesWay(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		m := newMerchant(t, st, "refuted@x.io")
		sc := models.Scope{MerchantID: m.ID, Mode: models.ModeTest}
		const wallet = "0x00000000000000000000000000000000000000aa"
		h := "0x" + strings.Repeat("cd", 32)
		rec := &models.Transaction{MerchantID: m.ID, Mode: models.ModeTest, Amount: money.FromCents(10000), Token: "USDC",
			Network: "base_sepolia", TxHash: h, MerchantWalletAddress: wallet}
		if err := st.RecordTransaction(ctx, rec); err != nil {
			t.Fatal(err)
		}
		if err := st.SetRecordVerification(ctx, rec.ID, models.VerificationFailed, "only 10.00 USDC reached the wallet"); err != nil {
			t.Fatal(err)
		}
		if held, err := st.TransferAccountedFor(ctx, m.ID, "base_sepolia", h); err != nil || held {
			t.Fatalf("a refuted record accounts for its transfer: %v %v", held, err)
		}
		_, err := st.OpenException(ctx, &models.PaymentException{MerchantID: m.ID, Mode: models.ModeTest, Network: "base_sepolia", TxHash: h,
			Kind: models.ExceptionUnmatched, Amount: money.FromCents(1000), PayerAddress: "0x00000000000000000000000000000000000000bb",
			MerchantWalletAddress: wallet})
		if err != nil {
			t.Fatal(err)
		}
		if excs, _, err := st.PaymentExceptions(ctx, sc, models.ExceptionFilter{TxHash: h}, models.Page{Limit: 5}); err != nil || len(excs) != 1 {
			t.Fatalf("the transfer's exception: %+v %v", excs, err)
		}
		cs := baseSessionDue(t, st, m, wallet, "0x00000000000000000000000000000000000000bb", 1000)
		if err := st.ClaimSessionTxHash(ctx, cs.ID, "base_sepolia", h); err != nil {
			t.Fatalf("a session claiming the refuted record's hash: %v", err)
		}
		again := &models.Transaction{MerchantID: m.ID, Mode: models.ModeTest, Amount: money.FromCents(1000), Token: "USDC",
			Network: "base_sepolia", TxHash: h, MerchantWalletAddress: wallet}
		if err := st.RecordTransaction(ctx, again); err != nil {
			t.Fatalf("recording the transfer again with its amount: %v", err)
		}
		if got, err := st.Transaction(ctx, sc, again.ID); err != nil || got.Verification != models.VerificationPending || got.Amount != money.FromCents(1000) {
			t.Fatalf("the new record: %+v %v", got, err)
		}
		if _, err := st.Transaction(ctx, sc, rec.ID); err == nil {
			t.Fatal("the refuted record is still there")
		}
	})
}

// baseSessionDue opens a session due cents on base_sepolia, of a new link
// paying wallet, declaring declared.
func baseSessionDue(t *testing.T, st *models.Store, m *models.Merchant, wallet, declared string, cents int64) *models.CheckoutSession {
	t.Helper()
	ctx := context.Background()
	link := &models.PaymentLink{MerchantID: m.ID, Mode: models.ModeTest, Name: "L", Amount: money.FromCents(cents), Currency: "USD",
		Network: "base_sepolia", Networks: models.StringList{"base_sepolia"}, Token: "USDC",
		WalletAddresses: models.StringMap{"base_sepolia": wallet}, MerchantWalletAddress: wallet}
	if err := st.CreatePaymentLink(ctx, link); err != nil {
		t.Fatal(err)
	}
	cs := &models.CheckoutSession{MerchantID: m.ID, Mode: models.ModeTest, PaymentLinkID: link.ID, Network: "base_sepolia",
		Subtotal: money.FromCents(cents), ExpectedAmount: money.FromCents(cents), WalletAddress: declared,
		MerchantWalletAddress: wallet, TokenAddress: "0xdef", ExpiresAt: time.Now().Add(time.Hour)}
	if err := st.CreateCheckoutSession(ctx, cs); err != nil {
		t.Fatal(err)
	}
	return cs
}

// broadcastHash attaches hash to cs as the checkout workflow's submit does
// (the claim, then the broadcast entry).
func broadcastHash(t *testing.T, st *models.Store, cs *models.CheckoutSession, hash string) {
	t.Helper()
	ctx := context.Background()
	if err := st.ClaimSessionTxHash(ctx, cs.ID, cs.Network, hash); err != nil {
		t.Fatal(err)
	}
	if err := st.RecordSessionTransition(ctx, models.Transition{SessionID: cs.ID, EntryID: models.NewID(), Status: models.StatusBroadcast,
		Source: "client", TxHash: hash, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
}
