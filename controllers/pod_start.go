package controllers

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/objects"
	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/expectations"
)

// A hit's admission makes one API write, the checkout. Three writes follow
// it that the pod's start does not need, and each waits as long as the
// pod's data allows, so that a burst of pods meets the API server with
// little else:
//
//   - The claim's own record of the pod (claim.RecordPod) waits while the
//     pod is not scheduled (awaitScheduling), up to Options.PodStartWait
//     after the pod's creation. A pod with no node has run nothing, so it
//     cannot have written to the claim, and the claim itself records the
//     binding's name and the admission time meanwhile. Once the pod is
//     scheduled its containers may write, and from then on the claim
//     records it, so that a copy of the pod's manifest is refused and the
//     claim is drained even if the pod is force-deleted. The record is a
//     write of a built-in object (claim.OpGuardedPatch), which costs the
//     API server a fraction of a custom resource's create.
//   - The binding waits while its pod lives, up to PodStartWait after the
//     pod's creation (recordHeld), and is made at once when the pod goes
//     or finishes. The claim records the pod meanwhile; the binding is
//     made from that record, as one lost is made again.
//   - The pool's refill of the warm PVC taken waits while any pod with the
//     opt-in label is starting (startGate), up to PodStartWait after the
//     pod's creation (refillHeld). A refill has no part in any pod's data.
//
// The pool's reconciles themselves, which read every warm PVC, node and
// VolumeAttachment of the FluentPVC and plan each namespace, wait too
// (poolDeferral): each checkout's event would start one while the pod
// that took the PVC starts, and their CPU is taken from that start on a
// busy node. They wait at most PodStartWait in a row, and not at all for
// a FluentPVC whose spec changed, that is being deleted, whose last
// reconcile failed (it keeps the workqueue's backoff), or whose pool a
// pod missed within PodStartWait (the pool is short, and its refill is
// what the pods to come need).

// startingValue is the podStartingIndex value of a starting pod.
const startingValue = "starting"

// startingKey is the podStartingIndex value of a pod: startingValue while
// it starts (objects.PodStarting), none otherwise, nor for the pool's own
// holder pods.
func startingKey(obj client.Object) []string {
	if pod, ok := obj.(*corev1.Pod); ok && objects.PodStarting(pod) && !objects.IsHolder(pod) {
		return []string{startingValue}
	}
	return nil
}

// startPoll is how often a write held back for starting pods looks again.
const startPoll = 100 * time.Millisecond

// podCreated is when pod was created, for the waits timed from it: its
// creationTimestamp, which the API server keeps in whole seconds, made
// precise by the admission time that its claim or binding records
// (annotations), when that falls within the same second. The admission
// precedes the creation by moments. An admission time outside that
// second, stamped by a replica whose clock is off, is not used: the
// creationTimestamp alone is on the API server's clock, as the waits'
// now is. A wait timed from the creationTimestamp alone would end up to
// a second early: a binding meant to wait 2 s for its pod's start would
// wait 1 to 2 s. The zero time for no pod.
func podCreated(pod *corev1.Pod, annotations map[string]string) time.Time {
	if pod == nil {
		return time.Time{}
	}
	created := pod.CreationTimestamp.Time
	if at, ok := claim.AdmittedAt(annotations); ok && !at.Before(created) && at.Before(created.Add(time.Second)) {
		return at
	}
	return created
}

// awaitScheduling is how long, at now, the binding of a claim waits for
// its pod, as cached and created at created (podCreated), to be
// scheduled: while the pod starts with no node, up to wait after its
// creation; 0 to make the binding now. The pod's scheduling wakes the
// binding's reconciler sooner.
func awaitScheduling(pod *corev1.Pod, created, now time.Time, wait time.Duration) time.Duration {
	if wait <= 0 || !objects.PodStarting(pod) || pod.Spec.NodeName != "" {
		return 0
	}
	return max(0, created.Add(wait).Sub(now))
}

