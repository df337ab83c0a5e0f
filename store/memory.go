package store

import (
	"context"
	"hash/maphash"
	"runtime"
	"sync"
	"time"
	"unsafe"

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
	// maxShards is the number of shards of a store whose MaxKeys is at
	// least maxShards; smaller stores get fewer (a power of two no larger
	// than MaxKeys) so that the bound holds exactly.
	maxShards = 64

	// sweepBatch is the most entries a sweep examines under one hold of a
	// shard's lock: it then lets go for a moment, so that a Take waits
	// behind at most that many, however many idle keys the shard holds.
	// Dropping a key of a large store costs about a microsecond (its
	// entry, state, LRU neighbours and map slot are cache misses), so a
	// Take waits 0.1 ms at most.
	sweepBatch = 128

	cacheLine = 128
)

// MemoryOptions tunes a Memory store. The zero value is ready to use.
type MemoryOptions struct {
	// MaxKeys is the most keys held; beyond it the least recently used key
	// (per shard) is evicted. <= 0 means DefaultMaxKeys.
	MaxKeys int

	// SweepInterval is how often keys whose state is idle are dropped.
	// <= 0 means DefaultSweepInterval.
	SweepInterval time.Duration

	// Now is the clock used when Take or Undo get a zero now, and by the
	// sweeper. nil means time.Now.
	Now func() time.Time
}

// Memory keeps the state of one zone's keys in process memory. It is safe
// for concurrent use.
//
// Keys are spread over shards by a seeded hash, each shard with its own
// mutex, map and least-recently-used list, so that Take on an existing key
// takes one uncontended lock and allocates nothing. A key seen for the first
// time allocates its entry and its algorithms.State; when its shard is full
// the shard's least recently used key is evicted (its entry is reused).
// A goroutine drops idle keys every SweepInterval until Destruct is called.
//
// Memory holds on to the key strings it is given: pass strings that are not
// substrings of larger buffers that would otherwise be freed.
type Memory struct {
	limiter algorithms.Limiter
	now     func() time.Time
	seed    maphash.Seed
	mask    uint64
	shards  []shard
	sweeper *sweeper
	// sweepBatch is the constant sweepBatch, a field so that a benchmark
	// can compare a sweep that holds a shard's lock throughout.
	sweepBatch int
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

func (sw *sweeper) run(shards []shard, now func() time.Time, interval time.Duration, batch int) {
	defer close(sw.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-sw.stop:
			return
		case <-t.C:
			sweepShards(shards, now(), batch)
		}
	}
}

var _ Store = (*Memory)(nil)

// entry is one key's state, linked into its shard's LRU list.
type entry struct {
	key        string
	state      algorithms.State
	prev, next *entry
}

type shardData struct {
	mu      sync.Mutex
	entries map[string]*entry
	// lru is the sentinel of a circular doubly-linked list: lru.next is the
	// most recently used entry, lru.prev the least.
	lru    entry
	budget int // most entries this shard holds

	// What sweeps did to mu, for tests: how many times they held it, and
	// the most entries one hold examined.
	sweepHolds, sweepHeldMax int
}

// shard is padded to a multiple of a cache line so that two shards' locks
// never share one.
type shard struct {
	shardData
	_ [(cacheLine - unsafe.Sizeof(shardData{})%cacheLine) % cacheLine]byte
}

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

	n := maxShards
	for n > maxKeys {
		n >>= 1
	}
	m := &Memory{
		limiter: l,
		now:     now,
		seed:    maphash.MakeSeed(),
		mask:    uint64(n - 1),
		shards:  make([]shard, n),
		sweeper: &sweeper{stop: make(chan struct{}), done: make(chan struct{})},

		sweepBatch: sweepBatch,
	}
	// Spread maxKeys over the shards exactly: the first maxKeys%n shards
	// hold one more, so that the budgets add up to maxKeys.
	base, extra := maxKeys/n, maxKeys%n
	for i := range m.shards {
		s := &m.shards[i]
		s.entries = make(map[string]*entry)
		s.lru.next, s.lru.prev = &s.lru, &s.lru
		s.budget = base
		if i < extra {
			s.budget++
		}
	}

	go m.sweeper.run(m.shards, now, interval, m.sweepBatch)
	// A store dropped without Destruct must not leave its sweeper behind.
	runtime.AddCleanup(m, (*sweeper).halt, m.sweeper)
	return m
}

