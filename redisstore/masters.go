package redisstore

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/zonelimit/caddy-ratelimit/breaker"
)

// On a Cluster each master has a circuit breaker of its own, so that a
// master that fails (or has no node left for its slots, with
// cluster-require-full-coverage no) sends to on_error only the keys of its
// slots: the keys on the other masters are still decided by Redis. The
// Client's own breaker then stands only for calls no master could be
// found for (no slot map: no node answers).

// maxMasterBreakers bounds the breakers a Client keeps, one per master
// address it has seen (Redis Cluster is meant for at most 1000 nodes).
// When it is reached, the closed ones are dropped (they hold nothing but a
// failure count) and made again when needed.
const maxMasterBreakers = 1024

// masterBreakers are a Cluster Client's breakers, one per master address.
// Lookups read an immutable map without a lock; a new master copies it.
type masterBreakers struct {
	m  atomic.Pointer[map[string]*breaker.Breaker]
	mu sync.Mutex // serializes the copies
}

// BreakerFor returns the circuit breaker that a call for the zone key key
// (a user's key, as a Store takes it) asks and records to: on a Cluster the
// breaker of the master that owns the key's slot in go-redis's slot map,
// which is where the call goes; otherwise, or when no master is known, the
// Client's one breaker (Breaker). It does not allocate once the master's
// breaker exists (but for a key EscapeKey must rewrite, as the call does).
func (c *Client) BreakerFor(ctx context.Context, key string) *breaker.Breaker {
	// While the Client's breaker is open no slot map could be had: asking
	// go-redis for one would wait for its dial timeout at every request.
	if c.cluster == nil || !c.breaker.Allow() {
		return c.breaker
	}
	tag := EscapeKey(key)
	// The hash tag has no brace, so go-redis hashes all of it: the slot of
	// every key of the zone key.
	node, err := c.cluster.MasterForKey(ctx, tag)
	if err != nil {
		return c.breaker
	}
	addr := node.Options().Addr
	if m := c.masters.m.Load(); m != nil {
		if b, ok := (*m)[addr]; ok {
			return b
		}
	}
	return c.masterBreaker(addr, int(crc16(tag))%clusterSlots)
}

// masterBreaker returns the breaker of the master at addr, made if it has
// none yet, with slot (one the master owns now) as its probe's fallback.
func (c *Client) masterBreaker(addr string, slot int) *breaker.Breaker {
	mb := &c.masters
	var dropped []*breaker.Breaker
	defer func() {
		for _, b := range dropped {
			b.Close() // outside the lock: it waits for a probe under way
		}
	}()
	mb.mu.Lock()
	defer mb.mu.Unlock()
	var m map[string]*breaker.Breaker
	if p := mb.m.Load(); p != nil {
		if b, ok := (*p)[addr]; ok {
			return b
		}
		m = maps.Clone(*p)
	} else {
		m = make(map[string]*breaker.Breaker)
	}
	if c.closed {
		return c.breaker // Destruct closed the others: none is made after
	}
	if len(m) >= maxMasterBreakers {
		for a, b := range m {
			if b.State() == breaker.Closed {
				dropped = append(dropped, b)
				delete(m, a)
			}
		}
		if len(m) >= maxMasterBreakers {
			return c.breaker
		}
	}
	b := c.newBreaker(addr, func(ctx context.Context) error { return c.probeMaster(ctx, addr, slot) })
	m[addr] = b
	mb.m.Store(&m)
	return b
}

// closeMasters stops the masters' breakers (Destruct).
func (c *Client) closeMasters() {
	mb := &c.masters
	mb.mu.Lock()
	c.closed = true
	p := mb.m.Load()
	mb.mu.Unlock()
	if p != nil {
		for _, b := range *p {
			b.Close()
		}
	}
}

// probeMaster is the probe of the breaker of the master at addr: the
// probe script on a slot of that master in a fresh slot map, or, when it
// owns none any more (its replica took over; or the map lists no node for
// its slots), on home, the slot it owned when its breaker was made. The
// breaker then closes once that slot's new master writes; calls for the
// keys of the master's other slots go to their new masters' breakers.
func (c *Client) probeMaster(ctx context.Context, addr string, home int) error {
	ctx, cancel := context.WithTimeout(ctx, c.probeTimeout)
	defer cancel()
	// A dead master answers nothing (no MOVED), so go-redis would keep its
	// slot map, and send that master's keys to it, for up to 10 seconds:
	// reload it (in the background), to find the replica that took over.
	c.cluster.ReloadState(ctx)
	//lint:ignore SA1019 CLUSTER SHARDS needs Redis 7; CLUSTER SLOTS is what go-redis reads its own slot map with.
	slots, err := c.cluster.ClusterSlots(ctx).Result()
	if err != nil {
		return fmt.Errorf("master %s: %w", addr, err)
	}
	slot := home
	for _, s := range slots {
		if len(s.Nodes) > 0 && s.Nodes[0].Addr == addr {
			slot = s.Start
			break
		}
	}
	key := probeKey(c.probePrefix, slotTag(slot))
	if err := evalOne(ctx, c.cluster, probeScript, []string{key}, []any{probeKeyTTL}).Err(); err != nil {
		return fmt.Errorf("master %s: %w", addr, err)
	}
	return nil
}

// probeSlotMap is the probe of a Cluster Client's own breaker, which
// stands for the calls no master was found for: it closes once a node
// answers CLUSTER SLOTS, and go-redis has the slot map again; the calls
// then go to their masters' breakers.
func (c *Client) probeSlotMap(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.probeTimeout)
	defer cancel()
	c.cluster.ReloadState(ctx)
	//lint:ignore SA1019 see probeMaster.
	return c.cluster.ClusterSlots(ctx).Err()
}

// slotTag returns the smallest decimal number that hashes to slot, a hash
// tag for a key in that slot (every slot has one below 10^6; a slot needs
// 16384 tries on average).
func slotTag(slot int) string {
	for i := 0; i < 1_000_000; i++ {
		tag := strconv.Itoa(i)
		if int(crc16(tag))%clusterSlots == slot {
			return tag
		}
	}
	return "0"
}

// BreakerOpen reports whether a breaker of the Client is open: its own, or
// on a Cluster one of a master's.
func (c *Client) BreakerOpen() bool {
	if c.breaker.State() == breaker.Open {
		return true
	}
	if p := c.masters.m.Load(); p != nil {
		for _, b := range *p {
			if b.State() == breaker.Open {
				return true
			}
		}
	}
	return false
}
