package redisstore

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/breaker"
)

// directConn is a connection on which a direct Pipeliner writes its
// EVALSHAs and reads their replies itself, in RESP2: no command object,
// argument slice or boxed reply per call (through go-redis, 11 to 17
// allocations and twice the CPU per call: BenchmarkRedisPipeline). It is
// dialed with the client's options (its dialer, so TLS and Sentinel's
// master discovery; the ACL user and password; the database; the
// timeouts) and used by one caller at a time, the leader (see
// directPipe). Everything else (an EVAL when a SCRIPT LOAD after NOSCRIPT
// did not help, Cluster) goes through go-redis.
type directConn struct {
	opts *redis.Options
	nc   net.Conn
	in   []byte // read from nc; in[pos:] is not parsed yet
	pos  int
	out  []byte // the commands being written, sent in one write

	// rdl and wdl are the read and write deadlines set on nc (zero:
	// none); see deadline.
	rdl, wdl time.Time

	// raw peeks at nc's socket (see alive): nil when nc is not one;
	// peek is its callback, which sets open, built once.
	raw  syscall.RawConn
	peek func(fd uintptr) bool
	open bool

	// master, on a Sentinel client, counts the master's changes; gen is
	// its count when nc was dialed: nc is on an old master when they
	// differ.
	master *masterWatch
	gen    uint64
}

// directOptions returns c's options when a Pipeliner can talk to its node
// directly: a single node or a Sentinel's master (a *redis.Client, whose
// Dialer finds the master), authenticated by a plain username and
// password. Nil otherwise. (The options' OnConnect is not run on the
// direct connection: a failed AUTH or SELECT fails its dial.)
func directOptions(c redis.UniversalClient) *redis.Options {
	rc, ok := c.(*redis.Client)
	if !ok {
		return nil
	}
	o := rc.Options()
	if o.Dialer == nil || o.CredentialsProvider != nil || o.CredentialsProviderContext != nil || o.StreamingCredentialsProvider != nil {
		return nil
	}
	return o
}

// deadline bounds the next write by the client's write timeout (read
// false) or the next reads by its read timeout (read true), as go-redis
// does for a command. A deadline is moved only once less than nine tenths
// of the timeout is left of it: setting one costs a batch more than its
// encoding, and a read or write that hangs still fails within [0.9, 1]
// times the timeout (see deadlineDue).
func (d *directConn) deadline(read bool) error {
	t, at, set := d.opts.WriteTimeout, &d.wdl, d.nc.SetWriteDeadline
	if read {
		t, at, set = d.opts.ReadTimeout, &d.rdl, d.nc.SetReadDeadline
	}
	if t <= 0 {
		if at.IsZero() {
			return nil
		}
		*at = time.Time{}
		return set(time.Time{})
	}
	now := time.Now()
	if !deadlineDue(*at, now, t) {
		return nil
	}
	*at = now.Add(t)
	return set(*at)
}

// deadlineDue reports whether a deadline at (zero: none) must be moved
// at now for an operation to fail within [0.9, 1] times timeout t.
func deadlineDue(at, now time.Time, t time.Duration) bool {
	return at.IsZero() || at.Sub(now) < t-t/10
}

