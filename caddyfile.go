package ratelimit

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("rate_limit", parseCaddyfile)
	httpcaddyfile.RegisterDirectiveOrder("rate_limit", httpcaddyfile.Before, "basic_auth")
}

// parseCaddyfile sets up the handler from Caddyfile tokens.
func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	handler := new(Handler)
	if err := handler.unmarshalCaddyfile(h.Dispenser, newCaddyExtNames(h.State, h.IsNamedRoute())); err != nil {
		return nil, err
	}
	return handler, nil
}

// Subdirectives of a rate_limit block and of a zone block, for error
// messages.
var (
	handlerSubdirectives = []string{"zone", "store", "redis", "sync_interval", "lease", "on_error", "headers", "status", "problem_details", "dry_run", "jitter", "sweep_interval", "max_keys", "log_keys", "disable_metrics"}
	zoneSubdirectives    = []string{"match", "key", "algorithm", "limit", "events", "window", "max_concurrent", "burst", "cost", "on_limit", "max_waiters", "count_rejected", "count_status", "block_for", "ipv4_prefix", "ipv6_prefix", "empty_key"}
)

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens. Syntax:
//
//	rate_limit [<matcher>] {
//	    zone <name> {
//	        match { <request matchers> }
//	        key       <placeholder template>    (none: one count for all requests)
//	        algorithm sliding_log | sliding_window | fixed_window | token_bucket | leaky_bucket | gcra | concurrency
//	        limit     <events> <window>
//	        events    <n>
//	        window    <duration>
//	        max_concurrent <n>
//	        burst     <n>
//	        cost      <n | placeholder>
//	        on_limit  reject | wait <max_wait>
//	        max_waiters <n>
//	        count_rejected
//	        count_status <code | class (4xx)>...
//	        block_for <duration>
//	        ipv4_prefix <bits>
//	        ipv6_prefix <bits>
//	        empty_key allow | deny | global
//	    }
//	    store          memory | redis
//	    redis {
//	        address  <host:port>...
//	        url      redis[s]://[user:password@]host:port[/db]
//	        sentinel <master> <host:port>...
//	        cluster
//	        username <name>
//	        password <password>
//	        db       <n>
//	        tls      [insecure_skip_verify] [ca_file <path>] [server_name <name>]
//	        key_prefix    <prefix>
//	        dial_timeout  <duration>
//	        read_timeout  <duration>
//	        write_timeout <duration>
//	        pool_size     <n>
//	    }
//	    sync_interval  <duration>
//	    lease          <duration>
//	    on_error       open | closed | local
//	    log_keys
//	    headers        ietf | legacy | both | off
//	    status         <code>
//	    problem_details
//	    dry_run
//	    jitter         <fraction>
//	    sweep_interval <duration>
//	    max_keys       <n>
//	    disable_metrics
//	}
//
// limit may be repeated for several tiers; events and window are the
// single-tier shorthand of mholt/caddy-ratelimit and cannot be mixed with
// limit. match may be repeated: a request counts in the zone when it
// matches any of the match blocks. Options left out stay out of the JSON;
// Provision fills in their defaults.
//
// RussellLuo/caddy-ext's one-line form is taken too (see caddyext.go):
//
//	rate_limit [<matcher>] <key> <rate> [<zone_size> [<reject_status>]]
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	return h.unmarshalCaddyfile(d, nil)
}

