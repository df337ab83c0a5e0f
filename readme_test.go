package ratelimit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
)

// readmeBlock is a fenced code block of README.md.
type readmeBlock struct {
	line int    // of its first line of content
	lang string // the fence's info string: caddyfile, json, sh, ...
	text string
}

// readmeBlocks returns the fenced code blocks of README.md. As Markdown
// does, a fence is closed only by a line of backticks alone: a line that
// starts with backticks and goes on inside a block is reported, since the
// block then runs on over the text after it.
func readmeBlocks(t *testing.T) []readmeBlock {
	t.Helper()
	data, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var blocks []readmeBlock
	var cur *readmeBlock
	for i, l := range strings.Split(strings.ReplaceAll(string(data), "\r\n", "\n"), "\n") {
		switch {
		case cur == nil && strings.HasPrefix(l, "```"):
			cur = &readmeBlock{line: i + 2, lang: strings.TrimSpace(l[3:])}
		case cur == nil:
		case strings.TrimRight(l, " \t") == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case strings.HasPrefix(l, "```"):
			t.Errorf("README.md:%d: %q inside the block of line %d does not close it (Markdown closes a fence only with a line of backticks alone)", i+1, l, cur.line-1)
			cur.text += l + "\n"
		default:
			cur.text += l + "\n"
		}
	}
	if cur != nil {
		t.Errorf("README.md:%d: the block is never closed", cur.line-1)
	}
	return blocks
}

// readmeTested is how many caddyfile and json blocks of README.md
// TestREADMEExamples tests: fewer means a block has become untestable (a
// placeholder slipped into an example, or a fence broke) without anyone
// deciding so.
const readmeTested = 14

// summaryMark matches what only a syntax summary holds: a <placeholder>
// such as <n> or <duration>, or "..." for what is left out.
var summaryMark = regexp.MustCompile(`<[a-z_ |]+>|\.\.\.`)

// TestREADMEExamples adapts and loads every caddyfile and json block of
// README.md, as a user who copies it would; each subtest is named after the
// README line where the block (or the part of it tested) starts.
//
// A caddyfile block with a <placeholder> or "..." is a syntax summary, not
// an example: it is skipped. A fragment is wrapped into a complete
// Caddyfile the least way needed (see wrapReadmeCaddyfile); a block of
// several top-level `redis` subdirectives lists alternatives, each tested
// on its own. An example must be as `caddy fmt` writes it (Caddy warns
// about any other Caddyfile it loads); the Caddyfile made of it must adapt
// without error and without a warning naming this module, and every rate_limit handler of the result is
// decoded with unknown fields disallowed, provisioned and validated.
// Blocks with `store redis` run against real redis-servers (see
// readmeRedis), and one request through each handler must leave a key in
// them.
//
// A json block is a handler as a route holds it ("handler": "rate_limit"),
// provisioned and validated likewise, or a problem details body ("type"),
// which must be byte for byte what a handler with problem_details writes.
func TestREADMEExamples(t *testing.T) {
	tested, skipped := 0, 0
	for _, b := range readmeBlocks(t) {
		switch {
		case b.lang == "caddyfile" && summaryMark.MatchString(b.text):
			skipped++
		case b.lang == "caddyfile":
			tested++
			for _, alt := range readmeAlternatives(b) {
				t.Run(fmt.Sprintf("line_%d", alt.line), func(t *testing.T) {
					testReadmeCaddyfile(t, alt)
				})
			}
		case b.lang == "json":
			tested++
			t.Run(fmt.Sprintf("line_%d", b.line), func(t *testing.T) {
				testReadmeJSON(t, b.text)
			})
		}
	}
	t.Logf("README.md: %d caddyfile and json blocks tested, %d syntax summaries skipped", tested, skipped)
	if tested < readmeTested {
		t.Errorf("%d blocks tested, want at least %d (%d skipped as syntax summaries)", tested, readmeTested, skipped)
	}
}

