package ratelimit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// takeScript is Store.Take as one Redis script, so the check of every rule and
// the recording in every rule happen atomically for all API replicas.
//
// KEYS: the rule keys, then the block key when ARGV[4] == "1".
// ARGV: now (Unix ms), member (unique per event), rule count, has-block,
// block limit, block window (ms), then limit and window (ms) per rule.
// Reply: {blocked, block count, block reset, allowed, count1, reset1, ...}.
//
// A sorted set per key holds the events, scored by time. An event scored at or
// before now-window has left the window.
var takeScript = redis.NewScript(`
local now = tonumber(ARGV[1])
local member = ARGV[2]
local n = tonumber(ARGV[3])

local function state(key, limit, window)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
  local count = redis.call('ZCARD', key)
  if count == 0 then return 0, now end
  local idx = 0
  if count >= limit then idx = count - limit end
  local e = redis.call('ZRANGE', key, idx, idx, 'WITHSCORES')
  return count, tonumber(e[2]) + window
end

if ARGV[4] == '1' then
  local limit = tonumber(ARGV[5])
  local c, r = state(KEYS[n + 1], limit, tonumber(ARGV[6]))
  if c >= limit then return {1, c, r, 0} end
end

local out = {0, 0, 0, 1}
for i = 1, n do
  local c, r = state(KEYS[i], tonumber(ARGV[5 + 2 * i]), tonumber(ARGV[6 + 2 * i]))
  out[3 + 2 * i] = c
  out[4 + 2 * i] = r
  if c >= tonumber(ARGV[5 + 2 * i]) then out[4] = 0 end
end
if out[4] == 1 then
  for i = 1, n do
    local limit = tonumber(ARGV[5 + 2 * i])
    local window = tonumber(ARGV[6 + 2 * i])
    redis.call('ZADD', KEYS[i], ARGV[1], member)
    redis.call('PEXPIRE', KEYS[i], window + 1000)
    local c, r = state(KEYS[i], limit, window)
    out[3 + 2 * i] = c
    out[4 + 2 * i] = r
  end
end
return out
`)

// addScript is Store.Add: record unconditionally, keep the newest Limit events.
// KEYS: the rule key. ARGV: now (ms), member, limit, window (ms).
// Reply: {count, reset}.
var addScript = redis.NewScript(`
local now = tonumber(ARGV[1])
local limit = tonumber(ARGV[3])
local window = tonumber(ARGV[4])
local key = KEYS[1]
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
redis.call('ZADD', key, ARGV[1], ARGV[2])
redis.call('ZREMRANGEBYRANK', key, 0, -(limit + 1))
redis.call('PEXPIRE', key, window + 1000)
local count = redis.call('ZCARD', key)
local idx = 0
if count >= limit then idx = count - limit end
local e = redis.call('ZRANGE', key, idx, idx, 'WITHSCORES')
return {count, tonumber(e[2]) + window}
`)

// DefaultRedisPrefix is the key prefix NewRedisStore uses when given "".
const DefaultRedisPrefix = "paygate:ratelimit:"

// RedisStore is a Store shared by every API replica through one Redis (or
// Redis Cluster: all keys of one subject carry the subject as hash tag, so a
// script touches a single slot). Each Take or Add is one Lua script
// evaluation, atomic in Redis; time is passed in by the caller, so replicas
// should keep their clocks in sync (NTP), and tests can move time freely.
//
// While Redis is unreachable the store does not fail open and does not fail
// closed: it serves every call from a per-process MemoryStore, logs the outage
// once, retries Redis at most once per retry interval (one probing request),
// and logs once more when Redis answers again. The MemoryStore is kept warm
// while Redis is healthy (every admitted request and every failed
// authentication is mirrored into it), so at the switch-over each process
// still knows its own recent traffic, and a brute-force block this process has
// seen is enforced from local memory even when Redis has lost it (outage,
// restart, flush). During an outage each replica limits on its own, so the
// effective limit is at most the number of replicas times the configured one.
type RedisStore struct {
	client        redis.UniversalClient
	prefix        string
	local         *MemoryStore
	timeout       time.Duration
	retryInterval time.Duration
	logger        *slog.Logger
	owned         bool

	memberPrefix string
	seq          atomic.Uint64
	down         atomic.Bool
	retryAt      atomic.Int64 // wall-clock Unix ns of the next probe while down
}

// RedisOption configures a RedisStore.
type RedisOption func(*RedisStore)

