package redisstore

import (
	"fmt"
	"io/fs"
	"maps"
	"regexp"
	"slices"
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

// luaWord matches a Lua name, with the dots in front of it: a name after
// one dot is a field (math.fmod does not call lib.lua's fmod), after two a
// concatenation's operand.
var luaWord = regexp.MustCompile(`\.*[A-Za-z_][A-Za-z0-9_]*`)

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
			if !strings.HasPrefix(w, ".") || strings.HasPrefix(w, "..") {
				words[strings.TrimLeft(w, ".")] = true
			}
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

// Snippets. Lua that several scripts share word for word, but that a
// function of lib.lua would make dearer (a closure built on every call and
// a call through it each time), is written once in snippets.lua between
//
//	--@snippet <name>
//	...
//	--@end
//
// and placed where a script says "--@insert <name>" on a line of its own:
// each line of the snippet takes the indentation of that line. The script
// Redis runs is the same text as if it had been written there, and costs
// the same. expandSnippets runs before withLib (a snippet may call lib.lua's
// functions); a name inserted but not defined, or defined but inserted
// nowhere (checkSnippets, at init), is a broken build.

// snippetsFile holds the snippets; it is not a script.
const snippetsFile = "snippets.lua"

// The snippets the table of algorithms writes (algorithms.go), not
// snippets.lua: params, the tiers' constants of an algorithm's script, and
// lease_params, the names of every leasing algorithm's, in lease.lua.
const (
	paramsSnippetName      = "params"
	leaseParamsSnippetName = "lease_params"
)

// generatedSnippets is the set of those names.
var generatedSnippets = map[string]bool{paramsSnippetName: true, leaseParamsSnippetName: true}

// snippetLine matches the line that opens a snippet, inserts one, or ends
// one, and captures its indentation, its verb and the name.
var snippetLine = regexp.MustCompile(`^([ \t]*)--@(snippet|insert|end)\b[ \t]*([A-Za-z0-9_]*)[ \t]*$`)

// parseSnippets returns the snippets of src, by name, each the text of its
// lines between --@snippet and --@end.
func parseSnippets(src string) (map[string]string, error) {
	snips := map[string]string{}
	name, inside := "", false
	var cur strings.Builder
	for n, line := range strings.SplitAfter(src, "\n") {
		m := snippetLine.FindStringSubmatch(strings.TrimRight(line, "\r\n"))
		switch {
		case m == nil && strings.HasPrefix(strings.TrimSpace(line), "--@"):
			return nil, fmt.Errorf("%s:%d: %q: not --@snippet <name> or --@end", snippetsFile, n+1, strings.TrimSpace(line))
		case m == nil:
			if inside {
				cur.WriteString(line)
			}
		case m[2] == "snippet" && !inside && m[3] != "":
			if _, dup := snips[m[3]]; dup {
				return nil, fmt.Errorf("%s:%d: snippet %s defined twice", snippetsFile, n+1, m[3])
			}
			name, inside = m[3], true
			cur.Reset()
		case m[2] == "end" && inside && m[3] == "":
			snips[name], inside = cur.String(), false
		default:
			return nil, fmt.Errorf("%s:%d: misplaced %q", snippetsFile, n+1, strings.TrimSpace(line))
		}
	}
	if inside {
		return nil, fmt.Errorf("%s: snippet %s has no --@end", snippetsFile, name)
	}
	return snips, nil
}

// expandSnippets returns src (the file name) with each --@insert line
// replaced by its snippet, indented as the line is.
func expandSnippets(snips map[string]string, name, src string) (string, error) {
	if !strings.Contains(src, "--@") {
		return src, nil
	}
	var b strings.Builder
	for n, line := range strings.SplitAfter(src, "\n") {
		m := snippetLine.FindStringSubmatch(strings.TrimRight(line, "\r\n"))
		if m == nil {
			if strings.HasPrefix(strings.TrimSpace(line), "--@") {
				return "", fmt.Errorf("%s:%d: %q: not --@insert <name>", name, n+1, strings.TrimSpace(line))
			}
			b.WriteString(line)
			continue
		}
		text, ok := snips[m[3]]
		if m[2] != "insert" || !ok {
			return "", fmt.Errorf("%s:%d: %q: no such snippet in %s", name, n+1, strings.TrimSpace(line), snippetsFile)
		}
		for _, l := range strings.SplitAfter(text, "\n") {
			if strings.TrimSpace(l) != "" {
				b.WriteString(m[1])
			}
			b.WriteString(l)
		}
	}
	return b.String(), nil
}

// insertedSnippets returns the names the files of fsys other than
// snippetsFile insert, with the first file inserting each.
func insertedSnippets(fsys fs.FS) (map[string]string, error) {
	files, err := fs.Glob(fsys, "*.lua")
	if err != nil {
		return nil, err
	}
	used := map[string]string{}
	for _, f := range files {
		if f == snippetsFile {
			continue
		}
		src, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, err
		}
		for _, name := range insertsOf(string(src)) {
			if _, seen := used[name]; !seen {
				used[name] = f
			}
		}
	}
	return used, nil
}

// insertsOf returns the names of the snippets src inserts, in order.
func insertsOf(src string) []string {
	var names []string
	for _, line := range strings.Split(src, "\n") {
		if m := snippetLine.FindStringSubmatch(strings.TrimRight(line, "\r")); m != nil && m[2] == "insert" {
			names = append(names, m[3])
		}
	}
	return names
}

// checkSnippets reports a snippet of fsys that no script inserts, or an
// insert of a snippet that does not exist: a snippet left behind, or a
// typo, fails the build rather than a call.
func checkSnippets(fsys fs.FS) error {
	src, err := fs.ReadFile(fsys, snippetsFile)
	if err != nil {
		return err
	}
	snips, err := parseSnippets(string(src))
	if err != nil {
		return err
	}
	used, err := insertedSnippets(fsys)
	if err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(snips)) {
		if generatedSnippets[name] {
			return fmt.Errorf("%s: snippet %s is written by the table of algorithms", snippetsFile, name)
		}
		if used[name] == "" {
			return fmt.Errorf("%s: snippet %s is inserted nowhere", snippetsFile, name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(used)) {
		if _, ok := snips[name]; !ok && !generatedSnippets[name] {
			return fmt.Errorf("%s: --@insert %s: no such snippet in %s", used[name], name, snippetsFile)
		}
	}
	return nil
}