// readmeAlternatives splits a block whose top level is several `redis`
// subdirectives (the ways to name a Redis) into one block each; any other
// block is returned whole.
func readmeAlternatives(b readmeBlock) []readmeBlock {
	lines := strings.SplitAfter(b.text, "\n")
	var alts []readmeBlock
	depth := 0
	for i, l := range lines {
		code := strings.TrimSpace(strings.SplitN(l, "#", 2)[0])
		if depth == 0 && code == "" && len(alts) > 0 {
			alts[len(alts)-1].text += l
			continue
		}
		if depth == 0 {
			if !strings.HasPrefix(code, "redis ") {
				return []readmeBlock{b}
			}
			alts = append(alts, readmeBlock{line: b.line + i, lang: b.lang})
		}
		alts[len(alts)-1].text += l
		switch {
		case strings.HasSuffix(code, "{"):
			depth++
		case code == "}":
			depth--
		}
	}
	if len(alts) < 2 {
		return []readmeBlock{b}
	}
	return alts
}

// wrapReadmeCaddyfile makes a complete Caddyfile of a README block, by its
// first token:
//   - "{" (global options) or a site address (with a dot or a colon): the
//     block is complete already;
//   - "zone": a zone block, put in a rate_limit block, in a site;
//   - "redis": a subdirective of a handler with store redis, put in a
//     rate_limit block with store redis and one zone (which every handler
//     needs), in a site;
//   - anything else is a directive (rate_limit, map, handle_errors): the
//     inside of a site, put in one.
func wrapReadmeCaddyfile(text string) string {
	first := strings.Fields(text)[0]
	switch {
	case first == "{" || strings.ContainsAny(first, ".:"):
		return text
	case first == "zone":
		text = "rate_limit {\n" + readmeIndent(text) + "}\n"
	case first == "redis":
		text = "rate_limit {\n\tzone z {\n\t\tkey k\n\t\tlimit 1 1s\n\t}\n\tstore redis\n" + readmeIndent(text) + "}\n"
	}
	return "example.com {\n" + readmeIndent(text) + "}\n"
}

// readmeIndent indents every non-empty line of text by one tab.
func readmeIndent(text string) string {
	lines := strings.SplitAfter(text, "\n")
	for i, l := range lines {
		if strings.TrimSpace(l) != "" {
			lines[i] = "\t" + l
		}
	}
	return strings.Join(lines, "")
}

func testReadmeCaddyfile(t *testing.T, b readmeBlock) {
	// Users get this warning for an example copied as it is.
	if w, different := caddyfile.FormattingDifference("README.md", []byte(b.text)); different {
		t.Errorf("README.md:%d: not as caddy fmt writes it: %s", b.line+w.Line-1, w.Message)
	}
	cf := wrapReadmeCaddyfile(b.text)
	var r *readmeRedisNodes
	if strings.Contains(cf, "store redis") {
		cf, r = readmeRedis(t, cf)
	}
	out, warnings, err := adaptCaddyfile(t, cf)
	if err != nil {
		t.Fatalf("adapt: %v\n%s", err, cf)
	}
	for _, w := range warnings {
		if strings.Contains(w.String(), "rate_limit") || strings.Contains(w.String(), "ratelimit") {
			t.Errorf("warning: %s", w)
		} else {
			t.Logf("warning: %s", w)
		}
	}
	handlers := findRateLimitHandlers(t, []byte(out))
	if len(handlers) == 0 && rateLimitDirective.MatchString(b.text) {
		t.Fatalf("no rate_limit handler in the adapted JSON:\n%s", out)
	}
	ctx := testContext(t) // one config load, as Caddy's
	var hs []*Handler
	for _, raw := range handlers {
		hs = append(hs, loadReadmeHandler(t, ctx, raw))
	}
	if r == nil {
		return
	}
	for _, h := range hs {
		req := newReq("192.0.2.1:1", header("X-Org-Id", "acme"))
		if res := serve(h, req); res.err != nil || res.code != 200 {
			t.Fatalf("a first request: code %d, error %v", res.code, res.err)
		}
	}
	// Cleaning up makes sync_interval's last push; a lease gives back.
	cleanupAll(t, hs...)
	r.expectKeys(t)
}

// readmeRedisNodes are the Redis nodes that hold a README example's data.
type readmeRedisNodes struct {
	addrs    []string
	password string
}

// rateLimitDirective matches a line that starts a rate_limit directive.
var rateLimitDirective = regexp.MustCompile(`(?m)^\s*rate_limit\b`)

