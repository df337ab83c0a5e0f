package store

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
)

// Defaults of MemoryOptions.
const (
	// DefaultMaxKeys bounds what a flood of distinct keys costs a zone to
	// a few tens of MB of resident memory: about 20 MB for sliding_log
	// with 16-byte keys, 45 MB with 256-byte ones, GC headroom included
	// (BenchmarkMemoryBytesPerKey), where a million keys took 0.7-1 GB. It
	// is still more keys than most sites see within a window on one
	// instance, and beyond it the least recently used go first, not the
	// busy keys that reach their limits.
	DefaultMaxKeys       = 50_000
	DefaultSweepInterval = time.Minute
)

const (
	// sweepBatch is the most entries a sweep examines under one hold of a
	// shard's lock: it then lets go for a moment, so that a Take waits
	// behind at most that many, however many idle keys the shard holds.
	// Dropping a key of a large store costs about a microsecond (its
	// entry, state, LRU neighbours and map slot are cache misses), so a
	// Take waits 0.1 ms at most.
	sweepBatch = 128
)

// MemoryOptions tunes a Memory store. The zero value is ready to use.
type MemoryOptions struct {
	// MaxKeys is the most keys held; beyond it the least recently used key
	// (per shard) is evicted, except that keys with requests in flight
	// (concurrency) are kept while others can go, up to twice MaxKeys.
	// <= 0 means DefaultMaxKeys.
	MaxKeys int

	// SweepInterval is how often keys whose state is idle are dropped.
	// <= 0 means DefaultSweepInterval.
	SweepInterval time.Duration

	// Now is the clock used when Take or Undo get a zero now, and by the
	// sweeper. nil means time.Now.
	Now func() time.Time

	// BlockFor is how long a key is refused outright after a Take denies
	// it (block_for): its Takes are then refused without counting until
	// the block ends. <= 0 means no block.
	BlockFor time.Duration
}

// Memory keeps the state of one zone's keys in process memory. It is safe
// for concurrent use.
//
// Keys are held in an LRU (sharded, see LRU), so that Take on an existing
// key takes one uncontended lock and allocates nothing. A key seen for the
// first time allocates its entry and its algorithms.State; when its shard is
// full the shard's least recently used key is evicted (its entry is reused).
// A goroutine drops idle keys every SweepInterval until Destruct is called.
//
// Memory holds on to the key strings it is given: pass strings that are not
// substrings of larger buffers that would otherwise be freed.
type Memory struct {
	limiter algorithms.Limiter
	now     func() time.Time
	keys    LRU[algorithms.State]
	blocks  *blockSet // see block.go
	sweeper *sweeper
	// inFlight: the algorithm's state holds the requests in flight
	// (concurrency), which eviction must not forget (see add).
	inFlight bool
	// relimited is set once the store is to decide under another Limiter
	// (Under). Until then every state decides under limiter, the only one
	// there is, and take and undo need not ask it to relimit: that saves
	// a type assertion and a dynamic call on every Take of a held key.
	// They read it under the shard's lock, which orders Under's write
	// before any state made under the other Limiter is reached again.
	relimited atomic.Bool
}

