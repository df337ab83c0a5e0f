package redisstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/breaker"
	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
)

// On a Cluster, BreakerFor gives the keys of one master one breaker, and
// those of another master another, without allocating once it exists; a
// single node's keys all get the Client's breaker.
func TestBreakerForClusterMaster(t *testing.T) {
	one := NewClient(&redis.UniversalOptions{Addrs: []string{"127.0.0.1:1"}}, ClientOptions{})
	defer one.Destruct()
	ctx := context.Background()
	for _, k := range []string{"a", "b", "c"} {
		if b := one.BreakerFor(ctx, k); b != one.Breaker() {
			t.Fatalf("single node: key %s has another breaker than the Client's", k)
		}
	}

	cl := redistest.StartCluster(t, 3, 0)
	c := clusterOpsClient(t, cl)
	byMaster := map[string]*breaker.Breaker{}
	keyOf := map[string]string{}
	for i := 0; len(byMaster) < 3 && i < 1000; i++ {
		key := "192.0.2." + strconv.Itoa(i)
		n, err := c.cluster.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		m := n.Options().Addr
		b := c.BreakerFor(ctx, key)
		if b == nil || b == c.Breaker() {
			t.Fatalf("key %s on %s: the Client's breaker, not its master's", key, m)
		}
		if prev, ok := byMaster[m]; ok && prev != b {
			t.Fatalf("master %s: two breakers", m)
		}
		for other, ob := range byMaster {
			if other != m && ob == b {
				t.Fatalf("masters %s and %s share a breaker", m, other)
			}
		}
		byMaster[m] = b
		keyOf[m] = key
	}
	if len(byMaster) != 3 {
		t.Fatalf("breakers of %d masters, want 3", len(byMaster))
	}
	for _, key := range keyOf {
		if n := testing.AllocsPerRun(200, func() { c.BreakerFor(ctx, key) }); n != 0 {
			t.Errorf("BreakerFor(%q): %v allocations", key, n)
		}
	}

	// One master's breaker open: the others' keys still go to Redis.
	var open string
	for m, b := range byMaster {
		open = m
		for range BreakerFailures {
			b.RecordAt(t0, context.DeadlineExceeded)
		}
		break
	}
	for m, key := range keyOf {
		if b := c.BreakerFor(ctx, key); m != open && !b.Allow() {
			t.Errorf("master %s: breaker open with the one of %s", m, open)
		}
	}
	if !c.Breaker().Allow() {
		t.Error("the Client's breaker opened with one master's")
	}
}

// The breakers of masters are bounded: at maxMasterBreakers, the closed
// ones are dropped for a new master (and made again when needed); an open
// one stays, with its prober, until Destruct.
func TestMasterBreakersBounded(t *testing.T) {
	// A Cluster client of no node: a probe never succeeds.
	c := NewClient(&redis.UniversalOptions{Addrs: []string{"127.0.0.1:1"}, IsClusterMode: true,
		DialTimeout: 100 * time.Millisecond, ReadTimeout: 100 * time.Millisecond}, ClientOptions{})
	t.Cleanup(func() { c.Destruct() }) // again: it may be called more than once
	open := c.masterBreaker("10.0.0.0:1", 0)
	for range BreakerFailures {
		open.RecordAt(t0, context.DeadlineExceeded)
	}
	if open.State() != breaker.Open {
		t.Fatalf("breaker %s after %d failures", open.State(), BreakerFailures)
	}
	for i := 1; i < maxMasterBreakers; i++ {
		c.masterBreaker("10.0.0."+strconv.Itoa(i)+":1", 0)
	}
	if n := len(*c.masters.m.Load()); n != maxMasterBreakers {
		t.Fatalf("%d breakers, want %d", n, maxMasterBreakers)
	}
	b := c.masterBreaker("10.0.9.9:1", 0)
	m := *c.masters.m.Load()
	if len(m) != 2 || m["10.0.0.0:1"] != open || m["10.0.9.9:1"] != b || b == c.Breaker() {
		t.Fatalf("after the bound: %d breakers (the open one kept: %v, the new one: %v)", len(m), m["10.0.0.0:1"] == open, m["10.0.9.9:1"] == b)
	}
	if c.masterBreaker("10.0.0.0:1", 0) != open {
		t.Error("the open breaker was made again")
	}
	c.Destruct()
	if b := c.masterBreaker("10.0.7.7:1", 0); b != c.Breaker() {
		t.Error("a breaker made after Destruct")
	}
}
