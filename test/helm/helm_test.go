// Package helm checks the Helm chart (charts/fluent-pvc-operator): its
// rendering with the default and the cert-manager values against golden
// files, and that it renders the objects config/default renders, but for
// the differences declared in TestChartMatchesKustomize. `make verify` runs
// it with HELM set; `go test ./test/helm -update` rewrites the golden files.
package helm

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// kubeVersion is the cluster version the chart is rendered for.
const kubeVersion = "1.36.3"

func helmBin(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("HELM"); h != "" {
		return h
	}
	h := fixtures.Path("bin", "helm")
	if _, err := os.Stat(h); err != nil {
		t.Skipf("%s is missing: `make helm` builds it (make verify runs this test with it)", h)
	}
	return h
}

func run(t *testing.T, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = fixtures.RepoRoot()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return out
}

func helmTemplate(t *testing.T, args ...string) []byte {
	return run(t, helmBin(t), append([]string{"template", "fluent-pvc-operator", "charts/fluent-pvc-operator",
		"--namespace", "fluent-pvc-operator-system", "--kube-version", kubeVersion}, args...)...)
}

func TestGolden(t *testing.T) {
	cases := map[string]struct {
		args []string
	}{
		"default":      {},
		"cert-manager": {args: []string{"--set", "certManagement.mode=cert-manager"}},
		"everything": {args: []string{"--set", "metrics.service.enabled=true,metrics.serviceMonitor.enabled=true,leaderElection.enabled=false,replicaCount=3",
			"--set", "webhook.excludedNamespaces={monitoring},operator.poolBindMode=binder-job,logLevel=debug,priorityClassName=system-cluster-critical",
			"--set", "metrics.prometheusRule.enabled=true,metrics.prometheusRule.labels.release=monitoring",
			"--set", "metrics.grafanaDashboard.enabled=true,metrics.grafanaDashboard.namespace=monitoring,metrics.grafanaDashboard.annotations.grafana_folder=Operators"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := helmTemplate(t, tc.args...)
			path := filepath.Join("testdata", name+".golden.yaml")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./test/helm -update)", err)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("helm template %s differs from %s (-want +got; go test ./test/helm -update accepts it):\n%s", strings.Join(tc.args, " "), path, diff)
			}
		})
	}
}

