package redisstore

import (
	"math/rand/v2"
	"strings"
	"testing"
)

func TestEscapeKey(t *testing.T) {
	cases := map[string]string{
		"":                "%Z",
		"1.2.3.4":         "1.2.3.4",
		"a{b}c":           "a%7Bb%7Dc",
		"100%":            "100%25",
		"x\ny\r\x00\x7f ": "x%0Ay%0D%00%7F%20",
		"é":               "é",
	}
	for in, want := range cases {
		if got := EscapeKey(in); got != want {
			t.Errorf("EscapeKey(%q) = %q, want %q", in, got, want)
		}
	}
	// Long keys, byte for byte: these names are a running fleet's data.
	for in, want := range map[string]string{
		strings.Repeat("a", MaxEscapedKey+1): "%Hc12cb024a2e5551cca0e08fce8f1c5e314555cc3fef6329ee994a3db752166ae",
		strings.Repeat("a", MaxEscapedKey):   strings.Repeat("a", MaxEscapedKey),
		// 43 braces escape to 129 bytes: hashed.
		strings.Repeat("{", 43): "%He2a48ddb548587d7f6bcedfece11859afb6243420e650206c4ae58f53b2c7388",
	} {
		if got := EscapeKey(in); got != want {
			t.Errorf("EscapeKey(%d bytes %.3q...) = %q, want %q", len(in), in, got, want)
		}
	}
}

// mustEscape picks out exactly the bytes EscapeKey's documentation names.
func TestMustEscape(t *testing.T) {
	for c := 0; c < 256; c++ {
		want := c < 0x20 || c == 0x7f || c == ' ' || c == '{' || c == '}' || c == '%'
		if got := mustEscape(byte(c)); got != want {
			t.Errorf("mustEscape(%#x) = %v, want %v", c, got, want)
		}
	}
}

// needsEscape, eight bytes at a time, finds a byte to escape exactly
// when one is there, wherever it is and whatever bytes surround it.
func TestNeedsEscape(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 100000 {
		// Bytes kept as they are (printable, or above 0x7F), and at
		// times one of any value anywhere.
		b := make([]byte, rng.IntN(40))
		for i := range b {
			c := byte(rng.IntN(256))
			for mustEscape(c) {
				c = byte(rng.IntN(256))
			}
			b[i] = c
		}
		if len(b) > 0 && rng.IntN(2) == 0 {
			b[rng.IntN(len(b))] = byte(rng.IntN(256))
		}
		want := false
		for _, c := range b {
			want = want || mustEscape(c)
		}
		if got := needsEscape(string(b)); got != want {
			t.Fatalf("needsEscape(%q) = %v, want %v", b, got, want)
		}
	}
}

func FuzzEscapeKey(f *testing.F) {
	for _, s := range []string{"", "a", "{", "}", "%", "%H", "%7B", "{}", "a\nb", strings.Repeat("x", 200), strings.Repeat("{", 43)} {
		f.Add(s, s+"x")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ea, eb := EscapeKey(a), EscapeKey(b)
		for _, e := range []string{ea, eb} {
			if strings.ContainsAny(e, "{}\n\r") {
				t.Fatalf("escaped %q contains a brace or newline", e)
			}
			if e == "" {
				t.Fatal("escaped key is empty (an empty hash tag)")
			}
			if len(e) > MaxEscapedKey {
				t.Fatalf("escaped key is %d bytes", len(e))
			}
		}
		if (a == b) != (ea == eb) {
			t.Fatalf("EscapeKey(%q) = %q, EscapeKey(%q) = %q", a, ea, b, eb)
		}
		if ea != EscapeKey(a) {
			t.Fatal("not deterministic")
		}
	})
}