// unmarshalCaddyfile is UnmarshalCaddyfile with the zone names of the
// Caddyfile's adaptation so far (see caddyExtNames; nil: caddyExtZone
// for the one-line form's zone, and no check).
func (h *Handler) unmarshalCaddyfile(d *caddyfile.Dispenser, names *caddyExtNames) error {
	d.Next() // consume directive name
	directive := d.Token()
	if d.NextArg() {
		return h.unmarshalCaddyExt(d, directive, names)
	}

	zoneLines := make(map[string]int)
	seen := make(map[string]int)
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		sub := d.Val()
		if sub != "zone" {
			name := sub
			if name == "log_key" { // mholt/caddy-ratelimit's name for it
				name = "log_keys"
			}
			if line, dup := seen[name]; dup {
				return d.Errf("%s already specified (at line %d)", name, line)
			}
			seen[name] = d.Line()
		}
		var err error
		switch sub {
		case "zone":
			err = h.unmarshalZone(d, zoneLines, names)

		case "store":
			h.Store, err = oneArg(d, "store", storeEnum.usage())

		case "redis":
			h.Redis, err = unmarshalRedis(d)

		case "sync_interval":
			var dur time.Duration
			dur, err = setDurationArg(d, "sync_interval")
			h.SyncInterval = caddy.Duration(dur)

		case "lease":
			var dur time.Duration
			dur, err = setDurationArg(d, "lease")
			h.Lease = caddy.Duration(dur)

		case "on_error":
			h.OnError, err = oneArg(d, "on_error", onErrorEnum.usage())

		case "log_keys", "log_key":
			err = noArgs(d, sub)
			h.LogKeys = true

		case "headers":
			h.Headers, err = oneArg(d, "headers", headersEnum.usage())

		case "status":
			var v string
			if v, err = oneArg(d, "status", "<code>"); err == nil {
				var n int
				if n, err = strconv.Atoi(v); err != nil {
					err = d.Errf("status must be an HTTP status code, got %q", v)
				} else if n == 0 {
					err = d.WrapErr(checkStatus(n)) // 0 would mean the default
				}
				h.Status = n
			}

		case "dry_run":
			err = noArgs(d, "dry_run")
			h.DryRun = true

		case "problem_details":
			err = noArgs(d, "problem_details")
			h.ProblemDetails = true

		case "jitter":
			var v string
			if v, err = oneArg(d, "jitter", "<fraction>"); err == nil {
				var f float64
				if f, err = strconv.ParseFloat(v, 64); err != nil {
					err = d.Errf("jitter must be a non-negative fraction (e.g. 0.2: up to 20%% more), got %q", v)
				}
				h.Jitter = f
			}

		case "sweep_interval":
			var dur time.Duration
			dur, err = setDurationArg(d, "sweep_interval")
			h.SweepInterval = caddy.Duration(dur)

		case "max_keys":
			var n int64
			if n, err = positiveIntArg(d, "max_keys"); err == nil {
				if n > int64(maxInt) {
					err = d.Errf("max_keys is too large: %d", n)
				}
				h.MaxKeys = int(n)
			}

		case "disable_metrics":
			err = noArgs(d, "disable_metrics")
			h.DisableMetrics = true

		case "distributed", "storage":
			err = d.Errf("%s (from mholt/caddy-ratelimit) is not supported: "+distributedInstead, sub)

		default:
			err = d.Errf("unknown subdirective %q in rate_limit (want one of %s)%s", sub, strings.Join(handlerSubdirectives, ", "), elsewhere(sub))
		}
		if err != nil {
			return err
		}
	}

	if len(h.Zones) == 0 {
		return errAt(directive, errors.New("rate_limit: no zones: at least one zone <name> { key ...; limit ... } is required"))
	}
	// The handler's options, reported at the line of the one at fault.
	if err := h.validateOptions(); err != nil {
		return errAtOption(directive, seen, err)
	}
	return nil
}

// errAtOption is errAt for the error of a check: at the line of the
// option it names (lines: option → line), if there is one, else at tok;
// without the hint a zoneError adds for JSON.
func errAtOption(tok caddyfile.Token, lines map[string]int, err error) error {
	var oe *zoneError
	if errors.As(err, &oe) {
		found := false
		for _, o := range append([]string{oe.option}, oe.also...) {
			if line, ok := lines[o]; ok && (!found || line > tok.Line) {
				tok.Line, found = line, true
			}
		}
		err = oe.err
	}
	return errAt(tok, err)
}

// elsewhere names the block that takes subdirective sub, for one written
// in another block.
func elsewhere(sub string) string {
	for _, b := range []struct {
		name string
		subs []string
	}{{"a zone block (zone <name> { ... })", zoneSubdirectives}, {"the rate_limit block", handlerSubdirectives}, {"the redis block", redisSubdirectives}} {
		if slices.Contains(b.subs, sub) {
			return fmt.Sprintf(": %s goes in %s", sub, b.name)
		}
	}
	return ""
}

// oneArg reads exactly one argument of subdirective name, and no block.
func oneArg(d *caddyfile.Dispenser, name, usage string) (string, error) {
	args := d.RemainingArgs()
	if len(args) != 1 {
		return "", d.Errf("%s takes exactly one argument, %s, got %d", name, usage, len(args))
	}
	if args[0] == "" {
		return "", d.WrapErr(errEmpty(name))
	}
	if err := noBlock(d, name); err != nil {
		return "", err
	}
	return args[0], nil
}

// errEmpty is the error of option name given the empty value "", which
// JSON could not tell from the option left out: it would silently mean the
// default.
func errEmpty(name string) error {
	return fmt.Errorf("%s is empty (\"\"): give a value, or leave %s out for its default", name, name)
}

