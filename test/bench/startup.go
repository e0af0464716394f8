package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/st-tech/fluent-pvc-operator/apis/objects"
	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/test/cluster"
	"github.com/st-tech/fluent-pvc-operator/test/images"
)

// Start-up modes.
const (
	modePlain     = "a" // no PVC: the floor
	modeEphemeral = "b" // generic ephemeral volume on StorageClass standard
	modeMiss      = "c" // the operator, pool size 0: claim created at admission
	modeHit       = "d" // the operator, warm pool: claim taken at admission
	modeOwnClaim  = "e" // a Bound PVC of its own and d's sidecar, no operator: the floor of d
	modeUnstaged  = "f" // CSI tier: the operator, warm pool with staging Disabled (d's control)
	modeMoved     = "g" // CSI tier: the operator, warm pool staged on a node the pod cannot run on
	modeNoop      = "w" // control: a plain pod through a no-op webhook
)

var modeNames = map[string]string{
	modePlain:     "plain pod, no PVC",
	modeEphemeral: "generic ephemeral volume",
	modeMiss:      "operator, pool size 0 (miss)",
	modeHit:       "operator, warm pool (hit)",
	modeOwnClaim:  "own Bound PVC + d's sidecar, no operator",
	modeUnstaged:  "the operator, warm pool with staging Disabled (hit, attached on demand)",
	modeMoved:     "the operator, warm pool staged on a node the pod cannot run on (hit, moved)",
	modeNoop:      "control: plain pod, no-op webhook",
}

// FluentPVCs of the start-up modes.
const (
	fpvcMiss = "bench-miss" // pool size 0, used by c and later phases
	fpvcHit  = "bench-pool" // warm pool of N in the d namespaces
	// fpvcUnstaged is mode f's warm pool of N, spec.pool.staging Disabled.
	fpvcUnstaged = "bench-pool-unstaged"
	// fpvcMoved is mode g's warm pool of N, staged on a kwok node.
	fpvcMoved = "bench-pool-moved"
)

// poolOf is the FluentPVC whose pods mode runs, "" for a mode without one.
func poolOf(mode string) string {
	switch mode {
	case modeMiss:
		return fpvcMiss
	case modeHit:
		return fpvcHit
	case modeUnstaged:
		return fpvcUnstaged
	case modeMoved:
		return fpvcMoved
	}
	return ""
}

// startupRun is one mode run sequentially or as a burst.
type startupRun struct {
	Mode  string  `json:"mode"`
	Burst bool    `json:"burst"`
	Stats summary `json:"stats"`
	// The parts of Stats: the create call (admission included), from its
	// return to the first event with the pod bound to a node (scheduling,
	// and for b and c provisioning), and from there to Running (kwok).
	CreateCall  summary `json:"createCall"`
	ToScheduled summary `json:"toScheduled"`
	ToRunning   summary `json:"toRunning"`
	// Split is where the time after scheduling went on the CSI tier:
	// attach, stage and publish, container start.
	Split      *volumeSplit `json:"split,omitempty"`
	SplitError string       `json:"splitError,omitempty"`
	// Hits and Misses count the checkouts of the operator's modes, from
	// the claims' checkout annotation.
	Hits   int `json:"hits"`
	Misses int `json:"misses"`
	// StagedHits are the run's hits (CSI tier) by how the volume met the
	// pod: served and moved from the operator's
	// fluentpvc_pool_holders_removed_total, unstaged from its
	// fluentpvc_pool_staged_hits_total.
	StagedHits map[string]int `json:"stagedHits,omitempty"`
	// HoldersRemoved are its fluentpvc_pool_holders_removed_total over
	// the run, by reason.
	HoldersRemoved map[string]int `json:"holdersRemoved,omitempty"`
	// RoundP50s are the p50s of a burst's rounds (burstRounds), whose
	// pods the run pools.
	RoundP50s []float64 `json:"roundP50s,omitempty"`
	// RoundAPIServerGC is, for each of RoundP50s, the CPU time that
	// kube-apiserver's garbage collections took during that round's burst,
	// in seconds (apiServerGC); nil when they could not be read.
	RoundAPIServerGC []float64 `json:"roundApiserverGCSeconds,omitempty"`
	// windows are the rounds' bursts, as RoundP50s: from the first create
	// call to the last pod Running.
	windows []window
	// CPU is, for a burst run, the CPU time of the machine's processes
	// (cpuByProcess) from each round's first create call until its last
	// pod was Running, summed over the rounds, by process; in seconds.
	// Rounds that failed are left out, as from RoundP50s; the whole of it
	// when it could not be read in every other round.
	CPU map[string]float64 `json:"cpuSeconds,omitempty"`
	// Wall is how long the whole run took (a burst's rounds, not their
	// clean-ups).
	Wall  float64 `json:"wallSeconds"`
	Error string  `json:"error,omitempty"`
}

