package ratelimit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/zonelimit/caddy-ratelimit/breaker"
	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
	"github.com/zonelimit/caddy-ratelimit/internal/storetest"
	"github.com/zonelimit/caddy-ratelimit/redisstore"
)

// Log messages of the breaker's state changes.
const (
	msgBreakerOpen   = "Redis failing: circuit breaker open, requests decided by on_error until Redis runs the rate limit scripts again"
	msgBreakerClosed = "Redis works again: circuit breaker closed"
)

// provisionObserved provisions the handler of config like provision, on a
// Redis client whose own log lines (the breaker's state changes) are
// recorded at info and above.
func provisionObserved(t *testing.T, config string) (*Handler, *observer.ObservedLogs) {
	t.Helper()
	var h Handler
	if err := json.Unmarshal([]byte(config), &h); err != nil {
		t.Fatalf("config: %v", err)
	}
	conf, err := h.Redis.resolved()
	if err != nil {
		t.Fatal(err)
	}
	opts, err := conf.universalOptions()
	if err != nil {
		t.Fatal(err)
	}
	key, err := conf.poolKey()
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.InfoLevel)
	// The handler finds this client in the pool under its settings.
	if _, loaded, err := pool.LoadOrNew(key, func() (caddy.Destructor, error) {
		return newRedisClient(opts, conf.KeyPrefix, zap.New(core)), nil
	}); err != nil || loaded {
		t.Fatalf("a client for these settings exists already (%v)", err)
	}
	t.Cleanup(func() { _, _ = pool.Delete(key) })
	return provision(t, config, nil), logs
}

// isProbe reports whether cmd is a call of the breaker's probe script,
// whose key is named breaker-probe.
func isProbe(cmd redis.Cmder) bool {
	if len(cmd.Args()) <= 3 {
		return false
	}
	s, ok := cmd.Args()[3].(string)
	return ok && strings.Contains(s, "breaker-probe")
}

// A Redis that answers PING but refuses the rate limiter's scripts keeps
// the breaker open (one state change, one log line) for as long as it
// refuses them, and the breaker closes once, with one line, when it runs
// them again.
func TestBreakerStaysOpenWhileScriptsFail(t *testing.T) {
	cases := []struct {
		name  string
		start func(t *testing.T) (addr, redisExtra string, fix func())
		want  string // in the error of the line that opens the breaker
	}{{
		name: "acl without scripts",
		start: func(t *testing.T) (string, string, func()) {
			srv := redistest.Start(t)
			mustDo(t, srv.Addr, "ACL", "SETUSER", "rl", "on", ">pw", "~*", "+@all", "-evalsha", "-eval")
			return srv.Addr, `"username":"rl","password":"pw",`, func() {
				mustDo(t, srv.Addr, "ACL", "SETUSER", "rl", "+evalsha", "+eval")
			}
		},
		want: "NOPERM",
	}, {
		name: "maxmemory noeviction full",
		start: func(t *testing.T) (string, string, func()) {
			srv := redistest.Start(t)
			redistest.Fill(t, srv.Addr, "")
			return srv.Addr, "", func() { mustDo(t, srv.Addr, "CONFIG", "SET", "maxmemory", "0") }
		},
		want: "OOM",
	}, {
		name: "replica",
		start: func(t *testing.T) (string, string, func()) {
			master := redistest.Start(t)
			_, port, _ := net.SplitHostPort(master.Addr)
			replica := redistest.StartArgs(t, "--replicaof", "127.0.0.1", port)
			return replica.Addr, "", func() { mustDo(t, replica.Addr, "REPLICAOF", "NO", "ONE") }
		},
		want: "READONLY",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			addr, extra, fix := tc.start(t)
			h, logs := provisionObserved(t, fmt.Sprintf(`{"store":"redis","redis":{%s"addresses":[%q]},
				"zones":[{"name":"api","key":"{http.request.remote.host}","limits":[{"events":100,"window":"1m"}]}]}`, extra, addr))
			probes := redistest.ScriptCalls{Match: isProbe}
			h.rt.redis.AddHook(&probes)
			br := h.rt.redis.Breaker()
			count := func(msg string) int { return logs.FilterMessage(msg).Len() }

			for i := 0; i < redisstore.BreakerFailures; i++ {
				if res := serve(h, newReq("192.0.2.1:1")); res.code != 200 || res.hdr.Get("X-RateLimit-Remaining") != "" {
					t.Fatalf("request %d: code %d, headers %v: want 200 decided by on_error open", i+1, res.code, res.hdr)
				}
			}
			if br.State() != breaker.Open {
				t.Fatalf("breaker %s after %d failures", br.State(), redisstore.BreakerFailures)
			}
			// Requests keep coming while the probe runs 8 times: the
			// breaker never closes.
			deadline := time.Now().Add(time.Minute)
			for probes.Load() < 8 && count(msgBreakerClosed) == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("%d probes in a minute", probes.Load())
				}
				serve(h, newReq("192.0.2.1:1"))
				time.Sleep(5 * time.Millisecond)
			}
			if o, c := count(msgBreakerOpen), count(msgBreakerClosed); o != 1 || c != 0 || br.State() != breaker.Open {
				t.Fatalf("after %d failed probes: breaker %s, %d lines open, %d closed; want open, 1 and 0", probes.Load(), br.State(), o, c)
			}
			e := logs.FilterMessage(msgBreakerOpen).All()[0]
			if got := entryText(e); !strings.Contains(got, tc.want) || e.ContextMap()["hint"] == nil {
				t.Errorf("breaker open line without the cause %s and a hint: %s", tc.want, got)
			} else {
				t.Log(got)
			}

			fix()
			// The state reads Closed a moment before the close is logged.
			storetest.WaitFor(t, "the breaker's close logged", func() bool { return count(msgBreakerClosed) >= 1 })
			if br.State() != breaker.Closed {
				t.Fatalf("breaker %s once its close is logged", br.State())
			}
			for i := 0; i < 3; i++ {
				if res := serve(h, newReq("192.0.2.1:1")); res.code != 200 || res.hdr.Get("X-RateLimit-Remaining") == "" {
					t.Fatalf("once fixed, request %d: code %d, headers %v: want a decision of Redis", i+1, res.code, res.hdr)
				}
			}
			if o, c := count(msgBreakerOpen), count(msgBreakerClosed); o != 1 || c != 1 {
				t.Fatalf("%d lines open, %d closed; want 1 each", o, c)
			}
		})
	}
}

