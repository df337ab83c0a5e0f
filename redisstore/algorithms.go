package redisstore

import (
	"embed"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
)

//go:embed *.lua
var scriptFS embed.FS

// script is what Redis runs for the algorithm: lib.lua followed by the
// algorithm's file.
type script struct {
	// name is the algorithm's name; its file is name + ".lua".
	name string

	// short names the algorithm in its keys: "<...>:<short>:<digest>".
	short string

	// parts returns the suffixes of the algorithm's keys after the digest,
	// in the order of the script's KEYS, for n tiers.
	parts func(n int) []string

	// layout names the layout of the state key when it is not the first
	// one, so that a changed layout gets new key names (through the config
	// digest): instances of the old and the new version then never read
	// each other's state (a WRONGTYPE, or a misread count) while an upgrade
	// rolls out. "s": one string of integers (load_state in lib.lua), which
	// replaced a hash. "o": sliding_log's runs scored by offset (the k-th
	// unit in O(log n)), which replaced runs scored by timestamp. "p": the
	// buckets' and gcra's string with the constants each tier was saved
	// under (load_params), to convert a level when the limits change.
	layout string

	// member: the script wants a unique member in ARGV[5] (sliding_log).
	member bool

	// byToken: an Undo gives back the lease of Decision.Token
	// (concurrency), not cost units.
	byToken bool

	// lease is how the leasing store (lease.lua) charges the algorithm's
	// units: leaseNone (lease refuses it), leaseWindow or leaseBucket.
	lease leaseCharge

	// sync is how the two-layer store (sync_interval) counts the
	// algorithm's units: syncNone for one it does not, which is every
	// algorithm that is not algorithms.Summable (checkFacts, at init).
	sync syncCount

	// params names the constants of one tier, in the order tier returns
	// them: the script reads tier i's as the fields of P[i], which
	// "--@insert params" builds (paramsSnippet), and lease.lua reads them
	// by the same names (leaseParamsSnippet).
	params []string

	// tier returns the script's constants of one tier (ARGV[8..], see the
	// script's header), or why the tier cannot be computed exactly: burst
	// is the Config's, capacity the tier's algorithms.Capacity.
	tier func(t algorithms.Tier, burst, capacity int64) ([]int64, error)

	run *redis.Script
}

// leaseCharge is how a lease charges an algorithm's units in Redis.
type leaseCharge uint8

const (
	leaseNone   leaseCharge = iota
	leaseWindow             // units counted in the windows the lease spans
	leaseBucket             // tokens lent within burst - rate x the lease's life
)

// syncCount is how the two-layer store counts an algorithm's units: per
// tier in windows aligned to the Unix epoch (sync_take.go).
type syncCount uint8

const (
	syncNone    syncCount = iota
	syncFixed             // the current window's count
	syncSliding           // and the previous one's, weighted by its overlap
)

func onePart(int) []string { return []string{""} }

// eventsWindow: the constants of the window algorithms and concurrency,
// named eventsWindowParams.
var eventsWindowParams = []string{"E", "W"}

func eventsWindow(t algorithms.Tier, _, _ int64) ([]int64, error) {
	return []int64{t.Events, t.Window.Microseconds()}, nil
}

// scripts is the Redis side of every algorithm, by name.
var scripts = loadScripts([]*script{
	{name: algorithms.SlidingLog, short: "sl", layout: "o", member: true, lease: leaseWindow, params: eventsWindowParams, tier: eventsWindow,
		parts: func(n int) []string {
			p := []string{":m"} // the offsets; then each tier's runs
			for i := range n {
				p = append(p, ":"+strconv.Itoa(i))
			}
			return p
		}},
	{name: algorithms.SlidingWindow, short: "sw", layout: "s", parts: onePart, lease: leaseWindow, sync: syncSliding, params: eventsWindowParams, tier: eventsWindow},
	{name: algorithms.FixedWindow, short: "fw", layout: "s", parts: onePart, lease: leaseWindow, sync: syncFixed, params: eventsWindowParams, tier: eventsWindow},
	{name: algorithms.TokenBucket, short: "tb", layout: "p", parts: onePart, lease: leaseBucket, params: bucketTierParams, tier: bucketTier},
	{name: algorithms.LeakyBucket, short: "lb", layout: "p", parts: onePart, params: bucketTierParams, tier: bucketTier},
	{name: algorithms.GCRA, short: "gcra", layout: "p", parts: onePart, lease: leaseBucket,
		params: []string{"iv", "tau", "burst", "window"},
		tier: func(t algorithms.Tier, burst, capacity int64) ([]int64, error) {
			iv, tau, err := algorithms.GCRAParams(t, burst)
			return []int64{iv, tau, capacity, t.Window.Microseconds()}, err
		}},
	{name: algorithms.Concurrency, short: "cc", byToken: true, params: eventsWindowParams, tier: eventsWindow,
		parts: func(int) []string { return []string{"", ":l"} }}, // the hash, the leases
})

