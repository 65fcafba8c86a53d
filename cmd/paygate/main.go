// Command paygate is the whole service in one binary:
//
//	paygate dev                        everything on one machine (make run)
//	paygate dev pay SESSION_ID         pay a session on the dev chain (see `paygate dev pay -h`)
//	paygate api                        the HTTP API
//	paygate worker                     the Temporal workers
//	paygate migrate [status]           move the database schema forward
//	paygate dev refund REFUND_ID       pay a refund from the dev chain's merchant wallet
//	paygate kyb show|approve|reject ID review a merchant's KYB application
//	paygate refunds enable|disable ID  switch a merchant's refunds (live mode needs it)
//	paygate deliveries retry ID        make one immediate attempt of a webhook delivery
//	paygate relayer status [NETWORK]   the relayer's transactions: pending, sent again, mined
//	paygate secrets rotate             re-seal webhook secrets under the current server secret
//
// Configuration comes from the environment (see config.Config).
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		var ue usageError
		if errors.As(err, &ue) {
			fmt.Fprintln(os.Stderr, "paygate:", err)
			fmt.Fprint(os.Stderr, usage)
			os.Exit(2)
		}
		slog.Error("paygate failed", "err", err)
		os.Exit(1)
	}
}

const usage = `usage:
  paygate dev                          run everything on this machine (embedded profile)
  paygate dev pay SESSION_ID [UNITS]   pay a checkout session on its dev chain: by default the customer
                                       signs an EIP-3009 authorization (nonce = paymentReference) and
                                       broadcasts it; flags (before or after the arguments):
      --plain                          plain ERC-20 transfer, no authorization
      --from customer|stranger|exchange|relayer|0x<private key hex>
      --via router                     pay through the dev chain's Router contract
      --relay                          POST the signature to the API's relayer instead of broadcasting
      --no-submit                      broadcast only, print the hash
      --submit-to OTHER_SESSION_ID     submit the hash to another session
      --speed-up                       submit the hash, then replace the transaction at twice the tip
    (paygate dev pay -h for details)
  paygate dev refund REFUND_ID         pay a refund from the dev merchant wallet (a USDC transfer to the refund's
                                       destination, on the EVM or the Solana dev chain) and submit its hash;
                                       needs the merchant's API key:
      --api-key KEY                    (default: $PAYGATE_API_KEY)
      --from merchant|0x<private key hex>   --units N   --no-submit
    (paygate dev refund -h for details)
  paygate api                          run the HTTP API
  paygate api healthcheck              exit 0 when the API on PAYGATE_ADDR is ready (container health checks)
  paygate worker                       run the Temporal workers (checkouts, webhook deliveries)
  paygate worker healthcheck           exit 0 when the worker on WORKER_METRICS_ADDR is ready
  paygate migrate                      apply pending schema migrations
  paygate migrate status               list the migrations, applied or pending, without changing anything
  paygate kyb show MERCHANT_ID         print a KYB application, with its revision
  paygate kyb approve MERCHANT_ID --revision REVISION [NOTE]   approve the revision shown
  paygate kyb reject MERCHANT_ID [NOTE]
  paygate refunds enable MERCHANT_ID   turn refunds on (test and live mode; by default only test mode)
  paygate refunds disable MERCHANT_ID  turn refunds off in both modes
  paygate deliveries retry DELIVERY_ID make one immediate attempt of a webhook delivery
  paygate relayer status [NETWORK]     the relayer's newest transactions: status, times sent, fees, age
  paygate secrets rotate               seal every webhook secret under the current PAYGATE_SECRET_KEY
                                       (after a rotation; the old one in PAYGATE_SECRET_KEY_PREVIOUS)
`

type usageError string

func (u usageError) Error() string { return string(u) }

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usageError("a command is required")
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "dev":
		return runDev(ctx, rest)
	case "api":
		return runAPI(ctx, rest)
	case "worker":
		return runWorker(ctx, rest)
	case "migrate":
		return runMigrate(ctx, rest)
	case "kyb":
		return runKYB(ctx, rest)
	case "refunds":
		return runRefunds(ctx, rest)
	case "deliveries":
		return runDeliveries(ctx, rest)
	case "relayer":
		return runRelayer(ctx, rest)
	case "secrets":
		return runSecrets(ctx, rest)
	case "help", "-h", "--help":
		fmt.Print(usage)
		return nil
	}
	return usageError("unknown command " + cmd)
}
