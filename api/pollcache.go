package api

import (
	"sync"

	"github.com/paygate/paygate/models"
)

// pollCache keeps the status poll's answer (GET /api/checkout/session/{id},
// the whole response body) of the sessions being polled, so that a poll
// costs no database read while its session does not move. It is dropped
// by the store's session change feed (models.SessionChanges), which sees
// every write of a session or its history by any process, and it answers
// nothing while that feed is not live.
//
// A read races the writes it may miss: a poll that read the database
// before a write committed must not keep what it read once the write was
// told. Every invalidation takes the next seq; an entry remembers the seq
// of its session's last invalidation (also when it holds no answer: a
// tombstone), and a read started at seq s is kept only if its session was
// not invalidated after s. Forgetting everything raises the floor instead:
// reads started below it are not kept.
type pollCache struct {
	feed changeFeed
	max  int

	mu      sync.Mutex
	seq     uint64
	floor   uint64
	entries map[string]*pollEntry
	hits    uint64
}

type pollEntry struct {
	body  []byte // nil: invalidated, no answer kept
	inval uint64 // seq of the session's last invalidation
}

// pollCacheMax bounds the entries kept (answers and tombstones; an answer
// is about 1.5 kB); past it the cache starts over.
const pollCacheMax = 20000

// changeFeed is what the cache needs of models.SessionChanges.
type changeFeed interface {
	Subscribe(fn func(id string))
	Live() bool
}

var _ changeFeed = (*models.SessionChanges)(nil)

func newPollCache(feed changeFeed) *pollCache {
	c := &pollCache{feed: feed, max: pollCacheMax, entries: map[string]*pollEntry{}}
	feed.Subscribe(c.invalidate)
	return c
}

// get answers a kept body; start is the seq to hand to put after reading
// the database when there is none.
func (c *pollCache) get(id string) (body []byte, start uint64, ok bool) {
	live := c.feed.Live()
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.entries[id]; live && e != nil && e.body != nil {
		c.hits++
		return e.body, 0, true
	}
	return nil, c.seq, false
}

// put keeps a body read from the database by a poll that started at start,
// unless the session was invalidated since (or the feed is not live).
func (c *pollCache) put(id string, body []byte, start uint64) {
	if !c.feed.Live() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if start < c.floor {
		return
	}
	e := c.entries[id]
	if e != nil && e.inval > start {
		return
	}
	if e == nil {
		if len(c.entries) >= c.max {
			c.forgetLocked()
			return
		}
		e = &pollEntry{}
		c.entries[id] = e
	}
	e.body = body
}

// invalidate drops a session's answer; "" drops every answer.
func (c *pollCache) invalidate(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	if id == "" {
		c.forgetLocked()
		return
	}
	if e := c.entries[id]; e != nil {
		e.body, e.inval = nil, c.seq
		return
	}
	if len(c.entries) >= c.max {
		c.forgetLocked()
		return
	}
	c.entries[id] = &pollEntry{inval: c.seq}
}

func (c *pollCache) forgetLocked() {
	c.seq++
	c.floor = c.seq
	c.entries = map[string]*pollEntry{}
}

// stats reports the entries kept and the hits so far (tests).
func (c *pollCache) stats() (entries int, hits uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries), c.hits
}

// sessionMoved drops a session's kept poll answer after this process asked
// its workflow to change it. The workflow's write is told by the change
// feed too, but from another process (the worker) the notification may
// arrive after this request has answered: the customer's next poll must
// show what their own request did.
func (s *Server) sessionMoved(id string) {
	if s.polls != nil {
		s.polls.invalidate(id)
	}
}