// WithRedisTimeout bounds each Redis call (default 1s). The bound reaches the
// socket only when the client has ContextTimeoutEnabled (OpenStore sets it);
// otherwise the client's own read/write timeouts apply.
func WithRedisTimeout(d time.Duration) RedisOption {
	return func(s *RedisStore) { s.timeout = d }
}

// WithRetryInterval sets how often, during an outage, one request probes Redis
// again (default 1s).
func WithRetryInterval(d time.Duration) RedisOption {
	return func(s *RedisStore) { s.retryInterval = d }
}

// WithRedisLogger sets the logger for outage and recovery messages (default
// slog.Default()).
func WithRedisLogger(l *slog.Logger) RedisOption {
	return func(s *RedisStore) { s.logger = l }
}

// NewRedisStore returns a store on client with keys under prefix
// (DefaultRedisPrefix when empty). A *redis.Client, *redis.ClusterClient or
// *redis.Ring all work. The prefix must not contain '{' or '}' (they would
// change the Cluster hash tag); NewRedisStore panics if it does.
func NewRedisStore(client redis.UniversalClient, prefix string, opts ...RedisOption) *RedisStore {
	if prefix == "" {
		prefix = DefaultRedisPrefix
	}
	if strings.ContainsAny(prefix, "{}") {
		panic(fmt.Sprintf("ratelimit: redis prefix %q must not contain '{' or '}'", prefix))
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	s := &RedisStore{
		client:        client,
		prefix:        prefix,
		local:         NewMemoryStore(),
		timeout:       time.Second,
		retryInterval: time.Second,
		logger:        slog.Default(),
		memberPrefix:  hex.EncodeToString(b[:]) + ":",
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// OpenStore returns the store for a deployment: a MemoryStore when redisURL is
// empty (one process), otherwise a RedisStore on a client parsed from
// redisURL (redis:// or rediss://) with keys under prefix. Unless the URL sets
// them, dial, read and write timeouts are 1s, failed dials and commands are
// not retried (the fallback answers instead) and context deadlines are
// honoured. Call close at shutdown; it closes the client OpenStore created.
// An unreachable Redis is not an error here: the store falls back as
// RedisStore describes.
func OpenStore(redisURL, prefix string, opts ...RedisOption) (store Store, close func() error, err error) {
	if redisURL == "" {
		return NewMemoryStore(), func() error { return nil }, nil
	}
	o, err := redis.ParseURL(redisURL)
	if err != nil {
		return nil, nil, fmt.Errorf("ratelimit: REDIS_URL: %w", err)
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = time.Second
	}
	if o.ReadTimeout == 0 {
		o.ReadTimeout = time.Second
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = time.Second
	}
	if o.MaxRetries == 0 {
		// No retries: the fallback covers a failed call, and a script retried
		// after a lost reply would count its event twice.
		o.MaxRetries = -1
	}
	if o.DialerRetries == 0 {
		// One dial attempt per call; the retry interval paces the probes.
		o.DialerRetries = 1
	}
	o.ContextTimeoutEnabled = true
	c := redis.NewClient(o)
	s := NewRedisStore(c, prefix, opts...)
	s.owned = true
	return s, s.Close, nil
}

// Close closes the Redis client if OpenStore created it; otherwise it does
// nothing and the caller keeps ownership of its client.
func (s *RedisStore) Close() error {
	if s.owned {
		return s.client.Close()
	}
	return nil
}

// Degraded reports whether the store is currently serving from its in-memory
// fallback because Redis was unreachable.
func (s *RedisStore) Degraded() bool { return s.down.Load() }

func (s *RedisStore) key(subject, name string) string {
	return s.prefix + "{" + subject + "}:" + name
}

func (s *RedisStore) member() string {
	return s.memberPrefix + strconv.FormatUint(s.seq.Add(1), 36)
}

// Take implements Store.
func (s *RedisStore) Take(ctx context.Context, subject string, now time.Time, block *Rule, rules []Rule) (Result, error) {
	if block != nil {
		// A block this process has seen holds even if Redis lost it.
		if lr, _ := s.local.Take(ctx, subject, now, block, nil); lr.Blocked {
			return lr, nil
		}
	}
	if s.useRedis() {
		res, err := s.takeRedis(ctx, subject, now, block, rules)
		if err == nil {
			s.markUp()
			if res.Allowed {
				s.local.mirror(subject, now, rules)
			}
			return res, nil
		}
		s.markDown(err)
	}
	return s.local.Take(ctx, subject, now, block, rules)
}

// releaseScript frees a lease only if it is still the caller's.
var releaseScript = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

// Lease implements Leaser across the replicas sharing Redis (SET NX PX,
// released by a compare-and-delete). While Redis is unreachable it leases
// from this process's memory: each replica then has its own.
func (s *RedisStore) Lease(ctx context.Context, key string, ttl time.Duration) (func(), bool, error) {
	if s.useRedis() {
		rkey, token := s.prefix+"lease:{"+key+"}", s.member()
		cctx, cancel := s.callContext(ctx)
		ok, err := s.client.SetNX(cctx, rkey, token, ttl).Result()
		cancel()
		if err == nil {
			s.markUp()
			if !ok {
				return nil, false, nil
			}
			var once sync.Once
			return func() {
				once.Do(func() {
					rctx, cancel := s.callContext(ctx)
					defer cancel()
					if err := releaseScript.Run(rctx, s.client, []string{rkey}, token).Err(); err != nil {
						// The lease ends with its ttl.
						s.logger.Warn("ratelimit: lease not released", "error", err)
					}
				})
			}, true, nil
		}
		s.markDown(err)
	}
	return s.local.Lease(ctx, key, ttl)
}

// Add implements Store.
func (s *RedisStore) Add(ctx context.Context, subject string, now time.Time, rule Rule) (State, error) {
	local, _ := s.local.Add(ctx, subject, now, rule)
	if s.useRedis() {
		st, err := s.addRedis(ctx, subject, now, rule)
		if err == nil {
			s.markUp()
			return st, nil
		}
		s.markDown(err)
	}
	return local, nil
}

func (s *RedisStore) takeRedis(ctx context.Context, subject string, now time.Time, block *Rule, rules []Rule) (Result, error) {
	keys := make([]string, 0, len(rules)+1)
	args := make([]any, 0, 6+2*len(rules))
	args = append(args, now.UnixMilli(), s.member(), len(rules))
	if block != nil {
		args = append(args, "1", block.Limit, ms(block.Window))
	} else {
		args = append(args, "0", 0, 0)
	}
	for _, r := range rules {
		keys = append(keys, s.key(subject, r.Name))
		args = append(args, r.Limit, ms(r.Window))
	}
	if block != nil {
		keys = append(keys, s.key(subject, block.Name))
	}
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	v, err := takeScript.Run(ctx, s.client, keys, args...).Int64Slice()
	if err != nil {
		return Result{}, err
	}
	if v[0] == 1 {
		if len(v) < 3 {
			return Result{}, errors.New("ratelimit: short reply from take script")
		}
		return Result{Blocked: true, Block: State{Count: int(v[1]), Reset: time.UnixMilli(v[2])}}, nil
	}
	if len(v) != 4+2*len(rules) {
		return Result{}, fmt.Errorf("ratelimit: take script replied %d values for %d rules", len(v), len(rules))
	}
	res := Result{Allowed: v[3] == 1, States: make([]State, len(rules))}
	for i := range rules {
		res.States[i] = State{Count: int(v[4+2*i]), Reset: time.UnixMilli(v[5+2*i])}
	}
	return res, nil
}

func (s *RedisStore) addRedis(ctx context.Context, subject string, now time.Time, rule Rule) (State, error) {
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	v, err := addScript.Run(ctx, s.client, []string{s.key(subject, rule.Name)},
		now.UnixMilli(), s.member(), rule.Limit, ms(rule.Window)).Int64Slice()
	if err != nil {
		return State{}, err
	}
	if len(v) != 2 {
		return State{}, fmt.Errorf("ratelimit: add script replied %d values", len(v))
	}
	return State{Count: int(v[0]), Reset: time.UnixMilli(v[1])}, nil
}

// callContext detaches the call from the request's cancellation (a client that
// hangs up must not be mistaken for a Redis outage, nor leave a decision
// half-known) and bounds it by the store's timeout.
func (s *RedisStore) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
}

// useRedis reports whether this call should go to Redis: always while
// healthy; during an outage only for the one call that claims the next probe.
func (s *RedisStore) useRedis() bool {
	if !s.down.Load() {
		return true
	}
	at := s.retryAt.Load()
	now := time.Now().UnixNano()
	return now >= at && s.retryAt.CompareAndSwap(at, now+int64(s.retryInterval))
}

func (s *RedisStore) markDown(err error) {
	s.retryAt.Store(time.Now().UnixNano() + int64(s.retryInterval))
	if s.down.CompareAndSwap(false, true) {
		s.logger.Warn("ratelimit: redis unreachable; limiting from per-process memory until it answers again",
			"error", err, "retry_interval", s.retryInterval.String())
	}
}

func (s *RedisStore) markUp() {
	if s.down.CompareAndSwap(true, false) {
		s.logger.Info("ratelimit: redis reachable again; limits are shared across replicas")
	}
}
