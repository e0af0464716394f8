package pool

import (
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

// Topology keys of the CSI drivers whose volumes the checkout must place.
const (
	gkeZoneKey  = "topology.gke.io/zone"
	ebsZoneKey  = "topology.ebs.csi.aws.com/zone"
	nodePoolKey = "cloud.google.com/gke-nodepool"
)

// placementNodes are six nodes in three zones, each zone under every
// driver's key: zone b is the "logging" node pool; c-0 is tainted for a
// dedicated team and c-1 is cordoned, so that only pods that tolerate
// those can use zone c.
func placementNodes() []*corev1.Node {
	node := func(name, zone, nodePool string) *fixtures.NodeWrapper {
		return fixtures.MakeNode(name).Zone(zone).Label(gkeZoneKey, zone).Label(ebsZoneKey, zone).Label(nodePoolKey, nodePool)
	}
	return []*corev1.Node{
		node("a-0", "a", "default").Obj(),
		node("a-1", "a", "default").Obj(),
		node("b-0", "b", "logging").Obj(),
		node("b-1", "b", "logging").Obj(),
		node("c-0", "c", "default").Taint("dedicated", "team", corev1.TaintEffectNoSchedule).Obj(),
		node("c-1", "c", "default").Unschedulable().Obj(),
	}
}

func TestPlacementUsable(t *testing.T) {
	pod := func() *fixtures.PodWrapper { return fixtures.MakePod("p", "ns") }
	tolerateTeam := corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "team", Effect: corev1.TaintEffectNoSchedule}
	tolerateCordon := corev1.Toleration{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	pv := func(terms ...corev1.NodeSelectorTerm) string { return VolumeAffinity(fixtures.MakePV("pv", terms...)) }
	in := fixtures.InTerm
	// Volumes, named by what keys them and where.
	volumes := map[string]string{
		"anywhere":     pv(),
		"zone a":       pv(in(ZoneLabelKey, "a")),
		"zone b":       pv(in(ZoneLabelKey, "b")),
		"zone c":       pv(in(ZoneLabelKey, "c")),
		"gke zone a":   pv(in(gkeZoneKey, "a")),
		"gke zone b":   pv(in(gkeZoneKey, "b")),
		"ebs zone a":   pv(in(ebsZoneKey, "a")),
		"ebs zone b":   pv(in(ebsZoneKey, "b")),
		"host a-0":     pv(in(corev1.LabelHostname, "a-0")),
		"host a-1":     pv(in(corev1.LabelHostname, "a-1")),
		"host b-0":     pv(in(corev1.LabelHostname, "b-0")),
		"host c-0":     pv(in(corev1.LabelHostname, "c-0")),
		"host c-1":     pv(in(corev1.LabelHostname, "c-1")),
		"zones a or c": pv(in(ZoneLabelKey, "a"), in(ZoneLabelKey, "c")),
		"no node":      pv(in(ZoneLabelKey, "x")),
	}
	cases := map[string]struct {
		pod *corev1.Pod
		// usable are the volumes the pod can use; every other is not.
		usable []string
	}{
		"unconstrained: any volume on an ordinary node": {
			pod:    pod().Obj(),
			usable: []string{"anywhere", "zone a", "zone b", "gke zone a", "gke zone b", "ebs zone a", "ebs zone b", "host a-0", "host a-1", "host b-0", "zones a or c"},
		},
		"DaemonSet pod pinned to a-1 by matchFields": {
			pod:    pod().PinnedTo("a-1").Obj(),
			usable: []string{"anywhere", "zone a", "gke zone a", "ebs zone a", "host a-1", "zones a or c"},
		},
		"DaemonSet pod pinned to the tainted node, tolerating everything": {
			pod:    pod().PinnedTo("c-0").Toleration(corev1.Toleration{Operator: corev1.TolerationOpExists}).Obj(),
			usable: []string{"anywhere", "zone c", "host c-0", "zones a or c"},
		},
		"hostname pin by nodeSelector": {
			pod:    pod().NodeSelector(corev1.LabelHostname, "b-0").Obj(),
			usable: []string{"anywhere", "zone b", "gke zone b", "ebs zone b", "host b-0"},
		},
		"node-pool selector present in zone b only": {
			pod:    pod().NodeSelector(nodePoolKey, "logging").Obj(),
			usable: []string{"anywhere", "zone b", "gke zone b", "ebs zone b", "host b-0"},
		},
		"node-pool affinity, NotIn the logging pool": {
			pod: pod().RequiredNodeTerm(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
				Key: nodePoolKey, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"logging"},
			}}}).Obj(),
			usable: []string{"anywhere", "zone a", "gke zone a", "ebs zone a", "host a-0", "host a-1", "zones a or c"},
		},
		"zone affinity a or b": {
			pod:    pod().RequiredNodeTerm(in(ZoneLabelKey, "a", "b")).Obj(),
			usable: []string{"anywhere", "zone a", "zone b", "gke zone a", "gke zone b", "ebs zone a", "ebs zone b", "host a-0", "host a-1", "host b-0", "zones a or c"},
		},
		"tolerates the dedicated taint: zone c's tainted node too": {
			pod:    pod().Toleration(tolerateTeam).Obj(),
			usable: []string{"anywhere", "zone a", "zone b", "zone c", "gke zone a", "gke zone b", "ebs zone a", "ebs zone b", "host a-0", "host a-1", "host b-0", "host c-0", "zones a or c"},
		},
		"tolerates the cordon: the cordoned node too": {
			pod:    pod().Toleration(tolerateCordon).NodeSelector(ZoneLabelKey, "c").Obj(),
			usable: []string{"anywhere", "zone c", "host c-1", "zones a or c"},
		},
		"zone c without tolerations: nowhere to run": {
			pod:    pod().NodeSelector(ZoneLabelKey, "c").Obj(),
			usable: []string{"anywhere"},
		},
		"nodeName on the cordoned node: the scheduler is bypassed": {
			pod:    pod().NodeName("c-1").Obj(),
			usable: []string{"anywhere", "zone c", "host c-1", "zones a or c"},
		},
		"nodeName of an unknown node": {
			pod:    pod().NodeName("gone").Obj(),
			usable: []string{"anywhere"},
		},
		"terms are ORed: zone a, or the logging pool": {
			pod:    pod().RequiredNodeTerm(in(ZoneLabelKey, "a")).RequiredNodeTerm(in(nodePoolKey, "logging")).Obj(),
			usable: []string{"anywhere", "zone a", "zone b", "gke zone a", "gke zone b", "ebs zone a", "ebs zone b", "host a-0", "host a-1", "host b-0", "zones a or c"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := NewPlacement(tc.pod, func() ([]*corev1.Node, error) { return placementNodes(), nil }, NewAffinities())
			want := map[string]bool{}
			for _, v := range tc.usable {
				want[v] = true
			}
			got := map[string]bool{}
			for v, affinity := range volumes {
				if p.Usable(affinity) {
					got[v] = true
				}
				// The remembered answer is the same.
				if p.Usable(affinity) != got[v] {
					t.Errorf("%s: a second Usable answered differently", v)
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("usable volumes (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPlacementReadsNodesOnceAndOnlyWhenNeeded(t *testing.T) {
	reads := 0
	p := NewPlacement(fixtures.MakePod("p", "ns").Obj(), func() ([]*corev1.Node, error) {
		reads++
		return placementNodes(), nil
	}, NewAffinities())
	if !p.Usable("") || reads != 0 {
		t.Fatalf("a volume usable anywhere read the nodes (%d reads)", reads)
	}
	for _, z := range []string{"a", "b", "c", "a"} {
		p.Usable(VolumeAffinity(fixtures.MakePV("pv", fixtures.InTerm(ZoneLabelKey, z))))
	}
	if reads != 1 {
		t.Errorf("nodes read %d times, want 1", reads)
	}

	// No node known at all (a cluster scaled to zero): nothing to judge by.
	empty := NewPlacement(fixtures.MakePod("p", "ns").Obj(), func() ([]*corev1.Node, error) { return nil, nil }, NewAffinities())
	if !empty.Usable(VolumeAffinity(fixtures.MakePV("pv", fixtures.InTerm(ZoneLabelKey, "a")))) {
		t.Errorf("with no node known, a zonal volume is not usable")
	}
	// A pod pinned to a node that is not known cannot use a zonal volume.
	pinned := NewPlacement(fixtures.MakePod("p", "ns").PinnedTo("gone").Obj(), func() ([]*corev1.Node, error) { return nil, nil }, NewAffinities())
	if pinned.Usable(VolumeAffinity(fixtures.MakePV("pv", fixtures.InTerm(ZoneLabelKey, "a")))) {
		t.Errorf("a pod pinned to an unknown node can use a zonal volume")
	}

	failing := NewPlacement(fixtures.MakePod("p", "ns").Obj(), func() ([]*corev1.Node, error) { return nil, errors.New("boom") }, NewAffinities())
	if failing.Usable(VolumeAffinity(fixtures.MakePV("pv", fixtures.InTerm(ZoneLabelKey, "a")))) || failing.Err() == nil {
		t.Errorf("a volume with affinity is usable although the nodes could not be read (err %v)", failing.Err())
	}
	if failing.Usable("{not json") {
		t.Errorf("an unreadable affinity is usable")
	}
}

func TestPlacementWithoutPodMeansAnyNode(t *testing.T) {
	deleting := fixtures.MakeNode("d-0").Zone("d").Obj()
	deleting.DeletionTimestamp = &metav1.Time{Time: fixtures.Epoch}
	nodes := append(placementNodes(), deleting)
	p := NewPlacement(nil, func() ([]*corev1.Node, error) { return nodes, nil }, NewAffinities())
	cases := map[string]struct {
		affinity string
		want     bool
	}{
		"zone c (tainted and cordoned nodes still exist)": {affinity: VolumeAffinity(fixtures.MakePV("pv", fixtures.InTerm(ZoneLabelKey, "c"))), want: true},
		"a removed node's hostname":                       {affinity: VolumeAffinity(fixtures.MakePV("pv", fixtures.InTerm(corev1.LabelHostname, "gone"))), want: false},
		"a node being deleted":                            {affinity: VolumeAffinity(fixtures.MakePV("pv", fixtures.InTerm(ZoneLabelKey, "d"))), want: false},
		"anywhere":                                        {affinity: "", want: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := p.Usable(tc.affinity); got != tc.want {
				t.Errorf("Usable = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPinnedNodeNames(t *testing.T) {
	cases := map[string]struct {
		pod    *corev1.Pod
		want   []string
		wantOK bool
	}{
		"unconstrained":         {pod: fixtures.MakePod("p", "ns").Obj()},
		"nodeName":              {pod: fixtures.MakePod("p", "ns").NodeName("n1").Obj(), want: []string{"n1"}, wantOK: true},
		"DaemonSet pin":         {pod: fixtures.MakePod("p", "ns").PinnedTo("n2").Obj(), want: []string{"n2"}, wantOK: true},
		"two pinned terms":      {pod: fixtures.MakePod("p", "ns").PinnedTo("n2").PinnedTo("n1").Obj(), want: []string{"n1", "n2"}, wantOK: true},
		"a term without a pin":  {pod: fixtures.MakePod("p", "ns").PinnedTo("n2").RequiredNodeTerm(fixtures.InTerm(ZoneLabelKey, "a")).Obj()},
		"hostname nodeSelector": {pod: fixtures.MakePod("p", "ns").NodeSelector(corev1.LabelHostname, "n1").Obj()},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok := PinnedNodeNames(tc.pod)
			if ok != tc.wantOK || !cmp.Equal(tc.want, got) {
				t.Errorf("PinnedNodeNames = %v, %v; want %v, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestWarmAffinity(t *testing.T) {
	claim := func(annotations map[string]string) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Annotations: annotations}}
	}
	zoneA := VolumeAffinity(fixtures.MakePV("pv", fixtures.InTerm(ZoneLabelKey, "a")))
	cases := map[string]struct {
		claim  *corev1.PersistentVolumeClaim
		want   string
		wantOK bool
	}{
		"nothing recorded":          {claim: claim(nil)},
		"recorded: any node":        {claim: claim(map[string]string{v1alpha1.NodeAffinityAnnotationKey: ""}), want: "", wantOK: true},
		"recorded affinity wins":    {claim: claim(map[string]string{v1alpha1.NodeAffinityAnnotationKey: zoneA, v1alpha1.ZonesAnnotationKey: "b"}), want: zoneA, wantOK: true},
		"older record: zones":       {claim: claim(map[string]string{v1alpha1.ZonesAnnotationKey: "a"}), want: zoneA, wantOK: true},
		"older record: empty zones": {claim: claim(map[string]string{v1alpha1.ZonesAnnotationKey: ""})},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok := WarmAffinity(tc.claim)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("WarmAffinity = %q, %v; want %q, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestParseVolumeAffinity(t *testing.T) {
	nodeA := fixtures.MakeNode("a-0").Zone("a").Obj()
	nodeB := fixtures.MakeNode("b-0").Zone("b").Obj()
	cases := map[string]struct {
		affinity  string
		wantErr   bool
		wantAny   bool
		wantMatch map[string]bool
	}{
		"empty: any node": {affinity: "", wantAny: true, wantMatch: map[string]bool{"a-0": true, "b-0": true}},
		"zone a":          {affinity: VolumeAffinity(fixtures.MakePV("pv", fixtures.InTerm(ZoneLabelKey, "a"))), wantMatch: map[string]bool{"a-0": true, "b-0": false}},
		"hostname b-0":    {affinity: VolumeAffinity(fixtures.MakePV("pv", fixtures.InTerm(corev1.LabelHostname, "b-0"))), wantMatch: map[string]bool{"a-0": false, "b-0": true}},
		"not JSON":        {affinity: "{", wantErr: true},
		"bad operator":    {affinity: `{"nodeSelectorTerms":[{"matchExpressions":[{"key":"k","operator":"Near","values":["v"]}]}]}`, wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			// Twice: the second call is served from the Affinities' map,
			// and must be the same matcher, or the same error (errors are
			// not kept).
			a := NewAffinities()
			first, err := a.Parse(tc.affinity)
			second, err2 := a.Parse(tc.affinity)
			if tc.wantErr {
				if err == nil || err2 == nil {
					t.Fatalf("ParseVolumeAffinity(%q) errors = %v, %v; want both non-nil", tc.affinity, err, err2)
				}
				return
			}
			if err != nil || err2 != nil {
				t.Fatalf("ParseVolumeAffinity(%q) errors = %v, %v", tc.affinity, err, err2)
			}
			if first != second {
				t.Errorf("ParseVolumeAffinity(%q) parsed the same value twice; want one shared matcher", tc.affinity)
			}
			if first.Any() != tc.wantAny {
				t.Errorf("Any() = %v; want %v", first.Any(), tc.wantAny)
			}
			for _, n := range []*corev1.Node{nodeA, nodeB} {
				if got := first.Match(n); got != tc.wantMatch[n.Name] {
					t.Errorf("Match(%s) = %v; want %v", n.Name, got, tc.wantMatch[n.Name])
				}
			}
		})
	}
}

// BenchmarkPlacement is a checkout's placement work on 1,000 nodes: one
// pass over the nodes, then a lookup per distinct volume affinity.
func BenchmarkPlacement(b *testing.B) {
	var nodes []*corev1.Node
	for i := range 1000 {
		zone := string(rune('a' + i%3))
		nodes = append(nodes, fixtures.MakeNode(fmt.Sprintf("n-%d", i)).Zone(zone).Obj())
	}
	var affinities []string
	for _, z := range []string{"a", "b", "c"} {
		affinities = append(affinities, VolumeAffinity(fixtures.MakePV("pv", fixtures.InTerm(ZoneLabelKey, z))))
	}
	for i := range 50 {
		affinities = append(affinities, VolumeAffinity(fixtures.MakePV("pv", fixtures.InTerm(corev1.LabelHostname, fmt.Sprintf("n-%d", i*7)))))
	}
	pod := fixtures.MakePod("p", "ns").NodeSelector(ZoneLabelKey, "b").Obj()
	for b.Loop() {
		p := NewPlacement(pod, func() ([]*corev1.Node, error) { return nodes, nil }, NewAffinities())
		for _, a := range affinities {
			p.Usable(a)
		}
	}
}
