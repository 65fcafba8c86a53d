package devchain

import (
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"fmt"
	"math/big"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/chain/contracts"
)

// refundOutcome renders a refund verification the way the table shows it:
// the verdict, the chain's reason, what was wrong in a refund's terms
// (chain.ExplainRefund) and what reached the destination.
func refundOutcome(t chain.RefundTransfer, res chain.VerifyResult, err error) string {
	switch {
	case err != nil:
		return "error: " + err.Error()
	case res.Verdict == chain.VerdictPending && !res.Seen:
		return "pending (not seen)"
	case res.Verdict == chain.VerdictPending:
		return fmt.Sprintf("pending (%d/%d conf)", res.Confirmations, res.Required)
	case res.Verdict == chain.VerdictFailed:
		fault, _ := chain.ExplainRefund(t, res)
		return fmt.Sprintf("failed %s %s (received %s)", res.Reason, fault, res.ReceivedUnits)
	default:
		return fmt.Sprintf("%s (received %s)", res.Verdict, res.ReceivedUnits)
	}
}

// TestRefundVerdictTable pays refunds with real transfers on a dev chain
// (the simulated EVM with the test USDC, the Router and the funded dev
// accounts; blocks sealed by the test) and verifies each one as the refund
// workflow does (chain.VerifyRefund through the MultiVerifier over
// JSON-RPC, 2 confirmations). The refund is 5 USDC from the dev merchant's
// wallet, which received the payment, to the customer's.
func TestRefundVerdictTable(t *testing.T) {
	const due = 5_000_000
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := startChain(t, time.Hour) // the test seals every block
	reg := chain.DefaultRegistry()
	DevNetwork(c, chain.NetworkBaseSepolia, reg)
	verifier := chain.NewMultiVerifier(reg)
	t.Cleanup(verifier.Close)
	client := c.Client()
	usdc := contracts.MustLoad(contracts.TestUSDC)
	transactor := map[*ecdsa.PrivateKey]*contracts.Transactor{}
	from := func(key *ecdsa.PrivateKey) *contracts.Transactor {
		if tr, ok := transactor[key]; ok {
			return tr
		}
		tr, err := contracts.NewTransactor(ctx, client, key)
		if err != nil {
			t.Fatal(err)
		}
		transactor[key] = tr
		return tr
	}
	merchantKey, strangerKey := MerchantKey(), StrangerKey()
	merchant, customer := crypto.PubkeyToAddress(merchantKey.PublicKey), c.Customer()
	exchange := crypto.PubkeyToAddress(ExchangeKey().PublicKey)
	send := func(key *ecdsa.PrivateKey, to common.Address, units int64) string {
		tx, err := from(key).Transact(ctx, usdc, USDCAddress, "transfer", to, big.NewInt(units))
		if err != nil {
			t.Fatal(err)
		}
		return tx.Hash().Hex()
	}
	created := time.Now().Add(-time.Minute) // the refund's creation, less some clock slack
	verify := func(hash string, notBefore time.Time) string {
		tr := chain.RefundTransfer{Network: chain.NetworkBaseSepolia, TxHash: hash, From: merchant.Hex(), To: customer.Hex(),
			Units: fmt.Sprint(due), NotBefore: notBefore}
		res, err := chain.VerifyRefund(ctx, verifier, tr)
		return refundOutcome(tr, res, err)
	}
	// pay broadcasts, seals `blocks` blocks and verifies.
	pay := func(broadcast func() string, blocks int) func() string {
		return func() string {
			hash := broadcast()
			for range blocks {
				c.commit()
			}
			return verify(hash, created)
		}
	}

	type row struct {
		name, expected string
		observe        func() string
	}
	rows := []row{
		{"exact refund, 1 of 2 confirmations", "pending (1/2 conf)", pay(func() string { return send(merchantKey, customer, due) }, 1)},
		{"exact refund, 2 of 2 confirmations", "complete (received 5000000)", pay(func() string { return send(merchantKey, customer, due) }, 2)},
		{"more than the refund", "complete (received 6000000)", pay(func() string { return send(merchantKey, customer, due+1_000_000) }, 2)},
		{"short by one unit", "failed INVALID_TRANSFER short (received 4999999)", pay(func() string { return send(merchantKey, customer, due-1) }, 2)},
		{"wrong sender (another wallet pays the customer)", "failed INVALID_TRANSFER wrong_sender (received 5000000)",
			pay(func() string { return send(strangerKey, customer, due) }, 2)},
		{"wrong destination (the merchant pays an exchange)", "failed INVALID_TRANSFER no_transfer (received 0)",
			pay(func() string { return send(merchantKey, exchange, due) }, 2)},
		{"sent through a router (Transfer from the router)", "failed INVALID_TRANSFER wrong_sender (received 5000000)", pay(func() string {
			if _, err := from(merchantKey).Transact(ctx, usdc, USDCAddress, "approve", RouterAddress, big.NewInt(due)); err != nil {
				t.Fatal(err)
			}
			c.commit()
			tx, err := from(merchantKey).Transact(ctx, contracts.MustLoad(contracts.Router), RouterAddress, "route", USDCAddress, customer, big.NewInt(due))
			if err != nil {
				t.Fatal(err)
			}
			return tx.Hash().Hex()
		}, 2)},
		{"EIP-3009 authorization signed by the merchant, relayed", "complete (received 5000000)", pay(func() string {
			d, err := ReadTokenDomain(ctx, client, USDCAddress)
			if err != nil {
				t.Fatal(err)
			}
			a := Authorization{From: merchant, To: customer, Value: big.NewInt(due), ValidAfter: new(big.Int),
				ValidBefore: big.NewInt(time.Now().Add(time.Hour).Unix())}
			_, _ = rand.Read(a.Nonce[:])
			sig, err := SignAuthorization(merchantKey, d, a)
			if err != nil {
				t.Fatal(err)
			}
			tx, err := BroadcastAuthorization(ctx, client, RelayerKey(), USDCAddress, a, sig)
			if err != nil {
				t.Fatal(err)
			}
			return tx.Hash().Hex()
		}, 2)},
		{"reverted (more than the merchant holds)", "failed TX_REVERTED reverted (received 0)", pay(func() string {
			tr := from(merchantKey)
			tr.GasLimit = 100_000 // estimation would refuse a reverting call
			defer func() { tr.GasLimit = 0 }()
			return send(merchantKey, customer, 2*CustomerUSDCUnits.Int64())
		}, 2)},
		{"look-alike token, same Transfer event", "failed INVALID_TRANSFER no_transfer (received 0)", pay(func() string {
			fake, _, err := from(merchantKey).Deploy(ctx, contracts.MustLoad(contracts.LookalikeToken))
			if err != nil {
				t.Fatal(err)
			}
			c.commit()
			tx, err := from(merchantKey).Transact(ctx, contracts.MustLoad(contracts.LookalikeToken), fake, "transfer", customer, big.NewInt(due))
			if err != nil {
				t.Fatal(err)
			}
			return tx.Hash().Hex()
		}, 2)},
		{"the original payment's hash (customer to merchant)", "failed INVALID_TRANSFER no_transfer (received 0)",
			pay(func() string { return send(CustomerKey(), merchant, due) }, 2)},
		{"mined before the refund was created", "failed INVALID_TRANSFER too_early (received 5000000)", func() string {
			hash := send(merchantKey, customer, due)
			c.commit()
			c.commit()
			return verify(hash, time.Now().Add(time.Hour))
		}},
		{"not mined yet", "pending (not seen)", pay(func() string { return send(merchantKey, customer, due) }, 0)},
		// Last: the reorg drops the merchant's transaction, so a later one
		// would leave a nonce gap.
		{"seen, then its block dropped by a reorg", "pending (1/2 conf), then pending (not seen)", func() string {
			c.commit() // mine what the previous row left
			before, err := client.HeaderByNumber(ctx, nil)
			if err != nil {
				return "error: " + err.Error()
			}
			hash := send(merchantKey, customer, due)
			c.commit()
			first := verify(hash, created)
			c.commitMu.Lock()
			err = c.sim.Fork(before.Hash())
			if err == nil {
				c.sim.Rollback()
			}
			c.commitMu.Unlock()
			if err != nil {
				return "error: " + err.Error()
			}
			for range 3 {
				c.commit()
			}
			return first + ", then " + verify(hash, created)
		}},
	}

	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "case\texpected\tobserved\t")
	fmt.Fprintln(tw, "----\t--------\t--------\t")
	failed := 0
	for _, r := range rows {
		got := r.observe()
		mark := ""
		if got != r.expected {
			mark = "  <-- MISMATCH"
			failed++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s%s\t\n", r.name, r.expected, got, mark)
	}
	_ = tw.Flush()
	t.Log("refund verdict table (refund 5000000 units = 5 USDC from the merchant's wallet to the customer's; 2 confirmations)\n" + b.String())
	if failed > 0 {
		t.Fatalf("%d of %d cases differ from the expected verdict", failed, len(rows))
	}
}
