package store

import (
	"hash/maphash"
	"runtime"
	"sync"
)

// LRU is a bounded set of keys with a value each, spread over shards by a
// seeded hash: each shard has its own mutex, map and least-recently-used
// list, so that finding an existing key takes one uncontended lock and
// allocates nothing, and a full shard evicts its least recently used key.
// The memory store keeps its states in one, and so does the two-layer
// Redis store (package redisstore) its local counters.
//
// An LRU does no locking of its own: the caller holds a shard's lock (Lock,
// Unlock) around every other method of the shard.
type LRU[V any] struct {
	seed   maphash.Seed
	mask   uint64
	shards []Shard[V]
}

const (
	// maxShards is the number of shards of an LRU of at least maxShards
	// keys; smaller ones get fewer (a power of two no larger than the
	// bound) so that the bound holds exactly.
	maxShards = 64

	cacheLine = 128
)

// Entry is one key of an LRU, with its value, linked into its shard's list.
type Entry[V any] struct {
	Value      V
	key        string
	prev, next *Entry[V]
}

// Key returns the entry's key.
func (e *Entry[V]) Key() string { return e.key }

type shardData[V any] struct {
	mu      sync.Mutex
	entries map[string]*Entry[V]
	// lru is the sentinel of a circular doubly-linked list: lru.next is the
	// most recently used entry, lru.prev the least.
	lru    Entry[V]
	budget int // most entries this shard holds

	// sweepHeld, when not nil (tests set it), is called with mu held each
	// time a sweep lets go of mu, with how many entries it examined under
	// that hold.
	sweepHeld func(n int)
}

// Shard is one shard of an LRU. Its data is followed by a cache line of
// padding so that two shards' locks never share one.
type Shard[V any] struct {
	shardData[V]
	_ [cacheLine]byte
}

// NewLRU returns an LRU holding at most maxKeys keys (at least 1).
func NewLRU[V any](maxKeys int) *LRU[V] {
	l := new(LRU[V])
	l.init(maxKeys)
	return l
}

func (l *LRU[V]) init(maxKeys int) {
	maxKeys = max(maxKeys, 1)
	n := maxShards
	for n > maxKeys {
		n >>= 1
	}
	l.seed = maphash.MakeSeed()
	l.mask = uint64(n - 1)
	l.shards = make([]Shard[V], n)
	// Spread maxKeys over the shards exactly: the first maxKeys%n shards
	// hold one more, so that the budgets add up to maxKeys.
	base, extra := maxKeys/n, maxKeys%n
	for i := range l.shards {
		s := &l.shards[i]
		s.entries = make(map[string]*Entry[V])
		s.lru.next, s.lru.prev = &s.lru, &s.lru
		s.budget = base
		if i < extra {
			s.budget++
		}
	}
}

// Shard returns the shard of key.
func (l *LRU[V]) Shard(key string) *Shard[V] {
	return &l.shards[maphash.String(l.seed, key)&l.mask]
}

// Shards returns every shard, for walks over all keys.
func (l *LRU[V]) Shards() []Shard[V] { return l.shards }

// Len returns how many keys the LRU holds, taking each shard's lock.
func (l *LRU[V]) Len() int {
	n := 0
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		n += len(s.entries)
		s.mu.Unlock()
	}
	return n
}

// Lock locks the shard.
func (s *Shard[V]) Lock() { s.mu.Lock() }

// Unlock unlocks the shard.
func (s *Shard[V]) Unlock() { s.mu.Unlock() }

// Get returns key's entry, or nil, without marking it used.
func (s *Shard[V]) Get(key string) *Entry[V] { return s.entries[key] }

// Holds reports whether e is still the entry of its key (not removed or
// evicted since it was returned).
func (s *Shard[V]) Holds(e *Entry[V]) bool { return s.entries[e.key] == e }

// Use returns key's entry marked most recently used, or nil.
func (s *Shard[V]) Use(key string) *Entry[V] {
	e := s.entries[key]
	if e != nil && s.lru.next != e {
		s.unlink(e)
		s.pushFront(e)
	}
	return e
}

