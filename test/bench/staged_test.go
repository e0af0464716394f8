package main

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/st-tech/fluent-pvc-operator/apis/objects"
	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/claim"
)

func TestStagedCounts(t *testing.T) {
	now := time.Now()
	warm := func(name string) corev1.PersistentVolumeClaim {
		return corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{v1alpha1.ClaimRoleLabelKey: v1alpha1.ClaimRoleWarm}},
			Spec:       corev1.PersistentVolumeClaimSpec{VolumeName: "pv-" + name},
			Status:     corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound},
		}
	}
	reserved := func(name string) corev1.PersistentVolumeClaim {
		c := warm(name)
		w, err := claim.Reserve(&c, now, "stock-1", claim.NewCheckoutID())
		if err != nil {
			t.Fatal(err)
		}
		return *w.Object
	}
	pending := warm("pending")
	pending.Status.Phase = corev1.ClaimPending
	deleting := warm("deleting")
	deleting.DeletionTimestamp = &metav1.Time{Time: now}
	holder := func(c corev1.PersistentVolumeClaim, node string, phase corev1.PodPhase) corev1.Pod {
		h := objects.HolderPod("f", &c, node, "pause", "")
		h.Spec.NodeName = node
		h.Status.Phase = phase
		return *h
	}
	va := func(c corev1.PersistentVolumeClaim, node string, attached bool) storagev1.VolumeAttachment {
		return storagev1.VolumeAttachment{
			Spec:   storagev1.VolumeAttachmentSpec{NodeName: node, Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To(c.Spec.VolumeName)}},
			Status: storagev1.VolumeAttachmentStatus{Attached: attached},
		}
	}
	a, b := warm("a"), reserved("b")
	cases := map[string]struct {
		pvcs                   []corev1.PersistentVolumeClaim
		holders                []corev1.Pod
		vas                    []storagev1.VolumeAttachment
		live, staged, reserved int
	}{
		"none": {},
		"warm and reserved, staged and attached": {
			pvcs:    []corev1.PersistentVolumeClaim{a, b},
			holders: []corev1.Pod{holder(a, "n1", corev1.PodRunning), holder(b, "n2", corev1.PodRunning)},
			vas:     []storagev1.VolumeAttachment{va(a, "n1", true), va(b, "n2", true)},
			live:    2, staged: 2, reserved: 1,
		},
		"no holder yet": {
			pvcs: []corev1.PersistentVolumeClaim{a},
			vas:  []storagev1.VolumeAttachment{va(a, "n1", true)},
			live: 1,
		},
		"a holder not running yet": {
			pvcs:    []corev1.PersistentVolumeClaim{a},
			holders: []corev1.Pod{holder(a, "n1", corev1.PodPending)},
			vas:     []storagev1.VolumeAttachment{va(a, "n1", true)},
			live:    1,
		},
		"a volume still attaching": {
			pvcs:    []corev1.PersistentVolumeClaim{b},
			holders: []corev1.Pod{holder(b, "n1", corev1.PodRunning)},
			vas:     []storagev1.VolumeAttachment{va(b, "n1", false)},
			live:    1,
		},
		"a volume attached to another node than its holder's": {
			pvcs:    []corev1.PersistentVolumeClaim{a},
			holders: []corev1.Pod{holder(a, "n1", corev1.PodRunning)},
			vas:     []storagev1.VolumeAttachment{va(a, "n2", true)},
			live:    1,
		},
		"claims not Bound or being deleted do not count": {
			pvcs:    []corev1.PersistentVolumeClaim{pending, deleting},
			holders: []corev1.Pod{holder(pending, "n1", corev1.PodRunning), holder(deleting, "n1", corev1.PodRunning)},
			vas:     []storagev1.VolumeAttachment{va(pending, "n1", true), va(deleting, "n1", true)},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			live, staged, reserved := stagedCounts(tc.pvcs, tc.holders, tc.vas)
			if live != tc.live || staged != tc.staged || reserved != tc.reserved {
				t.Errorf("stagedCounts = %d live, %d staged, %d reserved; want %d, %d, %d", live, staged, reserved, tc.live, tc.staged, tc.reserved)
			}
		})
	}
}

func TestStagedLayout(t *testing.T) {
	cases := map[string]struct {
		levels       []int
		pods         int
		nodesPerZone int
		stagePerNode int
		extraPerZone int
	}{
		"the smoke run's within the default":  {levels: []int{1, 5}, pods: 10, nodesPerZone: 2},
		"three levels of 30 (at most)":        {levels: []int{1, 10, 50}, pods: 100, nodesPerZone: 2, stagePerNode: 16, extraPerZone: 1},
		"one level of 30 fits 2 nodes a zone": {levels: []int{10}, pods: 100, nodesPerZone: 2},
		"a larger cluster needs no more":      {levels: []int{1, 10, 50}, pods: 100, nodesPerZone: 3, stagePerNode: 16},
		"or not even a higher cap":            {levels: []int{1, 10, 50}, pods: 100, nodesPerZone: 5},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			n, extra := stagedLayout(config{Levels: tc.levels, AdmissionPods: tc.pods}, tc.nodesPerZone)
			if n != tc.stagePerNode || extra != tc.extraPerZone {
				t.Errorf("stagedLayout = --stage-per-node %d, %d nodes more per zone; want %d, %d", n, extra, tc.stagePerNode, tc.extraPerZone)
			}
		})
	}
}

