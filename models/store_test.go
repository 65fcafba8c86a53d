package models_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
	"github.com/paygate/paygate/money"
)

func newMerchant(t *testing.T, st *models.Store, email string) *models.Merchant {
	t.Helper()
	m := &models.Merchant{Email: email, PasswordHash: "x", BusinessName: "Shop"}
	sess := &models.DashboardSession{TokenHash: "sess-" + email}
	if _, err := st.CreateMerchant(context.Background(), m, sess, models.NewKey{Hash: "key-" + email, Prefix: "p", Suffix: "s", Type: models.ModeTest}); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestMigrateTwiceIsNoop(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		if err := st.Migrate(); err != nil {
			t.Fatalf("second migrate: %v", err)
		}
	})
}

func TestMerchantEmailUnique(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		newMerchant(t, st, "a@example.com")
		m := &models.Merchant{Email: "a@example.com", PasswordHash: "x", BusinessName: "B"}
		_, err := st.CreateMerchant(context.Background(), m, &models.DashboardSession{TokenHash: "other"}, models.NewKey{Hash: "other", Type: models.ModeTest})
		if !errors.Is(err, apperr.ErrConflict) {
			t.Fatalf("want conflict, got %v", err)
		}
	})
}

func TestOneActiveKeyPerType(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		m := newMerchant(t, st, "k@example.com")
		k2, err := st.ReplaceAPIKey(ctx, m.ID, models.NewKey{Hash: "k2", Prefix: "p", Suffix: "s", Type: models.ModeTest})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.APIKeyByHash(ctx, "key-k@example.com"); !errors.Is(err, apperr.ErrNotFound) {
			t.Fatalf("old key must be revoked, got %v", err)
		}
		if got, err := st.APIKeyByHash(ctx, "k2"); err != nil || got.ID != k2.ID {
			t.Fatalf("new key: %v %v", got, err)
		}
		keys, _ := st.APIKeys(ctx, m.ID)
		if len(keys) != 1 {
			t.Fatalf("want 1 active key, got %d", len(keys))
		}
		// Concurrent regenerations leave exactly one active key.
		var wg sync.WaitGroup
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				_, _ = st.ReplaceAPIKey(ctx, m.ID, models.NewKey{Hash: "c" + string(rune('a'+i)), Prefix: "p", Suffix: "s", Type: models.ModeTest})
			}(i)
		}
		wg.Wait()
		keys, _ = st.APIKeys(ctx, m.ID)
		if len(keys) != 1 {
			t.Fatalf("after races want 1 active key, got %d", len(keys))
		}
	})
}

func TestCustomerEmailUniquePerMerchantAndMode(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		a := newMerchant(t, st, "a@x.io")
		b := newMerchant(t, st, "b@x.io")
		mk := func(m string, mode models.Mode) error {
			return st.CreateCustomer(ctx, &models.Customer{MerchantID: m, Mode: mode, Email: "c@x.io"})
		}
		if err := mk(a.ID, models.ModeTest); err != nil {
			t.Fatal(err)
		}
		if err := mk(a.ID, models.ModeTest); !errors.Is(err, apperr.ErrConflict) {
			t.Fatalf("duplicate: %v", err)
		}
		if err := mk(a.ID, models.ModeLive); err != nil {
			t.Fatalf("other mode: %v", err)
		}
		if err := mk(b.ID, models.ModeTest); err != nil {
			t.Fatalf("other merchant: %v", err)
		}
	})
}

// TestCustomerMetadataUpdatesAtOnce: twenty updates at once, each adding
// its own metadata key, keep all twenty (PostgreSQL merged each into the row
// as read without a lock and wrote back the others' keys lost: 9 of 20 kept).
func TestCustomerMetadataUpdatesAtOnce(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		m := newMerchant(t, st, "md@x.io")
		sc := models.Scope{MerchantID: m.ID, Mode: models.ModeTest}
		c := &models.Customer{MerchantID: m.ID, Mode: models.ModeTest, Email: "c@x.io"}
		if err := st.CreateCustomer(ctx, c); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 20)
		for i := range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := st.UpdateCustomer(ctx, sc, c.ID, models.CustomerUpdate{Metadata: map[string]string{fmt.Sprint("k", i): "v"}})
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		got, err := st.Customer(ctx, sc, c.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Metadata) != 20 {
			t.Errorf("kept %d of 20 metadata keys: %v", len(got.Metadata), got.Metadata)
		}
	})
}

