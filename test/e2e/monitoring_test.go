package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/yaml"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/test/cluster"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

var _ = Describe("Monitoring with a real Prometheus", func() {
	It("scrapes the operator through a staged hit, a refused copy, a miss, their drains and failing drains: every panel of the dashboard has data, and the drain alert fires", func() {
		dir := GinkgoT().TempDir()
		prom, err := kc.StartPrometheus(ctx, cluster.PrometheusOptions{
			Dir:       dir,
			Targets:   []string{fmt.Sprintf("127.0.0.1:%d", op.MetricsPort)},
			RuleFiles: []string{rulesAtOnce(dir)},
		})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(prom.Stop)
		Eventually(prom.TargetsUp).WithContext(ctx).Should(Succeed())

		By("a staged hit, its drain, and a miss")
		ns := fixtures.NewNamespace(ctx, k8s, "monitor", namespaceCleanup)
		fpvc := fixtures.CreateFluentPVC(ctx, k8s, e2eFluentPVC("monitor-"+ns).PoolSize(1).StorageClass(cluster.StorageClassCSI).Mutate(func(f *v1alpha1.FluentPVC) {
			f.Spec.Pool.Namespaces = []string{ns}
		}).Obj(), fluentPVCCleanup)
		stagedPool(ns, fpvc.Name, 1)
		for _, name := range []string{"hit", "miss"} {
			pod := fixtures.MakePod(name, ns).FluentPVC(fpvc.Name).Obj()
			Expect(k8s.Create(ctx, pod)).To(Succeed())
			running(ns, name)
			if name == "hit" {
				// An unlabelled copy that mounts the claim, as kubectl debug
				// --copy-to makes one: refused by the mount webhook.
				copied := fixtures.MakePod("copy", ns).Claim(fixtures.ClaimOf(pod)).Obj()
				Expect(k8s.Create(ctx, copied)).NotTo(Succeed())
			}
			Expect(k8s.Delete(ctx, pod)).To(Succeed())
			fixtures.Drained(ctx, k8s, ns, fixtures.ClaimOf(pod), longTimeout)
		}

		By("drain Jobs that fail")
		failing := fixtures.CreateFluentPVC(ctx, k8s, e2eFluentPVC("monitor-failing-"+ns).Mutate(func(f *v1alpha1.FluentPVC) {
			f.Spec.PVCFinalizerJobSpecTemplate.Template.Labels = map[string]string{cluster.JobFailLabelKey: "true"}
		}).Obj(), fluentPVCCleanup)
		pod := fixtures.MakePod("app", ns).FluentPVC(failing.Name).Obj()
		Expect(k8s.Create(ctx, pod)).To(Succeed())
		running(ns, "app")
		Expect(k8s.Delete(ctx, pod)).To(Succeed())

		By("the drain alert fires in Prometheus")
		Eventually(func(g Gomega) {
			firing, err := prom.FiringAlerts(ctx)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(firing).To(ContainElement("FluentPVCDrainsFailing"))
		}).WithTimeout(longTimeout).Should(Succeed())

		By("every panel's queries return data for the two FluentPVCs")
		for _, q := range dashboardQueries(fpvc.Name, failing.Name) {
			Eventually(func(g Gomega) {
				n, err := prom.Query(ctx, q.expr)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(n).To(BeNumerically(">", 0), "panel %q: %s", q.panel, q.expr)
			}).Should(Succeed())
		}

		updateFluentPVC(failing, func(f *v1alpha1.FluentPVC) { f.Spec.PVCFinalizerJobSpecTemplate.Template.Labels = nil })
		fixtures.Drained(ctx, k8s, ns, fixtures.ClaimOf(pod), longTimeout)
	})
})

// rulesAtOnce writes into dir the operator's Prometheus rules with every
// alert's `for` removed, so that an alert fires as soon as its expression
// holds (promtool's tests check the `for`s), and returns the file.
func rulesAtOnce(dir string) string {
	GinkgoHelper()
	raw, err := os.ReadFile(fixtures.Path("config", "prometheus-rules", "fluent-pvc-operator.rules.yaml"))
	Expect(err).NotTo(HaveOccurred())
	var file struct {
		Groups []struct {
			Name  string           `json:"name"`
			Rules []map[string]any `json:"rules"`
		} `json:"groups"`
	}
	Expect(yaml.Unmarshal(raw, &file)).To(Succeed())
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			delete(r, "for")
		}
	}
	out, err := yaml.Marshal(file)
	Expect(err).NotTo(HaveOccurred())
	path := filepath.Join(dir, "rules.yaml")
	Expect(os.WriteFile(path, out, 0o644)).To(Succeed())
	return path
}

// panelQuery is one query of a dashboard panel, its variables filled in.
type panelQuery struct{ panel, expr string }

// dashboardVariable matches a Grafana variable in a query: $name or
// ${name}, with an optional format.
var dashboardVariable = regexp.MustCompile(`\$\{([a-zA-Z_]+)(?::[a-z]+)?\}|\$([a-zA-Z_]+)`)

// dashboardQueries are the queries of every panel of docs/grafana-dashboard.json,
// rows' panels included, with $fluentpvc set to the FluentPVCs named (as
// the dashboard's multi-value variable sets it) and Grafana's interval
// variables to a minute.
func dashboardQueries(fluentPVCs ...string) []panelQuery {
	GinkgoHelper()
	raw, err := os.ReadFile(fixtures.Path("docs", "grafana-dashboard.json"))
	Expect(err).NotTo(HaveOccurred())
	type panel struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var dashboard struct {
		Panels []json.RawMessage `json:"panels"`
	}
	Expect(json.Unmarshal(raw, &dashboard)).To(Succeed())
	var out []panelQuery
	var walk func([]json.RawMessage)
	walk = func(panels []json.RawMessage) {
		for _, rawPanel := range panels {
			var p panel
			Expect(json.Unmarshal(rawPanel, &p)).To(Succeed())
			for _, t := range p.Targets {
				if strings.TrimSpace(t.Expr) == "" {
					continue
				}
				expr := dashboardVariable.ReplaceAllStringFunc(t.Expr, func(v string) string {
					m := dashboardVariable.FindStringSubmatch(v)
					switch name := m[1] + m[2]; name {
					case "fluentpvc":
						quoted := make([]string, len(fluentPVCs))
						for i, name := range fluentPVCs {
							quoted[i] = regexp.QuoteMeta(name)
						}
						return strings.Join(quoted, "|")
					case "__rate_interval", "__interval", "__range":
						return "1m"
					default:
						Fail(fmt.Sprintf("panel %q uses variable %s, which the test does not know", p.Title, v))
						return v
					}
				})
				out = append(out, panelQuery{panel: p.Title, expr: expr})
			}
			walk(p.Panels)
		}
	}
	walk(dashboard.Panels)
	Expect(out).NotTo(BeEmpty())
	return out
}
