package redisstore

import (
	"regexp"
	"strings"
)

// A script is lib.lua followed by the algorithm's file, and Redis runs the
// whole chunk on every call: each `local function` of lib.lua is a closure
// built per call whether the algorithm uses it or not. withLib sends each
// script only the functions of lib.lua it reaches, so sharing a helper in
// lib.lua costs nothing to the scripts that do not use it.

// libFunc matches the first line of a top-level function of lib.lua; the
// function ends at the first line that is exactly "end".
var libFunc = regexp.MustCompile(`^local function ([A-Za-z_][A-Za-z0-9_]*)\(`)

// luaComment matches a Lua line comment (the scripts have no "--" inside
// strings).
var luaComment = regexp.MustCompile(`--[^\n]*`)

// luaWord matches a Lua name.
var luaWord = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)

// libPart is a run of lib.lua's lines: a top-level function (name set), or
// what stands between them (always kept).
type libPart struct {
	name string
	text string
}

// splitLib cuts lib into its top-level functions and the lines between.
func splitLib(lib string) []libPart {
	var parts []libPart
	var cur strings.Builder
	flush := func(name string) {
		if cur.Len() > 0 {
			parts = append(parts, libPart{name: name, text: cur.String()})
			cur.Reset()
		}
	}
	name := ""
	for _, line := range strings.SplitAfter(lib, "\n") {
		if name == "" {
			if m := libFunc.FindStringSubmatch(line); m != nil {
				flush("")
				name = m[1]
			}
		}
		cur.WriteString(line)
		if name != "" && strings.TrimRight(line, "\r\n") == "end" {
			flush(name)
			name = ""
		}
	}
	flush(name)
	return parts
}

// withLib returns lib followed by src, leaving out every function of lib
// that neither src, nor lib's other lines, nor a function kept refers to.
func withLib(lib, src string) string {
	parts := splitLib(lib)
	keep := make([]bool, len(parts))
	// words holds the names the reached code uses: the script, the lines
	// between functions, and every function kept so far. Comments do not
	// count: they name functions they do not call.
	words := map[string]bool{}
	reach := func(code string) {
		for _, w := range luaWord.FindAllString(luaComment.ReplaceAllString(code, ""), -1) {
			words[w] = true
		}
	}
	reach(src)
	for i, p := range parts {
		if p.name == "" {
			keep[i] = true
			reach(p.text)
		}
	}
	for changed := true; changed; {
		changed = false
		for i, p := range parts {
			if !keep[i] && words[p.name] {
				keep[i], changed = true, true
				reach(p.text)
			}
		}
	}
	var b strings.Builder
	for i, p := range parts {
		if keep[i] {
			b.WriteString(p.text)
		}
	}
	b.WriteString("\n")
	b.WriteString(src)
	return b.String()
}
