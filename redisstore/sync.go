package redisstore

// The two-layer store (sync_interval): every Caddy instance decides locally
// and pushes its counts to Redis once per interval.
//
// # Model
//
// Only the counter algorithms, fixed_window and sliding_window, whose state
// is a count per window that instances can add up. Per tier (E = Events,
// W = Window in µs) windows are aligned to the Unix epoch: window index
// w = floor(t / W), computed on every call from the instant t of that call.
// Per key and tier an instance keeps, for the current window w (and for
// sliding_window the previous one, w-1):
//
//	shared  the total of the window in Redis, as the last sync read it back
//	        (this instance's pushed units included)
//	fly     units sent by the sync in flight, not yet acknowledged
//	pend    units counted here since, not yet sent
//	view    = shared + fly + pend: this instance's best knowledge of the
//	        window's total
//
// and per key `used`: the units it admitted since the snapshot of its last
// successful sync (its per-interval budget use).
//
// Take never calls Redis. With view counts in place of the counts, it is the
// decision of algorithms/fixed_window.go or algorithms/sliding_window.go
// (sliding: estimate = view(w-1) * (W - elapsed) / W + view(w), the same
// float64 weighting), plus a budget: it also refuses when
//
//	used > 0 and used + cost > c,  c = max(1, ceil(E * Interval / W))
//
// in some tier (a request is never refused by the budget alone when used is
// 0, so a cost above c is not starved). An admitted request adds cost to
// pend and used in every tier; a denied one adds nothing, unless
// CountRejected: then pend += min(cost, E - view) in every tier, as the
// algorithms do (used is left alone: it counts admissions). A single
// instance whose syncs succeed decides exactly as the memory store does,
// except for the budget (which paces it to c units per interval).
//
// Every Interval a goroutine (Sync) sends, for every key with units not yet
// sent or with a Take in the last two intervals (so that after a burst every
// instance reads the totals back once more, after the others pushed theirs;
// a key quiet for longer costs nothing), ONE call of sync.lua: per tier it
// INCRBYs the counter of each window held by the delta (fly) and reads the
// totals back; all keys' calls of one sync go in one go-redis pipeline (the
// Cluster client splits it by slot). On success shared = total and fly = 0;
// used drops by what it was at the snapshot. On failure fly returns to pend,
// to be sent next time: no count is lost, and Takes go on deciding on the
// last known totals.
//
// Undo (of an admitted Take) gives back locally: in every tier whose window
// is still current, pend -= min(cost, own) where own is what this instance
// added to that window. If the units were not sent yet this just cancels
// them; if they were, the next sync pushes a negative delta. used -= cost.
//
// Redis keys, one counter per tier and window, sharing the key's hash tag:
//
//	<key_prefix><zone>:{<escaped key>}:sy:<digest>:<tier>:<window index>
//
// Each is PEXPIREd on every write: W + Margin (fixed_window), 2W + Margin
// (sliding_window, since the previous window is read).
//
// A key whose last Take or Undo was before the current window
// (fixed_window) or before the previous window (sliding_window), in every
// tier, and that has nothing to send, is dropped locally at the next sync.
// MaxKeys bounds the keys held; beyond it the least recently used key is
// evicted (with whatever it had not sent yet).
//
// # Over-admission bound
//
// With N instances on one clock, every sync succeeding and no key evicted,
// at any instant and for every tier, the units admitted (less those
// undone) in the current window (fixed_window), or the sliding estimate
// computed from all of them (sliding_window), is at most
//
//	E + (N-1) * max(c, largest single cost)
//
// (with cost 1: E + (N-1) * c). Why: Redis runs each sync call atomically,
// so a sync of instance i at Redis time r_i pushes everything i counted
// before its snapshot and reads back S(r_i), the totals at r_i. For every
// instance take the last sync it applied before its last admission, and
// let j be the instance whose sync ran last in Redis. At its last admission
// j checked S(r_j) + (its own units since that snapshot) + cost <= E. What
// that sum misses is, for every other instance k, only what k admitted after
// the snapshot of its own sync r_k <= r_j (everything before was pushed at
// r_k, so is in S(r_j)); and k's admissions since that snapshot are what its
// budget bounds: `used` is only reduced by a sync that succeeds (or by an
// Undo, which takes as many units back), so they are at most c (or one
// request of a larger cost, admitted with used == 0). A
// sync still in flight only moves units from pend to fly: they remain in
// the view of their own instance and in its `used`. A window that rolled
// locally starts with view 0, which is S at any instant before that window
// began, so the argument holds with r = that instant; a key dropped for
// inactivity likewise. For sliding_window the missed units of the two
// windows together are at most c per instance, and weigh at most 1.
// The README's "instances x rate x interval" is N * E * Interval / W, which
// is at least (N-1) * c whenever E * Interval / W >= N-1.
//
// Outside those conditions the bound weakens but stays finite: when a sync
// fails, `used` is reset all the same (the instance goes on at c units per
// interval instead of stopping), and each instance keeps deciding on its
// own counts and the last totals it read, so during a Redis outage at most
// N * E units per window pass; a sync whose reply was lost may be counted
// twice (over-counting only refuses more). An evicted key starts again from
// view 0.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/store"
)

