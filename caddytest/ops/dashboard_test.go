package ops

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/zonelimit/caddy-ratelimit/internal/caddytesting"
	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
)

// dashboardFile is the Grafana dashboard of the module's metrics, from this
// package's directory.
const dashboardFile = "../../dashboards/caddy-rate-limit.json"

// TestDashboardQueries runs allowed and denied requests through a memory
// zone and a Redis zone, scrapes the admin endpoint's /metrics, and checks
// every PromQL expression of the Grafana dashboard (panel targets and the
// template variables' queries) against the scrape: each metric it names
// exists, with every label its selectors, by/without/on/ignoring clauses
// and legend formats use, and a literal label value it matches exists
// (a typo in a panel would otherwise show "No data" only in Grafana). Every
// caddy_http_rate_limit_* family is shown by some panel, and the dashboard
// is importable anywhere: every query uses the Prometheus data source
// variable, not a data source of the Grafana it was made on.
func TestDashboardQueries(t *testing.T) {
	srv := redistest.Start(t)
	const memZone, redisZone, leaseZone = "ops_dashboard_mem", "ops_dashboard_redis", "ops_dashboard_lease"
	live.Load(t, live.Globals("")+fmt.Sprintf(`
http://:%d {
	rate_limit /mem {
		zone %s {
			key static
			limit 2 1h
		}
	}
	rate_limit /redis {
		zone %s {
			key static
			limit 2 1h
		}
		zone %s {
			key static
			max_concurrent 10
		}
		store redis
%s		on_error open
	}
	respond "ok"
}
`, live.HTTPPort, memZone, redisZone, leaseZone, caddytesting.RedisBlock(srv.Addr)))

	for _, path := range []string{"/mem", "/redis"} {
		for i, want := range []int{200, 200, 429} {
			caddytesting.ExpectCode(t, live.Get(t, path), want, fmt.Sprintf("%s request %d", path, i+1))
		}
	}
	fams := live.Scrape(t)
	for _, zone := range []string{memZone, redisZone} {
		expectValue(t, fams, 2, mRequests, "zone", zone, "result", "allowed")
		expectValue(t, fams, 1, mRequests, "zone", zone, "result", "denied")
	}
	expectValue(t, fams, 0, mBreaker, "zone", redisZone)
	expectValue(t, fams, 0, mPending, "zone", leaseZone)
	expectValue(t, fams, 1, mKeys, "zone", memZone)
	for _, store := range []string{"memory", "redis"} {
		if histogramCount(fams, mDecision, "store", store) <= 0 {
			t.Errorf("%s{store=%q}: no decision recorded", mDecision, store)
		}
	}

	d := readDashboard(t)
	problems, used := d.check(fams)
	for _, p := range problems {
		t.Error(p)
	}
	for name := range fams {
		if strings.HasPrefix(name, "caddy_http_rate_limit_") && !used[name] {
			t.Errorf("metric %s has no panel in %s", name, dashboardFile)
		}
	}

	// The check finds what it is for: a metric, a label, a label value
	// or a legend label that does not exist.
	for _, bad := range []struct{ expr, legend string }{
		{`sum(rate(caddy_http_rate_limit_request_total[5m]))`, ""},
		{`sum by (zone) (rate(caddy_http_rate_limit_requests_total{zone=~"$zone", result="deny"}[5m]))`, "{{zone}}"},
		{`sum by (store) (rate(caddy_http_rate_limit_requests_total[5m]))`, ""},
		{`sum without (instance, store) (caddy_http_rate_limit_keys)`, ""},
		{`sum by (job) (caddy_http_rate_limit_keys)`, "{{instance}} {{result}}"},
		{`caddy_http_rate_limit_breaker_open{zne="a"}`, ""},
		{`histogram_quantile(0.5, sum by (le) (rate(caddy_http_rate_limit_decision_seconds_bucket[5m])))`, "{{zone}}"},
		{`histogram_quantile(0.5, sum by (le) (rate(caddy_http_rate_limit_store_errors_total_bucket[5m])))`, ""},
		{`rate(caddy_http_rate_limit_requests_total{zone=~"$zonez"}[5m])`, ""},
		{`sum(rate(http_requests_total[5m]))`, ""},
	} {
		if p := d.checkExpr(fams, "bad", bad.expr, bad.legend, nil); len(p) == 0 {
			t.Errorf("no problem found in %q (legend %q)", bad.expr, bad.legend)
		}
	}
}

