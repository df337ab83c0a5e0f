package redisstore

import (
	"crypto/sha256"
	"encoding/hex"
)

// MaxEscapedKey is the longest an escaped user key may be; a key whose
// escaped form would be longer is replaced by its SHA-256 digest.
const MaxEscapedKey = 128

// hashedKeyPrefix starts the escaped form of a hashed key. Escaping never
// produces it ('%' is always followed by two upper-case hex digits, and 'H'
// is not one), so a hashed key never equals an escaped one.
const hashedKeyPrefix = "%H"

// emptyKey is the escaped form of the empty key: a hash tag must not be
// empty. Escaping never produces it ('Z' is not a hex digit).
const emptyKey = "%Z"

// EscapeKey returns the form of a user's key that goes between the braces
// of a Redis key (the Cluster hash tag):
//
//   - the bytes '{', '}', '%', every control byte (0x00-0x1F, 0x7F, so CR
//     and LF) and ' ' become %XX (upper-case hex); every other byte is kept;
//   - if the result is longer than MaxEscapedKey (128) bytes, the key is
//     replaced by "%H" followed by the hex SHA-256 of the original key
//     (66 bytes);
//   - the empty key becomes "%Z" (an empty hash tag "{}" is no hash tag).
//
// The result never contains a brace or a newline, is at most 128 bytes, and
// distinct keys give distinct results (escaping is injective because '%'
// itself is escaped; a digest cannot be confused with an escaped key, see
// hashedKeyPrefix; distinct long keys collide only if SHA-256 does).
func EscapeKey(key string) string {
	if key == "" {
		// "{}" is no hash tag at all (Redis would hash the whole key, and
		// the keys of one zone key could land in different slots).
		return emptyKey
	}
	if len(key) <= MaxEscapedKey && !needsEscape(key) {
		return key // most keys: an address, an ID
	}
	n := 0
	for i := 0; i < len(key); i++ {
		if mustEscape(key[i]) {
			n += 3
		} else {
			n++
		}
	}
	if n > MaxEscapedKey {
		sum := sha256.Sum256([]byte(key))
		return hashedKeyPrefix + hex.EncodeToString(sum[:])
	}
	if n == len(key) {
		return key
	}
	b := make([]byte, 0, n)
	for i := 0; i < len(key); i++ {
		c := key[i]
		if mustEscape(c) {
			b = append(b, '%', hexDigits[c>>4], hexDigits[c&15])
		} else {
			b = append(b, c)
		}
	}
	return string(b)
}

const hexDigits = "0123456789ABCDEF"

// needsEscape reports whether key has a byte EscapeKey escapes, testing
// eight bytes at a time: a key is tested for each call.
func needsEscape(key string) bool {
	i := 0
	for ; len(key)-i >= 8; i += 8 {
		b := key[i : i+8]
		x := uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
			uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
		if escapes8(x) {
			return true
		}
	}
	for ; i < len(key); i++ {
		if mustEscape(key[i]) {
			return true
		}
	}
	return false
}

// escapes8 reports whether one of the eight bytes of x is one mustEscape
// picks out: below 0x21, or 0x7F, '{', '}' or '%'. (x-ones*n)&^x&high is
// not zero exactly when a byte of x is below n (n at most 0x80), so zero
// finds a byte of y that is 0: one of x equal to what y is x xor'ed with.
func escapes8(x uint64) bool {
	const ones, high = 0x0101010101010101, 0x8080808080808080
	zero := func(y uint64) uint64 { return (y - ones) &^ y & high }
	return (x-ones*0x21)&^x&high|zero(x^ones*0x7F)|zero(x^ones*'{')|zero(x^ones*'}')|zero(x^ones*'%') != 0
}

// mustEscape reports whether EscapeKey escapes c: a bit test, since a
// key's every byte is looked at for each call.
func mustEscape(c byte) bool {
	const (
		low  uint64 = 1<<'%' | (1<<(' '+1) - 1)         // bytes 0-63: the control bytes, ' ', '%'
		high uint64 = 1<<('{'-64) | 1<<('}'-64) | 1<<63 // bytes 64-127: '{', '}', 0x7F
	)
	if c < 64 {
		return low>>c&1 != 0
	}
	return c < 128 && high>>(c-64)&1 != 0
}
