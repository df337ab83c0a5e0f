package redisstore

import (
	"crypto/rand"
	"crypto/sha256"
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

// Margin is added to every key's TTL beyond the time its state needs.
const Margin = time.Second

// instanceID tells this process's sorted-set members apart from other
// instances'.
var instanceID = func() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return strconv.FormatUint(binary.LittleEndian.Uint64(b[:]), 36)
}()

// newTokens returns a Store's first concurrency lease token less one:
// random in [2^52, 2^52+2^51), so that its tokens stay below 2^53 (exact
// in the script's doubles), above the time-like tokens that versions
// drawing them in the script made (µs since 1970: below 2^52 until 2112),
// and apart from other Stores' and instances'.
func newTokens() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return 1<<52 + binary.LittleEndian.Uint64(b[:])&(1<<51-1)
}

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

	// BlockFor is how long a key is refused outright after a Take denies
	// it (block_for), by every Store of the zone: its Takes are then
	// refused without counting until the block ends. Rounded up to whole
	// microseconds, at most algorithms.MaxWindow; <= 0 means no block.
	BlockFor time.Duration
}

// Store keeps one zone's state in Redis. It is safe for concurrent use.
type Store struct {
	blocks // Block, Unblock, BlockedUntil

	c       redis.UniversalClient
	l       algorithms.Limiter
	script  *script
	head    string   // "<prefix><zone>:{"
	tails   []string // "}:<alg>:<digest>[:<part>]", one per state key, then blockTail
	static  []any    // ARGV after the common arguments
	cr      any      // count_rejected: "1" or "0"
	maxCost int64    // costs above it decide as it does (see Take)
	counter atomic.Uint64
	idHead  string // "<instance id>-<store id>-"
	// tokens + counter is a concurrency lease's token: unique across
	// Stores and instances (see newTokens), made here rather than in the
	// script so that a take whose answer was lost can be forgotten.
	tokens uint64
	pipe   *Pipeliner
	// blockLimit is the Limit of a blocked decision (store.BlockLimit).
	blockLimit int64
	blockFor   string // block_for in µs, the last ARGV
	enc        encoded
}

var (
	_ store.Store   = (*Store)(nil)
	_ store.Blocker = (*Store)(nil)
)

var storeSeq atomic.Uint64

// NewStore returns a Store running l's script on c.
func NewStore(c redis.UniversalClient, l algorithms.Limiter, o Options) (*Store, error) {
	if c == nil {
		return nil, errors.New("redis store: no client")
	}
	if l == nil {
		return nil, errors.New("redis store: no limiter")
	}
	head, err := o.head("redis store")
	if err != nil {
		return nil, err
	}
	name := l.Name()
	sc := scripts[name]
	if sc == nil {
		return nil, fmt.Errorf("redis store: no Lua script for algorithm %q", name)
	}
	blockUS, err := blockMicros(o.BlockFor)
	if err != nil {
		return nil, fmt.Errorf("redis store: block_for: %v", err)
	}
	s := &Store{
		blocks:   blocks{c: c, head: head},
		c:        c,
		script:   sc,
		head:     head,
		idHead:   instanceID + "-" + strconv.FormatUint(storeSeq.Add(1), 36) + "-",
		tokens:   newTokens(),
		pipe:     o.Pipeliner,
		blockFor: strconv.FormatInt(blockUS, 10),
	}
	if err := s.limit(l); err != nil {
		return nil, err
	}
	return s, nil
}

