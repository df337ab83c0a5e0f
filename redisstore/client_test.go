package redisstore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
	"github.com/zonelimit/caddy-ratelimit/internal/storetest"
)

// On a Cluster, a master's breaker probes that master: one that refuses
// the scripts fails its own probe (naming it) while the others' succeed.
func TestBreakerProbeOwnClusterMaster(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	const prefix = "rl:"
	c := NewClient(&redis.UniversalOptions{Addrs: cl.Addrs, DialTimeout: 5 * time.Second, ReadTimeout: 3 * time.Second},
		ClientOptions{KeyPrefix: prefix})
	defer c.Destruct()
	ctx := context.Background()
	slots, err := c.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	home := map[string]int{} // a slot of each master
	for _, s := range slots {
		home[s.Nodes[0].Addr] = s.Start
	}
	if len(home) != 3 {
		t.Fatalf("masters %v, want 3", home)
	}
	probeAll := func() map[string]error {
		errs := map[string]error{}
		for m, slot := range home {
			errs[m] = c.probeMaster(ctx, m, slot)
		}
		return errs
	}
	storetest.WaitFor(t, "every master's probe to succeed", func() bool {
		for _, err := range probeAll() {
			if err != nil {
				return false
			}
		}
		return true
	})
	for m, slot := range home {
		key := probeKey(prefix, slotTag(slot))
		if got := int(crc16(slotTag(slot))) % clusterSlots; got != slot {
			t.Fatalf("tag %s of slot %d hashes to %d", slotTag(slot), slot, got)
		}
		n, err := c.cluster.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if n.Options().Addr != m {
			t.Errorf("probe key %s is on %s, want %s", key, n.Options().Addr, m)
		}
		if ttl := n.PTTL(ctx, key).Val(); ttl <= 0 || ttl > probeKeyTTL*time.Millisecond {
			t.Errorf("probe key %s: TTL %v", key, ttl)
		}
	}

	// One master full: its probe fails with OOM, the others' succeed.
	var full string
	for m := range home {
		full = m
		break
	}
	redistest.Fill(t, full, "{"+slotTag(home[full])+"}")
	for m, err := range probeAll() {
		switch {
		case m == full && (err == nil || !strings.Contains(err.Error(), "OOM") || !strings.Contains(err.Error(), full)):
			t.Errorf("probe of the full master %s: %v, want its OOM", m, err)
		case m != full && err != nil:
			t.Errorf("probe of master %s with %s full: %v", m, full, err)
		}
	}
	if _, err := redistest.Do(full, "CONFIG", "SET", "maxmemory", "0"); err != nil {
		t.Fatal(err)
	}
	if err := c.probeMaster(ctx, full, home[full]); err != nil {
		t.Fatalf("probe once fixed: %v", err)
	}

	// An address that masters no slot any more (its replica took over, say)
	// is probed on the slot it had: the breaker closes once the slot's new
	// master writes.
	if err := c.probeMaster(ctx, "127.0.0.1:1", home[full]); err != nil {
		t.Fatalf("probe of a former master's slot: %v", err)
	}
}

// Hint names the cause of the Redis errors whose text does not say it.
func TestHint(t *testing.T) {
	for _, tc := range []struct{ err, want string }{
		{"redis store: gcra: WRONGPASS invalid username-password pair or user is disabled.", "authentication failed"},
		{"redis store: gcra: NOAUTH Authentication required.", "authentication failed"},
		{"redis store: gcra: ERR Protocol error: unauthenticated multibulk length", "authentication failed"},
		{"redis store: gcra: NOPERM User rl has no permissions to run the 'evalsha' command", "permission"},
		{"master 127.0.0.1:7000: OOM command not allowed when used memory > 'maxmemory'.", "out of memory"},
		{"redis store: gcra: READONLY You can't write against a read only replica.", "replica"},
		{"redis store: gcra: dial tcp 127.0.0.1:6379: connect: connection refused", ""},
		{"redis store: gcra: ERR user_script:1: BOOM custom", ""},
	} {
		got := Hint(errors.New(tc.err))
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: hint %q, want one with %q", tc.err, got, tc.want)
		}
	}
}