// redisAddr matches a Redis address of the README's examples (the
// upstreams of reverse_proxy are named by host name).
var redisAddr = regexp.MustCompile(`\b\d+\.\d+\.\d+\.\d+:\d+\b`)

// readmeRedis starts what the Caddyfile's `store redis` handler needs and
// points it there: the README's addresses are replaced, in order, by those
// of as many real servers (Sentinels for a `sentinel` block, the nodes of a
// Cluster of that many masters when there are several, else one server);
// {env.REDIS_URL} is set to a redis:// URL of the server; when the
// Caddyfile reads {env.REDIS_PASSWORD}, it is set and the servers (and
// Sentinels) require it. A handler without `redis` (the default,
// 127.0.0.1:6379) gets one naming the server.
func readmeRedis(t *testing.T, cf string) (string, *readmeRedisNodes) {
	var pw string
	if strings.Contains(cf, "{env.REDIS_PASSWORD}") {
		pw = "readme-secret"
		t.Setenv("REDIS_PASSWORD", pw)
	}
	addrs := redisAddr.FindAllString(cf, -1)
	var repl []string
	nodes := &readmeRedisNodes{password: pw}
	switch {
	case strings.Contains(cf, "sentinel"):
		st := redistest.StartSentinel(t, 0, len(addrs))
		repl, nodes.addrs = st.SentinelAddrs, []string{st.Master.Addr}
		if pw != "" {
			for _, a := range st.SentinelAddrs {
				redisDo(t, a, "SENTINEL", "SET", st.MasterName, "auth-pass", pw)
			}
			redisDo(t, st.Master.Addr, "CONFIG", "SET", "requirepass", pw)
			for _, a := range st.SentinelAddrs {
				redisDo(t, a, "ACL", "SETUSER", "default", "on", ">"+pw)
			}
		}
	case len(addrs) > 1:
		c := redistest.StartCluster(t, len(addrs), 0)
		repl, nodes.addrs = c.Addrs, c.Addrs
	default:
		srv := redistest.Start(t)
		repl, nodes.addrs = []string{srv.Addr}, []string{srv.Addr}
		t.Setenv("REDIS_URL", "redis://"+srv.Addr)
		if pw != "" {
			redisDo(t, srv.Addr, "CONFIG", "SET", "requirepass", pw)
		}
	}
	if pw != "" && len(addrs) > 1 && !strings.Contains(cf, "sentinel") {
		t.Fatal("a Cluster with a password: give readmeRedis a rule for it")
	}
	i := 0
	cf = redisAddr.ReplaceAllStringFunc(cf, func(string) string {
		i++
		return repl[i-1]
	})
	if !regexp.MustCompile(`(?m)^\s*redis\b`).MatchString(cf) {
		cf = strings.Replace(cf, "store redis\n", "store redis\n\t\tredis "+repl[0]+"\n", 1)
	}
	return cf, nodes
}

func redisDo(t *testing.T, addr string, args ...string) {
	t.Helper()
	if _, err := redistest.Do(addr, args...); err != nil {
		t.Fatalf("%s %v: %v", addr, args, err)
	}
}

// expectKeys fails the test unless the nodes hold a key of the limiter
// (the default key_prefix): the handler decided on them.
func (r *readmeRedisNodes) expectKeys(t *testing.T) {
	t.Helper()
	var keys []string
	for _, addr := range r.addrs {
		c := redis.NewClient(&redis.Options{Addr: addr, Password: r.password})
		k, err := c.Keys(context.Background(), "rl:*").Result()
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k...)
	}
	if len(keys) == 0 {
		t.Fatalf("no rl:* key in Redis at %v after a request", r.addrs)
	}
}

