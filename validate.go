package ratelimit

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/keyresolver"
	"github.com/zonelimit/caddy-ratelimit/redisstore"
)

// Bounds of the options with a range.
const (
	maxIPv4Prefix = 32
	maxIPv6Prefix = 128
	minStatus     = 400
	maxStatus     = 599
	maxZoneName   = 128

	// maxCount bounds events, burst and a constant cost, and maxWindow a
	// window: far above any real limit, and low enough that the
	// algorithms' arithmetic (and the doubles of the Redis store's Lua
	// scripts) stays exact.
	maxCount  = algorithms.MaxCount
	maxWindow = algorithms.MaxWindow
)

// Lower bounds of the durations: below them an option cannot mean what was
// written. A JSON number is nanoseconds, so "sweep_interval": 60 is 60ns (a
// sweep loop that never rests), and a max_wait or a Redis timeout of a few
// nanoseconds silently turns waiting, or Redis, off.
const (
	minSweepInterval = time.Second
	minMaxWait       = time.Millisecond
	minSyncInterval  = 10 * time.Millisecond // a push per interval and key
	minLease         = 10 * time.Millisecond // a call per lease and key
	minRedisTimeout  = time.Millisecond
	minBlockFor      = time.Millisecond
)

// Validate checks the configuration as a whole: every zone on its own
// (options in range, options that apply to the zone's algorithm, tiers
// the algorithm accepts) and the handler's options, and that zone names are
// unique. It implements caddy.Validator and accepts a configuration before
// and after Provision has filled in the defaults.
func (h *Handler) Validate() error {
	if len(h.Zones) == 0 {
		return errors.New("no zones: at least one zone (a key and a limit) is required")
	}
	seen := make(map[string]int, len(h.Zones))
	for i, z := range h.Zones {
		if z == nil {
			return fmt.Errorf("zone %d: empty (null) zone", i+1)
		}
		if err := z.validate(); err != nil {
			if z.Name == "" {
				return fmt.Errorf("zone %d: %v", i+1, err)
			}
			return fmt.Errorf("zone %q: %v", z.Name, err)
		}
		if j, dup := seen[z.Name]; dup {
			return fmt.Errorf("duplicate zone name %q (zones %d and %d): zone names must be unique", z.Name, j+1, i+1)
		}
		seen[z.Name] = i
	}
	if err := h.checkPolicyNames(); err != nil {
		return err
	}
	return h.validateOptions()
}

// checkPolicyNames refuses zones whose RateLimit-Policy names (one per tier,
// see policyNames) collide: a zone named "a-1m" beside a zone "a" with a
// tier of 1m would make the headers name two policies alike.
func (h *Handler) checkPolicyNames() error {
	owner := make(map[string]string)
	for _, z := range h.Zones {
		tiers := make([]algorithms.Tier, len(z.Limits))
		for i, l := range z.Limits {
			tiers[i] = algorithms.Tier{Events: l.Events, Window: time.Duration(l.Window)}
		}
		for _, name := range policyNames(z.Name, tiers) {
			if other, dup := owner[name]; dup {
				return fmt.Errorf("zones %q and %q both have a tier named %q in the RateLimit headers: rename one of the zones", other, z.Name, name)
			}
			owner[name] = z.Name
		}
	}
	return nil
}

// validateOptions checks the handler's own options (everything but the
// zones).
func (h *Handler) validateOptions() error {
	if err := storeEnum.check(h.Store); err != nil {
		return &zoneError{option: "store", err: err}
	}
	if err := headersEnum.check(h.Headers); err != nil {
		return &zoneError{option: "headers", err: err}
	}
	if h.Status != 0 {
		if err := checkStatus(h.Status); err != nil {
			return &zoneError{option: "status", err: err}
		}
	}
	if err := checkJitter(h.Jitter); err != nil {
		return &zoneError{option: "jitter", err: err}
	}
	if err := checkFloor("sweep_interval", time.Duration(h.SweepInterval)); err != nil {
		return err
	}
	if h.MaxKeys < 0 {
		return zoneErrf("max_keys", "max_keys must not be negative, got %d", h.MaxKeys)
	}
	return h.validateRedisOptions()
}