// sweeper is the goroutine that sweeps a Memory. It does not refer to the
// Memory, so that a Memory nobody calls Destruct on can still be collected
// (a cleanup then stops the goroutine).
type sweeper struct {
	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

func (sw *sweeper) halt() { sw.stopOnce.Do(func() { close(sw.stop) }) }

func (sw *sweeper) run(shards []Shard[algorithms.State], blocks *blockSet, now func() time.Time, interval time.Duration) {
	Every(interval, sw.stop, sw.done, func() {
		at := now()
		sweepShards(shards, at, sweepBatch)
		blocks.sweep(at, sweepBatch)
	})
}

var _ Store = (*Memory)(nil)

// NewMemory returns a Memory store for l and starts its sweeper. Call
// Destruct to stop the sweeper when the store is no longer used.
func NewMemory(l algorithms.Limiter, opts MemoryOptions) *Memory {
	maxKeys := opts.MaxKeys
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	interval := opts.SweepInterval
	if interval <= 0 {
		interval = DefaultSweepInterval
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}

	m := &Memory{
		limiter: l,
		now:     now,
		blocks:  newBlockSet(l, maxKeys, opts.BlockFor),
		sweeper: &sweeper{stop: make(chan struct{}), done: make(chan struct{})},
	}
	m.keys.init(maxKeys)
	if a, err := algorithms.Lookup(l.Name()); err == nil {
		m.inFlight = a.Lease
	}

	go m.sweeper.run(m.keys.shards, m.blocks, now, interval)
	// A store dropped without Destruct must not leave its sweeper behind.
	runtime.AddCleanup(m, (*sweeper).halt, m.sweeper)
	return m
}

// Take decides whether key may consume cost units at now (the store's clock
// when now is zero), under the Limiter the store was made with. It never
// fails. A blocked key is refused without counting; with BlockFor, a
// denial blocks the key.
func (m *Memory) Take(_ context.Context, key string, now time.Time, cost int64) (algorithms.Decision, error) {
	return m.take(m.limiter, key, now, cost), nil
}

// take is Take under l. The state's Decision goes straight into the
// named result, which penalize amends in place: a Decision is too large
// to be returned in registers, and a local would be one more copy of it.
func (m *Memory) take(l algorithms.Limiter, key string, now time.Time, cost int64) (d algorithms.Decision) {
	if now.IsZero() {
		now = m.now()
	}
	if bd, blocked := m.blocks.refuse(key, now); blocked {
		return bd
	}
	s := m.keys.Shard(key)
	s.mu.Lock()
	e := s.Use(key)
	if e == nil {
		e = m.add(s, key, l, now)
	} else if m.relimited.Load() {
		relimit(e.Value, now, l)
	}
	d = e.Value.Take(now, cost)
	s.mu.Unlock()
	if !d.Allowed {
		m.blocks.penalize(key, now, &d)
	}
	return d
}

// add adds key to its shard s, which the caller has locked, with a new
// state under l. A key with requests in flight (a concurrency key's
// leases) is not evicted for it while another can be: forgetting those
// leases would let the key admit its limit again while the requests still
// run, so that a flood of other keys could lift any key's limit. The
// shard then grows past its share of MaxKeys, up to twice it (see
// Shard.AddKeeping): a client needs that many requests in flight at once
// to evict such a key.
//
// Asking whether a key is idle reads its state, which a flood of new keys
// finds out of cache; so the idle state of the key evicted becomes the new
// key's (an idle state is the same as a new one, State.Idle, but for the
// latest instant it has seen, to which an older reading is clamped), and
// the flood allocates nothing. Only while every state decides under the
// store's own Limiter: a state of another would need converting.
func (m *Memory) add(s *Shard[algorithms.State], key string, l algorithms.Limiter, now time.Time) *Entry[algorithms.State] {
	if !m.inFlight {
		e := s.Add(key, nil)
		e.Value = l.NewState()
		return e
	}
	var idle algorithms.State
	e := s.AddKeeping(key, func(e *Entry[algorithms.State]) bool {
		if e.Value.Idle(now) {
			idle = e.Value
			return false
		}
		return true
	}, nil)
	if e.Value == nil || e.Value != idle || m.relimited.Load() {
		e.Value = l.NewState()
	}
	return e
}

// relimit makes st decide under l, if it can (see algorithms.Relimiter).
func relimit(st algorithms.State, now time.Time, l algorithms.Limiter) {
	if r, ok := st.(algorithms.Relimiter); ok {
		r.Relimit(now, l)
	}
}

// Undo gives back what an admitted Take of cost, which returned d, consumed.
// A key that is no longer held (swept or evicted) has nothing to give back.
func (m *Memory) Undo(_ context.Context, key string, now time.Time, cost int64, d algorithms.Decision) error {
	m.undo(m.limiter, key, now, cost, d)
	return nil
}

func (m *Memory) undo(l algorithms.Limiter, key string, now time.Time, cost int64, d algorithms.Decision) {
	if now.IsZero() {
		now = m.now()
	}
	s := m.keys.Shard(key)
	s.mu.Lock()
	if e := s.Get(key); e != nil {
		// An Undo that has nothing to give back leaves the state as it
		// is, under the limits it was last decided under, as the Redis
		// store, which does not call its script then: a bucket converted
		// later has drained under its old rate meanwhile.
		if d.Allowed && cost > 0 && m.relimited.Load() {
			relimit(e.Value, now, l)
		}
		e.Value.Undo(now, cost, d)
	}
	s.mu.Unlock()
}

// Under returns the store deciding under l, another Limiter of the
// store's algorithm, over the same keys: what a key has used carries over
// between them (see algorithms.Relimiter), so that a zone keeps its counts
// when a config reload changes its limits, and a key may be held to limits
// that vary per request.
func (m *Memory) Under(l algorithms.Limiter) (Store, error) {
	if l.Name() != m.limiter.Name() {
		return nil, fmt.Errorf("memory store of algorithm %s: cannot decide under %s", m.limiter.Name(), l.Name())
	}
	if l == m.limiter || l.Config().Equal(m.limiter.Config()) {
		return m, nil // the store itself: no state to convert
	}
	m.relimited.Store(true)
	return &memoryUnder{Memory: m, l: l}, nil
}

// memoryUnder is a Memory deciding under another Limiter (Memory.Under);
// its other methods are the Memory's.
type memoryUnder struct {
	*Memory
	l algorithms.Limiter
}

func (u *memoryUnder) Take(_ context.Context, key string, now time.Time, cost int64) (algorithms.Decision, error) {
	return u.take(u.l, key, now, cost), nil
}

func (u *memoryUnder) Undo(_ context.Context, key string, now time.Time, cost int64, d algorithms.Decision) error {
	u.undo(u.l, key, now, cost, d)
	return nil
}

// Len returns how many keys the store holds now.
func (m *Memory) Len() int { return m.keys.Len() }

// Sweep drops the keys whose state is idle at now and returns how many it
// dropped (it drops the blocks that have ended too). It goes shard by
// shard and lets go of a shard's lock every
// sweepBatch entries, so concurrent Takes wait at most that long. Every key
// held throughout a Sweep is examined once; a key added during it may be
// left to the next.
func (m *Memory) Sweep(now time.Time) int {
	if now.IsZero() {
		now = m.now()
	}
	return m.sweep(now, sweepBatch)
}

// sweep is Sweep letting go of a shard's lock every batch entries (a
// benchmark compares other batches).
func (m *Memory) sweep(now time.Time, batch int) int {
	m.blocks.sweep(now, batch)
	return sweepShards(m.keys.shards, now, batch)
}

func sweepShards(shards []Shard[algorithms.State], now time.Time, batch int) int {
	idle := func(e *Entry[algorithms.State]) bool { return e.Value.Idle(now) }
	dropped := 0
	for i := range shards {
		dropped += shards[i].Sweep(batch, idle)
	}
	return dropped
}

// Destruct stops the sweeper and waits for it to return. It may be called
// more than once. The store itself stays usable (it is only not swept any
// more); it makes Memory a caddy.Destructor for a caddy.UsagePool.
func (m *Memory) Destruct() error {
	m.sweeper.halt()
	<-m.sweeper.done
	return nil
}

var _ Inspector = (*Memory)(nil)

// Inspect returns key's state at now (the store's clock when now is zero)
// without consuming anything or making the key recently used.
func (m *Memory) Inspect(_ context.Context, key string, now time.Time) (KeyState, error) {
	return m.inspect(m.limiter, key, now), nil
}

// Inspect returns key's state under the limits the store decides under:
// what its next request would see.
func (u *memoryUnder) Inspect(_ context.Context, key string, now time.Time) (KeyState, error) {
	return u.inspect(u.l, key, now), nil
}

// inspect is Inspect under l. A held state is converted to l first, as
// its next Take would convert it.
func (m *Memory) inspect(l algorithms.Limiter, key string, now time.Time) KeyState {
	if now.IsZero() {
		now = m.now()
	}
	s := m.keys.Shard(key)
	s.mu.Lock()
	var tiers []algorithms.TierStatus
	if e := s.Get(key); e != nil {
		relimit(e.Value, now, l)
		tiers = Peek(e.Value, now)
	}
	s.mu.Unlock()
	if tiers == nil {
		tiers = Peek(l.NewState(), now)
	}
	return NewKeyState(l.Config(), tiers)
}

// Reset forgets key: its next Take finds it whole.
func (m *Memory) Reset(_ context.Context, key string) error {
	s := m.keys.Shard(key)
	s.mu.Lock()
	if e := s.Get(key); e != nil {
		s.Remove(e)
	}
	s.mu.Unlock()
	return nil
}
