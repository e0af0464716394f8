package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/test/cluster"
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
			want: []string{"## Start-up latency on a real node", "| d/e | n/a | n/a | 1.20× | 1.20× |", "the modes taking turns", "| real node: start-up d/e p50, sequential | ≤ 1.05 | 1.20× | MISS |"},
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

func TestRoundsMarkdown(t *testing.T) {
	burst := func(mode string, p50s ...float64) startupRun {
		return startupRun{Mode: mode, Burst: true, Stats: summary{N: 40 * len(p50s)}, RoundP50s: p50s}
	}
	cases := map[string]struct {
		runs startupRuns
		want []string // lines, in order
		none bool
	}{
		"d/e per round": {
			runs: startupRuns{burst(modePlain, 0.1, 0.12), burst(modeHit, 0.4, 0.3), burst(modeOwnClaim, 0.2, 0.2), {Mode: modeHit, Stats: summary{N: 40}}},
			want: []string{
				"The bursts of a, d, e ran in 2 rounds of 40 pods each",
				"| | round 1 | round 2 |",
				"| a | 100 ms | 120 ms |",
				"| d | 400 ms | 300 ms |",
				"| e | 200 ms | 200 ms |",
				"| d/e | 2.00× | 1.50× |",
			},
		},
		"a round with the API server's garbage collection": {
			runs: func() startupRuns {
				d, e := burst(modeHit, 0.4, 0.3), burst(modeOwnClaim, 0.2, 0.2)
				d.RoundAPIServerGC, e.RoundAPIServerGC = []float64{0, 0.52}, []float64{0.001, 0}
				return startupRuns{d, e}
			}(),
			want: []string{
				"| d | 400 ms | 300 ms (GC 0.52 s) |",
				"| e | 200 ms | 200 ms |",
				"| d/e | 2.00× | 1.50× |",
				"(GC x s): kube-apiserver collected garbage during that burst",
			},
		},
		"one round: nothing to add": {runs: startupRuns{burst(modeHit, 0.4), burst(modeOwnClaim, 0.2)}, none: true},
		"a failed burst is left out": {
			runs: startupRuns{burst(modeHit, 0.4, 0.3), {Mode: modeOwnClaim, Burst: true, Error: "timed out", RoundP50s: []float64{0.2, 0.2}}},
			want: []string{"The bursts of d ran in 2 rounds", "| d | 400 ms | 300 ms |"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := writtenBy(tc.runs.roundsMarkdown)
			if !wantWritten(t, "roundsMarkdown", got, tc.want, tc.none) {
				return
			}
			if strings.Contains(got, "(GC x s)") != slices.ContainsFunc(tc.want, func(l string) bool { return strings.HasPrefix(l, "(GC x s)") }) {
				t.Errorf("GC note present = %v, want otherwise:\n%s", strings.Contains(got, "(GC x s)"), got)
			}
			if strings.Contains(got, "| d/e |") != slices.ContainsFunc(tc.want, func(l string) bool { return strings.HasPrefix(l, "| d/e") }) {
				t.Errorf("d/e row present = %v, want otherwise:\n%s", strings.Contains(got, "| d/e |"), got)
			}
		})
	}
}