func (m *Memory) shardFor(key string) *shard {
	return &m.shards[maphash.String(m.seed, key)&m.mask]
}

// Take decides whether key may consume cost units at now (the store's clock
// when now is zero). It never fails.
func (m *Memory) Take(_ context.Context, key string, now time.Time, cost int64) (algorithms.Decision, error) {
	if now.IsZero() {
		now = m.now()
	}
	s := m.shardFor(key)
	s.mu.Lock()
	e := s.entries[key]
	if e == nil {
		e = s.insert(key, m.limiter)
	} else {
		s.touch(e)
	}
	d := e.state.Take(now, cost)
	s.mu.Unlock()
	return d, nil
}

// Undo gives back what an admitted Take of cost, which returned d, consumed.
// A key that is no longer held (swept or evicted) has nothing to give back.
func (m *Memory) Undo(_ context.Context, key string, now time.Time, cost int64, d algorithms.Decision) error {
	if now.IsZero() {
		now = m.now()
	}
	s := m.shardFor(key)
	s.mu.Lock()
	if e := s.entries[key]; e != nil {
		e.state.Undo(now, cost, d)
	}
	s.mu.Unlock()
	return nil
}

// Len returns how many keys the store holds now.
func (m *Memory) Len() int {
	n := 0
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		n += len(s.entries)
		s.mu.Unlock()
	}
	return n
}

// Sweep drops the keys whose state is idle at now and returns how many it
// dropped. It goes shard by shard and lets go of a shard's lock every
// sweepBatch entries, so concurrent Takes wait at most that long. Every key
// held throughout a Sweep is examined once; a key added during it may be
// left to the next.
func (m *Memory) Sweep(now time.Time) int {
	if now.IsZero() {
		now = m.now()
	}
	return sweepShards(m.shards, now, m.sweepBatch)
}

func sweepShards(shards []shard, now time.Time, batch int) int {
	dropped := 0
	for i := range shards {
		dropped += shards[i].sweep(now, batch)
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

// insert adds key with a fresh state at the front of the LRU list, evicting
// the least recently used entry first when the shard is full (and reusing
// it). s.mu is held.
func (s *shard) insert(key string, l algorithms.Limiter) *entry {
	var e *entry
	if len(s.entries) >= s.budget {
		e = s.lru.prev // the least recently used; the shard holds >= 1 entry
		s.unlink(e)
		delete(s.entries, e.key)
		*e = entry{}
	} else {
		e = new(entry)
	}
	e.key = key
	e.state = l.NewState()
	s.entries[key] = e
	s.pushFront(e)
	return e
}

// touch marks e as the most recently used. s.mu is held.
func (s *shard) touch(e *entry) {
	if s.lru.next == e {
		return
	}
	s.unlink(e)
	s.pushFront(e)
}

func (s *shard) unlink(e *entry) {
	e.prev.next = e.next
	e.next.prev = e.prev
	e.prev, e.next = nil, nil
}

func (s *shard) pushFront(e *entry) {
	e.prev = &s.lru
	e.next = s.lru.next
	s.lru.next.prev = e
	s.lru.next = e
}

// sweep drops the entries of s that are idle at now, examining at most
// batch of them under one hold of s.mu, and returns how many it dropped.
func (s *shard) sweep(now time.Time, batch int) int {
	dropped, held := 0, 0
	s.mu.Lock()
	// Ranging over a map that changes between iterations is well defined:
	// an entry deleted before it is reached is not produced, one added may
	// or may not be, every other one is produced once. Every access to the
	// map is under s.mu, and the lock is let go only between iterations:
	// an entry produced is examined before anyone can evict (and reuse) it.
	for key, e := range s.entries {
		if e.state.Idle(now) {
			s.unlink(e)
			delete(s.entries, key)
			dropped++
		}
		if held++; held >= batch {
			s.noteSweepHold(held)
			s.mu.Unlock()
			runtime.Gosched() // let the Takes waiting for s.mu in
			s.mu.Lock()
			held = 0
		}
	}
	s.noteSweepHold(held)
	s.mu.Unlock()
	return dropped
}

// noteSweepHold records that a sweep examined n entries under one hold of
// s.mu. s.mu is held.
func (s *shard) noteSweepHold(n int) {
	s.sweepHolds++
	s.sweepHeldMax = max(s.sweepHeldMax, n)
}
