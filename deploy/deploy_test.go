// Package deploy_test checks what deploy/ ships against the code: the
// Prometheus alert rules (promtool check and their unit tests), the example
// Prometheus configuration, and the Grafana dashboard, whose every query must
// parse and name only metrics and labels that metrics.New registers.
package deploy_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"

	"github.com/batonhq/baton/metrics"
)

const (
	rulesFile     = "prometheus/baton-alerts.yml"
	rulesTestFile = "prometheus/baton-alerts_test.yml"
	configFile    = "prometheus/prometheus.yml"
	dashboardFile = "grafana/baton-dashboard.json"
)

// promtool is Debian's (package prometheus); make tools-test installs it.
func promtool(t *testing.T, dir string, args ...string) {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool is not installed (%v): make tools-test installs Debian's prometheus package, which has it", err)
	}
	cmd := exec.Command(path, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func TestAlertRules(t *testing.T) {
	promtool(t, ".", "check", "rules", rulesFile)
	promtool(t, "prometheus", "test", "rules", filepath.Base(rulesTestFile))

	// The example configuration, with the key file it names.
	dir := t.TempDir()
	for _, f := range []string{configFile, rulesFile} {
		copyFile(t, f, filepath.Join(dir, filepath.Base(f)))
	}
	if err := os.WriteFile(filepath.Join(dir, "baton-metrics.key"), []byte("bk_example\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	promtool(t, dir, "check", "config", "prometheus.yml")

	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	readYAML(t, rulesFile, &rules)
	known := knownMetrics(t)
	var alerts []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			checkExpr(t, "alert "+r.Alert, r.Expr, known)
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("alert %s: want a severity, a summary and a description", r.Alert)
			}
		}
	}
	// The alerts an operator needs: Redis gone, waiters near their limit, slow handoffs, failed auth, unacknowledged writes.
	for _, want := range []string{"BatonRedisUnavailable", "BatonWaiterLimitNear", "BatonHandoffLatencyHigh", "BatonAuthFailures", "BatonWaitUnacknowledged"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("no alert %s", want)
		}
	}
	// Every alert has a unit test.
	raw, err := os.ReadFile(rulesTestFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range alerts {
		if !strings.Contains(string(raw), "alertname: "+a+"\n") {
			t.Errorf("alert %s has no test in %s", a, rulesTestFile)
		}
	}
}

// dashboard is the part of a Grafana dashboard the test reads.
type dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int                `json:"id"`
	Type       string             `json:"type"`
	Title      string             `json:"title"`
	Datasource *struct{ UID any } `json:"datasource"`
	GridPos    struct{ H, W, X, Y int }
	Targets    []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // of a collapsed row
}

func TestGrafanaDashboard(t *testing.T) {
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s is not JSON: %v", dashboardFile, err)
	}
	if d.Title == "" || d.UID == "" {
		t.Errorf("title %q, uid %q", d.Title, d.UID)
	}
	known := knownMetrics(t)
	var exprs []string
	ids := map[int]bool{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("panel id %d used twice", p.ID)
			}
			ids[p.ID] = true
			if p.Title == "" {
				t.Errorf("panel %d has no title", p.ID)
			}
			if p.GridPos.X+p.GridPos.W > 24 || p.GridPos.W == 0 {
				t.Errorf("panel %q: gridPos %+v outside the 24 columns", p.Title, p.GridPos)
			}
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			if len(p.Targets) == 0 || p.Datasource == nil {
				t.Errorf("panel %q: no query or no data source", p.Title)
			}
			for _, tg := range p.Targets {
				checkExpr(t, fmt.Sprintf("panel %q", p.Title), tg.Expr, known)
				exprs = append(exprs, tg.Expr)
			}
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			checkExpr(t, "variable "+v.Name, v.Definition, known)
		}
	}
	// What the dashboard must show.
	all := strings.Join(exprs, "\n")
	for _, want := range []string{"baton_http_requests_total", "baton_http_request_duration_seconds_bucket", "baton_acquires_total",
		"baton_waiters", "baton_handoff_latency_seconds_bucket", "baton_redis_errors_total", "baton_pubsub_resubscribes_total",
		"baton_wait_unacked_total", `status=~"401|403"`, "baton_body_read_timeouts_total", "baton_abandoned_undone_total"} {
		if !strings.Contains(all, want) {
			t.Errorf("no panel queries %s", want)
		}
	}

	// promtool parses every query, as recording rules, with Grafana's
	// variables given values.
	vars := strings.NewReplacer("$__rate_interval", "5m", "$job", ".*", "$instance", ".*")
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rules []rule
	for i, e := range exprs {
		rules = append(rules, rule{Record: fmt.Sprintf("dashboard:query%d", i), Expr: vars.Replace(e)})
	}
	out, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "queries.yml"), out, 0o644); err != nil {
		t.Fatal(err)
	}
	promtool(t, dir, "check", "rules", "queries.yml")
}

