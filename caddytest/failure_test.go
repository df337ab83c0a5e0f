//go:build linux

package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zonelimit/caddy-ratelimit/internal/caddytesting"
	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
)

// go-redis's own log lines (a pool that cannot dial Redis) go to Caddy's
// logger, under the module's name, and not to stderr in go-redis's format.
// (The two-layer mode's pushes go through go-redis; a strict zone's
// decisions, and the probe, on a connection of the store's own.)
func TestRedisClientLogsToCaddy(t *testing.T) {
	srv := redistest.Start(t)
	addr := srv.Addr
	srv.Stop() // nothing listens there any more: dials are refused

	logFile := filepath.Join(t.TempDir(), "caddy.log")
	logBlock := fmt.Sprintf(`	log {
		output file %s
		format json
		level DEBUG
	}`, logFile)
	live.Load(t, live.Globals(logBlock)+fmt.Sprintf(`
http:// {
	rate_limit {
		zone rf_logs {
			key {http.request.header.X-Key}
			algorithm fixed_window
			limit 100 1m
		}
		store redis
		sync_interval 100ms
		redis {
			address %s
		}
		on_error open
	}
	respond "ok"
}`, addr))

	stderr := captureStderr(t)
	for i := 0; i < 10; i++ {
		caddytesting.ExpectCode(t, live.Get(t, "/", "X-Key", fmt.Sprint("k", i)), 200, "Redis down, a key's first request")
	}
	var dials []map[string]any
	deadline := time.Now().Add(10 * time.Second)
	for len(dials) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no go-redis dial failure in Caddy's log %s; stderr:\n%s", logFile, stderr())
		}
		time.Sleep(20 * time.Millisecond)
		dials = logLines(t, logFile, "failed to dial")
	}
	if got := stderr(); strings.Contains(got, "failed to dial") {
		t.Errorf("go-redis wrote to stderr:\n%s", got)
	}
	for _, l := range dials {
		if l["logger"] != "http.handlers.rate_limit" || l["source"] != "go-redis" || !strings.Contains(fmt.Sprint(l["msg"]), addr) {
			t.Errorf("go-redis line %v: want logger http.handlers.rate_limit, source go-redis and the address %s", l, addr)
		}
	}
}

// logLines returns the JSON lines of file whose message contains msg.
func logLines(t *testing.T, file, msg string) []map[string]any {
	t.Helper()
	f, err := os.Open(file)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && strings.Contains(fmt.Sprint(m["msg"]), msg) {
			out = append(out, m)
		}
	}
	return out
}

// captureStderr sends what the process writes to its stderr (file
// descriptor 2, which go-redis's default logger writes to) to a file until
// the test ends; the function returned reads what was written so far.
func captureStderr(t *testing.T) func() string {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	saved, err := syscall.Dup(2)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Dup3(int(f.Fd()), 2, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Dup3(saved, 2, 0)
		_ = syscall.Close(saved)
		f.Close()
	})
	return func() string {
		b, err := os.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
}