// syncScript is sync.lua, sent on its own (EVALSHA, EVAL on NOSCRIPT).
var syncScript = func() *redis.Script {
	src, err := scriptFS.ReadFile("sync.lua")
	if err != nil {
		panic(err)
	}
	return redis.NewScript(string(src))
}()

// SyncOptions tunes a SyncStore.
type SyncOptions struct {
	// Interval is how often the instance pushes its counts to Redis and
	// reads the shared totals back. Required, > 0.
	Interval time.Duration

	// Now is the clock of Take and Undo when they get a zero now, and of
	// Sync (dropping idle keys, the time of the next sync). nil means
	// time.Now. Pass instants to Take from the same clock.
	Now func() time.Time

	// MaxKeys is the most keys held locally; beyond it the least recently
	// used key is evicted. <= 0 means store.DefaultMaxKeys.
	MaxKeys int

	// OnError, if set, is called once for every sync that failed for some
	// keys (with their count and the first error), from the goroutine that
	// ran the sync. Those keys' counts are sent again at the next sync.
	OnError func(error)
}

// syncBatch is the most script calls sent in one pipeline round trip.
const syncBatch = 4096

// syncCacheLine pads shards so that two shards' locks never share a line.
const syncCacheLine = 128

// SyncStore is the two-layer store: it decides from local counters and
// pushes them to Redis every SyncOptions.Interval (the model and the
// over-admission bound are explained at the top of sync.go). It
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

	seed   maphash.Seed
	mask   uint64
	shards []syncShard

	nextSync atomic.Int64 // µs on the Now clock of the next scheduled sync
	syncMu   sync.Mutex   // one sync at a time

	ctx       context.Context // cancelled by Close: stops a running sync
	cancel    context.CancelFunc
	stop      chan struct{}
	done      chan struct{} // closed when the goroutine has returned
	closeOnce sync.Once
	closeErr  error
}

var _ store.Store = (*SyncStore)(nil)

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

type syncEntry struct {
	key      string
	esc      string // EscapeKey(key), set by the first sync
	last     int64  // latest instant seen (µs); time never goes back
	used     int64  // units admitted since the snapshot of the last successful sync
	usedSnap int64  // used at the snapshot of the sync in flight
	touched  int8   // syncs left to make for recent Takes (2 after a Take)
	inFlight bool
	tiers    []syncTier

	prev, next *syncEntry // LRU list
}

// clamp returns now in µs, never before e.last, and advances e.last.
func (e *syncEntry) clamp(now time.Time) int64 {
	t := now.UnixMicro()
	if t < e.last {
		return e.last
	}
	e.last = t
	return t
}

type syncShardData struct {
	mu      sync.Mutex
	entries map[string]*syncEntry
	lru     syncEntry // sentinel: lru.next most recently used, lru.prev least
	budget  int
}

type syncShard struct {
	syncShardData
	_ [(syncCacheLine - unsafe.Sizeof(syncShardData{})%syncCacheLine) % syncCacheLine]byte
}

