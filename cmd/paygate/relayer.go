package main

import (
	"context"
	"fmt"
	"io"
	"math/big"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/paygate/paygate/models"
)

// runRelayer serves `paygate relayer status [NETWORK]`: the relayer's
// ledger as the operator needs it when relayed payments wait: each nonce's
// status, how often it was sent, its current hash and fees, and how long
// ago it was sent.
func runRelayer(ctx context.Context, args []string) error {
	if len(args) < 1 || len(args) > 2 || args[0] != "status" {
		return usageError("relayer needs status [NETWORK]")
	}
	network := ""
	if len(args) == 2 {
		network = args[1]
	}
	a, err := newMigratedApp()
	if err != nil {
		return err
	}
	defer a.close()
	return relayerStatus(ctx, os.Stdout, a.store, network, time.Now())
}

// relayerStatus prints the newest 50 ledger rows (of network, or all).
func relayerStatus(ctx context.Context, w io.Writer, st *models.Store, network string, now time.Time) error {
	rows, err := st.RelayedTransactions(ctx, network, "", 50)
	if err != nil {
		return err
	}
	if len(rows) == 0 {
		_, err := fmt.Fprintln(w, "no relayed transactions")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "network\trelayer\tnonce\tstatus\tsent\tcurrent hash\ttip / fee cap (gwei)\tlast sent\tpayer")
	for _, r := range rows {
		current := ""
		if len(r.Hashes) > 0 {
			current = r.Hashes[len(r.Hashes)-1]
		}
		if r.MinedHash != "" {
			current = r.MinedHash + " (mined)"
		}
		kind, payer := "", r.Payer
		if r.CancelFrom > 0 {
			kind = ", emptied"
		}
		if payer == strings.ToLower((common.Address{}).Hex()) {
			payer = "- (a gap's nonce, filled by the relayer)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d%s\t%s\t%s / %s\t%s ago\t%s\n", r.Network, r.Relayer, r.Nonce, r.Status, len(r.Hashes), kind, current,
			gwei(r.Tip), gwei(r.FeeCap), now.Sub(r.SentAt).Round(time.Second), payer)
	}
	return tw.Flush()
}

// gwei shows an amount of wei as gwei with three decimals.
func gwei(wei string) string {
	v, ok := new(big.Int).SetString(wei, 10)
	if !ok {
		return wei
	}
	f := new(big.Rat).SetFrac(v, big.NewInt(1_000_000_000))
	return f.FloatString(3)
}
