package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/store"
)

// The two-layer store (sync_interval): the model and its over-admission
// bound are in TWO_LAYER.md. This file holds the store and its goroutine;
// sync_take.go decides, sync_push.go pushes to Redis.

// syncScript is sync.lua, sent on its own (EVALSHA, EVAL on NOSCRIPT).
var syncScript = newScript("sync", false, nil)

// SyncOptions tunes a SyncStore.
type SyncOptions struct {
	// Interval is how often the instance pushes its counts to Redis and
	// reads the shared totals back. Required, > 0.
	Interval time.Duration

	// Now is the clock of Take and Undo when they get a zero now, and of
	// Sync (dropping idle keys, the time of the next sync). nil means
	// time.Now. Pass instants to Take from the same clock.
	Now func() time.Time

	// MaxKeys is the most keys held locally; beyond it a least recently
	// used key is evicted. Keys with counts Redis has not acknowledged are
	// kept instead while the store holds fewer than twice MaxKeys (see
	// TWO_LAYER.md). <= 0 means store.DefaultMaxKeys.
	MaxKeys int

	// OnError, if set, is called once for every sync that failed for some
	// keys (with their count and the first error), from the goroutine that
	// ran the sync. Those keys' counts are sent again at the next sync.
	OnError func(error)

	// OnRecover, if set, is called when a sync succeeds for every key
	// after syncs that failed, with how many failed, from the goroutine
	// that ran the sync: once per recovery, and at most once per
	// RecoverEvery on the Now clock (a recovery within it is reported at
	// the first sync after it, with the failures since the last report,
	// even when that sync has nothing to push), so that a Redis failing
	// every other sync does not log a line per interval.
	OnRecover func(failed int)
}

// RecoverEvery is the least time between two calls of a SyncStore's
// OnRecover.
const RecoverEvery = 10 * time.Second

// syncBatch is the most script calls sent in one pipeline round trip.
const syncBatch = 4096

// SyncStore is the two-layer store: it decides from local counters and
// pushes them to Redis every SyncOptions.Interval (the model and the
// over-admission bound are in TWO_LAYER.md). It
// implements store.Store, is safe for concurrent use, and never returns an
// error from Take or Undo. Call Close (or Destruct) to stop its goroutine
// and push what is left.
type SyncStore struct {
	c          redis.UniversalClient
	name       string
	sliding    bool
	cr         bool
	tiers      []syncParams
	interval   time.Duration
	intervalUS int64
	now        func() time.Time
	onError    func(error)
	head       string // "<prefix><zone>:{"
	keys       *store.LRU[syncEntry]
	blk        blocks
	blockFor   int64 // block_for in µs, 0: none
	blockLimit int64 // the Limit of a blocked decision (store.BlockLimit)

	nextSync atomic.Int64 // µs on the Now clock of the next scheduled sync
	syncMu   sync.Mutex   // one sync at a time

	// Held with syncMu: the syncs that failed since OnRecover was last
	// called, and when that was (µs on the Now clock; 0: never).
	// pushedOK: the last sync that had keys to push pushed them all.
	onRecover   func(failed int)
	failedSyncs int
	recoveredAt int64
	pushedOK    bool

	ctx       context.Context // cancelled by Close: stops a running sync
	cancel    context.CancelFunc
	stop      chan struct{}
	done      chan struct{} // closed when the goroutine has returned
	closeOnce sync.Once
	closeErr  error
}

var (
	_ store.Store   = (*SyncStore)(nil)
	_ store.Blocker = (*SyncStore)(nil)
)

type syncParams struct {
	events, window int64  // E, W (µs)
	budget         int64  // c = max(1, ceil(E * Interval / W))
	tail           string // "}:sy:<digest>:<tier>:"
	ttl            any    // PEXPIRE in ms: W (x2 for sliding) + Margin
}

// syncSlot is what an instance knows of one window of one tier.
type syncSlot struct {
	idx    int64 // window index: floor(t / W)
	shared int64 // total in Redis at the last sync that read it
	fly    int64 // sent by the sync in flight
	pend   int64 // counted here, not yet sent
	own    int64 // what this instance added to this window (Undo's bound)
}