// newTenDollarLink creates a link of 10.00 USD on base_sepolia for m.
func newTenDollarLink(t *testing.T, st *models.Store, m *models.Merchant) *models.PaymentLink {
	t.Helper()
	link := &models.PaymentLink{MerchantID: m.ID, Mode: models.ModeTest, Name: "L", Amount: money.FromCents(1000),
		Currency: "USD", Network: "base_sepolia", Networks: models.StringList{"base_sepolia"}, Token: "USDC",
		WalletAddresses: models.StringMap{"base_sepolia": "0xabc"}, MerchantWalletAddress: "0xabc"}
	if err := st.CreatePaymentLink(context.Background(), link); err != nil {
		t.Fatal(err)
	}
	return link
}

func TestRecordTransactionClaimsHashAndUpdatesTotals(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		m := newMerchant(t, st, "t@x.io")
		sc := models.Scope{MerchantID: m.ID, Mode: models.ModeTest}
		link := newTenDollarLink(t, st, m)
		mkTx := func() *models.Transaction {
			return &models.Transaction{MerchantID: m.ID, Mode: models.ModeTest, PaymentLinkID: &link.ID, Amount: money.FromCents(1000),
				Token: "USDC", Network: "base_sepolia", TxHash: "0x01", CustomerEmail: "payer@x.io", CustomerName: "P"}
		}
		if err := st.RecordTransaction(ctx, mkTx()); err != nil {
			t.Fatal(err)
		}
		if err := st.RecordTransaction(ctx, mkTx()); !errors.Is(err, apperr.ErrConflict) {
			t.Fatalf("reused hash: %v", err)
		}
		l, _ := st.PaymentLink(ctx, sc, link.ID)
		if l.TotalCollected != money.FromCents(1000) || l.TotalTransactions != 1 {
			t.Fatalf("link totals %v %d", l.TotalCollected, l.TotalTransactions)
		}
		cs, _, _ := st.Customers(ctx, sc, models.Page{Limit: 10})
		if len(cs) != 1 || cs[0].TotalSpent != money.FromCents(1000) || cs[0].TransactionCount != 1 {
			t.Fatalf("customer %+v", cs)
		}
		// The same hash on another network is a different transfer.
		other := mkTx()
		other.Network = "eth_sepolia"
		if err := st.RecordTransaction(ctx, other); err != nil {
			t.Fatal(err)
		}
	})
}

func TestCursorPagination(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		m := newMerchant(t, st, "p@x.io")
		sc := models.Scope{MerchantID: m.ID, Mode: models.ModeTest}
		var ids []string
		for i := 0; i < 5; i++ {
			c := &models.Customer{MerchantID: m.ID, Mode: models.ModeTest, Email: string(rune('a'+i)) + "@x.io"}
			if err := st.CreateCustomer(ctx, c); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, c.ID)
		}
		var seen []string
		cursor := ""
		for {
			page, more, err := st.Customers(ctx, sc, models.Page{Limit: 2, StartingAfter: cursor})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range page {
				seen = append(seen, c.ID)
			}
			if !more {
				break
			}
			cursor = page[len(page)-1].ID
		}
		if len(seen) != 5 {
			t.Fatalf("saw %d", len(seen))
		}
		for i := range seen {
			if seen[i] != ids[4-i] {
				t.Fatalf("order: %v vs %v", seen, ids)
			}
		}
	})
}

