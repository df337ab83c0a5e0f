package redisstore

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
	"github.com/zonelimit/caddy-ratelimit/internal/storetest"
)

// directPipeliner returns a client of srv with opts and a direct Pipeliner
// on it, closed when the test ends.
func directPipeliner(t testing.TB, opts *redis.Options, wait time.Duration) (*redis.Client, *Pipeliner) {
	t.Helper()
	c := redis.NewClient(opts)
	p := NewDirectPipeliner(c, wait)
	t.Cleanup(func() {
		p.Close()
		c.Close()
	})
	return c, p
}

// pooledUses is how many times c took a connection from go-redis's pools:
// never for the calls of a direct Pipeliner.
func pooledUses(c *redis.Client) uint32 {
	st := c.PoolStats()
	n := st.Hits + st.Misses
	if p := st.PipelineStats; p != nil {
		n += p.Hits + p.Misses
	}
	return n
}

// Concurrent Takes through a direct Pipeliner: on its own connection (go-redis
// opens none), exact (every algorithm admits exactly its limit), one
// EVALSHA each.
func TestDirectPipelinerExact(t *testing.T) {
	srv := redistest.Start(t)
	c, p := directPipeliner(t, &redis.Options{Addr: srv.Addr}, time.Second)
	for _, name := range []string{algorithms.SlidingLog, algorithms.FixedWindow, algorithms.TokenBucket, algorithms.GCRA, algorithms.Concurrency} {
		s := pipelinedStore(t, c, p, name, oneTier(100, time.Hour), "direct")
		// The script's first call (NOSCRIPT, then SCRIPT LOAD).
		if _, err := s.Take(context.Background(), "warm", time.Time{}, 1); err != nil {
			t.Fatal(err)
		}
		if _, err := redistest.Do(srv.Addr, "CONFIG", "RESETSTAT"); err != nil {
			t.Fatal(err)
		}
		before := pooledUses(c)
		admitted := takeConcurrently(t, 64, 5, func(int, int) (algorithms.Decision, error) {
			return s.Take(context.Background(), "k", time.Time{}, 1)
		})
		if admitted != 100 {
			t.Errorf("%s: admitted %d of 320, want 100", name, admitted)
		}
		if n := pooledUses(c) - before; n != 0 {
			t.Fatalf("%s: go-redis's pool gave %d connections, want none (the Pipeliner's own)", name, n)
		}
		if n := commandStats(t, c)["evalsha"]; n != 320 {
			t.Errorf("%s: %d EVALSHA for 320 Takes", name, n)
		}
	}
}

