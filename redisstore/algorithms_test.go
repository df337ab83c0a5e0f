package redisstore

import (
	"strings"
	"testing"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
)

// TestScriptFacts: an entry of the table that contradicts the registry
// (sync_interval validated by the Summable fact, run by the entry's sync)
// is refused with a message that says what to set.
func TestScriptFacts(t *testing.T) {
	for _, s := range scripts {
		if err := s.checkFacts(); err != nil {
			t.Errorf("%s: %v", s.name, err)
		}
	}
	for _, c := range []struct {
		s    script
		want string
	}{
		{script{name: algorithms.FixedWindow}, "algorithm fixed_window is Summable, but its entry in the table of algorithms has no sync"},
		{script{name: algorithms.GCRA, sync: syncFixed}, "algorithm gcra is not Summable, but its entry in the table of algorithms sets sync"},
		{script{name: "nope", sync: syncFixed}, `unknown algorithm "nope"`},
	} {
		if err := c.s.checkFacts(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error saying %q", c.s.name, err, c.want)
		}
	}
}

// TestLeaseRefusesByTable: the leasing store takes the algorithms whose
// entry says how to charge them, and names them all when it refuses one.
func TestLeaseRefusesByTable(t *testing.T) {
	c := idleClient(t)
	for _, name := range algorithms.Names {
		l := mustLimiter(t, name, oneTier(5, 1e9))
		_, err := newLeaseStore(c, l, Options{Zone: "z"}, LeaseOptions{Duration: 1e9})
		ok, all := Leasable(name)
		if all != "sliding_log, sliding_window, fixed_window, token_bucket or gcra" {
			t.Errorf("Leasable lists %q", all)
		}
		if ok != (scripts[name].lease != leaseNone) {
			t.Errorf("%s: Leasable %v", name, ok)
		}
		want := `lease works with algorithm ` + all + `, not "` + name + `"`
		switch {
		case ok && err != nil:
			t.Errorf("%s: refused: %v", name, err)
		case !ok && (err == nil || err.Error() != want):
			t.Errorf("%s: error %v, want %q", name, err, want)
		}
	}
}