func TestSettlementBalance(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		m := newMerchant(t, st, "b@x.io")
		rec := &models.Transaction{MerchantID: m.ID, Mode: models.ModeLive, Amount: money.FromCents(10000),
			Token: "USDC", Network: "base", TxHash: "0xaa"}
		if err := st.RecordTransaction(ctx, rec); err != nil {
			t.Fatal(err)
		}
		// A record counts only once the chain confirms it.
		if bals, _ := st.Balances(ctx, m.ID); len(bals) != 0 && bals[0].Available != 0 {
			t.Fatalf("an unverified record counted: %+v", bals)
		}
		if err := st.SetRecordVerification(ctx, rec.ID, models.VerificationVerified, "ok"); err != nil {
			t.Fatal(err)
		}
		mk := func(cents int64, hash string) error {
			return st.CreateSettlement(ctx, &models.Settlement{MerchantID: m.ID, Amount: money.FromCents(cents), Token: "USDC",
				Network: "base", DestinationWallet: "0xdest", TxHash: hash})
		}
		if err := mk(6000, "0x1"); err != nil {
			t.Fatal(err)
		}
		if err := mk(4001, "0x2"); !errors.Is(err, apperr.ErrBadRequest) {
			t.Fatalf("over balance: %v", err)
		}
		if err := mk(4000, "0x3"); err != nil {
			t.Fatal(err)
		}
		bals, _ := st.Balances(ctx, m.ID)
		if len(bals) != 1 || bals[0].Available != 0 {
			t.Fatalf("balances %+v", bals)
		}
	})
}

