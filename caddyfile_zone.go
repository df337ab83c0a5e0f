package ratelimit

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// unmarshalZone parses one zone block, the cursor on its "zone" token, and
// validates the zone; errors point at the line at fault.
func (h *Handler) unmarshalZone(d *caddyfile.Dispenser, zoneLines map[string]int, names *caddyExtNames) (err error) {
	zoneTok := d.Token()
	args := d.RemainingArgs()
	if len(args) != 1 {
		return d.Errf("zone takes exactly one argument, its name (zone <name> { ... }), got %d", len(args))
	}
	name := args[0]
	defer func() { err = prefixed(err, fmt.Sprintf("zone %q: ", name)) }()
	if line, dup := zoneLines[name]; dup {
		return d.Errf("duplicate zone name %q (first defined at line %d): zone names must be unique", name, line)
	}
	zoneLines[name] = d.Line()
	if err := names.explicit(name); err != nil {
		return d.Err(err.Error())
	}

	z := &Zone{Name: name}
	// The first token of each subdirective line, to point errors found
	// after the block at the line at fault.
	lines := make(map[string]caddyfile.Token)
	var limitLines []caddyfile.Token // every limit line, for errors of one tier
	// The options of one argument, kept as written: Validate checks them.
	stringOptions := map[string]struct {
		usage string
		value *string
	}{
		"algorithm": {"<name>", &z.Algorithm},
		"cost":      {"<n | placeholder>", &z.Cost},
		"empty_key": {emptyKeyEnum.usage(), &z.EmptyKey},
	}
	var maxConcurrent int64 // mholt/caddy-ratelimit's concurrency zone
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
			// A matcher without arguments (path, alone) is null, which
			// Caddy refuses only when loading it, without a line.
			for _, m := range slices.Sorted(maps.Keys(set)) {
				if string(set[m]) == "null" {
					return errAt(matchTok, fmt.Errorf("zone %q: match: %s has no value", name, m))
				}
			}
			z.MatcherSetsRaw = append(z.MatcherSetsRaw, set)

		case "key":
			v, err := oneArg(d, "key", "<template> (quote it if it contains spaces)")
			if err != nil {
				return err
			}
			z.Key = v

		case "limit":
			if tok, ok := firstOf(lines, "events", "window"); ok {
				return zerr(mixErr(tok))
			}
			args := d.RemainingArgs()
			if len(args) < 2 || len(args) > 10 || len(args) > 2 && !strings.Contains(args[0]+args[1], "{") {
				return d.Errf("zone %q: limit takes two arguments, <events> <window> (e.g. limit 100 1m), then default <n> max <n> when events is a placeholder, got %d", name, len(args))
			}
			l, err := parseLimit(args)
			if err != nil {
				return zerr(err)
			}
			if err := noBlock(d, "limit"); err != nil {
				return err
			}
			z.Limits = append(z.Limits, l)

		case "events", "window":
			if tok, ok := lines["limit"]; ok {
				return zerr(mixErr(tok))
			}
			if err := shorthandLine(d, z, sub); err != nil {
				return err
			}

		case "max_concurrent":
			n, err := positiveIntArg(d, "max_concurrent")
			if err != nil {
				return err
			}
			maxConcurrent = n

		case "burst":
			n, err := positiveIntArg(d, "burst")
			if err != nil {
				return err
			}
			z.Burst = n

		case "on_limit":
			args := d.RemainingArgs()
			switch {
			case len(args) >= 1 && args[0] == "":
				return d.WrapErr(errEmpty("on_limit"))
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

		case "count_status":
			codes, err := parseCountStatus(d.RemainingArgs())
			if err != nil {
				return zerr(err)
			}
			if err := noBlock(d, "count_status"); err != nil {
				return err
			}
			z.CountStatus = codes

		case "block_for":
			v, err := setDurationArg(d, "block_for")
			if err != nil {
				return err
			}
			z.BlockFor = caddy.Duration(v)

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

		case "algorithm", "cost", "empty_key":
			opt := stringOptions[sub]
			v, err := oneArg(d, sub, opt.usage)
			if err != nil {
				return err
			}
			*opt.value = v

		default:
			return d.Errf("zone %q: unknown subdirective %q (want one of %s)%s", name, sub, strings.Join(zoneSubdirectives, ", "), elsewhere(sub))
		}
	}

	if tok, ok := lines["max_concurrent"]; ok {
		if other, mixed := firstOf(lines, "limit", "events", "window", "algorithm"); mixed {
			return errAt(tok, fmt.Errorf("zone %q: max_concurrent cannot be mixed with %s (at line %d): for another lease lifetime than a day, write algorithm concurrency and limit <n> <window>", name, other.Text, other.Line))
		}
		setMaxConcurrent(z, maxConcurrent)
	}

	// The events/window shorthand needs both halves.
	_, events := lines["events"]
	_, window := lines["window"]
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
	// Zones' header names collide only once the later zone is there.
	if err := h.checkPolicyNames(); err != nil {
		return errAt(zoneTok, err)
	}
	return nil
}

