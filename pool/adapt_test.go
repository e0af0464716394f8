package pool

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// warmPVC is a warm PVC named name with template hash "h", changed by
// mutate.
func warmPVC(name string, mutate ...func(*corev1.PersistentVolumeClaim)) corev1.PersistentVolumeClaim {
	c := corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{
		Name: name, Namespace: "ns", CreationTimestamp: metav1.NewTime(epoch),
		Labels:      map[string]string{v1alpha1.ClaimRoleLabelKey: v1alpha1.ClaimRoleWarm, v1alpha1.TemplateHashLabelKey: "h"},
		Annotations: map[string]string{},
	}}
	for _, m := range mutate {
		if m != nil {
			m(&c)
		}
	}
	return c
}

// onVolume binds a warm PVC to volume pv.
func onVolume(pv string) func(*corev1.PersistentVolumeClaim) {
	return func(c *corev1.PersistentVolumeClaim) { c.Spec.VolumeName = pv }
}

// strandedOn is nodes with volume pv stranded on a gone node.
func strandedOn(nodes Nodes, pv string) Nodes {
	nodes.Stranded = map[string]string{pv: "gone"}
	return nodes
}

func bound(affinity string) func(*corev1.PersistentVolumeClaim) {
	return func(c *corev1.PersistentVolumeClaim) {
		c.Status.Phase = corev1.ClaimBound
		c.Annotations[v1alpha1.NodeAffinityAnnotationKey] = affinity
		c.Annotations[v1alpha1.ZonesAnnotationKey] = "z1"
	}
}

func zoneAffinity(zone string) string {
	return `{"nodeSelectorTerms":[{"matchExpressions":[{"key":"topology.kubernetes.io/zone","operator":"In","values":["` + zone + `"]}]}]}`
}