// podTiming is one pod's start-up; pod is as the create call returned it
// (admitted).
type podTiming struct {
	created, returned, bound, running time.Time
	pod                               *corev1.Pod
}

func (r startupRun) kind() string {
	if r.Burst {
		return "burst"
	}
	return "sequential"
}

func startupNamespace(mode string, burst bool) string {
	if burst {
		return "bench-" + mode + "-burst"
	}
	return "bench-" + mode + "-seq"
}

// podFor is pod name of mode in ns; on the real node its containers run
// busybox. A pod of mode e mounts claim name, which prepareOwnClaims made.
func (e *env) podFor(mode, ns, name string) *corev1.Pod {
	var p *corev1.Pod
	switch mode {
	case modeEphemeral:
		p = ephemeralPod(ns, name, e.storageClass())
	case modeMiss, modeHit, modeUnstaged:
		p = fluentPod(ns, name, poolOf(mode))
	case modeMoved:
		p = movedPod(fluentPod(ns, name, fpvcMoved))
	case modeOwnClaim:
		p = ownClaimPod(plainPod(ns, name), &e.fluentPVC(fpvcHit, 0).Spec, name)
	case modeNoop:
		p = noopPod(plainPod(ns, name))
	default:
		p = plainPod(ns, name)
	}
	if e.real {
		// Busybox in place of the app, with the app's mounts and envs
		// (b's volume, e's claim): the kubelet mounts only the volumes
		// that a container mounts.
		app := images.IdleApp()
		app.VolumeMounts = append(app.VolumeMounts, p.Spec.Containers[0].VolumeMounts...)
		app.Env = append(app.Env, p.Spec.Containers[0].Env...)
		p.Spec.Containers[0] = app
	}
	return p
}

// ownClaimPod is p as mode d's webhook would admit it with claim (the
// claim's and FluentPVC spec's volumes, mounts, envs and sidecar), but
// without the operator's binding label and pod-protection finalizer: no
// operator acts on it.
func ownClaimPod(p *corev1.Pod, spec *v1alpha1.FluentPVCSpec, claim string) *corev1.Pod {
	objects.InjectPod(p, spec, claim)
	delete(p.Labels, v1alpha1.BindingNameLabelKey)
	controllerutil.RemoveFinalizer(p, v1alpha1.PodProtectionFinalizer)
	return p
}