// Claims on a hash are per merchant and provisional until a session
// completes: a failed session never blocks anyone, a completed one blocks
// only its own merchant, two sessions without proof on one transfer are
// contested (an exception, no completion), a transfer carrying another
// session's reference never completes this one, and USDC that reached the
// merchant without paying a session becomes an exception that the merchant
// resolves into a transaction.
func TestPaymentClaims(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		m := newMerchant(t, st, "claims@x.io")
		other := newMerchant(t, st, "other@x.io")
		link := &models.PaymentLink{MerchantID: m.ID, Mode: models.ModeTest, Name: "L", Amount: money.FromCents(500), Currency: "USD",
			Network: "base_sepolia", Networks: models.StringList{"base_sepolia"}, Token: "USDC",
			WalletAddresses: models.StringMap{"base_sepolia": "0xabc"}, MerchantWalletAddress: "0xabc"}
		if err := st.CreatePaymentLink(ctx, link); err != nil {
			t.Fatal(err)
		}
		n := 0
		session := func(hash string) *models.CheckoutSession {
			n++
			ref := fmt.Sprintf("0x%064x", n)
			cs := &models.CheckoutSession{MerchantID: m.ID, Mode: models.ModeTest, PaymentLinkID: link.ID, Network: "base_sepolia",
				ExpectedAmount: money.FromCents(500), MerchantWalletAddress: "0xabc", TokenAddress: "0xdef", PaymentReference: &ref,
				CustomerEmail: fmt.Sprintf("c%d@x.io", n)}
			if err := st.CreateCheckoutSession(ctx, cs); err != nil {
				t.Fatal(err)
			}
			if hash != "" {
				if err := st.ClaimSessionTxHash(ctx, cs.ID, "base_sepolia", hash); err != nil {
					t.Fatalf("claim %s: %v", hash, err)
				}
				if err := st.RecordSessionTransition(ctx, models.Transition{SessionID: cs.ID, EntryID: models.NewID(),
					Status: models.StatusBroadcast, Source: "client", TxHash: hash, At: time.Now()}); err != nil {
					t.Fatal(err)
				}
				cs.TxHash = &hash
			}
			return cs
		}
		finish := func(cs *models.CheckoutSession, o models.Outcome) models.FinishResult {
			o.SessionID, o.EntryID, o.Source, o.At = cs.ID, models.NewID(), "chain", time.Now()
			res, err := st.FinishSession(ctx, o)
			if err != nil {
				t.Fatal(err)
			}
			return res
		}
		record := func(merchant, hash string) error {
			return st.RecordTransaction(ctx, &models.Transaction{MerchantID: merchant, Mode: models.ModeTest, Amount: money.FromCents(500),
				Token: "USDC", Network: "base_sepolia", TxHash: hash})
		}
		hash := func(c byte) string { return "0x" + strings.Repeat(string(c), 64) }

		// A failed session blocks nothing (a stranger's submit burns nothing).
		for _, reason := range []string{models.ReasonTxNotFound, models.ReasonInvalidTransfer, "TX_REVERTED"} {
			h := hash(reason[3])
			finish(session(h), models.Outcome{Status: models.StatusFailed, Reason: reason})
			session(h) // another session of the merchant may take it
			if err := record(m.ID, h); err != nil {
				t.Fatalf("after %s the merchant must be able to record the hash: %v", reason, err)
			}
		}

		// A completed session blocks its merchant only.
		h := hash('a')
		paid := session(h)
		if got := finish(paid, models.Outcome{Status: models.StatusComplete, ReceivedUnits: "5000000", Bound: true}); got.Status != models.StatusComplete {
			t.Fatalf("bound transfer: %+v", got)
		}
		later := session("")
		if err := st.ClaimSessionTxHash(ctx, later.ID, "base_sepolia", h); !errors.Is(err, apperr.ErrConflict) {
			t.Fatalf("a paid hash on another session of the merchant: %v", err)
		}
		if err := st.ClaimSessionTxHash(ctx, paid.ID, "base_sepolia", h); err != nil {
			t.Fatalf("the session's own hash again: %v", err)
		}
		if err := record(m.ID, h); !errors.Is(err, apperr.ErrConflict) {
			t.Fatalf("recording a paid hash again: %v", err)
		}
		if err := record(other.ID, h); err != nil {
			t.Fatalf("another merchant's record is never blocked: %v", err)
		}

		// Two sessions without proof on one transfer: contested, neither completes.
		h = hash('b')
		first, second := session(h), session(h)
		if got := finish(first, models.Outcome{Status: models.StatusComplete, ReceivedUnits: "5000000", Payer: "0xpayer"}); got.Status != models.StatusFailed || got.Reason != models.ReasonTxContested {
			t.Fatalf("contested first: %+v", got)
		}
		if got := finish(second, models.Outcome{Status: models.StatusComplete, ReceivedUnits: "5000000", Payer: "0xpayer"}); got.Status != models.StatusFailed || got.Reason != models.ReasonTxContested {
			t.Fatalf("contested second: %+v", got)
		}
		excs, _, err := st.PaymentExceptions(ctx, models.Scope{MerchantID: m.ID, Mode: models.ModeTest}, models.ExceptionFilter{TxHash: h}, models.Page{Limit: 10})
		if err != nil || len(excs) != 1 || excs[0].Kind != models.ExceptionContested || len(excs[0].SessionIDs) != 2 || excs[0].Amount != money.FromCents(500) {
			t.Fatalf("contested exception: %+v %v", excs, err)
		}
		// A session with proof on the same transfer is not held up by it.
		proven := session(h)
		if got := finish(proven, models.Outcome{Status: models.StatusComplete, ReceivedUnits: "5000000", Bound: true}); got.Status != models.StatusComplete {
			t.Fatalf("a proven session must complete: %+v", got)
		}

		// A transfer carrying another session's reference is that session's.
		h = hash('c')
		owner, thief := session(""), session(h)
		if got := finish(thief, models.Outcome{Status: models.StatusComplete, ReceivedUnits: "5000000", Refs: []string{*owner.PaymentReference}}); got.Status != models.StatusFailed || got.Reason != models.ReasonInvalidTransfer {
			t.Fatalf("a transfer bound to another session: %+v", got)
		}

		// Short payment: an exception the merchant resolves into the session's transaction.
		h = hash('d')
		short := session(h)
		got := finish(short, models.Outcome{Status: models.StatusFailed, Reason: models.ReasonInvalidTransfer, ReceivedUnits: "4000000",
			Payer: "0xpayer", Message: "merchant received 4000000 units, expected 5000000"})
		if got.Status != models.StatusFailed || len(got.Deliveries) != 0 {
			t.Fatalf("short payment: %+v", got)
		}
		sc := models.Scope{MerchantID: m.ID, Mode: models.ModeTest}
		excs, _, _ = st.PaymentExceptions(ctx, sc, models.ExceptionFilter{TxHash: h}, models.Page{Limit: 10})
		if len(excs) != 1 || excs[0].Kind != models.ExceptionUnderpaid || excs[0].Amount != money.FromCents(400) {
			t.Fatalf("underpaid exception: %+v", excs)
		}
		if _, _, _, err := st.ResolveException(ctx, models.Scope{MerchantID: other.ID, Mode: models.ModeTest}, excs[0].ID, models.Resolution{}); !errors.Is(err, apperr.ErrNotFound) {
			t.Fatalf("another merchant resolves: %v", err)
		}
		// Not into a session still open: its own payment may still
		// complete it, and would then take this transaction as its own.
		if _, _, _, err := st.ResolveException(ctx, sc, excs[0].ID, models.Resolution{SessionID: session("").ID}); !errors.Is(err, apperr.ErrConflict) {
			t.Fatalf("resolve into an open session: %v", err)
		}
		exc, txn, _, err := st.ResolveException(ctx, sc, excs[0].ID, models.Resolution{SessionID: short.ID, Note: "customer topped up by e-mail"})
		if err != nil || exc.Status != models.ExceptionResolved || txn.Amount != money.FromCents(400) || txn.SessionID == nil ||
			*txn.SessionID != short.ID || txn.Source != models.SourceException || txn.Verification != models.VerificationVerified {
			t.Fatalf("resolve: %+v %+v %v", exc, txn, err)
		}
		if _, _, _, err := st.ResolveException(ctx, sc, excs[0].ID, models.Resolution{}); !errors.Is(err, apperr.ErrConflict) {
			t.Fatalf("resolve twice: %v", err)
		}
		if _, err := st.DismissException(ctx, sc, excs[0].ID, "x"); !errors.Is(err, apperr.ErrConflict) {
			t.Fatalf("dismiss a resolved exception: %v", err)
		}

		// A record the merchant makes while the session is verifying is
		// adopted by the session it paid (one transaction, counted once);
		// a hash already recorded cannot be submitted to a session.
		h = hash('e')
		adopter := session(h)
		if err := record(m.ID, h); err != nil {
			t.Fatal(err)
		}
		if err := st.ClaimSessionTxHash(ctx, later.ID, "base_sepolia", h); !errors.Is(err, apperr.ErrConflict) {
			t.Fatalf("a recorded hash is the merchant's already: %v", err)
		}
		if got := finish(adopter, models.Outcome{Status: models.StatusComplete, ReceivedUnits: "5000000", Bound: true}); got.Status != models.StatusComplete {
			t.Fatalf("adopting a record: %+v", got)
		}
		txs, _, _ := st.Transactions(ctx, sc, models.TransactionFilter{TxHash: h}, models.Page{Limit: 10})
		if len(txs) != 1 || txs[0].SessionID == nil || *txs[0].SessionID != adopter.ID || txs[0].Verification != models.VerificationVerified {
			t.Fatalf("adopted record: %+v", txs)
		}

		// A record typed with another amount (and judged failed for it) is
		// adopted with what the chain shows the session received; the
		// record's customer and the link count that, not the typo.
		h = hash('f')
		typo := session(h)
		before, _ := st.PaymentLink(ctx, sc, link.ID)
		rec := &models.Transaction{MerchantID: m.ID, Mode: models.ModeTest, Amount: money.FromCents(100000), Token: "USDC",
			Network: "base_sepolia", TxHash: h, CustomerEmail: "typo@x.io"}
		if err := st.RecordTransaction(ctx, rec); err != nil {
			t.Fatal(err)
		}
		if err := st.SetRecordVerification(ctx, rec.ID, models.VerificationFailed, "merchant received 5000000 units, expected 1000000000"); err != nil {
			t.Fatal(err)
		}
		// Refuted, the record leaves its customer's totals.
		if c, _, _ := st.CustomerList(ctx, sc, models.CustomerFilter{Search: "typo@x.io"}, models.Page{Limit: 1}); len(c) != 1 ||
			c[0].TotalSpent != 0 || c[0].TransactionCount != 0 {
			t.Fatalf("the refuted record's customer: %+v", c)
		}
		if got := finish(typo, models.Outcome{Status: models.StatusComplete, ReceivedUnits: "5000000", Bound: true}); got.Status != models.StatusComplete {
			t.Fatalf("adopting a mistyped record: %+v", got)
		}
		txs, _, _ = st.Transactions(ctx, sc, models.TransactionFilter{TxHash: h}, models.Page{Limit: 10})
		if len(txs) != 1 || txs[0].Amount != money.FromCents(500) || txs[0].Verification != models.VerificationVerified ||
			txs[0].PaymentLinkID == nil || *txs[0].PaymentLinkID != link.ID {
			t.Fatalf("adopted mistyped record: %+v", txs)
		}
		after, _ := st.PaymentLink(ctx, sc, link.ID)
		if after.TotalCollected-before.TotalCollected != money.FromCents(500) || after.TotalTransactions != before.TotalTransactions+1 {
			t.Fatalf("link totals %v/%d -> %v/%d", before.TotalCollected, before.TotalTransactions, after.TotalCollected, after.TotalTransactions)
		}
		custs, _, _ := st.Customers(ctx, sc, models.Page{Limit: 100})
		for _, c := range custs {
			if c.Email == "typo@x.io" && (c.TotalSpent != money.FromCents(500) || c.TransactionCount != 1) {
				t.Fatalf("the record's customer: %+v", c)
			}
		}
	})
}