// After a restart Redis has no scripts: the EVALSHA gets NOSCRIPT, and
// the script is loaded and the call sent again on the Pipeliner's
// connection. Close fails later calls.
func TestDirectPipelinerNoScriptAndClose(t *testing.T) {
	srv := redistest.Start(t)
	c, p := directPipeliner(t, &redis.Options{Addr: srv.Addr}, 0)
	s := pipelinedStore(t, c, p, algorithms.GCRA, oneTier(10, time.Hour), "noscript")
	ctx := context.Background()
	if _, err := s.Take(ctx, "k", time.Time{}, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := redistest.Do(srv.Addr, "SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	if _, err := redistest.Do(srv.Addr, "CONFIG", "RESETSTAT"); err != nil {
		t.Fatal(err)
	}
	before := pooledUses(c)
	d, err := s.Take(ctx, "k", time.Time{}, 1)
	if err != nil || !d.Allowed || d.Remaining != 8 {
		t.Fatalf("after SCRIPT FLUSH: %+v, %v", d, err)
	}
	if n := pooledUses(c) - before; n != 0 {
		t.Errorf("go-redis's pool gave %d connections, want none", n)
	}
	if m := commandStats(t, c); m["script|load"] != 1 || m["evalsha"] != 2 || m["eval"] != 0 {
		t.Errorf("Redis ran %d SCRIPT LOAD, %d EVALSHA and %d EVAL, want 1, 2 and 0", m["script|load"], m["evalsha"], m["eval"])
	}
	if d, err := s.Take(ctx, "k", time.Time{}, 1); err != nil || d.Remaining != 7 {
		t.Fatalf("once the script is cached again: %+v, %v", d, err)
	}
	p.Close()
	if _, err := s.Take(ctx, "k", time.Time{}, 1); !errors.Is(err, redis.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// A user that may run scripts but not load them (SCRIPT LOAD denied by
// its ACL): after NOSCRIPT, the calls of a batch are sent again through
// go-redis, as EVAL, and decided once each.
func TestDirectPipelinerScriptLoadDenied(t *testing.T) {
	srv := redistest.Start(t)
	if _, err := redistest.Do(srv.Addr, "ACL", "SETUSER", "noload", "on", ">pw", "~*", "+@all", "-script|load"); err != nil {
		t.Fatal(err)
	}
	c, p := directPipeliner(t, &redis.Options{Addr: srv.Addr, Username: "noload", Password: "pw"}, time.Second)
	s := pipelinedStore(t, c, p, algorithms.GCRA, oneTier(100, time.Hour), "noload")
	admitted := takeConcurrently(t, 16, 4, func(int, int) (algorithms.Decision, error) {
		return s.Take(context.Background(), "k", time.Time{}, 1)
	})
	if admitted != 64 {
		t.Errorf("admitted %d of 64, want all", admitted)
	}
	m := commandStat(t, c, "rejected_calls")
	n := commandStats(t, c)
	if m["script|load"] == 0 || n["eval"] == 0 {
		t.Errorf("%v SCRIPT LOAD refused, %d EVAL: want the loads refused and the calls sent as EVAL", m["script|load"], n["eval"])
	}
	if d, err := s.Take(context.Background(), "k", time.Time{}, 1); err != nil || d.Remaining != 35 {
		t.Errorf("after 64 admitted of 100: %+v, %v, want 35 left (each call decided once)", d, err)
	}
}

// A connection Redis closed while it was idle (CLIENT KILL here; a
// restart, a timeout) is replaced before the next call, which succeeds.
func TestDirectPipelinerConnectionClosedWhileIdle(t *testing.T) {
	srv := redistest.Start(t)
	c, p := directPipeliner(t, &redis.Options{Addr: srv.Addr}, time.Second)
	s := pipelinedStore(t, c, p, algorithms.GCRA, oneTier(10, time.Hour), "killed")
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if _, err := s.Take(ctx, "k", time.Time{}, 1); err != nil {
			t.Fatalf("take %d: %v", i, err)
		}
		if _, err := redistest.Do(srv.Addr, "CLIENT", "KILL", "TYPE", "normal"); err != nil {
			t.Fatal(err)
		}
	}
	if d, err := s.Take(ctx, "k", time.Time{}, 1); err != nil || d.Remaining != 6 {
		t.Fatalf("after the kills: %+v, %v", d, err)
	}
}

// A call that times out fails with the timeout; the connection is
// dropped, so that the late reply is not read as the next call's: the
// calls after it get their own decisions. The read timeout is a minute:
// the test times out the read of the call it holds (a gate), so that no
// other read times out on a slow run.
func TestDirectPipelinerTimeout(t *testing.T) {
	srv := redistest.Start(t)
	gate := &deadlineGate{}
	c, p := directPipeliner(t, &redis.Options{Addr: srv.Addr, ReadTimeout: time.Minute, MaxRetries: -1, Dialer: gate.dial}, time.Minute)
	s := pipelinedStore(t, c, p, algorithms.GCRA, oneTier(10, time.Hour), "timeout")
	ctx := context.Background()
	if d, err := s.Take(ctx, "a", time.Time{}, 1); err != nil || d.Remaining != 9 {
		t.Fatalf("before: %+v, %v", d, err)
	}
	srv.Pause()
	writes := gate.writes.Load()
	paused := make(chan error, 1)
	go func() {
		_, err := s.Take(ctx, "a", time.Time{}, 1)
		paused <- err
	}()
	storetest.WaitFor(t, "the call sent", func() bool { return gate.writes.Load() > writes })
	gate.expire()
	err := <-paused
	srv.Resume()
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("with Redis paused: %v, want a timeout", err)
	}
	// The paused call was applied once Redis resumed (a: 8 left), and
	// is not the answer of b's first call.
	d, err := s.Take(ctx, "b", time.Time{}, 5)
	if err != nil || d.Remaining != 5 {
		t.Fatalf("b after the timeout: %+v, %v", d, err)
	}
	if d, err := s.Take(ctx, "a", time.Time{}, 1); err != nil || d.Remaining != 7 {
		t.Fatalf("a after the timeout: %+v, %v", d, err)
	}
}

// The connection authenticates as the client's ACL user and selects its
// database; a wrong password fails the calls with Redis's answer.
func TestDirectPipelinerAuthAndDB(t *testing.T) {
	srv := redistest.StartArgs(t, "--requirepass", "s3cret")
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: "s3cret"})
	defer admin.Close()
	if err := admin.Do(context.Background(), "ACL", "SETUSER", "limiter", "on", ">pw", "~rltest:*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	c, p := directPipeliner(t, &redis.Options{Addr: srv.Addr, Username: "limiter", Password: "pw", DB: 3}, time.Second)
	s := pipelinedStore(t, c, p, algorithms.GCRA, oneTier(10, time.Hour), "auth")
	ctx := context.Background()
	// The script's first call (NOSCRIPT, then SCRIPT LOAD).
	if _, err := s.Take(ctx, "warm", time.Time{}, 1); err != nil {
		t.Fatal(err)
	}
	before := pooledUses(c)
	if d, err := s.Take(ctx, "k", time.Time{}, 1); err != nil || d.Remaining != 9 {
		t.Fatalf("as limiter in db 3: %+v, %v", d, err)
	}
	key := s.Keys("k")[0]
	for db, want := range map[int]int64{0: 0, 3: 1} {
		dc := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: "s3cret", DB: db})
		n, err := dc.Exists(ctx, key).Result()
		dc.Close()
		if err != nil || n != want {
			t.Errorf("db %d holds the key %d times (%v), want %d", db, n, err, want)
		}
	}
	if n := pooledUses(c) - before; n != 0 {
		t.Errorf("go-redis's pool gave %d connections, want none", n)
	}

	wc, wp := directPipeliner(t, &redis.Options{Addr: srv.Addr, Password: "wrong"}, time.Second)
	ws := pipelinedStore(t, wc, wp, algorithms.GCRA, oneTier(10, time.Hour), "auth")
	for i := 0; i < 2; i++ {
		if _, err := ws.Take(ctx, "k", time.Time{}, 1); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
			t.Fatalf("take %d with a wrong password: %v, want WRONGPASS", i+1, err)
		}
	}
	if err := ws.Undo(ctx, "k", time.Time{}, 1, algorithms.Decision{Allowed: true}); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("undo with a wrong password: %v, want WRONGPASS", err)
	}
}