// prepareOwnClaims creates n PVCs named like mode e's pods in ns from the
// claim template of mode d's FluentPVC, each on a schedulable node (the
// annotation the operator's warm pool sets, round-robin over the nodes),
// and waits until all are Bound.
func (e *env) prepareOwnClaims(ctx context.Context, ns string, n int) error {
	var nodes corev1.NodeList
	if err := e.cl.List(ctx, &nodes); err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	names := schedulableNodes(nodes.Items)
	if len(names) == 0 {
		return errors.New("no schedulable node for mode e's claims")
	}
	tmpl := e.fluentPVC(fpvcHit, 0).Spec.PVCSpecTemplate
	for i := range n {
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{
				Name: fmt.Sprintf("%s-%d", modeOwnClaim, i), Namespace: ns,
				Annotations: map[string]string{v1alpha1.SelectedNodeAnnotationKey: names[i%len(names)]},
			},
			Spec: *tmpl.DeepCopy(),
		}
		if err := e.cl.Create(ctx, pvc); err != nil {
			return fmt.Errorf("creating PVC %s/%s: %w", ns, pvc.Name, err)
		}
	}
	bound := 0
	err := wait.PollUntilContextTimeout(ctx, poll, drainTimeout, true, func(ctx context.Context) (bool, error) {
		var pvcs corev1.PersistentVolumeClaimList
		if err := e.cache.List(ctx, &pvcs, client.InNamespace(ns)); err != nil {
			return false, err
		}
		bound = 0
		for _, c := range pvcs.Items {
			if c.Status.Phase == corev1.ClaimBound {
				bound++
			}
		}
		return bound >= n, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for mode e's %d PVCs in %s to be Bound (%d are): %w", n, ns, bound, err)
	}
	return nil
}

// schedulableNodes are the names of the nodes a pod without tolerations
// can run on: not cordoned, not tainted NoSchedule or NoExecute.
func schedulableNodes(nodes []corev1.Node) []string {
	var names []string
	for _, n := range nodes {
		if n.Spec.Unschedulable || slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
			return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
		}) {
			continue
		}
		names = append(names, n.Name)
	}
	slices.Sort(names)
	return names
}

// measureStartup creates n pods of mode in a fresh namespace, one at a time
// (each waits for the previous to be Running) or all at once, and returns
// the time from each pod's create call to its first Running event.
func (e *env) measureStartup(ctx context.Context, mode string, burst bool, n int) (startupRun, error) {
	return e.measureStartupEach(ctx, mode, burst, n, nil)
}

// measureStartupEach is measureStartup that, in a sequential run, calls
// before (unless nil) ahead of each pod's create call, outside its time.
func (e *env) measureStartupEach(ctx context.Context, mode string, burst bool, n int, before func(context.Context) error) (startupRun, error) {
	run := startupRun{Mode: mode, Burst: burst}
	start := time.Now()
	timings, err := e.startupTimings(ctx, mode, burst, n, before)
	if err != nil {
		return run, err
	}
	run.Wall = time.Since(start).Seconds()
	summarizeStartup(&run, timings)
	if e.csi {
		// A step not found leaves the split short, not the run void.
		sp, err := e.split(ctx, timings)
		run.Split = sp
		if err != nil {
			run.SplitError = err.Error()
			e.progress("mode %s: splitting the start-up: %v", mode, err)
		}
	}
	run.Hits, run.Misses, err = e.checkouts(ctx, mode, startupNamespace(mode, burst))
	return run, err
}

// startupTimings creates n pods of mode in its namespace, one at a time
// (each waits for the previous to be Running, after before unless nil) or
// all at once, and times each from its create call to its first Running
// event.
func (e *env) startupTimings(ctx context.Context, mode string, burst bool, n int, before func(context.Context) error) ([]podTiming, error) {
	ctx, cancel := context.WithTimeout(ctx, podTimeout+time.Duration(n)*30*time.Second)
	defer cancel()
	one := func(i int) (podTiming, error) { return e.startOne(ctx, mode, burst, i) }
	timings := make([]podTiming, n)
	if burst {
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { timings[i], errs[i] = one(i) })
		}
		wg.Wait()
		return timings, errors.Join(errs...)
	}
	for i := range n {
		if before != nil {
			if err := before(ctx); err != nil {
				return nil, err
			}
		}
		t, err := one(i)
		if err != nil {
			return nil, err
		}
		timings[i] = t
	}
	return timings, nil
}