// TestRefutedRecordLeavesTotals: a recorded transaction counts toward its
// link and customer at once; when the chain refutes it, it leaves both (it
// stayed counted before), and a verified one stays.
func TestRefutedRecordLeavesTotals(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		m := newMerchant(t, st, "refuted@x.io")
		sc := models.Scope{MerchantID: m.ID, Mode: models.ModeTest}
		link := newTenDollarLink(t, st, m)
		rec := func(h string, cents int64) *models.Transaction {
			tx := &models.Transaction{MerchantID: m.ID, Mode: models.ModeTest, PaymentLinkID: &link.ID, Amount: money.FromCents(cents),
				Token: "USDC", Network: "base_sepolia", TxHash: h, CustomerEmail: "payer@x.io"}
			if err := st.RecordTransaction(ctx, tx); err != nil {
				t.Fatal(err)
			}
			return tx
		}
		totals := func(step string, linkCents, linkCount, spent, count int64) {
			t.Helper()
			l, err := st.PaymentLink(ctx, sc, link.ID)
			if err != nil {
				t.Fatal(err)
			}
			c, _, err := st.CustomerList(ctx, sc, models.CustomerFilter{Search: "payer@x.io"}, models.Page{Limit: 1})
			if err != nil || len(c) != 1 {
				t.Fatalf("%s: customer %v %v", step, c, err)
			}
			if l.TotalCollected != money.FromCents(linkCents) || l.TotalTransactions != linkCount ||
				c[0].TotalSpent != money.FromCents(spent) || c[0].TransactionCount != count {
				t.Fatalf("%s: link %v/%d, customer %v/%d; want %v/%d, %v/%d", step, l.TotalCollected, l.TotalTransactions,
					c[0].TotalSpent, c[0].TransactionCount, money.FromCents(linkCents), linkCount, money.FromCents(spent), count)
			}
		}
		good, bad := rec("0x01", 1000), rec("0x02", 50000)
		totals("recorded", 51000, 2, 51000, 2)
		if err := st.SetRecordVerification(ctx, bad.ID, models.VerificationFailed, "not found on chain"); err != nil {
			t.Fatal(err)
		}
		if err := st.SetRecordVerification(ctx, good.ID, models.VerificationVerified, ""); err != nil {
			t.Fatal(err)
		}
		totals("one refuted", 1000, 1, 1000, 1)
		// Settled once: a second answer changes nothing.
		if err := st.SetRecordVerification(ctx, bad.ID, models.VerificationFailed, "again"); err != nil {
			t.Fatal(err)
		}
		totals("refuted again", 1000, 1, 1000, 1)
	})
}