func (sh *syncShard) unlink(e *syncEntry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
}

func (sh *syncShard) pushFront(e *syncEntry) {
	e.prev, e.next = &sh.lru, sh.lru.next
	sh.lru.next.prev = e
	sh.lru.next = e
}

func (sh *syncShard) remove(e *syncEntry) {
	sh.unlink(e)
	delete(sh.entries, e.key)
}

// NewSyncStore returns a SyncStore for l (fixed_window or sliding_window)
// on c and starts its sync goroutine. Call Close when done with it.
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
	if name != algorithms.FixedWindow && name != algorithms.SlidingWindow {
		return nil, fmt.Errorf("sync_interval works with algorithm %s or %s, not %q", algorithms.FixedWindow, algorithms.SlidingWindow, name)
	}
	if so.Interval <= 0 {
		return nil, fmt.Errorf("sync_interval must be positive, got %s", so.Interval)
	}
	if strings.ContainsAny(o.KeyPrefix, "{}") {
		return nil, fmt.Errorf("redis sync store: key_prefix %q must not contain a brace ('{' or '}' would change the Cluster hash tag)", o.KeyPrefix)
	}
	cfg := l.Config()
	if len(cfg.Tiers) == 0 {
		return nil, errors.New("redis sync store: no tier")
	}
	s := &SyncStore{
		c:          c,
		name:       name,
		sliding:    name == algorithms.SlidingWindow,
		cr:         cfg.CountRejected,
		interval:   so.Interval,
		intervalUS: max(so.Interval.Microseconds(), 1),
		now:        so.Now,
		onError:    so.OnError,
		head:       o.KeyPrefix + EscapeKey(o.Zone) + ":{",
		seed:       maphash.MakeSeed(),
	}
	if s.now == nil {
		s.now = time.Now
	}
	h := sha256.New()
	fmt.Fprintf(h, "sync|%s|", name)
	for _, t := range cfg.Tiers {
		fmt.Fprintf(h, "%d/%d|", t.Events, t.Window.Microseconds())
	}
	digest := hex.EncodeToString(h.Sum(nil))[:8]
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
	n := 64
	for n > maxKeys {
		n >>= 1
	}
	s.mask = uint64(n - 1)
	s.shards = make([]syncShard, n)
	base, extra := maxKeys/n, maxKeys%n
	for i := range s.shards {
		sh := &s.shards[i]
		sh.entries = make(map[string]*syncEntry)
		sh.lru.next, sh.lru.prev = &sh.lru, &sh.lru
		sh.budget = base
		if i < extra {
			sh.budget++
		}
	}
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
	defer close(s.done)
	tk := time.NewTicker(s.interval)
	defer tk.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tk.C:
			ctx, cancel := context.WithTimeout(s.ctx, s.syncTimeout())
			_ = s.Sync(ctx) // reported through OnError
			cancel()
		}
	}
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
func (s *SyncStore) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.entries)
		sh.mu.Unlock()
	}
	return n
}

func (s *SyncStore) shardFor(key string) *syncShard {
	return &s.shards[maphash.String(s.seed, key)&s.mask]
}

