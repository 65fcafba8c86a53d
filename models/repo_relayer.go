package models

import (
	"context"
	"hash/fnv"
	"sync"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// Relayed transaction statuses (chain.Relay*).
const relayPending = "pending"

// RelayerLocked runs fn holding the lock of a relayer wallet on a network,
// across every process sharing the database: on PostgreSQL a transaction
// holding an advisory lock (released at its end, or when its connection
// dies) taken behind a mutex of the process, on SQLite (one process) the
// mutex alone. fn's statements run outside that transaction: the lock
// orders broadcasts, it holds no rows.
func (s *Store) RelayerLocked(ctx context.Context, network, relayer string, fn func(ctx context.Context) error) error {
	key := "relayer:" + network + ":" + relayer
	// The process's own holders queue on a mutex first, so one connection
	// at most per wallet waits on the advisory lock: waiters holding the
	// whole pool would leave the holder none for fn's statements.
	turn := s.relayerTurn(key)
	select {
	case turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-turn }()
	if s.Dialect() != "postgres" {
		return fn(ctx)
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(key))
	return s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec("SELECT pg_advisory_xact_lock(?)", int64(h.Sum64())).Error; err != nil {
			return err
		}
		return fn(ctx)
	})
}

// relayerTurns are the process's locks of relayer wallets: a channel of
// one slot each, so a waiter gives up when its request does.
var relayerTurns sync.Map // key → chan struct{}

func (s *Store) relayerTurn(key string) chan struct{} {
	turn, _ := relayerTurns.LoadOrStore(key, make(chan struct{}, 1))
	return turn.(chan struct{})
}

// PendingRelayed lists a relayer's pending transactions on a network, by
// nonce.
func (s *Store) PendingRelayed(ctx context.Context, network, relayer string) ([]RelayedTransaction, error) {
	var rows []RelayedTransaction
	err := s.ctx(ctx).Where("network = ? AND relayer = ? AND status = ?", network, relayer, relayPending).
		Order("nonce asc").Find(&rows).Error
	return rows, err
}

// PendingRelayedFor lists the pending transactions relayed for a payer on a
// network.
func (s *Store) PendingRelayedFor(ctx context.Context, network, payer string) ([]RelayedTransaction, error) {
	var rows []RelayedTransaction
	err := s.ctx(ctx).Where("network = ? AND payer = ? AND status = ?", network, payer, relayPending).
		Order("nonce asc").Find(&rows).Error
	return rows, err
}

// SaveRelayed inserts or replaces the transaction of (network, relayer,
// nonce).
func (s *Store) SaveRelayed(ctx context.Context, t *RelayedTransaction) error {
	now := s.Now()
	if t.CreatedAt.IsZero() {
		t.CreatedAt = now
	}
	t.UpdatedAt = now
	return s.ctx(ctx).Clauses(clause.OnConflict{
		Columns: []clause.Column{{Name: "network"}, {Name: "relayer"}, {Name: "nonce"}},
		DoUpdates: clause.AssignmentColumns([]string{"payer", "reference", "valid_before", "to_address", "data", "gas", "tip", "fee_cap",
			"hashes", "cancel_from", "status", "mined_hash", "sent_at", "updated_at"}),
	}).Create(t).Error
}

// RelayedTransactions lists a relayer's transactions on a network (every
// network and relayer for ""), newest nonce first, whatever their status.
func (s *Store) RelayedTransactions(ctx context.Context, network, relayer string, limit int) ([]RelayedTransaction, error) {
	var rows []RelayedTransaction
	q := s.ctx(ctx)
	if network != "" {
		q = q.Where("network = ?", network)
	}
	if relayer != "" {
		q = q.Where("relayer = ?", relayer)
	}
	err := q.Order("network asc").Order("relayer asc").Order("nonce desc").Limit(limit).Find(&rows).Error
	return rows, err
}