// An attempt that was in flight while its endpoint was deleted does not
// reopen the delivery.
func TestDeliveryOfDeletedEndpointStaysFailed(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		m, ep, id := newDelivery(t, st, "hook@x.io")
		if err := st.DeleteWebhookEndpoint(ctx, m.ID, ep.ID); err != nil {
			t.Fatal(err)
		}
		if err := st.RecordDeliveryAttempt(ctx, models.AttemptRecord{DeliveryID: id, Attempt: 1, ResponseStatus: 500,
			At: time.Now(), Status: models.DeliveryPending}); err != nil {
			t.Fatal(err)
		}
		d, _ := st.WebhookDelivery(ctx, id)
		if d.Status != models.DeliveryFailed || d.Attempts != 1 {
			t.Fatalf("delivery %s after its endpoint was deleted: %s, %d attempts", d.ID, d.Status, d.Attempts)
		}
	})
}

// linkFixture is a merchant with one webhook endpoint subscribed to events
// and one payment link of 5.00 on base_sepolia; session opens a session of
// the link with the payment reference ref.
type linkFixture struct {
	m       *models.Merchant
	ep      *models.WebhookEndpoint
	link    *models.PaymentLink
	session func(ref string) *models.CheckoutSession
}

func newLinkFixture(t *testing.T, st *models.Store, email string, events ...string) *linkFixture {
	t.Helper()
	ctx := context.Background()
	f := &linkFixture{m: newMerchant(t, st, email)}
	f.ep = &models.WebhookEndpoint{MerchantID: f.m.ID, Mode: models.ModeTest, URL: "https://hooks.example.com/r",
		Events: models.StringList(events), Secret: "whsec_dGVzdA=="}
	if err := st.CreateWebhookEndpoint(ctx, f.ep); err != nil {
		t.Fatal(err)
	}
	f.link = &models.PaymentLink{MerchantID: f.m.ID, Mode: models.ModeTest, Name: "L", Amount: money.FromCents(500), Currency: "USD",
		Network: "base_sepolia", Networks: models.StringList{"base_sepolia"}, Token: "USDC",
		WalletAddresses: models.StringMap{"base_sepolia": "0xabc"}, MerchantWalletAddress: "0xabc"}
	if err := st.CreatePaymentLink(ctx, f.link); err != nil {
		t.Fatal(err)
	}
	f.session = func(ref string) *models.CheckoutSession {
		t.Helper()
		cs := &models.CheckoutSession{MerchantID: f.m.ID, Mode: models.ModeTest, PaymentLinkID: f.link.ID, Network: "base_sepolia",
			ExpectedAmount: money.FromCents(500), MerchantWalletAddress: "0xabc", TokenAddress: "0xdef", PaymentReference: &ref,
			CustomerEmail: "ann@example.com"}
		if err := st.CreateCheckoutSession(ctx, cs); err != nil {
			t.Fatal(err)
		}
		return cs
	}
	return f
}