// recordHeld is how long, at now, the binding of a scheduled pod, as
// cached or read live (nil: gone) and created at created (podCreated),
// waits, and a binding's record of its pod on a claim that does not
// record it yet: up to wait after the pod's creation while the pod lives;
// 0 to write it now, as for a pod being deleted or finished, whose drain
// the binding and the record must precede.
func recordHeld(pod *corev1.Pod, created, now time.Time, wait time.Duration) time.Duration {
	if pod == nil || wait <= 0 || !pod.DeletionTimestamp.IsZero() || podFinished(pod) {
		return 0
	}
	return max(0, created.Add(wait).Sub(now))
}

// holdFollowUp is how long, at now, a write that waits for starting pods
// (starting), up to wait after start, waits before it looks again:
// startPoll, or what is left if less; 0 to make it now.
func holdFollowUp(start time.Time, starting bool, now time.Time, wait time.Duration) time.Duration {
	if wait <= 0 || !starting {
		return 0
	}
	left := start.Add(wait).Sub(now)
	if left <= 0 {
		return 0
	}
	return min(left, startPoll)
}

// startQuiet is how long after the cache last saw a pod with the opt-in
// label created or started, refills still wait: pods created one after
// another, each once the last is Running, leave gaps shorter than this
// between them.
const startQuiet = 250 * time.Millisecond

// startGate tells whether pods with the opt-in label are starting, for
// the refills (refillHeld) and the pool's reconciles (poolDeferral) that
// wait for them, and which pools pods missed lately. A nil gate sees
// none.
type startGate struct {
	// reader is the cache, with podStartingIndex.
	reader client.Reader
	// clock is the local one (not the API server's, whose estimate moves
	// with every response): it times startQuiet, the misses and the pool
	// reconciles' waits in a row.
	clock clock.PassiveClock
	// last is when (unix nanoseconds, on clock) the cache last showed a
	// pod created or started.
	last atomic.Int64
	// misses is when (unix nanoseconds, on clock) the cache last showed
	// a claim created on a miss, by FluentPVC name.
	misses sync.Map
}

func newStartGate(r client.Reader, clk clock.PassiveClock) *startGate {
	return &startGate{reader: r, clock: clk}
}

// observe records a pod's event, old nil for its creation: a pod created,
// or one that started (not one being deleted). Holders are the pool's
// own.
func (g *startGate) observe(old, pod *corev1.Pod) {
	if objects.IsHolder(pod) {
		return
	}
	if old == nil || objects.PodStarting(old) && !objects.PodStarting(pod) && pod.DeletionTimestamp.IsZero() {
		g.last.Store(g.clock.Now().UnixNano())
	}
}

// handler feeds the gate from the pods' informer.
func (g *startGate) handler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if pod, ok := obj.(*corev1.Pod); ok {
				g.observe(nil, pod)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			old, ok := oldObj.(*corev1.Pod)
			pod, ok2 := newObj.(*corev1.Pod)
			if ok && ok2 {
				g.observe(old, pod)
			}
		},
	}
}

// observeClaim records a claim created on a miss (its checkout
// annotation): the pool of its FluentPVC is short, and its reconciles do
// not wait for starting pods for a while (missedWithin). Claims listed
// when the informer starts are not news.
func (g *startGate) observeClaim(pvc *corev1.PersistentVolumeClaim, initial bool) {
	name := pvc.Labels[v1alpha1.FluentPVCNameLabelKey]
	if initial || name == "" || pvc.Annotations[v1alpha1.CheckoutAnnotationKey] != v1alpha1.CheckoutMiss {
		return
	}
	g.misses.Store(name, g.clock.Now().UnixNano())
}

// claimHandler feeds the gate from the claims' informer.
func (g *startGate) claimHandler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			if pvc, ok := obj.(*corev1.PersistentVolumeClaim); ok {
				g.observeClaim(pvc, initial)
			}
		},
	}
}