// startOne creates pod i of mode in its namespace and times it from its
// create call to its first Running event.
func (e *env) startOne(ctx context.Context, mode string, burst bool, i int) (podTiming, error) {
	var t podTiming
	ns := startupNamespace(mode, burst)
	pod := e.podFor(mode, ns, fmt.Sprintf("%s-%d", mode, i))
	t.created = time.Now()
	if err := e.cl.Create(ctx, pod); err != nil {
		return t, fmt.Errorf("creating pod %s/%s: %w", ns, pod.Name, err)
	}
	t.returned = time.Now()
	t.pod = pod
	waitCtx, cancel := context.WithTimeout(ctx, podTimeout)
	defer cancel()
	var err error
	t.bound, t.running, err = e.running.await(waitCtx, pod)
	return t, err
}

// measureTurns runs modes one pod at a time, taking turns: pod i of each
// mode in order, then pod i+1, n rounds. Whatever else the node does
// meanwhile (a kubelet's minutely garbage collection of dead sandboxes,
// a pool's refill) then falls on every mode alike, which runs of one mode
// after another cannot promise. A run's Wall is the sum of its pods'
// start-ups. A mode that fails stops only itself.
func (e *env) measureTurns(ctx context.Context, modes []string, n int) ([]startupRun, []error) {
	ctx, cancel := context.WithTimeout(ctx, podTimeout+time.Duration(n*len(modes))*30*time.Second)
	defer cancel()
	timings, errs := takeTurns(modes, n, func(mode string, i int) (podTiming, error) { return e.startOne(ctx, mode, false, i) })
	runs := make([]startupRun, len(modes))
	for m, mode := range modes {
		runs[m] = startupRun{Mode: mode}
		if errs[m] != nil {
			continue
		}
		summarizeStartup(&runs[m], timings[m])
		for _, t := range timings[m] {
			runs[m].Wall += t.running.Sub(t.created).Seconds()
		}
		runs[m].Hits, runs[m].Misses, errs[m] = e.checkouts(ctx, mode, startupNamespace(mode, false))
	}
	return runs, errs
}

// takeTurns calls start for pod i of each of modes, for i from 0 to n-1,
// the first mode of round i being modes[i mod len(modes)] and the others
// following in order, so that no mode always starts its pod beside more
// live pods than another; it returns each mode's timings and the error
// that stopped it: a mode whose start fails takes no more turns.
func takeTurns(modes []string, n int, start func(mode string, i int) (podTiming, error)) ([][]podTiming, []error) {
	timings := make([][]podTiming, len(modes))
	errs := make([]error, len(modes))
	for i := range n {
		for k := range modes {
			m := (i + k) % len(modes)
			mode := modes[m]
			if errs[m] != nil {
				continue
			}
			t, err := start(mode, i)
			if err != nil {
				errs[m] = err
				continue
			}
			timings[m] = append(timings[m], t)
		}
	}
	return timings, errs
}

// summarizeStartup sets the start-up figures of run from its pods' timings.
func summarizeStartup(run *startupRun, timings []podTiming) {
	var total, call, sched, kwok []time.Duration
	for _, t := range timings {
		total = append(total, t.running.Sub(t.created))
		call = append(call, t.returned.Sub(t.created))
		// The bound event may arrive before the create call returns.
		sched = append(sched, max(0, t.bound.Sub(t.returned)))
		kwok = append(kwok, t.running.Sub(t.bound))
	}
	run.Stats, run.CreateCall, run.ToScheduled, run.ToRunning = summarize(total), summarize(call), summarize(sched), summarize(kwok)
}