// dashboard is the part of Grafana's dashboard JSON model the test reads.
type dashboard struct {
	Title         string                     `json:"title"`
	UID           string                     `json:"uid"`
	SchemaVersion int                        `json:"schemaVersion"`
	Refresh       string                     `json:"refresh"`
	Time          *struct{ From, To string } `json:"time"`
	Panels        []panel                    `json:"panels"`
	Templating    struct {
		List []templateVar `json:"list"`
	} `json:"templating"`
	Inputs []json.RawMessage `json:"__inputs"`
}

type panel struct {
	ID         int            `json:"id"`
	Type       string         `json:"type"`
	Title      string         `json:"title"`
	Datasource *datasourceRef `json:"datasource"`
	Targets    []struct {
		RefID        string         `json:"refId"`
		Expr         string         `json:"expr"`
		LegendFormat string         `json:"legendFormat"`
		Datasource   *datasourceRef `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type templateVar struct {
	Type       string          `json:"type"`
	Name       string          `json:"name"`
	Query      json.RawMessage `json:"query"` // a string, or {"query": "..."} (Grafana 10 and later)
	Definition string          `json:"definition"`
	Datasource *datasourceRef  `json:"datasource"`
}

func readDashboard(t *testing.T) *dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return &d
}

// grafanaBuiltins are the variables Grafana defines in every dashboard.
var grafanaBuiltins = []string{"__interval", "__interval_ms", "__rate_interval", "__rate_interval_ms", "__range", "__range_s", "__range_ms", "__dashboard", "__from", "__to"}

// check checks the whole dashboard against a scrape and returns the
// problems found and the metric families its queries use.
func (d *dashboard) check(fams map[string]*dto.MetricFamily) (problems []string, used map[string]bool) {
	used = make(map[string]bool)
	problemf := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }

	if d.Title == "" || d.UID == "" {
		problemf("dashboard: title %q, uid %q: want both", d.Title, d.UID)
	}
	if d.SchemaVersion < 36 {
		problemf("dashboard: schemaVersion %d, want 36 or later (data source references by uid)", d.SchemaVersion)
	}
	if d.Time == nil || d.Time.From == "" || d.Refresh == "" {
		problemf("dashboard: no default time range or refresh")
	}
	if len(d.Inputs) > 0 {
		problemf("dashboard: __inputs: the data source is a template variable, so that the JSON imports as is (UI, API, provisioning)")
	}

	// The data source variable every query must use.
	dsVar := ""
	for _, v := range d.Templating.List {
		if v.Type == "datasource" {
			var q string
			if json.Unmarshal(v.Query, &q) != nil || q != "prometheus" {
				problemf("variable %s: data source type %s, want \"prometheus\"", v.Name, v.Query)
			}
			dsVar = v.Name
		}
	}
	if dsVar == "" {
		problemf("dashboard: no data source variable (type datasource)")
	}
	checkDS := func(where string, ds *datasourceRef) {
		if ds == nil || ds.Type != "prometheus" || ds.UID != "${"+dsVar+"}" {
			problemf("%s: data source %+v, want {prometheus ${%s}}", where, ds, dsVar)
		}
	}

	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		where := "variable " + v.Name
		checkDS(where, v.Datasource)
		q := v.Definition
		var s string
		var obj struct{ Query string }
		if json.Unmarshal(v.Query, &s) == nil {
			q = s
		} else if json.Unmarshal(v.Query, &obj) == nil && obj.Query != "" {
			q = obj.Query
		}
		if v.Definition != "" && v.Definition != q {
			problemf("%s: definition %q differs from query %q", where, v.Definition, q)
		}
		problems = append(problems, d.checkVariableQuery(fams, where, q, used)...)
	}

	var walk func([]panel)
	ids := make(map[int]bool)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
			if ids[p.ID] {
				problemf("%s: id used twice", where)
			}
			ids[p.ID] = true
			if p.Type != "timeseries" && p.Type != "stat" {
				problemf("%s: type %q, want timeseries or stat", where, p.Type)
			}
			checkDS(where, p.Datasource)
			if len(p.Targets) == 0 {
				problemf("%s: no query", where)
			}
			for _, tg := range p.Targets {
				w := where + " query " + tg.RefID
				checkDS(w, tg.Datasource)
				problems = append(problems, d.checkExpr(fams, w, tg.Expr, tg.LegendFormat, used)...)
			}
		}
	}
	walk(d.Panels)
	return problems, used
}

// labelValuesRe matches the variable query label_values(selector, label)
// and label_values(label).
var labelValuesRe = regexp.MustCompile(`^\s*label_values\(\s*(?:(.*?)\s*,\s*)?([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*$`)

// checkVariableQuery checks a query variable's Prometheus query:
// label_values(selector, label), label_values(label) or
// query_result(expr). Others (metrics(), label_names()) are problems: this
// test does not know what they must find.
func (d *dashboard) checkVariableQuery(fams map[string]*dto.MetricFamily, where, q string, used map[string]bool) []string {
	if m := labelValuesRe.FindStringSubmatch(q); m != nil {
		if m[1] == "" {
			for _, f := range fams {
				if slices.Contains(familyLabels(f), m[2]) {
					return nil
				}
			}
			return []string{fmt.Sprintf("%s: no metric has label %q", where, m[2])}
		}
		return d.checkExpr(fams, where, m[1], "{{"+m[2]+"}}", used)
	}
	if inner, ok := strings.CutPrefix(strings.TrimSpace(q), "query_result("); ok && strings.HasSuffix(inner, ")") {
		return d.checkExpr(fams, where, strings.TrimSuffix(inner, ")"), "", used)
	}
	return []string{fmt.Sprintf("%s: query %q: not label_values() or query_result(), which this test checks", where, q)}
}

// legendLabelRe matches a label in a legend format: {{zone}}, {{ zone }}.
var legendLabelRe = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)

// checkExpr checks one PromQL expression and its legend format against a
// scrape, adding the families it uses to used (if not nil).
//
// A selector's labels are checked against its own metric; a label of a
// grouping clause (by, without, on, ignoring, group_left/right) or of the
// legend, against every metric of the expression, which is stricter than
// PromQL (an aggregation only sees its own argument) but right for
// expressions that combine series of the same labels, as a dashboard's do.
// le is a label of a histogram's _bucket series only.
func (d *dashboard) checkExpr(fams map[string]*dto.MetricFamily, where, expr, legend string, used map[string]bool) []string {
	var problems []string
	problemf := func(format string, a ...any) {
		problems = append(problems, where+": "+fmt.Sprintf(format, a...))
	}
	p, err := parsePromQL(expr)
	if err != nil {
		problemf("%q: %v", expr, err)
		return problems
	}
	if len(p.selectors) == 0 {
		problemf("%q: no metric", expr)
	}
	for _, v := range p.vars {
		if !slices.Contains(grafanaBuiltins, v) && !slices.ContainsFunc(d.Templating.List, func(tv templateVar) bool { return tv.Name == v }) {
			problemf("%q: variable $%s is not defined", expr, v)
		}
	}

	var all [][]string // the labels of each metric of expr
	for _, s := range p.selectors {
		f, labels := resolveMetric(fams, s.metric)
		if f == nil {
			problemf("metric %s is not in the scrape", s.metric)
			continue
		}
		if used != nil {
			used[f.GetName()] = true
		}
		all = append(all, labels)
		for _, m := range s.matchers {
			if !slices.Contains(labels, m.label) {
				problemf("%s has no label %q (it has %v)", s.metric, m.label, labels)
				continue
			}
			if slices.Contains(targetLabels, m.label) {
				continue
			}
			for _, v := range m.literalValues() {
				if !hasLabelValue(f, m.label, v) {
					problemf("%s has no series with %s=%q", s.metric, m.label, v)
				}
			}
		}
	}
	var wanted []string
	wanted = append(wanted, p.grouping...)
	for _, m := range legendLabelRe.FindAllStringSubmatch(legend, -1) {
		wanted = append(wanted, m[1])
	}
	for _, l := range wanted {
		for i, labels := range all {
			if !slices.Contains(labels, l) {
				problemf("label %q (of a by/without/on/ignoring clause, the legend or label_values) is not a label of %s (it has %v)", l, p.selectors[i].metric, labels)
			}
		}
	}
	return problems
}

// targetLabels are the labels Prometheus adds to every series it scrapes:
// not in the scrape, but there to query.
var targetLabels = []string{"instance", "job"}

// resolveMetric finds the family of a metric name as PromQL sees it (a
// histogram's series are name_bucket, name_sum and name_count) and the
// labels its series carry in Prometheus (targetLabels included).
func resolveMetric(fams map[string]*dto.MetricFamily, name string) (*dto.MetricFamily, []string) {
	f, labels := resolveFamily(fams, name)
	if f == nil || len(labels) == 0 {
		return nil, nil // no series
	}
	return f, append(labels, targetLabels...)
}

func resolveFamily(fams map[string]*dto.MetricFamily, name string) (*dto.MetricFamily, []string) {
	if f := fams[name]; f != nil && f.GetType() != dto.MetricType_HISTOGRAM && f.GetType() != dto.MetricType_SUMMARY {
		return f, familyLabels(f)
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok {
			continue
		}
		f := fams[base]
		switch {
		case f == nil:
		case f.GetType() == dto.MetricType_HISTOGRAM && suffix == "_bucket" && len(f.GetMetric()) > 0:
			return f, append(familyLabels(f), "le")
		case f.GetType() == dto.MetricType_HISTOGRAM || f.GetType() == dto.MetricType_SUMMARY:
			return f, familyLabels(f)
		}
	}
	return nil, nil
}

// familyLabels are the label names of a family's series (none if it has
// no series).
func familyLabels(f *dto.MetricFamily) []string {
	var labels []string
	for _, m := range f.GetMetric() {
		for _, lp := range m.GetLabel() {
			if !slices.Contains(labels, lp.GetName()) {
				labels = append(labels, lp.GetName())
			}
		}
	}
	if len(f.GetMetric()) > 0 {
		labels = append(labels, "__name__")
	}
	sort.Strings(labels)
	return labels
}

func hasLabelValue(f *dto.MetricFamily, label, value string) bool {
	if label == "__name__" {
		return value == f.GetName()
	}
	for _, m := range f.GetMetric() {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == label && lp.GetValue() == value {
				return true
			}
		}
	}
	return false
}

// promql is what parsePromQL extracts from an expression.
type promql struct {
	selectors []selector
	grouping  []string // labels of by, without, on, ignoring, group_left, group_right
	vars      []string // Grafana variables ($zone, ${zone}, [[zone]])
}

type selector struct {
	metric   string
	matchers []matcher
}

type matcher struct {
	label, op, value string
}

// literalValues are the label values a matcher requires to exist: the
// value of an = matcher, or the alternatives of an =~ matcher that is a
// plain alternation of words (a|b). Negative matchers, other regular
// expressions and values with a Grafana variable require none.
func (m matcher) literalValues() []string {
	if m.label == "__name__" || strings.ContainsAny(m.value, "$[") {
		return nil
	}
	switch m.op {
	case "=":
		return []string{m.value}
	case "=~":
		if alternationRe.MatchString(m.value) {
			return strings.Split(m.value, "|")
		}
	}
	return nil
}

// promqlAggregations are PromQL's aggregation operators, which may be
// followed by a by/without clause instead of a parenthesis.
var promqlAggregations = []string{"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk", "quantile", "limitk", "limit_ratio"}

// promqlKeywords are PromQL's words that are neither metrics nor functions.
var promqlKeywords = []string{"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right", "inf", "nan", "atan2"}

var (
	identRe       = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*`)
	numberRe      = regexp.MustCompile(`^(0x[0-9a-fA-F]+|[0-9][0-9a-zA-Z_.]*([eE][+-][0-9]+)?|\.[0-9]+)`)
	variableRe    = regexp.MustCompile(`^(\$\{([a-zA-Z0-9_]+)(:[^}]*)?\}|\$([a-zA-Z0-9_]+)|\[\[([a-zA-Z0-9_]+)\]\])`)
	matcherRe     = regexp.MustCompile(`^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`" + `)\s*,?`)
	stringRe      = regexp.MustCompile(`^("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`)")
	alternationRe = regexp.MustCompile(`^\w+(\|\w+)*$`)
	labelsRe      = regexp.MustCompile(`^\(\s*([a-zA-Z_][a-zA-Z0-9_]*(\s*,\s*[a-zA-Z_][a-zA-Z0-9_]*)*)?\s*,?\s*\)`)
)

// parsePromQL extracts the metric selectors, grouping labels and Grafana
// variables of a PromQL expression with a small scanner, not a full parser.
// It handles: metric names with or without a {…} selector (label matchers
// =, !=, =~, !~ with "…", '…' or `…` values); selectors without a name
// only with a __name__ matcher; function calls and aggregations (an
// identifier followed by "(", or one of promqlAggregations), by/without/
// on/ignoring/group_left/group_right label lists; numbers and durations;
// range and subquery brackets […] (skipped: they hold durations); string
// literals; # comments; Grafana variables anywhere ($v, ${v}, ${v:fmt},
// [[v]]). Every other identifier is a metric name, so a word this scanner
// does not know shows up as a metric missing from the scrape, not as
// nothing.
func parsePromQL(expr string) (*promql, error) {
	p := &promql{}
	s := expr
	lastMetric := -1 // index in p.selectors of a metric name just read, which a {…} belongs to
	for len(s) > 0 {
		c := s[0]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			s = s[1:]
			continue
		case c == '#':
			if i := strings.IndexByte(s, '\n'); i >= 0 {
				s = s[i:]
			} else {
				s = ""
			}
			continue
		case variableRe.MatchString(s):
			m := variableRe.FindStringSubmatch(s)
			p.vars = append(p.vars, m[2]+m[4]+m[5])
			s = s[len(m[0]):]
		case c == '[':
			end, depth := 0, 0
			for ; end < len(s); end++ {
				if s[end] == '[' {
					depth++
				} else if s[end] == ']' {
					if depth--; depth == 0 {
						break
					}
				}
			}
			if end == len(s) {
				return nil, fmt.Errorf("unclosed [")
			}
			p.vars = append(p.vars, grafanaVars(s[:end+1])...)
			s = s[end+1:]
		case c == '"' || c == '\'' || c == '`':
			m := stringRe.FindString(s)
			if m == "" {
				return nil, fmt.Errorf("unclosed string")
			}
			p.vars = append(p.vars, grafanaVars(m)...)
			s = s[len(m):]
		case c == '{':
			s = s[1:]
			var ms []matcher
			for {
				m := matcherRe.FindStringSubmatch(s)
				if m == nil {
					break
				}
				ms = append(ms, matcher{label: m[1], op: m[2], value: m[3][1 : len(m[3])-1]})
				p.vars = append(p.vars, grafanaVars(m[3])...)
				s = s[len(m[0]):]
			}
			s = strings.TrimLeft(s, " \t\n\r")
			if !strings.HasPrefix(s, "}") {
				return nil, fmt.Errorf("selector: cannot read %q", s)
			}
			s = s[1:]
			if lastMetric < 0 {
				// {__name__="…", …}
				name := ""
				for _, m := range ms {
					if m.label == "__name__" && m.op == "=" {
						name = m.value
					}
				}
				if name == "" {
					return nil, fmt.Errorf("selector without a metric name")
				}
				p.selectors = append(p.selectors, selector{metric: name})
				lastMetric = len(p.selectors) - 1
			}
			p.selectors[lastMetric].matchers = ms
			lastMetric = -1
			continue
		case numberRe.MatchString(s):
			s = s[len(numberRe.FindString(s)):]
		case identRe.MatchString(s):
			id := identRe.FindString(s)
			s = s[len(id):]
			next := strings.TrimLeft(s, " \t\n\r")
			switch {
			case slices.Contains([]string{"by", "without", "on", "ignoring", "group_left", "group_right"}, id) && strings.HasPrefix(next, "("):
				m := labelsRe.FindStringSubmatch(next)
				if m == nil {
					return nil, fmt.Errorf("%s: cannot read the label list %q", id, next)
				}
				for _, l := range strings.Split(m[1], ",") {
					if l = strings.TrimSpace(l); l != "" {
						p.grouping = append(p.grouping, l)
					}
				}
				s = next[len(m[0]):]
			case slices.Contains(promqlKeywords, strings.ToLower(id)),
				slices.Contains(promqlAggregations, id),
				strings.HasPrefix(next, "("):
			default:
				p.selectors = append(p.selectors, selector{metric: id})
				lastMetric = len(p.selectors) - 1
				continue
			}
		default:
			s = s[1:] // an operator, a parenthesis, a comma
		}
		lastMetric = -1
	}
	return p, nil
}

// grafanaVars are the names of the Grafana variables in s.
func grafanaVars(s string) []string {
	var vars []string
	for i := 0; i < len(s); i++ {
		if m := variableRe.FindStringSubmatch(s[i:]); m != nil {
			vars = append(vars, m[2]+m[4]+m[5])
			i += len(m[0]) - 1
		}
	}
	return vars
}

// TestDashboardPromQLScanner checks what parsePromQL extracts from the
// forms it claims to handle.
func TestDashboardPromQLScanner(t *testing.T) {
	for _, c := range []struct {
		expr      string
		selectors string // metric{label op value,...} ...
		grouping  string
		vars      string
	}{
		{`sum by (zone, result) (rate(caddy_http_rate_limit_requests_total{zone=~"$zone"}[$__rate_interval]))`,
			`caddy_http_rate_limit_requests_total{zone=~$zone}`, "zone,result", "zone,__rate_interval"},
		{"histogram_quantile(0.99, sum without(instance) (rate(x_bucket{store!=\"memory\", a!~'b.*'}[5m:1m] offset 1h)))",
			`x_bucket{store!=memory,a!~b.*}`, "instance", ""},
		{"a / on(zone) group_left(result) b # comment b2\n+ 1e3 * c",
			`a b c`, "zone,result", ""},
		{`{__name__="m", zone="${zone:regex}"} > bool 0.5 and max(n)`,
			`m{__name__=m,zone=${zone:regex}} n`, "", "zone"},
		{`sum(rate(m[[[interval]]])) unless count by () (k{a=` + "`x`" + `})`,
			`m k{a=x}`, "", "interval"},
	} {
		p, err := parsePromQL(c.expr)
		if err != nil {
			t.Errorf("%q: %v", c.expr, err)
			continue
		}
		var sel []string
		for _, s := range p.selectors {
			var ms []string
			for _, m := range s.matchers {
				ms = append(ms, m.label+m.op+m.value)
			}
			if len(ms) > 0 {
				sel = append(sel, s.metric+"{"+strings.Join(ms, ",")+"}")
			} else {
				sel = append(sel, s.metric)
			}
		}
		if got := strings.Join(sel, " "); got != c.selectors {
			t.Errorf("%q: selectors %q, want %q", c.expr, got, c.selectors)
		}
		if got := strings.Join(p.grouping, ","); got != c.grouping {
			t.Errorf("%q: grouping %q, want %q", c.expr, got, c.grouping)
		}
		if got := strings.Join(p.vars, ","); got != c.vars {
			t.Errorf("%q: variables %q, want %q", c.expr, got, c.vars)
		}
	}
	for _, bad := range []string{`m{a="b"`, `{a="b"}`, `sum by (a b) (m)`, `m{a=b}`} {
		if _, err := parsePromQL(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
