package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"sigs.k8s.io/yaml"
)

func TestTallyAudit(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	const (
		op    = "manager/v0.0.0 (linux/amd64) kubernetes/$Format"
		wh    = op + " webhook"
		bench = "bench/v0.0.0 (linux/amd64) kubernetes/$Format"
		kcm   = "kube-controller-manager/v1.36.3 (linux/amd64) kubernetes/abc/job-controller"
		ns    = "bench-cost-hit"
		group = "fluent-pvc-operator.tech.zozo.com"
	)
	// line is an audit event: the operator's request unless ua says whose,
	// received at second s and answered 10 ms later with code.
	type req struct {
		ua, verb, group, resource, sub, ns, name string
		s                                        float64
		code                                     int32
		stage                                    string
	}
	line := func(r req) string {
		if r.ua == "" {
			r.ua = op
		}
		if r.code == 0 {
			r.code = 200
		}
		if r.stage == "" {
			r.stage = "ResponseComplete"
		}
		switch r.ns {
		case "-":
			r.ns = ""
		case "":
			r.ns = ns
		}
		e := map[string]any{
			"kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata", "auditID": "x",
			"stage": r.stage, "verb": r.verb, "userAgent": r.ua,
			"user":                     map[string]any{"username": "kwok-admin", "groups": []string{"system:masters"}},
			"objectRef":                map[string]any{"resource": r.resource, "subresource": r.sub, "apiGroup": r.group, "namespace": r.ns, "name": r.name},
			"responseStatus":           map[string]any{"metadata": map[string]any{}, "code": r.code},
			"requestReceivedTimestamp": at(r.s), "stageTimestamp": at(r.s + 0.01),
		}
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	lines := func(rs ...req) string {
		var b strings.Builder
		for _, r := range rs {
			b.WriteString(line(r) + "\n")
		}
		return b.String()
	}
	query := auditQuery{From: at(10), To: at(20), Pods: 2, Namespace: ns, Admitted: []string{"cost-0", "cost-1"}}
	cases := map[string]struct {
		log     string
		q       auditQuery
		want    auditTally
		wantErr string
	}{
		"writes by verb, resource and subresource, per pod": {
			log: lines(
				req{verb: "patch", group: group, resource: "fluentpvcbindings", sub: "status", name: "b0", s: 11},
				req{verb: "patch", group: group, resource: "fluentpvcbindings", sub: "status", name: "b1", s: 12},
				req{verb: "create", group: group, resource: "fluentpvcbindings", s: 11},
				req{verb: "update", resource: "persistentvolumeclaims", name: "c0", s: 13},
				req{verb: "create", group: "batch", resource: "jobs", s: 14},
				req{verb: "patch", group: group, resource: "fluentpvcs", sub: "status", ns: "-", name: "cost", s: 15},
				req{verb: "create", group: "events.k8s.io", resource: "events", s: 15},
				req{verb: "create", resource: "events", s: 15},
				req{verb: "deletecollection", resource: "persistentvolumeclaims", s: 16},
			),
			q: query,
			want: auditTally{Writes: map[string]float64{
				"patch fluentpvcbindings/status": 1, "create fluentpvcbindings": 0.5, "update persistentvolumeclaims": 0.5,
				"create jobs": 0.5, "patch fluentpvcs/status": 0.5, "create events (events.k8s.io)": 0.5, "create events": 0.5,
				"deletecollection persistentvolumeclaims": 0.5,
			}},
		},
		"other components, other stages, watches and requests outside the window are left out": {
			log: lines(
				req{ua: kcm, verb: "create", resource: "pods", name: "drain-0", s: 11},
				req{ua: bench, verb: "delete", resource: "pods", name: "cost-0", s: 12},
				req{verb: "patch", resource: "pods", name: "cost-0", s: 9.99},
				req{verb: "patch", resource: "pods", name: "cost-0", s: 20.01},
				req{verb: "patch", resource: "pods", name: "cost-0", s: 13, stage: "ResponseStarted"},
				req{verb: "watch", resource: "pods", s: 13},
				req{verb: "delete", resource: "pods", name: "cost-0", s: 10},
			),
			q:    query,
			want: auditTally{Writes: map[string]float64{"delete pods": 0.5}},
		},
		"failed writes count, and also as failed": {
			log: lines(
				req{verb: "update", group: group, resource: "fluentpvcbindings", name: "b0", s: 11, code: 409},
				req{verb: "update", group: group, resource: "fluentpvcbindings", name: "b0", s: 11.5},
				req{verb: "delete", resource: "persistentvolumeclaims", name: "c0", s: 12, code: 404},
			),
			q: query,
			want: auditTally{
				Writes: map[string]float64{"update fluentpvcbindings": 1, "delete persistentvolumeclaims": 0.5},
				Failed: map[string]float64{"update fluentpvcbindings": 0.5, "delete persistentvolumeclaims": 0.5},
			},
		},
		"reads during an admitted pod's create call are the admission's": {
			log: lines(
				req{ua: bench, verb: "create", resource: "pods", name: "cost-0", s: 11}, // in flight 11 to 11.01
				req{ua: wh, verb: "get", group: group, resource: "fluentpvcs", ns: "-", name: "cost", s: 11.005},
				req{verb: "list", resource: "persistentvolumeclaims", s: 11.008},
				req{verb: "list", resource: "persistentvolumeclaims", s: 11.5},
				// A drain Job's pod is not an admission of the phase.
				req{ua: kcm, verb: "create", resource: "pods", name: "cost-0-drain", s: 12},
				req{verb: "get", resource: "persistentvolumeclaims", name: "c0", s: 12.005},
				// Nor is a pod of another namespace.
				req{ua: bench, verb: "create", resource: "pods", ns: "other", name: "cost-1", s: 13},
				req{verb: "get", resource: "nodes", ns: "-", name: "n0", s: 13.005},
			),
			q: query,
			want: auditTally{
				Reads:          map[string]float64{"get fluentpvcs": 0.5, "list persistentvolumeclaims": 1, "get persistentvolumeclaims": 0.5, "get nodes": 0.5},
				AdmissionReads: map[string]float64{"get fluentpvcs": 0.5, "list persistentvolumeclaims": 0.5},
				// Only the webhook's own user agent tells its reads for sure.
				WebhookReads: map[string]float64{"get fluentpvcs": 0.5},
			},
		},
		"requests about another namespace's objects are other pods' work, counted elsewhere only": {
			log: lines(
				req{verb: "create", resource: "persistentvolumeclaims", ns: "bench-burst", s: 11},
				req{verb: "update", resource: "persistentvolumeclaims", ns: "bench-burst", name: "c1", s: 11},
				req{verb: "get", resource: "persistentvolumeclaims", ns: "bench-burst", name: "c0", s: 11},
				req{verb: "patch", group: group, resource: "fluentpvcs", sub: "status", ns: "-", name: "burst", s: 11},
				req{verb: "update", resource: "persistentvolumeclaims", name: "c2", s: 11},
			),
			q: query,
			want: auditTally{
				// The FluentPVC is cluster-scoped: counted.
				Writes:          map[string]float64{"patch fluentpvcs/status": 0.5, "update persistentvolumeclaims": 0.5},
				ElsewhereWrites: map[string]float64{"create persistentvolumeclaims": 0.5, "update persistentvolumeclaims": 0.5},
				Elsewhere:       1.5,
			},
		},
		"a last line cut short is dropped": {
			log:  lines(req{verb: "create", group: "batch", resource: "jobs", s: 11}) + line(req{verb: "create", group: "batch", resource: "jobs", s: 12})[:40],
			q:    query,
			want: auditTally{Writes: map[string]float64{"create jobs": 0.5}},
		},
		"blank lines are skipped": {
			log:  "\n" + lines(req{verb: "create", group: "batch", resource: "jobs", s: 11}) + "\n",
			q:    query,
			want: auditTally{Writes: map[string]float64{"create jobs": 0.5}},
		},
		"a broken line before the last is an error": {
			log:     lines(req{verb: "create", group: "batch", resource: "jobs", s: 11}) + "{not json\n" + lines(req{verb: "create", group: "batch", resource: "jobs", s: 12}),
			q:       query,
			wantErr: "audit log line 2",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := tallyAudit(strings.NewReader(tc.log), tc.q)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("tallyAudit error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("tallyAudit (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAuditRows(t *testing.T) {
	cases := map[string]struct {
		tallies []map[string]float64
		want    []string
	}{
		"none": {},
		"by the sum, largest first": {
			tallies: []map[string]float64{{"create jobs": 1, "patch pods": 3}, {"create jobs": 2.5, "delete pods": 0.5}},
			want:    []string{"create jobs", "patch pods", "delete pods"},
		},
		"ties by name": {
			tallies: []map[string]float64{{"patch pods": 1, "create jobs": 1}, nil},
			want:    []string{"create jobs", "patch pods"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := auditRows(tc.tallies...); !slices.Equal(got, tc.want) {
				t.Errorf("auditRows = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestAuditPolicy evaluates auditPolicy as kube-apiserver does (the first
// matching rule decides; empty lists match everything): the operator's
// writes and uncached reads are logged, the heartbeats of other
// components are not.
func TestAuditPolicy(t *testing.T) {
	var p struct {
		APIVersion        string   `json:"apiVersion"`
		Kind              string   `json:"kind"`
		OmitStages        []string `json:"omitStages"`
		OmitManagedFields bool     `json:"omitManagedFields"`
		Rules             []struct {
			Level      string   `json:"level"`
			Verbs      []string `json:"verbs"`
			Namespaces []string `json:"namespaces"`
			Resources  []struct {
				Group     string   `json:"group"`
				Resources []string `json:"resources"`
			} `json:"resources"`
			NonResourceURLs []string `json:"nonResourceURLs"`
		} `json:"rules"`
	}
	if err := yaml.UnmarshalStrict([]byte(auditPolicy), &p); err != nil {
		t.Fatal(err)
	}
	if p.APIVersion != "audit.k8s.io/v1" || p.Kind != "Policy" || !slices.Contains(p.OmitStages, "RequestReceived") {
		t.Errorf("policy header = %s %s, omitStages %v", p.APIVersion, p.Kind, p.OmitStages)
	}
	// level is the level of a request; a resource of "" is a non-resource
	// request.
	level := func(verb, group, resource, ns string) string {
		for _, r := range p.Rules {
			if len(r.Verbs) > 0 && !slices.Contains(r.Verbs, verb) {
				continue
			}
			if len(r.Namespaces) > 0 || len(r.Resources) > 0 {
				if resource == "" || len(r.Namespaces) > 0 && !slices.Contains(r.Namespaces, ns) {
					continue
				}
				match := len(r.Resources) == 0
				for _, g := range r.Resources {
					if g.Group == group && (len(g.Resources) == 0 || slices.Contains(g.Resources, resource)) {
						match = true
					}
				}
				if !match {
					continue
				}
			} else if len(r.NonResourceURLs) > 0 && resource != "" {
				continue
			}
			return r.Level
		}
		return "None"
	}
	group := "fluent-pvc-operator.tech.zozo.com"
	cases := map[string]struct{ verb, group, resource, ns, want string }{
		"binding status patch":          {"patch", group, "fluentpvcbindings/status", "bench", "Metadata"},
		"binding create":                {"create", group, "fluentpvcbindings", "bench", "Metadata"},
		"FluentPVC status patch":        {"patch", group, "fluentpvcs/status", "", "Metadata"},
		"pod patch (finalizer)":         {"patch", "", "pods", "bench", "Metadata"},
		"pod create":                    {"create", "", "pods", "bench", "Metadata"},
		"claim update":                  {"update", "", "persistentvolumeclaims", "bench", "Metadata"},
		"claim delete":                  {"delete", "", "persistentvolumeclaims", "bench", "Metadata"},
		"claims deletecollection":       {"deletecollection", "", "persistentvolumeclaims", "bench", "Metadata"},
		"Job create":                    {"create", "batch", "jobs", "bench", "Metadata"},
		"event create":                  {"create", "", "events", "bench", "Metadata"},
		"events.k8s.io event create":    {"create", "events.k8s.io", "events", "default", "Metadata"},
		"uncached claim list":           {"list", "", "persistentvolumeclaims", "bench", "Metadata"},
		"uncached node get":             {"get", "", "nodes", "", "Metadata"},
		"watch":                         {"watch", "", "pods", "bench", "None"},
		"kwok's pod status":             {"patch", "", "pods/status", "bench", "None"},
		"kwok's node status":            {"patch", "", "nodes/status", "", "None"},
		"kwok's node lease":             {"update", "coordination.k8s.io", "leases", "kube-node-lease", "None"},
		"a leader lease in kube-system": {"update", "coordination.k8s.io", "leases", "kube-system", "None"},
		"the scheduler's binding":       {"create", "", "pods/binding", "bench", "None"},
		"the PV controller's status":    {"update", "", "persistentvolumeclaims/status", "bench", "None"},
		"the Job controller's status":   {"update", "batch", "jobs/status", "bench", "None"},
		"a health check":                {"get", "", "", "", "None"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := level(tc.verb, tc.group, tc.resource, tc.ns); got != tc.want {
				t.Errorf("%s %s/%s in %q: level %s, want %s", tc.verb, tc.group, tc.resource, tc.ns, got, tc.want)
			}
		})
	}
}
