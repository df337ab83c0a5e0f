package ratelimit

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
)

var updateGolden = flag.Bool("update", false, "rewrite the JSON half of testdata/caddyfile/*.caddyfiletest from the adapter's output")

// adaptCaddyfile adapts a Caddyfile (file name "Caddyfile") to indented
// JSON.
func adaptCaddyfile(t testing.TB, caddyfile string) (string, []caddyconfig.Warning, error) {
	t.Helper()
	adapter := caddyconfig.GetAdapter("caddyfile")
	if adapter == nil {
		t.Fatal("no caddyfile adapter registered")
	}
	out, warnings, err := adapter.Adapt([]byte(caddyfile), nil)
	if err != nil {
		return "", warnings, err
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, out, "", "\t"); err != nil {
		t.Fatalf("adapter returned invalid JSON: %v\n%s", err, out)
	}
	return buf.String(), warnings, nil
}

const goldenSeparator = "----------"

// readGolden splits a .caddyfiletest file into its Caddyfile and expected
// output (JSON, or an error substring when it does not start with '{').
func readGolden(t testing.TB, path string) (caddyfile, expected string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(data), "\r\n", "\n")
	parts := strings.SplitN(text, goldenSeparator, 2)
	if len(parts) != 2 {
		t.Fatalf("%s: no %q line between the Caddyfile and the expected output", path, goldenSeparator)
	}
	return strings.TrimSpace(parts[0]) + "\n", strings.TrimSpace(parts[1])
}

func goldenFiles(t testing.TB) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "caddyfile", "*.caddyfiletest"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no golden files in testdata/caddyfile")
	}
	return files
}

// TestCaddyfileGolden adapts every testdata/caddyfile/*.caddyfiletest and
// compares the JSON with the expected half of the file (or, when that half
// is not JSON, checks that adapting fails with an error containing it).
// Run with -update to rewrite the JSON halves; then read the diff.
func TestCaddyfileGolden(t *testing.T) {
	for _, path := range goldenFiles(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			caddyfile, expected := readGolden(t, path)
			got, warnings, err := adaptCaddyfile(t, caddyfile)

			if expected != "" && expected[0] != '{' {
				if err == nil {
					t.Fatalf("adapt succeeded, want an error containing %q", expected)
				}
				if !strings.Contains(err.Error(), expected) {
					t.Fatalf("error %q does not contain %q", err, expected)
				}
				return
			}
			if err != nil {
				t.Fatalf("adapt: %v", err)
			}
			for _, w := range warnings {
				t.Errorf("warning: %s", w)
			}
			if *updateGolden {
				out := strings.TrimSpace(caddyfile) + "\n" + goldenSeparator + "\n" + got + "\n"
				if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if got != expected {
				t.Errorf("adapted JSON differs\n--- got:\n%s\n--- want:\n%s", got, expected)
			}
		})
	}
}

// TestCaddyfileGoldenHandlersValidate checks that every handler the golden
// files produce passes Validate when decoded from the adapted JSON, so the
// Caddyfile and JSON paths agree on what is valid.
func TestCaddyfileGoldenHandlersValidate(t *testing.T) {
	for _, path := range goldenFiles(t) {
		caddyfile, expected := readGolden(t, path)
		if expected == "" || expected[0] != '{' {
			continue
		}
		out, _, err := adaptCaddyfile(t, caddyfile)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		handlers := findRateLimitHandlers(t, []byte(out))
		if len(handlers) == 0 {
			t.Errorf("%s: no rate_limit handler in the adapted JSON", path)
		}
		for _, raw := range handlers {
			var h Handler
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&h); err != nil {
				t.Errorf("%s: decoding %s: %v", path, raw, err)
				continue
			}
			if err := h.Validate(); err != nil {
				t.Errorf("%s: Validate: %v", path, err)
			}
		}
	}
}

// findRateLimitHandlers returns every JSON object with "handler":
// "rate_limit", without the "handler" key, anywhere in doc.
func findRateLimitHandlers(t testing.TB, doc []byte) []json.RawMessage {
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		t.Fatal(err)
	}
	var found []json.RawMessage
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if v["handler"] == "rate_limit" {
				c := make(map[string]any, len(v))
				for k, x := range v {
					if k != "handler" {
						c[k] = x
					}
				}
				b, err := json.Marshal(c)
				if err != nil {
					t.Fatal(err)
				}
				found = append(found, b)
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(v)
	return found
}