// missedWithin says whether the cache showed a claim of FluentPVC name
// created on a miss less than d ago. A nil gate saw none.
func (g *startGate) missedWithin(name string, d time.Duration) bool {
	if g == nil {
		return false
	}
	v, ok := g.misses.Load(name)
	return ok && g.clock.Since(time.Unix(0, v.(int64))) < d
}

// forget drops what the gate knows of FluentPVC name.
func (g *startGate) forget(name string) {
	if g != nil {
		g.misses.Delete(name)
	}
}

// poolDeferral is how long, at now, the pool reconcile of a FluentPVC
// waits for starting pods (busy) before it looks again: startPoll, or
// what is left of wait since the first reconcile that waited (since) if
// less; 0 to reconcile now, as for a FluentPVC that must not wait
// (urgent: its spec changed, it is being deleted, its last reconcile
// failed, or a pod missed its pool lately). Waits end after wait in a row, however many pods start.
func poolDeferral(busy, urgent bool, since, now time.Time, wait time.Duration) time.Duration {
	if !busy || urgent {
		return 0
	}
	return holdFollowUp(since, true, now, wait)
}

// busy says whether, at now (on the API server's clock), pods are
// starting: the cache showed a pod created or started less than
// startQuiet ago, or a pod created less than wait ago is starting
// (podsStarting).
func (g *startGate) busy(ctx context.Context, now time.Time, wait time.Duration) (bool, error) {
	if g == nil {
		return false, nil
	}
	if last := g.last.Load(); last != 0 && g.clock.Since(time.Unix(0, last)) < startQuiet {
		return true, nil
	}
	return podsStarting(ctx, g.reader, now, wait)
}

// podsStarting says whether a pod with the opt-in label, created less than
// wait before now, is starting, from the cache's podStartingIndex. A pod
// pending for longer (unschedulable, say) holds nothing back.
func podsStarting(ctx context.Context, r client.Reader, now time.Time, wait time.Duration) (bool, error) {
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.MatchingFields{podStartingIndex: startingValue}, client.UnsafeDisableDeepCopy); err != nil {
		return false, fmt.Errorf("listing starting pods: %w", err)
	}
	for i := range pods.Items {
		if now.Sub(pods.Items[i].CreationTimestamp.Time) < wait {
			return true, nil
		}
	}
	return false, nil
}

// maxPodStartWait is the longest Options.PodStartWait: shorter than
// expectations.TTL, so that a pod seen as soon as it was created is still
// remembered (seenPods) when the binding's wait for its scheduling ends,
// with room for a requeue woken late.
const maxPodStartWait = 20 * time.Second

// seenPods remember, by checkout of a claim (seenKey), the pod whose
// binding waits for it to be scheduled (awaitScheduling), so that the
// binding made once the wait is over records that pod even if it went
// meanwhile: the API server deletes a pod with no node at once, and the
// cache may show nothing but its absence. They also remember, for
// expectations.TTL, the pod a new binding recorded that the claim does not
// record yet, so that the binding, lost before the claim's record, is made
// again with it. A warm PVC keeps its name from one checkout to the next,
// so a pod remembered for one checkout is never taken for the next one's.
// They are lost with the process, or after the TTL: a binding made then
// without its pod takes the path of a pod deleted before the cache showed
// it (observeUncachedPod), and its claim is drained.
type seenPods = expectations.Expectations[seenKey, v1alpha1.ObjectIdentity]

// seenKey is one checkout of a claim: its namespace and name, and the
// checkout's ID (v1alpha1.CheckoutIDAnnotationKey; "" for a claim handed
// out by an earlier version, which records none).
type seenKey struct {
	claim    client.ObjectKey
	checkout string
}

// seenKeyOf is the seenKey of pvc's current checkout.
func seenKeyOf(pvc *corev1.PersistentVolumeClaim) seenKey {
	return seenKey{claim: client.ObjectKeyFromObject(pvc), checkout: pvc.Annotations[v1alpha1.CheckoutIDAnnotationKey]}
}
