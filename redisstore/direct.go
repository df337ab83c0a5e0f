package redisstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"
)

// directConn is a connection on which a Pipeliner's worker writes its
// EVALSHAs and reads their replies itself, in RESP2: no command object,
// argument slice or boxed reply per call, which through go-redis cost a
// request more than the rest of the decision. It is dialed with the
// client's options (its dialer, so TLS and Sentinel's master discovery;
// the ACL user and password; the database; the timeouts) and belongs to
// one worker. Everything else (the NOSCRIPT fallback's EVAL, the breaker's
// probe, Cluster) goes through go-redis.
type directConn struct {
	opts *redis.Options
	nc   net.Conn
	r    *bufio.Reader
	w    *bufio.Writer
	num  []byte // decimal numbers being written
	size []byte // the length of a bulk string being written

	// raw peeks at nc's socket (see alive): nil when nc is not one;
	// peek is its callback, which sets open, built once.
	raw  syscall.RawConn
	peek func(fd uintptr) bool
	open bool
}

// directOptions returns c's options when a Pipeliner can talk to its node
// directly: a single node or a Sentinel's master (a *redis.Client, whose
// Dialer finds the master), authenticated by a plain username and
// password. Nil otherwise.
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
// does for a command.
func (d *directConn) deadline(read bool) error {
	if read {
		if d.opts.ReadTimeout > 0 {
			return d.nc.SetReadDeadline(time.Now().Add(d.opts.ReadTimeout))
		}
		return d.nc.SetReadDeadline(time.Time{})
	}
	if d.opts.WriteTimeout > 0 {
		return d.nc.SetWriteDeadline(time.Now().Add(d.opts.WriteTimeout))
	}
	return d.nc.SetWriteDeadline(time.Time{})
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
	if sc, ok := nc.(syscall.Conn); ok {
		d.raw, _ = sc.SyscallConn()
	}
	if d.r == nil {
		d.r = bufio.NewReaderSize(nc, 32<<10)
		d.w = bufio.NewWriterSize(nc, 32<<10)
	} else {
		d.r.Reset(nc)
		d.w.Reset(nc)
	}
	var cmds [][]string
	if d.opts.Password != "" {
		if d.opts.Username != "" {
			cmds = append(cmds, []string{"AUTH", d.opts.Username, d.opts.Password})
		} else {
			cmds = append(cmds, []string{"AUTH", d.opts.Password})
		}
	}
	if d.opts.DB != 0 {
		cmds = append(cmds, []string{"SELECT", strconv.Itoa(d.opts.DB)})
	}
	if len(cmds) == 0 {
		return nil
	}
	err = d.deadline(false)
	if err == nil {
		for _, c := range cmds {
			d.array(len(c))
			for _, a := range c {
				d.bulk(a)
			}
		}
		err = d.w.Flush()
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

// evalAll sends the calls as EVALSHAs in one write and reads their
// replies into them. A call whose script Redis lacks (NOSCRIPT: a restart,
// a failover) is run again through go-redis (c) with EVAL, which caches
// it. A failure of the connection fails the calls not yet answered with
// its error, once: the next batch dials again.
func (d *directConn) evalAll(c redis.UniversalClient, calls []*scriptCall) {
	if d.nc != nil && !d.alive() {
		// Closed by Redis while idle (a restart, CLIENT KILL, a
		// timeout): the calls go on a new connection, as go-redis's
		// pool would send them.
		d.close()
	}
	if d.nc == nil {
		if err := d.dial(); err != nil {
			for _, sc := range calls {
				sc.reply.err = err
			}
			return
		}
	}
	err := d.deadline(false)
	if err == nil {
		for _, sc := range calls {
			d.evalSha(&sc.evalCall)
		}
		err = d.w.Flush()
	}
	if err == nil {
		err = d.deadline(true)
	}
	var again []*scriptCall
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
			// A master demoted by a failover: the next dial finds the
			// new one.
			defer d.close()
		}
	}
	if err != nil {
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
}

// evalSha writes e as an EVALSHA.
func (d *directConn) evalSha(e *evalCall) {
	d.array(3 + len(e.keys) + len(e.args))
	d.bulk("evalsha")
	d.bulk(e.script.Hash())
	d.num = strconv.AppendInt(d.num[:0], int64(len(e.keys)), 10)
	d.bulkBytes(d.num)
	for _, k := range e.keys {
		d.bulk(k)
	}
	for _, a := range e.args {
		switch v := a.(type) {
		case string:
			d.bulk(v)
		case int64:
			d.num = strconv.AppendInt(d.num[:0], v, 10)
			d.bulkBytes(d.num)
		case int:
			d.num = strconv.AppendInt(d.num[:0], int64(v), 10)
			d.bulkBytes(d.num)
		case uint64:
			d.num = strconv.AppendUint(d.num[:0], v, 10)
			d.bulkBytes(d.num)
		default:
			d.bulk(fmt.Sprint(v))
		}
	}
}

func (d *directConn) array(n int) {
	d.w.WriteByte('*')
	d.w.Write(strconv.AppendInt(d.num[:0], int64(n), 10))
	d.w.WriteString("\r\n")
}

func (d *directConn) bulk(s string) {
	d.w.WriteByte('$')
	d.w.Write(strconv.AppendInt(d.num[:0], int64(len(s)), 10))
	d.w.WriteString("\r\n")
	d.w.WriteString(s)
	d.w.WriteString("\r\n")
}

// bulkBytes writes b, which may be d.num, as a bulk string.
func (d *directConn) bulkBytes(b []byte) {
	d.size = strconv.AppendInt(d.size[:0], int64(len(b)), 10)
	d.w.WriteByte('$')
	d.w.Write(d.size)
	d.w.WriteString("\r\n")
	d.w.Write(b)
	d.w.WriteString("\r\n")
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
// (r.err). The error it
// returns is the connection's: nothing more can be read from it.
func (d *directConn) read(r *reply) error {
	r.n, r.err = 0, nil
	line, err := d.line()
	if err != nil {
		return err
	}
	switch line[0] {
	case '+': // OK
		return nil
	case '-':
		r.err = redisError(strings.Clone(line[1:]))
		return nil
	case ':':
		v, err := strconv.ParseInt(string(line[1:]), 10, 64)
		if err != nil {
			return errProtocol
		}
		r.vals[0], r.n = v, 1
		return nil
	case '$', '*':
		n, err := strconv.Atoi(string(line[1:]))
		if err != nil {
			return errProtocol
		}
		if n < 0 {
			r.err = redis.Nil
			return nil
		}
		if line[0] == '$' {
			return errProtocol
		}
		for i := 0; i < n; i++ {
			line, err := d.line()
			if err != nil {
				return err
			}
			if line[0] != ':' {
				return errProtocol
			}
			v, err := strconv.ParseInt(string(line[1:]), 10, 64)
			if err != nil {
				return errProtocol
			}
			if i < len(r.vals) {
				r.vals[i] = v
			}
		}
		r.n = min(n, len(r.vals))
		if n > len(r.vals) {
			r.err = fmt.Errorf("redis: script answered %d values, more than the %d expected", n, len(r.vals))
		}
		return nil
	}
	return errProtocol
}

// line returns the next line without its CRLF, valid until the next read.
func (d *directConn) line() (string, error) {
	b, err := d.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		// A long error message: rare, so copied.
		long := append([]byte(nil), b...)
		var rest []byte
		rest, err = d.r.ReadBytes('\n')
		b = append(long, rest...)
	}
	if err != nil {
		return "", err
	}
	if len(b) < 3 || b[len(b)-2] != '\r' {
		return "", errProtocol
	}
	return bytesString(b[:len(b)-2]), nil
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
