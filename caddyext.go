package ratelimit

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
)

// The configuration of RussellLuo/caddy-ext's rate_limit handler, taken so
// that its configs load unchanged:
//
//	rate_limit [<matcher>] <key> <rate> [<zone_size> [<reject_status>]]
//
// in the Caddyfile, and key, rate, zone_size and reject_status in JSON. It
// becomes one zone, caddyExtZone, over a sliding window (the algorithm
// there) with empty_key allow (a request whose key is empty is not
// limited there either).
const caddyExtZone = "default"

// caddyExtRate is caddy-ext's rate: requests per second or per minute.
var caddyExtRate = regexp.MustCompile(`^([0-9]+)r/([sm])$`)

// caddyExtSet reports whether any of caddy-ext's options is set.
func (h *Handler) caddyExtSet() bool {
	return h.Key != "" || h.Rate != "" || h.ZoneSize != 0 || h.RejectStatus != 0
}

// caddyExtNames names the zones of caddy-ext's one-line form in one
// Caddyfile: caddyExtZone, then caddyExtZone_2, _3, … in the order written,
// so that each such handler counts on its own, as there (one zone name is
// one count for every handler that names it), and keeps its name, and so
// its counts, across a reload of the same Caddyfile. A name that a zone
// block written before it took is skipped, and a zone block written after
// it that takes its name is refused (see explicit): the user did not write
// that name, and could not rename it. The names live in the adaptation's
// state (httpcaddyfile.Helper.State). Named routes are adapted with a
// state of their own, before the sites: theirs are named
// caddyExtZone_route, _route_2, … so as not to take the sites' names.
type caddyExtNames struct {
	state map[string]any
	base  string
}

// State keys: the one-line forms named so far; the names they were given
// (to the line of each); the zone blocks' names.
const (
	stateOneLineCount = "rate_limit.caddy_ext_zones"
	stateOneLineNames = "rate_limit.caddy_ext_names"
	stateZoneNames    = "rate_limit.zone_names"
)

func newCaddyExtNames(state map[string]any, namedRoute bool) *caddyExtNames {
	base := caddyExtZone
	if namedRoute {
		base += "_route"
	}
	return &caddyExtNames{state: state, base: base}
}

// stateMap returns the map of state under key, made if missing.
func stateMap[V any](state map[string]any, key string) map[string]V {
	m, _ := state[key].(map[string]V)
	if m == nil {
		m = make(map[string]V)
		state[key] = m
	}
	return m
}

// next names the zone of the one-line form at line.
func (n *caddyExtNames) next(line int) string {
	if n == nil {
		return caddyExtZone
	}
	taken := stateMap[bool](n.state, stateZoneNames)
	for {
		c, _ := n.state[stateOneLineCount].(int)
		c++
		n.state[stateOneLineCount] = c
		name := n.base
		if c > 1 {
			name = fmt.Sprintf("%s_%d", n.base, c)
		}
		if !taken[name] {
			stateMap[int](n.state, stateOneLineNames)[name] = line
			return name
		}
	}
}

// explicit records the name of a zone block; it fails when a one-line
// form written before it was given that name.
func (n *caddyExtNames) explicit(name string) error {
	if n == nil {
		return nil
	}
	if line, ok := stateMap[int](n.state, stateOneLineNames)[name]; ok {
		return fmt.Errorf("zone name %q is the name given to the zone of the one-line rate_limit at line %d (RussellLuo/caddy-ext's form): name this zone otherwise", name, line)
	}
	stateMap[bool](n.state, stateZoneNames)[name] = true
	return nil
}