// Once a hook is added to the Client, its calls go through go-redis, so
// that the hook sees them.
func TestDirectPipelinerHooked(t *testing.T) {
	c, s := newClientStore(t, "hooked")
	ctx := context.Background()
	if _, err := s.Take(ctx, "k", time.Time{}, 1); err != nil {
		t.Fatal(err)
	}
	// go-redis's connection, dialed before the hook is added: the hook
	// would see its handshake (CLIENT SETINFO) as a pipeline too.
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	counter := &countHook{}
	c.AddHook(counter)
	if d, err := s.Take(ctx, "k", time.Time{}, 1); err != nil || d.Remaining != 8 {
		t.Fatalf("hooked: %+v, %v", d, err)
	}
	if n := counter.piped.Load(); n != 1 {
		t.Errorf("the hook saw %d calls, want 1", n)
	}
}

// deadlineGate dials connections whose read deadlines it holds back while
// it is closed: a read then waits without a deadline, and when the gate
// opens, the deadline last asked for applies (one passed already times the
// read out at once). Or it times out the reads of the connections it
// dialed so far, at once (expire). A test so decides when a read times
// out, however slowly it runs.
type deadlineGate struct {
	mu     sync.Mutex
	held   bool
	conns  []*gatedConn
	writes atomic.Int64 // writes on its connections
}

type gatedConn struct {
	net.Conn
	g       *deadlineGate
	want    time.Time // the read deadline asked for while held
	expired bool      // reads time out at once
}

// passed is a read deadline that has passed.
func passed() time.Time { return time.Unix(1, 0) }

func (g *deadlineGate) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	c := &gatedConn{Conn: nc, g: g}
	g.mu.Lock()
	g.conns = append(g.conns, c)
	g.mu.Unlock()
	return c, nil
}

