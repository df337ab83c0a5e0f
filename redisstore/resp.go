package redisstore

// The RESP2 encoding of the direct connection's EVALSHAs and the reading
// of their replies.

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unsafe"

	"github.com/redis/go-redis/v9"
)

// appendEvalSha appends e to b as an EVALSHA.
func appendEvalSha(b []byte, e *evalCall) []byte {
	if e.take.s != nil {
		return e.take.s.appendCall(b, &e.take)
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
	if d.pos == len(d.in) {
		if err := d.fill(); err != nil {
			return err
		}
	}
	if d.in[d.pos] == '*' && d.readInts(r) {
		return nil
	}
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

// readInts reads a decision, an array of at most replyLen integers of at
// most 18 digits each, when the whole of it is buffered: in one pass,
// without a call per element (read's parts cost a decision about as much
// again). False when the reply is another, or longer, or not all read
// yet: read then takes it apart, reading more as it needs.
func (d *directConn) readInts(r *reply) bool {
	b := d.in[d.pos:]
	p, n := 1, 0
	for p < len(b) && p < 4 && b[p]-'0' <= 9 {
		n = n*10 + int(b[p]-'0')
		p++
	}
	if p == 1 || n > replyLen || p+1 >= len(b) || b[p] != '\r' || b[p+1] != '\n' {
		return false
	}
	p += 2
	for i := 0; i < n; i++ {
		if p >= len(b) || b[p] != ':' {
			return false
		}
		p++
		neg := p < len(b) && b[p] == '-'
		if neg {
			p++
		}
		start := p
		var v int64
		for ; p < len(b); p++ {
			c := b[p] - '0'
			if c > 9 {
				break
			}
			v = v*10 + int64(c)
		}
		// (18 digits cannot overflow an int64.)
		if k := p - start; k == 0 || k > 18 || p+1 >= len(b) || b[p] != '\r' || b[p+1] != '\n' {
			return false
		}
		p += 2
		if neg {
			v = -v
		}
		r.vals[i] = v
	}
	r.n = n
	d.pos += p
	return true
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
