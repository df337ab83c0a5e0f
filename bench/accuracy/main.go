// Command accuracy measures how closely the rate_limit handler holds its
// limit: it drives Caddy instances with an open-loop load at rates below,
// at and far above the limit, for every rate algorithm and store mode,
// and reports, per run, the most admitted in any window, over-admission
// and under-admission, with plots. bench/accuracy.sh builds and starts
// what it needs; see bench/README.md for the method.
//
//	accuracy caddyfile -port 8080 -redis 127.0.0.1:6379   # one instance's Caddyfile
//	accuracy run -ports 8080,8081,8082 -out docs/accuracy # the runs, the table and the plots
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: accuracy caddyfile|run [flags]")
		os.Exit(2)
	}
	var c config
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	fs.IntVar(&c.events, "events", 100, "the limit: events per window")
	fs.DurationVar(&c.window, "window", time.Second, "the limit's window")
	fs.StringVar(&c.redis, "redis", "127.0.0.1:6379", "the redis-server the Redis modes share")
	fs.DurationVar(&c.syncInterval, "sync-interval", 200*time.Millisecond, "sync_interval of the two-layer mode")
	fs.StringVar(&c.leased, "leased", "", "handler option(s) turning on the leased mode, lines separated by ';' (empty: skipped)")
	port := fs.Int("port", 0, "caddyfile: the port of the instance's site")
	ports := fs.String("ports", "", "run: the instances' ports, comma-separated (the first also serves the memory mode)")
	duration := fs.Duration("duration", 6*time.Second, "run: how long each run offers load")
	rates := fs.String("rates", "0.5,1,4", "run: offered rates, as multiples of the limit's rate")
	bin := fs.Duration("bin", 100*time.Millisecond, "run: the interval admissions are counted in (divides the window)")
	out := fs.String("out", "", "run: the directory for the plots and results.md (none: only print)")
	note := fs.String("note", "", "run: a line on the machine and load, written above the table")
	only := fs.String("only", "", "run: only algorithms or modes with these names, comma-separated")
	_ = fs.Parse(os.Args[2:])
	c.leased = strings.ReplaceAll(c.leased, ";", "\n")

	switch os.Args[1] {
	case "caddyfile":
		fmt.Print(c.caddyfile(*port))
	case "run":
		if c.window%*bin != 0 || *duration%c.window != 0 {
			fail("the window %s must be a multiple of the bin %s, and the duration %s of the window", c.window, *bin, *duration)
		}
		var factors []float64
		for _, f := range strings.Split(*rates, ",") {
			v, err := strconv.ParseFloat(f, 64)
			if err != nil || v <= 0 {
				fail("bad rate %q", f)
			}
			factors = append(factors, v)
		}
		var urls []string
		for _, p := range strings.Split(*ports, ",") {
			urls = append(urls, "http://127.0.0.1:"+p)
		}
		var filter []string
		if *only != "" {
			filter = strings.Split(*only, ",")
		}
		rs := run(c, urls, factors, *duration, *bin, filter)
		if len(rs) == 0 {
			fail("no algorithm or mode matches -only %q", *only)
		}
		if *out != "" {
			write(*out, c, factors, rs, *note)
		}
	default:
		fail("unknown command %q (caddyfile or run)", os.Args[1])
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "accuracy: "+format+"\n", args...)
	os.Exit(1)
}

// run measures every algorithm in every mode at every offered rate, one
// run after the other (runs side by side would load the machine and each
// other's timing), printing a line per run.
func run(c config, urls []string, factors []float64, d, bin time.Duration, filter []string) []result {
	client := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 512},
	}
	ctx := context.Background()
	fmt.Printf("%-15s %-7s %7s %6s %8s %8s %7s %6s %7s %7s %6s %6s %7s\n",
		"algorithm", "mode", "offered", "sent", "admitted", "allowed", "max/win", "limit", "over%", "under%", "429", "errors", "lag")
	var rs []result
	for _, a := range algorithms {
		for _, m := range c.modes() {
			if filter != nil && !slices.Contains(filter, a.name) && !slices.Contains(filter, m.name) {
				continue
			}
			if ok, why := m.supports(a.name); !ok {
				fmt.Printf("%-15s %-7s skipped: %s\n", a.name, m.name, why)
				continue
			}
			if len(urls) < m.instances {
				fail("%s needs %d instances, got %d ports", m.name, m.instances, len(urls))
			}
			targets := make([]string, m.instances)
			for i := range targets {
				targets[i] = urls[i] + path(a.name, m)
				// Connections open and scripts loaded before the runs.
				for range 3 {
					send(ctx, client, targets[i], "warm-up")
				}
			}
			for _, f := range factors {
				r := runOne(ctx, client, targets, c, a.name, a.kind, m.name, f, d, bin)
				fmt.Printf("%-15s %-7s %6gx %6d %8d %8d %7d %6d %7.1f %7.1f %6d %6d %7s\n",
					a.name, m.name, f, r.sent, r.acc.Admitted, r.acc.Allowed, r.acc.MaxWindow, c.events,
					r.acc.OverPct(), r.acc.UnderPct(), r.denied, r.errors, r.lag.Round(time.Millisecond))
				rs = append(rs, r)
			}
		}
	}
	return rs
}

