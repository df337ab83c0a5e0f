package ratelimit

import (
	"errors"
	"fmt"
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
	if err := handler.UnmarshalCaddyfile(h.Dispenser); err != nil {
		return nil, err
	}
	return handler, nil
}

// Subdirectives of a rate_limit block and of a zone block, for error
// messages.
var (
	handlerSubdirectives = []string{"zone", "store", "redis", "sync_interval", "on_error", "headers", "status", "dry_run", "jitter", "sweep_interval", "max_keys", "log_keys", "disable_metrics"}
	zoneSubdirectives    = []string{"match", "key", "algorithm", "limit", "events", "window", "burst", "cost", "on_limit", "max_waiters", "count_rejected", "ipv4_prefix", "ipv6_prefix", "empty_key"}
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
//	        burst     <n>
//	        cost      <n | placeholder>
//	        on_limit  reject | wait <max_wait>
//	        max_waiters <n>
//	        count_rejected
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
//	    on_error       open | closed | local
//	    log_keys
//	    headers        ietf | legacy | both | off
//	    status         <code>
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
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // consume directive name
	directive := d.Token()
	if d.NextArg() {
		return d.Errf("rate_limit: unexpected argument %q: the only argument is a matcher; the configuration goes in a block", d.Val())
	}

	zoneLines := make(map[string]int)
	seen := make(map[string]int)
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		sub := d.Val()
		if sub != "zone" {
			if line, dup := seen[sub]; dup {
				return d.Errf("%s already specified (at line %d)", sub, line)
			}
			seen[sub] = d.Line()
		}
		var err error
		switch sub {
		case "zone":
			err = h.unmarshalZone(d, zoneLines)

		case "store":
			h.Store, err = oneArg(d, "store", storeEnum.usage())

		case "redis":
			h.Redis, err = unmarshalRedis(d)

		case "sync_interval":
			var dur time.Duration
			dur, err = setDurationArg(d, "sync_interval")
			h.SyncInterval = caddy.Duration(dur)

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
			err = d.Errf("%s (from mholt/caddy-ratelimit) is not supported: this module shares counts between instances with its own store (see store)", sub)

		default:
			err = d.Errf("unknown subdirective %q in rate_limit (want one of %s)", sub, strings.Join(handlerSubdirectives, ", "))
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
		tok := directive
		var oe *zoneError
		if errors.As(err, &oe) {
			if line, ok := seen[oe.option]; ok {
				tok = caddyfile.Token{File: directive.File, Line: line, Text: oe.option}
			}
			err = oe.err // without the hint for JSON
		}
		return errAt(tok, err)
	}
	return nil
}