func (sl *syncSlot) view() int64 { return sl.shared + sl.fly + sl.pend }

type syncTier struct {
	cur, prev syncSlot // prev.idx == cur.idx-1; prev stays empty for fixed_window
}

// roll moves the tier to window w (never back).
func (tr *syncTier) roll(w int64, sliding bool) {
	switch {
	case w <= tr.cur.idx:
		return
	case w == tr.cur.idx+1 && sliding:
		tr.prev = tr.cur
	default:
		tr.prev = syncSlot{idx: w - 1}
	}
	tr.cur = syncSlot{idx: w}
}

// slot returns the slot of window w, or nil when it is no longer held.
func (tr *syncTier) slot(w int64) *syncSlot {
	switch w {
	case tr.cur.idx:
		return &tr.cur
	case tr.prev.idx:
		return &tr.prev
	}
	return nil
}

// syncEntry is what an instance knows of one key (the Value of its entry
// in the LRU).
type syncEntry struct {
	esc      string // EscapeKey(key), set by the first sync
	last     int64  // latest instant seen (µs); time never goes back
	used     int64  // units admitted since the snapshot of the last successful sync
	usedSnap int64  // used at the snapshot of the sync in flight
	touched  int8   // syncs left to make for recent Takes (2 after a Take)
	inFlight bool
	tiers    []syncTier

	// blockedUntil is when the key's block ends (µs), as this instance
	// knows it; blockSend is a block this instance set (block_for) that
	// the next sync writes to Redis, blockFly the one the sync in flight
	// writes (0: none).
	blockedUntil, blockSend, blockFly int64
}

// clamp returns now in µs, never before e.last, and advances e.last.
func (e *syncEntry) clamp(now time.Time) int64 { return clampMicros(&e.last, now) }

// walkKeys calls f on every entry of keys with its shard locked (f may
// remove the entry from sh).
func walkKeys[V any](keys *store.LRU[V], f func(sh *store.Shard[V], ent *store.Entry[V])) {
	shards := keys.Shards()
	for si := range shards {
		sh := &shards[si]
		sh.Lock()
		sh.Walk(func(ent *store.Entry[V]) { f(sh, ent) })
		sh.Unlock()
	}
}

// undoEntry calls undo on key's entry, if keys holds it, with its shard
// locked, and now (clock() when zero): the Undo of the stores that keep
// keys locally.
func undoEntry[V any](keys *store.LRU[V], key string, now time.Time, clock func() time.Time, undo func(e *V, now time.Time)) {
	if now.IsZero() {
		now = clock()
	}
	sh := keys.Shard(key)
	sh.Lock()
	defer sh.Unlock()
	if ent := sh.Get(key); ent != nil {
		undo(&ent.Value, now)
	}
}

// clampMicros returns now in µs, never before *last (the latest instant a
// key saw: its time never goes back), and advances *last.
func clampMicros(last *int64, now time.Time) int64 {
	t := now.UnixMicro()
	if t < *last {
		return *last
	}
	*last = t
	return t
}

// NewSyncStore returns a SyncStore for l (an algorithm it counts: see
// script.sync) on c and starts its sync goroutine. Call Close when done with it.
func NewSyncStore(c redis.UniversalClient, l algorithms.Limiter, o Options, so SyncOptions) (*SyncStore, error) {
	s, err := newSyncStore(c, l, o, so)
	if err != nil {
		return nil, err
	}
	s.start()
	return s, nil
}