// validateRedisOptions checks the options of the redis store: they need
// store redis, and sync_interval needs counter algorithms. With store redis
// it also refuses the options that would be ignored there.
func (h *Handler) validateRedisOptions() error {
	redisStore := h.Store == "redis"
	if !redisStore {
		switch {
		case h.Redis != nil:
			return zoneErrf("redis", "redis settings need store redis (add: store redis)")
		case h.SyncInterval != 0:
			return zoneErrf("sync_interval", "sync_interval applies only to store redis")
		case h.Lease != 0:
			return zoneErrf("lease", "lease applies only to store redis")
		case h.OnError != "":
			return zoneErrf("on_error", "on_error applies only to store redis (the memory store cannot fail)")
		}
		return nil
	}
	if err := onErrorEnum.check(h.OnError); err != nil {
		return &zoneError{option: "on_error", err: err}
	}
	if h.Redis != nil {
		if err := h.Redis.validate(); err != nil {
			return &zoneError{option: "redis", err: err}
		}
	}
	if err := checkFloor("sync_interval", time.Duration(h.SyncInterval)); err != nil {
		return err
	}
	if err := h.checkRedisIgnored(); err != nil {
		return err
	}
	if err := h.validateLease(); err != nil {
		return err
	}
	if h.SyncInterval > 0 {
		for _, z := range h.Zones {
			if z.limitsFromRequest() {
				return zoneErrf("sync_interval", "zone %q: sync_interval does not work with limits from placeholders (each instance's local counts hold one limit)", z.Name)
			}
			if ok, summable := algorithms.Summable(z.Algorithm); !ok {
				alg := z.Algorithm
				if alg == "" {
					alg = algorithms.Default + " (the default)"
				}
				return zoneErrf("sync_interval", "zone %q: sync_interval works with algorithm %s (counts that can be summed), not %s",
					z.Name, summable, alg)
			}
		}
	}
	return nil
}

// validateLease checks lease (store redis): a positive duration, not with
// sync_interval, and zones whose algorithm a lease charges exactly, without
// count_rejected (a denial decided locally is not counted in Redis).
func (h *Handler) validateLease() error {
	if h.Lease == 0 {
		return nil
	}
	if err := checkFloor("lease", time.Duration(h.Lease)); err != nil {
		return err
	}
	if h.SyncInterval != 0 {
		return zoneErrf("lease", "lease and sync_interval are two ways of deciding locally: choose one")
	}
	for _, z := range h.Zones {
		alg := z.Algorithm
		if alg == "" {
			alg = algorithms.Default
		}
		if !redisstore.Leasable(alg) {
			return zoneErrf("lease", "zone %q: lease works with algorithm fixed_window, sliding_window, sliding_log, token_bucket or gcra, not %s", z.Name, alg)
		}
		if z.CountRejected {
			return zoneErrf("lease", "zone %q: lease does not apply with count_rejected: a denial decided locally is not counted in Redis", z.Name)
		}
		if z.limitsFromRequest() {
			return zoneErrf("lease", "zone %q: lease does not work with limits from placeholders (a lease is charged under one limit)", z.Name)
		}
		if z.BlockFor != 0 {
			return zoneErrf("lease", "zone %q: lease does not apply with block_for: a key admitted from a lease in hand is not checked against its block", z.Name)
		}
	}
	return nil
}

// checkRedisIgnored refuses, with store redis, the options that the store
// would ignore. The values Provision fills in pass: Validate runs again
// after Provision.
func (h *Handler) checkRedisIgnored() error {
	if h.SyncInterval > 0 && (h.OnError == "closed" || h.OnError == "local") {
		return zoneErrf("on_error", "on_error %s does not apply with sync_interval: decisions are made on local counts and never wait on Redis (a failed push is retried at the next interval)", h.OnError)
	}
	// With store redis the memory store is the on_error local fallback,
	// and (max_keys only) the local counts of sync_interval.
	local := h.OnError == "local"
	if h.SweepInterval != 0 && time.Duration(h.SweepInterval) != defaultSweepInterval && !local {
		return zoneErrf("sweep_interval", "sweep_interval applies to keys held in memory: with store redis only with on_error local")
	}
	if h.MaxKeys != 0 && h.MaxKeys != defaultMaxKeys && !local && h.SyncInterval == 0 && h.Lease == 0 {
		return zoneErrf("max_keys", "max_keys applies to keys held in memory: with store redis only with on_error local or sync_interval, or lease")
	}
	return nil
}

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
}

func (e *zoneError) Error() string { return e.err.Error() + e.hint }
func (e *zoneError) Unwrap() error { return e.err }

func zoneErrf(option, format string, args ...any) error {
	return &zoneError{option: option, err: fmt.Errorf(format, args...)}
}