// TestTransitionAfterTheOutcome: a transition that arrives after the
// session's outcome (a payment's sighting after the expiry) moves nothing
// and leaves no entry after the outcome's in the history; a retried
// transition is stored once.
func TestTransitionAfterTheOutcome(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		f := newLinkFixture(t, st, "late@example.com")
		cs := f.session("0x" + strings.Repeat("7", 64))
		seen := models.Transition{SessionID: cs.ID, EntryID: models.NewID(), Status: models.StatusBroadcast, Source: "client",
			TxHash: "0x" + strings.Repeat("8", 64), At: time.Now()}
		for range 2 {
			if err := st.RecordSessionTransition(ctx, seen); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := st.FinishSession(ctx, models.Outcome{SessionID: cs.ID, EntryID: models.NewID(), Status: models.StatusExpired,
			Source: "server", At: time.Now()}); err != nil {
			t.Fatal(err)
		}
		late := models.Transition{SessionID: cs.ID, EntryID: models.NewID(), Status: models.StatusConfirming, Source: "chain", At: time.Now()}
		if err := st.RecordSessionTransition(ctx, late); err != nil {
			t.Fatal(err)
		}
		got, err := st.CheckoutSession(ctx, cs.ID)
		if err != nil || got.Status != models.StatusExpired {
			t.Fatalf("after a late transition: %v %v", got.Status, err)
		}
		for status, want := range map[string]int64{models.StatusBroadcast: 1, models.StatusExpired: 1, models.StatusConfirming: 0} {
			if n := storetest.Exec(t, st, "UPDATE checkout_session_events SET chain = chain WHERE session_id = ? AND status = ?", cs.ID, status); n != want {
				t.Errorf("%d %s entries in the history, want %d", n, status, want)
			}
		}
	})
}

// TestSearchFoldsUnicodeCase: a search ignores case outside ASCII too, on
// both stores (SQLite's own lower() folds ASCII only: "Änne" found nothing
// there).
func TestSearchFoldsUnicodeCase(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		m := newMerchant(t, st, "fold@x.io")
		sc := models.Scope{MerchantID: m.ID, Mode: models.ModeTest}
		if err := st.CreateCustomer(ctx, &models.Customer{MerchantID: m.ID, Mode: models.ModeTest, Email: "anne@x.io", Name: "Änne Öz"}); err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{"Änne", "änne", "ÖZ", "öz"} {
			got, _, err := st.CustomerList(ctx, sc, models.CustomerFilter{Search: q}, models.Page{Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 {
				t.Errorf("search %q: %d customers, want 1", q, len(got))
			}
		}
	})
}
