package e2e

import (
	"context"
	"math/big"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/ethclient"

	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/chain/devchain"
)

// TestDevChainPayments pays sessions on the dev chain exactly as
// `paygate dev pay` does (devchain.PaySession: sign the session's EIP-3009
// authorization, broadcast transferWithAuthorization, then submit the hash),
// with the real EVM verifier over JSON-RPC: a full payment completes and a
// short one fails with INVALID_TRANSFER. It also measures the time from the
// block that reaches the confirmation threshold to the session's `complete`.
func TestDevChainPayments(t *testing.T) {
	ctx := context.Background()
	s, dc := devChainStack(t, time.Second, stackOptions{})
	eth, err := ethclient.DialContext(ctx, dc.RPCURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eth.Close)
	conf, _ := s.networks.Lookup("base_sepolia")
	key, _ := s.merchant()
	s.wallet = dc.Customer().Hex() // sessions declare the wallet that pays

	var lags []time.Duration
	var link string
	for i := 0; i < 3; i++ {
		var id string
		id, link = s.openSession(key, link, "12.50")
		p, err := devchain.PaySession(ctx, s.http.URL, dc.RPCURL(), devchain.CustomerKey(), id, nil)
		if err != nil {
			t.Fatal(err)
		}
		// The block that reaches the threshold: the receipt's block plus
		// confirmations-1 (confirmations count the receipt's block).
		var included uint64
		for {
			r, err := eth.TransactionReceipt(ctx, common.HexToHash(p.TxHash))
			if err == nil {
				included = r.BlockNumber.Uint64()
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		threshold := included + conf.Confirmations - 1
		var reached time.Time
		for {
			head, err := eth.BlockNumber(ctx)
			if err == nil && head >= threshold {
				reached = time.Now()
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		d := s.waitStatus(id, "complete", 30*time.Second)
		lags = append(lags, time.Since(reached))
		sess := d["session"].(map[string]any)
		if sess["txHash"] != p.TxHash {
			t.Fatalf("completed session has hash %v, paid %s", sess["txHash"], p.TxHash)
		}
	}
	sort.Slice(lags, func(i, j int) bool { return lags[i] < lags[j] })
	t.Logf("threshold block to complete on the dev chain (poll %s, %d confirmations): median %s, max %s over %d sessions",
		conf.PollInterval, conf.Confirmations, lags[len(lags)/2].Round(time.Millisecond), lags[len(lags)-1].Round(time.Millisecond), len(lags))

	// A short payment (one base unit less than due) fails.
	id, _ := s.openSession(key, link, "")
	due := s.call("GET", "/api/checkout/session/"+id, "", nil, 200)["session"].(map[string]any)["amountUnits"].(string)
	n, _ := strconv.ParseInt(due, 10, 64)
	if _, err := devchain.PaySession(ctx, s.http.URL, dc.RPCURL(), devchain.CustomerKey(), id, big.NewInt(n-1)); err != nil {
		t.Fatal(err)
	}
	d := s.waitStatus(id, "failed", 30*time.Second)
	if r := d["session"].(map[string]any)["failureReason"]; r != chain.ReasonInvalidTransfer {
		t.Fatalf("short payment failed with %v, want %s", r, chain.ReasonInvalidTransfer)
	}

	// A plain transfer (no authorization) from another wallet than the one
	// the session declares does not pay it: nobody can claim someone else's
	// transfer for their own session. Nor does it end the session (anyone
	// who knows its id could submit one): the hash is given back and the
	// session waits for its payment. The merchant keeps it as an exception.
	s.wallet = "0x8617E340B3D01FA5F11F306F4090FD50E238070D"
	id, _ = s.openSession(key, link, "")
	if _, err := devchain.Pay(ctx, devchain.PayOptions{APIBase: s.http.URL, RPCURL: dc.RPCURL(), SessionID: id, Plain: true}); err != nil {
		t.Fatal(err)
	}
	sess := s.waitReleased(id, 30*time.Second)
	if sess["status"] != "payment_session_created" || !strings.Contains(sess["failureMessage"].(string), "not from the session's wallet") {
		t.Fatalf("payment from a stranger's wallet: %v", sess)
	}
	// A bound payment names the session in the payer's signature, so it
	// pays the session whatever wallet the session declared.
	id, _ = s.openSession(key, link, "")
	if _, err := devchain.PaySession(ctx, s.http.URL, dc.RPCURL(), devchain.CustomerKey(), id, nil); err != nil {
		t.Fatal(err)
	}
	s.waitStatus(id, "complete", 30*time.Second)
}
