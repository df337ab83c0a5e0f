// Package redisstore is the Redis store of caddy-ratelimit: one Lua script per
// algorithm (the Redis twin of each Go algorithm in package algorithms),
// embedded with go:embed and run with EVALSHA (EVAL on NOSCRIPT), and the
// Store that runs them through a go-redis UniversalClient (one node,
// Cluster or Sentinel).
//
// # One command per decision
//
// Take sends exactly one EVALSHA: the script decides every tier of the zone
// atomically and answers every field of the Decision. Undo (a later zone
// denied the request, or a concurrency request ended) is one more EVALSHA of
// the same script in undo mode; it is skipped when there is nothing to give
// back.
//
// # Time
//
// Take and Undo with a zero now let the script read Redis's TIME, so that
// the instances sharing a count never depend on their own clocks; tests
// pass an instant in (now.UnixMicro()). Reading TIME in a script that then
// writes is allowed because Redis (5 and later; 7 always) replicates a
// script's effects, not the script itself.
//
// # Key layout
//
// Every key of one zone key is
//
//	<key_prefix><zone>:{<escaped key>}:<alg>:<config digest>[:<part>]
//
// The braces are the Cluster hash tag: all keys of one zone key live in one
// slot, so a script never gets CROSSSLOT. The user's key is escaped by
// EscapeKey ('{', '}', '%', space and control bytes become %XX; an escaped key
// longer than 128 bytes is replaced by "%H" + its hex SHA-256; the empty key
// is "%Z", since "{}" would be no hash tag at all), so it can
// never inject a brace or a newline nor make a key longer than about 200
// bytes plus the prefix and zone. The zone name is escaped the same way (it
// precedes the hash tag), and a key_prefix may not contain a brace. The
// config digest (8 hex digits of a SHA-256 of the algorithm, tiers and burst)
// means a changed limit starts from fresh state, as the memory store does.
//
// Keys per zone key and algorithm:
//
//	sliding_log     <...>:sl:<d>:m      string: latest instant seen, per tier the
//	                                    live units and the newest unit's offset
//	                <...>:sl:<d>:<i>    sorted set of tier i's runs (one per Take),
//	                                    scored by the offset of their newest unit
//	sliding_window  <...>:sw:<d>        string: per tier window start and counts
//	fixed_window    <...>:fw:<d>        string: per tier window start and count
//	token_bucket    <...>:tb:<d>        string: last instant, level per tier
//	leaky_bucket    <...>:lb:<d>        string: last instant, level per tier
//	gcra            <...>:gcra:<d>      string: last instant, TAT per tier
//	concurrency     <...>:cc:<d>        hash: last instant, last token, held
//	                <...>:cc:<d>:l      sorted set of leases scored by expiry
//
// A string state is decimal integers separated by spaces, read with one GET
// and written with its TTL by one SET PX (load_state and save_state in
// lib.lua): fewer commands than a hash, and each command inside a script
// costs Redis about as much as the script's arithmetic.
//
// Every call sets a TTL on every key it touches: the time until the
// state is the same as a fresh one, plus a one-second margin (Margin), so
// Redis never fills with dead keys and a crashed instance's concurrency
// leases expire on their own:
//
//	sliding_log     newest event + window - now          <= longest window
//	fixed_window    end of the current window - now      <= longest window
//	sliding_window  end of the next window - now         <= 2 x longest window
//	                (the current count weighs on the next window)
//	token_bucket    time until full                      <= burst/rate
//	leaky_bucket    time until empty                     <= burst/rate
//	gcra            TAT - now                            <= burst/rate
//	                (the buckets up to twice that with count_rejected debt)
//	concurrency     newest lease's expiry - now          <= window
//
// (burst/rate is the window when burst is the default, events.)
//
// # Unique members
//
// Sorted-set members are unique even for requests in the same microsecond:
// a sliding_log run (one per logged Take, whatever its cost) is
// "<µs>:<units>:<instance id>-<store id>-<counter>" (the id: a random
// per-process id, a per-process store number and a per-store atomic
// counter, in base 36, passed in by the Store; see sliding_log.lua for the
// score); a
// concurrency lease is "<token>:<cost>", where the token is drawn inside
// the script exactly as the Go twin draws it (max(last token + 1, now µs)),
// so Decision.Token maps to its lease deterministically.
package redisstore

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/store"
)

