package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/store"
)

// The leasing store (lease): the model and its bounds are in LEASE.md.
// This file holds the store, its goroutine and the give-backs;
// lease_take.go decides.

// leaseScript is lease.lua after the functions of lib.lua it uses, like
// the algorithms' scripts, with the names of every leasing algorithm's
// tier constants from the table of algorithms.
var leaseScript = newScript("lease", true, map[string]string{leaseParamsSnippetName: leaseParamsSnippet(scripts)})

// leaseKind is what the digest of a lease's keys names: the algorithm, the
// burst and the tiers. A lease's state is not converted when the limits
// change (the lease mode refuses limits from the request): other limits
// are other keys.
func leaseKind(alg string, cfg algorithms.Config) string {
	var b strings.Builder
	fmt.Fprintf(&b, "lease|%s|%d|", alg, cfg.Burst)
	for _, t := range cfg.Tiers {
		fmt.Fprintf(&b, "%d/%d|", t.Events, t.Window.Microseconds())
	}
	return b.String()
}

// LeaseOptions tunes a LeaseStore.
type LeaseOptions struct {
	// Duration is how long a lease lasts at most (less when its window
	// ends first). Required, > 0.
	Duration time.Duration

	// Now is the clock of Take and Undo when they get a zero now, and of
	// the goroutine that gives back idle leases. nil means time.Now, and
	// the scripts then read Redis TIME; a Now set (tests) is also passed
	// to the scripts.
	Now func() time.Time

	// MaxKeys is the most keys held locally; beyond it the least recently
	// used key is evicted (its lease's units stay charged until it ends).
	// <= 0 means store.DefaultMaxKeys.
	MaxKeys int

	// OnError, if set, is called with the error of a give-back that failed
	// (the units stay charged until the lease's state expires).
	OnError func(error)
}