// metricInfo is a registered metric's labels (job, instance and, for a
// histogram's buckets, le come from Prometheus).
type metricInfo map[string]bool

var (
	descName   = regexp.MustCompile(`fqName: "([^"]+)"`)
	descLabels = regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
)

// knownMetrics is every metric metrics.New registers, by name (histograms
// also by their _bucket, _sum and _count series), with its labels.
func knownMetrics(t *testing.T) map[string]metricInfo {
	t.Helper()
	m := metrics.New()
	known := map[string]metricInfo{}
	add := func(name string, labels []string, histogram bool) {
		info := metricInfo{"job": true, "instance": true}
		for _, l := range labels {
			info[l] = true
		}
		known[name] = info
		if histogram {
			for _, s := range []string{"_sum", "_count"} {
				known[name+s] = info
			}
			bucket := metricInfo{"le": true}
			for l := range info {
				bucket[l] = true
			}
			known[name+"_bucket"] = bucket
		}
	}
	// The fields' collectors describe themselves, labelled or not yet used.
	v := reflect.ValueOf(m).Elem()
	for i := 0; i < v.NumField(); i++ {
		if !v.Field(i).CanInterface() {
			continue
		}
		c, ok := v.Field(i).Interface().(prometheus.Collector)
		if _, registry := c.(*prometheus.Registry); !ok || registry {
			continue
		}
		_, histogram := c.(*prometheus.HistogramVec)
		if _, ok := c.(prometheus.Histogram); ok {
			histogram = true
		}
		ch := make(chan *prometheus.Desc)
		go func() {
			c.Describe(ch)
			close(ch)
		}()
		for d := range ch {
			name := descName.FindStringSubmatch(d.String())
			labels := descLabels.FindStringSubmatch(d.String())
			if name == nil {
				t.Fatalf("cannot read %s", d)
			}
			var ls []string
			if labels != nil && labels[1] != "" {
				ls = strings.Split(labels[1], ",")
			}
			add(name[1], ls, histogram)
		}
	}
	// The rest of the registry (baton_redis_up, the Go and process collectors).
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if _, ok := known[mf.GetName()]; ok {
			continue
		}
		var labels []string
		if len(mf.GetMetric()) > 0 {
			for _, lp := range mf.GetMetric()[0].GetLabel() {
				labels = append(labels, lp.GetName())
			}
		}
		add(mf.GetName(), labels, mf.GetType().String() == "HISTOGRAM")
	}
	if len(known) < 12 {
		t.Fatalf("only %d metrics found", len(known))
	}
	return known
}

var (
	metricRef   = regexp.MustCompile(`\b((?:baton|go|process)_[a-z0-9_]+)(\{[^}]*\})?`)
	matcherName = regexp.MustCompile(`(\w+)\s*(?:=~|!~|!=|=)\s*"`)
	groupBy     = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
)

// checkExpr fails unless every metric expr names is registered, and every
// label it matches or groups by is one of those metrics' labels.
func checkExpr(t *testing.T, where, expr string, known map[string]metricInfo) {
	t.Helper()
	refs := metricRef.FindAllStringSubmatch(expr, -1)
	if len(refs) == 0 {
		t.Errorf("%s: %q queries no Baton metric", where, expr)
	}
	labels := metricInfo{"job": true, "instance": true, "le": true}
	for _, r := range refs {
		info, ok := known[r[1]]
		if !ok {
			t.Errorf("%s: %s is no metric of metrics.New (%q)", where, r[1], expr)
			continue
		}
		for l := range info {
			labels[l] = true
		}
		for _, m := range matcherName.FindAllStringSubmatch(r[2], -1) {
			if !info[m[1]] {
				t.Errorf("%s: %s has no label %q (%q)", where, r[1], m[1], expr)
			}
		}
	}
	for _, g := range groupBy.FindAllStringSubmatch(expr, -1) {
		for _, l := range strings.Split(g[1], ",") {
			if l = strings.TrimSpace(l); l != "" && !labels[l] {
				t.Errorf("%s: groups by %q, which none of its metrics has (%q)", where, l, expr)
			}
		}
	}
}

func readYAML(t *testing.T, file string, v any) {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	raw, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, raw, 0o644); err != nil {
		t.Fatal(err)
	}
}