//go:embed *.lua
var scriptFS embed.FS

// Margin is added to every key's TTL beyond the time its state needs.
const Margin = time.Second

// scripts holds one redis.Script per algorithm: lib.lua followed by the
// algorithm's script.
var scripts = func() map[string]*redis.Script {
	lib, err := scriptFS.ReadFile("lib.lua")
	if err != nil {
		panic(err)
	}
	m := make(map[string]*redis.Script)
	for _, name := range algorithms.Names {
		src, err := scriptFS.ReadFile(name + ".lua")
		if err != nil {
			continue // not written yet
		}
		m[name] = redis.NewScript(string(lib) + "\n" + string(src))
	}
	return m
}()

// Script returns the source of the script of algorithm name as sent to
// Redis (lib.lua then the algorithm's file), and whether there is one.
func Script(name string) (string, bool) {
	lib, _ := scriptFS.ReadFile("lib.lua")
	src, err := scriptFS.ReadFile(name + ".lua")
	if err != nil {
		return "", false
	}
	return string(lib) + "\n" + string(src), true
}

// instanceID tells this process's sorted-set members apart from other
// instances'.
var instanceID = func() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return strconv.FormatUint(binary.LittleEndian.Uint64(b[:]), 36)
}()

// Options names a Store's keys.
type Options struct {
	// KeyPrefix starts every key (e.g. "rl:"). It may not contain a brace.
	KeyPrefix string

	// Zone is the zone's name; it follows the prefix (escaped like a key).
	Zone string

	// Pipeliner, when set, sends the Store's calls in pipelines shared
	// with the other Stores of the client (see Pipeliner). Nil: one
	// round trip per call.
	Pipeliner *Pipeliner
}

// Store keeps one zone's state in Redis. It is safe for concurrent use.
type Store struct {
	c       redis.UniversalClient
	l       algorithms.Limiter
	script  *redis.Script
	head    string   // "<prefix><zone>:{"
	tails   []string // "}:<alg>:<digest>[:<part>]", one per key
	static  []any    // ARGV after the common arguments
	cr      any      // count_rejected: "1" or "0"
	member  bool     // the script wants a unique member in ARGV[5]
	maxCost int64    // costs above it decide as it does (see Take)
	counter atomic.Uint64
	idHead  string // "<instance id>-<store id>-"
	pipe    *Pipeliner
}

var _ store.Store = (*Store)(nil)

var storeSeq atomic.Uint64

