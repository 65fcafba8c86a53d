package chain

import (
	"context"
	"errors"
	"fmt"
	"testing"

	ethereum "github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
)

// cappedLogs is a node that refuses, with a JSON-RPC error as providers
// do, a call whose answer would hold more than max logs; one log per block.
type cappedLogs struct {
	max     int
	calls   int
	down    bool
	refusal string // every call refused so, when set
}

type rpcRefusal struct{ msg string }

func (e rpcRefusal) Error() string  { return e.msg }
func (e rpcRefusal) ErrorCode() int { return -32005 }

func (c *cappedLogs) FilterLogs(_ context.Context, q ethereum.FilterQuery) ([]types.Log, error) {
	c.calls++
	if c.down {
		return nil, errors.New("dial tcp 127.0.0.1:8545: connection refused")
	}
	if c.refusal != "" {
		return nil, rpcRefusal{c.refusal}
	}
	from, to := q.FromBlock.Uint64(), q.ToBlock.Uint64()
	if int(to-from+1) > c.max {
		return nil, rpcRefusal{fmt.Sprintf("query returned more than %d results", c.max)}
	}
	var out []types.Log
	for b := from; b <= to; b++ {
		out = append(out, types.Log{BlockNumber: b})
	}
	return out, nil
}

func (c *cappedLogs) SubscribeFilterLogs(context.Context, ethereum.FilterQuery, chan<- types.Log) (ethereum.Subscription, error) {
	return nil, errors.New("not supported")
}

// TestFilterLogsSplitting: a range whose logs the node refuses to return
// in one answer is read in halves, whole and in order; a node that cannot
// be reached is not asked again in pieces.
func TestFilterLogsSplitting(t *testing.T) {
	ctx := context.Background()
	q := ethereum.FilterQuery{FromBlock: bigUint(100), ToBlock: bigUint(2099), Addresses: []common.Address{{1}}}
	node := &cappedLogs{max: 300}
	logs, err := filterLogsSplitting(ctx, node, q)
	if err != nil || len(logs) != 2000 {
		t.Fatalf("%d logs, %v", len(logs), err)
	}
	for i, l := range logs {
		if l.BlockNumber != uint64(100+i) {
			t.Fatalf("log %d is of block %d", i, l.BlockNumber)
		}
	}
	down := &cappedLogs{max: 300, down: true}
	if _, err := filterLogsSplitting(ctx, down, q); err == nil || down.calls != 1 {
		t.Fatalf("a node down: %v after %d calls", err, down.calls)
	}
	// A rate limit is not asked again in pieces either.
	limited := &cappedLogs{max: 300, refusal: "daily request count exceeded, request rate limited"}
	if _, err := filterLogsSplitting(ctx, limited, q); err == nil || limited.calls != 1 {
		t.Fatalf("a rate limit: %v after %d calls", err, limited.calls)
	}
}