// LeaseStore is the leasing store: an instance takes a batch of units of a
// key from Redis in one script call and admits from it locally, never
// more than the limit across instances (LEASE.md). It implements
// store.Store and is safe for concurrent use. Call Close (or Destruct) to
// stop its goroutine and give back the units left.
type LeaseStore struct {
	base    *Store // key names, the script's constants, the Pipeliner
	alg     string
	bucket  bool   // token_bucket or gcra: give back only before the end
	tail    string // "}:ls:<digest>"
	id      string // this store in the instances hash
	dur     int64  // lease duration, µs
	pinned  bool   // Now set: pass its instants to the scripts
	now     func() time.Time
	onError func(error)
	keys    *store.LRU[leaseEntry]
	gen     atomic.Uint64 // lease generations (Decision.Token of a local admission)

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

var _ store.Store = (*LeaseStore)(nil)

// CheckLease reports why the leasing store cannot serve keys of algorithm
// name (counting rejected requests if countRejected), or nil. It takes the
// algorithms it can charge exactly (see script.lease), listed in the error
// in the order of algorithms.Names, and not count_rejected.
func CheckLease(name string, countRejected bool) error {
	if !leases(name) {
		return fmt.Errorf("lease works with algorithm %s, not %s", algorithms.NamesWhere(func(a algorithms.Algorithm) bool { return leases(a.Name) }, " or "), name)
	}
	if countRejected {
		return errors.New("lease does not apply with count_rejected: a denial decided locally is not counted in Redis")
	}
	return nil
}

// leases reports whether the leasing store charges algorithm name.
func leases(name string) bool {
	s := scripts[name]
	return s != nil && s.lease != leaseNone
}

// NewLeaseStore returns a LeaseStore for l on c (o names the keys and may
// carry a Pipeliner) and starts its goroutine. Call Close when done.
func NewLeaseStore(c redis.UniversalClient, l algorithms.Limiter, o Options, lo LeaseOptions) (*LeaseStore, error) {
	s, err := newLeaseStore(c, l, o, lo)
	if err != nil {
		return nil, err
	}
	s.stop, s.done = make(chan struct{}), make(chan struct{})
	go s.run()
	return s, nil
}

// newLeaseStore builds a LeaseStore without its goroutine (tests give back
// with Reap).
func newLeaseStore(c redis.UniversalClient, l algorithms.Limiter, o Options, lo LeaseOptions) (*LeaseStore, error) {
	if l != nil {
		if err := CheckLease(l.Name(), l.Config().CountRejected); err != nil {
			return nil, fmt.Errorf("redis lease store: %v", err)
		}
	}
	if lo.Duration <= 0 {
		return nil, fmt.Errorf("lease must be positive, got %s", lo.Duration)
	}
	base, err := NewStore(c, l, o)
	if err != nil {
		return nil, err
	}
	cfg := l.Config()
	name := l.Name()
	s := &LeaseStore{
		base:    base,
		alg:     name,
		bucket:  scripts[name].lease == leaseBucket,
		tail:    "}:ls:" + configDigest(leaseKind(name, cfg)),
		id:      base.idHead[:len(base.idHead)-1],
		dur:     max(lo.Duration.Microseconds(), 1),
		pinned:  lo.Now != nil,
		now:     lo.Now,
		onError: lo.OnError,
	}
	if s.now == nil {
		s.now = time.Now
	}
	maxKeys := lo.MaxKeys
	if maxKeys <= 0 {
		maxKeys = store.DefaultMaxKeys
	}
	s.keys = store.NewLRU[leaseEntry](maxKeys)
	return s, nil
}

// Keys returns the Redis keys of key: its state and its instances hash.
func (s *LeaseStore) Keys(key string) []string {
	k := s.base.head + EscapeKey(key) + s.tail
	return []string{k, k + ":n"}
}

// args returns ARGV of a call: give back units of the lease ending at
// stamp, granted at granted (Redis µs), then (mode take) take cost and
// lease up to want units more.
func (s *LeaseStore) args(mode any, now time.Time, cost, want, units, stamp, granted int64) []any {
	a := make([]any, 0, 5+len(s.base.static))
	ns := noNow
	if s.pinned && !now.IsZero() {
		ns = now.UnixMicro()
	}
	extra := s.alg + " " + s.id + " " + strconv.FormatInt(want, 10) + " " + strconv.FormatInt(s.dur, 10) +
		" " + strconv.FormatInt(units, 10) + " " + strconv.FormatInt(stamp, 10) + " " + strconv.FormatInt(granted, 10)
	a = append(a, mode, ns, cost, any("0"), extra)
	return append(a, s.base.static...)
}

// call runs one script call: in the Pipeliner's next pipeline, or alone.
func (s *LeaseStore) call(ctx context.Context, keys []string, args []any) reply {
	if s.base.pipe == nil {
		return replyOf(evalOne(ctx, s.base.c, leaseScript, keys, args))
	}
	return s.base.pipe.run(ctx, leaseScript, keys, args)
}

// reapEvery is how often the goroutine gives back idle leases: a quarter
// of the lease duration, so a lease idle for half of it goes back.
func (s *LeaseStore) reapEvery() time.Duration {
	return max(algorithms.Micros(s.dur)/4, 10*time.Millisecond)
}

func (s *LeaseStore) run() {
	store.Every(s.reapEvery(), s.stop, s.done, func() {
		ctx, cancel := context.WithTimeout(context.Background(), max(s.reapEvery(), 2*time.Second))
		_ = s.Reap(ctx, false) // reported through OnError
		cancel()
	})
}

// Reap gives back the unused units of every lease that ended or that saw
// no Take for half the lease duration (all of them with all set: Close),
// in pipelines, and drops the keys idle for two lease durations. The
// goroutine calls it; tests call it directly.
func (s *LeaseStore) Reap(ctx context.Context, all bool) error {
	nowT := s.now()
	t := nowT.UnixMicro()
	var calls []*evalCall
	walkKeys(s.keys, func(sh *leaseShard, ent *store.Entry[leaseEntry]) {
		e := &ent.Value
		if e.refill != nil {
			return
		}
		if e.left > 0 && (all || t >= e.ends || t-e.used >= s.dur/2) {
			if !s.bucket || t < e.ends {
				calls = append(calls, &evalCall{script: leaseScript, keys: s.Keys(ent.Key()), args: s.args(modeUndo, nowT, 0, 0, e.left, e.stamp, e.granted)})
			}
			e.left = 0
		}
		// A denial is kept until its Retry-After, for TakeHeld.
		if e.left == 0 && t-e.last >= 2*s.dur && t >= e.refused() {
			sh.Remove(ent)
		}
	})
	var first error
	failed := 0
	for lo := 0; lo < len(calls); lo += syncBatch {
		batch := calls[lo:min(lo+syncBatch, len(calls))]
		for _, cmd := range evalAll(ctx, s.base.c, batch, make([]*redis.Cmd, 0, len(batch))) {
			if err := cmd.Err(); err != nil {
				failed++
				if first == nil {
					first = err
				}
			}
		}
	}
	if first == nil {
		return nil
	}
	err := fmt.Errorf("redis lease store: %s: %d of %d give-backs failed: %w", s.alg, failed, len(calls), first)
	if s.onError != nil {
		s.onError(err)
	}
	return err
}

// Close stops the goroutine and gives back the units of every lease; it
// returns the error of that give-back. Later calls return nil. Take still
// works after Close.
func (s *LeaseStore) Close() error {
	first := false
	s.closeOnce.Do(func() {
		first = true
		if s.stop != nil {
			close(s.stop)
			<-s.done
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s.closeErr = s.Reap(ctx, true)
	})
	if !first {
		return nil
	}
	return s.closeErr
}

// Destruct is Close, for caddy.Destructor.
func (s *LeaseStore) Destruct() error { return s.Close() }

// Len returns how many keys the store holds locally.
func (s *LeaseStore) Len() int { return s.keys.Len() }
