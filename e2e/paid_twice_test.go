package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/paygate/paygate/chain/soldev"
	"github.com/paygate/paygate/models"
)

// TestSolanaPaidTwiceIsKept: a customer pays a session's Solana Pay request
// and then pays it again (the code scanned a second time, or the page's
// "pay" tapped twice); nothing is submitted. The watcher completes the
// session with one payment and keeps the other as a duplicate exception
// naming the session. Before, the second was found while the first held
// the session, dropped once it completed (completed sessions were not
// looked up), and on Solana, where no scan of unmatched transfers runs,
// the USDC reached the merchant with no record of it at all.
func TestSolanaPaidTwiceIsKept(t *testing.T) {
	ctx := context.Background()
	s, sc := solanaDevStack(t, stackOptions{}) // the watcher is run by the test
	key, session := s.merchant()
	id := s.openSolanaSession(s.solanaLink(key, session))["id"].(string)
	first, err := soldev.PaySession(ctx, s.http.URL, sc.RPCURL(), soldev.CustomerKey(), id, nil, soldev.PayOptions{NoSubmit: true})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // another blockhash: a transaction of its own
	second, err := soldev.PaySession(ctx, s.http.URL, sc.RPCURL(), soldev.CustomerKey(), id, nil, soldev.PayOptions{NoSubmit: true})
	if err != nil {
		t.Fatal(err)
	}
	if first.Signature == second.Signature {
		t.Fatal("the two payments are one transaction")
	}
	d := s.watchUntil(id, "complete", 60*time.Second)
	paid := d["session"].(map[string]any)["txHash"].(string)
	other := second.Signature
	if paid == second.Signature {
		other = first.Signature
	} else if paid != first.Signature {
		t.Fatalf("completed with %s, paid %s and %s", paid, first.Signature, second.Signature)
	}
	cs, err := s.store.CheckoutSession(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	scope := models.Scope{MerchantID: cs.MerchantID, Mode: cs.Mode}
	deadline := time.Now().Add(30 * time.Second)
	var got []models.PaymentException
	for {
		s.checkout.WatchOnce(ctx, nil)
		if got, _, err = s.store.PaymentExceptions(ctx, scope, models.ExceptionFilter{TxHash: other}, models.Page{Limit: 5}); err != nil {
			t.Fatal(err)
		}
		if len(got) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(got) != 1 || got[0].Kind != models.ExceptionDuplicate || got[0].Amount != cs.ExpectedAmount ||
		len(got[0].SessionIDs) != 1 || got[0].SessionIDs[0] != id || !strings.Contains(got[0].Message, paid) {
		t.Fatalf("the second payment's exceptions: %+v", got)
	}
	// Found again on later passes, it is kept once.
	s.checkout.WatchOnce(ctx, nil)
	if all, _, err := s.store.PaymentExceptions(ctx, scope, models.ExceptionFilter{}, models.Page{Limit: 5}); err != nil || len(all) != 1 {
		t.Fatalf("exceptions after another pass: %+v %v", all, err)
	}
	// Paid a third time once the session has completed: no reference is
	// listed any more, and the read of the merchant's USDC account finds it.
	third, err := soldev.PaySession(ctx, s.http.URL, sc.RPCURL(), soldev.CustomerKey(), id, nil, soldev.PayOptions{NoSubmit: true})
	if err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		s.checkout.WatchOnce(ctx, nil)
		if got, _, err = s.store.PaymentExceptions(ctx, scope, models.ExceptionFilter{TxHash: third.Signature}, models.Page{Limit: 5}); err != nil {
			t.Fatal(err)
		}
		if len(got) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(got) != 1 || got[0].Kind != models.ExceptionDuplicate || len(got[0].SessionIDs) != 1 || got[0].SessionIDs[0] != id {
		t.Fatalf("the third payment's exceptions: %+v", got)
	}
}