// validate checks one zone on its own. The zero value of an option means
// its default; values Provision fills in are valid.
func (z *Zone) validate() error {
	if err := checkZoneName(z.Name); err != nil {
		return &zoneError{err: err}
	}
	if z.Key != "" && len(z.KeyResolverRaw) > 0 {
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
	// The module's bounds first (what the Redis store computes exactly),
	// then what the algorithm takes, then the microseconds it counts in.
	for i, l := range z.Limits {
		if err := checkEvents(l.Events); err != nil {
			return &zoneError{option: "limit", nth: i + 1, alt: "events", err: fmt.Errorf("limit %d: %v", i+1, err)}
		}
		if err := checkWindow(time.Duration(l.Window)); err != nil {
			return &zoneError{option: "limit", nth: i + 1, alt: "window", err: fmt.Errorf("limit %d: %v", i+1, err)}
		}
		if err := l.checkPlaceholder(); err != nil {
			return &zoneError{option: "limit", nth: i + 1, alt: "events_placeholder", err: fmt.Errorf("limit %d: %v", i+1, err)}
		}
	}
	if z.Burst > maxCount {
		return zoneErrf("burst", "burst must be at most %d, got %d", maxCount, z.Burst)
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
				capacity, what := l.Events, "events"
				if z.Burst > 0 {
					capacity, what = z.Burst, "burst"
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
	if err := checkPrefix("ipv4_prefix", z.IPv4Prefix, maxIPv4Prefix); err != nil {
		return &zoneError{option: "ipv4_prefix", err: err}
	}
	if err := checkPrefix("ipv6_prefix", z.IPv6Prefix, maxIPv6Prefix); err != nil {
		return &zoneError{option: "ipv6_prefix", err: err}
	}
	if err := emptyKeyEnum.check(z.EmptyKey); err != nil {
		return &zoneError{option: "empty_key", err: err}
	}
	if err := z.validateCountStatus(); err != nil {
		return err
	}
	if !strings.Contains(z.Key, "{") {
		// Prefixes group the addresses a key template evaluates to, and
		// empty_key applies to a key that evaluates to nothing: with a
		// key_resolver, or a key without placeholders (one count for all
		// the zone's requests), they would be ignored. (0, the full
		// length and global are the defaults Provision fills in.)
		what := "no key (one count for all its requests)"
		switch {
		case len(z.KeyResolverRaw) > 0:
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
		if len(z.KeyResolverRaw) == 0 && z.EmptyKey != "" && z.EmptyKey != emptyKeyEnum.def {
			return zoneErrf("empty_key", "empty_key %s applies to a key that evaluates to nothing; this zone has %s", z.EmptyKey, what)
		}
	}
	return nil
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

// checkZoneName accepts names that are safe in headers (a structured-field
// string needs no escaping), logs, metrics labels and store keys: 1 to 128
// printable ASCII characters other than space, quotes, backslash and
// braces.
func checkZoneName(name string) error {
	if name == "" {
		return errors.New("zone name is empty")
	}
	if len(name) > maxZoneName {
		return fmt.Errorf("zone name is longer than %d characters", maxZoneName)
	}
	for _, c := range []byte(name) {
		if c <= ' ' || c >= 0x7f || c == '"' || c == '\'' || c == '\\' || c == '{' || c == '}' {
			return fmt.Errorf("zone name %q: only printable ASCII without spaces, quotes, backslashes or braces is allowed", name)
		}
	}
	return nil
}

// checkEvents checks the module's bound on events; that they are positive
// is the algorithms' rule (algorithms.New).
func checkEvents(n int64) error {
	if n > maxCount {
		return fmt.Errorf("events must be at most %d, got %d", maxCount, n)
	}
	return nil
}

// checkPlaceholder checks a limit's events placeholder: a template with a
// placeholder, with a ceiling no lower than the default (Events).
func (l *Limit) checkPlaceholder() error {
	if err := l.checkWindowPlaceholder(); err != nil {
		return err
	}
	if set, err := checkPlaceholderSet("events", l.EventsPlaceholder, l.MaxEvents != 0, "max_events applies only with an events placeholder"); !set || err != nil {
		return err
	}
	switch {
	case l.MaxEvents <= 0:
		return fmt.Errorf("events from the placeholder %s need a ceiling: max_events (Caddyfile: max <n>), the most a request may be given", l.EventsPlaceholder)
	case l.MaxEvents < l.Events:
		return fmt.Errorf("the default %d is above the ceiling %d (max, max_events in JSON)", l.Events, l.MaxEvents)
	}
	return checkEvents(l.MaxEvents)
}

// checkPlaceholderSet checks what the events and window placeholders share.
// Without a placeholder it reports false, and the error unset when the
// bound is set all the same (boundSet): a bound applies only to a
// placeholder. With one it reports true and checkLimitTemplate's error.
func checkPlaceholderSet(what, placeholder string, boundSet bool, unset string) (bool, error) {
	if placeholder == "" {
		if boundSet {
			return false, errors.New(unset)
		}
		return false, nil
	}
	return true, checkLimitTemplate(what, placeholder)
}

// checkWindowPlaceholder checks a limit's window placeholder: a template
// with a placeholder, with a floor no longer than the default (Window).
func (l *Limit) checkWindowPlaceholder() error {
	if set, err := checkPlaceholderSet("window", l.WindowPlaceholder, l.MinWindow != 0, "min_window applies only with a window placeholder"); !set || err != nil {
		return err
	}
	switch mw := time.Duration(l.MinWindow); {
	case mw <= 0:
		return fmt.Errorf("a window from the placeholder %s needs a floor: min_window (Caddyfile: min_window <duration>), the shortest a request may be given", l.WindowPlaceholder)
	case mw < time.Millisecond || mw%time.Microsecond != 0:
		return fmt.Errorf("min_window must be at least 1ms, in whole microseconds, got %s", mw)
	case mw > time.Duration(l.Window):
		return fmt.Errorf("the default window %s is shorter than the floor %s (min_window)", time.Duration(l.Window), mw)
	}
	return nil
}

// checkLimitTemplate checks the placeholder template of a limit's what
// (events or window).
func checkLimitTemplate(what, tmpl string) error {
	if !strings.Contains(tmpl, "{") {
		return fmt.Errorf("%s placeholder %q has no placeholder: give the value as %s", what, tmpl, what)
	}
	if err := keyresolver.CheckTemplate(tmpl); err != nil {
		return fmt.Errorf("%s placeholder: %v", what, err)
	}
	return nil
}

// checkFloor checks duration option (one of those durationFloor knows) when
// it is set (not 0), naming the option at fault.
func checkFloor(option string, d time.Duration) error {
	if d == 0 {
		return nil
	}
	if err := checkAtLeast(option, d, durationFloor(option)); err != nil {
		ze := &zoneError{option: option, err: err, hint: jsonHint(d)}
		if option == "max_wait" {
			ze.option = "on_limit"
		}
		return ze
	}
	return nil
}

// durationFloor is the least value of a duration option.
func durationFloor(option string) time.Duration {
	switch option {
	case "sweep_interval":
		return minSweepInterval
	case "sync_interval":
		return minSyncInterval
	case "lease":
		return minLease
	case "max_wait":
		return minMaxWait
	case "block_for":
		return minBlockFor
	}
	return minRedisTimeout // dial_timeout, read_timeout, write_timeout
}

// checkAtLeast checks that duration option d is at least min.
func checkAtLeast(option string, d, min time.Duration) error {
	if d < min {
		return fmt.Errorf("%s must be at least %s, got %s", option, min, d)
	}
	return nil
}

// jsonHint explains a duration below a millisecond, most likely a number of
// seconds written as a bare JSON number (which is nanoseconds).
func jsonHint(d time.Duration) string {
	if d <= 0 || d >= time.Millisecond {
		return ""
	}
	return fmt.Sprintf(`: a JSON number is nanoseconds; write a duration string such as "%ds"`, int64(d))
}

// checkWindow checks the module's bound on a window; its floor is the
// algorithms' rule (algorithms.New).
func checkWindow(w time.Duration) error {
	if w > maxWindow {
		return fmt.Errorf("window must be at most %dd (about 10 years), got %s", maxWindow/(24*time.Hour), w)
	}
	return nil
}

// checkPrefix accepts 0 (not set: the full length, each address alone, as
// in mholt/caddy-ratelimit) to max bits.
func checkPrefix(option string, bits, max int) error {
	if bits < 0 || bits > max {
		return fmt.Errorf("%s must be between 1 and %d bits (or 0: not set), got %d", option, max, bits)
	}
	return nil
}

func checkStatus(code int) error {
	if code < minStatus || code > maxStatus {
		return fmt.Errorf("status must be a 4xx or 5xx code (%d to %d), got %d", minStatus, maxStatus, code)
	}
	return nil
}

// checkJitter accepts any non-negative fraction, as mholt/caddy-ratelimit
// does (0.2: up to 20% more; 2: up to three times the wait).
func checkJitter(f float64) error {
	if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		return fmt.Errorf("jitter must be a non-negative fraction (e.g. 0.2: up to 20%% more), got %v", f)
	}
	return nil
}

// checkCost accepts a positive integer or a value with a placeholder (which
// is evaluated per request).
func checkCost(s string) error {
	if strings.ContainsAny(s, "{}") {
		if err := keyresolver.CheckTemplate(s); err != nil {
			return fmt.Errorf("cost: %v", err)
		}
		return nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return fmt.Errorf("cost must be a positive integer or a placeholder, got %q", s)
	}
	if n <= 0 {
		return fmt.Errorf("cost must be positive, got %d", n)
	}
	if n > maxCount {
		return fmt.Errorf("cost must be at most %d, got %d", maxCount, n)
	}
	return nil
}

// Interface guard.
var _ caddy.Validator = (*Handler)(nil)
