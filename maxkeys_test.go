package ratelimit

import (
	"strconv"
	"testing"

	"github.com/zonelimit/caddy-ratelimit/store"
)

// TestDefaultMaxKeysBoundsAFlood sends 80,000 requests, each with a
// distinct value of the header a zone is keyed by (a client flooding a
// header key), through a handler without max_keys: the zone's memory store
// never holds more than the default, store.DefaultMaxKeys (50,000), and the
// newest key kept its count while the oldest was evicted.
func TestDefaultMaxKeysBoundsAFlood(t *testing.T) {
	const flood = 80_000
	h := provision(t, `{"zones":[{"name":"f","key":"{http.request.header.X-Key}",
		"limits":[{"events":2,"window":"1m"}]}]}`, newClock())
	if h.MaxKeys != store.DefaultMaxKeys || store.DefaultMaxKeys != 50_000 {
		t.Fatalf("max_keys %d by default, store default %d, want 50000", h.MaxKeys, store.DefaultMaxKeys)
	}
	m := h.rt.zones[0].store.(*store.Memory)
	for i := range flood {
		if res := serve(h, newReq("192.0.2.1:1", header("X-Key", "k"+strconv.Itoa(i)))); res.code != 200 {
			t.Fatalf("request %d: code %d, want 200", i, res.code)
		}
		if i%10_000 == 0 && m.Len() > store.DefaultMaxKeys {
			t.Fatalf("after %d keys the store holds %d, more than %d", i+1, m.Len(), store.DefaultMaxKeys)
		}
	}
	if got := m.Len(); got != store.DefaultMaxKeys {
		t.Fatalf("after %d distinct keys the store holds %d, want %d", flood, got, store.DefaultMaxKeys)
	}
	newest := "k" + strconv.Itoa(flood-1)
	serve(h, newReq("192.0.2.1:1", header("X-Key", newest)))
	if res := serve(h, newReq("192.0.2.1:1", header("X-Key", newest))); res.code != 429 {
		t.Errorf("newest key, third request: code %d, want 429 (its count kept)", res.code)
	}
	if res := serve(h, newReq("192.0.2.1:1", header("X-Key", "k0"))); res.code != 200 {
		t.Errorf("oldest key, second request: code %d, want 200 (evicted, fresh)", res.code)
	}
	if res := serve(h, newReq("192.0.2.1:1", header("X-Key", "k0"))); res.code != 200 {
		t.Errorf("oldest key, third request: code %d, want 200 (its second since eviction)", res.code)
	}
}