// shorthandLine reads an events or window line (sub) into the limit of the
// events/window shorthand.
func shorthandLine(d *caddyfile.Dispenser, z *Zone, sub string) error {
	usage := "<n>"
	if sub == "window" {
		usage = "<duration>"
	}
	v, err := oneArg(d, sub, usage)
	if err != nil {
		return err
	}
	l := shorthand(z)
	if sub == "events" {
		l.Events, err = parseEvents(v)
	} else {
		w, werr := parseWindow(v)
		l.Window, err = caddy.Duration(w), werr
	}
	if err != nil {
		return d.Errf("zone %q: %v", z.Name, err)
	}
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

// parseLimit parses the arguments of a limit line: <events> <window>,
// where either may be a placeholder, followed for a placeholder events by
// default <n> max <n> and for a placeholder window by default_window <d>
// min_window <d> (in any order).
func parseLimit(args []string) (Limit, error) {
	var l Limit
	phEvents, phWindow := strings.Contains(args[0], "{"), strings.Contains(args[1], "{")
	var err error
	if phEvents {
		l.EventsPlaceholder = args[0]
	} else if l.Events, err = parseEvents(args[0]); err != nil {
		return l, err
	}
	if phWindow {
		l.WindowPlaceholder = args[1]
	} else {
		w, err := parseWindow(args[1])
		if err != nil {
			return l, err
		}
		l.Window = caddy.Duration(w)
	}
	seen := map[string]bool{}
	for i := 2; i < len(args); i += 2 {
		opt := args[i]
		if i+1 == len(args) {
			return l, fmt.Errorf("limit %s %s: %s needs a value", args[0], args[1], opt)
		}
		if seen[opt] {
			return l, fmt.Errorf("limit %s %s: %s given twice", args[0], args[1], opt)
		}
		seen[opt] = true
		v := args[i+1]
		var n int64
		var w time.Duration
		switch {
		case opt == "default" && phEvents:
			n, err = parseEvents(v)
			l.Events = n
		case opt == "max" && phEvents:
			n, err = parseEvents(v)
			l.MaxEvents = n
		case opt == "default_window" && phWindow:
			w, err = parseWindow(v)
			l.Window = caddy.Duration(w)
		case opt == "min_window" && phWindow:
			w, err = parseWindow(v)
			l.MinWindow = caddy.Duration(w)
		default:
			return l, fmt.Errorf("limit %s %s: unexpected %q (default <n> max <n> go with events from a placeholder, default_window <d> min_window <d> with a window from one)", args[0], args[1], opt)
		}
		if err == nil && (n < 0 || w < 0 || n == 0 && w == 0) {
			// JSON's 0 is "not set": written out, it is a mistake.
			err = fmt.Errorf("must be positive, got %s", v)
		}
		if err != nil {
			return l, fmt.Errorf("limit %s %s: %s: %v", args[0], args[1], opt, err)
		}
	}
	return l, nil
}
