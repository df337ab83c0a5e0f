package keyresolver

import (
	"fmt"
	"strings"
)

// CheckTemplate reports braces of tmpl that Caddy's replacer would not read
// as a placeholder: a '{' that is never closed, a '}' that closes nothing, a
// '{' inside a placeholder (placeholders do not nest) and the empty
// placeholder "{}". The replacer keeps such braces as literal text, so a
// typo such as "{http.request.header.X-Api-Key" (no '}') would evaluate to
// that same text for every request: one key shared by all clients.
// Escaped braces (\{ and \}) are literal text and accepted, as the replacer
// reads them.
func CheckTemplate(tmpl string) error {
	open := -1 // the '{' of the placeholder being read, or -1
	for i := 0; i < len(tmpl); i++ {
		c := tmpl[i]
		if c != '{' && c != '}' || i > 0 && tmpl[i-1] == '\\' {
			continue
		}
		switch {
		case c == '{' && open >= 0:
			return fmt.Errorf("'{' inside the placeholder %q: placeholders do not nest (escape a literal brace as \\{)", tmpl[open:i+1])
		case c == '{':
			open = i
		case open < 0:
			return fmt.Errorf("'}' closes no placeholder in %q (a '{' is missing; escape a literal brace as \\})", tmpl[:i+1])
		case i == open+1:
			return fmt.Errorf("empty placeholder {} in %q", tmpl)
		default:
			open = -1
		}
	}
	if open >= 0 {
		return fmt.Errorf("unclosed placeholder %q: no '}' (escape a literal brace as \\{)", tmpl[open:])
	}
	return nil
}

// Literal returns the text of tmpl outside its placeholders, with escaped
// braces as the braces they stand for: what every value of tmpl holds
// whatever the placeholders give. tmpl is one CheckTemplate accepts.
func Literal(tmpl string) string {
	var b strings.Builder
	in := false
	for i := 0; i < len(tmpl); i++ {
		c := tmpl[i]
		switch {
		case c == '\\' && i+1 < len(tmpl) && (tmpl[i+1] == '{' || tmpl[i+1] == '}'):
			if !in {
				b.WriteByte(tmpl[i+1])
			}
			i++
		case c == '{':
			in = true
		case c == '}' && in:
			in = false
		case !in:
			b.WriteByte(c)
		}
	}
	return b.String()
}
