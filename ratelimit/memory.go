package ratelimit

import (
	"context"
	"hash/maphash"
	"sort"
	"sync"
	"time"
)

const (
	memShards = 64
	// sweepEvery is how often (in store time) a shard drops the logs of
	// subjects whose every event has left its window, so that a stream of
	// distinct addresses cannot grow memory without bound.
	sweepEvery = int64(60 * 1000)
)

// MemoryStore is a Store for a single process. Subjects are spread over
// mutex-guarded shards; every call on one subject runs under that subject's
// shard lock, which makes Take's check-then-record atomic. A log holds at most
// Limit timestamps, so memory per subject is bounded by the sum of the limits.
// The zero value is not usable; call NewMemoryStore.
type MemoryStore struct {
	seed   maphash.Seed
	shards [memShards]memShard

	leaseMu  sync.Mutex
	leases   map[string]memLease
	leaseSeq uint64
}

// memLease is a held lease: its holder's number and its end.
type memLease struct {
	seq   uint64
	until time.Time
}

// maxMemLeases is the count of leases above which expired ones are
// dropped (a holder that never released).
const maxMemLeases = 1024

// Lease implements Leaser for one process.
func (s *MemoryStore) Lease(_ context.Context, key string, ttl time.Duration) (func(), bool, error) {
	s.leaseMu.Lock()
	defer s.leaseMu.Unlock()
	now := time.Now()
	if s.leases == nil {
		s.leases = map[string]memLease{}
	}
	if l, held := s.leases[key]; held && now.Before(l.until) {
		return nil, false, nil
	}
	if len(s.leases) >= maxMemLeases {
		for k, l := range s.leases {
			if !now.Before(l.until) {
				delete(s.leases, k)
			}
		}
	}
	s.leaseSeq++
	seq := s.leaseSeq
	s.leases[key] = memLease{seq: seq, until: now.Add(ttl)}
	return func() {
		s.leaseMu.Lock()
		defer s.leaseMu.Unlock()
		if l, held := s.leases[key]; held && l.seq == seq {
			delete(s.leases, key)
		}
	}, true, nil
}

type memShard struct {
	mu        sync.Mutex
	subjects  map[string]*subjectLogs
	lastSweep int64
	_         [40]byte // keep hot shards on separate cache lines
}

// subjectLogs holds one subject's logs; a handful of tiers, so a slice.
type subjectLogs struct {
	logs []*eventLog
}

type eventLog struct {
	name   string
	window int64   // ms, from the last rule that touched the log
	ts     []int64 // ascending Unix ms
}

// NewMemoryStore returns an empty in-process store.
func NewMemoryStore() *MemoryStore {
	s := &MemoryStore{seed: maphash.MakeSeed()}
	for i := range s.shards {
		s.shards[i].subjects = make(map[string]*subjectLogs)
	}
	return s
}

func (s *MemoryStore) shard(subject string) *memShard {
	return &s.shards[maphash.String(s.seed, subject)%memShards]
}

// Take implements Store.
func (s *MemoryStore) Take(_ context.Context, subject string, now time.Time, block *Rule, rules []Rule) (Result, error) {
	t := now.UnixMilli()
	sh := s.shard(subject)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.maybeSweep(t)
	sl := sh.subjects[subject]

	if block != nil {
		st := sl.find(block.Name).state(t, *block)
		if st.Count >= block.Limit {
			return Result{Blocked: true, Block: st}, nil
		}
	}
	res := Result{Allowed: true, States: make([]State, len(rules))}
	for i, r := range rules {
		st := sl.find(r.Name).state(t, r)
		res.States[i] = st
		if st.Count >= r.Limit {
			res.Allowed = false
		}
	}
	if !res.Allowed || len(rules) == 0 {
		return res, nil
	}
	sl = sh.ensure(subject, sl)
	for i, r := range rules {
		res.States[i] = sl.record(t, r)
	}
	return res, nil
}

// Add implements Store.
func (s *MemoryStore) Add(_ context.Context, subject string, now time.Time, rule Rule) (State, error) {
	t := now.UnixMilli()
	sh := s.shard(subject)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.maybeSweep(t)
	return sh.ensure(subject, sh.subjects[subject]).record(t, rule), nil
}

// mirror records one event in each rule unconditionally (RedisStore keeps its
// fallback warm with it).
func (s *MemoryStore) mirror(subject string, now time.Time, rules []Rule) {
	t := now.UnixMilli()
	sh := s.shard(subject)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sl := sh.ensure(subject, sh.subjects[subject])
	for _, r := range rules {
		sl.record(t, r)
	}
}

func (sh *memShard) ensure(subject string, sl *subjectLogs) *subjectLogs {
	if sl == nil {
		sl = &subjectLogs{}
		sh.subjects[subject] = sl
	}
	return sl
}

func (sh *memShard) maybeSweep(t int64) {
	if t-sh.lastSweep < sweepEvery && t >= sh.lastSweep {
		return
	}
	sh.lastSweep = t
	for subject, sl := range sh.subjects {
		live := false
		for _, lg := range sl.logs {
			lg.trim(t, lg.window)
			if len(lg.ts) > 0 {
				live = true
			}
		}
		if !live {
			delete(sh.subjects, subject)
		}
	}
}

// find returns the named log or nil; nil-safe on sl.
func (sl *subjectLogs) find(name string) *eventLog {
	if sl == nil {
		return nil
	}
	for _, lg := range sl.logs {
		if lg.name == name {
			return lg
		}
	}
	return nil
}

// record adds an event at t to r's log, keeping at most r.Limit events.
func (sl *subjectLogs) record(t int64, r Rule) State {
	lg := sl.find(r.Name)
	if lg == nil {
		lg = &eventLog{name: r.Name}
		sl.logs = append(sl.logs, lg)
	}
	w := ms(r.Window)
	lg.window = w
	lg.trim(t, w)
	if r.Limit > 0 && len(lg.ts) >= r.Limit {
		// Only the newest Limit events decide when the log drops below
		// Limit again, so older ones can go.
		k := len(lg.ts) - r.Limit + 1
		n := copy(lg.ts, lg.ts[k:])
		lg.ts = lg.ts[:n]
	}
	// Callers take their clock readings before the lock, so an event can
	// arrive slightly out of order; keep the log sorted.
	i := len(lg.ts)
	if i > 0 && lg.ts[i-1] > t {
		i = sort.Search(len(lg.ts), func(j int) bool { return lg.ts[j] > t })
	}
	lg.ts = append(lg.ts, 0)
	copy(lg.ts[i+1:], lg.ts[i:])
	lg.ts[i] = t
	return State{Count: len(lg.ts), Reset: time.UnixMilli(resetOf(lg.ts, r.Limit, w, t))}
}

// state trims the log to the window ending at t and describes it; nil-safe.
func (lg *eventLog) state(t int64, r Rule) State {
	w := ms(r.Window)
	if lg == nil {
		return State{Reset: time.UnixMilli(t)}
	}
	lg.trim(t, w)
	return State{Count: len(lg.ts), Reset: time.UnixMilli(resetOf(lg.ts, r.Limit, w, t))}
}

// trim drops events at or before t-window: an event stays counted for
// exactly window.
func (lg *eventLog) trim(t, window int64) {
	cut := t - window
	k := 0
	for k < len(lg.ts) && lg.ts[k] <= cut {
		k++
	}
	if k > 0 {
		n := copy(lg.ts, lg.ts[k:])
		lg.ts = lg.ts[:n]
	}
}
