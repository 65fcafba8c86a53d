// Command paygate is the whole service in one binary:
//
//	paygate dev                        everything on one machine (make run)
//	paygate dev pay SESSION_ID         pay a session on the dev chain
//	paygate api                        the HTTP API
//	paygate worker                     the Temporal workers
//	paygate migrate [status]           move the database schema forward
//	paygate kyb approve|reject ID      review a merchant's KYB application
//	paygate deliveries retry ID        make one immediate attempt of a webhook delivery
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
  paygate dev pay SESSION_ID [UNITS]   pay a checkout session from the dev chain's customer wallet
  paygate api                          run the HTTP API
  paygate worker                       run the Temporal workers (checkouts, webhook deliveries)
  paygate migrate [status]             apply pending schema migrations (or list them)
  paygate kyb approve MERCHANT_ID [NOTE]
  paygate kyb reject MERCHANT_ID [NOTE]
  paygate deliveries retry DELIVERY_ID make one immediate attempt of a webhook delivery
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
	case "deliveries":
		return runDeliveries(ctx, rest)
	case "help", "-h", "--help":
		fmt.Print(usage)
		return nil
	}
	return usageError("unknown command " + cmd)
}