// runOne offers factor times the limit's rate to targets for d, on a key
// of its own, and measures what was admitted.
func runOne(ctx context.Context, client *http.Client, targets []string, c config, alg string, kind Kind, mode string, factor float64, d, bin time.Duration) result {
	rate := factor * float64(c.events) / c.window.Seconds()
	key := fmt.Sprintf("%s-%s-%g-%d", alg, mode, factor, time.Now().UnixNano())
	start, resps, lag := openLoop(ctx, client, targets, key, rate, d, c.window)
	r := result{alg: alg, mode: mode, factor: factor, bin: bin, lag: lag, sent: len(resps),
		limit: Limit{Events: c.events, Window: c.window, Kind: kind}}
	var first int64
	first, r.offered, r.admitted = binned(start, d, bin, resps)
	r.acc = Measure(r.limit, bin, first, r.offered, r.admitted)
	for _, x := range resps {
		switch x.status {
		case http.StatusOK:
		case http.StatusTooManyRequests:
			r.denied++
		default:
			r.errors++
		}
	}
	return r
}

// write puts the plots (one per algorithm and modes.svg) and results.md
// (the table) in dir.
func write(dir string, c config, factors []float64, rs []result, note string) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fail("%v", err)
	}
	files := map[string]string{"modes.svg": modesPlot(factors, c.modes(), rs)}
	for _, a := range algorithms {
		files[a.name+".svg"] = algorithmPlot(a.name, factors, c.modes(), rs)
	}
	var b strings.Builder
	if note != "" {
		fmt.Fprintf(&b, "%s\n\n", note)
	}
	writeTable(&b, c, factors, rs)
	files["results.md"] = b.String()
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			fail("%v", err)
		}
	}
	fmt.Printf("accuracy: wrote results.md, modes.svg and one plot per algorithm to %s\n", dir)
}

// writeTable writes a row per algorithm and mode with the figures of each
// offered rate side by side (the README's table), then one row per run.
func writeTable(w io.Writer, c config, factors []float64, rs []result) {
	fmt.Fprintf(w, "Limit %d per %s. Max in window: the most admitted in any %s (at %s resolution); over and under: %% of what the limit allowed. Offered %s times the limit.\n\n",
		c.events, c.window, c.window, rs[0].bin, joinFloats(factors, " / "))
	fmt.Fprintln(w, "| algorithm | mode | max in window | over % | under % | errors |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|")
	for i := 0; i < len(rs); {
		j := i
		var maxes, overs, unders []string
		errs := 0
		for ; j < len(rs) && rs[j].alg == rs[i].alg && rs[j].mode == rs[i].mode; j++ {
			maxes = append(maxes, strconv.Itoa(rs[j].acc.MaxWindow))
			overs = append(overs, fmt.Sprintf("%.1f", rs[j].acc.OverPct()))
			unders = append(unders, fmt.Sprintf("%.1f", rs[j].acc.UnderPct()))
			errs += rs[j].errors
		}
		fmt.Fprintf(w, "| `%s` | %s | %s | %s | %s | %d |\n", rs[i].alg, rs[i].mode,
			strings.Join(maxes, " / "), strings.Join(overs, " / "), strings.Join(unders, " / "), errs)
		i = j
	}
	fmt.Fprint(w, "\nEvery run:\n\n")
	fmt.Fprintln(w, "| algorithm | mode | offered | sent | admitted | allowed | max in window | over % | under % | 429 | errors | send lag |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rs {
		fmt.Fprintf(w, "| `%s` | %s | %g× | %d | %d | %d | %d | %.1f | %.1f | %d | %d | %s |\n", r.alg, r.mode, r.factor,
			r.sent, r.acc.Admitted, r.acc.Allowed, r.acc.MaxWindow, r.acc.OverPct(), r.acc.UnderPct(), r.denied, r.errors,
			r.lag.Round(time.Millisecond))
	}
}

func joinFloats(v []float64, sep string) string {
	s := make([]string, len(v))
	for i, f := range v {
		s[i] = strconv.FormatFloat(f, 'g', -1, 64)
	}
	return strings.Join(s, sep)
}