// dial connects, authenticates and selects the database, as go-redis does
// for a connection of its pool.
func (d *directConn) dial() error {
	if d.master != nil {
		d.gen = d.master.gen.Load() // before the dial: a change during it dials again
	}
	ctx := context.Background()
	if d.opts.DialTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.opts.DialTimeout)
		defer cancel()
	}
	nc, err := d.opts.Dialer(ctx, d.opts.Network, d.opts.Addr)
	if err != nil {
		return err
	}
	d.nc = nc
	d.raw = nil
	d.rdl, d.wdl = time.Time{}, time.Time{} // none set on nc yet
	if sc, ok := nc.(syscall.Conn); ok {
		d.raw, _ = sc.SyscallConn()
	}
	if d.in == nil {
		d.in = make([]byte, 0, 16<<10)
	}
	d.in, d.pos = d.in[:0], 0
	var cmds [][]string
	switch {
	case d.opts.Password == "":
		// A PING first, so that a password set on the server shows as
		// NOAUTH: an unauthenticated EVALSHA of more than 10 arguments
		// gets a protocol error and its connection closed (a reset).
		cmds = append(cmds, []string{"PING"})
	case d.opts.Username != "":
		cmds = append(cmds, []string{"AUTH", d.opts.Username, d.opts.Password})
	default:
		cmds = append(cmds, []string{"AUTH", d.opts.Password})
	}
	if d.opts.DB != 0 {
		cmds = append(cmds, []string{"SELECT", strconv.Itoa(d.opts.DB)})
	}
	if len(cmds) == 0 {
		return nil
	}
	err = d.deadline(false)
	if err == nil {
		d.out = d.out[:0]
		for _, c := range cmds {
			d.out = appendArray(d.out, len(c))
			for _, a := range c {
				d.out = appendBulk(d.out, a)
			}
		}
		err = d.flush()
	}
	if err == nil {
		err = d.deadline(true)
	}
	for range cmds {
		if err != nil {
			break
		}
		var r reply
		if err = d.read(&r); err == nil {
			err = r.err
		}
	}
	if err != nil {
		d.close()
	}
	return err
}

func (d *directConn) close() {
	if d.nc != nil {
		d.nc.Close()
		d.nc, d.raw = nil, nil
	}
}

// send writes the calls as EVALSHAs in one write, on a connection dialed
// first if d has none. idle says that d was not used since its last
// replies were read: a connection Redis closed meanwhile is replaced
// first. The error is the connection's; receive reads the replies.
func (d *directConn) send(calls []*scriptCall, idle bool) error {
	if idle && d.nc != nil && !d.alive() {
		// Closed by Redis while idle (a restart, CLIENT KILL, a
		// timeout): the calls go on a new connection, as go-redis's
		// pool would send them.
		d.close()
	}
	if d.nc != nil && d.master != nil && d.gen != d.master.gen.Load() {
		// The master changed (a failover): the old one may still take
		// writes, which the new one would never see.
		d.close()
	}
	if d.nc == nil {
		if err := d.dial(); err != nil {
			return unsentError{err} // none of the calls was written
		}
	}
	if err := d.deadline(false); err != nil {
		return unsentError{err}
	}
	d.out = d.out[:0]
	for _, sc := range calls {
		d.out = appendEvalSha(d.out, &sc.evalCall)
	}
	return d.flush()
}

// receive reads the replies of the calls that send wrote (with error
// sent) into them. The calls whose script Redis lacks (NOSCRIPT: a
// restart, a failover) are sent again on d after the script is loaded
// (reload), and those refused even so through go-redis (c) with EVAL.
// A failure of the connection fails the calls not yet answered with
// its error, which receive returns (a *breaker.Shared: one failure); the
// next batch dials again.
func (d *directConn) receive(c redis.UniversalClient, calls []*scriptCall, sent error) error {
	err := sent
	if err == nil {
		err = d.deadline(true)
	}
	again, demoted, err := d.replies(calls, err)
	if len(again) > 0 && err == nil && !demoted {
		// Sent again on d, not through go-redis: after an outage its
		// pool may still be refusing to dial (for up to a second) when
		// d has connected already.
		again, demoted, err = d.replies(again, d.reload(again))
	}
	if err != nil || demoted {
		// A master demoted by a failover (READONLY): the next dial
		// finds the new one.
		d.close()
	}
	if len(again) > 0 {
		// Refused again (the script cache emptied once more, or SCRIPT
		// LOAD not allowed): EVAL, with the script's source.
		evals := make([]*evalCall, len(again))
		for i, sc := range again {
			evals[i] = &sc.evalCall
		}
		for i, cmd := range evalSource(context.Background(), c, evals, nil) {
			again[i].reply = replyOf(cmd)
		}
	}
	return err
}

