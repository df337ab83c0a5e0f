package redisstore

import (
	"strings"
	"testing"
)

func TestSplitLibKeepsEveryLine(t *testing.T) {
	lib, err := scriptFS.ReadFile("lib.lua")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	names := 0
	for _, p := range splitLib(string(lib)) {
		b.WriteString(p.text)
		if p.name != "" {
			names++
			if !strings.HasPrefix(p.text, "local function "+p.name+"(") || !strings.HasSuffix(p.text, "\nend\n") {
				t.Errorf("function %s is not cut at its first and last line:\n%s", p.name, p.text)
			}
		}
	}
	if b.String() != string(lib) {
		t.Error("the parts of lib.lua do not add up to lib.lua")
	}
	if names < 10 {
		t.Errorf("found %d functions in lib.lua, want its top-level functions", names)
	}
}

// TestScriptsCarryTheLibTheyUse: each script is sent with the functions of
// lib.lua it reaches, directly or through another, and without the others.
func TestScriptsCarryTheLibTheyUse(t *testing.T) {
	for _, c := range []struct {
		alg        string
		has, lacks []string
	}{
		{"fixed_window", []string{"win_pick", "win_start", "load_blocked", "refusal", "state_of", "save_state", "ttl_ms", "cdiv", "idiv"}, []string{"bucket_result", "better_denied", "load_state", "blocked"}},
		{"gcra", []string{"bucket_result", "better_denied", "better_allowed", "gcd"}, []string{"win_pick", "win_start", "win_wait", "fmod"}},
	} {
		text, err := scriptText(scriptFS, c.alg, true, generatedFor(c.alg))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range c.has {
			if !strings.Contains(text, "local function "+f+"(") {
				t.Errorf("%s: %s is left out, but the script reaches it", c.alg, f)
			}
		}
		for _, f := range c.lacks {
			if strings.Contains(text, "local function "+f+"(") {
				t.Errorf("%s: %s is sent, but the script does not use it", c.alg, f)
			}
		}
	}
}

func mustRead(t testing.TB, name string) string {
	t.Helper()
	b, err := scriptFS.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