func TestCPUMarkdown(t *testing.T) {
	burst := func(mode string, rounds int, cpu map[string]float64) startupRun {
		return startupRun{Mode: mode, Burst: true, RoundP50s: make([]float64, rounds), CPU: cpu}
	}
	cases := map[string]struct {
		runs startupRuns
		want []string // lines, in order
		not  []string
		none bool
	}{
		"per burst, largest over the modes first, d − e, the small ones only in the total": {
			runs: startupRuns{
				burst(modePlain, 2, map[string]float64{"kube-apiserver": 1.0, "etcd": 0.2, "tiny": 0.004}),
				burst(modeHit, 2, map[string]float64{"kube-apiserver": 2.0, "manager": 0.6, "etcd": 0.4, "tiny": 0.006}),
				burst(modeOwnClaim, 2, map[string]float64{"kube-apiserver": 1.2, "manager": 0.1, "etcd": 0.2}),
				{Mode: modeHit, CPU: map[string]float64{"kube-apiserver": 9}}, // sequential
			},
			want: []string{
				"| process | a | d | e | d − e |",
				"| kube-apiserver | 0.50 | 1.00 | 0.60 | +0.40 |",
				"| etcd | 0.10 | 0.20 | 0.10 | +0.10 |",
				"| manager | 0.00 | 0.30 | 0.05 | +0.25 |",
				"| all | 0.60 | 1.50 | 0.75 | +0.75 |",
			},
			not: []string{"| tiny |"},
		},
		"without e, no difference": {
			runs: startupRuns{burst(modeHit, 1, map[string]float64{"manager": 0.3})},
			want: []string{"| process | d |", "| manager | 0.30 |", "| all | 0.30 |"},
			not:  []string{"d − e"},
		},
		"a failed burst is left out": {
			runs: startupRuns{burst(modeHit, 1, map[string]float64{"manager": 0.3}), {Mode: modeOwnClaim, Burst: true, Error: "timed out", RoundP50s: []float64{0.2}, CPU: map[string]float64{"manager": 0.1}}},
			want: []string{"| process | d |"},
			not:  []string{"| e |", "d − e"},
		},
		"no CPU read: nothing": {runs: startupRuns{burst(modeHit, 2, nil)}, none: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := writtenBy(tc.runs.cpuMarkdown)
			if !wantWritten(t, "cpuMarkdown", got, tc.want, tc.none) {
				return
			}
			for _, s := range tc.not {
				if strings.Contains(got, s) {
					t.Errorf("cpuMarkdown has %q:\n%s", s, got)
				}
			}
		})
	}
}

// writtenBy is what write writes through the writer it is given.
func writtenBy(write func(w func(string, ...any))) string {
	var b strings.Builder
	write(func(f string, a ...any) { fmt.Fprintf(&b, f, a...) })
	return b.String()
}

// wantWritten fails t unless got, written by what, holds each of want in
// that order, or, when none, is empty; it says whether got is worth
// checking further.
func wantWritten(t *testing.T, what, got string, want []string, none bool) bool {
	t.Helper()
	if none {
		if got != "" {
			t.Errorf("%s wrote %q, want nothing", what, got)
		}
		return false
	}
	rest := got
	for _, line := range want {
		i := strings.Index(rest, line)
		if i < 0 {
			t.Errorf("%s is missing %q (in order) in:\n%s", what, line, got)
			return false
		}
		rest = rest[i+len(line):]
	}
	return true
}

func TestAddCPUDelta(t *testing.T) {
	cases := map[string]struct {
		sum, before, after, want map[string]float64
	}{
		"adds what each process spent": {
			sum:    map[string]float64{"etcd": 0.5},
			before: map[string]float64{"etcd": 10, "manager": 2},
			after:  map[string]float64{"etcd": 10.25, "manager": 2.5},
			want:   map[string]float64{"etcd": 0.75, "manager": 0.5},
		},
		"a process started meanwhile counts whole": {
			sum: map[string]float64{}, before: map[string]float64{}, after: map[string]float64{"kwok": 0.25},
			want: map[string]float64{"kwok": 0.25},
		},
		"one of a name ended: nothing, not less": {
			sum: map[string]float64{}, before: map[string]float64{"sh": 3}, after: map[string]float64{"sh": 1},
			want: map[string]float64{},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			addCPUDelta(tc.sum, tc.before, tc.after)
			if !maps.Equal(tc.sum, tc.want) {
				t.Errorf("sum %v, want %v", tc.sum, tc.want)
			}
		})
	}
}

func TestCPUByProcess(t *testing.T) {
	cpu, err := cpuByProcess()
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	if _, ok := cpu["bench"]; !ok {
		t.Errorf("the test's own process is not named bench: %v", cpu)
	}
}

func TestRunningTracker(t *testing.T) {
	pod := func(uid, node string, phase corev1.PodPhase) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "d-0", UID: types.UID(uid)}, Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: phase}}
	}
	cases := map[string]struct {
		events  []*corev1.Pod
		await   *corev1.Pod
		running bool
	}{
		"Running": {events: []*corev1.Pod{pod("1", "n", corev1.PodPending), pod("1", "n", corev1.PodRunning)}, await: pod("1", "", ""), running: true},
		"a pod of the same name Running before is another pod": {
			events: []*corev1.Pod{pod("1", "n", corev1.PodRunning), pod("2", "n", corev1.PodPending)}, await: pod("2", "", ""),
		},
		"not bound yet": {events: []*corev1.Pod{pod("1", "", corev1.PodPending)}, await: pod("1", "", "")},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tr := newRunningTracker()
			for _, p := range tc.events {
				tr.observe(p)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			bound, running, err := tr.await(ctx, tc.await)
			if tc.running != (err == nil) {
				t.Fatalf("await: %v, want Running %v", err, tc.running)
			}
			if tc.running && (bound.IsZero() || running.Before(bound)) {
				t.Errorf("await = bound %v, Running %v; want bound first", bound, running)
			}
		})
	}
}

