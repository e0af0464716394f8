package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
)

const (
	fpvcBurst      = "bench-burst"
	burstNamespace = "bench-burst"
)

// burstRunTimeout bounds the wait for the burst's pods to run.
const burstRunTimeout = time.Minute

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
	// the FluentPVC's status shows the pool full again.
	RefillSeconds float64 `json:"refillSeconds"`
	// Startup is create to Running of the burst's pods; NotRunning are
	// those not Running within burstRunTimeout, with a few reasons.
	Startup       summary  `json:"startup"`
	NotRunning    int      `json:"notRunning"`
	NotRunningWhy []string `json:"notRunningWhy,omitempty"`
	Error         string   `json:"error,omitempty"`
}

func (e *env) burstPhase(ctx context.Context, res *results) error {
	r, err := e.burst(ctx)
	if err != nil {
		r.Error = err.Error()
	}
	res.Burst = &r
	e.progress("burst %d vs pool %d: %d hits, %d misses, %d claims, %d shared, refill %.1fs after the burst's end %s",
		r.Pods, r.Pool, r.Hits, r.Misses, r.Claims, r.Shared, r.RefillSeconds, r.Error)
	return err
}

func (e *env) burst(ctx context.Context) (r burstResult, err error) {
	r = burstResult{Pods: e.cfg.BurstPods, Pool: e.cfg.BurstPool}
	ns := burstNamespace
	size := int32(r.Pool)
	if err := e.createNamespace(ctx, ns); err != nil {
		return r, err
	}
	defer func() {
		// Deleting the namespace releases the claims without draining them.
		errs := []error{err, e.deleteNamespace(ctx, ns, true), e.deleteFluentPVC(ctx, fpvcBurst)}
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

	// Watch the pool drop below full, then come back.
	var mu sync.Mutex
	var warmAgain time.Time
	refilled := make(chan struct{})
	dropped := false
	e.fpvcs.watch(func(f *v1alpha1.FluentPVC, at time.Time) bool {
		if f.Name != fpvcBurst {
			return false
		}
		w, _ := poolWarm(f, ns)
		if !dropped {
			dropped = w < size
			return false
		}
		if w < size {
			return false
		}
		mu.Lock()
		warmAgain = at
		mu.Unlock()
		close(refilled)
		return true
	})

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

	refillCtx, cancel := context.WithTimeout(ctx, drainTimeout)
	defer cancel()
	select {
	case <-refilled:
		mu.Lock()
		r.RefillSeconds = warmAgain.Sub(end).Seconds()
		mu.Unlock()
	case <-refillCtx.Done():
		return r, fmt.Errorf("the pool did not refill: %w", refillCtx.Err())
	}

	// A pod's start-up counts from the burst's start. Pods not Running
	// within burstRunTimeout are counted, with why, not waited for.
	var durs []time.Duration
	waitCtx, cancelWait := context.WithTimeout(ctx, burstRunTimeout)
	defer cancelWait()
	for _, p := range pods {
		key := types.NamespacedName{Namespace: ns, Name: p.Name}
		_, at, err := e.running.await(waitCtx, key)
		if err != nil {
			r.NotRunning++
			if len(r.NotRunningWhy) < 3 {
				r.NotRunningWhy = append(r.NotRunningWhy, e.whyPending(ctx, key))
			}
			continue
		}
		durs = append(durs, at.Sub(start))
	}
	r.Startup = summarize(durs)

	if err := e.checkClaims(ctx, ns, &r); err != nil {
		return r, err
	}
	// The FluentPVC goes first, so that its pool stops refilling.
	return r, client.IgnoreNotFound(e.cl.Delete(ctx, fluentPVCRef(fpvcBurst)))
}

// checkClaims counts hits and misses and shared claims from the pods and
// claims of ns.
func (e *env) checkClaims(ctx context.Context, ns string, r *burstResult) error {
	var pods corev1.PodList
	if err := e.cl.List(ctx, &pods, client.InNamespace(ns)); err != nil {
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