// checkouts counts the hits and misses of mode's pods in ns, from their
// claims' checkout annotation; none for a mode without a pool. Claims
// being deleted belong to an earlier run.
func (e *env) checkouts(ctx context.Context, mode, ns string) (hits, misses int, err error) {
	if poolOf(mode) == "" {
		return 0, 0, nil
	}
	var pvcs corev1.PersistentVolumeClaimList
	if err := e.cl.List(ctx, &pvcs, client.InNamespace(ns), client.MatchingLabels{v1alpha1.ClaimRoleLabelKey: v1alpha1.ClaimRoleClaimed}); err != nil {
		return 0, 0, err
	}
	// A claim reserved ahead (-reserve-ahead) and handed to no pod of the
	// run is the pool's stock, not a checkout.
	var pods corev1.PodList
	if err := e.cl.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		return 0, 0, err
	}
	carried := map[string]bool{}
	for _, p := range pods.Items {
		carried[p.Labels[v1alpha1.BindingNameLabelKey]] = true
	}
	for _, c := range pvcs.Items {
		if _, _, reserved := claim.Reservation(&c); !c.DeletionTimestamp.IsZero() || (reserved && !carried[c.Name]) {
			continue
		}
		switch c.Annotations[v1alpha1.CheckoutAnnotationKey] {
		case v1alpha1.CheckoutHit:
			hits++
		case v1alpha1.CheckoutMiss:
			misses++
		}
	}
	return hits, misses, nil
}

// roundSteps are what burst rounds do for a mode's burst: before it
// (outside its time; nil: nothing), the burst itself, counting its
// checkouts, and after it, its clean-up (nil: nothing).
type roundSteps struct {
	before, after func(ctx context.Context, mode string, round int) error
	burst         func(ctx context.Context, mode string) ([]podTiming, error)
	checkouts     func(ctx context.Context, mode string) (hits, misses int, err error)
	progress      func(format string, args ...any)
}

// burstRounds runs rounds bursts of each of modes, the modes interleaved
// in each round (a, then w, ... in modes' order), each burst followed by
// its clean-up (steps.after), and returns one run per mode that pools its
// rounds' pods, with each round's p50. Interleaved rounds put every mode
// through the same spells of a busy or quiet machine, which one burst per
// mode cannot. A burst that fails leaves its round out of its mode's
// figures and its error on the run, and the rounds go on once it is
// cleaned up; an error of before, after or the count of checkouts ends
// them, since what follows would run on a cluster in an unknown state.
func burstRounds(ctx context.Context, modes []string, rounds int, steps roundSteps) ([]startupRun, error) {
	runs := make([]startupRun, len(modes))
	timings := make([][]podTiming, len(modes))
	for i, mode := range modes {
		runs[i] = startupRun{Mode: mode, Burst: true}
	}
	defer func() {
		for i := range runs {
			if len(timings[i]) > 0 {
				summarizeStartup(&runs[i], timings[i])
			}
		}
	}()
	for round := range rounds {
		for i, mode := range modes {
			if steps.before != nil {
				if err := steps.before(ctx, mode, round); err != nil {
					return runs, fmt.Errorf("mode %s burst, before round %d: %w", mode, round+1, err)
				}
			}
			start := time.Now()
			ts, err := steps.burst(ctx, mode)
			if err != nil {
				err = fmt.Errorf("round %d: %w", round+1, err)
				runs[i].Error = errors.Join(errorOf(runs[i].Error), err).Error()
				steps.progress("mode %s burst, round %d of %d failed: %v", mode, round+1, rounds, err)
			} else {
				runs[i].Wall += time.Since(start).Seconds()
				timings[i] = append(timings[i], ts...)
				var one startupRun
				summarizeStartup(&one, ts)
				runs[i].RoundP50s = append(runs[i].RoundP50s, one.Stats.P50)
				runs[i].windows = append(runs[i].windows, burstWindow(ts))
				hits, misses, err := steps.checkouts(ctx, mode)
				if err != nil {
					return runs, fmt.Errorf("mode %s burst, round %d: counting checkouts: %w", mode, round+1, err)
				}
				runs[i].Hits += hits
				runs[i].Misses += misses
				steps.progress("mode %s burst, round %d of %d: p50 %s p99 %s", mode, round+1, rounds, secs(one.Stats.P50), secs(one.Stats.P99))
			}
			if steps.after != nil {
				if err := steps.after(ctx, mode, round); err != nil {
					return runs, fmt.Errorf("mode %s burst, after round %d: %w", mode, round+1, err)
				}
			}
		}
	}
	return runs, nil
}