// noArgs checks that subdirective name has no arguments and no block.
func noArgs(d *caddyfile.Dispenser, name string) error {
	if args := d.RemainingArgs(); len(args) != 0 {
		return d.Errf("%s takes no arguments, got %d", name, len(args))
	}
	return noBlock(d, name)
}

// noBlock fails if a block follows the current line.
func noBlock(d *caddyfile.Dispenser, name string) error {
	tok := d.Token()
	if d.NextBlock(d.Nesting()) {
		return errAt(tok, fmt.Errorf("%s does not take a block", name))
	}
	return nil
}

func durationArg(d *caddyfile.Dispenser, name string) (time.Duration, error) {
	v, err := oneArg(d, name, "<duration>")
	if err != nil {
		return 0, err
	}
	dur, err := caddy.ParseDuration(v)
	if err != nil {
		return 0, d.Errf("%s: bad duration %q: %v", name, v, err)
	}
	if err := checkJSONNumber(name, v, int64(dur)); err != nil {
		return 0, d.WrapErr(err)
	}
	return dur, nil
}

func positiveIntArg(d *caddyfile.Dispenser, name string) (int64, error) {
	v, err := oneArg(d, name, "<n>")
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, d.Errf("%s must be a positive integer, got %q", name, v)
	}
	if n <= 0 {
		return 0, d.Errf("%s must be positive, got %d", name, n)
	}
	if err := checkJSONNumber(name, v, n); err != nil {
		return 0, d.WrapErr(err)
	}
	return n, nil
}

// checkJSONNumber refuses a number (v as written) that Caddy's JSON config
// cannot carry exactly: Caddy reads the adapted config's numbers as
// float64, so that 9223372036854775807 comes back out of range (failing
// the load without a line) and 2^53+1 as 2^53.
func checkJSONNumber(name, v string, n int64) error {
	back, err := strconv.ParseInt(strconv.FormatFloat(float64(n), 'f', -1, 64), 10, 64)
	if err != nil || back != n {
		return fmt.Errorf("%s %s does not fit in Caddy's JSON config, which holds numbers (durations in nanoseconds) as 64-bit floats, exact up to 2^53", name, v)
	}
	return nil
}

// parseEvents and parseWindow read the numbers of a limit; Validate checks
// their range.
func parseEvents(v string) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if errors.Is(err, strconv.ErrRange) && v[0] != '-' {
		return 0, fmt.Errorf("events %s is too large: at most %d", v, maxCount)
	}
	if err != nil {
		return 0, fmt.Errorf("events must be a positive integer, got %q", v)
	}
	return n, nil
}

func parseWindow(v string) (time.Duration, error) {
	w, err := caddy.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("window: bad duration %q: %v", v, err)
	}
	return w, checkJSONNumber("window", v, int64(w))
}

// setDurationArg reads the duration of an option whose 0 means "not set"
// (the default): written out, 0 or less is refused with the option's
// floor, as JSON could not tell it from the option left out. Validate
// checks the rest.
func setDurationArg(d *caddyfile.Dispenser, name string) (time.Duration, error) {
	dur, err := durationArg(d, name)
	if err == nil && dur <= 0 {
		err = d.WrapErr(checkAtLeast(name, dur, durationFloor(name)))
	}
	return dur, err
}

// token is the Caddyfile token of the line at fault: the option's line
// (the nth limit line for the tiers), else alt's, else the zone's.
func (e *zoneError) token(zone caddyfile.Token, lines map[string]caddyfile.Token, limitLines []caddyfile.Token) caddyfile.Token {
	if e.option == "limit" && e.nth > 0 && e.nth <= len(limitLines) {
		return limitLines[e.nth-1]
	}
	if t, ok := lines[e.option]; ok {
		return t
	}
	if t, ok := lines[e.alt]; ok {
		return t
	}
	return zone
}

// errAt wraps err with the file and line of tok, the way Dispenser.Errf
// does for the current token.
func errAt(tok caddyfile.Token, err error) error {
	d := caddyfile.NewDispenser([]caddyfile.Token{tok})
	d.Next()
	return d.WrapErr(err)
}

const maxInt = int(^uint(0) >> 1)

// Interface guards.
var (
	_ caddyfile.Unmarshaler       = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)

// prefixed returns err with prefix in front, unless its message starts
// with it already: the errors of a block's lines name the block (a zone, the
// redis block) whichever helper made them.
func prefixed(err error, prefix string) error {
	if err == nil || strings.HasPrefix(err.Error(), prefix) {
		return err
	}
	return fmt.Errorf("%s%w", prefix, err)
}
