package redisstore

import (
	"strconv"
	"time"
)

// storeCall is a Store's Take or Undo as the Pipeliner carries it: what
// varies from call to call, without its KEYS and ARGV. directConn appends
// its EVALSHA from the Store's encoded constants (appendCall), with no key
// slice, argument slice or member string per call; go-redis gets the
// slices built only when it sends the call (a Cluster, a hook, the EVAL
// after NOSCRIPT).
type storeCall struct {
	s    *Store // nil: not a Store's call
	key  string
	undo bool
	// forget: an undo of a Take whose answer was lost (concurrency).
	forget bool
	now    time.Time // zero: Redis TIME
	cost   int64
	// n is the Take's sorted-set member number (when the script takes a
	// member), its lease token (concurrency), or the Undo's token.
	n uint64
}

// mode returns ARGV[1] of c: a take's or an undo's.
func (c *storeCall) mode() any {
	switch {
	case c.forget:
		return modeForget
	case c.undo:
		return modeUndo
	}
	return modeTake
}

// extra returns ARGV[5] of c (see Store.args): the Take's sorted-set
// member or lease token, or the Undo's token.
func (c *storeCall) extra() string {
	switch {
	case c.undo, c.s.script.byToken:
		return strconv.FormatUint(c.n, 10)
	case c.s.script.member:
		return c.s.idHead + strconv.FormatUint(c.n, 36)
	}
	return ""
}

// keysArgs returns e's KEYS and ARGV, built for a Store's call.
func (e *evalCall) keysArgs() ([]string, []any) {
	c := &e.take
	if c.s == nil {
		return e.keys, e.args
	}
	return c.s.scriptKeys(c.key), c.s.args(c.mode(), c.now, c.cost, c.extra())
}

// encoded holds the parts of a Store's EVALSHAs that are the same for
// every call, in RESP, built with its limits (see Store.encode).
type encoded struct {
	// head is the array's length, "evalsha", the script's SHA and the
	// number of KEYS.
	head []byte
	// tails are the key tails (Store.tails), each with its CRLF.
	tails [][]byte
	// take, undo and forget are ARGV[1] of each (mode), cr the ARGV[4] of
	// every call; takeNow is take with ARGV[2] for Redis TIME.
	take, takeNow, undo, forget, cr []byte
	static                          []byte // the ARGV after the common arguments (Store.static)
	// plain is cr, ARGV[5] of a take without a member and static: how
	// most calls end.
	plain []byte
}

// encode builds s.enc from s's script, key tails and constant arguments:
// what appendCall writes as is.
func (s *Store) encode() {
	e := &s.enc
	e.head = appendArray(e.head[:0], 3+len(s.tails)+5+len(s.static))
	e.head = appendBulk(e.head, "evalsha")
	e.head = appendBulk(e.head, s.script.run.Hash())
	e.head = appendBulk(e.head, strconv.Itoa(len(s.tails)))
	e.tails = e.tails[:0]
	for _, t := range s.tails {
		e.tails = append(e.tails, append([]byte(t), '\r', '\n'))
	}
	e.take = appendArg(e.take[:0], modeTake)
	e.takeNow = appendArg(append(e.takeNow[:0], e.take...), noNow)
	e.undo = appendArg(e.undo[:0], modeUndo)
	e.forget = appendArg(e.forget[:0], modeForget)
	e.cr = appendArg(e.cr[:0], s.cr)
	e.static = e.static[:0]
	for _, a := range s.static {
		e.static = appendArg(e.static, a)
	}
	e.plain = append(appendBulk(append(e.plain[:0], e.cr...), ""), e.static...)
}

// appendCall appends c, a call of s (of its script, s.script.run), to b
// as an EVALSHA: the same command as go-redis writes for c's keysArgs,
// encoded in place.
func (s *Store) appendCall(b []byte, c *storeCall) []byte {
	b = append(b, s.enc.head...)
	esc := EscapeKey(c.key)
	for _, t := range s.enc.tails {
		b = append(b, '$')
		b = appendLen(b, len(s.head)+len(esc)+len(t)-2)
		b = append(b, '\r', '\n')
		b = append(b, s.head...)
		b = append(b, esc...)
		b = append(b, t...)
	}
	switch {
	case c.forget:
		b = appendNow(append(b, s.enc.forget...), c.now)
	case c.undo:
		b = appendNow(append(b, s.enc.undo...), c.now)
	case c.now.IsZero():
		b = append(b, s.enc.takeNow...)
	default:
		b = appendNow(append(b, s.enc.take...), c.now)
	}
	b = appendInt(b, c.cost)
	var n [24]byte
	switch {
	case c.undo, s.script.byToken:
		b = append(b, s.enc.cr...)
		b = appendBulkBytes(b, strconv.AppendUint(n[:0], c.n, 10))
	case s.script.member:
		b = append(b, s.enc.cr...)
		num := strconv.AppendUint(n[:0], c.n, 36)
		b = append(b, '$')
		b = appendLen(b, len(s.idHead)+len(num))
		b = append(b, '\r', '\n')
		b = append(b, s.idHead...)
		b = append(b, num...)
		b = append(b, '\r', '\n')
	default:
		return append(b, s.enc.plain...)
	}
	return append(b, s.enc.static...)
}

// appendNow appends ARGV[2], now in µs (empty: zero, Redis TIME).
func appendNow(b []byte, now time.Time) []byte {
	if now.IsZero() {
		return appendBulk(b, "")
	}
	return appendInt(b, now.UnixMicro())
}

// appendInt appends v as a bulk string: a cost is most often one digit.
func appendInt(b []byte, v int64) []byte {
	if v >= 0 && v < 10 {
		return append(b, '$', '1', '\r', '\n', byte('0'+v), '\r', '\n')
	}
	var n [20]byte
	return appendBulkBytes(b, strconv.AppendInt(n[:0], v, 10))
}
