package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/claim"
)

const (
	fpvcBurst      = "bench-burst"
	burstNamespace = "bench-burst"
)

// burstRunTimeout bounds the wait for the burst's pods to run, and
// burstRefillTimeout the wait for the pool to be warm again; both count
// from the burst's end and run side by side.
const (
	burstRunTimeout    = time.Minute
	burstRefillTimeout = time.Minute
)

// burstResult is a burst of pods against a smaller warm pool.
type burstResult struct {
	Pods int `json:"pods"`
	Pool int `json:"pool"`
	// Hits and Misses are read from the claims' checkout annotation.
	Hits   int `json:"hits"`
	Misses int `json:"misses"`
	// Claims is the number of distinct claims the pods use; Shared the
	// claims used by more than one pod; NoClaim the pods without one.
	Claims  int `json:"claims"`
	Shared  int `json:"shared"`
	NoClaim int `json:"noClaim"`
	// CreateSeconds is from the first create call to the last one's return.
	CreateSeconds float64 `json:"createSeconds"`
	// RefillSeconds is from the burst's end (last create returned) until
	// the bench's PVC informer shows Pool warm (claim-role=warm), Bound
	// PVCs in the namespace again. Refilled is false if that did not
	// happen within burstRefillTimeout; WarmAtTimeout is then the count
	// seen last. MinWarm is the fewest warm PVCs seen after the burst's end.
	RefillSeconds float64 `json:"refillSeconds"`
	Refilled      bool    `json:"refilled"`
	WarmAtTimeout int     `json:"warmAtTimeout,omitempty"`
	MinWarm       int     `json:"minWarm"`
	// Refill is where the refill's time went, over the warm PVCs created
	// from the burst's start.
	Refill refillBreakdown `json:"refill"`
	// Startup is create to Running of the burst's pods; NotRunning are
	// those not Running within burstRunTimeout, with a few reasons.
	Startup       summary  `json:"startup"`
	NotRunning    int      `json:"notRunning"`
	NotRunningWhy []string `json:"notRunningWhy,omitempty"`
	Error         string   `json:"error,omitempty"`
}

// refillText is the refill figure as the tables show it.
func (r *burstResult) refillText() string {
	if r.Refilled {
		return fmt.Sprintf("%.1fs", r.RefillSeconds)
	}
	return fmt.Sprintf("not warm within %s (%d of %d warm)", burstRefillTimeout, r.WarmAtTimeout, r.Pool)
}

func (e *env) burstPhase(ctx context.Context, res *results) error {
	r, err := e.burst(ctx)
	if err != nil {
		r.Error = err.Error()
	}
	res.Burst = &r
	e.progress("burst %d vs pool %d: %d hits, %d misses, %d claims, %d shared, %d without a claim, %d not Running; pool warm again after the burst's end: %s %s",
		r.Pods, r.Pool, r.Hits, r.Misses, r.Claims, r.Shared, r.NoClaim, r.NotRunning, r.refillText(), r.Error)
	return err
}

// warmBound counts the Bound PVCs of ns's pool in the bench's cache, as
// the pool counts them: warm PVCs, and claims reserved ahead that no pod
// carries (handedOut names the claims the burst's pods carry: a claim
// handed out from a reservation keeps it until its binding records the
// pod).
func (e *env) warmBound(ctx context.Context, ns string, handedOut map[string]bool) (int, error) {
	var pvcs corev1.PersistentVolumeClaimList
	if err := e.cache.List(ctx, &pvcs, client.InNamespace(ns)); err != nil {
		return 0, err
	}
	n := 0
	for _, c := range pvcs.Items {
		if c.Status.Phase != corev1.ClaimBound || c.DeletionTimestamp != nil {
			continue
		}
		_, _, reserved := claim.Reservation(&c)
		if claim.StateOf(&c) == claim.Warm || (reserved && !handedOut[c.Name]) {
			n++
		}
	}
	return n, nil
}

