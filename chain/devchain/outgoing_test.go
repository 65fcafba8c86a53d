package devchain

import (
	"context"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/paygate/paygate/chain"
)

// TestFindTransfersFromSince reads a wallet's outgoing USDC transfers on a
// real EVM (the refund watcher's read): from a time, only those mined at or
// after it (the first block then found by block time); a transfer to the
// wallet is none; a cursor resumes after what was read.
func TestFindTransfersFromSince(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := Start(ctx, Config{Port: AnyPort, BlockInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	reg := chain.DefaultRegistry()
	DevNetwork(c, chain.NetworkBaseSepolia, reg)
	mv := chain.NewMultiVerifier(reg)
	defer mv.Close()
	merchant, payer := MerchantAddress(), c.Customer()
	pay := func(from string, to common.Address, units int64) string {
		t.Helper()
		key := MerchantKey()
		if from == "customer" {
			key = CustomerKey()
		}
		h, err := PayUSDC(ctx, c.RPCURL(), key, c.USDC(), to, big.NewInt(units))
		if err != nil {
			t.Fatal(err)
		}
		return strings.ToLower(h)
	}
	hashes := func(in []chain.Incoming) []string {
		var out []string
		for _, i := range in {
			out = append(out, strings.ToLower(i.TxHash)+"/"+i.Units)
		}
		return out
	}
	// read waits for the transfers (confirmations) and reads from since.
	read := func(since time.Time, cur chain.TransferCursor, want int) ([]string, chain.TransferCursor) {
		t.Helper()
		for {
			got, next, err := mv.FindTransfersFrom(ctx, chain.NetworkBaseSepolia, []string{merchant.Hex()}, since, cur)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) >= want || ctx.Err() != nil {
				return hashes(got), next
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	early := pay("merchant", payer, 1_000_000)
	time.Sleep(time.Second)
	pay("customer", merchant, 5_000_000) // into the wallet: not a transfer out
	late := pay("merchant", payer, 2_000_000)
	all, _ := read(time.Unix(1, 0), chain.TransferCursor{}, 2)
	// Block times, not the wall clock's (a dev chain sealing faster than a
	// block a second runs ahead of it): from the block after the first's.
	client := c.Client()
	receipt, err := client.TransactionReceipt(ctx, common.HexToHash(early))
	if err != nil {
		t.Fatal(err)
	}
	after, err := client.HeaderByNumber(ctx, new(big.Int).Add(receipt.BlockNumber, big.NewInt(1)))
	if err != nil {
		t.Fatal(err)
	}
	since := time.Unix(int64(after.Time), 0)

	if strings.Join(all, " ") != early+"/1000000 "+late+"/2000000" {
		t.Fatalf("from before both: %v", all)
	}
	got, next := read(since, chain.TransferCursor{}, 1)
	if strings.Join(got, " ") != late+"/2000000" {
		t.Fatalf("from %s: %v (early %s, late %s)", since.Format(time.RFC3339Nano), got, early, late)
	}
	again := pay("merchant", payer, 3_000_000)
	got, _ = read(time.Time{}, next, 1)
	if strings.Join(got, " ") != again+"/3000000" {
		t.Fatalf("after the cursor: %v", got)
	}
}
