package pool

import (
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

func TestEligibleNodes(t *testing.T) {
	node := func(name, zone string, mutate ...func(*corev1.Node)) corev1.Node {
		n := corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{ZoneLabelKey: zone, "disk": "ssd"}},
			Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
		}
		for _, m := range mutate {
			m(&n)
		}
		return n
	}
	taint := func(effect corev1.TaintEffect) func(*corev1.Node) {
		return func(n *corev1.Node) { n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "k", Effect: effect}) }
	}
	zoneAB := &storagev1.StorageClass{AllowedTopologies: []corev1.TopologySelectorTerm{
		{MatchLabelExpressions: []corev1.TopologySelectorLabelRequirement{{Key: ZoneLabelKey, Values: []string{"a"}}}},
		{MatchLabelExpressions: []corev1.TopologySelectorLabelRequirement{{Key: ZoneLabelKey, Values: []string{"b"}}, {Key: "disk", Values: []string{"ssd"}}}},
	}}
	csi := &storagev1.StorageClass{Provisioner: "csi.example.com"}
	csiNode := func(name string, drivers ...string) storagev1.CSINode {
		cn := storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: name}}
		for _, d := range drivers {
			cn.Spec.Drivers = append(cn.Spec.Drivers, storagev1.CSINodeDriver{Name: d, NodeID: name})
		}
		return cn
	}
	cases := map[string]struct {
		nodes    []corev1.Node
		class    *storagev1.StorageClass
		csiNodes []storagev1.CSINode
		want     []Node
	}{
		"ready nodes, sorted by name": {
			nodes: []corev1.Node{node("n2", "b"), node("n1", "a")},
			want:  []Node{{"n1", "a"}, {"n2", "b"}},
		},
		"not ready, unknown readiness, cordoned or deleting nodes are skipped": {
			nodes: []corev1.Node{
				node("ok", "a"),
				node("not-ready", "a", func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionFalse }),
				node("no-condition", "a", func(n *corev1.Node) { n.Status.Conditions = nil }),
				node("cordoned", "a", func(n *corev1.Node) { n.Spec.Unschedulable = true }),
				node("deleting", "a", func(n *corev1.Node) { n.DeletionTimestamp = &metav1.Time{Time: fixtures.Epoch} }),
			},
			want: []Node{{"ok", "a"}},
		},
		"NoSchedule and NoExecute taints exclude a node, PreferNoSchedule does not": {
			nodes: []corev1.Node{node("soft", "a", taint(corev1.TaintEffectPreferNoSchedule)), node("ns", "a", taint(corev1.TaintEffectNoSchedule)), node("ne", "a", taint(corev1.TaintEffectNoExecute))},
			want:  []Node{{"soft", "a"}},
		},
		"the class's allowedTopologies: any term, every requirement of it": {
			nodes: []corev1.Node{
				node("a1", "a"), node("b1", "b"), node("c1", "c"),
				node("b-hdd", "b", func(n *corev1.Node) { n.Labels["disk"] = "hdd" }),
			},
			class: zoneAB,
			want:  []Node{{"a1", "a"}, {"b1", "b"}},
		},
		"a CSI driver some nodes registered: only those nodes": {
			nodes:    []corev1.Node{node("with", "a"), node("other-driver", "a"), node("no-csinode", "a")},
			class:    csi,
			csiNodes: []storagev1.CSINode{csiNode("with", "csi.example.com", "x"), csiNode("other-driver", "x")},
			want:     []Node{{"with", "a"}},
		},
		"a provisioner no node registered (not CSI): any node": {
			nodes:    []corev1.Node{node("n1", "a"), node("n2", "b")},
			class:    csi,
			csiNodes: []storagev1.CSINode{csiNode("n1", "x")},
			want:     []Node{{"n1", "a"}, {"n2", "b"}},
		},
		"no nodes": {},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, EligibleNodes(tc.nodes, tc.class, tc.csiNodes)); diff != "" {
				t.Errorf("EligibleNodes (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSpreadNodes(t *testing.T) {
	nodes := []Node{{"a1", "a"}, {"a2", "a"}, {"b1", "b"}, {"c1", "c"}}
	cases := map[string]struct {
		nodes     []Node
		perZone   map[string]int
		n         int
		preferred []string
		wantZone  map[string]int // new claims per zone
	}{
		"preferred nodes first, then the emptiest zones": {
			nodes: nodes, n: 4, preferred: []string{"a2", "a1"}, wantZone: map[string]int{"a": 2, "b": 1, "c": 1},
		},
		"preferred nodes that are not eligible are skipped": {
			nodes: nodes, n: 3, preferred: []string{"gone", "c1"}, wantZone: map[string]int{"a": 1, "b": 1, "c": 1},
		},
		"no more than n, even with more preferred": {
			nodes: nodes, n: 1, preferred: []string{"b1", "c1"}, wantZone: map[string]int{"b": 1},
		},
		"an empty pool of 6 over 3 zones: 2 each": {
			nodes: nodes, n: 6, wantZone: map[string]int{"a": 2, "b": 2, "c": 2},
		},
		"refill goes to the emptiest zones first": {
			nodes: nodes, perZone: map[string]int{"a": 2, "b": 0, "c": 1}, n: 3, wantZone: map[string]int{"b": 2, "c": 1},
		},
		"zones without an eligible node get nothing": {
			nodes: []Node{{"a1", "a"}}, perZone: map[string]int{"b": 0}, n: 2, wantZone: map[string]int{"a": 2},
		},
		"nodes without a zone are one more zone": {
			nodes: []Node{{"x", ""}, {"a1", "a"}}, n: 2, wantZone: map[string]int{"": 1, "a": 1},
		},
		"no nodes: nil": {n: 2},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			zoneOf := map[string]string{}
			for _, n := range tc.nodes {
				zoneOf[n.Name] = n.Zone
			}
			got := SpreadNodes(tc.nodes, tc.perZone, tc.n, tc.preferred, rand.New(rand.NewPCG(1, 2)).IntN)
			var perZone map[string]int
			if tc.wantZone != nil {
				perZone = map[string]int{}
				if len(got) != tc.n {
					t.Fatalf("SpreadNodes gave %d nodes, want %d", len(got), tc.n)
				}
			}
			for _, name := range got {
				perZone[zoneOf[name]]++
			}
			if diff := cmp.Diff(tc.wantZone, perZone); diff != "" {
				t.Errorf("new claims per zone (-want +got):\n%s", diff)
			}
		})
	}
}