// A breaker that stays open for another reason than the one it opened for
// says so: an operator who fixed the first cause learns of the next.
func TestBreakerLogsChangedCause(t *testing.T) {
	const msgOtherReason = "Redis still failing, now for another reason: circuit breaker stays open"
	srv := redistest.Start(t)
	mustDo(t, srv.Addr, "ACL", "SETUSER", "rl", "on", ">pw", "~*", "+@all", "-evalsha", "-eval")
	h, logs := provisionObserved(t, fmt.Sprintf(`{"store":"redis","redis":{"username":"rl","password":"pw","addresses":[%q]},
		"zones":[{"name":"api","key":"{http.request.remote.host}","limits":[{"events":100,"window":"1m"}]}]}`, srv.Addr))
	br := h.rt.redis.Breaker()
	count := func(msg string) int { return logs.FilterMessage(msg).Len() }
	for i := 0; i < redisstore.BreakerFailures; i++ {
		serve(h, newReq("192.0.2.1:1"))
	}
	if br.State() != breaker.Open || count(msgBreakerOpen) != 1 {
		t.Fatalf("breaker %s, %d lines open: want open, 1", br.State(), count(msgBreakerOpen))
	}

	// The scripts allowed, but Redis full: the probes fail with OOM.
	redistest.Fill(t, srv.Addr, "")
	mustDo(t, srv.Addr, "ACL", "SETUSER", "rl", "+evalsha", "+eval")
	storetest.WaitFor(t, "the change of cause logged", func() bool { return count(msgOtherReason) >= 1 })
	e := logs.FilterMessage(msgOtherReason).All()[0]
	if got := entryText(e); !strings.Contains(got, "OOM") || e.ContextMap()["hint"] != "Redis is out of memory (maxmemory) and refuses writes" {
		t.Errorf("change of cause without OOM and its hint: %s", got)
	}
	if br.State() != breaker.Open {
		t.Fatalf("breaker %s while Redis is full", br.State())
	}

	mustDo(t, srv.Addr, "CONFIG", "SET", "maxmemory", "0")
	storetest.WaitFor(t, "the breaker's close logged", func() bool { return count(msgBreakerClosed) >= 1 })
	if o, x, c := count(msgBreakerOpen), count(msgOtherReason), count(msgBreakerClosed); o != 1 || x != 1 || c != 1 {
		t.Fatalf("%d lines open, %d of another reason, %d closed; want 1 each", o, x, c)
	}
}