func TestBurstRounds(t *testing.T) {
	t0 := time.Unix(1000, 0)
	// Every pod of a burst starts in d.
	pods := func(d time.Duration) []podTiming {
		return []podTiming{{created: t0, returned: t0, bound: t0, running: t0.Add(d)}}
	}
	type call struct {
		mode  string
		round int
	}
	cases := map[string]struct {
		failBurst, failAfter call // zero mode: none fails
		wantErr              bool
		wantP50s             map[string][]float64
		wantRunErr           map[string]string // substring; "" none
		wantAfter            []call
	}{
		"every burst": {
			wantP50s:  map[string][]float64{modePlain: {0.1, 0.1}, modeHit: {0.3, 0.3}},
			wantAfter: []call{{modePlain, 0}, {modeHit, 0}, {modePlain, 1}, {modeHit, 1}},
		},
		"a failed burst is left out, cleaned up, and the rounds go on": {
			failBurst:  call{modeHit, 0},
			wantP50s:   map[string][]float64{modePlain: {0.1, 0.1}, modeHit: {0.3}},
			wantRunErr: map[string]string{modeHit: "round 1: timed out"},
			wantAfter:  []call{{modePlain, 0}, {modeHit, 0}, {modePlain, 1}, {modeHit, 1}},
		},
		"a failed clean-up ends the rounds": {
			failAfter: call{modePlain, 0},
			wantErr:   true,
			wantP50s:  map[string][]float64{modePlain: {0.1}, modeHit: nil},
			wantAfter: []call{{modePlain, 0}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var after []call
			round := map[string]int{}
			runs, err := burstRounds(context.Background(), []string{modePlain, modeHit}, 2, roundSteps{
				burst: func(_ context.Context, mode string) ([]podTiming, error) {
					r := round[mode]
					round[mode]++
					if (call{mode, r}) == tc.failBurst {
						return nil, errors.New("timed out")
					}
					if mode == modeHit {
						return pods(300 * time.Millisecond), nil
					}
					return pods(100 * time.Millisecond), nil
				},
				checkouts: func(context.Context, string) (int, int, error) { return 1, 0, nil },
				after: func(_ context.Context, mode string, r int) error {
					after = append(after, call{mode, r})
					if (call{mode, r}) == tc.failAfter {
						return errors.New("clean-up failed")
					}
					return nil
				},
				progress: func(string, ...any) {},
			})
			if (err != nil) != tc.wantErr {
				t.Fatalf("burstRounds error = %v, want error %v", err, tc.wantErr)
			}
			if !slices.Equal(after, tc.wantAfter) {
				t.Errorf("clean-ups %v, want %v", after, tc.wantAfter)
			}
			for _, run := range runs {
				if !slices.Equal(run.RoundP50s, tc.wantP50s[run.Mode]) {
					t.Errorf("mode %s round p50s %v, want %v", run.Mode, run.RoundP50s, tc.wantP50s[run.Mode])
				}
				if run.Hits != len(tc.wantP50s[run.Mode]) || run.Stats.N != len(tc.wantP50s[run.Mode]) {
					t.Errorf("mode %s pools %d pods and %d hits, want %d", run.Mode, run.Stats.N, run.Hits, len(tc.wantP50s[run.Mode]))
				}
				if want := tc.wantRunErr[run.Mode]; (want == "") != (run.Error == "") || !strings.Contains(run.Error, want) {
					t.Errorf("mode %s error %q, want %q", run.Mode, run.Error, want)
				}
				if len(run.windows) != len(run.RoundP50s) {
					t.Errorf("mode %s has %d burst windows for %d rounds", run.Mode, len(run.windows), len(run.RoundP50s))
				}
				for _, w := range run.windows {
					if want := time.Duration(run.Stats.P50 * float64(time.Second)); !w.from.Equal(t0) || w.to.Sub(w.from) != want {
						t.Errorf("mode %s burst window %v–%v, want from %v for %v", run.Mode, w.from, w.to, t0, want)
					}
				}
				if math.IsNaN(run.Stats.P50) {
					t.Errorf("mode %s p50 is NaN, which JSON cannot carry", run.Mode)
				}
			}
		})
	}
}