// limit makes s decide under l: the script's constants of l's tiers, and
// the key names, which depend on the algorithm and the number of tiers
// only, so that a key's state carries over when its limits change.
func (s *Store) limit(l algorithms.Limiter) error {
	name, sc := l.Name(), s.script
	cfg := l.Config()
	// The scripts compute exactly within the algorithms' bounds, which New
	// checks; l may have been built otherwise.
	if err := algorithms.Check(name, cfg); err != nil {
		return fmt.Errorf("redis store: %v", err)
	}
	// Twice the largest capacity: a cost above every tier's capacity is
	// refused by every tier, and with count_rejected a bucket counts at
	// most twice its capacity, so a larger cost decides exactly as this
	// one, which keeps the scripts' doubles exact (a cost comes from a
	// request and may be up to 2^63-1).
	var maxCap int64
	for _, t := range cfg.Tiers {
		maxCap = max(maxCap, algorithms.Capacity(t.Events, cfg.Burst, name))
	}
	s.l, s.maxCost, s.cr, s.blockLimit = l, 2*maxCap, any("0"), store.BlockLimit(l)
	if cfg.CountRejected {
		s.cr = any("1")
	}
	kind := name + "|"
	if sc.layout != "" {
		kind += sc.layout + "|"
	}
	digest := configDigest(kind)

	num := func(v int64) any { return strconv.FormatInt(v, 10) }
	s.static = []any{num(Margin.Milliseconds()), num(int64(len(cfg.Tiers)))}
	for i, t := range cfg.Tiers {
		vs, err := sc.tier(t, cfg.Burst, algorithms.Capacity(t.Events, cfg.Burst, name))
		if err != nil {
			return fmt.Errorf("redis store: %s: limit %d: %v", name, i+1, err)
		}
		for _, v := range vs {
			s.static = append(s.static, num(v))
		}
	}
	s.static = append(s.static, s.blockFor) // the last ARGV
	s.tails = nil
	for _, p := range sc.parts(len(cfg.Tiers)) {
		s.tails = append(s.tails, "}:"+sc.short+":"+digest+p)
	}
	s.tails = append(s.tails, blockTail) // the last KEYS
	s.encode()
	return nil
}

// Under returns a Store deciding under l, a Limiter of s's algorithm, over
// the same keys: what a key has used under one limit counts under the
// other (the scripts convert a state saved under other limits, as
// algorithms.Relimiter does).
func (s *Store) Under(l algorithms.Limiter) (store.Store, error) {
	if l.Name() != s.l.Name() {
		return nil, fmt.Errorf("redis store of algorithm %s: cannot decide under %s", s.l.Name(), l.Name())
	}
	u := &Store{
		blocks:   s.blocks,
		c:        s.c,
		script:   s.script,
		head:     s.head,
		idHead:   instanceID + "-" + strconv.FormatUint(storeSeq.Add(1), 36) + "-",
		tokens:   newTokens(),
		pipe:     s.pipe,
		blockFor: s.blockFor,
	}
	if err := u.limit(l); err != nil {
		return nil, err
	}
	u.static[0] = s.static[0] // the TTL margin
	u.encode()
	return u, nil
}

// head returns "<prefix><zone>:{", the start of every key of the zone, or
// what (a store's name) refuses in o.
func (o Options) head(what string) (string, error) {
	if err := CheckKeyPrefix(o.KeyPrefix); err != nil {
		return "", fmt.Errorf("%s: %v", what, err)
	}
	return o.KeyPrefix + EscapeKey(o.Zone) + ":{", nil
}

// CheckKeyPrefix refuses a key prefix with a brace: the keys of one user
// key must share their Cluster hash tag, the first {...} of the name.
func CheckKeyPrefix(p string) error {
	if strings.ContainsAny(p, "{}") {
		return fmt.Errorf("key_prefix %q must not contain a brace ('{' or '}' would change the Cluster hash tag)", p)
	}
	return nil
}

// configDigest is the config digest of the key names: 8 hex digits of a
// SHA-256 of kind, the algorithm and the layout of its state. The limits
// are not part of it: a key's state carries over when they change, and the
// scripts interpret it under the limits of each call.
func configDigest(kind string) string {
	sum := sha256.Sum256([]byte(kind))
	return hex.EncodeToString(sum[:])[:8]
}

// Keys returns the Redis keys of key's state, in the order the script
// takes them (the key's block, BlockKey, comes after them).
func (s *Store) Keys(key string) []string {
	keys := s.scriptKeys(key)
	return keys[:len(keys)-1]
}

// scriptKeys returns the KEYS of a script call for key: the state's keys,
// then the key's block.
func (s *Store) scriptKeys(key string) []string {
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
