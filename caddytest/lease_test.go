package integration

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/internal/caddytesting"
	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
)

// leaseSites is exactSites with lease: three handlers with clients of their
// own (three instances) leasing one key of each algorithm from the Redis at
// addr. Windows are an hour: the run sits in one.
func leaseSites(addr string) string {
	var b strings.Builder
	for i, host := range exactHosts {
		fmt.Fprintf(&b, "http://%s {\n\trate_limit {\n", host)
		for _, alg := range []string{"sliding_log", "sliding_window", "fixed_window", "token_bucket", "gcra"} {
			fmt.Fprintf(&b, "\t\tzone lease_%s {\n\t\t\tmatch {\n\t\t\t\tpath /%s\n\t\t\t}\n\t\t\tkey shared\n\t\t\talgorithm %s\n\t\t\tlimit 300 1h\n\t\t}\n",
				alg, alg, alg)
		}
		fmt.Fprintf(&b, "\t\tstore redis\n%s\t\tlease 1s\n\t\ton_error closed\n\t}\n",
			caddytesting.RedisBlock(addr, fmt.Sprintf("pool_size %d", 8+i)))
		b.WriteString("\trespond \"ok\"\n}\n")
	}
	return b.String()
}

// TestRedisLeaseThreeInstances: three instances leasing one key under
// concurrent load admit at most the limit together (a bucket refills less
// than a unit in the run), at least 90% of it, and call Redis far less than
// once per request.
func TestRedisLeaseThreeInstances(t *testing.T) {
	const (
		limit    = 300
		requests = 1200
		clients  = 16
	)
	srv := redistest.Start(t)
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rc.Close()
	live.LoadSites(t, leaseSites(srv.Addr))
	c := loadClient(t)
	for _, alg := range []string{"sliding_log", "sliding_window", "fixed_window", "token_bucket", "gcra"} {
		t.Run(alg, func(t *testing.T) {
			before := evalCalls(t, rc)
			hits := burst(c, clients, requests, "/"+alg)
			calls := evalCalls(t, rc) - before
			got := codes(hits)
			t.Logf("%v, %d script calls for %d requests", got, calls, requests)
			if got[200]+got[429] != requests {
				t.Fatalf("codes %v (first error: %s): want only 200 and 429", got, firstError(hits))
			}
			if got[200] > limit {
				t.Fatalf("%d admitted, limit %d", got[200], limit)
			}
			if got[200] < limit*9/10 {
				t.Fatalf("%d admitted, want at least 90%% of %d", got[200], limit)
			}
			if calls >= requests/2 {
				t.Fatalf("%d script calls for %d requests on one hot key", calls, requests)
			}
		})
	}
}

// evalCalls is how many EVALSHA and EVAL Redis ran so far (INFO
// commandstats).
func evalCalls(t *testing.T, c *redis.Client) int {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "cmdstat_evalsha:calls=") && !strings.HasPrefix(line, "cmdstat_eval:calls=") {
			continue
		}
		v, _, _ := strings.Cut(line[strings.Index(line, "=")+1:], ",")
		k, _ := strconv.Atoi(v)
		n += k
	}
	return n
}