// newSyncStore builds a SyncStore without starting its goroutine (tests
// drive Sync themselves).
func newSyncStore(c redis.UniversalClient, l algorithms.Limiter, o Options, so SyncOptions) (*SyncStore, error) {
	if c == nil {
		return nil, errors.New("redis sync store: no client")
	}
	if l == nil {
		return nil, errors.New("redis sync store: no limiter")
	}
	name := l.Name()
	sc := scripts[name]
	if sc == nil || sc.sync == syncNone {
		_, summable := algorithms.Summable(name)
		return nil, fmt.Errorf("sync_interval works with algorithm %s, not %q", summable, name)
	}
	if so.Interval <= 0 {
		return nil, fmt.Errorf("sync_interval must be positive, got %s", so.Interval)
	}
	head, err := o.head("redis sync store")
	if err != nil {
		return nil, err
	}
	cfg := l.Config()
	if len(cfg.Tiers) == 0 {
		return nil, errors.New("redis sync store: no tier")
	}
	s := &SyncStore{
		c:          c,
		name:       name,
		sliding:    sc.sync == syncSliding,
		cr:         cfg.CountRejected,
		interval:   so.Interval,
		intervalUS: max(so.Interval.Microseconds(), 1),
		now:        so.Now,
		onError:    so.OnError,
		onRecover:  so.OnRecover,
		head:       head,
		blk:        blocks{c: c, head: head},
		blockLimit: store.BlockLimit(l),
	}
	if s.blockFor, err = blockMicros(o.BlockFor); err != nil {
		return nil, fmt.Errorf("redis sync store: block_for: %v", err)
	}
	if s.now == nil {
		s.now = time.Now
	}
	digest := configDigest("sync|" + name + "|")
	for i, t := range cfg.Tiers {
		w := t.Window.Microseconds()
		if t.Events <= 0 || w <= 0 {
			return nil, fmt.Errorf("redis sync store: limit %d: events and window must be positive", i+1)
		}
		// c = ceil(E * I / W), in floating point only when E * I overflows.
		var budget int64
		if hi, lo := mulOverflows(t.Events, s.intervalUS); hi {
			budget = int64(math.Min(math.Ceil(float64(t.Events)*float64(s.intervalUS)/float64(w)), math.MaxInt64/2))
		} else {
			budget = (lo + w - 1) / w
		}
		ttl := t.Window
		if s.sliding {
			ttl *= 2
		}
		s.tiers = append(s.tiers, syncParams{
			events: t.Events,
			window: w,
			budget: max(budget, 1),
			tail:   "}:sy:" + digest + ":" + strconv.Itoa(i) + ":",
			ttl:    (ttl + Margin + time.Millisecond - 1).Milliseconds(),
		})
	}

	maxKeys := so.MaxKeys
	if maxKeys <= 0 {
		maxKeys = store.DefaultMaxKeys
	}
	s.keys = store.NewLRU[syncEntry](maxKeys)
	s.nextSync.Store(s.now().UnixMicro() + s.intervalUS)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// mulOverflows reports whether a*b (both >= 0) overflows int64, and the
// product when it does not.
func mulOverflows(a, b int64) (bool, int64) {
	if a == 0 || b == 0 {
		return false, 0
	}
	if a > math.MaxInt64/b {
		return true, 0
	}
	return false, a * b
}

// Budget returns c, the units an instance may admit per interval between
// two syncs, of tier i.
func (s *SyncStore) Budget(i int) int64 { return s.tiers[i].budget }

func (s *SyncStore) start() {
	s.stop = make(chan struct{})
	s.done = make(chan struct{})
	go s.run()
}

// syncTimeout bounds one sync made by the goroutine, and the last one.
func (s *SyncStore) syncTimeout() time.Duration { return max(s.interval, 2*time.Second) }

func (s *SyncStore) run() {
	store.Every(s.interval, s.stop, s.done, func() {
		ctx, cancel := context.WithTimeout(s.ctx, s.syncTimeout())
		_ = s.Sync(ctx) // reported through OnError
		cancel()
	})
}

// Close stops the sync goroutine, waits for it, and pushes what is left
// with one last sync, whose error it returns. Later calls return nil and
// do nothing. Take and Undo still work after Close, locally.
func (s *SyncStore) Close() error {
	first := false
	s.closeOnce.Do(func() {
		first = true
		s.cancel() // abandon a sync stuck on Redis: its counts stay pending
		if s.stop != nil {
			close(s.stop)
			<-s.done
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.syncTimeout())
		defer cancel()
		s.closeErr = s.Sync(ctx)
	})
	if !first {
		return nil
	}
	return s.closeErr
}

// Destruct is Close, for caddy.Destructor.
func (s *SyncStore) Destruct() error { return s.Close() }

// Len returns how many keys the store holds locally.
func (s *SyncStore) Len() int { return s.keys.Len() }
