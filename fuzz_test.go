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