func TestKwokOperatorArgs(t *testing.T) {
	all := []string{"start-up", "admission"}
	cases := map[string]struct {
		cfg  config
		want []string
	}{
		"the default stages the smoke run's pools": {
			cfg:  config{Levels: []int{1, 5}, AdmissionPods: 10, Phases: all, OperatorArgs: []string{"--reserve-ahead=share"}},
			want: []string{"--reserve-ahead=share"},
		},
		"three levels of 30 raise it": {
			cfg:  config{Levels: []int{1, 10, 50}, AdmissionPods: 100, Phases: all, OperatorArgs: []string{"--reserve-ahead=share"}},
			want: []string{"--reserve-ahead=share", "--stage-per-node=16"},
		},
		"a value given is kept": {
			cfg:  config{Levels: []int{1, 10, 50}, AdmissionPods: 100, Phases: all, OperatorArgs: []string{"--stage-per-node=4"}},
			want: []string{"--stage-per-node=4"},
		},
		"without the admission phase": {
			cfg:  config{Levels: []int{1, 10, 50}, AdmissionPods: 100, Phases: []string{"start-up"}, OperatorArgs: []string{"--reserve-ahead=share"}},
			want: []string{"--reserve-ahead=share"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, kwokOperatorArgs(tc.cfg, 2)); diff != "" {
				t.Errorf("kwokOperatorArgs (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStagePerNodeArg(t *testing.T) {
	cases := map[string]struct {
		args []string
		want int
	}{
		"none":         {args: []string{"--reserve-ahead=share"}},
		"one":          {args: []string{"--stage-per-node=20"}, want: 20},
		"the last one": {args: []string{"--stage-per-node=20", "-stage-per-node=4"}, want: 4},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := stagePerNodeArg(tc.args); got != tc.want {
				t.Errorf("stagePerNodeArg(%q) = %d, want %d", tc.args, got, tc.want)
			}
		})
	}
}

func TestStagedMarkdown(t *testing.T) {
	level := func(kind string, c, pods int, within float64) admissionLevel {
		return admissionLevel{Checkout: kind, Concurrency: c, Pods: pods, APIServer: summary{N: pods}, APIServerWithin25ms: within, Hits: pods, StagedHits: pods}
	}
	plain := []admissionLevel{level(checkoutReserved, 10, 100, 0.80), level(checkoutNoop, 10, 100, 0.81)}
	cases := map[string]struct {
		staged *stagedAdmission
		levels []admissionLevel
		want   []string
	}{
		"reserved ahead": {
			staged: &stagedAdmission{Pods: 40, StagePerNode: 16, ExtraNodes: 6, Reserved: true, StagedSeconds: 21.5, ExtraWaitSeconds: 3.2},
			levels: append(plain, level(checkoutStaged, 10, 40, 0.80)),
			want: []string{
				"| webhook calls ≤ 25 ms on a hit (reserved ahead, the chart's default) vs the no-op webhook (w), c=10 (API server histogram) | w − 2 points | 80% vs w 81% (-1.0 points) | PASS |\n" +
					"| webhook calls ≤ 25 ms on a staged hit (reserved ahead) vs the no-op webhook (w), c=10 (API server histogram) | w − 2 points | 80% vs w 81% (-1.0 points), 40 pods | PASS |",
				"Staged hits (`staged`): 40 pods per level",
				"`--stage-per-node=16`, as many as test/csidriver attaches to a node, which kwok nodes do not report, so that the levels' 40 warm PVCs all stage at once, on 6 kwok nodes added to the zones for them and deleted after the phase;",
				"a staged hit is handed out without an API write",
				"staged and reserved 21.5s after their creation, 3.2s after that pool was full",
				"| 40 / 0 (40 staged) |",
			},
		},
		"not reserved ahead": {
			staged: &stagedAdmission{Pods: 10, StagedSeconds: 8},
			levels: append(plain, level(checkoutStaged, 10, 10, 0.70)),
			want: []string{
				"| webhook calls ≤ 25 ms on a staged hit (not reserved ahead: it writes) vs the no-op webhook (w), c=10 (API server histogram) | w − 2 points | 70% vs w 81% (-11.0 points), 10 pods | MISS |",
				"the default `--stage-per-node` (8)",
				"a staged hit writes its claim at admission (PUT)",
			},
		},
		"skipped": {
			staged: &stagedAdmission{Skipped: "no CSI storage on this run: bin/csi-provisioner is missing: run make csi-bins"},
			levels: plain,
			want: []string{
				"| webhook calls ≤ 25 ms on a staged hit vs the no-op webhook (w), c=10 (API server histogram) | w − 2 points | skipped: no CSI storage on this run: bin/csi-provisioner is missing: run make csi-bins | n/a |",
				"Staged hits (`staged`): skipped: no CSI storage on this run",
			},
		},
		"not staged in time": {
			staged: &stagedAdmission{Pods: 40, StagePerNode: 16},
			levels: plain,
			want: []string{
				"| webhook calls ≤ 25 ms on a staged hit vs the no-op webhook (w), c=10 (API server histogram) | w − 2 points | not measured | n/a |",
				"Staged hits (`staged`): not measured; see the errors.",
			},
		},
		"not run": {
			want: []string{"| webhook calls ≤ 25 ms on a staged hit vs the no-op webhook (w), c=10 (API server histogram) | w − 2 points | not measured | n/a |"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := &results{AdmissionStaged: tc.staged, Admission: tc.levels, Config: config{AdmissionPods: 100, Levels: []int{10}}}
			r.evaluateGoals()
			md := r.markdown("chart.svg")
			for _, w := range tc.want {
				if !strings.Contains(md, w) {
					t.Errorf("the markdown lacks %q:\n%s", w, md)
				}
			}
		})
	}
}
