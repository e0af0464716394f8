// Package prometheus checks the operator's Prometheus rules
// (config/prometheus-rules/fluent-pvc-operator.rules.yaml) and Grafana
// dashboard (docs/grafana-dashboard.json) without a Prometheus: every alert
// carries a severity, a `for`, a summary, a description and a runbook link
// to its section of docs/monitoring.md; rules and panels query only metrics
// and labels the operator exports; and rules_test.yaml, which
// `make test-rules` runs with promtool, covers every rule.
package prometheus

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

const runbookBase = "https://github.com/st-tech/fluent-pvc-operator/blob/main/docs/monitoring.md"

type rule struct {
	Record      string            `json:"record"`
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []rule `json:"rules"`
	} `json:"groups"`
}

func readYAML(t *testing.T, into any, path ...string) []byte {
	t.Helper()
	raw, err := os.ReadFile(fixtures.Path(path...))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, into); err != nil {
		t.Fatalf("%s: %v", strings.Join(path, "/"), err)
	}
	return raw
}

func rules(t *testing.T) []rule {
	t.Helper()
	var f ruleFile
	readYAML(t, &f, "config", "prometheus-rules", "fluent-pvc-operator.rules.yaml")
	var out []rule
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	if len(out) == 0 {
		t.Fatal("the rule file has no rules")
	}
	return out
}

