package redistest

import (
	"strconv"
	"strings"
	"testing"
)

// Fill fills the Redis at addr up to a maxmemory with noeviction, so that
// it refuses writes (OOM), with keys of hash tag tag (a Cluster node takes
// only the keys of its slots). CONFIG SET maxmemory 0 makes it take writes
// again.
func Fill(tb testing.TB, addr, tag string) {
	tb.Helper()
	must := func(args ...string) string {
		tb.Helper()
		v, err := Do(addr, args...)
		if err != nil {
			tb.Fatalf("%v: %v", args, err)
		}
		return v
	}
	used := func() int64 {
		tb.Helper()
		for _, line := range strings.Split(must("INFO", "memory"), "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					tb.Fatal(err)
				}
				return n
			}
		}
		tb.Fatal("no used_memory in INFO")
		return 0
	}
	must("CONFIG", "SET", "maxmemory-policy", "noeviction")
	must("CONFIG", "SET", "maxmemory", strconv.FormatInt(used()+4<<20, 10))
	value := strings.Repeat("x", 64<<10)
	for i := 0; ; i++ {
		if _, err := Do(addr, "SET", "fill:"+tag+strconv.Itoa(i), value); err != nil {
			if !strings.HasPrefix(err.Error(), "OOM") {
				tb.Fatal(err)
			}
			break
		}
		if i > 1000 {
			tb.Fatal("Redis never full")
		}
	}
	// Refused a 64 KiB value, it may still take a small one: full to the
	// last byte, as a Redis filled by small keys over time.
	must("CONFIG", "SET", "maxmemory", strconv.FormatInt(used()-1<<20, 10))
}