// window is a span of wall-clock time.
type window struct{ from, to time.Time }

// burstWindow spans a burst's pods, from the first create call to the last
// pod Running.
func burstWindow(ts []podTiming) window {
	var w window
	for i, t := range ts {
		if i == 0 || t.created.Before(w.from) {
			w.from = t.created
		}
		if t.running.After(w.to) {
			w.to = t.running
		}
	}
	return w
}

// apiServerGC is, for each window, the CPU time of the garbage
// collections in cycles that ran in it, in seconds: a cycle's CPU counts in
// the share of its wall-clock span inside the window (the whole of it for a
// cycle of no span that starts inside).
func apiServerGC(cycles []cluster.GCCycle, windows []window) []float64 {
	out := make([]float64, len(windows))
	for i, w := range windows {
		for _, c := range cycles {
			span := c.End.Sub(c.Start)
			from, to := maxTime(c.Start, w.from), minTime(c.End, w.to)
			switch {
			case span <= 0:
				if !c.Start.Before(w.from) && !c.Start.After(w.to) {
					out[i] += c.CPU.Seconds()
				}
			case to.After(from):
				out[i] += c.CPU.Seconds() * float64(to.Sub(from)) / float64(span)
			}
		}
	}
	return out
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// errorOf is msg as an error, nil for "".
func errorOf(msg string) error {
	if msg == "" {
		return nil
	}
	return errors.New(msg)
}

// startupPhase runs the four modes, each sequentially and as a burst.
// Sequential b and c (both wait about L per pod on the provisioner) run side
// by side when cfg.ParallelSlow is set; a and d always run alone.
func (e *env) startupPhase(ctx context.Context, res *results) error {
	n := e.cfg.N
	var errs []error
	record := func(run startupRun, err error) {
		if err != nil {
			run.Error = err.Error()
			errs = append(errs, fmt.Errorf("mode %s %s: %w", run.Mode, run.kind(), err))
		}
		e.progress("mode %s %-10s p50 %s p90 %s p99 %s (wall %.1fs) %s", run.Mode, run.kind(), secs(run.Stats.P50), secs(run.Stats.P90), secs(run.Stats.P99), run.Wall, run.Error)
		res.Startup = append(res.Startup, run)
	}
	for _, mode := range []string{modePlain, modeEphemeral, modeMiss, modeHit, modeOwnClaim, modeNoop} {
		for _, burst := range []bool{false, true} {
			if err := e.createNamespace(ctx, startupNamespace(mode, burst)); err != nil {
				return err
			}
		}
	}
	if err := e.createFluentPVC(ctx, fpvcMiss, 0); err != nil {
		return err
	}
	// The d pools fill first, so that a and d both run on a quiet cluster.
	e.progress("filling the warm pools of mode d (%d per namespace)", n)
	fillStart := time.Now()
	if err := e.createFluentPVC(ctx, fpvcHit, int32(n), startupNamespace(modeHit, false), startupNamespace(modeHit, true)); err != nil {
		return err
	}
	if err := e.waitPoolWarm(ctx, fpvcHit, int32(n), startupNamespace(modeHit, false), startupNamespace(modeHit, true)); err != nil {
		return err
	}
	res.PoolFillSeconds = time.Since(fillStart).Seconds()
	e.progress("pools full in %.1fs", res.PoolFillSeconds)
	// Mode e's claims, after the pools so as not to slow their fill.
	var wg sync.WaitGroup
	ownErrs := make([]error, 2)
	for i, burst := range []bool{false, true} {
		wg.Go(func() { ownErrs[i] = e.prepareOwnClaims(ctx, startupNamespace(modeOwnClaim, burst), n) })
	}
	wg.Wait()
	if err := errors.Join(ownErrs...); err != nil {
		return err
	}
	if err := e.settle(ctx); err != nil {
		return err
	}

	cleanup := func(mode string, burst bool) error {
		return e.cleanupStartup(ctx, startupNamespace(mode, burst), mode, n)
	}

	// The no-op webhook is registered only for w's runs.
	var stopNoop func() error
	startW := func(mode string) error {
		if mode != modeNoop {
			return nil
		}
		var err error
		stopNoop, err = e.startNoopWebhook(ctx)
		return err
	}
	stopW := func() error {
		if stopNoop == nil {
			return nil
		}
		err := stopNoop()
		stopNoop = nil
		if err != nil {
			return fmt.Errorf("stopping the no-op webhook: %w", err)
		}
		return nil
	}
	fast := []string{modePlain, modeNoop, modeHit, modeOwnClaim}
	for _, mode := range fast {
		if err := startW(mode); err != nil {
			return errors.Join(append(errs, err)...)
		}
		record(e.measureStartup(ctx, mode, false, n))
		if err := errors.Join(cleanup(mode, false), stopW()); err != nil {
			return errors.Join(append(errs, err)...)
		}
	}
	// The CPU time of each mode's bursts, by process, and the modes for
	// which it could not be read in every round.
	burstCPU, cpuUnread := map[string]map[string]float64{}, map[string]bool{}
	bursts, err := burstRounds(ctx, fast, e.cfg.BurstRounds, roundSteps{
		before: func(ctx context.Context, mode string, round int) error {
			if mode == modeOwnClaim && round > 0 {
				// The last round's claims went with its clean-up.
				if err := e.prepareOwnClaims(ctx, startupNamespace(mode, true), n); err != nil {
					return err
				}
				if err := e.settle(ctx); err != nil {
					return err
				}
			}
			return startW(mode)
		},
		burst: func(ctx context.Context, mode string) ([]podTiming, error) {
			before, cpuErr := cpuByProcess()
			ts, err := e.startupTimings(ctx, mode, true, n, nil)
			if after, afterErr := cpuByProcess(); err == nil && cpuErr == nil && afterErr == nil {
				if burstCPU[mode] == nil {
					burstCPU[mode] = map[string]float64{}
				}
				addCPUDelta(burstCPU[mode], before, after)
			} else if cpuErr = errors.Join(cpuErr, afterErr); cpuErr != nil {
				cpuUnread[mode] = true
				e.progress("mode %s burst: reading the processes' CPU time: %v", mode, cpuErr)
			}
			return ts, err
		},
		checkouts: func(ctx context.Context, mode string) (int, int, error) {
			return e.checkouts(ctx, mode, startupNamespace(mode, true))
		},
		after: func(_ context.Context, mode string, _ int) error {
			return errors.Join(stopW(), cleanup(mode, true))
		},
		progress: e.progress,
	})
	// The API server's garbage collections, which take a burst's CPU in
	// whichever round they fall.
	if cycles, unread, gcErr := e.kc.APIServerGCs(); gcErr != nil {
		e.progress("reading kube-apiserver's garbage collections: %v", gcErr)
	} else {
		if unread > 0 {
			e.progress("kube-apiserver's log has %d garbage collections whose line is unreadable (split by another); the rounds table leaves them out", unread)
		}
		for i := range bursts {
			bursts[i].RoundAPIServerGC = apiServerGC(cycles, bursts[i].windows)
		}
	}
	for _, run := range bursts {
		if !cpuUnread[run.Mode] {
			run.CPU = burstCPU[run.Mode]
		}
		record(run, errorOf(run.Error))
	}
	if err != nil {
		return errors.Join(append(errs, err, stopW())...)
	}
	if e.cfg.SkipSlow {
		return errors.Join(errs...)
	}
	// Its warm PVCs are deleted with it, in the background of sequential
	// b and c, which wait ~L per pod anyway; they are gone before the
	// bursts of b and c.
	if err := e.cl.Delete(ctx, fluentPVCRef(fpvcHit)); client.IgnoreNotFound(err) != nil {
		return errors.Join(append(errs, fmt.Errorf("deleting FluentPVC %s: %w", fpvcHit, err))...)
	}
	hitGone := func() error {
		if err := e.deleteFluentPVC(ctx, fpvcHit); err != nil {
			return err
		}
		return e.waitNoPVCs(ctx, startupNamespace(modeHit, false), startupNamespace(modeHit, true))
	}

	// The later phases' pools fill while sequential b and c run: a little
	// background work against runs that wait ~L per pod anyway.
	if err := e.prefillPools(ctx); err != nil {
		return errors.Join(append(errs, err)...)
	}
	// Sequential b and c.
	if e.cfg.ParallelSlow {
		var b, c startupRun
		var bErr, cErr error
		var wg sync.WaitGroup
		wg.Go(func() { b, bErr = e.measureStartup(ctx, modeEphemeral, false, n) })
		wg.Go(func() { c, cErr = e.measureStartup(ctx, modeMiss, false, n) })
		wg.Wait()
		record(b, bErr)
		record(c, cErr)
		for _, mode := range []string{modeEphemeral, modeMiss} {
			if err := cleanup(mode, false); err != nil {
				return errors.Join(append(errs, err)...)
			}
		}
	} else {
		for _, mode := range []string{modeEphemeral, modeMiss} {
			record(e.measureStartup(ctx, mode, false, n))
			if err := cleanup(mode, false); err != nil {
				return errors.Join(append(errs, err)...)
			}
		}
	}
	if err := hitGone(); err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, mode := range []string{modeEphemeral, modeMiss} {
		record(e.measureStartup(ctx, mode, true, n))
		if err := cleanup(mode, true); err != nil {
			return errors.Join(append(errs, err)...)
		}
	}
	return errors.Join(errs...)
}

// cleanupStartup deletes the pods of a run of mode in ns and waits until
// nothing of it works on: claims drained, mode d's pool of n refilled,
// mode e's claims deleted, the operator's workqueues empty.
func (e *env) cleanupStartup(ctx context.Context, ns, mode string, n int) error {
	start := time.Now()
	defer func() { e.progress("cleaned up %s in %.1fs", ns, time.Since(start).Seconds()) }()
	if err := e.deletePodsAndDrain(ctx, ns); err != nil {
		return err
	}
	e.progress("drained %s in %.1fs", ns, time.Since(start).Seconds())
	switch mode {
	case modeHit, modeUnstaged:
		// The pool refilled what the pods took; wait for it (and on the
		// CSI tier for d's to be staged again) so that the refill does
		// not overlap the next run.
		if err := e.waitPoolWarm(ctx, poolOf(mode), int32(n), ns); err != nil {
			return err
		}
		if e.csi && mode == modeHit {
			if err := e.waitPoolStaged(ctx, fpvcHit, ns, n, cluster.RealNodeName); err != nil {
				return err
			}
		}
	case modeOwnClaim:
		if err := e.cl.DeleteAllOf(ctx, &corev1.PersistentVolumeClaim{}, client.InNamespace(ns)); err != nil {
			return fmt.Errorf("deleting the PVCs of %s: %w", ns, err)
		}
		fallthrough
	default:
		// The ephemeral claims go with their pods. The empty
		// namespaces stay until the cluster goes.
		if err := e.waitNoPVCs(ctx, ns); err != nil {
			return err
		}
	}
	return e.settle(ctx)
}

func secs(s float64) string { return fmt.Sprintf("%.3fs", s) }
