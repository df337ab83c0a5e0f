package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// algorithms are the rate algorithms the harness measures, with how each
// counts its limit. concurrency is not among them: it bounds requests in
// flight, not a rate, and a site that answers at once never has more than a
// few in flight.
var algorithms = []struct {
	name string
	kind Kind
}{
	{"sliding_log", Rolling},
	{"sliding_window", Rolling},
	{"fixed_window", Aligned},
	{"token_bucket", Bucket},
	{"leaky_bucket", Bucket},
	{"gcra", Bucket},
}

// mode is how a site's rate_limit keeps its state.
type mode struct {
	name string
	// instances is how many Caddy instances the load is spread over: the
	// memory store is one instance's limit, the Redis modes a fleet's.
	instances int
	// options are the rate_limit handler's options for this mode.
	options string
	// algorithms, when not nil, are the only algorithms the mode supports.
	algorithms []string
	// skip, when set, says why the mode is not measured.
	skip string
}

// config is what the Caddyfile and the runs are built from.
type config struct {
	events       int
	window       time.Duration
	redis        string // host:port of the shared redis-server
	syncInterval time.Duration
	leased       string // the handler option(s) of the leased mode; "" if the store has none
}

func (c config) modes() []mode {
	// on_error closed: a Redis failure is a 503, counted as an error,
	// never an admission.
	strict := c.redisOptions() + "\non_error closed"
	leased := mode{
		name: "leased", instances: 3, options: strict + "\n" + c.leased,
		// leaky_bucket spaces admissions in time, which a batch of
		// units taken ahead cannot.
		algorithms: []string{"sliding_log", "sliding_window", "fixed_window", "token_bucket", "gcra"},
	}
	if c.leased == "" {
		leased.skip = "this build's Redis store has no leased mode (no lease option)"
	}
	return []mode{
		{name: "memory", instances: 1},
		{name: "redis", instances: 3, options: strict},
		{
			name: "sync", instances: 3,
			options:    fmt.Sprintf("%s\nsync_interval %s", c.redisOptions(), c.syncInterval),
			algorithms: []string{"fixed_window", "sliding_window"},
		},
		leased,
	}
}

// redisOptions point a handler at the shared redis-server. The timeouts
// are four times the defaults: on a loaded machine a reply can take longer
// than 250 ms, and a failure is not what the harness measures (it still
// counts failures, as errors).
func (c config) redisOptions() string {
	return "store redis\nredis {\naddress " + c.redis + "\nread_timeout 1s\nwrite_timeout 1s\n}"
}

// supports reports whether m can run alg, and if not why.
func (m mode) supports(alg string) (bool, string) {
	if m.skip != "" {
		return false, m.skip
	}
	if m.algorithms != nil && !slices.Contains(m.algorithms, alg) {
		return false, fmt.Sprintf("%s works with %s only", m.name, strings.Join(m.algorithms, ", "))
	}
	return true, ""
}

// path is the route of one algorithm in one mode.
func path(alg string, m mode) string { return "/" + alg + "/" + m.name }

// caddyfile is one instance's config: a site on port with one route per
// algorithm and mode, each its own zone keyed by the X-Case header (a
// fresh key per run, so runs do not share state). Every response carries
// the instant Caddy received it (X-Accuracy-Time, Unix milliseconds), so
// admissions are binned by the server's clock, not by when the load
// generator got round to sending.
func (c config) caddyfile(port int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "{\n\tadmin off\n\tauto_https off\n\tpersist_config off\n\tskip_install_trust\n}\n\n")
	fmt.Fprintf(&b, "http://127.0.0.1:%d {\n\tbind 127.0.0.1\n\theader X-Accuracy-Time {time.now.unix_ms}\n", port)
	for _, m := range c.modes() {
		for _, a := range algorithms {
			if ok, _ := m.supports(a.name); !ok {
				continue
			}
			fmt.Fprintf(&b, "\thandle %s {\n\t\trate_limit {\n", path(a.name, m))
			fmt.Fprintf(&b, "\t\t\tzone %s_%s {\n", a.name, m.name)
			fmt.Fprintf(&b, "\t\t\t\tkey {http.request.header.X-Case}\n\t\t\t\talgorithm %s\n", a.name)
			fmt.Fprintf(&b, "\t\t\t\tlimit %d %s\n\t\t\t}\n", c.events, c.window)
			for _, o := range strings.Split(m.options, "\n") {
				if o != "" {
					fmt.Fprintf(&b, "\t\t\t%s\n", o)
				}
			}
			fmt.Fprintf(&b, "\t\t\theaders off\n\t\t}\n\t\trespond \"ok\"\n\t}\n")
		}
	}
	fmt.Fprintf(&b, "}\n")
	return b.String()
}