// open lets the read deadlines through from now on.
func (g *deadlineGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.held = false
	for _, c := range g.conns {
		if !c.want.IsZero() {
			c.Conn.SetReadDeadline(c.want)
		}
	}
}

// expire times out the reads of the connections dialed so far, those
// under way and those to come.
func (g *deadlineGate) expire() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, c := range g.conns {
		c.expired = true
		c.Conn.SetReadDeadline(passed())
	}
}

func (c *gatedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.g.writes.Add(1)
	return n, err
}

func (c *gatedConn) SetReadDeadline(t time.Time) error {
	c.g.mu.Lock()
	defer c.g.mu.Unlock()
	if c.expired {
		t = passed()
	}
	if c.g.held {
		c.want = t
		return c.Conn.SetReadDeadline(time.Time{})
	}
	return c.Conn.SetReadDeadline(t)
}

func (c *gatedConn) SetDeadline(t time.Time) error {
	if err := c.Conn.SetWriteDeadline(t); err != nil {
		return err
	}
	return c.SetReadDeadline(t)
}

// SyscallConn lets the direct Pipeliner peek at the socket, as it does at
// a connection that is not wrapped.
func (c *gatedConn) SyscallConn() (syscall.RawConn, error) {
	return c.Conn.(syscall.Conn).SyscallConn()
}

// While Redis does not answer (CLIENT PAUSE WRITE holds the scripts, as
// a hung Redis would), the calls queued behind the batch in flight fail
// with its timeout when it times out, without being sent: a call costs at
// most the timeout of the batch ahead of it, not one more of its own. The
// first call's read deadline is held back until the calls are queued, so
// that it cannot pass before, on a slow run.
func TestDirectPipelinerQueuedCallsFailWithTheBatchAhead(t *testing.T) {
	srv := redistest.Start(t)
	gate := &deadlineGate{held: true}
	c, p := directPipeliner(t, &redis.Options{Addr: srv.Addr, ReadTimeout: 2 * time.Second, MaxRetries: -1, Dialer: gate.dial}, 0)
	s := pipelinedStore(t, c, p, algorithms.GCRA, oneTier(10, time.Hour), "queued")
	ctx := context.Background()
	if _, err := s.Take(ctx, "warm", time.Time{}, 1); err != nil {
		t.Fatalf("Take before the pause: %v", err)
	}
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 1})
	defer admin.Close()
	info := func(field string) string {
		v, err := admin.Info(ctx, "clients", "stats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(v, "\r\n") {
			if val, ok := strings.CutPrefix(line, field+":"); ok {
				return val
			}
		}
		t.Fatalf("no %s in INFO", field)
		return ""
	}
	dials := info("total_connections_received")
	if err := admin.Do(ctx, "CLIENT", "PAUSE", 60_000, "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Do(context.Background(), "CLIENT", "UNPAUSE") })

	first := make(chan error, 1)
	go func() {
		_, err := s.Take(ctx, "first", time.Time{}, 1)
		first <- err
	}()
	storetest.WaitFor(t, "the first call held by Redis", func() bool { return info("blocked_clients") == "1" })
	const queued = 20
	wave := takeAll(ctx, s, "second", queued)
	storetest.WaitFor(t, "the calls queued", func() bool { return p.queued() == queued })
	gate.open()
	errs := wave()
	var ne net.Error
	if err := <-first; !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("first call: %v, want a timeout", err)
	}
	for i, err := range errs {
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Errorf("queued call %d: %v, want the first call's timeout", i+1, err)
		}
	}
	if now := info("total_connections_received"); now != dials {
		t.Errorf("connections received went from %s to %s while Redis held the first call: the queued calls were sent", dials, now)
	}
	if err := admin.Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
		t.Fatal(err)
	}
	if d, err := s.Take(ctx, "after", time.Time{}, 1); err != nil || d.Remaining != 9 {
		t.Fatalf("after the pause: %+v, %v", d, err)
	}
}

