package checkout

import (
	"context"
	"sync"
	"time"

	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/workflows"
)

// Snapshot is what the hosted page shows of a session as it moves.
type Snapshot struct {
	Status         string `json:"status"`
	TxHash         string `json:"txHash,omitempty"`
	FailureReason  string `json:"failureReason,omitempty"`
	FailureMessage string `json:"failureMessage,omitempty"`
	ReceivedAmount string `json:"receivedAmount,omitempty"`
	// Confirmations and Required count the chain's confirmations of a
	// transfer being confirmed (from the workflow's last chain check).
	Confirmations uint64 `json:"confirmations,omitempty"`
	Required      uint64 `json:"required,omitempty"`
	Terminal      bool   `json:"terminal"`
}

// StatusHub shares one reader per session among every client watching it
// (the hosted page's server-sent events): however many tabs are open on a
// session, the store is read once per interval, and the workflow is asked
// for its confirmations only while a transfer is being confirmed. A reader
// stops when its last client leaves.
type StatusHub struct {
	Service  *Service
	Interval time.Duration

	mu     sync.Mutex
	topics map[string]*topic
	reads  int64
}

// Follow wakes a session's reader as soon as the session is written (the
// store's change feed, models.SessionChanges) instead of at its next
// interval: the page shows an outcome the moment it is stored. The
// interval's reads go on (a confirming transfer's depth is asked of the
// workflow, which writes nothing until it decides).
func (h *StatusHub) Follow(changes interface{ Subscribe(func(id string)) }) {
	changes.Subscribe(h.wake)
}

// wake makes the reader of session id (every reader for "") read now.
func (h *StatusHub) wake(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for tid, t := range h.topics {
		if id != "" && tid != id {
			continue
		}
		select {
		case t.wake <- struct{}{}:
		default: // a read is due already
		}
		if id != "" {
			return
		}
	}
}

// Reads counts the store reads so far (tests and benchmarks).
func (h *StatusHub) Reads() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.reads
}

type topic struct {
	clients map[chan Snapshot]struct{}
	last    *Snapshot
	stop    context.CancelFunc
	wake    chan struct{}
}

// Subscribe returns the session's snapshots, starting with the current one,
// until cancel is called. The channel keeps only the newest snapshot for a
// slow client.
func (h *StatusHub) Subscribe(id string) (<-chan Snapshot, func()) {
	ch := make(chan Snapshot, 1)
	h.mu.Lock()
	if h.topics == nil {
		h.topics = map[string]*topic{}
	}
	t := h.topics[id]
	if t == nil {
		ctx, stop := context.WithCancel(context.Background())
		t = &topic{clients: map[chan Snapshot]struct{}{}, stop: stop, wake: make(chan struct{}, 1)}
		h.topics[id] = t
		go h.run(ctx, id, t)
	}
	t.clients[ch] = struct{}{}
	if t.last != nil {
		ch <- *t.last
	}
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(t.clients, ch)
		if len(t.clients) == 0 && h.topics[id] == t {
			t.stop()
			delete(h.topics, id)
		}
	}
}

func (h *StatusHub) run(ctx context.Context, id string, t *topic) {
	every := h.Interval
	if every <= 0 {
		every = time.Second
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		if s, ok := h.read(ctx, id); ok {
			h.mu.Lock()
			if t.last == nil || *t.last != s {
				t.last = &s
				for ch := range t.clients {
					select { // keep only the newest for a slow client
					case <-ch:
					default:
					}
					ch <- s
				}
			}
			h.mu.Unlock()
			if s.Terminal {
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-t.wake:
		}
	}
}

func (h *StatusHub) read(ctx context.Context, id string) (Snapshot, bool) {
	h.mu.Lock()
	h.reads++
	h.mu.Unlock()
	cs, err := h.Service.Store.CheckoutSession(ctx, id)
	if err != nil {
		return Snapshot{}, false
	}
	s := SnapshotOf(cs)
	if cs.Status == models.StatusConfirming {
		s.Confirmations, s.Required, _ = h.Service.Confirmations(ctx, id)
	}
	return s, true
}

// Confirmations asks a confirming session's workflow how deep its transfer
// is and how deep it must be (a status query, 2 s at most); ok is false
// when the workflow could not say (no Temporal client, not checked yet).
func (s *Service) Confirmations(ctx context.Context, sessionID string) (have, need uint64, ok bool) {
	if s.Temporal == nil {
		return 0, 0, false
	}
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	v, err := s.Temporal.QueryWorkflow(qctx, workflows.CheckoutWorkflowID(sessionID), "", workflows.CheckoutStatusQuery)
	var st workflows.CheckoutState
	if err != nil || v.Get(&st) != nil || st.LastCheck == nil {
		return 0, 0, false
	}
	return st.LastCheck.Confirmations, st.LastCheck.Required, true
}

// SnapshotOf is a session as the page shows it.
func SnapshotOf(cs *models.CheckoutSession) Snapshot {
	s := Snapshot{Status: cs.Status, FailureReason: cs.FailureReason, FailureMessage: cs.FailureMessage,
		Terminal: models.TerminalStatus(cs.Status)}
	if cs.TxHash != nil {
		s.TxHash = *cs.TxHash
	}
	if cs.ReceivedAmount > 0 {
		s.ReceivedAmount = cs.ReceivedAmount.String()
	}
	return s
}