func mustDo(t *testing.T, addr string, args ...string) {
	t.Helper()
	if _, err := redistest.Do(addr, args...); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
}

// A wrong password is logged as what it is, an authentication failure,
// both at start and after the password changed on the server (rotated,
// or set where there was none); never as an empty reply.
func TestRedisAuthFailureLogged(t *testing.T) {
	check := func(t *testing.T, h *Handler, logs *observer.ObservedLogs, wants ...string) {
		t.Helper()
		debug := observe(h, zapcore.DebugLevel)
		for i := 0; i < redisstore.BreakerFailures; i++ {
			serve(h, newReq("192.0.2.1:1"))
		}
		entries := debug.FilterMessage("rate limit store failed").All()
		if len(entries) == 0 {
			t.Fatal("no store failure logged")
		}
		found := false
		for _, e := range entries {
			text := entryText(e)
			if strings.Contains(text, "unexpected type") {
				t.Errorf("store failure logged as %s", text)
			}
			for _, w := range wants {
				found = found || strings.Contains(text, w)
			}
		}
		if !found {
			t.Errorf("no store failure says %v: %v", wants, entryText(entries[len(entries)-1]))
		}
		opened := logs.FilterMessage(msgBreakerOpen).All()
		if len(opened) != 1 {
			t.Fatalf("%d breaker open lines, want 1", len(opened))
		}
		text := entryText(opened[0])
		if !strings.Contains(text, wants[0]) {
			t.Errorf("breaker open line without %s: %s", wants[0], text)
		}
		t.Log(text)
	}
	cfg := func(addr, password string) string {
		return fmt.Sprintf(`{"store":"redis","redis":{"addresses":[%q],"password":%q},
			"zones":[{"name":"api","key":"{http.request.remote.host}","limits":[{"events":100,"window":"1m"}]}]}`, addr, password)
	}
	// rotate changes the password and drops the clients' connections, as
	// a restart with the new setting would.
	rotate := func(t *testing.T, addr, old, pass string) {
		c := redis.NewClient(&redis.Options{Addr: addr, Password: old})
		defer c.Close()
		ctx := context.Background()
		if err := c.ConfigSet(ctx, "requirepass", pass).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.ClientKillByFilter(ctx, "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
			t.Fatal(err)
		}
		// Wait until the killed connections are gone, as after a
		// restart, so that the next request finds its connection closed.
		for deadline := time.Now().Add(5 * time.Second); ; {
			list, err := c.ClientList(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			if strings.Count(strings.TrimSpace(list), "\n") == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("killed connections still open after 5s:\n%s", list)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	t.Run("at start", func(t *testing.T) {
		srv := redistest.StartArgs(t, "--requirepass", "s3cret")
		h, logs := provisionObserved(t, cfg(srv.Addr, "wrong"))
		check(t, h, logs, "WRONGPASS", "authenticate")
	})
	t.Run("rotated", func(t *testing.T) {
		srv := redistest.StartArgs(t, "--requirepass", "old")
		h, logs := provisionObserved(t, cfg(srv.Addr, "old"))
		if res := serve(h, newReq("192.0.2.1:1")); res.hdr.Get("X-RateLimit-Remaining") == "" {
			t.Fatalf("right password: no decision (code %d)", res.code)
		}
		rotate(t, srv.Addr, "old", "new")
		check(t, h, logs, "WRONGPASS", "authenticate")
	})
	t.Run("set", func(t *testing.T) {
		srv := redistest.Start(t)
		h, logs := provisionObserved(t, cfg(srv.Addr, ""))
		if res := serve(h, newReq("192.0.2.1:1")); res.hdr.Get("X-RateLimit-Remaining") == "" {
			t.Fatalf("no password: no decision (code %d)", res.code)
		}
		rotate(t, srv.Addr, "", "new")
		check(t, h, logs, "authentication failed")
	})
}

// timeoutCounter counts, through a go-redis hook, the connections dialed and
// the reads that timed out on them: each is a wait a request pays.
type timeoutCounter struct {
	redistest.NopHook
	dials, timeouts atomic.Int64
}

func (c *timeoutCounter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c.dials.Add(1)
		conn, err := next(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &timeoutConn{Conn: conn, c: c}, nil
	}
}

// timeoutConn counts its reads that timed out: once per deadline, as a
// reply read after a peek that timed out fails at once, on the same
// deadline, without waiting again.
type timeoutConn struct {
	net.Conn
	c *timeoutCounter

	mu                 sync.Mutex
	deadline, timedOut time.Time
}

func (t *timeoutConn) SetDeadline(d time.Time) error {
	t.setDeadline(d)
	return t.Conn.SetDeadline(d)
}

func (t *timeoutConn) SetReadDeadline(d time.Time) error {
	t.setDeadline(d)
	return t.Conn.SetReadDeadline(d)
}

func (t *timeoutConn) setDeadline(d time.Time) {
	t.mu.Lock()
	t.deadline = d
	t.mu.Unlock()
}

func (t *timeoutConn) Read(b []byte) (int, error) {
	n, err := t.Conn.Read(b)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.mu.Lock()
		if !t.deadline.Equal(t.timedOut) {
			t.timedOut = t.deadline
			t.c.timeouts.Add(1)
		}
		t.mu.Unlock()
	}
	return n, err
}

// While Redis hangs, a request waits for at most one Redis timeout in all
// its zones together (not one per zone, nor a connect and a retry each),
// and while it refuses connections, dials it at most once.
func TestRedisOneTimeoutPerRequest(t *testing.T) {
	for _, tc := range []struct {
		zones   int
		onError string
		hang    bool
	}{
		{1, "open", true}, {2, "open", true}, {3, "closed", true}, {2, "local", true},
		{2, "open", false},
	} {
		t.Run(fmt.Sprintf("%d zones on_error %s hung %v", tc.zones, tc.onError, tc.hang), func(t *testing.T) {
			srv := redistest.Start(t)
			var zones []string
			for i := 0; i < tc.zones; i++ {
				zones = append(zones, fmt.Sprintf(`{"name":"z%d","key":"{http.request.remote.host}","limits":[{"events":100,"window":"1m"}]}`, i))
			}
			h := provision(t, fmt.Sprintf(`{"store":"redis","on_error":%q,"redis":{"addresses":[%q],"read_timeout":"100ms"},"zones":[%s]}`,
				tc.onError, srv.Addr, strings.Join(zones, ",")), nil)
			var c timeoutCounter
			h.rt.redis.AddHook(&c)
			// Connected, the scripts loaded: three decisions in a row. The
			// set-up may itself outlast the 100ms timeout on a busy machine
			// (a request then goes to on_error, undecided); the successes
			// reset the breaker's count of failures.
			for i, row := 0, 0; row < 3; i++ {
				if i == 100 {
					t.Fatalf("before: no three decisions in a row in %d requests", i)
				}
				row++
				if res := serve(h, newReq("192.0.2.1:1")); res.hdr.Get("X-RateLimit-Remaining") == "" {
					row = 0
				}
			}
			if tc.hang {
				srv.Pause()
				t.Cleanup(srv.Resume)
			} else {
				srv.Stop()
			}
			br := h.rt.redis.Breaker()
			for i := 0; br.State() == breaker.Closed; i++ {
				if i == 2*redisstore.BreakerFailures {
					t.Fatalf("breaker still closed after %d requests", i)
				}
				d0, t0 := c.dials.Load(), c.timeouts.Load()
				res := serve(h, newReq("192.0.2.1:1"))
				dials, timeouts := c.dials.Load()-d0, c.timeouts.Load()-t0
				t.Logf("request %d: code %d, %d dials, %d timeouts", i+1, res.code, dials, timeouts)
				if timeouts > 1 || dials > 1 {
					t.Fatalf("request %d: %d reads timed out and %d connections dialed, want at most 1 each", i+1, timeouts, dials)
				}
				if tc.hang && timeouts != 1 {
					t.Fatalf("request %d with Redis hung: %d reads timed out, want 1 (the test counts wrong)", i+1, timeouts)
				}
			}
		})
	}
}

// The undo of an admission is not sent to a Redis that failed earlier in the
// request: zone a admits, zone b's call fails, and on_error closed refuses
// the request without a second call to Redis.
func TestRedisNoUndoAfterFailure(t *testing.T) {
	srv := redistest.Start(t)
	h := provision(t, `{"store":"redis","on_error":"closed","redis":{"addresses":["`+srv.Addr+`"]},"zones":[
		{"name":"a","key":"{http.request.remote.host}","limits":[{"events":100,"window":"1m"}]},
		{"name":"b","key":"{http.request.remote.host}","limits":[{"events":100,"window":"1m"}]}]}`, nil)
	var calls callCounter
	calls.failAfter.Store(1 << 30)
	h.rt.redis.AddHook(&calls)
	if res := serve(h, newReq("192.0.2.1:1")); res.code != 200 {
		t.Fatalf("before: %d", res.code)
	}
	// The second script call from now on fails, as a Redis that goes
	// away between two zones.
	calls.n.Store(0)
	calls.failAfter.Store(1)
	if res := serve(h, newReq("192.0.2.1:1")); res.code != 503 {
		t.Fatalf("zone b failed, on_error closed: code %d, want 503", res.code)
	}
	if n := calls.n.Load(); n != 2 {
		t.Fatalf("%d script calls, want 2 (zone a, zone b) and no undo", n)
	}
}

// callCounter counts pipelined script calls and fails those after the
// failAfter-th with a network error, without sending them.
type callCounter struct {
	redistest.NopHook
	n         atomic.Int64
	failAfter atomic.Int64
}

func (c *callCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if n := c.n.Add(int64(len(cmds))); n > c.failAfter.Load() {
			err := &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}
			for _, cmd := range cmds {
				cmd.SetErr(err)
			}
			return err
		}
		return next(ctx, cmds)
	}
}

