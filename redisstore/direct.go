package redisstore

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"
)

// directConn is a connection on which a direct Pipeliner writes its
// EVALSHAs and reads their replies itself, in RESP2: no command object,
// argument slice or boxed reply per call (through go-redis, 11 to 17
// allocations and twice the CPU per call: BenchmarkRedisPipeline). It is
// dialed with the client's options (its dialer, so TLS and Sentinel's
// master discovery; the ACL user and password; the database; the
// timeouts) and used by one caller at a time, the leader (see
// directPipe). Everything else (the NOSCRIPT fallback's EVAL, the
// breaker's probe, Cluster) goes through go-redis.
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
	if d.nc == nil {
		if err := d.dial(); err != nil {
			return err
		}
	}
	err := d.deadline(false)
	if err == nil {
		d.out = d.out[:0]
		for _, sc := range calls {
			d.out = appendEvalSha(d.out, &sc.evalCall)
		}
		err = d.flush()
	}
	return err
}

// receive reads the replies of the calls that send wrote (with error
// sent) into them. A call whose script Redis lacks (NOSCRIPT: a restart,
// a failover) is run again through go-redis (c) with EVAL, which caches
// it. A failure of the connection fails the calls not yet answered with
// its error, which receive returns; the next batch dials again.
func (d *directConn) receive(c redis.UniversalClient, calls []*scriptCall, sent error) error {
	err := sent
	if err == nil {
		err = d.deadline(true)
	}
	var again []*scriptCall
	demoted := false
	for i, sc := range calls {
		if err == nil {
			err = d.read(&sc.reply)
		}
		if err != nil {
			for _, sc := range calls[i:] {
				sc.reply.err = err
			}
			break
		}
		switch {
		case sc.reply.err == nil:
		case redis.HasErrorPrefix(sc.reply.err, "NOSCRIPT"):
			again = append(again, sc)
		case redis.HasErrorPrefix(sc.reply.err, "READONLY"):
			demoted = true
		}
	}
	if err != nil || demoted {
		// A master demoted by a failover (READONLY): the next dial
		// finds the new one.
		d.close()
	}
	if len(again) > 0 {
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

// flush writes out what was appended to d.out.
func (d *directConn) flush() error {
	_, err := d.nc.Write(d.out)
	if cap(d.out) > 64<<10 {
		d.out = nil // a burst's buffer is not kept
	}
	return err
}

// appendEvalSha appends e to b as an EVALSHA.
func appendEvalSha(b []byte, e *evalCall) []byte {
	if e.take.s != nil {
		return e.take.s.appendCall(b, e.script, &e.take)
	}
	var n [20]byte
	b = appendArray(b, 3+len(e.keys)+len(e.args))
	b = appendBulk(b, "evalsha")
	b = appendBulk(b, e.script.Hash())
	b = appendBulkBytes(b, strconv.AppendInt(n[:0], int64(len(e.keys)), 10))
	for _, k := range e.keys {
		b = appendBulk(b, k)
	}
	for _, a := range e.args {
		b = appendArg(b, a)
	}
	return b
}

// appendArg appends a as a bulk string, written as go-redis writes it.
func appendArg(b []byte, a any) []byte {
	var n [20]byte
	switch v := a.(type) {
	case string:
		return appendBulk(b, v)
	case int64:
		return appendBulkBytes(b, strconv.AppendInt(n[:0], v, 10))
	case int:
		return appendBulkBytes(b, strconv.AppendInt(n[:0], int64(v), 10))
	case uint64:
		return appendBulkBytes(b, strconv.AppendUint(n[:0], v, 10))
	}
	return appendBulk(b, fmt.Sprint(a))
}

func appendArray(b []byte, n int) []byte {
	b = append(b, '*')
	b = appendLen(b, n)
	return append(b, '\r', '\n')
}

func appendBulk(b []byte, s string) []byte {
	b = append(b, '$')
	b = appendLen(b, len(s))
	b = append(b, '\r', '\n')
	b = append(b, s...)
	return append(b, '\r', '\n')
}

// appendLen appends n in decimal: most lengths have one or two digits.
func appendLen(b []byte, n int) []byte {
	switch {
	case n < 0:
	case n < 10:
		return append(b, byte('0'+n))
	case n < 100:
		return append(b, byte('0'+n/10), byte('0'+n%10))
	}
	return strconv.AppendInt(b, int64(n), 10)
}

func appendBulkBytes(b, s []byte) []byte {
	return appendBulk(b, bytesString(s))
}

// redisError is an error reply of Redis, told apart from a failure of the
// connection as go-redis's are (redis.HasErrorPrefix reads it).
type redisError string

func (e redisError) Error() string { return string(e) }

// RedisError marks e as an error reply (redis.Error).
func (redisError) RedisError() {}

// errProtocol fails a connection whose reply is not one a script call
// gets: what follows on it cannot be read.
var errProtocol = errors.New("redis: unexpected reply to a script call")

// read reads one reply into r: an array of integers (a decision), an
// integer, a nil (redis.Nil), a status (OK: no value) or an error reply
// (r.err). The error it returns is the connection's: nothing more can be
// read from it.
func (d *directConn) read(r *reply) error {
	r.n, r.err = 0, nil
	t, err := d.kind()
	if err != nil {
		return err
	}
	switch t {
	case '+', '-':
		line, err := d.line()
		if err != nil {
			return err
		}
		if t == '-' {
			r.err = redisError(strings.Clone(line))
		}
		return nil
	case ':':
		v, err := d.number()
		r.vals[0], r.n = v, 1
		return err
	case '$', '*':
		n, err := d.number()
		if err != nil {
			return err
		}
		if n < 0 {
			r.err = redis.Nil
			return nil
		}
		if t == '$' {
			return errProtocol
		}
		for i := int64(0); i < n; i++ {
			if t, err := d.kind(); err != nil || t != ':' {
				return cmp.Or(err, errProtocol)
			}
			v, err := d.number()
			if err != nil {
				return err
			}
			if i < replyLen {
				r.vals[i] = v
			}
		}
		r.n = int(min(n, replyLen))
		if n > replyLen {
			r.err = fmt.Errorf("redis: script answered %d values, more than the %d expected", n, replyLen)
		}
		return nil
	}
	return errProtocol
}

// kind reads the type byte of the next reply or array element.
func (d *directConn) kind() (byte, error) {
	if d.pos == len(d.in) {
		if err := d.fill(); err != nil {
			return 0, err
		}
	}
	d.pos++
	return d.in[d.pos-1], nil
}

// number reads the integer and CRLF that follow a type byte (a RESP
// integer, or the length of an array or a bulk string): an optional minus
// sign, then at most 19 digits that fit in an int64.
func (d *directConn) number() (int64, error) {
	for {
		b := d.in[d.pos:]
		i := 0
		neg := len(b) > 0 && b[0] == '-'
		if neg {
			i = 1
		}
		var v uint64
		for ; i < len(b) && b[i]-'0' <= 9; i++ {
			v = v*10 + uint64(b[i]-'0')
		}
		if i+1 < len(b) {
			digits := i - b2i(neg)
			// (19 digits fit in a uint64.)
			if b[i] != '\r' || b[i+1] != '\n' || digits == 0 || digits > 19 || v > 1<<63-1+uint64(b2i(neg)) {
				return 0, errProtocol
			}
			d.pos += i + 2
			if neg {
				return -int64(v), nil
			}
			return int64(v), nil
		}
		if err := d.fill(); err != nil {
			return 0, err
		}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// maxLine bounds a reply's line (an error message; the integers are
// short).
const maxLine = 1 << 20

// line returns the next line without its CRLF, valid until the next read.
func (d *directConn) line() (string, error) {
	for {
		if i := bytes.IndexByte(d.in[d.pos:], '\n'); i >= 0 {
			b := d.in[d.pos : d.pos+i+1]
			d.pos += i + 1
			if len(b) < 2 || b[len(b)-2] != '\r' {
				return "", errProtocol
			}
			return bytesString(b[:len(b)-2]), nil
		}
		if err := d.fill(); err != nil {
			return "", err
		}
	}
}

// fill reads more of the replies into d.in, after what is not parsed yet.
func (d *directConn) fill() error {
	if d.pos > 0 {
		d.in = d.in[:copy(d.in, d.in[d.pos:])]
		d.pos = 0
	}
	if len(d.in) == cap(d.in) {
		if len(d.in) >= maxLine {
			return errProtocol
		}
		d.in = append(d.in, make([]byte, len(d.in))...)[:len(d.in)]
	}
	n, err := d.nc.Read(d.in[len(d.in):cap(d.in)])
	d.in = d.in[:len(d.in)+n]
	if n > 0 {
		return nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return err
}

// bytesString returns b as a string without copying it: the string is
// valid until b's buffer is read into again.
func bytesString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

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
