package ratelimit

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/keyresolver"
	"github.com/zonelimit/caddy-ratelimit/keyresolver/addr"
)

// Bounds of the options with a range.
const (
	maxIPv4Prefix = addr.IPv4Bits
	maxIPv6Prefix = addr.IPv6Bits
	minStatus     = 400
	maxStatus     = 599
	maxZoneName   = 128

	// The algorithms' bounds (algorithms.New checks a limit's events,
	// burst and window by them), for what no Limiter sees: maxCount bounds
	// an events ceiling and a constant cost, maxWindow block_for and the
	// admin API's durations.
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

// maxRedisTimeout bounds dial_timeout, read_timeout and write_timeout: a
// request waits up to that long for a hung Redis before on_error decides
// it (and a shutdown waits for that request), which past a minute is a
// typo, not a policy.
const maxRedisTimeout = time.Minute

// maxJitter bounds jitter: up to 10 more times the wait. More only stretches
// Retry-After towards the end of time.
const maxJitter = 10

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

// checkEvents checks the bound on an events ceiling (a limit's own events
// are the algorithms' to check: algorithms.New).
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
	if err := checkNumberTemplate("events", l.EventsPlaceholder); err != nil {
		return err
	}
	switch {
	case l.Events <= 0:
		return fmt.Errorf("events from the placeholder %s need a default: events (Caddyfile: default <n>), for a request whose placeholder gives no number", l.EventsPlaceholder)
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
	case l.Window <= 0:
		return fmt.Errorf("a window from the placeholder %s needs a default: window (Caddyfile: default_window <duration>), for a request whose placeholder gives no duration", l.WindowPlaceholder)
	case mw <= 0:
		return fmt.Errorf("a window from the placeholder %s needs a floor: min_window (Caddyfile: min_window <duration>), the shortest a request may be given", l.WindowPlaceholder)
	case mw < algorithms.MinWindow || mw%time.Microsecond != 0:
		return fmt.Errorf("min_window must be at least %s, in whole microseconds, got %s", algorithms.MinWindow, mw)
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

// checkNumberTemplate refuses a template for a number (events, cost)
// with text outside its placeholders that is not a digit: its value is
// never a number, so every request would get the default.
func checkNumberTemplate(what, tmpl string) error {
	lit := keyresolver.Literal(tmpl)
	if strings.Trim(lit, "0123456789") != "" {
		return fmt.Errorf("%s %q can never be a number: %q, outside its placeholders, is not all digits", what, tmpl, lit)
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

func checkStatus(code int) error {
	if code < minStatus || code > maxStatus {
		return fmt.Errorf("status must be a 4xx or 5xx code (%d to %d), got %d", minStatus, maxStatus, code)
	}
	return nil
}

// checkJitter accepts a non-negative fraction up to maxJitter, as
// mholt/caddy-ratelimit does any (0.2: up to 20% more; 2: up to three
// times the wait).
func checkJitter(f float64) error {
	if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		return fmt.Errorf("jitter must be a non-negative fraction (e.g. 0.2: up to 20%% more), got %v", f)
	}
	if f > maxJitter {
		return fmt.Errorf("jitter must be at most %d (up to %d times the wait), got %v", maxJitter, maxJitter+1, f)
	}
	return nil
}

// checkCost accepts a positive integer or a value with a placeholder (which
// is evaluated per request).
func checkCost(s string) error {
	if err := keyresolver.CheckTemplate(s); err != nil {
		return fmt.Errorf("cost: %v", err)
	}
	if hasPlaceholder(s) {
		return checkNumberTemplate("cost", s)
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

// hasPlaceholder reports whether template tmpl has a placeholder: a '{'
// that is not escaped (\{ is a literal brace).
func hasPlaceholder(tmpl string) bool {
	for i := 0; i < len(tmpl); i++ {
		if tmpl[i] == '{' && (i == 0 || tmpl[i-1] != '\\') {
			return true
		}
	}
	return false
}