// replies reads the replies of calls into them, after the error err of
// their write (nil: written). It returns the calls Redis lacked the
// script of (NOSCRIPT), whether one was refused by a replica (READONLY),
// and the connection's failure, which fails the calls not yet answered:
// a *breaker.Shared, since the breaker counts it once, however many calls
// it fails.
func (d *directConn) replies(calls []*scriptCall, err error) (again []*scriptCall, demoted bool, _ error) {
	for i, sc := range calls {
		if err == nil {
			err = d.read(&sc.reply)
		}
		if err != nil {
			err = &breaker.Shared{Err: err}
			for _, sc := range calls[i:] {
				sc.reply.err = err
			}
			return again, demoted, err
		}
		switch {
		case sc.reply.err == nil:
		case redis.HasErrorPrefix(sc.reply.err, "NOSCRIPT"):
			again = append(again, sc)
		case redis.HasErrorPrefix(sc.reply.err, "READONLY"):
			demoted = true
		}
	}
	return again, demoted, nil
}

// reload writes, in one write, a SCRIPT LOAD of each script of calls,
// which Redis lacked (NOSCRIPT: a restart, a failover, SCRIPT FLUSH), then
// their EVALSHAs again, and reads the loads' replies: replies reads the
// calls'. A load Redis refuses (an ACL user without SCRIPT) leaves its
// calls refused with NOSCRIPT again. The error is the connection's.
func (d *directConn) reload(calls []*scriptCall) error {
	if err := d.deadline(false); err != nil {
		return err
	}
	var loads []*redis.Script
	d.out = d.out[:0]
	for _, sc := range calls {
		if !slices.Contains(loads, sc.script) {
			loads = append(loads, sc.script)
			d.out = appendArray(d.out, 3)
			d.out = appendBulk(d.out, "script")
			d.out = appendBulk(d.out, "load")
			d.out = appendBulk(d.out, scriptSource(sc.script))
		}
	}
	for _, sc := range calls {
		d.out = appendEvalSha(d.out, &sc.evalCall)
	}
	err := d.flush()
	if err == nil {
		err = d.deadline(true)
	}
	for range loads {
		if err != nil {
			break
		}
		err = d.loaded()
	}
	return err
}

// loaded reads the reply to a SCRIPT LOAD: the script's SHA1 (a bulk
// string of hex digits, read as a line) or an error.
func (d *directConn) loaded() error {
	t, err := d.kind()
	if err == nil && t == '$' {
		_, err = d.number()
	} else if err == nil && t != '-' {
		err = errProtocol
	}
	if err == nil {
		_, err = d.line()
	}
	return err
}

// scriptSource returns the source of s, which go-redis keeps to itself but
// hands to ScriptLoad when s is loaded.
func scriptSource(s *redis.Script) string {
	var c sourceCatcher
	s.Load(context.Background(), &c)
	return c.src
}

// sourceCatcher is a redis.Scripter that catches the source Script.Load
// hands it, and fails the load, so that the script's hash stays as it is.
type sourceCatcher struct {
	redis.Scripter // not called: Load calls ScriptLoad only
	src            string
}

var errSourceCaught = errors.New("redisstore: script source read, not loaded")

func (c *sourceCatcher) ScriptLoad(ctx context.Context, src string) *redis.StringCmd {
	c.src = src
	cmd := redis.NewStringCmd(ctx)
	cmd.SetErr(errSourceCaught)
	return cmd
}

// flush writes out what was appended to d.out.
func (d *directConn) flush() error {
	_, err := d.nc.Write(d.out)
	if cap(d.out) > 64<<10 {
		d.out = nil // a burst's buffer is not kept
	}
	return err
}

// alive reports whether d.nc, with no reply outstanding, is still open: a
// non-blocking peek that finds neither end of file nor data, which only a
// connection Redis closed would have. A connection that is not a socket
// (TLS: the peek would read its records) counts as open.
func (d *directConn) alive() bool {
	if d.raw == nil {
		return true
	}
	if d.peek == nil {
		d.peek = func(fd uintptr) bool {
			var b [1]byte
			n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			d.open = n < 0 && (err == syscall.EAGAIN || err == syscall.EWOULDBLOCK)
			return true
		}
	}
	d.open = false
	err := d.raw.Read(d.peek)
	return err == nil && d.open
}