// go-redis's own log lines go to the zap logger, at warn at most once per
// interval and at debug otherwise.
func TestGoRedisLogger(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	l := &goRedisLogger{logger: func() *zap.Logger { return zap.New(core).Named("http.handlers.rate_limit") }}
	for i := 0; i < 25; i++ {
		l.Printf(context.Background(), "redis: connection pool: failed to dial after %d attempts: %v", 1, "connection refused")
	}
	all := logs.All()
	if len(all) != 25 {
		t.Fatalf("%d lines for 25, want 25", len(all))
	}
	warns := logs.FilterLevelExact(zapcore.WarnLevel).All()
	if len(warns) != 1 {
		t.Fatalf("%d lines at warn, want 1 (the others at debug)", len(warns))
	}
	if w := warns[0]; w.Message != "redis: connection pool: failed to dial after 1 attempts: connection refused" || w.LoggerName != "http.handlers.rate_limit" {
		t.Errorf("line %q from logger %q", w.Message, w.LoggerName)
	}
}

// go-redis has one logger per process, and it becomes this module's only
// when the module makes a Redis client: in a Caddy whose rate_limit
// handlers use the memory store, another plugin's go-redis client logs as
// go-redis does; once a handler with store redis is provisioned, go-redis
// logs to Caddy's log under the module's name. Each case runs in a child
// process of its own, since a logger once set stays for the process.
func TestGoRedisLoggerOnlyWithRedisStore(t *testing.T) {
	if store := os.Getenv("RATELIMIT_GOREDIS_LOGGER_STORE"); store != "" {
		goRedisLoggerChild(t, store)
		return
	}
	for _, c := range []struct {
		store string
		ours  bool // the line is logged by this module's logger
	}{{"memory", false}, {"redis", true}} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestGoRedisLoggerOnlyWithRedisStore$", "-test.count=1")
		cmd.Env = append(os.Environ(), "RATELIMIT_GOREDIS_LOGGER_STORE="+c.store)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("store %s: the child failed: %v\n%s", c.store, err, out)
		}
		var line string
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, "failed to dial") {
				line = l
				break
			}
		}
		if line == "" {
			t.Fatalf("store %s: go-redis logged no dial failure:\n%s", c.store, out)
		}
		if ours := strings.Contains(line, "http.handlers.rate_limit") && strings.Contains(line, "go-redis"); ours != c.ours {
			t.Errorf("store %s: go-redis's line %q: by this module's logger %v, want %v", c.store, line, ours, c.ours)
		}
	}
}