// entry returns key's entry, created at t if new (evicting the shard's
// least recently used one when full), and marks it most recently used.
// The shard's lock is held.
func (s *SyncStore) entry(sh *syncShard, key string, now time.Time) *syncEntry {
	if e := sh.entries[key]; e != nil {
		if sh.lru.next != e {
			sh.unlink(e)
			sh.pushFront(e)
		}
		return e
	}
	var e *syncEntry
	if len(sh.entries) >= sh.budget && sh.lru.prev != &sh.lru {
		old := sh.lru.prev
		sh.remove(old)
		if !old.inFlight { // a sync in flight still refers to it
			e = old
			*e = syncEntry{tiers: e.tiers}
		}
	}
	if e == nil {
		e = &syncEntry{tiers: make([]syncTier, len(s.tiers))}
	}
	e.key = key
	e.last = math.MinInt64
	t := now.UnixMicro()
	for i := range e.tiers {
		w := floorDiv(t, s.tiers[i].window)
		e.tiers[i] = syncTier{cur: syncSlot{idx: w}, prev: syncSlot{idx: w - 1}}
	}
	sh.entries[key] = e
	sh.pushFront(e)
	return e
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// overBudget reports whether the per-interval budget of tier p refuses
// cost after used units.
func overBudget(p *syncParams, used, cost int64) bool {
	return used > 0 && (cost > p.budget || used > p.budget-cost)
}

// budgetWait is how long until the next sync renews the budget, as far as
// this instance knows (a whole interval when the sync is overdue).
func (s *SyncStore) budgetWait(t int64) int64 {
	if d := s.nextSync.Load() - t; d > 0 {
		return d
	}
	return s.intervalUS
}

// Take decides whether key may consume cost units at now (the Now clock
// when zero), from local state only. It never fails.
func (s *SyncStore) Take(_ context.Context, key string, now time.Time, cost int64) (algorithms.Decision, error) {
	if now.IsZero() {
		now = s.now()
	}
	if cost < 0 {
		cost = 0
	}
	sh := s.shardFor(key)
	sh.mu.Lock()
	e := s.entry(sh, key, now)
	t := e.clamp(now)
	e.touched = 2
	ok := true
	for i := range e.tiers {
		p, tr := &s.tiers[i], &e.tiers[i]
		tr.roll(floorDiv(t, p.window), s.sliding)
		if cost > p.events || overBudget(p, e.used, cost) || !s.fits(p, tr, t, cost) {
			ok = false
		}
	}
	switch {
	case ok:
		e.used += cost
		for i := range e.tiers {
			tr := &e.tiers[i]
			tr.cur.pend += cost
			tr.cur.own += cost
		}
	case s.cr:
		for i := range e.tiers {
			tr := &e.tiers[i]
			if add := min(cost, s.tiers[i].events-tr.cur.view()); add > 0 {
				tr.cur.pend += add
				tr.cur.own += add
			}
		}
	}
	pk := algorithms.TierPick{Allowed: ok}
	for i := range e.tiers {
		p, tr := &s.tiers[i], &e.tiers[i]
		start := tr.cur.idx * p.window
		C := tr.cur.view()
		var rem, reset, wait int64
		if s.sliding {
			P := tr.prev.view()
			el := t - start
			switch {
			case C > 0:
				reset = start + 2*p.window - t
			case P > 0:
				reset = start + p.window - t
			}
			if c := math.Ceil(swWeighted(p.window, P, el)); c < float64(p.events-C) {
				rem = p.events - C - int64(c)
			}
			if !ok {
				wait = swWait(p, P, C, start, t, cost)
			}
		} else {
			rem = p.events - C
			if C > 0 {
				reset = start + p.window - t
			}
			if !ok {
				switch {
				case cost > p.events:
					wait = p.window
				case C > p.events-cost:
					wait = start + p.window - t
				}
			}
		}
		if !ok && cost <= p.events && overBudget(p, e.used, cost) {
			wait = max(wait, s.budgetWait(t))
		}
		pk.Offer(i, p.events, rem, reset, wait)
	}
	sh.mu.Unlock()
	return pk.Decision(), nil
}

// fits reports whether cost fits tier p's window counts at t (the tier
// rolled to t).
func (s *SyncStore) fits(p *syncParams, tr *syncTier, t, cost int64) bool {
	if !s.sliding {
		C := tr.cur.view()
		return C <= p.events-cost
	}
	return swFits(p, tr.prev.view(), tr.cur.view(), t-tr.cur.idx*p.window, cost)
}

// Undo gives back what an admitted Take of cost, which returned d,
// consumed, in every tier whose window is still current: locally, or with
// a negative delta at the next sync when those units were sent already.
func (s *SyncStore) Undo(_ context.Context, key string, now time.Time, cost int64, d algorithms.Decision) error {
	if !d.Allowed || cost <= 0 {
		return nil
	}
	if now.IsZero() {
		now = s.now()
	}
	sh := s.shardFor(key)
	sh.mu.Lock()
	if e := sh.entries[key]; e != nil {
		t := e.clamp(now)
		for i := range e.tiers {
			tr := &e.tiers[i]
			if tr.cur.idx == floorDiv(t, s.tiers[i].window) {
				amt := min(cost, tr.cur.own)
				tr.cur.own -= amt
				tr.cur.pend -= amt
			}
		}
		e.used -= min(e.used, cost)
	}
	sh.mu.Unlock()
	return nil
}

// syncCall is one key's script call of a sync.
type syncCall struct {
	sh   *syncShard
	e    *syncEntry
	keys []string
	args []any
	wins []int64 // window index of every key
	res  []int64
	err  error
}

// Sync pushes every key's unsent counts to Redis and reads the shared
// totals back: one script call per key with unsent counts or a Take in the
// last two intervals, all in one pipeline. Keys idle for a whole window are
// dropped first. The goroutine calls it every Interval; tests call it
// directly. It returns (and reports through OnError) an error when some
// keys could not be synced; their counts are kept for the next sync.
func (s *SyncStore) Sync(ctx context.Context) error {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	now := s.now().UnixMicro()
	s.nextSync.Store(now + s.intervalUS)
	calls := s.snapshot(now)
	if len(calls) == 0 {
		return nil
	}
	for lo := 0; lo < len(calls); lo += syncBatch {
		s.push(ctx, calls[lo:min(lo+syncBatch, len(calls))])
	}
	failed := 0
	var first error
	for _, c := range calls {
		if c.err == nil && len(c.res) != len(c.keys) {
			c.err = fmt.Errorf("script answered %d values, want %d", len(c.res), len(c.keys))
		}
		if c.err != nil {
			failed++
			if first == nil {
				first = c.err
			}
		}
		s.apply(c)
	}
	if failed == 0 {
		return nil
	}
	err := fmt.Errorf("redis sync store: %s: %d of %d keys not synced (kept for the next sync): %w", s.name, failed, len(calls), first)
	// A sync abandoned by Close is not worth a report: Close pushes again.
	if s.onError != nil && (s.ctx.Err() == nil || !errors.Is(first, context.Canceled)) {
		s.onError(err)
	}
	return err
}

// snapshot drops idle keys and prepares the call of every key to sync,
// moving its unsent counts from pend to fly.
func (s *SyncStore) snapshot(now int64) []*syncCall {
	var calls []*syncCall
	kpt := 1
	if s.sliding {
		kpt = 2
	}
	for si := range s.shards {
		sh := &s.shards[si]
		sh.mu.Lock()
		for e := sh.lru.next; e != &sh.lru; {
			next := e.next
			if !s.needsSync(e) {
				if !e.inFlight && s.idle(e, now) {
					sh.remove(e)
				}
				e = next
				continue
			}
			if e.esc == "" {
				e.esc = EscapeKey(e.key)
			}
			n := len(e.tiers) * kpt
			c := &syncCall{
				sh:   sh,
				e:    e,
				keys: make([]string, 0, n),
				args: make([]any, 0, 2*n),
				wins: make([]int64, 0, n),
			}
			for i := range e.tiers {
				p, tr := &s.tiers[i], &e.tiers[i]
				for k, sl := range [2]*syncSlot{&tr.cur, &tr.prev} {
					if k == 1 && !s.sliding {
						break
					}
					sl.fly += sl.pend
					sl.pend = 0
					c.keys = append(c.keys, s.head+e.esc+p.tail+strconv.FormatInt(sl.idx, 10))
					c.args = append(c.args, sl.fly, p.ttl)
					c.wins = append(c.wins, sl.idx)
				}
			}
			e.usedSnap = e.used
			if e.touched > 0 {
				e.touched--
			}
			e.inFlight = true
			calls = append(calls, c)
			e = next
		}
		sh.mu.Unlock()
	}
	return calls
}

func (s *SyncStore) needsSync(e *syncEntry) bool {
	if e.touched > 0 {
		return true
	}
	for i := range e.tiers {
		tr := &e.tiers[i]
		if tr.cur.pend != 0 || tr.prev.pend != 0 {
			return true
		}
	}
	return false
}

// idle reports whether e saw no Take or Undo in the windows that still
// count at now (the current one; for sliding_window the previous one too).
func (s *SyncStore) idle(e *syncEntry, now int64) bool {
	t := max(now, e.last)
	for i := range e.tiers {
		p := &s.tiers[i]
		lastW, nowW := floorDiv(e.last, p.window), floorDiv(t, p.window)
		if lastW >= nowW || s.sliding && lastW >= nowW-1 {
			return false
		}
	}
	return true
}

// push runs the calls in one pipeline, then those that got NOSCRIPT with
// EVAL in a second one (which also caches the script again).
func (s *SyncStore) push(ctx context.Context, calls []*syncCall) {
	pipe := s.c.Pipeline()
	cmds := make([]*redis.Cmd, len(calls))
	for i, c := range calls {
		cmds[i] = syncScript.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx) // errors are per command
	var retry []int
	for i, cmd := range cmds {
		err := cmd.Err()
		if err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT")) {
			retry = append(retry, i)
			continue
		}
		calls[i].res, calls[i].err = cmd.Int64Slice()
	}
	if len(retry) == 0 {
		return
	}
	pipe = s.c.Pipeline()
	for _, i := range retry {
		cmds[i] = syncScript.Eval(ctx, pipe, calls[i].keys, calls[i].args...)
	}
	_, _ = pipe.Exec(ctx)
	for _, i := range retry {
		calls[i].res, calls[i].err = cmds[i].Int64Slice()
	}
}