// loadReadmeHandler decodes a handler's JSON (without "handler") with
// unknown fields disallowed, provisions it in ctx and validates it, as
// Caddy loads a config, and cleans it up at the end of the test.
func loadReadmeHandler(t *testing.T, ctx caddy.Context, raw json.RawMessage) *Handler {
	t.Helper()
	h := new(Handler)
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(h); err != nil {
		t.Fatalf("decoding %s: %v", raw, err)
	}
	if err := h.Provision(ctx); err != nil {
		h.Cleanup() // as Caddy does after a failed Provision
		t.Fatalf("provision: %v", err)
	}
	t.Cleanup(func() {
		if err := h.Cleanup(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	if err := h.Validate(); err != nil {
		t.Fatalf("validate: %v", err)
	}
	return h
}

func testReadmeJSON(t *testing.T, text string) {
	var members map[string]json.RawMessage
	if err := json.Unmarshal([]byte(text), &members); err != nil {
		t.Fatalf("not a JSON object: %v\n%s", err, text)
	}
	switch {
	case members["handler"] != nil:
		handlers := findRateLimitHandlers(t, []byte(text))
		if len(handlers) != 1 {
			t.Fatalf(`"handler" is %s, want "rate_limit"`, members["handler"])
		}
		loadReadmeHandler(t, testContext(t), handlers[0])
	case members["type"] != nil:
		testReadmeProblem(t, text)
	default:
		t.Fatalf("neither a handler nor a problem body: give TestREADMEExamples a rule for it\n%s", text)
	}
}

// testReadmeProblem checks a problem details body of the README against
// the one a handler writes: the zone and the seconds its detail names are
// taken from it, and a limit of 1 per that many seconds gives exactly that
// Retry-After to a second request at the same instant.
func testReadmeProblem(t *testing.T, text string) {
	var want bytes.Buffer
	if err := json.Compact(&want, []byte(text)); err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`in zone (\S+): retry after (\d+)s\.`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no zone and seconds in the detail of %s", text)
	}
	h := provision(t, fmt.Sprintf(`{"problem_details":true,"zones":[{"name":%q,"key":"k","limits":[{"events":1,"window":"%ss"}]}]}`, m[1], m[2]), newClock())
	w := refuse(t, h)
	if got := w.Header().Get("Retry-After"); got != m[2] {
		t.Fatalf("Retry-After %s, want %s", got, m[2])
	}
	if got := w.Body.String(); got != want.String() {
		t.Errorf("the handler writes\n%s\nthe README shows\n%s", got, want.String())
	}
}

// TestREADMEScripts checks that every script a sh block of README.md runs
// with bash exists.
func TestREADMEScripts(t *testing.T) {
	script := regexp.MustCompile(`(?m)^bash (\S+)`)
	n := 0
	for _, b := range readmeBlocks(t) {
		if b.lang != "sh" {
			continue
		}
		for _, m := range script.FindAllStringSubmatch(b.text, -1) {
			n++
			if _, err := os.Stat(m[1]); err != nil {
				t.Errorf("README.md, block of line %d: bash %s: %v", b.line, m[1], err)
			}
		}
	}
	if n == 0 {
		t.Error("no bash command in the README's sh blocks")
	}
}

// TestREADMECommands checks that every `caddy rate-limit` command of
// README.md, in its code blocks (after "$ ") and in its inline code, names
// a subcommand and flags that exist and no stray argument.
func TestREADMECommands(t *testing.T) {
	data, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	root := &cobra.Command{Use: "rate-limit"}
	rateLimitCommand().CobraFunc(root)
	lines := regexp.MustCompile("(?m)(?:^\\$ |`)caddy rate-limit ([^`\n]*)").FindAllStringSubmatch(string(data), -1)
	if len(lines) == 0 {
		t.Fatal("no caddy rate-limit command in README.md")
	}
	for _, m := range lines {
		args := shellWords(m[1])
		sub, rest, err := root.Find(args)
		if err == nil && sub == root {
			err = fmt.Errorf("no subcommand %q", args[0])
		}
		if err == nil {
			err = sub.ParseFlags(rest)
		}
		if err == nil {
			err = sub.ValidateArgs(sub.Flags().Args())
		}
		if err != nil {
			t.Errorf("caddy rate-limit %s: %v", m[1], err)
		}
	}
}

// shellWords splits a command line at spaces, keeping a double-quoted
// word (without its quotes) whole.
func shellWords(s string) []string {
	var words []string
	for i, part := range strings.Split(s, `"`) {
		if i%2 == 1 {
			words = append(words, part)
		} else {
			words = append(words, strings.Fields(part)...)
		}
	}
	return words
}
