package claim

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
)

// HolderAdmitWindow is how long after its request a holder may be
// admitted: the mount webhook refuses an older one (HolderRequested), so a
// create call retried for long (client-go resends on 429 and on 5xx with
// Retry-After), or one that outlived a leader, makes no holder late.
const HolderAdmitWindow = 30 * time.Second

// AdmissionBound is how long after its admission an object may still be
// stored: the kube-apiserver's default --request-timeout (1m), within
// which an admitted object is stored or not at all, and 30 s for the
// offset between clocks and for a write committed as its request times
// out. A pod admitted with a claim is created within it, and so is a
// holder admitted within HolderAdmitWindow of its request.
const AdmissionBound = 90 * time.Second

// holderRequestLive says whether a holder request made at at may still,
// at now, see its holder created: within HolderAdmitWindow, then
// AdmissionBound. Until then it keeps its warm PVC from being checked out
// while no holder carrying it has been seen.
func holderRequestLive(at, now time.Time) bool {
	return now.Sub(at) < HolderAdmitWindow+AdmissionBound
}

// RequestHolder records on warm PVC pvc, at now, that the pool is about to
// create its holder pod (v1alpha1.HolderRequestAnnotationKey). The patch is
// conditioned on the version read: a checkout since that version fails it,
// and then no holder is created. The holder is made from the written
// object, and so carries the request.
func RequestHolder(pvc *corev1.PersistentVolumeClaim, now time.Time) (Write, error) {
	if StateOf(pvc) != Warm {
		return Write{}, refuse("request a holder for", pvc, "only a warm PVC is staged")
	}
	if !pvc.DeletionTimestamp.IsZero() {
		return Write{}, refuse("request a holder for", pvc, "it is being deleted")
	}
	out := pvc.DeepCopy()
	setAnnotation(out, v1alpha1.HolderRequestAnnotationKey, now.UTC().Format(time.RFC3339Nano))
	return Write{Op: OpPatch, Object: out, From: pvc, Precondition: preconditionOf(pvc)}, nil
}

// WithdrawHolderRequest removes the holder request of warm PVC pvc, as
// written by RequestHolder, once the holder's create call was refused: no
// holder carries it, and it no longer keeps the PVC from checkouts. The
// patch is conditioned on the version read; a PVC checked out since has no
// request left.
func WithdrawHolderRequest(pvc *corev1.PersistentVolumeClaim) (Write, error) {
	if StateOf(pvc) != Warm {
		return Write{}, refuse("withdraw the holder request of", pvc, "only a warm PVC is staged")
	}
	if _, ok := pvc.Annotations[v1alpha1.HolderRequestAnnotationKey]; !ok {
		return Write{Op: OpSkip, Object: pvc}, nil
	}
	out := pvc.DeepCopy()
	delete(out.Annotations, v1alpha1.HolderRequestAnnotationKey)
	return Write{Op: OpPatch, Object: out, From: pvc, Precondition: preconditionOf(pvc)}, nil
}

// HolderRequested says whether holder pod h carries the holder request
// warm PVC pvc records, made less than HolderAdmitWindow before now: the
// holder the pool asked for, not one made before a later request, by a
// version that made none, or after its window.
func HolderRequested(h *corev1.Pod, pvc *corev1.PersistentVolumeClaim, now time.Time) bool {
	req, at, ok := holderRequest(pvc)
	return ok && h.Annotations[v1alpha1.HolderRequestAnnotationKey] == req && now.Sub(at) < HolderAdmitWindow
}

// CarriesHolderRequest says whether holder pod h carries the holder
// request warm PVC pvc records and that request is live at now
// (holderRequestLive): once h is gone, the request would keep the PVC
// from checkouts until then, though its holder was made.
func CarriesHolderRequest(h *corev1.Pod, pvc *corev1.PersistentVolumeClaim, now time.Time) bool {
	req, at, ok := holderRequest(pvc)
	return ok && h.Annotations[v1alpha1.HolderRequestAnnotationKey] == req && holderRequestLive(at, now)
}

// HolderPending says whether a holder may still be created for warm PVC
// pvc at now: it records a holder request live at now (holderRequestLive),
// and no holder carrying that request has been seen (seen reports those
// the caller's cache holds, being deleted or not). A checkout does not hand
// out such a PVC: the holder's admission may have read the PVC warm before
// the checkout and be created after it. A holder seen was created before
// the read that saw it. A malformed request is none: no holder is admitted
// for it (HolderRequested).
func HolderPending(pvc *corev1.PersistentVolumeClaim, seen func(request string) bool, now time.Time) bool {
	req, at, ok := holderRequest(pvc)
	return ok && holderRequestLive(at, now) && !seen(req)
}

// holderRequest is the holder request pvc records and its time; false
// when it records none or a malformed one.
func holderRequest(pvc *corev1.PersistentVolumeClaim) (string, time.Time, bool) {
	req := pvc.Annotations[v1alpha1.HolderRequestAnnotationKey]
	at, err := time.Parse(time.RFC3339Nano, req)
	return req, at, err == nil
}