func TestTakeTurns(t *testing.T) {
	type call struct {
		mode string
		i    int
	}
	modes := []string{modePlain, modeHit, modeOwnClaim}
	cases := map[string]struct {
		n         int
		fail      call // zero mode: none fails
		wantCalls []call
		wantN     []int
		wantErr   []bool
	}{
		"each mode's pod i before any mode's pod i+1, each mode first in turn": {
			n:         4,
			wantCalls: []call{{modePlain, 0}, {modeHit, 0}, {modeOwnClaim, 0}, {modeHit, 1}, {modeOwnClaim, 1}, {modePlain, 1}, {modeOwnClaim, 2}, {modePlain, 2}, {modeHit, 2}, {modePlain, 3}, {modeHit, 3}, {modeOwnClaim, 3}},
			wantN:     []int{4, 4, 4},
			wantErr:   []bool{false, false, false},
		},
		"a mode that fails takes no more turns, the others go on": {
			n:         3,
			fail:      call{modeHit, 1},
			wantCalls: []call{{modePlain, 0}, {modeHit, 0}, {modeOwnClaim, 0}, {modeHit, 1}, {modeOwnClaim, 1}, {modePlain, 1}, {modeOwnClaim, 2}, {modePlain, 2}},
			wantN:     []int{3, 1, 3},
			wantErr:   []bool{false, true, false},
		},
		"no pods": {
			wantN:   []int{0, 0, 0},
			wantErr: []bool{false, false, false},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var calls []call
			timings, errs := takeTurns(modes, tc.n, func(mode string, i int) (podTiming, error) {
				calls = append(calls, call{mode, i})
				if (call{mode, i}) == tc.fail {
					return podTiming{}, errors.New("timed out")
				}
				return podTiming{pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", mode, i)}}}, nil
			})
			if !slices.Equal(calls, tc.wantCalls) {
				t.Errorf("calls %v, want %v", calls, tc.wantCalls)
			}
			for m, mode := range modes {
				if len(timings[m]) != tc.wantN[m] {
					t.Errorf("mode %s has %d timings, want %d", mode, len(timings[m]), tc.wantN[m])
				}
				for i, tm := range timings[m] {
					if want := fmt.Sprintf("%s-%d", mode, i); tm.pod.Name != want {
						t.Errorf("mode %s timing %d is of pod %s, want %s", mode, i, tm.pod.Name, want)
					}
				}
				if (errs[m] != nil) != tc.wantErr[m] {
					t.Errorf("mode %s error %v, want error %v", mode, errs[m], tc.wantErr[m])
				}
			}
		})
	}
}

func TestAPIServerGC(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	cycle := func(from, to int, cpu time.Duration) cluster.GCCycle {
		return cluster.GCCycle{Start: at(from), End: at(to), CPU: cpu}
	}
	burst := window{from: at(1000), to: at(2000)}
	cases := map[string]struct {
		cycles []cluster.GCCycle
		want   float64
	}{
		"inside":             {cycles: []cluster.GCCycle{cycle(1200, 1500, 300*time.Millisecond)}, want: 0.3},
		"half past the end":  {cycles: []cluster.GCCycle{cycle(1800, 2200, 400*time.Millisecond)}, want: 0.2},
		"across the burst":   {cycles: []cluster.GCCycle{cycle(500, 2500, 400*time.Millisecond)}, want: 0.2},
		"before and after":   {cycles: []cluster.GCCycle{cycle(100, 900, time.Second), cycle(2100, 2300, time.Second)}},
		"of no span, inside": {cycles: []cluster.GCCycle{cycle(1500, 1500, 10*time.Millisecond)}, want: 0.01},
		"two":                {cycles: []cluster.GCCycle{cycle(1000, 1100, 100*time.Millisecond), cycle(1900, 2000, 50*time.Millisecond)}, want: 0.15},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := apiServerGC(tc.cycles, []window{burst, {from: at(5000), to: at(6000)}})
			if len(got) != 2 || math.Abs(got[0]-tc.want) > 1e-9 || got[1] != 0 {
				t.Errorf("apiServerGC = %v, want [%v 0]", got, tc.want)
			}
		})
	}
}