// bucketTier: the constants of token_bucket and leaky_bucket, named
// bucketTierParams, from algorithms.BucketParams so that both twins use the
// same.
var bucketTierParams = []string{"rate", "scale", "cap", "burst", "window"}

func bucketTier(t algorithms.Tier, burst, capacity int64) ([]int64, error) {
	rate, scale, subUnits, err := algorithms.BucketParams(t, burst)
	return []int64{rate, scale, subUnits, capacity, t.Window.Microseconds()}, err
}

func loadScripts(all []*script) map[string]*script {
	m := make(map[string]*script, len(all))
	for _, s := range all {
		if err := s.checkFacts(); err != nil {
			panic("redisstore: " + err.Error())
		}
		s.run = newScript(s.name, true, map[string]string{paramsSnippetName: paramsSnippet(s.params)})
		m[s.name] = s
	}
	return m
}

// paramsSnippet is the snippet params of a script whose tiers have the
// constants names: P[i] holds tier i's by name, read from ARGV[8..] (tier
// after tier), each table built by one constructor: sized once, where a
// table filled a field at a time grows as it goes.
func paramsSnippet(names []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "local P = {}\nfor i = 1, N do\n  local o = %d + %d * i\n  P[i] = {", 7-len(names), len(names))
	for j, n := range names {
		if j > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s = ARGV[o + %d] + 0", n, j+1)
	}
	b.WriteString("}\nend\n")
	return b.String()
}

// leaseParamsSnippet is the snippet lease_params of lease.lua: the names
// of the tier constants of every algorithm a lease charges, by algorithm
// (lease.lua reads a call's tiers with tier_params(names[ALG])).
func leaseParamsSnippet(all map[string]*script) string {
	var b strings.Builder
	b.WriteString("local names = {")
	for _, name := range slices.Sorted(maps.Keys(all)) {
		if s := all[name]; s.lease != leaseNone {
			fmt.Fprintf(&b, "\n  ['%s'] = {'%s'},", name, strings.Join(s.params, "', '"))
		}
	}
	b.WriteString("\n}\n")
	return b.String()
}

// checkFacts reports where s contradicts the registry's facts about its
// algorithm. Validate refuses sync_interval by the Summable fact and the
// two-layer store takes what s.sync says: an algorithm made Summable
// without a way to count it would pass Validate and fail at provision.
func (s *script) checkFacts() error {
	a, err := algorithms.Lookup(s.name)
	if err != nil {
		return err
	}
	switch {
	case a.Summable && s.sync == syncNone:
		return fmt.Errorf("algorithm %s is Summable, but its entry in the table of algorithms has no sync: the two-layer store (sync_interval) would not know how to count it", s.name)
	case !a.Summable && s.sync != syncNone:
		return fmt.Errorf("algorithm %s is not Summable, but its entry in the table of algorithms sets sync: Validate refuses sync_interval for it", s.name)
	case a.Lease != s.byToken:
		return fmt.Errorf("algorithm %s: Lease is %v in the registry but byToken %v in the table of algorithms: an Undo would give back the wrong thing", s.name, a.Lease, s.byToken)
	}
	return nil
}

// newScript is the embedded script name.lua (scriptText) with the
// snippets gen. A script that does not build is a broken build: it panics.
func newScript(name string, withLibLua bool, gen map[string]string) *redis.Script {
	src, err := scriptText(scriptFS, name, withLibLua, gen)
	if err != nil {
		panic(fmt.Sprintf("redisstore: script %s: %v", name, err))
	}
	return redis.NewScript(src)
}

// scriptText is the text Redis runs for the script name.lua of fsys: its
// snippets inserted (expandSnippets), those of snippets.lua and those gen
// holds (written by the table of algorithms, each of which the script must
// insert), after the functions of lib.lua it uses (withLib) when
// withLibLua is set.
func scriptText(fsys fs.FS, name string, withLibLua bool, gen map[string]string) (string, error) {
	src, err := fs.ReadFile(fsys, name+".lua")
	if err != nil {
		return "", err
	}
	snips, err := fs.ReadFile(fsys, snippetsFile)
	if err != nil {
		return "", err
	}
	m, err := parseSnippets(string(snips))
	if err != nil {
		return "", err
	}
	used := insertsOf(string(src))
	for _, g := range slices.Sorted(maps.Keys(gen)) {
		if _, dup := m[g]; dup {
			return "", fmt.Errorf("%s: snippet %s is written by the table of algorithms", snippetsFile, g)
		}
		if !slices.Contains(used, g) {
			return "", fmt.Errorf("%s.lua: no --@insert %s", name, g)
		}
		m[g] = gen[g]
	}
	text, err := expandSnippets(m, name+".lua", string(src))
	if err != nil || !withLibLua {
		return text, err
	}
	lib, err := fs.ReadFile(fsys, "lib.lua")
	if err != nil {
		return "", err
	}
	return withLib(string(lib), text), nil
}

// The snippets are checked once, whichever scripts are built: one inserted
// nowhere is as broken as one that does not exist.
func init() {
	if err := checkSnippets(scriptFS); err != nil {
		panic("redisstore: " + err.Error())
	}
}
