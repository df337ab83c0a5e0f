package ratelimit

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
	"github.com/zonelimit/caddy-ratelimit/internal/storetest"
)

// statusOf is the status Caddy answers res with: a handler error's own, or
// 500 for an error without one.
func statusOf(res result) int {
	if res.err == nil {
		return res.code
	}
	var he caddyhttp.HandlerError
	if errors.As(res.err, &he) && he.StatusCode != 0 {
		return he.StatusCode
	}
	return 500
}

// TestHandlerClusterSlotMoveAndFailover: requests served by 32 goroutines
// while the slot of their key moves to another master a key at a time,
// then while its master fails over to its replica. Whatever Redis
// answers meanwhile, on_error open answers 200 or 429 and closed 200, 429
// or 503: never a 500.
func TestHandlerClusterSlotMoveAndFailover(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 1)
	addrs := `"` + strings.Join(cl.Addrs, `","`) + `"`
	for _, onError := range []string{"open", "closed"} {
		t.Run(onError, func(t *testing.T) {
			h := provision(t, fmt.Sprintf(`{"store":"redis","on_error":%q,"redis":{"addresses":[%s],"key_prefix":"rlh-%s:"},
				"zones":[{"name":"api","key":"{http.request.remote.host}","limits":[{"events":2000,"window":"1h"}]}]}`, onError, addrs, onError), nil)
			allowed := map[int]bool{200: true, 429: true}
			if onError == "closed" {
				allowed[503] = true
			}
			const host = "192.0.2.7"
			var (
				mu       sync.Mutex
				statuses = map[int]int{}
				calls    atomic.Int64
				stop     atomic.Bool
				wg       sync.WaitGroup
			)
			for range 32 {
				wg.Go(func() {
					for !stop.Load() {
						code := statusOf(serve(h, newReq(host+":1")))
						mu.Lock()
						statuses[code]++
						mu.Unlock()
						calls.Add(1)
					}
				})
			}
			progress := func() {
				from := calls.Load()
				storetest.WaitFor(t, "requests to go on", func() bool { return calls.Load() >= from+32 })
			}
			// The key's slot: the one its block key's hash tag is in.
			slot := -1
			for _, k := range []string{"{" + host + "}"} {
				v, err := redistest.Do(cl.Addrs[0], "CLUSTER", "KEYSLOT", k)
				if err != nil {
					t.Fatal(err)
				}
				fmt.Sscan(v, &slot)
			}
			progress()
			m := cl.BeginMigration(t, slot, cl.OtherMaster(t, slot))
			for m.Move(1) > 0 {
				progress()
			}
			progress()
			m.Finish()
			progress()
			cl.Failover(t, redistest.ReplicaOf(t, redistest.SlotMaster(t, m.To(), slot)))
			progress()
			stop.Store(true)
			wg.Wait()
			t.Logf("statuses: %v", statuses)
			// Redis decides again once the slot map settled (the breaker,
			// if it opened, closes at its next probe).
			storetest.WaitFor(t, "a decision by Redis", func() bool {
				res := serve(h, newReq(host+":1"))
				return res.hdr.Get("X-RateLimit-Remaining") != ""
			})
			for code, n := range statuses {
				if !allowed[code] {
					t.Errorf("%d requests answered %d", n, code)
				}
			}
		})
	}
}