func TestAlertsAreComplete(t *testing.T) {
	doc, err := os.ReadFile(fixtures.Path("docs", "monitoring.md"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range rules(t) {
		name := r.Record + r.Alert
		if seen[name] {
			t.Errorf("%s is defined twice", name)
		}
		seen[name] = true
		if r.Alert == "" {
			continue
		}
		if s := r.Labels["severity"]; !slices.Contains([]string{"critical", "warning", "info"}, s) {
			t.Errorf("%s: severity %q, want critical, warning or info", r.Alert, s)
		}
		if r.For == "" {
			t.Errorf("%s has no `for`", r.Alert)
		}
		for _, a := range []string{"summary", "description", "runbook_url"} {
			if strings.TrimSpace(r.Annotations[a]) == "" {
				t.Errorf("%s has no %s", r.Alert, a)
			}
		}
		if want := runbookBase + "#" + strings.ToLower(r.Alert); r.Annotations["runbook_url"] != want {
			t.Errorf("%s: runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
		}
		if !regexp.MustCompile(`(?m)^### ` + r.Alert + `$`).Match(doc) {
			t.Errorf("docs/monitoring.md has no section \"### %s\", which the alert's runbook_url points at", r.Alert)
		}
	}
}

// metric is one metric the operator exports, with its labels.
type metric struct {
	labels    []string
	histogram bool
}

var metricDef = regexp.MustCompile(`(?s)prometheus\.New(Counter|Gauge|Histogram)Vec\(prometheus\.\w+Opts\{.*?Name:\s*"([^"]+)".*?\},\s*\[\]string\{([^}]*)\}\)`)

// exported reads the operator's metrics from their definitions, and adds
// controller-runtime's leader-election gauge.
func exported(t *testing.T) map[string]metric {
	t.Helper()
	out := map[string]metric{
		"leader_election_master_status": {labels: []string{"name"}},
	}
	for _, file := range [][]string{{"controllers", "metrics.go"}, {"checkout", "metrics.go"}, {"webhook", "metrics.go"}} {
		src, err := os.ReadFile(fixtures.Path(file...))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range metricDef.FindAllStringSubmatch(string(src), -1) {
			var labels []string
			for _, l := range strings.Split(m[3], ",") {
				labels = append(labels, strings.Trim(strings.TrimSpace(l), `"`))
			}
			out[m[2]] = metric{labels: labels, histogram: m[1] == "Histogram"}
		}
	}
	if len(out) < 20 {
		t.Fatalf("found only %d metric definitions: has their form changed?", len(out))
	}
	return out
}

// lookup finds name among the exported metrics, a histogram's series
// included.
func lookup(metrics map[string]metric, name string) (metric, bool) {
	if m, ok := metrics[name]; ok && !m.histogram {
		return m, true
	}
	for _, suffix := range []string{"_bucket", "_count", "_sum"} {
		if m, ok := metrics[strings.TrimSuffix(name, suffix)]; ok && m.histogram && strings.HasSuffix(name, suffix) {
			if suffix == "_bucket" {
				m.labels = append(slices.Clone(m.labels), "le")
			}
			return m, true
		}
	}
	return metric{}, false
}

var (
	quoted    = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	selector  = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}`)
	matcher   = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
	grouping  = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	ident     = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	variables = regexp.MustCompile(`\$\{?[a-zA-Z_]+\}?`)
)

// checkExpr reports, for an expression named what, every series it
// selects that neither the operator exports nor a rule records, and every
// label it names that the series lacks.
func checkExpr(t *testing.T, metrics map[string]metric, recorded map[string]bool, what, expr string) {
	t.Helper()
	expr = variables.ReplaceAllString(expr, "1m")
	bare := quoted.ReplaceAllString(expr, `""`)
	allLabels := map[string]bool{}
	for _, m := range metrics {
		for _, l := range m.labels {
			allLabels[l] = true
		}
	}
	// A histogram's buckets, and what a scrape adds to every series.
	for _, l := range []string{"le", "instance", "job", "pod"} {
		allLabels[l] = true
	}
	for _, m := range selector.FindAllStringSubmatch(bare, -1) {
		name := m[1]
		for _, l := range matcher.FindAllStringSubmatch(m[2], -1) {
			if recorded[name] {
				if !allLabels[l[1]] {
					t.Errorf("%s: %s has no label %s", what, name, l[1])
				}
				continue
			}
			if mt, ok := lookup(metrics, name); ok && !slices.Contains(mt.labels, l[1]) {
				t.Errorf("%s: %s has no label %s (it has %v)", what, name, l[1], mt.labels)
			}
		}
	}
	for _, m := range grouping.FindAllStringSubmatch(bare, -1) {
		for _, l := range strings.Split(m[1], ",") {
			if l = strings.TrimSpace(l); l != "" && !allLabels[l] {
				t.Errorf("%s: groups by %s, which no metric of the operator has", what, l)
			}
		}
	}
	for _, name := range ident.FindAllString(bare, -1) {
		switch {
		case strings.Contains(name, ":"):
			if !recorded[name] {
				t.Errorf("%s: %s is not recorded by any rule", what, name)
			}
		case strings.HasPrefix(name, "fluentpvc_") || strings.HasPrefix(name, "leader_election_"):
			if _, ok := lookup(metrics, name); !ok {
				t.Errorf("%s: the operator exports no metric %s", what, name)
			}
		}
	}
}

func TestRulesUseExportedMetrics(t *testing.T) {
	metrics := exported(t)
	all := rules(t)
	recorded := map[string]bool{}
	for _, r := range all {
		if r.Record != "" {
			recorded[r.Record] = true
		}
	}
	for _, r := range all {
		checkExpr(t, metrics, recorded, r.Record+r.Alert, r.Expr)
	}
}

// TestRulesTestCoversEveryRule checks that rules_test.yaml has, for every
// alert, a case where it fires and one where it stays silent, and a case
// for every recording rule.
func TestRulesTestCoversEveryRule(t *testing.T) {
	var tests struct {
		RuleFiles []string `json:"rule_files"`
		Tests     []struct {
			AlertRuleTest []struct {
				Alertname string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
			PromQLExprTest []struct {
				Expr string `json:"expr"`
			} `json:"promql_expr_test"`
		} `json:"tests"`
	}
	readYAML(t, &tests, "test", "prometheus", "rules_test.yaml")
	if want := []string{"../../config/prometheus-rules/fluent-pvc-operator.rules.yaml"}; !slices.Equal(tests.RuleFiles, want) {
		t.Errorf("rules_test.yaml tests %v, want %v", tests.RuleFiles, want)
	}
	fires, silent, queried := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, g := range tests.Tests {
		for _, a := range g.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				silent[a.Alertname] = true
			}
		}
		for _, e := range g.PromQLExprTest {
			for _, name := range ident.FindAllString(e.Expr, -1) {
				queried[name] = true
			}
		}
	}
	for _, r := range rules(t) {
		switch {
		case r.Alert != "":
			if !fires[r.Alert] {
				t.Errorf("rules_test.yaml has no case where %s fires", r.Alert)
			}
			if !silent[r.Alert] {
				t.Errorf("rules_test.yaml has no case where %s stays silent", r.Alert)
			}
		case !queried[r.Record]:
			t.Errorf("rules_test.yaml has no promql_expr_test of %s", r.Record)
		}
	}
}

// TestConfigPrometheusRule checks that config/prometheus-rules'
// PrometheusRule, written by `make manifests`, holds the rule file.
func TestConfigPrometheusRule(t *testing.T) {
	var file, object map[string]any
	readYAML(t, &file, "config", "prometheus-rules", "fluent-pvc-operator.rules.yaml")
	readYAML(t, &object, "config", "prometheus-rules", "prometheus_rule.yaml")
	if object["apiVersion"] != "monitoring.coreos.com/v1" || object["kind"] != "PrometheusRule" {
		t.Errorf("prometheus_rule.yaml is a %v %v, want a monitoring.coreos.com/v1 PrometheusRule", object["apiVersion"], object["kind"])
	}
	if diff := cmp.Diff(file, object["spec"]); diff != "" {
		t.Errorf("prometheus_rule.yaml's spec is not the rule file (-file +spec); run make manifests:\n%s", diff)
	}
}

type panel struct {
	ID          int    `json:"id"`
	Type        string `json:"type"`
	Title       string `json:"title"`
	Description string `json:"description"`
	Datasource  struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr       string `json:"expr"`
		Datasource struct {
			UID string `json:"uid"`
		} `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

// TestDashboard checks docs/grafana-dashboard.json: its variables, that
// every panel says what it shows and queries the chosen data source, and
// that its queries use only what the operator exports and the rules
// record.
func TestDashboard(t *testing.T) {
	raw, err := os.ReadFile(fixtures.Path("docs", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID        string `json:"uid"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("docs/grafana-dashboard.json: %v", err)
	}
	if d.UID == "" {
		t.Error("the dashboard has no uid")
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		q := v.Query
		if m, ok := q.(map[string]any); ok {
			q = m["query"]
		}
		vars[v.Name] = fmt.Sprintf("%s %v", v.Type, q)
	}
	if want := map[string]string{
		"datasource": "datasource prometheus",
		"fluentpvc":  "query label_values(fluentpvc_pool_checkouts_total, fluentpvc)",
	}; !cmp.Equal(vars, want) {
		t.Errorf("the dashboard's variables differ (-want +got):\n%s", cmp.Diff(want, vars))
	}

	metrics := exported(t)
	recorded := map[string]bool{}
	for _, r := range rules(t) {
		if r.Record != "" {
			recorded[r.Record] = true
		}
	}
	ids := map[int]bool{}
	var walk func([]panel)
	walk = func(panels []panel) {
		for _, p := range panels {
			if ids[p.ID] {
				t.Errorf("panel id %d is used twice", p.ID)
			}
			ids[p.ID] = true
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if strings.TrimSpace(p.Description) == "" {
				t.Errorf("panel %q has no description", p.Title)
			}
			if p.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q queries data source %q, want ${datasource}", p.Title, p.Datasource.UID)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, q := range p.Targets {
				if q.Datasource.UID != "${datasource}" {
					t.Errorf("a query of panel %q uses data source %q, want ${datasource}", p.Title, q.Datasource.UID)
				}
				checkExpr(t, metrics, recorded, "panel "+p.Title, q.Expr)
			}
		}
	}
	walk(d.Panels)

	config, err := os.ReadFile(fixtures.Path("config", "grafana", "fluent-pvc-operator.json"))
	if err != nil {
		t.Fatal(err)
	}
	if string(config) != string(raw) {
		t.Error("config/grafana/fluent-pvc-operator.json is not docs/grafana-dashboard.json: run make manifests")
	}
}
