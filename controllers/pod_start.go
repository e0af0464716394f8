package controllers

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/objects"
	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/expectations"
)

// A hit's admission makes one API write, the checkout, or none from a
// reservation. Two writes follow it that the pod's start does not need,
// and each waits as long as the pod's data allows (Options.PodStartWait,
// the one wait for starting pods):
//
//   - The claim's own record of the pod (claim.RecordPod) waits while the
//     pod is not scheduled (awaitScheduling), up to PodStartWait after the
//     pod's creation. A pod with no node has run nothing, so it cannot
//     have written to the claim, and the claim itself records the
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
//
// The pool's refill of a warm PVC taken does not wait: measured on the
// real node, holding it back while pods start changed no pod's start.

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