// objects parses a multi-document manifest into objects keyed by
// kind/namespace/name.
func objects(t *testing.T, raw []byte) map[string]*unstructured.Unstructured {
	t.Helper()
	out := map[string]*unstructured.Unstructured{}
	for _, doc := range strings.Split(string(raw), "\n---") {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatalf("parsing %q: %v", doc, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		out[fmt.Sprintf("%s/%s/%s", u.GetKind(), u.GetNamespace(), u.GetName())] = u
	}
	return out
}

// flagDefaults are the operator's flag defaults the chart passes
// explicitly (it names its objects, and config/default relies on them).
var flagDefaults = []string{
	"--webhook-bind-address=:9443",
	"--name-prefix=fluent-pvc-operator",
	"--orphan-grace-period=2m",
	"--drain-backoff-base=10s",
	"--pool-bind-mode=select-node",
	"--binder-image=registry.k8s.io/pause:3.10",
	"--stage-per-node=8",
	"--holder-priority-class=fluent-pvc-operator-holder",
	"--zap-log-level=info",
}

// normalize removes what differs between the chart and config/default on
// purpose: the tools' own labels and annotations, the release's instance
// label in selectors, the image, and the flags the chart passes at their
// defaults.
func normalize(u *unstructured.Unstructured) {
	strip := func(m map[string]any, prefixes ...string) {
		for k := range m {
			for _, p := range prefixes {
				if strings.HasPrefix(k, p) {
					delete(m, k)
				}
			}
		}
	}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, val := range x {
				if m, ok := val.(map[string]any); ok && (k == "labels" || k == "matchLabels" || k == "selector" || k == "annotations") {
					strip(m, "app.kubernetes.io/", "helm.sh/")
					if len(m) == 0 {
						delete(x, k)
						continue
					}
				}
				walk(val)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(u.Object)
	if u.GetKind() == "Deployment" {
		containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
		for _, c := range containers {
			m := c.(map[string]any)
			delete(m, "image")
			delete(m, "imagePullPolicy")
			var args []any
			for _, a := range m["args"].([]any) {
				if !slices.Contains(flagDefaults, a.(string)) {
					args = append(args, a)
				}
			}
			m["args"] = args
		}
		_ = unstructured.SetNestedSlice(u.Object, containers, "spec", "template", "spec", "containers")
	}
}

// TestChartMatchesKustomize is the drift check: the chart with its default
// values renders config/default's objects. Declared differences:
//   - the Namespace: Helm installs into one (--create-namespace), and its
//     Pod Security label is the user's to set;
//   - the CRDs: Helm installs them from crds/ (copied from config/crd by
//     make manifests, which make verify checks), not from templates;
//   - labels and annotations of Helm and kustomize, the release's instance
//     label in selectors, the image, and the flags the chart passes at the
//     operator's defaults (normalize).
func TestChartMatchesKustomize(t *testing.T) {
	chart := objects(t, helmTemplate(t))
	kustomized := objects(t, run(t, "go", "run", "sigs.k8s.io/kustomize/kustomize/v5@v5.8.1", "build", "config/default"))
	for key, u := range kustomized {
		if u.GetKind() == "Namespace" || u.GetKind() == "CustomResourceDefinition" {
			delete(kustomized, key)
		}
	}
	var keys []string
	for key := range chart {
		keys = append(keys, key)
	}
	for key := range kustomized {
		if chart[key] == nil {
			keys = append(keys, key)
		}
	}
	slices.Sort(keys)
	for _, key := range keys {
		c, k := chart[key], kustomized[key]
		switch {
		case c == nil:
			t.Errorf("%s: in config/default, not in the chart", key)
		case k == nil:
			t.Errorf("%s: in the chart, not in config/default", key)
		default:
			normalize(c)
			normalize(k)
			if !reflect.DeepEqual(c.Object, k.Object) {
				t.Errorf("%s differs (-config/default +chart):\n%s", key, cmp.Diff(k.Object, c.Object))
			}
		}
	}
}

func TestCRDsAsTemplates(t *testing.T) {
	crds := 0
	for _, u := range objects(t, helmTemplate(t, "--set", "crds.upgrade=true")) {
		if u.GetKind() == "CustomResourceDefinition" {
			crds++
		}
	}
	if crds != 2 {
		t.Errorf("crds.upgrade=true renders %d CRDs, want 2", crds)
	}
	for _, u := range objects(t, helmTemplate(t)) {
		if u.GetKind() == "CustomResourceDefinition" {
			t.Errorf("the CRD %s is rendered as a template by default: Helm would then own and upgrade it", u.GetName())
		}
	}
}

func TestChartCRDsAreConfigs(t *testing.T) {
	for _, name := range []string{"fluent-pvc-operator.tech.zozo.com_fluentpvcs.yaml", "fluent-pvc-operator.tech.zozo.com_fluentpvcbindings.yaml"} {
		chart, err := os.ReadFile(fixtures.Path("charts", "fluent-pvc-operator", "crds", name))
		if err != nil {
			t.Fatal(err)
		}
		config, err := os.ReadFile(fixtures.Path("config", "crd", "bases", name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(chart, config) {
			t.Errorf("charts/fluent-pvc-operator/crds/%s is not config/crd/bases/%s: run make manifests", name, name)
		}
	}
}

// The chart's copies of the Prometheus rules and of the Grafana dashboard
// (make manifests) are the files they are copied from.
func TestChartMonitoringFilesAreCopies(t *testing.T) {
	for chartFile, source := range map[string][]string{
		"prometheus-rules.yaml":  {"config", "prometheus-rules", "fluent-pvc-operator.rules.yaml"},
		"grafana-dashboard.json": {"docs", "grafana-dashboard.json"},
	} {
		chart, err := os.ReadFile(fixtures.Path("charts", "fluent-pvc-operator", "files", chartFile))
		if err != nil {
			t.Fatal(err)
		}
		src, err := os.ReadFile(fixtures.Path(source...))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(chart, src) {
			t.Errorf("charts/fluent-pvc-operator/files/%s is not %s: run make manifests", chartFile, filepath.Join(source...))
		}
	}
}

// leaderGroup is the rule group the chart leaves out without leader
// election.
const leaderGroup = "fluent-pvc-operator.leader"

// TestPrometheusRule checks that the chart's PrometheusRule holds the rule
// groups of config/prometheus-rules/fluent-pvc-operator.rules.yaml (the
// file promtool tests), all of them with leader election and all but the
// leader's without.
func TestPrometheusRule(t *testing.T) {
	raw, err := os.ReadFile(fixtures.Path("config", "prometheus-rules", "fluent-pvc-operator.rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []any `json:"groups"`
	}
	if err := yaml.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	var withoutLeader []any
	for _, g := range file.Groups {
		if g.(map[string]any)["name"] != leaderGroup {
			withoutLeader = append(withoutLeader, g)
		}
	}
	if len(withoutLeader) != len(file.Groups)-1 {
		t.Fatalf("the rule file has no group %q, which the chart leaves out without leader election", leaderGroup)
	}
	for name, tc := range map[string]struct {
		args []string
		want []any
	}{
		"with leader election":    {args: []string{"--set", "metrics.prometheusRule.enabled=true"}, want: file.Groups},
		"without leader election": {args: []string{"--set", "metrics.prometheusRule.enabled=true,leaderElection.enabled=false"}, want: withoutLeader},
	} {
		t.Run(name, func(t *testing.T) {
			u := objects(t, helmTemplate(t, tc.args...))["PrometheusRule/fluent-pvc-operator-system/fluent-pvc-operator-rules"]
			if u == nil {
				t.Fatal("no PrometheusRule fluent-pvc-operator-rules")
			}
			got, _, _ := unstructured.NestedSlice(u.Object, "spec", "groups")
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("the PrometheusRule's groups differ from the rule file's (-file +chart):\n%s", diff)
			}
		})
	}
	for _, u := range objects(t, helmTemplate(t)) {
		if u.GetKind() == "PrometheusRule" {
			t.Errorf("the PrometheusRule %s is rendered by default", u.GetName())
		}
	}
}

// TestGrafanaDashboard checks that the chart's dashboard ConfigMap holds
// docs/grafana-dashboard.json as it is, with the label Grafana's sidecar
// looks for.
func TestGrafanaDashboard(t *testing.T) {
	want, err := os.ReadFile(fixtures.Path("docs", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	u := objects(t, helmTemplate(t, "--set", "metrics.grafanaDashboard.enabled=true"))["ConfigMap/fluent-pvc-operator-system/fluent-pvc-operator-grafana-dashboard"]
	if u == nil {
		t.Fatal("no ConfigMap fluent-pvc-operator-grafana-dashboard")
	}
	got, _, _ := unstructured.NestedString(u.Object, "data", "fluent-pvc-operator.json")
	// objects splits documents at "\n---", which takes the final line
	// break off a block scalar that ends a document.
	if strings.TrimSuffix(got, "\n") != strings.TrimSuffix(string(want), "\n") {
		t.Errorf("the dashboard ConfigMap's fluent-pvc-operator.json is not docs/grafana-dashboard.json:\n%s", cmp.Diff(string(want), got))
	}
	if l := u.GetLabels()["grafana_dashboard"]; l != "1" {
		t.Errorf("the dashboard ConfigMap's label grafana_dashboard is %q, want \"1\"", l)
	}
	for _, u := range objects(t, helmTemplate(t)) {
		if u.GetKind() == "ConfigMap" {
			t.Errorf("the ConfigMap %s is rendered by default", u.GetName())
		}
	}
}
