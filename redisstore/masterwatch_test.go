package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
)

// After a graceful failover (SENTINEL FAILOVER), which leaves the old
// master up and taking writes until Sentinel demotes it, the decisions go
// to the new master at once, not to the old one, whose writes are lost.
func TestSentinelGracefulFailoverMovesDecisions(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: no failover")
	}
	st := redistest.StartSentinel(t, 1, 1)
	c := NewClient(&redis.UniversalOptions{
		MasterName:   st.MasterName,
		Addrs:        st.SentinelAddrs,
		DialTimeout:  2 * time.Second,
		ReadTimeout:  2 * time.Second,
		WriteTimeout: 2 * time.Second,
		MaxRetries:   -1,
	}, ClientOptions{KeyPrefix: "rltest:"})
	defer c.Destruct()
	s, err := NewStore(c, mustLimiter(t, algorithms.FixedWindow, oneTier(1_000_000, time.Hour)),
		Options{KeyPrefix: "rltest:", Zone: "graceful", Pipeliner: c.Pipeliner()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.Take(ctx, "k", t0, 1); err != nil {
		t.Fatal(err)
	}
	replica := redis.NewClient(&redis.Options{Addr: st.Replicas[0].Addr})
	defer replica.Close()
	// count is the keys of the replica (the new master after the
	// failover) and their values.
	count := func() string {
		keys, err := replica.Keys(ctx, "rltest:*").Result()
		if err != nil || len(keys) == 0 {
			return ""
		}
		var all string
		for _, k := range keys {
			v, _ := replica.Dump(ctx, k).Result()
			all += k + "=" + v + ";"
		}
		return all
	}
	for i := 0; count() == ""; i++ { // replicated
		if i == 100 {
			t.Fatal("the replica never had the key")
		}
		time.Sleep(50 * time.Millisecond)
	}

	sentinel := redis.NewSentinelClient(&redis.Options{Addr: st.SentinelAddrs[0]})
	defer sentinel.Close()
	// NOGOODSLAVE until the sentinel has found the replica (in the
	// master's INFO, which it reads every few seconds).
	for deadline := time.Now().Add(30 * time.Second); ; {
		err := sentinel.Failover(ctx, st.MasterName).Err()
		if err == nil {
			break
		}
		if !redis.HasErrorPrefix(err, "NOGOODSLAVE") || time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	want := st.Replicas[0].Addr
	for deadline := time.Now().Add(30 * time.Second); ; {
		if a, err := sentinel.GetMasterAddrByName(ctx, st.MasterName).Result(); err == nil && len(a) == 2 && a[0]+":"+a[1] == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the sentinel never promoted the replica")
		}
		time.Sleep(20 * time.Millisecond)
	}
	before := count()
	// The old master takes writes for seconds still (until Sentinel
	// demotes it); the decisions must reach the new one well before.
	for deadline := time.Now().Add(5 * time.Second); count() == before; {
		if time.Now().After(deadline) {
			t.Fatal("5 s after the switch, decisions still do not reach the new master")
		}
		s.Take(ctx, "k", t0, 1) // errors while the connection moves are fine
		time.Sleep(20 * time.Millisecond)
	}
}
