package ratelimit

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// FuzzCaddyfile adapts arbitrary Caddyfiles: adapting must never panic
// (errors are fine), and every rate_limit handler the adapter produces must
// decode and pass Validate, so that whatever the Caddyfile accepts the JSON
// path accepts too. Each input is adapted as a whole Caddyfile and, to
// reach the parser more often, as the body of a rate_limit block.
func FuzzCaddyfile(f *testing.F) {
	for _, path := range goldenFiles(f) {
		caddyfile, _ := readGolden(f, path)
		f.Add(caddyfile)
	}
	for _, s := range []string{
		"zone z {\n\tkey k\n\tlimit 1 1s\n}",
		"zone z {\n\tkey k\n\tevents 1\n\twindow 1s\n}\njitter 0.5",
		"zone z {\n\tkey {remote_host}\n\talgorithm gcra\n\tlimit 5 1s\n\tburst 10\n\tcost {http.request.header.X-Cost}\n}",
		"zone z {\n\tkey k\n\talgorithm concurrency\n\tlimit 2 1m\n\ton_limit wait 1s\n}",
		"zone z {\n\tmatch {\n\t\tpath /a\n\t}\n\tkey k\n\tlimit 1 1s\n\tipv4_prefix 24\n\tipv6_prefix 64\n\tempty_key deny\n}",
		"zone z {\n\tkey k\n\tlimit 1 1s\n\tlimit 2 1m\n}\nheaders off\nstatus 503\ndry_run\nsweep_interval 1m\nmax_keys 10\nstore memory",
		"zone {\n}",
		"zone z {\n\tkey k {\n\t}\n}",
		"zone z {\n\tmatch\n}",
		"zone z {\n\ton_limit wait\n}",
		// Hostile values: empty strings, numbers beyond what Caddy's JSON
		// carries, colliding header names, a matcher without value,
		// options in the wrong block, Redis settings read as others.
		"zone z {\n\tkey \"\"\n\tcost \"\"\n\tlimit 1 1s\n}\nstore \"\"",
		"zone z {\n\tkey k\n\tlimit 1 1s\n}\nmax_keys 9223372036854775807\nsweep_interval 9223372036854775807ns",
		"zone z {\n\tkey k\n\tlimit 1 1s\n\ton_limit wait 1s\n\tmax_waiters 9007199254740993\n}",
		"zone a {\n\tlimit 1 1m\n\tlimit 2 1h\n}\nzone a-1m {\n\tlimit 1 1s\n}",
		"zone z {\n\tlimit 1 1s\n\tmatch {\n\t\tpath\n\t}\n}",
		"zone z {\n\tlimit 1 1s\n\tstore redis\n}\nburst 5\naddress 127.0.0.1:6379",
		"zone z {\n\tlimit 1 1s\n}\nstore redis\nredis {\n\taddress 127.0.0.1:6379 127.0.0.1:6379\n\ttls ca_file a ca_file b\n\tdb 9223372036854775807\n}",
		"zone z {\n\tlimit 1 1s\n}\nstore redis\nredis {\n\turl redis://:6379/-1?dial_timeout=1s\n\ttls\n}",
	} {
		f.Add(s)
	}

	f.Fuzz(func(t *testing.T, input string) {
		// import reads files; keep the fuzzer off the file system.
		if strings.Contains(input, "import") {
			t.Skip()
		}
		for _, caddyfile := range []string{
			input,
			":8080 {\n\trate_limit {\n" + input + "\n\t}\n}\n",
		} {
			out, _, err := adaptCaddyfile(t, caddyfile)
			if err != nil {
				continue
			}
			for _, raw := range findRateLimitHandlers(t, []byte(out)) {
				var h Handler
				dec := json.NewDecoder(bytes.NewReader(raw))
				dec.DisallowUnknownFields()
				if err := dec.Decode(&h); err != nil {
					t.Fatalf("adapted handler does not decode: %v\n%s", err, raw)
				}
				if err := h.Validate(); err != nil {
					t.Fatalf("adapted handler fails Validate: %v\nCaddyfile:\n%s\nJSON:\n%s", err, caddyfile, raw)
				}
			}
		}
	})
}
