package pool

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

func TestPlanNamespace(t *testing.T) {
	t0 := fixtures.Epoch
	bound := func(name string, age int) Claim {
		return Claim{Name: name, Bound: true, Hash: "h", Recorded: true, Created: t0.Add(time.Duration(-age) * time.Minute)}
	}
	unbound := func(name string, age int) Claim {
		c := bound(name, age)
		c.Bound, c.Recorded = false, false
		return c
	}
	spare := func(c *Claim) { c.Spare = true }
	move := func(c *Claim) { c.Spare, c.Move = true, true }
	with := func(c Claim, f func(*Claim)) Claim { f(&c); return c }
	cases := map[string]struct {
		in   Input
		want Plan
	}{
		"empty pool of 3: create all three at once": {
			in:   Input{Size: 3, Hash: "h"},
			want: Plan{Create: 3},
		},
		"full pool: nothing to do": {
			in:   Input{Size: 2, Hash: "h", Claims: []Claim{bound("a", 1), bound("b", 2)}},
			want: Plan{Warm: 2},
		},
		"one checked out: refill one": {
			in:   Input{Size: 3, Hash: "h", Claims: []Claim{bound("a", 1), bound("b", 2)}},
			want: Plan{Create: 1, Warm: 2},
		},
		"stale claims are replaced, never kept": {
			in:   Input{Size: 2, Hash: "new", Claims: []Claim{bound("a", 1), {Name: "b", Bound: true, Hash: "new", Recorded: true}}},
			want: Plan{Create: 1, Delete: []string{"a"}, Warm: 1},
		},
		"scale down deletes unbound, then newest": {
			in:   Input{Size: 1, Hash: "h", Claims: []Claim{bound("old", 10), bound("new", 1), unbound("pending", 5)}},
			want: Plan{Delete: []string{"new", "pending"}, Warm: 1},
		},
		"size 0 empties the pool and its binders": {
			in:   Input{Size: 0, Hash: "h", WaitForFirstConsumer: true, Claims: []Claim{bound("a", 1), unbound("b", 1)}, Binders: []string{"b"}},
			want: Plan{Delete: []string{"a", "b"}, DeleteBinders: []string{"b"}},
		},
		"WaitForFirstConsumer: a binder per unbound claim": {
			in:   Input{Size: 3, Hash: "h", WaitForFirstConsumer: true, Claims: []Claim{unbound("a", 1), unbound("b", 1), bound("c", 1)}, Binders: []string{"a"}},
			want: Plan{CreateBinders: []string{"b"}, Warm: 1, Provisioning: 2},
		},
		"Immediate classes need no binder": {
			in:   Input{Size: 2, Hash: "h", Claims: []Claim{unbound("a", 1)}},
			want: Plan{Create: 1, Provisioning: 1},
		},
		"a binder goes once its claim is Bound, or gone": {
			in:   Input{Size: 2, Hash: "h", WaitForFirstConsumer: true, Claims: []Claim{bound("a", 1), bound("b", 1)}, Binders: []string{"a", "gone"}},
			want: Plan{DeleteBinders: []string{"a", "gone"}, Warm: 2},
		},
		"claims marked Replace are deleted and created anew": {
			in:   Input{Size: 2, Hash: "h", Claims: []Claim{bound("a", 1), {Name: "unreachable", Bound: true, Hash: "h", Recorded: true, Replace: true}}},
			want: Plan{Create: 1, Delete: []string{"unreachable"}, Warm: 1},
		},
		"a spare to move stays warm while its replacement is made": {
			in:   Input{Size: 2, Hash: "h", Uncovered: 1, Claims: []Claim{bound("a", 1), with(bound("m", 5), move)}},
			want: Plan{Create: 1, Moved: []string{"m"}, Leaving: []string{"m"}, Warm: 2},
		},
		"a pool short of one, one node uncovered: the refill goes there, the spare stays": {
			in:   Input{Size: 3, Hash: "h", Uncovered: 1, Claims: []Claim{bound("a", 1), with(bound("m", 5), move)}},
			want: Plan{Create: 1, Warm: 2},
		},
		"a pool short of one, two nodes uncovered: one spare moves, the oldest": {
			in: Input{Size: 4, Hash: "h", Uncovered: 2, Claims: []Claim{bound("a", 1),
				with(bound("m-new", 5), move), with(bound("m-old", 9), move)}},
			want: Plan{Create: 2, Moved: []string{"m-old"}, Leaving: []string{"m-old"}, Warm: 3},
		},
		"a Bound surplus claim not yet recorded gets recorded while it stays": {
			in:   Input{Size: 1, Hash: "h", Claims: []Claim{unbound("pending", 1), {Name: "fresh", Bound: true, Hash: "h", Spare: true}}},
			want: Plan{Leaving: []string{"fresh"}, Record: []string{"fresh"}, Warm: 1, Provisioning: 1},
		},
		"the replacement provisions: the spare it replaces stays, still warm": {
			in:   Input{Size: 2, Hash: "h", Claims: []Claim{bound("a", 1), unbound("n", 0), with(bound("m", 5), spare)}},
			want: Plan{Leaving: []string{"m"}, Warm: 2, Provisioning: 1},
		},
		"the replacement is Bound: the spare goes": {
			in:   Input{Size: 2, Hash: "h", Claims: []Claim{bound("a", 1), bound("n", 0), with(bound("m", 5), spare)}},
			want: Plan{Delete: []string{"m"}, Warm: 2},
		},
		"a spare to move in a pool already full goes as surplus, nothing made": {
			in:   Input{Size: 1, Hash: "h", Claims: []Claim{bound("a", 1), with(bound("m", 5), move)}},
			want: Plan{Delete: []string{"m"}, Warm: 1},
		},
		"scale down deletes spares before claims serving demand, older spares kept first": {
			in:   Input{Size: 2, Hash: "h", Claims: []Claim{bound("serving", 1), with(bound("old-spare", 10), spare), with(bound("new-spare", 2), spare)}},
			want: Plan{Delete: []string{"new-spare"}, Warm: 2},
		},
		"scale down while one provisions: a Bound surplus claim stays until it is Bound": {
			in:   Input{Size: 2, Hash: "h", Claims: []Claim{bound("a", 1), unbound("pending", 1), with(bound("s", 3), spare)}},
			want: Plan{Leaving: []string{"s"}, Warm: 2, Provisioning: 1},
		},
		"a newly Bound claim gets its node affinity recorded": {
			in:   Input{Size: 1, Hash: "h", Claims: []Claim{{Name: "a", Bound: true, Hash: "h"}}},
			want: Plan{Record: []string{"a"}, Warm: 1},
		},
		"SelectNodes: unbound claims without a node get one, and binders not yet placed go": {
			in: Input{Size: 4, Hash: "h", WaitForFirstConsumer: true, SelectNodes: true, Claims: []Claim{
				unbound("given-back", 1), {Name: "selected", Hash: "h", NodeSelected: true, Zone: "z1"}, {Name: "binding", Hash: "h"},
				{Name: "placed", Hash: "h", Bound: true, Recorded: true},
			}, Binders: []string{"binding", "placed"}},
			want: Plan{SelectNode: []string{"given-back", "binding"}, DeleteBinders: []string{"binding", "placed"}, Warm: 1, Provisioning: 3, PerZone: map[string]int{"z1": 1}},
		},
		"SelectNodes on an Immediate class: nothing to select": {
			in:   Input{Size: 1, Hash: "h", SelectNodes: true, Claims: []Claim{unbound("a", 1)}},
			want: Plan{Provisioning: 1},
		},
		"PerZone counts the kept claims only": {
			in: Input{Size: 2, Hash: "h", Claims: []Claim{
				{Name: "a", Bound: true, Hash: "h", Recorded: true, Zone: "z1", Created: t0.Add(-time.Hour)},
				{Name: "b", Bound: true, Hash: "h", Recorded: true, Zone: "z2", Created: t0.Add(-time.Minute)},
				{Name: "surplus", Hash: "h", NodeSelected: true, Zone: "z2", Created: t0},
				{Name: "stale", Bound: true, Hash: "old", Zone: "z3"},
			}},
			want: Plan{Delete: []string{"surplus", "stale"}, Warm: 2, PerZone: map[string]int{"z1": 1, "z2": 1}},
		},
		"a moving claim is replaced": {
			in:   Input{Size: 2, Hash: "h", Uncovered: 1, Claims: []Claim{bound("a", 1), with(bound("m", 5), move)}},
			want: Plan{Create: 1, Moved: []string{"m"}, Leaving: []string{"m"}, Warm: 2},
		},
		"two short, one spare moving: both made, the oldest mover replaced": {
			in: Input{Size: 4, Hash: "h", Uncovered: 2, Claims: []Claim{bound("a", 1),
				with(bound("m-new", 5), move), with(bound("m-old", 9), move)}},
			want: Plan{Create: 2, Moved: []string{"m-old"}, Leaving: []string{"m-old"}, Warm: 3},
		},
		"reserved claims are the pool's: fewer warm PVCs to keep": {
			in:   Input{Size: 4, Hash: "h", Claims: []Claim{bound("a", 1)}, Reserved: 2},
			want: Plan{Create: 1, Warm: 1},
		},
		"more reserved than the size: the warm PVCs are surplus": {
			in:   Input{Size: 2, Hash: "h", Claims: []Claim{bound("a", 1)}, Reserved: 3},
			want: Plan{Delete: []string{"a"}},
		},
		"claims being deleted are neither counted nor deleted again": {
			in:   Input{Size: 1, Hash: "h", Claims: []Claim{{Name: "a", Bound: true, Hash: "h", Deleting: true}}},
			want: Plan{Create: 1},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := PlanNamespace(tc.in)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty(), cmpopts.SortSlices(strings.Compare)); diff != "" {
				t.Errorf("PlanNamespace (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNamespaces(t *testing.T) {
	now := fixtures.Epoch
	cases := map[string]struct {
		listed        []string
		lastAdmission map[string]time.Time
		learn         Learning
		wantKeep      []string
		wantRequeue   time.Duration
		wantCapped    []string
	}{
		"a namespace the selector leaves out is never learned": {
			lastAdmission: map[string]time.Time{"team-a": now, "other": now},
			learn:         Learning{Selected: func(ns string) bool { return ns == "team-a" }},
			wantKeep:      []string{"team-a"}, wantRequeue: time.Hour,
		},
		"a cap keeps the most recently active, and says which it leaves out": {
			lastAdmission: map[string]time.Time{"a": now.Add(-30 * time.Minute), "b": now.Add(-time.Minute), "c": now.Add(-10 * time.Minute), "d": now.Add(-40 * time.Minute)},
			learn:         Learning{Max: 2},
			wantKeep:      []string{"b", "c"}, wantRequeue: 50 * time.Minute, wantCapped: []string{"a", "d"},
		},
		"a cap does not apply to listed namespaces": {
			listed: []string{"a", "b", "c"}, learn: Learning{Max: 1},
			wantKeep: []string{"a", "b", "c"},
		},
		"listed namespaces are kept whatever the admissions": {
			listed: []string{"b", "a"}, lastAdmission: map[string]time.Time{"c": now},
			wantKeep: []string{"a", "b"},
		},
		"learned namespaces are kept until idle, with a timer for the first to expire": {
			lastAdmission: map[string]time.Time{"fresh": now.Add(-10 * time.Minute), "older": now.Add(-50 * time.Minute), "idle": now.Add(-2 * time.Hour)},
			wantKeep:      []string{"fresh", "older"}, wantRequeue: 10 * time.Minute,
		},
		"nothing listed or learned": {},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			keep, requeue, capped := Namespaces(tc.listed, tc.lastAdmission, now, time.Hour, tc.learn)
			if diff := cmp.Diff(tc.wantCapped, capped, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("capped (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantKeep, keep, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("keep (-want +got):\n%s", diff)
			}
			if requeue != tc.wantRequeue {
				t.Errorf("requeueAfter = %s, want %s", requeue, tc.wantRequeue)
			}
		})
	}
}

func TestCandidates(t *testing.T) {
	zone := func(z string) string { return VolumeAffinity(fixtures.MakePV("pv", fixtures.InTerm(ZoneLabelKey, z))) }
	warm := func(name, hash string, annotations map[string]string, phase corev1.PersistentVolumeClaimPhase) corev1.PersistentVolumeClaim {
		return corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations, Labels: map[string]string{
			v1alpha1.ClaimRoleLabelKey: v1alpha1.ClaimRoleWarm, v1alpha1.TemplateHashLabelKey: hash,
		}}, Status: corev1.PersistentVolumeClaimStatus{Phase: phase}}
	}
	recorded := func(affinity string) map[string]string {
		return map[string]string{v1alpha1.NodeAffinityAnnotationKey: affinity}
	}
	claimed := warm("claimed", "h", recorded(zone("a")), corev1.ClaimBound)
	claimed.Labels[v1alpha1.ClaimRoleLabelKey] = v1alpha1.ClaimRoleClaimed
	deleting := warm("deleting", "h", recorded(zone("a")), corev1.ClaimBound)
	deleting.DeletionTimestamp = &metav1.Time{Time: fixtures.Epoch}
	pool := []corev1.PersistentVolumeClaim{
		warm("in-a", "h", recorded(zone("a")), corev1.ClaimBound),
		warm("in-b", "h", recorded(zone("b")), corev1.ClaimBound),
		warm("anywhere", "h", recorded(""), corev1.ClaimBound),
		warm("legacy-zones-a", "h", map[string]string{v1alpha1.ZonesAnnotationKey: "a"}, corev1.ClaimBound),
		warm("legacy-empty-zones", "h", map[string]string{v1alpha1.ZonesAnnotationKey: ""}, corev1.ClaimBound),
		warm("not-recorded", "h", nil, corev1.ClaimBound),
		warm("pending", "h", recorded(zone("a")), corev1.ClaimPending),
		warm("stale", "old", recorded(zone("a")), corev1.ClaimBound),
		claimed, deleting,
	}
	cases := map[string]struct {
		usable []string // affinities the pod can use, besides ""
		want   []string
	}{
		"every zone": {usable: []string{zone("a"), zone("b")}, want: []string{"anywhere", "in-a", "in-b", "legacy-zones-a"}},
		"zone a":     {usable: []string{zone("a")}, want: []string{"anywhere", "in-a", "legacy-zones-a"}},
		"zone c":     {want: []string{"anywhere"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			usable := func(affinity string) bool { return affinity == "" || slices.Contains(tc.usable, affinity) }
			var got []string
			for _, c := range Candidates(pool, "h", usable) {
				got = append(got, c.Name)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.SortSlices(strings.Compare)); diff != "" {
				t.Errorf("Candidates (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPVZones(t *testing.T) {
	pv := func(terms ...corev1.NodeSelectorTerm) *corev1.PersistentVolume {
		return &corev1.PersistentVolume{Spec: corev1.PersistentVolumeSpec{NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: terms}}}}
	}
	term := func(key string, vals ...string) corev1.NodeSelectorTerm {
		return corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: corev1.NodeSelectorOpIn, Values: vals}}}
	}
	cases := map[string]struct {
		pv   *corev1.PersistentVolume
		want string
	}{
		"no affinity":        {pv: &corev1.PersistentVolume{}, want: ""},
		"one zone":           {pv: pv(term(ZoneLabelKey, "a")), want: "a"},
		"two terms":          {pv: pv(term(ZoneLabelKey, "b"), term(ZoneLabelKey, "a")), want: "a,b"},
		"node-pinned volume": {pv: pv(term(corev1.LabelHostname, "n1")), want: ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := FormatZones(PVZones(tc.pv)); got != tc.want {
				t.Errorf("PVZones = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestTemplateHash(t *testing.T) {
	a := fixtures.MakeFluentPVC("a").Obj().Spec.PVCSpecTemplate
	b := *a.DeepCopy()
	if TemplateHash(&a) != TemplateHash(&b) {
		t.Errorf("equal templates hash differently")
	}
	b.StorageClassName = nil
	if TemplateHash(&a) == TemplateHash(&b) {
		t.Errorf("different templates hash the same")
	}
}