// apply records the outcome of c in its entry: the totals read back, or
// the counts sent returned to pend.
func (s *SyncStore) apply(c *syncCall) {
	sh, e := c.sh, c.e
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.entries[e.key] != e { // evicted meanwhile
		return
	}
	e.inFlight = false
	// A failed sync renews the budget too: the instance goes on deciding
	// on what it knows rather than stopping (see the model).
	e.used -= min(e.used, e.usedSnap)
	e.usedSnap = 0
	kpt := len(c.wins) / len(e.tiers)
	for j, w := range c.wins {
		sl := e.tiers[j/kpt].slot(w)
		if sl == nil { // the window is no longer held
			continue
		}
		if c.err == nil {
			sl.shared = c.res[j]
		} else {
			sl.pend += sl.fly
		}
		sl.fly = 0
	}
}

// sliding_window arithmetic, as in algorithms/sliding_window.go (same
// float64 evaluation order), on view counts.

// swWeighted is the part of a previous count P still inside the rolling
// window at offset e.
func swWeighted(W, P, e int64) float64 {
	if P == 0 {
		return 0
	}
	x := float64(float64(P) * float64(W-e))
	return x / float64(W)
}

func swFits(p *syncParams, P, C, e, cost int64) bool {
	a := p.events - cost - C
	return a >= 0 && swWeighted(p.window, P, e) <= float64(a)
}

// swFirst returns the smallest x in [lo, W) with swFits(P, C, x), or -1.
func swFirst(p *syncParams, P, C, lo, cost int64) int64 {
	a := p.events - cost - C
	if a < 0 {
		return -1
	}
	if swFits(p, P, C, lo, cost) {
		return lo
	}
	W := p.window
	if !swFits(p, P, C, W-1, cost) {
		return -1
	}
	f := math.Ceil(float64(W) - float64(a)*float64(W)/float64(P))
	x := W - 1
	if f < float64(W-1) {
		x = int64(max(f, float64(lo+1)))
	}
	for !swFits(p, P, C, x, cost) {
		x++
	}
	for x-1 > lo && swFits(p, P, C, x-1, cost) {
		x--
	}
	return x
}

// swWait is how long after t a request of cost fits the window counts
// (P, C) of the window starting at start, if nothing else arrives.
func swWait(p *syncParams, P, C, start, t, cost int64) int64 {
	if cost > p.events {
		return p.window
	}
	e := t - start
	if x := swFirst(p, P, C, e, cost); x >= 0 {
		return x - e
	}
	if x := swFirst(p, C, 0, 0, cost); x >= 0 {
		return start + p.window + x - t
	}
	return start + 2*p.window - t
}
