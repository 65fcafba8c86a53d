package checkout

import (
	"context"
	"fmt"
	"math/big"
	"strings"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"

	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/models"
)

// RelayLedger keeps the relayer's transactions in the store
// (chain.RelayLedger), so every API replica and worker sharing the
// relayer's key sees the nonces taken and what waits to be mined.
type RelayLedger struct{ Store *models.Store }

var _ chain.RelayLedger = RelayLedger{}

// Locked implements chain.RelayLedger.
func (l RelayLedger) Locked(ctx context.Context, network string, relayer common.Address, fn func(ctx context.Context) error) error {
	return l.Store.RelayerLocked(ctx, network, addrKey(relayer), fn)
}

// Pending implements chain.RelayLedger.
func (l RelayLedger) Pending(ctx context.Context, network string, relayer common.Address) ([]chain.RelayedTx, error) {
	rows, err := l.Store.PendingRelayed(ctx, network, addrKey(relayer))
	if err != nil {
		return nil, err
	}
	return relayedTxs(rows)
}

// PayerPending implements chain.RelayLedger.
func (l RelayLedger) PayerPending(ctx context.Context, network string, payer common.Address) ([]chain.RelayedTx, error) {
	rows, err := l.Store.PendingRelayedFor(ctx, network, addrKey(payer))
	if err != nil {
		return nil, err
	}
	return relayedTxs(rows)
}

// Save implements chain.RelayLedger.
func (l RelayLedger) Save(ctx context.Context, t chain.RelayedTx) error {
	hashes := make(models.StringList, len(t.Hashes))
	for i, h := range t.Hashes {
		hashes[i] = strings.ToLower(h.Hex())
	}
	row := &models.RelayedTransaction{Network: t.Network, Relayer: addrKey(t.Relayer), Nonce: t.Nonce, Payer: addrKey(t.Payer),
		Reference: strings.ToLower(t.Reference.Hex()), ValidBefore: t.ValidBefore, ToAddress: addrKey(t.To), Data: hexutil.Encode(t.Data),
		Gas: t.Gas, Tip: t.Tip.String(), FeeCap: t.FeeCap.String(), Hashes: hashes, CancelFrom: t.CancelFrom, Status: t.Status,
		SentAt: t.SentAt.UTC()}
	if t.MinedHash != (common.Hash{}) {
		row.MinedHash = strings.ToLower(t.MinedHash.Hex())
	}
	return l.Store.SaveRelayed(ctx, row)
}

func addrKey(a common.Address) string { return strings.ToLower(a.Hex()) }

func relayedTxs(rows []models.RelayedTransaction) ([]chain.RelayedTx, error) {
	out := make([]chain.RelayedTx, 0, len(rows))
	for _, r := range rows {
		data, err := hexutil.Decode(r.Data)
		if err != nil {
			return nil, fmt.Errorf("relayed transaction %s/%d: data: %w", r.Network, r.Nonce, err)
		}
		tip, ok1 := new(big.Int).SetString(r.Tip, 10)
		feeCap, ok2 := new(big.Int).SetString(r.FeeCap, 10)
		if !ok1 || !ok2 || len(r.Hashes) == 0 {
			return nil, fmt.Errorf("relayed transaction %s/%d: bad fees or no hash", r.Network, r.Nonce)
		}
		t := chain.RelayedTx{Network: r.Network, Relayer: common.HexToAddress(r.Relayer), Nonce: r.Nonce, Payer: common.HexToAddress(r.Payer),
			Reference: common.HexToHash(r.Reference), ValidBefore: r.ValidBefore, To: common.HexToAddress(r.ToAddress), Data: data,
			Gas: r.Gas, Tip: tip, FeeCap: feeCap, CancelFrom: r.CancelFrom, Status: r.Status, SentAt: r.SentAt}
		for _, h := range r.Hashes {
			t.Hashes = append(t.Hashes, common.HexToHash(h))
		}
		if r.MinedHash != "" {
			t.MinedHash = common.HexToHash(r.MinedHash)
		}
		out = append(out, t)
	}
	return out, nil
}
