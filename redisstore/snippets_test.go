package redisstore

import (
	"strings"
	"testing"
	"testing/fstest"
)

// snippetFS is a tree of scripts with lib.lua and snippets.lua.
func snippetFS(snippets string, files map[string]string) fstest.MapFS {
	fsys := fstest.MapFS{
		"lib.lua":    {Data: []byte("local function used(x)\n  return x\nend\n\nlocal function unused(x)\n  return x\nend\n")},
		snippetsFile: {Data: []byte(snippets)},
	}
	for name, src := range files {
		fsys[name] = &fstest.MapFile{Data: []byte(src)}
	}
	return fsys
}

// TestSnippetsInsertedAsWritten: a script built from snippets is the text
// written out, indentation included, and reaches the lib functions the
// snippets call.
func TestSnippetsInsertedAsWritten(t *testing.T) {
	fsys := snippetFS("-- about\n--@snippet head\nlocal a = used(1)\n\nif a then\n  a = 2\nend\n--@end\n",
		map[string]string{"s.lua": "-- s\nif KEYS then\n  --@insert head\nend\nreturn 1\n"})
	got, err := scriptText(fsys, "s", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := "local function used(x)\n  return x\nend\n\n\n" +
		"-- s\nif KEYS then\n  local a = used(1)\n\n  if a then\n    a = 2\n  end\nend\nreturn 1\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if err := checkSnippets(fsys); err != nil {
		t.Error(err)
	}
}

// TestSnippetsFailLoudly: an unknown, unused, unterminated or misspelt
// snippet is an error, not a script that runs without it.
func TestSnippetsFailLoudly(t *testing.T) {
	const head = "--@snippet head\nlocal a = 1\n--@end\n"
	for _, c := range []struct {
		name, snippets, script, want string
	}{
		{"unknown", head, "--@insert head\n--@insert tail\n", "tail"},
		{"unused", head + "--@snippet tail\nlocal b = 2\n--@end\n", "--@insert head\n", "tail is inserted nowhere"},
		{"no end", "--@snippet head\nlocal a = 1\n", "--@insert head\n", "no --@end"},
		{"twice", head + head, "--@insert head\n", "defined twice"},
		{"nested", "--@snippet head\n--@insert head\n--@end\n", "--@insert head\n", "misplaced"},
		{"misspelt", head, "--@insert head\n--@inserts head\n", "not --@insert"},
		{"two names", head, "--@insert head\n--@insert head tail\n", "not --@insert"},
	} {
		fsys := snippetFS(c.snippets, map[string]string{"s.lua": c.script})
		err := checkSnippets(fsys)
		if err == nil {
			_, err = scriptText(fsys, "s", false, nil)
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got error %v, want one saying %q", c.name, err, c.want)
		}
	}
}

// TestGeneratedSnippets: the snippet params is the table constructor of
// each tier's constants, by name; a snippet the table of algorithms writes
// must be inserted by the script it is written for, and snippets.lua
// cannot define one.
func TestGeneratedSnippets(t *testing.T) {
	gen := map[string]string{paramsSnippetName: paramsSnippet([]string{"E", "W"})}
	fsys := snippetFS("", map[string]string{"s.lua": "if KEYS then\n  --@insert params\nend\n"})
	got, err := scriptText(fsys, "s", false, gen)
	want := "if KEYS then\n  local P = {}\n  for i = 1, N do\n    local o = 5 + 2 * i\n" +
		"    P[i] = {E = ARGV[o + 1] + 0, W = ARGV[o + 2] + 0}\n  end\nend\n"
	if err != nil || got != want {
		t.Errorf("got %v\n%s\nwant\n%s", err, got, want)
	}
	if err := checkSnippets(fsys); err != nil {
		t.Error(err)
	}
	fsys = snippetFS("", map[string]string{"s.lua": "return 1\n"})
	if _, err := scriptText(fsys, "s", false, gen); err == nil || !strings.Contains(err.Error(), "s.lua: no --@insert params") {
		t.Errorf("not inserted: %v", err)
	}
	fsys = snippetFS("--@snippet params\nlocal P = {}\n--@end\n", map[string]string{"s.lua": "--@insert params\n"})
	if err := checkSnippets(fsys); err == nil || !strings.Contains(err.Error(), "params is written by the table of algorithms") {
		t.Errorf("defined in %s: %v", snippetsFile, err)
	}
}

// TestSnippetsOfTheScripts: the package's own snippets are all used and
// all defined (init panics otherwise), and every script builds.
func TestSnippetsOfTheScripts(t *testing.T) {
	if err := checkSnippets(scriptFS); err != nil {
		t.Fatal(err)
	}
	for name := range sentScripts() {
		if _, err := scriptText(scriptFS, name, false, generatedFor(name)); err != nil {
			t.Error(err)
		}
	}
}

// generatedFor is the snippets newScript was given for the script name.
func generatedFor(name string) map[string]string {
	if name == "lease" {
		return map[string]string{leaseParamsSnippetName: leaseParamsSnippet(scripts)}
	}
	if s := scripts[name]; s != nil {
		return map[string]string{paramsSnippetName: paramsSnippet(s.params)}
	}
	return nil
}