func (e *env) burst(ctx context.Context) (r burstResult, err error) {
	r = burstResult{Pods: e.cfg.BurstPods, Pool: e.cfg.BurstPool}
	ns := burstNamespace
	size := int32(r.Pool)
	if err := e.createNamespace(ctx, ns); err != nil {
		return r, err
	}
	defer func() {
		// The FluentPVC's deletion goes first, so that its pool stops
		// refilling; it is gone once its bindings are, which deleting the
		// namespace releases without draining.
		var delErr error
		if err := e.cl.Delete(ctx, fluentPVCRef(fpvcBurst)); client.IgnoreNotFound(err) != nil {
			delErr = fmt.Errorf("deleting FluentPVC %s: %w", fpvcBurst, err)
		}
		errs := []error{err, delErr, e.deleteNamespace(ctx, ns, true), e.deleteFluentPVC(ctx, fpvcBurst)}
		err = errors.Join(errs...)
	}()
	if err := e.createFluentPVC(ctx, fpvcBurst, size, ns); err != nil {
		return r, err
	}
	if err := e.waitPoolWarm(ctx, fpvcBurst, size, ns); err != nil {
		return r, err
	}
	if err := e.settle(ctx); err != nil {
		return r, err
	}

	pods := make([]*corev1.Pod, r.Pods)
	for i := range pods {
		pods[i] = fluentPod(ns, fmt.Sprintf("burst-%d", i), fpvcBurst)
	}
	start := time.Now()
	_, end, err := e.createPods(ctx, pods, r.Pods)
	if err != nil {
		return r, err
	}
	r.CreateSeconds = end.Sub(start).Seconds()
	handedOut := map[string]bool{}
	for _, p := range pods {
		if name := podClaim(p); name != "" {
			handedOut[name] = true
		}
	}

	// From the burst's end, side by side and each bounded: the pool warm
	// again (from the PVC informer's cache) and the pods Running.
	var wg sync.WaitGroup
	var refillErr error
	wg.Go(func() {
		r.MinWarm = r.Pool
		last := 0
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, burstRefillTimeout, true, func(ctx context.Context) (bool, error) {
			n, err := e.warmBound(ctx, ns, handedOut)
			if err != nil {
				return false, err
			}
			now := time.Now()
			last = n
			r.MinWarm = min(r.MinWarm, n)
			if n < r.Pool {
				return false, nil
			}
			switch {
			case r.MinWarm < r.Pool:
				r.Refilled = true
				r.RefillSeconds = now.Sub(end).Seconds()
				return true, nil
			case now.Sub(end) > time.Second:
				// Never seen short: the checkouts reach the cache within
				// milliseconds, so the burst took nothing from the pool.
				r.Refilled = true
				return true, nil
			}
			return false, nil
		})
		if !r.Refilled {
			r.WarmAtTimeout = last
			if err != nil && !wait.Interrupted(err) {
				refillErr = fmt.Errorf("watching the pool refill: %w", err)
			}
		}
	})
	// A pod's start-up counts from the burst's start. Pods not Running
	// within burstRunTimeout are counted, with why, not waited for.
	var durs []time.Duration
	wg.Go(func() {
		waitCtx, cancelWait := context.WithTimeout(ctx, burstRunTimeout)
		defer cancelWait()
		var late []types.NamespacedName
		for _, p := range pods {
			key := types.NamespacedName{Namespace: ns, Name: p.Name}
			_, at, err := e.running.await(waitCtx, p)
			if err != nil {
				late = append(late, key)
				continue
			}
			durs = append(durs, at.Sub(start))
		}
		r.NotRunning = len(late)
		for _, key := range late[:min(3, len(late))] {
			r.NotRunningWhy = append(r.NotRunningWhy, e.whyPending(ctx, key))
		}
	})
	wg.Wait()
	r.Startup = summarize(durs)
	r.Refill = breakdown(e.pvcs.warmSince(ns, start), start)
	if refillErr != nil {
		return r, refillErr
	}
	return r, e.checkClaims(ctx, ns, &r)
}

// checkClaims counts hits and misses and shared claims from the pods and
// claims of ns.
func (e *env) checkClaims(ctx context.Context, ns string, r *burstResult) error {
	// Only the measured pods: the pool's binder pods run here too.
	var pods corev1.PodList
	if err := e.cl.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{measureLabelKey: "true"}); err != nil {
		return err
	}
	var pvcs corev1.PersistentVolumeClaimList
	if err := e.cl.List(ctx, &pvcs, client.InNamespace(ns)); err != nil {
		return err
	}
	byName := map[string]*corev1.PersistentVolumeClaim{}
	for i := range pvcs.Items {
		byName[pvcs.Items[i].Name] = &pvcs.Items[i]
	}
	users := map[string]int{}
	for _, p := range pods.Items {
		claim := ""
		for _, v := range p.Spec.Volumes {
			if v.PersistentVolumeClaim != nil {
				claim = v.PersistentVolumeClaim.ClaimName
			}
		}
		if claim == "" {
			r.NoClaim++
			continue
		}
		users[claim]++
	}
	r.Claims = len(users)
	var errs []error
	for claim, n := range users {
		if n > 1 {
			r.Shared++
		}
		pvc, ok := byName[claim]
		if !ok {
			errs = append(errs, fmt.Errorf("claim %s/%s of a pod does not exist", ns, claim))
			continue
		}
		switch pvc.Annotations[v1alpha1.CheckoutAnnotationKey] {
		case v1alpha1.CheckoutHit:
			r.Hits++
		case v1alpha1.CheckoutMiss:
			r.Misses++
		default:
			errs = append(errs, fmt.Errorf("claim %s/%s has no %s annotation", ns, claim, v1alpha1.CheckoutAnnotationKey))
		}
	}
	if len(pods.Items) != r.Pods {
		errs = append(errs, fmt.Errorf("%d pods in %s, want %d", len(pods.Items), ns, r.Pods))
	}
	return errors.Join(errs...)
}

// whyPending describes a pod that is not Running: its phase, node and
// PodScheduled condition, and its claim's phase.
func (e *env) whyPending(ctx context.Context, key types.NamespacedName) string {
	var p corev1.Pod
	if err := e.cl.Get(ctx, key, &p); err != nil {
		return fmt.Sprintf("%s: %v", key.Name, err)
	}
	why := fmt.Sprintf("%s: phase %s, node %q", p.Name, p.Status.Phase, p.Spec.NodeName)
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue {
			why += fmt.Sprintf(", not scheduled: %s", c.Message)
		}
	}
	for _, v := range p.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		var c corev1.PersistentVolumeClaim
		if err := e.cl.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: v.PersistentVolumeClaim.ClaimName}, &c); err == nil {
			why += fmt.Sprintf(", claim %s %s (%s)", c.Name, c.Status.Phase, c.Annotations[v1alpha1.CheckoutAnnotationKey])
		}
	}
	return why
}