func TestAdapt(t *testing.T) {
	node := func(name, zone string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{ZoneLabelKey: zone}}}
	}
	nodes := Nodes{
		SelectNodes: true,
		Zones:       map[string]string{"n1": "z1", "n2": "z2"},
		ByName:      map[string]*corev1.Node{"n1": node("n1", "z1"), "n2": node("n2", "z2")},
	}
	named := func(n string) func(*corev1.PersistentVolumeClaim) {
		return func(c *corev1.PersistentVolumeClaim) { c.Annotations[v1alpha1.SelectedNodeAnnotationKey] = n }
	}
	cases := map[string]struct {
		warm            []corev1.PersistentVolumeClaim
		unseen          []Expected
		nodes           Nodes
		wantClaims      []Claim
		wantPlaces      []string
		wantUnreachable []string
		wantStranded    []string
	}{
		"pending, named for a node: its node's zone": {
			warm:       []corev1.PersistentVolumeClaim{warmPVC("a", named("n2"))},
			nodes:      nodes,
			wantClaims: []Claim{{Name: "a", Hash: "h", NodeSelected: true, Zone: "z2", Created: epoch}},
			wantPlaces: []string{"a"},
		},
		"pending, named for a node that is gone: another is named": {
			warm:       []corev1.PersistentVolumeClaim{warmPVC("a", named("gone"))},
			nodes:      nodes,
			wantClaims: []Claim{{Name: "a", Hash: "h", Created: epoch}},
			wantPlaces: []string{"a"},
		},
		"pending, named for a node that is gone, outside select-node mode: kept": {
			warm:       []corev1.PersistentVolumeClaim{warmPVC("a", named("gone"))},
			nodes:      Nodes{Zones: nodes.Zones, ByName: nodes.ByName},
			wantClaims: []Claim{{Name: "a", Hash: "h", NodeSelected: true, Created: epoch}},
			wantPlaces: []string{"a"},
		},
		"bound and recorded: its recorded zones": {
			warm:       []corev1.PersistentVolumeClaim{warmPVC("a", bound(zoneAffinity("z1")))},
			nodes:      nodes,
			wantClaims: []Claim{{Name: "a", Bound: true, Hash: "h", Recorded: true, Zone: "z1", Created: epoch}},
			wantPlaces: []string{"a"},
		},
		"bound, usable on no node: replaced, not placed": {
			warm:            []corev1.PersistentVolumeClaim{warmPVC("a", bound(zoneAffinity("z9")))},
			nodes:           nodes,
			wantClaims:      []Claim{{Name: "a", Bound: true, Hash: "h", Recorded: true, Zone: "z1", Created: epoch, Replace: true}},
			wantUnreachable: []string{"a"},
		},
		"bound, its volume stranded on a gone node: replaced, not placed": {
			warm:         []corev1.PersistentVolumeClaim{warmPVC("a", bound(zoneAffinity("z1")), onVolume("pv-a"))},
			nodes:        strandedOn(nodes, "pv-a"),
			wantClaims:   []Claim{{Name: "a", Bound: true, Hash: "h", Recorded: true, Zone: "z1", Created: epoch, Replace: true}},
			wantStranded: []string{"a"},
		},
		"bound, another volume stranded: kept": {
			warm:       []corev1.PersistentVolumeClaim{warmPVC("a", bound(zoneAffinity("z1")), onVolume("pv-a"))},
			nodes:      strandedOn(nodes, "pv-b"),
			wantClaims: []Claim{{Name: "a", Bound: true, Hash: "h", Recorded: true, Zone: "z1", Created: epoch}},
			wantPlaces: []string{"a"},
		},
		"bound, no node known: never judged unreachable": {
			warm:       []corev1.PersistentVolumeClaim{warmPVC("a", bound(zoneAffinity("z9")))},
			wantClaims: []Claim{{Name: "a", Bound: true, Hash: "h", Recorded: true, Zone: "z1", Created: epoch}},
			wantPlaces: []string{"a"},
		},
		"stale template or being deleted: planned, not placed": {
			warm: []corev1.PersistentVolumeClaim{
				warmPVC("old", func(c *corev1.PersistentVolumeClaim) { c.Labels[v1alpha1.TemplateHashLabelKey] = "old" }),
				warmPVC("deleting", func(c *corev1.PersistentVolumeClaim) { c.DeletionTimestamp = &metav1.Time{Time: epoch} }),
			},
			nodes: nodes,
			wantClaims: []Claim{
				{Name: "old", Hash: "old", Created: epoch},
				{Name: "deleting", Hash: "h", Deleting: true, Created: epoch},
			},
		},
		"created, not cached yet: counted once": {
			warm: []corev1.PersistentVolumeClaim{warmPVC("a", named("n1"))},
			unseen: []Expected{
				{Key: types.NamespacedName{Namespace: "ns", Name: "a"}, Zone: "z1", Node: "n1", At: epoch},
				{Key: types.NamespacedName{Namespace: "ns", Name: "b"}, Zone: "z2", Node: "n2", At: epoch},
			},
			nodes: nodes,
			wantClaims: []Claim{
				{Name: "a", Hash: "h", NodeSelected: true, Zone: "z1", Created: epoch},
				{Name: "b", Hash: "h", NodeSelected: true, Zone: "z2", Created: epoch},
			},
			wantPlaces: []string{"a", "b"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Adapt(tc.warm, tc.unseen, "h", tc.nodes, NewAffinities())
			if diff := cmp.Diff(tc.wantClaims, got.Claims); diff != "" {
				t.Errorf("claims (-want +got):\n%s", diff)
			}
			var places []string
			for _, p := range got.Places {
				places = append(places, p.Name)
			}
			if diff := cmp.Diff(tc.wantPlaces, places); diff != "" {
				t.Errorf("places (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantUnreachable, got.Unreachable, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("unreachable (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantStranded, got.Stranded, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("stranded (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPlace(t *testing.T) {
	nodes := map[string]*corev1.Node{
		"n1": {ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{ZoneLabelKey: "z1"}}},
		"n2": {ObjectMeta: metav1.ObjectMeta{Name: "n2", Labels: map[string]string{ZoneLabelKey: "z2"}}},
	}
	cases := map[string]struct {
		claim       Claim
		node        string
		affinity    string
		recorded    bool
		wantReaches []string
	}{
		"bound and recorded: the nodes its affinity accepts": {claim: Claim{Bound: true}, affinity: zoneAffinity("z2"), recorded: true, wantReaches: []string{"n2"}},
		"bound, usable anywhere":                             {claim: Claim{Bound: true}, affinity: "", recorded: true, wantReaches: []string{"n1", "n2"}},
		"bound, not recorded yet: its named node":            {claim: Claim{Bound: true}, node: "n1", wantReaches: []string{"n1"}},
		"pending, named for a node":                          {node: "n2", affinity: zoneAffinity("z1"), recorded: true, wantReaches: []string{"n2"}},
		"pending, no node named: none":                       {},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			w := Place(tc.claim, tc.node, tc.affinity, tc.recorded, nodes, nil)
			var got []string
			for _, n := range []string{"n1", "n2", "unknown"} {
				if w.Reaches(n) {
					got = append(got, n)
				}
			}
			if diff := cmp.Diff(tc.wantReaches, got); diff != "" {
				t.Errorf("reaches (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDemand(t *testing.T) {
	claimOn := func(node, checkout string) corev1.PersistentVolumeClaim {
		return corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
			v1alpha1.SelectedNodeAnnotationKey: node, v1alpha1.CheckoutAnnotationKey: checkout,
		}}}
	}
	cases := map[string]struct {
		claimed []corev1.PersistentVolumeClaim
		want    []DemandNode
	}{
		"none": {},
		"claims and misses per node, in the order seen": {
			claimed: []corev1.PersistentVolumeClaim{
				claimOn("n2", v1alpha1.CheckoutHit), claimOn("n1", v1alpha1.CheckoutMiss), claimOn("n2", v1alpha1.CheckoutMiss), claimOn("", v1alpha1.CheckoutMiss),
			},
			want: []DemandNode{{Name: "n2", Claims: 2, Misses: 1}, {Name: "n1", Claims: 1, Misses: 1}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Demand(tc.claimed)); diff != "" {
				t.Errorf("Demand (-want +got):\n%s", diff)
			}
		})
	}
}