// goRedisLoggerChild provisions a handler with store, then has a go-redis
// client of its own fail to dial, which go-redis logs.
func goRedisLoggerChild(t *testing.T, store string) {
	addr := redistest.RefusedAddr(t) // dials are refused
	config := `{"zones":[{"name":"go_redis_logger","key":"k","limits":[{"events":1,"window":"1m"}]}]`
	if store == "redis" {
		config += `,"store":"redis","redis":{"address":"` + addr + `"}`
	}
	provision(t, config+"}", newClock())
	c := redis.NewClient(&redis.Options{Addr: addr, DialerRetries: 1, MaxRetries: -1})
	defer c.Close()
	if err := c.Ping(context.Background()).Err(); err == nil {
		t.Fatal("a ping to a closed port succeeded")
	}
}

// A Sentinel client finding its master is routine: info, whatever the
// throttle, and it does not use up the throttle's warn line.
func TestGoRedisLoggerRoutine(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	l := &goRedisLogger{logger: func() *zap.Logger { return zap.New(core) }}
	for i := 0; i < 3; i++ {
		l.Printf(context.Background(), "sentinel: selected addr=%s masterAddr=%s", "127.0.0.1:26379", "127.0.0.1:6379")
		l.Printf(context.Background(), "sentinel: new master=%q addr=%q", "mymaster", "127.0.0.1:6379")
	}
	l.Printf(context.Background(), "sentinel: GetMasterAddrByName name=%q failed: %s", "mymaster", "i/o timeout")
	if n := logs.FilterLevelExact(zapcore.InfoLevel).Len(); n != 6 {
		t.Errorf("%d routine lines at info, want 6", n)
	}
	warns := logs.FilterLevelExact(zapcore.WarnLevel).All()
	if len(warns) != 1 || !strings.Contains(warns[0].Message, "failed") {
		t.Errorf("lines at warn: %v, want the one failure", warns)
	}
}

