package main

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
)

func TestStartupRatios(t *testing.T) {
	seq := func(mode string, p50, p99 float64) startupRun {
		return startupRun{Mode: mode, Stats: summary{P50: p50, P99: p99}}
	}
	burst := func(mode string, p50, p99 float64) startupRun {
		r := seq(mode, p50, p99)
		r.Burst = true
		return r
	}
	cases := map[string]struct {
		runs  startupRuns
		pairs [][2]string
		want  []startupRatio
	}{
		"d/e of both kinds": {
			runs:  startupRuns{seq(modeHit, 1.1, 2.4), seq(modeOwnClaim, 1.0, 2.0), burst(modeHit, 3, 6), burst(modeOwnClaim, 2, 4)},
			pairs: [][2]string{{modeHit, modeOwnClaim}},
			want: []startupRatio{
				{Ratio: "d/e", Run: "sequential", P50: ptr.To(1.1), P99: ptr.To(1.2)},
				{Ratio: "d/e", Run: "burst", P50: ptr.To(1.5), P99: ptr.To(1.5)},
			},
		},
		"a kind that one mode did not run is left out": {
			runs:  startupRuns{seq(modeHit, 2, 2), seq(modePlain, 1, 1), burst(modeHit, 3, 3)},
			pairs: [][2]string{{modeHit, modePlain}},
			want:  []startupRatio{{Ratio: "d/a", Run: "sequential", P50: ptr.To(2.0), P99: ptr.To(2.0)}},
		},
		"a failed run is not measured": {
			runs:  startupRuns{seq(modeHit, 2, 2), {Mode: modeOwnClaim, Error: "timed out"}},
			pairs: [][2]string{{modeHit, modeOwnClaim}},
		},
		"a zero denominator is null": {
			runs:  startupRuns{seq(modeHit, 2, 2), seq(modeOwnClaim, 0, 1)},
			pairs: [][2]string{{modeHit, modeOwnClaim}},
			want:  []startupRatio{{Ratio: "d/e", Run: "sequential", P99: ptr.To(2.0)}},
		},
		"the CSI tier's pairs: d against a, b, e and c; the same for f, d's control; g against f and d; e and b against a": {
			runs: startupRuns{
				seq(modePlain, 0.5, 1), seq(modeEphemeral, 18, 20), seq(modeMiss, 16.5, 22), seq(modeHit, 0.6, 1.25), seq(modeOwnClaim, 10, 10),
				seq(modeUnstaged, 11, 12.5), seq(modeMoved, 22, 25),
			},
			pairs: csiRatioPairs,
			want: []startupRatio{
				{Ratio: "d/a", Run: "sequential", P50: ptr.To(1.2), P99: ptr.To(1.25)},
				{Ratio: "b/d", Run: "sequential", P50: ptr.To(30.0), P99: ptr.To(16.0)},
				{Ratio: "e/d", Run: "sequential", P50: ptr.To(10.0 / 0.6), P99: ptr.To(8.0)},
				{Ratio: "c/d", Run: "sequential", P50: ptr.To(27.5), P99: ptr.To(17.6)},
				{Ratio: "f/a", Run: "sequential", P50: ptr.To(22.0), P99: ptr.To(12.5)},
				{Ratio: "b/f", Run: "sequential", P50: ptr.To(18.0 / 11), P99: ptr.To(1.6)},
				{Ratio: "e/f", Run: "sequential", P50: ptr.To(10.0 / 11), P99: ptr.To(0.8)},
				{Ratio: "f/e", Run: "sequential", P50: ptr.To(1.1), P99: ptr.To(1.25)},
				{Ratio: "f/d", Run: "sequential", P50: ptr.To(11 / 0.6), P99: ptr.To(10.0)},
				{Ratio: "g/f", Run: "sequential", P50: ptr.To(2.0), P99: ptr.To(2.0)},
				{Ratio: "g/d", Run: "sequential", P50: ptr.To(22 / 0.6), P99: ptr.To(20.0)},
				{Ratio: "e/a", Run: "sequential", P50: ptr.To(20.0), P99: ptr.To(10.0)},
				{Ratio: "b/a", Run: "sequential", P50: ptr.To(36.0), P99: ptr.To(20.0)},
			},
		},
		"the CSI tier without b, f and g: their pairs are left out": {
			runs:  startupRuns{seq(modePlain, 0.5, 1), seq(modeHit, 11, 12.5), seq(modeOwnClaim, 10, 10)},
			pairs: csiRatioPairs,
			want: []startupRatio{
				{Ratio: "d/a", Run: "sequential", P50: ptr.To(22.0), P99: ptr.To(12.5)},
				{Ratio: "e/d", Run: "sequential", P50: ptr.To(10.0 / 11), P99: ptr.To(0.8)},
				{Ratio: "e/a", Run: "sequential", P50: ptr.To(20.0), P99: ptr.To(10.0)},
			},
		},
		"no runs": {pairs: realRatioPairs},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := tc.runs.ratios(tc.pairs)
			approx := cmp.Comparer(func(a, b float64) bool { return math.Abs(a-b) < 1e-9 })
			if diff := cmp.Diff(tc.want, got, approx); diff != "" {
				t.Errorf("ratios (-want +got):\n%s", diff)
			}
		})
	}
}