// The integers of the replies: what fits in an int64, nothing else.
func TestDirectConnNumber(t *testing.T) {
	for _, tc := range []struct {
		s  string
		v  int64
		ok bool
	}{
		{"0", 0, true}, {"42", 42, true}, {"-1", -1, true},
		{"9223372036854775807", 1<<63 - 1, true}, {"-9223372036854775808", -1 << 63, true},
		{"9223372036854775808", 0, false}, {"-9223372036854775809", 0, false}, {"99999999999999999999", 0, false},
		{"", 0, false}, {"-", 0, false}, {"1a", 0, false}, {"+1", 0, false}, {"1\n", 0, false},
		{"00000000000000000001", 0, false}, {"0000000000000000001", 1, true},
	} {
		d := &directConn{in: []byte(tc.s + "\r\n")}
		if v, err := d.number(); v != tc.v || (err == nil) != tc.ok {
			t.Errorf("number of %q = %d, %v; want %d, ok %v", tc.s, v, err, tc.v, tc.ok)
		}
	}
}

// chunkConn is a connection that returns data at most chunk bytes a Read.
type chunkConn struct {
	net.Conn
	data  []byte
	chunk int
}

func (c *chunkConn) Read(b []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := copy(b[:min(len(b), c.chunk)], c.data)
	c.data = c.data[n:]
	return n, nil
}

// A reply reads the same whether it is all in the buffer (readInts, for
// a decision) or arrives a byte at a time (read's general path), and the
// connection stays in step after it (the integer reply that follows).
func TestDirectConnReadWholeOrByByte(t *testing.T) {
	maxInts := "*2\r\n:999999999999999999\r\n:-999999999999999999\r\n"
	for _, tc := range []struct {
		reply string
		vals  []int64
		err   bool // an error reply (r.err), not the connection's
		fails bool // the connection fails
	}{
		{reply: "*10\r\n:1\r\n:0\r\n:1000000\r\n:999999\r\n:1\r\n:0\r\n:0\r\n:0\r\n:0\r\n:0\r\n", vals: []int64{1, 0, 1000000, 999999, 1, 0, 0, 0, 0, 0}},
		{reply: maxInts, vals: []int64{999999999999999999, -999999999999999999}},
		{reply: "*0\r\n", vals: []int64{}},
		{reply: "*01\r\n:5\r\n", vals: []int64{5}},
		{reply: "*1\r\n:0000000000000000001\r\n", vals: []int64{1}},         // 19 digits
		{reply: "*1\r\n:9223372036854775807\r\n", vals: []int64{1<<63 - 1}}, // 19 digits
		{reply: "*1\r\n:-9223372036854775808\r\n", vals: []int64{-1 << 63}},
		{reply: "*16\r\n" + strings.Repeat(":7\r\n", 16), vals: slices.Repeat([]int64{7}, 16)},
		{reply: "*17\r\n" + strings.Repeat(":7\r\n", 17), vals: slices.Repeat([]int64{7}, 16), err: true},
		{reply: "*-1\r\n", err: true},
		{reply: ":42\r\n", vals: []int64{42}},
		{reply: "+OK\r\n", vals: []int64{}},
		{reply: "-ERR x\r\n", err: true},
		{reply: "*1\r\n:9223372036854775808\r\n", fails: true},
		{reply: "*1\r\n:\r\n", fails: true},
		{reply: "*1\r\n:-\r\n", fails: true},
		{reply: "*1\r\n:1\n", fails: true},
		{reply: "*2\r\n:1\r\n$1\r\nx\r\n", fails: true},
		{reply: "*1\r:1\r\n", fails: true},
		{reply: "*", fails: true},
	} {
		for _, chunk := range []int{1, 1 << 10} {
			d := &directConn{in: make([]byte, 0, 4<<10), nc: &chunkConn{data: []byte(tc.reply + ":7\r\n"), chunk: chunk}}
			var r reply
			err := d.read(&r)
			if (err != nil) != tc.fails {
				t.Errorf("%q in chunks of %d: connection's error %v, want one: %v", tc.reply, chunk, err, tc.fails)
				continue
			}
			if tc.fails {
				continue
			}
			if (r.err != nil) != tc.err || !tc.err && !slices.Equal(r.ints(), tc.vals) || tc.vals != nil && tc.err && !slices.Equal(r.ints(), tc.vals) {
				t.Errorf("%q in chunks of %d: %v, %v; want %v, error %v", tc.reply, chunk, r.ints(), r.err, tc.vals, tc.err)
			}
			var next reply
			if err := d.read(&next); err != nil || !slices.Equal(next.ints(), []int64{7}) {
				t.Errorf("%q in chunks of %d: the next reply read %v, %v: out of step", tc.reply, chunk, next.ints(), err)
			}
		}
	}
}