// Add adds key, which the shard does not hold, as the most recently used
// entry. When the shard is full its least recently used entry is removed
// first; that entry is reused (Value left as it was, for the caller to
// reset) unless reusable says it is still referred to elsewhere (nil:
// always reusable). A new entry has the zero Value.
func (s *Shard[V]) Add(key string, reusable func(*Entry[V]) bool) *Entry[V] {
	var e *Entry[V]
	if len(s.entries) >= s.budget && s.lru.prev != &s.lru {
		old := s.lru.prev
		s.Remove(old)
		if reusable == nil || reusable(old) {
			e = old
		}
	}
	if e == nil {
		e = new(Entry[V])
	}
	e.key = key
	s.entries[key] = e
	s.pushFront(e)
	return e
}

// keepTries is how many of a full shard's least recently used entries
// AddKeeping looks at for one it may evict.
const keepTries = 4

// AddKeeping adds key as Add does, but does not evict an entry for which
// keep reports true while it can evict another: such an entry is moved to
// the front, and the next least recently used looked at, up to keepTries
// of them. When they are all kept, the shard grows past its budget, up to
// twice it; beyond that its least recently used entry is evicted, kept or
// not, so that a shard stays bounded whatever keep says. An evicted entry
// is reused as Add does (reusable as there).
func (s *Shard[V]) AddKeeping(key string, keep, reusable func(*Entry[V]) bool) *Entry[V] {
	if len(s.entries) < s.budget {
		return s.Add(key, reusable)
	}
	for range keepTries {
		old := s.lru.prev
		if old == &s.lru || !keep(old) {
			return s.Add(key, reusable) // evicts old
		}
		s.unlink(old)
		s.pushFront(old)
	}
	if len(s.entries) >= 2*s.budget {
		return s.Add(key, reusable)
	}
	e := &Entry[V]{key: key}
	s.entries[key] = e
	s.pushFront(e)
	return e
}

// Remove drops e from the shard.
func (s *Shard[V]) Remove(e *Entry[V]) {
	s.unlink(e)
	delete(s.entries, e.key)
}

// Walk calls f for every entry, most recently used first; f may Remove the
// entry it is given.
func (s *Shard[V]) Walk(f func(*Entry[V])) {
	for e := s.lru.next; e != &s.lru; {
		next := e.next
		f(e)
		e = next
	}
}

// Sweep removes the entries for which drop reports true and returns how
// many it removed. It takes the shard's lock and lets go of it every batch
// entries, so that a Take waits behind at most that many however many
// keys the shard holds. Every entry held throughout is examined once; one
// added during the sweep may be left to the next.
func (s *Shard[V]) Sweep(batch int, drop func(*Entry[V]) bool) int {
	dropped, held := 0, 0
	s.mu.Lock()
	// Ranging over a map that changes between iterations is well defined:
	// an entry deleted before it is reached is not produced, one added may
	// or may not be, every other one is produced once. Every access to the
	// map is under s.mu, and the lock is let go only between iterations:
	// an entry produced is examined before anyone can evict (and reuse) it.
	for _, e := range s.entries {
		if drop(e) {
			s.Remove(e)
			dropped++
		}
		if held++; held >= batch {
			s.noteSweepHeld(held)
			s.mu.Unlock()
			runtime.Gosched() // let the Takes waiting for s.mu in
			s.mu.Lock()
			held = 0
		}
	}
	s.noteSweepHeld(held)
	s.mu.Unlock()
	return dropped
}

// noteSweepHeld tells sweepHeld, if set, that a sweep examined n entries
// under one hold of s.mu. s.mu is held.
func (s *Shard[V]) noteSweepHeld(n int) {
	if s.sweepHeld != nil {
		s.sweepHeld(n)
	}
}

func (s *Shard[V]) unlink(e *Entry[V]) {
	e.prev.next = e.next
	e.next.prev = e.prev
	e.prev, e.next = nil, nil
}

func (s *Shard[V]) pushFront(e *Entry[V]) {
	e.prev = &s.lru
	e.next = s.lru.next
	s.lru.next.prev = e
	s.lru.next = e
}