// TestCaddyfileErrors checks that bad input fails adapt with the file and
// line at fault and a message naming the problem.
func TestCaddyfileErrors(t *testing.T) {
	// site wraps a rate_limit block (its lines start at line 2) in a site.
	site := func(body string) string {
		return ":8080 {\n" + body + "\n\trespond \"ok\"\n}\n"
	}
	// zone wraps zone lines (starting at line 4) in a zone block.
	zone := func(lines string) string {
		return site("\trate_limit {\n\t\tzone z {\n" + lines + "\n\t\t}\n\t}")
	}
	// zoneZ is a valid zone block of lines 3 to 6.
	const zoneZ = "\t\tzone z {\n\t\t\tkey k\n\t\t\tlimit 1 1s\n\t\t}\n"
	tests := []struct {
		name      string
		caddyfile string
		want      []string // substrings of the error
	}{
		// The directive itself.
		{"directive argument", site("\trate_limit /api foo {\n\t}"), []string{"Caddyfile:2", `unexpected argument "foo"`}},
		{"no block", site("\trate_limit"), []string{"Caddyfile:2", "no zones"}},
		{"empty block", site("\trate_limit {\n\t}"), []string{"Caddyfile:2", "no zones"}},
		{"unknown handler subdirective", site("\trate_limit {\n\t\tzone z {\n\t\t\tkey k\n\t\t\tlimit 1 1s\n\t\t}\n\t\tfrobnicate 3\n\t}"), []string{"Caddyfile:7", `unknown subdirective "frobnicate"`, "max_keys"}},
		{"mholt distributed", site("\trate_limit {\n\t\tdistributed\n\t}"), []string{"Caddyfile:3", "distributed", "not supported"}},

		// store redis and its options (the zone is lines 3-6).
		{"redis without store redis", site("\trate_limit {\n" + zoneZ + "\t\tredis 127.0.0.1:6379\n\t}"), []string{"Caddyfile:7", "redis settings need store redis"}},
		{"on_error without redis", site("\trate_limit {\n" + zoneZ + "\t\ton_error closed\n\t}"), []string{"Caddyfile:7", "on_error applies only to store redis"}},
		{"on_error unknown", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\ton_error maybe\n\t}"), []string{"Caddyfile:8", `unknown on_error value "maybe"`}},
		{"sync_interval with sliding_log", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tsync_interval 1s\n\t}"), []string{"Caddyfile:8", "sync_interval works with algorithm sliding_window or fixed_window (counts that can be summed), not sliding_log"}},
		{"lease with leaky_bucket", site("\trate_limit {\n\t\tzone z {\n\t\t\tkey k\n\t\t\talgorithm leaky_bucket\n\t\t\tlimit 1 1s\n\t\t}\n\t\tstore redis\n\t\tlease 1s\n\t}"), []string{"Caddyfile:9", "lease works with algorithm sliding_log, sliding_window, fixed_window", ", not leaky_bucket"}},
		{"lease with count_rejected", site("\trate_limit {\n\t\tzone z {\n\t\t\tkey k\n\t\t\tlimit 1 1s\n\t\t\tcount_rejected\n\t\t}\n\t\tstore redis\n\t\tlease 1s\n\t}"), []string{"Caddyfile:9", "lease does not apply with count_rejected"}},
		{"lease with limits from placeholders", site("\trate_limit {\n\t\tzone z {\n\t\t\tkey k\n\t\t\tlimit {plan} 1s default 5 max 50\n\t\t}\n\t\tstore redis\n\t\tlease 1s\n\t}"), []string{"Caddyfile:8", "lease does not work with limits from placeholders"}},
		{"lease with block_for", site("\trate_limit {\n\t\tzone z {\n\t\t\tkey k\n\t\t\tlimit 1 1s\n\t\t\tblock_for 1m\n\t\t}\n\t\tstore redis\n\t\tlease 1s\n\t}"), []string{"Caddyfile:9", "lease does not apply with block_for"}},
		{"lease with sync_interval", site("\trate_limit {\n\t\tzone z {\n\t\t\tkey k\n\t\t\talgorithm fixed_window\n\t\t\tlimit 1 1s\n\t\t}\n\t\tstore redis\n\t\tsync_interval 1s\n\t\tlease 1s\n\t}"), []string{"Caddyfile:10", "lease and sync_interval"}},
		{"lease without store redis", site("\trate_limit {\n" + zoneZ + "\t\tlease 1s\n\t}"), []string{"Caddyfile:7", "lease applies only to store redis"}},
		{"lease under 10ms", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tlease 5ms\n\t}"), []string{"Caddyfile:8", "lease must be at least 10ms, got 5ms"}},
		{"sync_interval bad duration", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tsync_interval soon\n\t}"), []string{"Caddyfile:8", "sync_interval: bad duration"}},
		{"redis unknown subdirective", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tredis {\n\t\t\thost x\n\t\t}\n\t}"), []string{"Caddyfile:9", `redis: unknown subdirective "host"`}},
		{"redis address with a space", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tredis \"bad host:6379\"\n\t}"), []string{"Caddyfile:8", `address "bad host:6379" is not host:port`}},
		{"redis address without port", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tredis {\n\t\t\taddress localhost\n\t\t}\n\t}"), []string{"Caddyfile:9", `address "localhost" is not host:port`}},
		{"redis url and address", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tredis 127.0.0.1:6379 {\n\t\t\turl redis://127.0.0.1:6379\n\t\t}\n\t}"), []string{"Caddyfile:9", "url and address are mutually exclusive"}},
		{"redis url scheme", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tredis {\n\t\t\turl http://x\n\t\t}\n\t}"), []string{"Caddyfile:9", "redis:// or rediss://"}},
		{"redis sentinel without address", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tredis {\n\t\t\tsentinel mymaster\n\t\t}\n\t}"), []string{"Caddyfile:9", "sentinel takes the master name"}},
		{"redis key_prefix brace", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tredis {\n\t\t\tkey_prefix a{b\n\t\t}\n\t}"), []string{"Caddyfile:9", "must not contain a brace"}},
		{"redis db with cluster", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tredis {\n\t\t\tcluster\n\t\t\tdb 2\n\t\t\taddress 127.0.0.1:7000\n\t\t}\n\t}"), []string{"Caddyfile:10", "Cluster has only database 0"}},
		{"redis db on cluster", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tredis {\n\t\t\taddress 127.0.0.1:7000 127.0.0.1:7001\n\t\t\tdb 2\n\t\t}\n\t}"), []string{"Caddyfile:10", "Cluster has only database 0"}},
		{"redis tls unknown option", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tredis {\n\t\t\ttls verify_none\n\t\t}\n\t}"), []string{"Caddyfile:9", `unknown tls option "verify_none"`}},
		{"redis timeout zero", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tredis {\n\t\t\tread_timeout 0s\n\t\t}\n\t}"), []string{"Caddyfile:9", "redis: read_timeout must be at least 1ms, got 0s"}},
		{"redis dial_timeout in nanoseconds", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tredis {\n\t\t\tdial_timeout 5ns\n\t\t}\n\t}"), []string{"Caddyfile:9", "redis: dial_timeout must be at least 1ms, got 5ns"}},
		{"redis write_timeout under 1ms", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tredis {\n\t\t\twrite_timeout 500us\n\t\t}\n\t}"), []string{"Caddyfile:9", "redis: write_timeout must be at least 1ms, got 500µs"}},
		{"redis address port 0", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tredis {\n\t\t\taddress 127.0.0.1:0\n\t\t}\n\t}"), []string{"Caddyfile:9", `address "127.0.0.1:0": port "0" is not a TCP port (1 to 65535)`}},
		{"redis address port above 65535", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tredis 127.0.0.1:65536\n\t}"), []string{"Caddyfile:8", `port "65536" is not a TCP port`}},
		{"redis cluster address port", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tredis {\n\t\t\taddress 10.0.0.1:7000 10.0.0.2:70000\n\t\t}\n\t}"), []string{"Caddyfile:9", `address "10.0.0.2:70000": port "70000" is not a TCP port`}},
		{"redis sentinel address port", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tredis {\n\t\t\tsentinel m 10.0.0.1:26379 10.0.0.2:263790\n\t\t}\n\t}"), []string{"Caddyfile:9", `address "10.0.0.2:263790": port "263790" is not a TCP port`}},
		{"redis url port", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tredis {\n\t\t\turl redis://:secret@10.0.0.1:99999/0\n\t\t}\n\t}"), []string{"Caddyfile:9", `url "redis://:xxxxx@10.0.0.1:99999/0": port "99999" is not a TCP port`}},
		{"redis url db and db", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tredis {\n\t\t\turl redis://10.0.0.1:6379/3\n\t\t\tdb 5\n\t\t}\n\t}"), []string{"Caddyfile:10", `redis: db 5 and the url's database "3": give the database once`}},
		{"redis address unclosed placeholder", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tredis {\n\t\t\taddress {env.REDIS_ADDR\n\t\t}\n\t}"), []string{"Caddyfile:9", `unclosed placeholder "{env.REDIS_ADDR"`}},
		{"redis url unclosed placeholder", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tredis {\n\t\t\turl {env.REDIS_URL\n\t\t}\n\t}"), []string{"Caddyfile:9", `redis: url: unclosed placeholder "{env.REDIS_URL"`}},
		{"redis pool_size above bound", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tredis {\n\t\t\tpool_size 2000000\n\t\t}\n\t}"), []string{"Caddyfile:9", "pool_size must be at most 1048576, got 2000000"}},
		{"redis sentinel master stray brace", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tredis {\n\t\t\tusername u\n\t\t\tsentinel m} 10.0.0.1:26379\n\t\t}\n\t}"), []string{"Caddyfile:10", "redis: sentinel master: '}' closes no placeholder"}},
		{"redis tls server_name unclosed placeholder", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tredis 127.0.0.1:6379 {\n\t\t\ttls server_name {env.HOST\n\t\t}\n\t}"), []string{"Caddyfile:9", `redis: tls server_name: unclosed placeholder "{env.HOST"`}},
		{"redis db negative", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tredis {\n\t\t\taddress 127.0.0.1:6379\n\t\t\tdb -1\n\t\t}\n\t}"), []string{"Caddyfile:10", "redis: db must not be negative, got -1"}},
		{"redis read_timeout negative", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tredis {\n\t\t\tread_timeout -1s\n\t\t}\n\t}"), []string{"Caddyfile:9", "redis: read_timeout must be at least 1ms, got -1s"}},
		{"sync_interval under 10ms", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tsync_interval 5ms\n\t}"), []string{"Caddyfile:8", "sync_interval must be at least 10ms, got 5ms"}},
		{"on_error closed with sync_interval", site("\trate_limit {\n\t\tzone z {\n\t\t\tkey k\n\t\t\talgorithm fixed_window\n\t\t\tlimit 1 1s\n\t\t}\n\t\tstore redis\n\t\tsync_interval 1s\n\t\ton_error closed\n\t}"), []string{"Caddyfile:10", "on_error closed does not apply with sync_interval"}},
		{"on_error local with sync_interval", site("\trate_limit {\n\t\tzone z {\n\t\t\tkey k\n\t\t\talgorithm sliding_window\n\t\t\tlimit 1 1s\n\t\t}\n\t\tstore redis\n\t\ton_error local\n\t\tsync_interval 1s\n\t}"), []string{"Caddyfile:9", "on_error local does not apply with sync_interval"}},
		{"sweep_interval with store redis", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tsweep_interval 10s\n\t}"), []string{"Caddyfile:8", "sweep_interval applies to keys held in memory: with store redis only with on_error local"}},
		{"max_keys with store redis", site("\trate_limit {\n" + zoneZ + "\t\tmax_keys 10\n\t\tstore redis\n\t}"), []string{"Caddyfile:7", "max_keys applies to keys held in memory: with store redis only with on_error local or sync_interval"}},

		// zone line.
		{"zone without name", site("\trate_limit {\n\t\tzone {\n\t\t\tkey k\n\t\t}\n\t}"), []string{"Caddyfile:3", "zone takes exactly one argument"}},
		{"zone with two names", site("\trate_limit {\n\t\tzone a b {\n\t\t\tkey k\n\t\t}\n\t}"), []string{"Caddyfile:3", "zone takes exactly one argument", "got 2"}},
		{"zone name with quote", site("\trate_limit {\n\t\tzone \"a\\\"b\" {\n\t\t\tkey k\n\t\t\tlimit 1 1s\n\t\t}\n\t}"), []string{"Caddyfile:3", "zone name"}},
		{"duplicate zone", site("\trate_limit {\n\t\tzone z {\n\t\t\tkey k\n\t\t\tlimit 1 1s\n\t\t}\n\t\tzone z {\n\t\t\tkey k\n\t\t\tlimit 1 1s\n\t\t}\n\t}"), []string{"Caddyfile:7", `duplicate zone name "z"`, "line 3"}},
		{"zone without block", site("\trate_limit {\n\t\tzone z\n\t}"), []string{"Caddyfile:3", `zone "z": no limit`}},
		{"zone without limit", zone("\t\t\tkey k"), []string{"Caddyfile:3", `zone "z": no limit`}},
		{"log_key and log_keys", site("\trate_limit {\n" + zoneZ + "\t\tlog_keys\n\t\tlog_key\n\t}"), []string{"Caddyfile:8", "log_keys already specified (at line 7)"}},
		{"events placeholder never a number", zone("\t\t\tkey k\n\t\t\tlimit x{http.request.header.X-Plan} 1m default 10 max 50"), []string{"Caddyfile:5", `events "x{http.request.header.X-Plan}" can never be a number: "x", outside its placeholders, is not all digits`}},
		{"cost placeholder never a number", zone("\t\t\tkey k\n\t\t\tlimit 10 1m\n\t\t\tcost {http.request.header.X-Cost}pts"), []string{"Caddyfile:6", `cost "{http.request.header.X-Cost}pts" can never be a number`}},
		{"default zero", zone("\t\t\tkey k\n\t\t\tlimit {http.request.header.X-Plan} 1m default 0 max 50"), []string{"Caddyfile:5", "default: must be positive, got 0"}},
		{"min_window zero", zone("\t\t\tkey k\n\t\t\tlimit 5 {http.request.header.X-W} default_window 1m min_window 0s"), []string{"Caddyfile:5", "min_window: must be positive, got 0s"}},
		{"unknown zone subdirective", zone("\t\t\tkey k\n\t\t\tlimit 1 1s\n\t\t\tmax_events 5"), []string{"Caddyfile:6", `unknown subdirective "max_events"`, "empty_key"}},

		// key.
		{"key without value", zone("\t\t\tkey\n\t\t\tlimit 1 1s"), []string{"Caddyfile:4", "key takes exactly one argument", "got 0"}},
		{"key with two values", zone("\t\t\tkey {remote_host} {method}\n\t\t\tlimit 1 1s"), []string{"Caddyfile:4", "key takes exactly one argument", "got 2"}},
		{"duplicate key", zone("\t\t\tkey a\n\t\t\tlimit 1 1s\n\t\t\tkey b"), []string{"Caddyfile:6", "key already specified (at line 4)"}},
		{"key unclosed placeholder", zone("\t\t\tkey {http.request.header.X-Api-Key\n\t\t\tlimit 1 1s"), []string{"Caddyfile:4", `zone "z": key: unclosed placeholder "{http.request.header.X-Api-Key"`}},
		{"key unclosed second placeholder", zone("\t\t\tlimit 1 1s\n\t\t\tkey {http.request.method}:{http.request.host"), []string{"Caddyfile:5", `unclosed placeholder "{http.request.host"`}},
		{"key stray closing brace", zone("\t\t\tkey http.request.header.X-Api-Key}\n\t\t\tlimit 1 1s"), []string{"Caddyfile:4", "'}' closes no placeholder"}},
		{"key nested placeholder", zone("\t\t\tkey {http.request.header.{X}}\n\t\t\tlimit 1 1s"), []string{"Caddyfile:4", "placeholders do not nest"}},
		{"key empty placeholder", zone("\t\t\tkey user{}\n\t\t\tlimit 1 1s"), []string{"Caddyfile:4", "empty placeholder {}"}},
		{"key with block", zone("\t\t\tkey a {\n\t\t\t\tb\n\t\t\t}\n\t\t\tlimit 1 1s"), []string{"Caddyfile:4", "key does not take a block"}},

		// algorithm.
		{"unknown algorithm", zone("\t\t\tkey k\n\t\t\talgorithm leaky\n\t\t\tlimit 1 1s"), []string{"Caddyfile:5", `unknown algorithm "leaky"`, "sliding_log, sliding_window, fixed_window, token_bucket, leaky_bucket, gcra, concurrency"}},
		{"algorithm without value", zone("\t\t\tkey k\n\t\t\talgorithm\n\t\t\tlimit 1 1s"), []string{"Caddyfile:5", "algorithm takes exactly one argument"}},
		{"duplicate algorithm", zone("\t\t\tkey k\n\t\t\talgorithm gcra\n\t\t\tlimit 1 1s\n\t\t\talgorithm gcra"), []string{"Caddyfile:7", "algorithm already specified (at line 5)"}},

		// limit.
		{"limit one argument", zone("\t\t\tkey k\n\t\t\tlimit 10"), []string{"Caddyfile:5", "limit takes two arguments", "got 1"}},
		{"limit three arguments", zone("\t\t\tkey k\n\t\t\tlimit 10 1s 5"), []string{"Caddyfile:5", "limit takes two arguments", "got 3"}},
		{"limit zero events", zone("\t\t\tkey k\n\t\t\tlimit 0 1s"), []string{"Caddyfile:5", "events must be positive, got 0"}},
		{"limit negative events", zone("\t\t\tkey k\n\t\t\tlimit -5 1s"), []string{"Caddyfile:5", "events must be positive, got -5"}},
		{"limit non-numeric events", zone("\t\t\tkey k\n\t\t\tlimit ten 1s"), []string{"Caddyfile:5", `events must be a positive integer, got "ten"`}},
		{"limit overflowing events", zone("\t\t\tkey k\n\t\t\tlimit 99999999999999999999 1s"), []string{"Caddyfile:5", "events 99999999999999999999 is too large"}},
		{"limit events above bound", zone("\t\t\tkey k\n\t\t\tlimit 1125899906842625 1s"), []string{"Caddyfile:5", "events must be at most 1125899906842624"}},
		{"limit bad window", zone("\t\t\tkey k\n\t\t\tlimit 10 1fortnight"), []string{"Caddyfile:5", `window: bad duration "1fortnight"`}},
		{"limit negative window", zone("\t\t\tkey k\n\t\t\tlimit 10 -1s"), []string{"Caddyfile:5", "window must be at least 1ms, got -1s"}},
		{"limit window under 1ms", zone("\t\t\tkey k\n\t\t\tlimit 10 500us"), []string{"Caddyfile:5", "window must be at least 1ms, got 500µs"}},
		{"limit window above bound", zone("\t\t\tkey k\n\t\t\talgorithm sliding_window\n\t\t\tlimit 1 104300d"), []string{"Caddyfile:6", "window must be at most 3650d (about 10 years), got 2503200h0m0s"}},
		{"window above bound", zone("\t\t\tkey k\n\t\t\tevents 1\n\t\t\twindow 3651d"), []string{"Caddyfile:6", "window must be at most 3650d"}},
		{"limit zero window", zone("\t\t\tkey k\n\t\t\tlimit 10 0"), []string{"Caddyfile:5", "window must be at least 1ms, got 0s"}},
		{"second limit zero events", zone("\t\t\tkey k\n\t\t\tlimit 10 1s\n\t\t\tlimit 0 1m"), []string{"Caddyfile:6", "limit 2: events must be positive, got 0"}},
		{"second limit window in nanoseconds", zone("\t\t\tkey k\n\t\t\tlimit 10 1s\n\t\t\tlimit 5 500us"), []string{"Caddyfile:6", "limit 2: window must be at least 1ms, got 500µs, at"}},

		// events/window shorthand.
		{"events without window", zone("\t\t\tkey k\n\t\t\tevents 10"), []string{"Caddyfile:5", "events without window"}},
		{"window without events", zone("\t\t\tkey k\n\t\t\twindow 1m"), []string{"Caddyfile:5", "window without events"}},
		{"zero events", zone("\t\t\tkey k\n\t\t\tevents 0\n\t\t\twindow 1m"), []string{"Caddyfile:5", "events must be positive, got 0"}},
		{"negative events", zone("\t\t\tkey k\n\t\t\tevents -1\n\t\t\twindow 1m"), []string{"Caddyfile:5", "events must be positive, got -1"}},
		{"non-numeric events", zone("\t\t\tkey k\n\t\t\tevents lots\n\t\t\twindow 1m"), []string{"Caddyfile:5", `events must be a positive integer, got "lots"`}},
		{"fractional events", zone("\t\t\tkey k\n\t\t\tevents 1.5\n\t\t\twindow 1m"), []string{"Caddyfile:5", `events must be a positive integer, got "1.5"`}},
		{"bad window", zone("\t\t\tkey k\n\t\t\tevents 1\n\t\t\twindow soon"), []string{"Caddyfile:6", `window: bad duration "soon"`}},
		{"window without unit", zone("\t\t\tkey k\n\t\t\tevents 1\n\t\t\twindow 60"), []string{"Caddyfile:6", `window: bad duration "60"`}},
		{"duplicate events", zone("\t\t\tkey k\n\t\t\tevents 1\n\t\t\twindow 1m\n\t\t\tevents 2"), []string{"Caddyfile:7", "events already specified (at line 5)"}},
		{"events with two values", zone("\t\t\tkey k\n\t\t\tevents 1 2\n\t\t\twindow 1m"), []string{"Caddyfile:5", "events takes exactly one argument"}},
		{"shorthand then limit", zone("\t\t\tkey k\n\t\t\tevents 1\n\t\t\twindow 1m\n\t\t\tlimit 5 1h"), []string{"Caddyfile:7", "cannot be mixed", "events at line 5"}},
		{"limit then shorthand", zone("\t\t\tkey k\n\t\t\tlimit 5 1h\n\t\t\twindow 1m"), []string{"Caddyfile:6", "cannot be mixed", "limit at line 5"}},

		// burst.
		{"burst with sliding_log", zone("\t\t\tkey k\n\t\t\tlimit 5 1s\n\t\t\tburst 10"), []string{"Caddyfile:6", "burst applies only to algorithms token_bucket, leaky_bucket and gcra, not sliding_log"}},
		{"burst with fixed_window", zone("\t\t\tkey k\n\t\t\tburst 10\n\t\t\talgorithm fixed_window\n\t\t\tlimit 5 1s"), []string{"Caddyfile:5", "not fixed_window"}},
		{"burst zero", zone("\t\t\tkey k\n\t\t\talgorithm gcra\n\t\t\tlimit 5 1s\n\t\t\tburst 0"), []string{"Caddyfile:7", "burst must be positive, got 0"}},
		{"burst above bound", zone("\t\t\tkey k\n\t\t\talgorithm gcra\n\t\t\tlimit 5 1s\n\t\t\tburst 2251799813685248"), []string{"Caddyfile:7", "burst must be at most 1125899906842624"}},
		{"burst non-numeric", zone("\t\t\tkey k\n\t\t\talgorithm gcra\n\t\t\tlimit 5 1s\n\t\t\tburst many"), []string{"Caddyfile:7", `burst must be a positive integer, got "many"`}},

		// concurrency.
		{"concurrency with two limits", zone("\t\t\tkey k\n\t\t\talgorithm concurrency\n\t\t\tlimit 5 1m\n\t\t\tlimit 50 1h"), []string{"Caddyfile:7", "concurrency takes exactly one limit", "got 2"}},
		{"concurrency with count_rejected", zone("\t\t\tkey k\n\t\t\talgorithm concurrency\n\t\t\tlimit 5 1m\n\t\t\tcount_rejected"), []string{"Caddyfile:7", "count_rejected does not apply to algorithm concurrency"}},

		// block_for.
		{"block_for without value", zone("\t\t\tkey k\n\t\t\tlimit 1 1s\n\t\t\tblock_for"), []string{"Caddyfile:6", "block_for takes exactly one argument"}},
		{"block_for bad duration", zone("\t\t\tkey k\n\t\t\tblock_for a-while\n\t\t\tlimit 1 1s"), []string{"Caddyfile:5", `block_for: bad duration "a-while"`}},
		{"block_for zero", zone("\t\t\tkey k\n\t\t\tlimit 1 1s\n\t\t\tblock_for 0s"), []string{"Caddyfile:6", "block_for must be at least 1ms, got 0s"}},
		{"block_for under 1ms", zone("\t\t\tkey k\n\t\t\tlimit 1 1s\n\t\t\tblock_for 10us"), []string{"Caddyfile:6", "block_for must be at least 1ms, got 10µs"}},
		{"block_for above bound", zone("\t\t\tkey k\n\t\t\tblock_for 3651d\n\t\t\tlimit 1 1s"), []string{"Caddyfile:5", "block_for must be at most 3650d"}},
		{"block_for twice", zone("\t\t\tkey k\n\t\t\tblock_for 1m\n\t\t\tlimit 1 1s\n\t\t\tblock_for 2m"), []string{"Caddyfile:7", "block_for already specified (at line 5)"}},
		{"block_for longer than max_wait", zone("\t\t\tkey k\n\t\t\tlimit 1 1s\n\t\t\tblock_for 1m\n\t\t\ton_limit wait 10s"), []string{"Caddyfile:6", "block_for 1m0s is longer than max_wait 10s"}},

		// cost.
		{"cost zero", zone("\t\t\tkey k\n\t\t\tlimit 5 1s\n\t\t\tcost 0"), []string{"Caddyfile:6", "cost must be positive, got 0"}},
		{"cost word", zone("\t\t\tkey k\n\t\t\tlimit 5 1s\n\t\t\tcost heavy"), []string{"Caddyfile:6", `cost must be a positive integer or a placeholder, got "heavy"`}},
		{"cost above limit", zone("\t\t\tkey k\n\t\t\tlimit 5 1s\n\t\t\tcost 6"), []string{"Caddyfile:6", "cost 6 exceeds limit 1 (5 events)"}},
		{"cost unclosed placeholder", zone("\t\t\tkey k\n\t\t\tlimit 5 1s\n\t\t\tcost {http.request.header.X-Cost"), []string{"Caddyfile:6", `cost: unclosed placeholder "{http.request.header.X-Cost"`}},
		{"cost stray closing brace", zone("\t\t\tkey k\n\t\t\tlimit 5 1s\n\t\t\tcost 5}"), []string{"Caddyfile:6", "'}' closes no placeholder"}},
		{"cost without value", zone("\t\t\tkey k\n\t\t\tlimit 5 1s\n\t\t\tcost"), []string{"Caddyfile:6", "cost takes exactly one argument"}},

		// on_limit.
		{"on_limit without value", zone("\t\t\tkey k\n\t\t\tlimit 5 1s\n\t\t\ton_limit"), []string{"Caddyfile:6", "on_limit takes reject or wait <max_wait>"}},
		{"on_limit wait without max_wait", zone("\t\t\tkey k\n\t\t\tlimit 5 1s\n\t\t\ton_limit wait"), []string{"Caddyfile:6", "on_limit wait takes one argument", "got 0"}},
		{"on_limit wait bad duration", zone("\t\t\tkey k\n\t\t\tlimit 5 1s\n\t\t\ton_limit wait forever"), []string{"Caddyfile:6", `on_limit wait: bad duration "forever"`}},
		{"on_limit wait zero", zone("\t\t\tkey k\n\t\t\tlimit 5 1s\n\t\t\ton_limit wait 0s"), []string{"Caddyfile:6", "on_limit wait: max_wait must be at least 1ms, got 0s"}},
		{"on_limit wait in nanoseconds", zone("\t\t\tkey k\n\t\t\tlimit 5 1s\n\t\t\ton_limit wait 100ns"), []string{"Caddyfile:6", "max_wait must be at least 1ms, got 100ns"}},
		{"on_limit wait negative", zone("\t\t\tkey k\n\t\t\tlimit 5 1s\n\t\t\ton_limit wait -2s"), []string{"Caddyfile:6", "max_wait must be at least 1ms, got -2s"}},
		{"on_limit wait extra", zone("\t\t\tkey k\n\t\t\tlimit 5 1s\n\t\t\ton_limit wait 1s 2s"), []string{"Caddyfile:6", "on_limit wait takes one argument", "got 2"}},
		{"on_limit reject extra", zone("\t\t\tkey k\n\t\t\tlimit 5 1s\n\t\t\ton_limit reject 1s"), []string{"Caddyfile:6", "on_limit reject takes no further arguments"}},
		{"on_limit unknown", zone("\t\t\tkey k\n\t\t\tlimit 5 1s\n\t\t\ton_limit queue"), []string{"Caddyfile:6", `unknown on_limit value "queue" (want one of reject, wait)`}},

		// count_rejected.
		{"count_rejected with argument", zone("\t\t\tkey k\n\t\t\tlimit 5 1s\n\t\t\tcount_rejected yes"), []string{"Caddyfile:6", "count_rejected takes no arguments, got 1"}},

		// prefixes.
		{"ipv4_prefix 33", zone("\t\t\tkey k\n\t\t\tlimit 5 1s\n\t\t\tipv4_prefix 33"), []string{"Caddyfile:6", "ipv4_prefix must be between 1 and 32 bits (or 0: not set), got 33"}},
		{"ipv4_prefix slash", zone("\t\t\tkey k\n\t\t\tlimit 5 1s\n\t\t\tipv4_prefix /24"), []string{"Caddyfile:6", `ipv4_prefix must be a number of bits between 1 and 32 (or 0: not set), got "/24"`}},
		{"ipv6_prefix 129", zone("\t\t\tkey k\n\t\t\tlimit 5 1s\n\t\t\tipv6_prefix 129"), []string{"Caddyfile:6", "ipv6_prefix must be between 1 and 128 bits (or 0: not set), got 129"}},
		{"ipv6_prefix negative", zone("\t\t\tkey k\n\t\t\tlimit 5 1s\n\t\t\tipv6_prefix -64"), []string{"Caddyfile:6", "got -64"}},
		{"ipv4_prefix without key", zone("\t\t\tlimit 5 1s\n\t\t\tipv4_prefix 24"), []string{"Caddyfile:5", "ipv4_prefix groups the addresses of a key template; this zone has no key"}},
		{"ipv6_prefix without key", zone("\t\t\tipv6_prefix 64\n\t\t\tlimit 5 1s"), []string{"Caddyfile:4", "ipv6_prefix groups the addresses of a key template"}},
		{"empty_key without key", zone("\t\t\tlimit 5 1s\n\t\t\tempty_key deny"), []string{"Caddyfile:5", "empty_key deny applies to a key that evaluates to nothing; this zone has no key"}},
		{"empty_key with a static key", zone("\t\t\tkey login\n\t\t\tlimit 5 1s\n\t\t\tempty_key allow"), []string{"Caddyfile:6", `empty_key allow applies to a key that evaluates to nothing; this zone has the static key "login"`}},
		{"ipv4_prefix with a static key", zone("\t\t\tkey 192.0.2.1\n\t\t\tlimit 5 1s\n\t\t\tipv4_prefix 24"), []string{"Caddyfile:6", `ipv4_prefix groups the addresses of a key template; this zone has the static key "192.0.2.1"`}},
		{"window below a microsecond", zone("\t\t\tkey k\n\t\t\tlimit 5 1000500ns"), []string{"Caddyfile:5", "window must be a whole number of microseconds, got 1.0005ms"}},
		{"ipv6_prefix missing", zone("\t\t\tkey k\n\t\t\tlimit 5 1s\n\t\t\tipv6_prefix"), []string{"Caddyfile:6", "ipv6_prefix takes exactly one argument"}},

		// empty_key.
		{"empty_key unknown", zone("\t\t\tkey k\n\t\t\tlimit 5 1s\n\t\t\tempty_key skip"), []string{"Caddyfile:6", `unknown empty_key value "skip" (want one of allow, deny, global)`}},

		// match.
		{"match empty", zone("\t\t\tkey k\n\t\t\tlimit 5 1s\n\t\t\tmatch {\n\t\t\t}"), []string{"Caddyfile:6", "match needs at least one request matcher"}},
		{"match unknown matcher", zone("\t\t\tkey k\n\t\t\tlimit 5 1s\n\t\t\tmatch {\n\t\t\t\tnope /x\n\t\t\t}"), []string{"Caddyfile:", "nope"}},

		// Handler options.
		{"headers unknown", site("\trate_limit {\n\t\tzone z {\n\t\t\tkey k\n\t\t\tlimit 1 1s\n\t\t}\n\t\theaders draft\n\t}"), []string{"Caddyfile:7", `unknown headers value "draft" (want one of ietf, legacy, both, off)`}},
		{"headers missing", site("\trate_limit {\n\t\tzone z {\n\t\t\tkey k\n\t\t\tlimit 1 1s\n\t\t}\n\t\theaders\n\t}"), []string{"Caddyfile:7", "headers takes exactly one argument"}},
		{"status 200", site("\trate_limit {\n\t\tzone z {\n\t\t\tkey k\n\t\t\tlimit 1 1s\n\t\t}\n\t\tstatus 200\n\t}"), []string{"Caddyfile:7", "status must be a 4xx or 5xx code (400 to 599), got 200"}},
		{"status 999", site("\trate_limit {\n\t\tzone z {\n\t\t\tkey k\n\t\t\tlimit 1 1s\n\t\t}\n\t\tstatus 999\n\t}"), []string{"Caddyfile:7", "got 999"}},
		{"status 100", site("\trate_limit {\n\t\tzone z {\n\t\t\tkey k\n\t\t\tlimit 1 1s\n\t\t}\n\t\tstatus 100\n\t}"), []string{"Caddyfile:7", "got 100"}},
		{"status word", site("\trate_limit {\n\t\tzone z {\n\t\t\tkey k\n\t\t\tlimit 1 1s\n\t\t}\n\t\tstatus teapot\n\t}"), []string{"Caddyfile:7", `status must be an HTTP status code, got "teapot"`}},
		{"duplicate status", site("\trate_limit {\n\t\tstatus 429\n\t\tzone z {\n\t\t\tkey k\n\t\t\tlimit 1 1s\n\t\t}\n\t\tstatus 503\n\t}"), []string{"Caddyfile:8", "status already specified (at line 3)"}},
		{"dry_run with argument", site("\trate_limit {\n\t\tzone z {\n\t\t\tkey k\n\t\t\tlimit 1 1s\n\t\t}\n\t\tdry_run true\n\t}"), []string{"Caddyfile:7", "dry_run takes no arguments"}},
		{"jitter negative", site("\trate_limit {\n\t\tzone z {\n\t\t\tkey k\n\t\t\tlimit 1 1s\n\t\t}\n\t\tjitter -0.1\n\t}"), []string{"Caddyfile:7", "got -0.1"}},
		{"jitter NaN", site("\trate_limit {\n\t\tzone z {\n\t\t\tkey k\n\t\t\tlimit 1 1s\n\t\t}\n\t\tjitter NaN\n\t}"), []string{"Caddyfile:7", "jitter must be a non-negative fraction"}},
		{"jitter infinite", site("\trate_limit {\n\t\tzone z {\n\t\t\tkey k\n\t\t\tlimit 1 1s\n\t\t}\n\t\tjitter +Inf\n\t}"), []string{"Caddyfile:7", "jitter must be a non-negative fraction", "got +Inf"}},
		{"jitter percent", site("\trate_limit {\n\t\tzone z {\n\t\t\tkey k\n\t\t\tlimit 1 1s\n\t\t}\n\t\tjitter 20%\n\t}"), []string{"Caddyfile:7", `jitter must be a non-negative fraction (e.g. 0.2: up to 20% more), got "20%"`}},
		{"sweep_interval negative", site("\trate_limit {\n\t\tzone z {\n\t\t\tkey k\n\t\t\tlimit 1 1s\n\t\t}\n\t\tsweep_interval -1m\n\t}"), []string{"Caddyfile:7", "sweep_interval must be at least 1s, got -1m0s"}},
		{"sweep_interval zero", site("\trate_limit {\n\t\tzone z {\n\t\t\tkey k\n\t\t\tlimit 1 1s\n\t\t}\n\t\tsweep_interval 0s\n\t}"), []string{"Caddyfile:7", "sweep_interval must be at least 1s, got 0s"}},
		{"sweep_interval under 1s", site("\trate_limit {\n\t\tzone z {\n\t\t\tkey k\n\t\t\tlimit 1 1s\n\t\t}\n\t\tsweep_interval 60ns\n\t}"), []string{"Caddyfile:7", "sweep_interval must be at least 1s, got 60ns"}},
		{"sweep_interval bad", site("\trate_limit {\n\t\tzone z {\n\t\t\tkey k\n\t\t\tlimit 1 1s\n\t\t}\n\t\tsweep_interval often\n\t}"), []string{"Caddyfile:7", `sweep_interval: bad duration "often"`}},
		{"max_keys negative", site("\trate_limit {\n\t\tzone z {\n\t\t\tkey k\n\t\t\tlimit 1 1s\n\t\t}\n\t\tmax_keys -1\n\t}"), []string{"Caddyfile:7", "max_keys must be positive, got -1"}},
		{"max_keys word", site("\trate_limit {\n\t\tzone z {\n\t\t\tkey k\n\t\t\tlimit 1 1s\n\t\t}\n\t\tmax_keys lots\n\t}"), []string{"Caddyfile:7", `max_keys must be a positive integer, got "lots"`}},
		{"disable_metrics with argument", site("\trate_limit {\n\t\tzone z {\n\t\t\tkey k\n\t\t\tlimit 1 1s\n\t\t}\n\t\tdisable_metrics true\n\t}"), []string{"Caddyfile:7", "disable_metrics takes no arguments, got 1"}},
		{"disable_metrics twice", site("\trate_limit {\n\t\tdisable_metrics\n\t\tzone z {\n\t\t\tkey k\n\t\t\tlimit 1 1s\n\t\t}\n\t\tdisable_metrics\n\t}"), []string{"Caddyfile:8", "disable_metrics already specified (at line 3)"}},
		{"store redis", site("\trate_limit {\n\t\tzone z {\n\t\t\tkey k\n\t\t\tlimit 1 1s\n\t\t}\n\t\tstore disk\n\t}"), []string{"Caddyfile:7", `unknown store "disk"`}},
		{"store missing", site("\trate_limit {\n\t\tzone z {\n\t\t\tkey k\n\t\t\tlimit 1 1s\n\t\t}\n\t\tstore\n\t}"), []string{"Caddyfile:7", "store takes exactly one argument"}},

		// An option in another block than its own says where it goes.
		{"zone option at the handler level", site("\trate_limit {\n" + zoneZ + "\t\tburst 5\n\t}"), []string{"Caddyfile:7", `unknown subdirective "burst" in rate_limit`, "burst goes in a zone block (zone <name> { ... })"}},
		{"handler option in a zone", zone("\t\t\tkey k\n\t\t\tlimit 5 1s\n\t\t\tstore redis"), []string{"Caddyfile:6", `unknown subdirective "store"`, "store goes in the rate_limit block"}},
		{"redis option at the handler level", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\taddress 10.0.0.1:6379\n\t}"), []string{"Caddyfile:8", "address goes in the redis block"}},
		{"zone option in the redis block", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tredis {\n\t\t\tkey k\n\t\t}\n\t}"), []string{"Caddyfile:9", "key goes in a zone block"}},

		// An empty value ("") is refused, not read as the option left out.
		{"store empty", site("\trate_limit {\n" + zoneZ + "\t\tstore \"\"\n\t}"), []string{"Caddyfile:7", `store is empty ("")`}},
		{"headers empty", site("\trate_limit {\n" + zoneZ + "\t\theaders \"\"\n\t}"), []string{"Caddyfile:7", `headers is empty ("")`}},
		{"algorithm empty", zone("\t\t\tkey k\n\t\t\talgorithm \"\"\n\t\t\tlimit 1 1s"), []string{"Caddyfile:5", `algorithm is empty ("")`}},
		{"cost empty", zone("\t\t\tkey k\n\t\t\tlimit 5 1s\n\t\t\tcost \"\""), []string{"Caddyfile:6", `cost is empty ("")`}},
		{"empty_key empty", zone("\t\t\tkey {remote_host}\n\t\t\tlimit 5 1s\n\t\t\tempty_key \"\""), []string{"Caddyfile:6", `empty_key is empty ("")`}},
		{"key empty", zone("\t\t\tkey \"\"\n\t\t\tlimit 5 1s"), []string{"Caddyfile:4", `key is empty ("")`}},
		{"on_limit empty", zone("\t\t\tkey k\n\t\t\tlimit 5 1s\n\t\t\ton_limit \"\""), []string{"Caddyfile:6", `on_limit is empty ("")`}},
		{"redis tls server_name empty", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tredis {\n\t\t\ttls server_name \"\"\n\t\t}\n\t}"), []string{"Caddyfile:9", `redis: tls server_name is empty ("")`}},
		{"redis tls ca_file empty", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tredis {\n\t\t\ttls ca_file \"\" insecure_skip_verify\n\t\t}\n\t}"), []string{"Caddyfile:9", `redis: tls ca_file is empty ("")`}},
		{"redis url empty", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tredis {\n\t\t\turl \"\"\n\t\t}\n\t}"), []string{"Caddyfile:9", `url is empty ("")`}},
		{"redis key_prefix empty", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tredis {\n\t\t\tkey_prefix \"\"\n\t\t}\n\t}"), []string{"Caddyfile:9", `key_prefix is empty ("")`}},
		{"redis password empty", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tredis {\n\t\t\turl redis://:pw@127.0.0.1:6379\n\t\t\tpassword \"\"\n\t\t}\n\t}"), []string{"Caddyfile:10", `password is empty ("")`}},

		// Numbers Caddy's JSON config cannot carry exactly (it reads
		// numbers as float64): refused here, not at load time without a
		// line, or rounded.
		{"sweep_interval beyond JSON", site("\trate_limit {\n" + zoneZ + "\t\tsweep_interval 9223372036854775807ns\n\t}"), []string{"Caddyfile:7", "sweep_interval 9223372036854775807ns", "exact up to 2^53"}},
		{"lease beyond JSON", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tlease 9223372036854775807ns\n\t}"), []string{"Caddyfile:8", "lease 9223372036854775807ns", "exact up to 2^53"}},
		{"redis timeout beyond JSON", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tredis {\n\t\t\tdial_timeout 9223372036854775807ns\n\t\t}\n\t}"), []string{"Caddyfile:9", "dial_timeout 9223372036854775807ns"}},
		{"max_keys beyond JSON", site("\trate_limit {\n" + zoneZ + "\t\tmax_keys 9223372036854775807\n\t}"), []string{"Caddyfile:7", "max_keys 9223372036854775807", "exact up to 2^53"}},
		{"max_waiters beyond JSON", zone("\t\t\tkey k\n\t\t\tlimit 5 1s\n\t\t\ton_limit wait 1s\n\t\t\tmax_waiters 9007199254740993"), []string{"Caddyfile:7", "max_waiters 9007199254740993"}},
		{"redis db beyond JSON", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tredis {\n\t\t\tdb 9223372036854775807\n\t\t}\n\t}"), []string{"Caddyfile:9", "db 9223372036854775807"}},

		// Checks of the handler as a whole, at the line of the zone that
		// makes them fail.
		{"policy names collide", site("\trate_limit {\n\t\tzone a {\n\t\t\tkey k\n\t\t\tlimit 1 1m\n\t\t\tlimit 10 1h\n\t\t}\n\t\tzone a-1m {\n\t\t\tkey k\n\t\t\tlimit 1 1s\n\t\t}\n\t}"), []string{"Caddyfile:8", `zones "a" and "a-1m" both have a tier named "a-1m"`}},

		// A matcher without a value, which Caddy would only refuse when
		// loading it.
		{"match path without value", zone("\t\t\tkey k\n\t\t\tlimit 5 1s\n\t\t\tmatch {\n\t\t\t\tpath\n\t\t\t}"), []string{"Caddyfile:6", `zone "z": match: path has no value`}},

		// Redis settings go-redis would read as something else, or refuse
		// only when the store is set up.
		{"redis address twice", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tredis {\n\t\t\taddress 10.0.0.1:6379 10.0.0.1:6379\n\t\t}\n\t}"), []string{"Caddyfile:9", `redis: address "10.0.0.1:6379" given twice`}},
		{"redis sentinel address twice", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tredis {\n\t\t\tsentinel m 10.0.0.1:26379 10.0.0.1:26379\n\t\t}\n\t}"), []string{"Caddyfile:9", `redis: address "10.0.0.1:26379" given twice`}},
		{"redis tls option twice", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tredis {\n\t\t\ttls ca_file a.pem ca_file b.pem\n\t\t}\n\t}"), []string{"Caddyfile:9", "redis: tls ca_file given twice"}},
		{"redis url without host", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tredis {\n\t\t\turl redis://\n\t\t}\n\t}"), []string{"Caddyfile:9", `redis: url "redis://" has no host`}},
		{"redis url port without host", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tredis {\n\t\t\turl redis://:6379\n\t\t}\n\t}"), []string{"Caddyfile:9", "has no host"}},
		{"redis url database word", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tredis {\n\t\t\turl redis://10.0.0.1:6379/abc\n\t\t}\n\t}"), []string{"Caddyfile:9", `redis: url: invalid database number: "abc"`}},
		{"redis url database negative", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tredis {\n\t\t\turl redis://10.0.0.1:6379/-1\n\t\t}\n\t}"), []string{"Caddyfile:9", "redis: db must not be negative, got -1"}},
		{"redis url options", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tredis {\n\t\t\turl redis://:secret@10.0.0.1:6379?dial_timeout=5s\n\t\t}\n\t}"), []string{"Caddyfile:9", `redis: url "redis://:xxxxx@10.0.0.1:6379?dial_timeout=5s": nothing after '?' or '#' is read`}},
		{"redis url two paths", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tredis {\n\t\t\turl redis://:secret@10.0.0.1:6379/0/1\n\t\t}\n\t}"), []string{"Caddyfile:9", "redis: url: invalid URL path: /0/1"}},
		{"redis url database on a cluster", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tredis {\n\t\t\tcluster\n\t\t\turl redis://10.0.0.1:7000/3\n\t\t}\n\t}"), []string{"Caddyfile:10", `redis: the url's database "3": a Redis Cluster has only database 0`}},
		{"redis tls with a redis:// url", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tredis {\n\t\t\turl redis://10.0.0.1:6379\n\t\t\ttls server_name r.internal\n\t\t}\n\t}"), []string{"Caddyfile:10", "redis: tls with a redis:// url: write rediss:// for TLS"}},
		{"redis db above Redis's", site("\trate_limit {\n" + zoneZ + "\t\tstore redis\n\t\tredis {\n\t\t\tdb 4294967296\n\t\t}\n\t}"), []string{"Caddyfile:9", "redis: db must be at most 2147483647, got 4294967296"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, _, err := adaptCaddyfile(t, tt.caddyfile)
			if err == nil {
				t.Fatalf("adapt succeeded, want an error\nCaddyfile:\n%s\nJSON:\n%s", tt.caddyfile, out)
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q\nCaddyfile:\n%s", err, want, tt.caddyfile)
				}
			}
		})
	}
}

// TestCaddyfileOrder checks where the directive lands among Caddy's own
// without an order line: before basic_auth, after rewrite and header, and
// before reverse_proxy and respond.
func TestCaddyfileOrder(t *testing.T) {
	caddyfile := `:8080 {
	reverse_proxy localhost:9000
	basic_auth {
		bob $2a$14$Zkx19XLiW6VYouLHR5NmfOFU0z2GTNmpkT/5qqR7hx4IjWJPDhjvG
	}
	rate_limit {
		zone z {
			key {remote_host}
			limit 1 1s
		}
	}
	header X-A b
	rewrite /a /b
}
`
	out, _, err := adaptCaddyfile(t, caddyfile)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, want := range []string{`"handler": "headers"`, `"handler": "rewrite"`, `"handler": "rate_limit"`, `"handler": "authentication"`, `"handler": "reverse_proxy"`} {
		i := strings.Index(out, want)
		if i < 0 {
			t.Fatalf("%s not in\n%s", want, out)
		}
		order = append(order, want)
		for _, prev := range order[:len(order)-1] {
			if strings.Index(out, prev) > i {
				t.Errorf("%s comes before %s, want after", want, prev)
			}
		}
	}
}