// Each kind of reply a script can give reads as go-redis would read it
// for a store, on one connection that stays in step: a reply the store
// cannot use fails its call only.
func TestDirectPipelinerReplies(t *testing.T) {
	srv := redistest.Start(t)
	_, p := directPipeliner(t, &redis.Options{Addr: srv.Addr}, time.Second)
	ctx := context.Background()
	long := strings.Repeat("x", 100_000)
	for _, tc := range []struct {
		src  string
		args []any
		vals []int64
		err  string
	}{
		{src: `return {1, -2, tonumber(ARGV[1])}`, args: []any{int64(-1 << 62)}, vals: []int64{1, -2, -1 << 62}},
		{src: `return 7`, vals: []int64{7}},
		{src: `return nil`, err: redis.Nil.Error()},
		{src: `return redis.status_reply('OK')`},
		{src: `return redis.error_reply('LONG ' .. ARGV[1])`, args: []any{long}, err: "LONG " + long},
		{src: `local t = {} for i = 1, 20 do t[i] = i end return t`, err: "script answered 20 values"},
		{src: `return {1, 'two'}`, err: "*"}, // any error
		{src: `return {tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])}`, args: []any{int64(3), 4, uint64(5)}, vals: []int64{3, 4, 5}},
	} {
		// Each twice: the second call finds the script cached (EVALSHA).
		for i := 0; i < 2; i++ {
			r := p.run(ctx, redis.NewScript(tc.src), nil, tc.args)
			if tc.err == "" && r.err != nil || tc.err != "" && (r.err == nil || tc.err != "*" && !strings.Contains(r.err.Error(), tc.err)) {
				t.Fatalf("%s: error %v, want %q", tc.src, r.err, tc.err)
			}
			if r.err == nil && !slices.Equal(r.ints(), tc.vals) {
				t.Fatalf("%s: %v, want %v", tc.src, r.ints(), tc.vals)
			}
		}
	}
}

// A request whose context has ended is not sent (see TestPipelinerContext
// for a deadline).
func TestDirectPipelinerContext(t *testing.T) {
	srv := redistest.Start(t)
	c, p := directPipeliner(t, &redis.Options{Addr: srv.Addr}, 0)
	s := pipelinedStore(t, c, p, algorithms.GCRA, oneTier(10, time.Hour), "ctx")
	if _, err := s.Take(context.Background(), "k", time.Time{}, 1); err != nil {
		t.Fatal(err)
	}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Take(canceled, "k", time.Time{}, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled: %v", err)
	}
	if d, err := s.Take(context.Background(), "k", time.Time{}, 1); err != nil || d.Remaining != 8 {
		t.Fatalf("after the canceled call: %+v, %v (it was sent?)", d, err)
	}
}

// Close while calls are being made: every call returns (a decision or
// redis.ErrClosed), none waits forever for a reply.
func TestDirectPipelinerCloseWhileCalling(t *testing.T) {
	srv := redistest.Start(t)
	c, p := directPipeliner(t, &redis.Options{Addr: srv.Addr}, 0)
	s := pipelinedStore(t, c, p, algorithms.GCRA, oneTier(1<<40, time.Minute), "close")
	var wg sync.WaitGroup
	var calls atomic.Int64
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				calls.Add(1)
				_, err := s.Take(context.Background(), "k", time.Time{}, 1)
				if errors.Is(err, redis.ErrClosed) {
					return
				}
				if err != nil {
					t.Errorf("Take: %v", err)
					return
				}
			}
		}()
	}
	storetest.WaitFor(t, "calls", func() bool { return calls.Load() > 100 })
	p.Close()
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a call still waits 10s after Close")
	}
}

// Through a Sentinel client, the direct Pipeliner follows a failover: it
// dials the master the Sentinels name once the old one is gone.
func TestDirectPipelinerSentinelFailover(t *testing.T) {
	testSentinelFailover(t, func(c redis.UniversalClient) *Pipeliner {
		if directOptions(c) == nil {
			t.Fatal("a Sentinel client is not sent to directly")
		}
		return NewDirectPipeliner(c, 0)
	})
}