// NewStore returns a Store running l's script on c.
func NewStore(c redis.UniversalClient, l algorithms.Limiter, o Options) (*Store, error) {
	if c == nil {
		return nil, errors.New("redis store: no client")
	}
	if l == nil {
		return nil, errors.New("redis store: no limiter")
	}
	if strings.ContainsAny(o.KeyPrefix, "{}") {
		return nil, fmt.Errorf("redis store: key_prefix %q must not contain a brace ('{' or '}' would change the Cluster hash tag)", o.KeyPrefix)
	}
	name := l.Name()
	sc := scripts[name]
	if sc == nil {
		return nil, fmt.Errorf("redis store: no Lua script for algorithm %q", name)
	}
	cfg := l.Config()
	// Twice the largest capacity: a cost above every tier's capacity is
	// refused by every tier, and with count_rejected a bucket counts at
	// most twice its capacity, so a larger cost decides exactly as this
	// one, which keeps the scripts' doubles exact (a cost comes from a
	// request and may be up to 2^63-1).
	var maxCap int64
	for _, t := range cfg.Tiers {
		c := t.Events
		if cfg.Burst > 0 && algorithms.UsesBurst(name) {
			c = cfg.Burst
		}
		if t.Events > algorithms.MaxCount || c > algorithms.MaxCount || t.Window > algorithms.MaxWindow {
			return nil, fmt.Errorf("redis store: limit %d per %s (burst %d) is beyond the bounds the scripts compute exactly within (%d units, %s)",
				t.Events, t.Window, cfg.Burst, algorithms.MaxCount, algorithms.MaxWindow)
		}
		maxCap = max(maxCap, c)
	}
	s := &Store{
		maxCost: 2 * maxCap,
		c:       c,
		l:       l,
		script:  sc,
		head:    o.KeyPrefix + EscapeKey(o.Zone) + ":{",
		cr:      any("0"),
		idHead:  instanceID + "-" + strconv.FormatUint(storeSeq.Add(1), 36) + "-",
		pipe:    o.Pipeliner,
	}
	if cfg.CountRejected {
		s.cr = any("1")
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s|%d|", name, cfg.Burst)
	if layout := stateLayout[name]; layout != "" {
		fmt.Fprintf(h, "%s|", layout)
	}
	for _, t := range cfg.Tiers {
		fmt.Fprintf(h, "%d/%d|", t.Events, t.Window.Microseconds())
	}
	digest := hex.EncodeToString(h.Sum(nil))[:8]

	num := func(v int64) string { return strconv.FormatInt(v, 10) }
	s.static = append(s.static, num(Margin.Milliseconds()), num(int64(len(cfg.Tiers))))
	var short string
	var parts []string
	switch name {
	case algorithms.TokenBucket, algorithms.LeakyBucket:
		short = "tb"
		if name == algorithms.LeakyBucket {
			short = "lb"
		}
		for i, t := range cfg.Tiers {
			rate, scale, capacity, err := algorithms.BucketParams(t, cfg.Burst)
			if err != nil {
				return nil, fmt.Errorf("redis store: %s: limit %d: %v", name, i+1, err)
			}
			burst := cfg.Burst
			if burst <= 0 {
				burst = t.Events
			}
			s.static = append(s.static, num(rate), num(scale), num(capacity), num(burst), num(t.Window.Microseconds()))
		}
	case algorithms.GCRA:
		short = "gcra"
		for i, t := range cfg.Tiers {
			iv, tau, err := algorithms.GCRAParams(t, cfg.Burst)
			if err != nil {
				return nil, fmt.Errorf("redis store: gcra: limit %d: %v", i+1, err)
			}
			burst := cfg.Burst
			if burst <= 0 {
				burst = t.Events
			}
			s.static = append(s.static, num(iv), num(tau), num(burst), num(t.Window.Microseconds()))
		}
	case algorithms.Concurrency:
		short = "cc"
		parts = []string{"", ":l"}
		for _, t := range cfg.Tiers {
			s.static = append(s.static, num(t.Events), num(t.Window.Microseconds()))
		}
	case algorithms.SlidingLog:
		short = "sl"
		parts = []string{":m"}
		s.member = true
		for i, t := range cfg.Tiers {
			parts = append(parts, ":"+strconv.Itoa(i))
			s.static = append(s.static, num(t.Events), num(t.Window.Microseconds()))
		}
	case algorithms.SlidingWindow, algorithms.FixedWindow:
		short = "sw"
		if name == algorithms.FixedWindow {
			short = "fw"
		}
		for _, t := range cfg.Tiers {
			s.static = append(s.static, num(t.Events), num(t.Window.Microseconds()))
		}
	default:
		return nil, fmt.Errorf("redis store: algorithm %q is not supported", name)
	}
	if parts == nil {
		parts = []string{""}
	}
	for _, p := range parts {
		s.tails = append(s.tails, "}:"+short+":"+digest+p)
	}
	return s, nil
}

// setMargin changes the TTL margin of the keys s writes (tests: a long one
// keeps real time from expiring the keys of a replayed timeline).
func (s *Store) setMargin(d time.Duration) {
	s.static[0] = strconv.FormatInt(d.Milliseconds(), 10)
}

// Keys returns the Redis keys of key, in the order the script takes them.
func (s *Store) Keys(key string) []string {
	esc := EscapeKey(key)
	// One string holding every key, sliced: two allocations in all.
	n := 0
	for _, t := range s.tails {
		n += len(s.head) + len(esc) + len(t)
	}
	var b strings.Builder
	b.Grow(n)
	for _, t := range s.tails {
		b.WriteString(s.head)
		b.WriteString(esc)
		b.WriteString(t)
	}
	all := b.String()
	keys := make([]string, len(s.tails))
	for i, t := range s.tails {
		m := len(s.head) + len(esc) + len(t)
		keys[i], all = all[:m], all[m:]
	}
	return keys
}

// stateLayout names the layout of an algorithm's state key when it is not
// the first one, so that a changed layout gets new key names (through the
// config digest): instances of the old and the new version then never read
// each other's state (a WRONGTYPE, or a misread count) while an upgrade
// rolls out. "s": one string of integers (load_state in lib.lua), which
// replaced a hash. "o": sliding_log's runs scored by offset (the k-th unit
// in O(log n)), which replaced runs scored by timestamp.
var stateLayout = map[string]string{
	algorithms.GCRA:          "s",
	algorithms.TokenBucket:   "s",
	algorithms.LeakyBucket:   "s",
	algorithms.FixedWindow:   "s",
	algorithms.SlidingWindow: "s",
	algorithms.SlidingLog:    "o", // runs scored by offset, the :m key with the offsets
}

// Modes of a script call (ARGV[1]), boxed once.
var (
	modeTake any = "0"
	modeUndo any = "1"
	noNow    any = ""
)

// args returns ARGV: the common arguments (see lib.lua), then the
// algorithm's constants. Integers are passed as int64 (go-redis writes them
// in decimal; small ones box without allocating).
func (s *Store) args(mode any, now time.Time, cost int64, extra string) []any {
	a := make([]any, 0, 5+len(s.static))
	ns := noNow
	if !now.IsZero() {
		ns = now.UnixMicro()
	}
	a = append(a, mode, ns, cost, s.cr, extra)
	return append(a, s.static...)
}

// Take decides whether key may consume cost units at now (Redis TIME when
// now is zero) with one EVALSHA.
func (s *Store) Take(ctx context.Context, key string, now time.Time, cost int64) (algorithms.Decision, error) {
	cost = min(cost, s.maxCost)
	extra := ""
	if s.member {
		extra = s.idHead + strconv.FormatUint(s.counter.Add(1), 36)
	}
	res, err := s.call(ctx, s.Keys(key), s.args(modeTake, now, cost, extra)).Int64Slice()
	if err != nil {
		return algorithms.Decision{}, fmt.Errorf("redis store: %s: %w", s.l.Name(), err)
	}
	if len(res) < 8 {
		return algorithms.Decision{}, fmt.Errorf("redis store: %s: script answered %d values, want 8", s.l.Name(), len(res))
	}
	return algorithms.Decision{
		Allowed:    res[0] == 1,
		Tier:       int(res[1]),
		Limit:      res[2],
		Remaining:  res[3],
		ResetAfter: usDur(res[4]),
		RetryAfter: usDur(res[5]),
		Delay:      usDur(res[6]),
		Token:      uint64(res[7]),
	}, nil
}

// Undo gives back what an admitted Take of cost, which returned d, consumed
// (one EVALSHA; none when there is nothing to give back).
func (s *Store) Undo(ctx context.Context, key string, now time.Time, cost int64, d algorithms.Decision) error {
	if !d.Allowed {
		return nil
	}
	if s.l.Name() == algorithms.Concurrency {
		if d.Token == 0 {
			return nil
		}
	} else if cost <= 0 {
		return nil
	}
	cost = min(cost, s.maxCost)
	extra := strconv.FormatUint(d.Token, 10)
	err := s.call(ctx, s.Keys(key), s.args(modeUndo, now, cost, extra)).Err()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("redis store: %s undo: %w", s.l.Name(), err)
	}
	return nil
}

// call runs the script once: in the Pipeliner's next pipeline, or on its
// own (EVALSHA, EVAL on NOSCRIPT).
func (s *Store) call(ctx context.Context, keys []string, args []any) *redis.Cmd {
	if s.pipe == nil {
		return s.script.Run(ctx, s.c, keys, args...)
	}
	cmd, err := s.pipe.run(ctx, s.script, keys, args)
	if cmd == nil {
		cmd = redis.NewCmd(ctx)
		cmd.SetErr(err)
	}
	return cmd
}

func usDur(us int64) time.Duration {
	if us <= 0 {
		return 0
	}
	if us > int64(1<<63-1)/int64(time.Microsecond) {
		return time.Duration(1<<63 - 1)
	}
	return time.Duration(us) * time.Microsecond
}