// A Client without a password, of a Redis that wants one, fails every call
// with Redis's NOAUTH, which Hint names.
func TestClientNoPassword(t *testing.T) {
	srv := redistest.StartArgs(t, "--requirepass", "s3cret")
	c := NewClient(&redis.UniversalOptions{Addrs: []string{srv.Addr}, ReadTimeout: time.Second}, ClientOptions{})
	defer c.Destruct()
	ctx := context.Background()
	l, err := algorithms.New(algorithms.GCRA, oneTier(10, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewStore(c, l, Options{KeyPrefix: "rltest:", Zone: "z", Pipeliner: c.Pipeliner()})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		_, err := s.Take(ctx, "k", t0, 1)
		if err == nil || !strings.Contains(err.Error(), "NOAUTH") || Hint(err) == "" {
			t.Fatalf("take %d: error %v, want Redis's NOAUTH", i, err)
		}
	}
	if err := c.Eval(ctx, "return 1", nil).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Fatalf("eval: error %v, want Redis's NOAUTH", err)
	}
}

// NewClient sets the policy the stores rely on, whatever its caller asked:
// one attempt a call, pipelines on the main pool, the caller's context
// heeded, and a PING on connecting when there is no password to send.
func TestClientPolicy(t *testing.T) {
	for _, pw := range []string{"", "pw"} {
		o := &redis.UniversalOptions{Addrs: []string{"127.0.0.1:1"}, Password: pw, MaxRetries: 3, PipelinePoolSize: 8}
		c := NewClient(o, ClientOptions{})
		c.Destruct()
		if o.MaxRetries != -1 || o.DialerRetries != 1 || o.PipelinePoolSize != -1 || !o.ContextTimeoutEnabled {
			t.Errorf("password %q: MaxRetries %d, DialerRetries %d, PipelinePoolSize %d, ContextTimeoutEnabled %v",
				pw, o.MaxRetries, o.DialerRetries, o.PipelinePoolSize, o.ContextTimeoutEnabled)
		}
		if (o.OnConnect != nil) != (pw == "") {
			t.Errorf("password %q: OnConnect set %v", pw, o.OnConnect != nil)
		}
	}
}

// After an outage long enough for go-redis's pool to give up dialing (it
// then tries again once a second), the probe and the decisions get
// through as soon as Redis is back: they go on the Pipeliner's own
// connection, the scripts Redis lost with its restart loaded on it too.
func TestClientBackAtOnceAfterOutage(t *testing.T) {
	srv := redistest.Start(t)
	c := NewClient(&redis.UniversalOptions{Addrs: []string{srv.Addr}, PoolSize: 2, DialTimeout: 200 * time.Millisecond}, ClientOptions{})
	defer c.Destruct()
	s := pipelinedStore(t, c, c.Pipeliner(), algorithms.GCRA, oneTier(10, time.Hour), "outage")
	ctx := context.Background()
	if d, err := s.Take(ctx, "k", time.Time{}, 1); err != nil || d.Remaining != 9 {
		t.Fatalf("before: %+v, %v", d, err)
	}
	srv.Stop()
	for i := range 3 { // more failed dials than the pool's size
		if err := c.Ping(ctx).Err(); err == nil {
			t.Fatalf("ping %d with Redis down: no error", i)
		}
	}
	if err := c.Probe(ctx); err == nil {
		t.Fatal("probe with Redis down: no error")
	}
	srv.Restart()
	rc := c.UniversalClient.(*redis.Client)
	before := pooledUses(rc)
	if err := c.Probe(ctx); err != nil {
		t.Fatalf("probe once Redis is back: %v", err)
	}
	// A new dataset: the key starts afresh, the script is not cached.
	if d, err := s.Take(ctx, "k", time.Time{}, 1); err != nil || d.Remaining != 9 {
		t.Fatalf("take once Redis is back: %+v, %v", d, err)
	}
	if n := pooledUses(rc) - before; n != 0 {
		t.Errorf("go-redis's pool was asked for %d connections, want none", n)
	}
	// (Asked on a client of its own: rc's pool may still be refusing.)
	stats := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer stats.Close()
	if m := commandStats(t, stats); m["eval"] != 0 || m["script|load"] != 2 || m["evalsha"] != 4 {
		t.Errorf("after the restart Redis ran %d EVAL, %d SCRIPT LOAD and %d EVALSHA, want 0, 2 (the probe's script and the store's) and 4 (each refused once)",
			m["eval"], m["script|load"], m["evalsha"])
	}
}
