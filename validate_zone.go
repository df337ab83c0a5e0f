package ratelimit

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/keyresolver"
	"github.com/zonelimit/caddy-ratelimit/keyresolver/addr"
)

// zoneError is an error in one option of a zone (or of the handler, or of
// its redis block). Option is the Caddyfile subdirective at fault (empty
// for the zone as a whole), so that the Caddyfile parser can report the
// line that holds it: the nth of its lines when nth > 0 (the tiers), or
// else the line of alt when option has none (limit written as events and
// window). Hint is what Error adds for JSON (a duration in nanoseconds);
// the Caddyfile leaves it out.
type zoneError struct {
	option string
	nth    int
	alt    string
	err    error
	hint   string
	// also are further options the error is about (a conflict): the
	// Caddyfile reports the latest line of option and these.
	also []string
}

func (e *zoneError) Error() string { return e.err.Error() + e.hint }
func (e *zoneError) Unwrap() error { return e.err }

func zoneErrf(option, format string, args ...any) error {
	return &zoneError{option: option, err: fmt.Errorf(format, args...)}
}

// conflictErrf is the error of options that cannot go together: the
// Caddyfile reports it at the line of the last of them written.
func conflictErrf(options []string, format string, args ...any) error {
	return &zoneError{option: options[0], also: options[1:], err: fmt.Errorf(format, args...)}
}

// validate checks one zone on its own. The zero value of an option means
// its default; values Provision fills in are valid.
func (z *Zone) validate() error {
	if err := checkZoneName(z.Name); err != nil {
		return &zoneError{err: err}
	}
	if z.Key != "" && z.hasKeyResolver() {
		return zoneErrf("key", "key and key_resolver are mutually exclusive")
	}
	if err := keyresolver.CheckTemplate(z.Key); err != nil {
		return zoneErrf("key", "key: %v", err)
	}
	if _, err := algorithms.Lookup(z.Algorithm); err != nil {
		return &zoneError{option: "algorithm", err: err}
	}
	if len(z.Limits) == 0 {
		return zoneErrf("limit", "no limit: add limit <events> <window> (or events <n> and window <duration>)")
	}
	// The placeholders first, then what the algorithm takes (its bounds
	// are what every store computes exactly), then the microseconds it
	// counts in.
	for i, l := range z.Limits {
		if err := l.checkPlaceholder(); err != nil {
			return &zoneError{option: "limit", nth: i + 1, alt: "events_placeholder", err: fmt.Errorf("limit %d: %v", i+1, err)}
		}
	}
	if _, err := algorithms.New(z.Algorithm, z.limiterConfig()); err != nil {
		return z.algorithmError(err)
	}
	for i, l := range z.Limits {
		if w := time.Duration(l.Window); w%time.Microsecond != 0 {
			return &zoneError{option: "limit", nth: i + 1, alt: "window", err: fmt.Errorf("limit %d: window must be a whole number of microseconds, got %s", i+1, w)}
		}
	}
	if z.Cost != "" {
		if err := checkCost(z.Cost); err != nil {
			return &zoneError{option: "cost", err: err}
		}
		if n, err := strconv.ParseInt(z.Cost, 10, 64); err == nil {
			for i, l := range z.Limits {
				capacity, what := algorithms.Capacity(l.Events, z.Burst, z.Algorithm), "events"
				if capacity != l.Events {
					what = "burst"
				}
				if n > capacity {
					return zoneErrf("cost", "cost %d exceeds limit %d (%d %s): no request could ever pass", n, i+1, capacity, what)
				}
			}
		}
	}
	if err := onLimitEnum.check(z.OnLimit); err != nil {
		return &zoneError{option: "on_limit", err: err}
	}
	if !onLimitEnum.mode(z.OnLimit) {
		if z.MaxWait != 0 {
			return zoneErrf("on_limit", "max_wait applies only with on_limit wait")
		}
		if z.MaxWaiters != 0 {
			return zoneErrf("max_waiters", "max_waiters applies only with on_limit wait")
		}
	} else {
		if z.MaxWait <= 0 {
			return zoneErrf("on_limit", "on_limit wait needs a positive max_wait (on_limit wait <duration>), got %s", time.Duration(z.MaxWait))
		}
		// A shorter wait never waits: the shortest sleep is 1ms.
		if err := checkFloor("max_wait", time.Duration(z.MaxWait)); err != nil {
			return err
		}
		if z.MaxWait > caddy.Duration(maxMaxWait) {
			return zoneErrf("on_limit", "max_wait must be at most %s, got %s", maxMaxWait, time.Duration(z.MaxWait))
		}
	}
	if z.MaxWaiters < 0 {
		return zoneErrf("max_waiters", "max_waiters must be positive, got %d", z.MaxWaiters)
	}
	if err := z.validateBlockFor(); err != nil {
		return err
	}
	if err := addr.CheckPrefix("ipv4_prefix", z.IPv4Prefix, maxIPv4Prefix); err != nil {
		return &zoneError{option: "ipv4_prefix", err: err}
	}
	if err := addr.CheckPrefix("ipv6_prefix", z.IPv6Prefix, maxIPv6Prefix); err != nil {
		return &zoneError{option: "ipv6_prefix", err: err}
	}
	if err := emptyKeyEnum.check(z.EmptyKey); err != nil {
		return &zoneError{option: "empty_key", err: err}
	}
	if err := z.validateCountStatus(); err != nil {
		return err
	}
	if !hasPlaceholder(z.Key) {
		// Prefixes group the addresses a key template evaluates to, and
		// empty_key applies to a key that evaluates to nothing: with a
		// key_resolver, or a key without placeholders (one count for all
		// the zone's requests), they would be ignored. (0, the full
		// length and global are the defaults Provision fills in.)
		what := "no key (one count for all its requests)"
		switch {
		case z.hasKeyResolver():
			what = "a key_resolver"
		case z.Key != "":
			what = fmt.Sprintf("the static key %q (one count for all its requests)", z.Key)
		}
		for _, p := range []struct {
			option    string
			bits, max int
		}{{"ipv4_prefix", z.IPv4Prefix, maxIPv4Prefix}, {"ipv6_prefix", z.IPv6Prefix, maxIPv6Prefix}} {
			if p.bits != 0 && p.bits != p.max {
				return zoneErrf(p.option, "%s groups the addresses of a key template; this zone has %s", p.option, what)
			}
		}
		if !z.hasKeyResolver() && z.EmptyKey != "" && z.EmptyKey != emptyKeyEnum.def {
			return zoneErrf("empty_key", "empty_key %s applies to a key that evaluates to nothing; this zone has %s", z.EmptyKey, what)
		}
	}
	return nil
}

