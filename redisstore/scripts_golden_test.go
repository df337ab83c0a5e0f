package redisstore

import (
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// scriptsGolden holds the SHA1 of every script as the store sends it
// (EVALSHA's name for it), one "<name> <sha1>" a line. A script's text is
// what Redis runs on every call: moving Lua between files must leave it
// byte for byte, so that it costs Redis nothing. A change to what is sent is deliberate: rewrite the file
// with UPDATE_GOLDEN=1 go test -run TestScriptsGolden ./redisstore/.
const scriptsGolden = "testdata/scripts.sha1"

// sentScripts is every script the package sends, by name.
func sentScripts() map[string]*redis.Script {
	m := map[string]*redis.Script{
		"block": blockScript,
		"lease": leaseScript,
		"sync":  syncScript,
	}
	for name, s := range scripts {
		m[name] = s.run
	}
	return m
}

func TestScriptsGolden(t *testing.T) {
	all := sentScripts()
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(all)) {
		b.WriteString(name + " " + all[name].Hash() + "\n")
	}
	got := b.String()
	if os.Getenv("UPDATE_GOLDEN") == "1" {
		if err := os.WriteFile(scriptsGolden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(scriptsGolden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("the scripts as sent changed; %s holds:\n%s\nnow:\n%s", scriptsGolden, want, got)
	}
}