// convertCaddyExt turns caddy-ext's options into a zone named name,
// max_keys and status. Errors name the option, as caddy-ext's did.
func (h *Handler) convertCaddyExt(name string) error {
	if !h.caddyExtSet() {
		return nil
	}
	if len(h.Zones) > 0 || len(h.RateLimits) > 0 {
		return errors.New("key and rate (from RussellLuo/caddy-ext) cannot be combined with zones: write the limit as a zone")
	}
	if h.Key == "" {
		return errors.New("key (from RussellLuo/caddy-ext) is missing: the key variable, e.g. {query.id}")
	}
	if h.Rate == "" {
		return errors.New("rate (from RussellLuo/caddy-ext) is missing: <n>r/s or <n>r/m")
	}
	m := caddyExtRate.FindStringSubmatch(h.Rate)
	if m == nil {
		return fmt.Errorf("rate (from RussellLuo/caddy-ext) must be <n>r/s or <n>r/m, got %q", h.Rate)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if errors.Is(err, strconv.ErrRange) || n > maxCount {
		return fmt.Errorf("rate (from RussellLuo/caddy-ext) allows at most %d requests, got %q", maxCount, h.Rate)
	}
	if err != nil || n <= 0 {
		return fmt.Errorf("rate (from RussellLuo/caddy-ext) must allow at least one request, got %q", h.Rate)
	}
	window := time.Second
	if m[2] == "m" {
		window = time.Minute
	}
	z := &Zone{
		Name:      name,
		Algorithm: algorithms.SlidingWindow,
		Limits:    []Limit{{Events: n, Window: caddy.Duration(window)}},
		EmptyKey:  "allow",
	}
	if err := z.setCaddyExtKey(h.Key); err != nil {
		return err
	}
	if h.ZoneSize < 0 {
		return fmt.Errorf("zone_size (from RussellLuo/caddy-ext) must be positive, got %d", h.ZoneSize)
	}
	if h.ZoneSize > 0 {
		h.MaxKeys = h.ZoneSize
	}
	if h.RejectStatus != 0 {
		if err := checkStatus(h.RejectStatus); err != nil {
			return fmt.Errorf("reject_status (from RussellLuo/caddy-ext): %v", err)
		}
		h.Status = h.RejectStatus
	}
	h.Zones = []*Zone{z}
	// Converted once: Validate, which Caddy runs after Provision, sees a
	// zone.
	h.Key, h.Rate, h.ZoneSize, h.RejectStatus = "", "", 0, 0
	return nil
}

// setCaddyExtKey sets z's key from caddy-ext's key variable: a placeholder
// of the request, in Caddy's full form ({http.request.…}) or caddy-ext's
// short one ({query.id}, {header.X}, {remote.host}, …). {remote.ip} is the
// client address as Caddy knows it ({http.request.client_ip}, which trusts
// X-Forwarded-For only from trusted_proxies; caddy-ext trusted it from
// anyone), and the _prefix.<bits> forms group addresses by that many
// leading bits (ipv4_prefix and ipv6_prefix).
func (z *Zone) setCaddyExtKey(v string) error {
	inner, open := strings.CutPrefix(v, "{")
	inner, closed := strings.CutSuffix(inner, "}")
	where, name, dotted := strings.Cut(inner, ".")
	if !open || !closed || !dotted || name == "" {
		return fmt.Errorf("key (from RussellLuo/caddy-ext): invalid key variable %q: want a placeholder such as {query.id}", v)
	}
	if where == "remote" {
		return z.setCaddyExtRemote(v, name)
	}
	if !strings.HasPrefix(inner, "http.request.") {
		full, ok := caddyExtPlaceholders[where]
		if where == "body" {
			return fmt.Errorf("key (from RussellLuo/caddy-ext): %q needs caddy-ext's requestbodyvar handler: with it, write the full placeholder it provides", v)
		}
		if !ok {
			return fmt.Errorf("key (from RussellLuo/caddy-ext): unrecognized key variable %q (want {path.*}, {query.*}, {header.*}, {cookie.*} or {remote.*})", v)
		}
		inner = "http.request." + full + "." + name
	}
	// (The Caddyfile hands the short forms over expanded already.)
	for _, p := range caddyExtPlaceholders {
		rest, ok := strings.CutPrefix(inner, "http.request."+p+".")
		if !ok {
			continue
		}
		// Always empty, and an empty key is not limited: refused, or the
		// zone would never limit. ({path.<name>}, which caddy-ext's own
		// tests take, is warned of when the zone is provisioned.)
		if rest == "" {
			return fmt.Errorf("key (from RussellLuo/caddy-ext): invalid key variable %q: it names no %s", v, p)
		}
	}
	z.Key = "{" + inner + "}"
	return nil
}

// caddyExtPlaceholders maps caddy-ext's short key variables {<where>.<name>}
// (but {remote.*}) to Caddy's {http.request.<full>.<name>}.
var caddyExtPlaceholders = map[string]string{
	"path":   "uri.path",
	"query":  "uri.query",
	"header": "header",
	"cookie": "cookie",
}

// setCaddyExtRemote sets z's key from caddy-ext's {remote.<name>}.
func (z *Zone) setCaddyExtRemote(v, name string) error {
	base, bits, prefixed := strings.Cut(name, "_prefix.")
	switch base {
	case "host", "port":
		z.Key = "{http.request.remote." + base + "}"
	case "ip":
		z.Key = "{http.request.client_ip}"
	default:
		return fmt.Errorf("key (from RussellLuo/caddy-ext): unrecognized key variable %q (want {remote.host}, {remote.port}, {remote.ip} or {remote.host_prefix.<bits>}, {remote.ip_prefix.<bits>})", v)
	}
	if !prefixed {
		return nil
	}
	n, err := strconv.Atoi(bits)
	if base == "port" || err != nil || n < 1 || n > maxIPv6Prefix {
		return fmt.Errorf("key (from RussellLuo/caddy-ext): invalid key variable %q: the prefix is {remote.host_prefix.<bits>} or {remote.ip_prefix.<bits>}, bits from 1 to %d", v, maxIPv6Prefix)
	}
	z.IPv4Prefix, z.IPv6Prefix = min(n, maxIPv4Prefix), n
	return nil
}

// unmarshalCaddyExt reads caddy-ext's one-line form, whose first argument
// d holds:
//
//	rate_limit [<matcher>] <key> <rate> [<zone_size> [<reject_status>]]
func (h *Handler) unmarshalCaddyExt(d *caddyfile.Dispenser, directive caddyfile.Token, names *caddyExtNames) error {
	args := append([]string{d.Val()}, d.RemainingArgs()...)
	if len(args) < 2 || len(args) > 4 {
		what := fmt.Sprintf("argument %q", args[0])
		if len(args) > 1 {
			what = fmt.Sprintf("arguments %q", args)
		}
		return d.Errf("rate_limit: unexpected %s: the configuration goes in a block (rate_limit { zone <name> { ... } }); on the line, only RussellLuo/caddy-ext's form: rate_limit <key> <rate> [<zone_size> [<reject_status>]]", what)
	}
	h.Key, h.Rate = args[0], args[1]
	ints := []struct {
		name string
		to   *int
	}{{"zone_size", &h.ZoneSize}, {"reject_status", &h.RejectStatus}}
	for i, arg := range args[2:] {
		n, err := strconv.Atoi(arg)
		if err != nil {
			return d.Errf("rate_limit: %s must be an integer, got %q", ints[i].name, arg)
		}
		*ints[i].to = n
	}
	if d.NextBlock(d.Nesting()) {
		return errAt(directive, errors.New("rate_limit: the one-line form (rate_limit <key> <rate> ...) takes no block"))
	}
	if err := h.convertCaddyExt(names.next(directive.Line)); err != nil {
		return errAt(directive, err)
	}
	if err := h.Validate(); err != nil {
		return errAtOption(directive, nil, err)
	}
	return nil
}