// hasKeyResolver reports whether the zone has a key_resolver; JSON's null,
// as for any other option, means none.
func (z *Zone) hasKeyResolver() bool {
	return len(z.KeyResolverRaw) > 0 && string(z.KeyResolverRaw) != "null"
}

// validateBlockFor checks block_for: within the bounds of a window (the
// Redis scripts compute it in exact microseconds), and with on_limit wait
// no longer than max_wait, beyond which every denied request would be
// rejected without waiting.
func (z *Zone) validateBlockFor() error {
	b := time.Duration(z.BlockFor)
	if err := checkFloor("block_for", b); err != nil {
		return err
	}
	switch {
	case b > maxWindow:
		return zoneErrf("block_for", "block_for must be at most %dd (about 10 years), got %s", maxWindow/(24*time.Hour), b)
	case b%time.Microsecond != 0:
		return zoneErrf("block_for", "block_for must be a whole number of microseconds, got %s", b)
	case b > 0 && onLimitEnum.mode(z.OnLimit) && b > time.Duration(z.MaxWait):
		return zoneErrf("block_for", "block_for %s is longer than max_wait %s: with on_limit wait every denied request would be rejected without waiting (use on_limit reject, or a block_for of at most max_wait)",
			b, time.Duration(z.MaxWait))
	}
	return nil
}

// algorithmError is the zoneError of what algorithms.New refuses in the
// zone: the option at fault, and the tier.
func (z *Zone) algorithmError(err error) error {
	ze := &zoneError{option: "limit", err: err}
	var ce *algorithms.ConfigError
	if !errors.As(err, &ce) {
		return ze
	}
	switch ce.Field {
	case "burst", "count_rejected":
		ze.option = ce.Field
	case "events", "window":
		ze.alt = ce.Field
	}
	if ce.Tier >= 0 {
		ze.nth = ce.Tier + 1
		if ce.Field == "window" {
			ze.hint = jsonHint(time.Duration(z.Limits[ce.Tier].Window))
		}
	}
	return ze
}

// limiterConfig is the algorithms.Config of the zone.
func (z *Zone) limiterConfig() algorithms.Config {
	tiers := make([]algorithms.Tier, len(z.Limits))
	for i, l := range z.Limits {
		tiers[i] = algorithms.Tier{Events: l.Events, Window: time.Duration(l.Window)}
	}
	return algorithms.Config{Tiers: tiers, Burst: z.Burst, CountRejected: z.CountRejected}
}