func TestOwnClaimPod(t *testing.T) {
	realSpec := (&env{real: true}).fluentPVC("f", 1).Spec
	cases := map[string]struct {
		spec v1alpha1.FluentPVCSpec
		// wantSidecarImage is the sidecar's image.
		wantSidecarImage string
	}{
		"kwok tier: the sample's sidecar": {spec: (&env{}).fluentPVC("f", 1).Spec, wantSidecarImage: "alpine:latest"},
		"real node: the busybox sidecar":  {spec: realSpec, wantSidecarImage: realSpec.SidecarContainerTemplate.Image},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := ownClaimPod(plainPod("ns", "e-0"), &tc.spec, "e-0")
			if _, ok := p.Labels[v1alpha1.BindingNameLabelKey]; ok {
				t.Errorf("the pod has the operator's binding label: %v", p.Labels)
			}
			if _, ok := p.Labels[v1alpha1.FluentPVCNameLabelKey]; ok {
				t.Errorf("the pod opts into a FluentPVC: %v", p.Labels)
			}
			if len(p.Finalizers) != 0 {
				t.Errorf("finalizers = %v, want none", p.Finalizers)
			}
			if p.Labels[measureLabelKey] != "true" {
				t.Errorf("the pod is not measured: %v", p.Labels)
			}
			var claim string
			for _, v := range p.Spec.Volumes {
				if v.Name == tc.spec.PVCVolumeName && v.PersistentVolumeClaim != nil {
					claim = v.PersistentVolumeClaim.ClaimName
				}
			}
			if claim != "e-0" {
				t.Errorf("volume %s mounts claim %q, want e-0", tc.spec.PVCVolumeName, claim)
			}
			// The sidecar where the webhook puts it: a native sidecar by default.
			var names []string
			var sidecar *corev1.Container
			for i, c := range slices.Concat(p.Spec.InitContainers, p.Spec.Containers) {
				names = append(names, c.Name)
				if c.Name == tc.spec.SidecarContainerTemplate.Name {
					sidecar = &slices.Concat(p.Spec.InitContainers, p.Spec.Containers)[i]
				}
				mounted := false
				for _, m := range c.VolumeMounts {
					mounted = mounted || (m.Name == tc.spec.PVCVolumeName && m.MountPath == tc.spec.PVCVolumeMountPath)
				}
				if !mounted {
					t.Errorf("container %s does not mount the claim at %s", c.Name, tc.spec.PVCVolumeMountPath)
				}
			}
			if diff := cmp.Diff([]string{tc.spec.SidecarContainerTemplate.Name, "app"}, names); diff != "" {
				t.Errorf("init containers and containers (-want +got):\n%s", diff)
			}
			if sidecar == nil || len(p.Spec.InitContainers) != 1 {
				t.Fatalf("no native sidecar: init containers %v", p.Spec.InitContainers)
			}
			if sidecar.RestartPolicy == nil || *sidecar.RestartPolicy != corev1.ContainerRestartPolicyAlways {
				t.Errorf("sidecar restartPolicy = %v, want Always", sidecar.RestartPolicy)
			}
			if got := sidecar.Image; got != tc.wantSidecarImage {
				t.Errorf("sidecar image = %q, want %q", got, tc.wantSidecarImage)
			}
		})
	}
}

func TestSchedulableNodes(t *testing.T) {
	node := func(name string, unschedulable bool, taints ...corev1.TaintEffect) corev1.Node {
		n := corev1.Node{}
		n.Name, n.Spec.Unschedulable = name, unschedulable
		for _, e := range taints {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "k", Value: "v", Effect: e})
		}
		return n
	}
	cases := map[string]struct {
		nodes []corev1.Node
		want  []string
	}{
		"sorted": {nodes: []corev1.Node{node("b", false), node("a", false)}, want: []string{"a", "b"}},
		"kwok nodes tainted beside the real node": {
			nodes: []corev1.Node{node("kwok-zone-a-0", false, corev1.TaintEffectNoSchedule), node("real-0", false)},
			want:  []string{"real-0"},
		},
		"NoExecute and cordoned are out, PreferNoSchedule is in": {
			nodes: []corev1.Node{node("x", false, corev1.TaintEffectNoExecute), node("y", true), node("z", false, corev1.TaintEffectPreferNoSchedule)},
			want:  []string{"z"},
		},
		"none": {nodes: nil, want: nil},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, schedulableNodes(tc.nodes)); diff != "" {
				t.Errorf("schedulableNodes (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRealNodeMarkdown(t *testing.T) {
	run := func(mode string, p50, p99 float64) startupRun {
		return startupRun{Mode: mode, Stats: summary{N: 3, P50: p50, P99: p99}}
	}
	cases := map[string]struct {
		real *realNodeResult
		want []string
	}{
		"measured": {
			real: &realNodeResult{N: 3, Startup: startupRuns{run(modePlain, 1, 2), run(modeHit, 1.2, 2.4), run(modeOwnClaim, 1, 2)}},
			want: []string{"## Start-up latency on a real node", "| d/e | n/a | n/a | 1.20× | 1.20× |", "| real node: start-up d/e p50, sequential | ≤ 1.05 | 1.20× | MISS |"},
		},
		"skipped": {
			real: &realNodeResult{Skipped: "the real node needs root"},
			want: []string{"| real node | skipped: the real node needs root |", "Skipped: the real node needs root.", "| real node: start-up d/e p99, sequential | ≤ 1.10 | skipped: the real node needs root | n/a |"},
		},
		"not run": {
			want: []string{"| real node | not run |", "| real node: start-up d/e p50, sequential | ≤ 1.05 | not measured | n/a |"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := &results{RealNode: tc.real}
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
