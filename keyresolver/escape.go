package keyresolver

import (
	"crypto/sha256"
	"encoding/hex"
)

// MaxEscapedLen is the longest string Escape returns.
const MaxEscapedLen = 200

// Escape returns key in a form safe to embed in a Redis key (inside a
// {hash tag}) or a log line: printable ASCII without '{', '}', '%', '#' or
// space, at most MaxEscapedLen bytes.
//
// Bytes outside that set are percent-encoded ("%7B" for '{'); a key whose
// encoding would exceed MaxEscapedLen becomes "#" followed by the hex SHA-256
// of the key. The mapping is injective (distinct keys never share an escaped
// form, short of a SHA-256 collision), and a key that needs no escaping is
// returned as is, without allocating.
func Escape(key string) string {
	n, ok := escapedLen(key)
	if ok && n == len(key) {
		return key
	}
	return string(appendEscape(make([]byte, 0, min(n, hashedLen)), key, n, ok))
}

// AppendEscape appends Escape(key) to dst and returns the extended slice.
func AppendEscape(dst []byte, key string) []byte {
	n, ok := escapedLen(key)
	return appendEscape(dst, key, n, ok)
}

const hashedLen = 1 + 2*sha256.Size

func appendEscape(dst []byte, key string, n int, ok bool) []byte {
	if !ok {
		sum := sha256.Sum256([]byte(key))
		dst = append(dst, '#')
		return hex.AppendEncode(dst, sum[:])
	}
	if n == len(key) {
		return append(dst, key...)
	}
	const digits = "0123456789ABCDEF"
	for i := 0; i < len(key); i++ {
		c := key[i]
		if safe(c) {
			dst = append(dst, c)
		} else {
			dst = append(dst, '%', digits[c>>4], digits[c&15])
		}
	}
	return dst
}

// escapedLen returns the length of key percent-encoded and whether that is
// within MaxEscapedLen.
func escapedLen(key string) (int, bool) {
	if len(key) > MaxEscapedLen {
		return 0, false
	}
	n := len(key)
	for i := 0; i < len(key); i++ {
		if !safe(key[i]) {
			n += 2
		}
	}
	return n, n <= MaxEscapedLen
}

func safe(c byte) bool {
	return c > ' ' && c < 0x7f && c != '{' && c != '}' && c != '%' && c != '#'
}
