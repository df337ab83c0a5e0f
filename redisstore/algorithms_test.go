package redisstore

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
)

// TestScriptFacts: an entry of the table that contradicts the registry
// (sync_interval validated by the Summable fact, run by the entry's sync;
// a lease given back by token) is refused with a message that says what to
// set. (The table itself is checked when the package loads.)
func TestScriptFacts(t *testing.T) {
	for _, c := range []struct {
		s    script
		want string
	}{
		{script{name: algorithms.FixedWindow}, "algorithm fixed_window is Summable, but its entry in the table of algorithms has no sync"},
		{script{name: algorithms.GCRA, sync: syncFixed}, "algorithm gcra is not Summable, but its entry in the table of algorithms sets sync"},
		{script{name: "nope", sync: syncFixed}, `unknown algorithm "nope"`},
		{script{name: algorithms.Concurrency}, "algorithm concurrency: Lease is true in the registry but byToken false"},
		{script{name: algorithms.GCRA, byToken: true}, "algorithm gcra: Lease is false in the registry but byToken true"},
	} {
		if err := c.s.checkFacts(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error saying %q", c.s.name, err, c.want)
		}
	}
}

// TestLeaseRefusesByTable: the leasing store refuses an algorithm whose
// entry does not say how to charge it, naming exactly those it takes, and
// CheckLease (which Validate asks) agrees with it.
func TestLeaseRefusesByTable(t *testing.T) {
	c := idleClient(t)
	var taken, refusals []string
	for _, name := range algorithms.Names {
		l := mustLimiter(t, name, oneTier(5, 1e9))
		_, err := newLeaseStore(c, l, Options{Zone: "z"}, LeaseOptions{Duration: 1e9})
		if ok := CheckLease(name, false) == nil; ok != (err == nil) {
			t.Errorf("%s: CheckLease says %v, but the store answers %v", name, ok, err)
		}
		if err == nil {
			taken = append(taken, name)
		} else {
			refusals = append(refusals, err.Error())
		}
	}
	if len(taken) < 2 || len(refusals) == 0 {
		t.Fatalf("takes %v and refuses %d: the table's lease charges are missing", taken, len(refusals))
	}
	cr := oneTier(5, 1e9)
	cr.CountRejected = true
	if _, err := newLeaseStore(c, mustLimiter(t, taken[0], cr), Options{Zone: "z"}, LeaseOptions{Duration: 1e9}); err == nil || !strings.Contains(err.Error(), "count_rejected") {
		t.Errorf("%s with count_rejected: %v, want a refusal naming count_rejected", taken[0], err)
	}
	list := strings.Join(taken[:len(taken)-1], ", ") + " or " + taken[len(taken)-1]
	for _, msg := range refusals {
		if !strings.HasPrefix(msg, "redis lease store: lease works with algorithm "+list+", not ") {
			t.Errorf("refusal %q does not list exactly the algorithms taken (%s)", msg, list)
		}
	}
}

// tierRead matches a read of a tier's constant by name: P[...].x, or p.x
// and o.x (the scripts' names for P[i] and for the constants a tier was
// saved under); tierSet, a field the script sets itself.
var (
	tierRead = regexp.MustCompile(`(?:\bP\[[^\]]*\]|\bp|\bo)\.([A-Za-z_][A-Za-z0-9_]*)`)
	tierSet  = regexp.MustCompile(`\.([A-Za-z_][A-Za-z0-9_]*)\s*=[^=]`)
	luaSaved = regexp.MustCompile(`local SAVED = \{([^}]*)\}`)
)

// unnamed returns the constants src reads from a tier that are not among
// params nor set by src itself, once each.
func unnamed(src string, params []string) []string {
	code := luaComment.ReplaceAllString(src, "")
	known := map[string]bool{}
	for _, p := range params {
		known[p] = true
	}
	for _, m := range tierSet.FindAllStringSubmatch(code, -1) {
		known[m[1]] = true
	}
	var out []string
	for _, m := range tierRead.FindAllStringSubmatch(code, -1) {
		if !known[m[1]] {
			known[m[1]] = true
			out = append(out, m[1])
		}
	}
	return out
}

// TestScriptParams: every script reads its tiers' constants by the names
// its entry gives them (params, which builds P), and the entry's tier
// function returns one constant a name. The constants a bucket's state
// saves (SAVED, compared with ARGV by position in load_params) are the
// first of them. lease.lua reads only the names of the algorithms it
// charges (its branches are not told apart here: the lease tests run each).
func TestScriptParams(t *testing.T) {
	lua := regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	var leased []string
	for _, name := range algorithms.Names {
		s := scripts[name]
		if s == nil {
			t.Errorf("%s: no entry in the table of algorithms", name)
			continue
		}
		seen := map[string]bool{}
		for _, p := range s.params {
			if !lua.MatchString(p) || seen[p] {
				t.Errorf("%s: param %q: not a Lua name, or twice", name, p)
			}
			seen[p] = true
		}
		vs, err := s.tier(algorithms.Tier{Events: 5, Window: time.Second}, 0, 5)
		if err != nil || len(vs) != len(s.params) || len(vs) == 0 {
			t.Errorf("%s: tier returns %v (%v) for params %v", name, vs, err, s.params)
		}
		src, err := scriptText(scriptFS, name, false, generatedFor(name))
		if err != nil {
			t.Fatal(err)
		}
		if u := unnamed(src, s.params); len(u) > 0 {
			t.Errorf("%s.lua reads %v of a tier, which its entry's params %v do not name", name, u, s.params)
		}
		if m := luaSaved.FindStringSubmatch(src); m != nil {
			saved := strings.Fields(strings.NewReplacer("'", " ", ",", " ").Replace(m[1]))
			if len(saved) > len(s.params) || !slices.Equal(saved, s.params[:len(saved)]) {
				t.Errorf("%s.lua saves %v, not the first of its params %v", name, saved, s.params)
			}
		}
		if s.lease != leaseNone {
			leased = append(leased, s.params...)
		}
	}
	src, err := scriptText(scriptFS, "lease", false, generatedFor("lease"))
	if err != nil {
		t.Fatal(err)
	}
	if u := unnamed(src, leased); len(u) > 0 {
		t.Errorf("lease.lua reads %v of a tier, which no leasing algorithm's params name", u)
	}

	// A name the entry does not give is found.
	fw := mustRead(t, "fixed_window.lua")
	if u := unnamed(strings.Replace(fw, "p.E", "p.events", 1), eventsWindowParams); !slices.Equal(u, []string{"events"}) {
		t.Errorf("a renamed constant: unnamed says %v", u)
	}
}