// While the circuit breaker is open, a key the deny cache holds as denied
// stays denied (429, its Retry-After counting down), in every on_error
// mode; a key the instance knows nothing of is decided by on_error.
func TestDenyCacheHeldWhileBreakerOpen(t *testing.T) {
	for _, mode := range []string{"open", "closed", "local"} {
		t.Run(mode, func(t *testing.T) {
			srv := redistest.Start(t)
			h := provision(t, redisConfig(srv.Addr, 1, `"on_error":"`+mode+`",`), nil)
			z := h.rt.zones[0]
			if z.denies == nil {
				t.Fatal("the zone has no deny cache")
			}
			serve(h, newReq("192.0.2.1:1"))
			if res := serve(h, newReq("192.0.2.1:1")); res.code != 429 {
				t.Fatalf("second request: %d", res.code)
			}
			openBreaker(t, h, srv, "192.0.2.2:1")

			failed := onErrorDecided(t, z)
			for i := 0; i < 5; i++ {
				res := serve(h, newReq("192.0.2.1:1"))
				if ra, _ := strconv.Atoi(res.hdr.Get("Retry-After")); res.code != 429 || res.called || ra < 1 || ra > 60 {
					t.Fatalf("denied key, request %d: code %d, Retry-After %q; want 429 until the denial's Retry-After", i, res.code, res.hdr.Get("Retry-After"))
				}
			}
			if n := onErrorDecided(t, z) - failed; n != 0 {
				t.Fatalf("%v requests of the denied key decided by on_error", n)
			}
			res := serve(h, newReq("192.0.2.3:1"))
			if want := map[string]int{"open": 200, "closed": 503, "local": 200}[mode]; res.code != want {
				t.Fatalf("a key never seen: code %d, want %d (on_error %s)", res.code, want, mode)
			}
			if n := onErrorDecided(t, z) - failed; n != 1 {
				t.Fatalf("a key never seen: %v requests decided by on_error, want 1", n)
			}
		})
	}
}