// unmarshalZone parses one zone block, the cursor on its "zone" token, and
// validates the zone; errors point at the line at fault.
func (h *Handler) unmarshalZone(d *caddyfile.Dispenser, zoneLines map[string]int) error {
	zoneTok := d.Token()
	args := d.RemainingArgs()
	if len(args) != 1 {
		return d.Errf("zone takes exactly one argument, its name (zone <name> { ... }), got %d", len(args))
	}
	name := args[0]
	if line, dup := zoneLines[name]; dup {
		return d.Errf("duplicate zone name %q (first defined at line %d): zone names must be unique", name, line)
	}
	zoneLines[name] = d.Line()

	z := &Zone{Name: name}
	// The first token of each subdirective line, to point errors found
	// after the block at the line at fault.
	lines := make(map[string]caddyfile.Token)
	var limitLines []caddyfile.Token // every limit line, for errors of one tier
	var events, window bool
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		sub := d.Val()
		if tok, dup := lines[sub]; dup && sub != "match" && sub != "limit" {
			return d.Errf("zone %q: %s already specified (at line %d)", name, sub, tok.Line)
		}
		if _, dup := lines[sub]; !dup {
			lines[sub] = d.Token()
		}
		if sub == "limit" {
			limitLines = append(limitLines, d.Token())
		}
		zerr := func(err error) error { return d.Errf("zone %q: %v", name, err) }

		switch sub {
		case "match":
			matchTok := d.Token()
			set, err := caddyhttp.ParseCaddyfileNestedMatcherSet(d)
			if err != nil {
				return err
			}
			if len(set) == 0 {
				return errAt(matchTok, fmt.Errorf("zone %q: match needs at least one request matcher: match { <matchers> }", name))
			}
			z.MatcherSetsRaw = append(z.MatcherSetsRaw, set)

		case "key":
			v, err := oneArg(d, "key", "<template> (quote it if it contains spaces)")
			if err != nil {
				return err
			}
			if v == "" {
				return zerr(errors.New("key is empty"))
			}
			z.Key = v

		case "algorithm":
			v, err := oneArg(d, "algorithm", "<name>")
			if err != nil {
				return err
			}
			z.Algorithm = v

		case "limit":
			if tok, ok := firstOf(lines, "events", "window"); ok {
				return zerr(mixErr(tok))
			}
			args := d.RemainingArgs()
			if len(args) != 2 {
				return d.Errf("zone %q: limit takes two arguments, <events> <window> (e.g. limit 100 1m), got %d", name, len(args))
			}
			n, err := parseEvents(args[0])
			if err != nil {
				return zerr(err)
			}
			w, err := parseWindow(args[1])
			if err != nil {
				return zerr(err)
			}
			if err := noBlock(d, "limit"); err != nil {
				return err
			}
			z.Limits = append(z.Limits, Limit{Events: n, Window: caddy.Duration(w)})

		case "events":
			if tok, ok := lines["limit"]; ok {
				return zerr(mixErr(tok))
			}
			v, err := oneArg(d, "events", "<n>")
			if err != nil {
				return err
			}
			n, err := parseEvents(v)
			if err != nil {
				return zerr(err)
			}
			events = true
			shorthand(z).Events = n

		case "window":
			if tok, ok := lines["limit"]; ok {
				return zerr(mixErr(tok))
			}
			v, err := oneArg(d, "window", "<duration>")
			if err != nil {
				return err
			}
			w, err := parseWindow(v)
			if err != nil {
				return zerr(err)
			}
			window = true
			shorthand(z).Window = caddy.Duration(w)

		case "burst":
			n, err := positiveIntArg(d, "burst")
			if err != nil {
				return err
			}
			z.Burst = n

		case "cost":
			v, err := oneArg(d, "cost", "<n | placeholder>")
			if err != nil {
				return err
			}
			z.Cost = v

		case "on_limit":
			args := d.RemainingArgs()
			switch {
			case len(args) == 1 && args[0] == "reject":
			case len(args) >= 1 && args[0] == "wait":
				if len(args) != 2 {
					return d.Errf("zone %q: on_limit wait takes one argument, the longest wait (on_limit wait <max_wait>), got %d", name, len(args)-1)
				}
				w, err := caddy.ParseDuration(args[1])
				if err != nil {
					return d.Errf("zone %q: on_limit wait: bad duration %q: %v", name, args[1], err)
				}
				if w <= 0 { // JSON's 0 and negatives mean something else
					return d.Errf("zone %q: on_limit wait: %v", name, checkAtLeast("max_wait", w, durationFloor("max_wait")))
				}
				z.MaxWait = caddy.Duration(w)
			case len(args) == 0:
				return d.Errf("zone %q: on_limit takes reject or wait <max_wait>", name)
			case args[0] == "reject":
				return d.Errf("zone %q: on_limit reject takes no further arguments, got %d", name, len(args)-1)
			}
			if err := noBlock(d, "on_limit"); err != nil {
				return err
			}
			z.OnLimit = args[0]

		case "max_waiters":
			n, err := positiveIntArg(d, "max_waiters")
			if err != nil {
				return err
			}
			if n > int64(maxInt) {
				return d.Errf("zone %q: max_waiters must be at most %d, got %d", name, maxInt, n)
			}
			z.MaxWaiters = int(n)

		case "count_rejected":
			if err := noArgs(d, "count_rejected"); err != nil {
				return err
			}
			z.CountRejected = true

		case "ipv4_prefix", "ipv6_prefix":
			v, err := oneArg(d, sub, "<bits>")
			if err != nil {
				return err
			}
			max := maxIPv4Prefix
			if sub == "ipv6_prefix" {
				max = maxIPv6Prefix
			}
			bits, err := strconv.Atoi(v)
			if err != nil {
				return d.Errf("zone %q: %s must be a number of bits between 1 and %d (or 0: not set), got %q", name, sub, max, v)
			}
			if sub == "ipv4_prefix" {
				z.IPv4Prefix = bits
			} else {
				z.IPv6Prefix = bits
			}

		case "empty_key":
			v, err := oneArg(d, "empty_key", emptyKeyEnum.usage())
			if err != nil {
				return err
			}
			z.EmptyKey = v

		default:
			return d.Errf("zone %q: unknown subdirective %q (want one of %s)", name, sub, strings.Join(zoneSubdirectives, ", "))
		}
	}

	// The events/window shorthand needs both halves.
	if events != window {
		have, missing := "events", "window"
		if window {
			have, missing = "window", "events"
		}
		return errAt(lines[have], fmt.Errorf("zone %q: %s without %s: the shorthand needs both (or use limit <events> <window>)", name, have, missing))
	}

	if err := z.validate(); err != nil {
		tok := zoneTok
		var ze *zoneError
		if errors.As(err, &ze) {
			tok = ze.token(zoneTok, lines, limitLines)
			err = ze.err // without the hint for JSON
		}
		return errAt(tok, fmt.Errorf("zone %q: %v", name, err))
	}
	h.Zones = append(h.Zones, z)
	return nil
}

// shorthand returns the single Limit the events/window shorthand fills,
// creating it on first use.
func shorthand(z *Zone) *Limit {
	if len(z.Limits) == 0 {
		z.Limits = append(z.Limits, Limit{})
	}
	return &z.Limits[0]
}

func mixErr(tok caddyfile.Token) error {
	return fmt.Errorf("limit cannot be mixed with the events/window shorthand (%s at line %d): use limit lines only", tok.Text, tok.Line)
}

// firstOf returns the token of the first of names that lines holds.
func firstOf(lines map[string]caddyfile.Token, names ...string) (caddyfile.Token, bool) {
	var first caddyfile.Token
	found := false
	for _, n := range names {
		if t, ok := lines[n]; ok && (!found || t.Line < first.Line) {
			first, found = t, true
		}
	}
	return first, found
}

// oneArg reads exactly one argument of subdirective name, and no block.
func oneArg(d *caddyfile.Dispenser, name, usage string) (string, error) {
	args := d.RemainingArgs()
	if len(args) != 1 {
		return "", d.Errf("%s takes exactly one argument, %s, got %d", name, usage, len(args))
	}
	if err := noBlock(d, name); err != nil {
		return "", err
	}
	return args[0], nil
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
	return n, nil
}

// parseEvents and parseWindow read the numbers of a limit; Validate checks
// their range.
func parseEvents(v string) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
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
	return w, nil
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
