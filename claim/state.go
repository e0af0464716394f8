// Package claim is a claim's whole life: the states a PVC of the operator
// goes through, read from its labels, annotations and finalizer, and every
// transition between them as a pure function that returns the write to make
// and the precondition it carries. The webhook, the pool and the binding
// controller only execute these writes (Execute); no other package sets the
// keys that encode a claim's state.
//
// A claim's life:
//
//	(none) --NewWarm--> Warm --Checkout--> Claimed --RecordPod--> Used
//	Warm --Reserve--> Claimed (reserved, no finalizer) --RecordPod--> Used
//	(none) --NewClaimed-----------------> Claimed
//	Claimed --Return--> Warm               (proof that no pod used it)
//	Claimed --Unreserve--> Warm            (reserved, handed to no pod)
//	Claimed, Used --Release--> Released     (deleting) or Kept (not deleting)
//	Released --Delete--> (gone)            Warm --DeleteWarm--> (gone)
//
// A claim drains while its binding is Draining: the claim is then Used (or
// Claimed with a history that does not prove it unused), and its finalizer
// keeps it until the drain succeeded. A returned claim is Warm again.
package claim

import (
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
)

// State is where a PVC is in a claim's life.
type State string

const (
	// None is a PVC that is not one of the operator's warm PVCs or claims.
	None State = ""
	// Warm is a pool PVC waiting for a pod. It holds no data and has no
	// finalizer.
	Warm State = "Warm"
	// Claimed is a claim handed to a pod, whose pod is not recorded on it
	// yet. Its finalizer keeps it until it is drained or proven unused; a
	// reservation gets it only with its pod's record.
	Claimed State = "Claimed"
	// Used is a claim that records the pod that used it (or, made by an
	// earlier version, does not track its pod at all, so that a pod may
	// have used it). It is let go of only after a drain.
	Used State = "Used"
	// Released is a claim let go of and being deleted: drained, reclaimed
	// or abandoned with its namespace.
	Released State = "Released"
	// Kept is a claim let go of and not deleted: the operator let go of it
	// undrained and keeps it, with its data, for the user.
	Kept State = "Kept"
)

// StateOf reads the state of pvc from its claim-role label, its
// used-by-pod annotation and its finalizer.
func StateOf(pvc *corev1.PersistentVolumeClaim) State {
	switch pvc.Labels[v1alpha1.ClaimRoleLabelKey] {
	case v1alpha1.ClaimRoleWarm:
		return Warm
	case v1alpha1.ClaimRoleClaimed:
	default:
		return None
	}
	if !controllerutil.ContainsFinalizer(pvc, v1alpha1.PVCProtectionFinalizer) {
		switch {
		case !pvc.DeletionTimestamp.IsZero():
			return Released
		case !unprotected(pvc):
			return Kept
		}
		return Claimed
	}
	if pod, tracked := PodOf(pvc); tracked && pod.UID == "" {
		return Claimed
	}
	return Used
}

// unprotected is true when claim pvc, which has no finalizer, is a
// reservation that records no pod (Reserve): it holds no data, so nothing
// keeps it from being deleted with its namespace, and RecordPod adds the
// finalizer before its pod can write.
func unprotected(pvc *corev1.PersistentVolumeClaim) bool {
	pod, tracked := PodOf(pvc)
	return pvc.Annotations[v1alpha1.ReservedByAnnotationKey] != "" && tracked && pod.UID == ""
}

// Keeps is true while the operator keeps claim pvc from its deletion: its
// finalizer is on it, or it is a reservation that gets the finalizer with
// its pod's record. Release lets go of it.
func Keeps(pvc *corev1.PersistentVolumeClaim) bool {
	return controllerutil.ContainsFinalizer(pvc, v1alpha1.PVCProtectionFinalizer) || StateOf(pvc) == Claimed
}

// Held is true when pvc is a pod's claim that needs a binding: claimed by
// the webhook, named in its binding label, and still held by the
// operator's finalizer. A claim let go of (drained, reclaimed or abandoned)
// has lost the finalizer and is done with; one being deleted that still has
// it was never let go of, and needs its binding to be drained or released.
func Held(pvc *corev1.PersistentVolumeClaim) bool {
	s := StateOf(pvc)
	return (s == Claimed || s == Used) &&
		pvc.Labels[v1alpha1.BindingNameLabelKey] != "" && pvc.Labels[v1alpha1.FluentPVCNameLabelKey] != ""
}

// SameCheckout is true when pvc is still the checkout that binding b
// records: the claim b recorded (its UID, once known), not back in the
// pool, not labelled for another binding, and carrying b's checkout token.
// A binding without a token (made by an earlier version) is matched
// without it. A false result means that b's checkout is over: the claim
// went back to the pool, the only writer that removes the token, and may
// have been handed to another pod since, so b must neither release,
// return nor delete it. A claim whose binding label was removed by hand
// still matches: no other checkout can hold it, and it keeps its drain.
func SameCheckout(b *v1alpha1.FluentPVCBinding, pvc *corev1.PersistentVolumeClaim) bool {
	if b.Spec.PVC.UID != "" && pvc.UID != b.Spec.PVC.UID {
		return false
	}
	if pvc.Labels[v1alpha1.ClaimRoleLabelKey] == v1alpha1.ClaimRoleWarm {
		return false
	}
	if l := pvc.Labels[v1alpha1.BindingNameLabelKey]; l != "" && l != b.Name {
		return false
	}
	id, ok := b.Annotations[v1alpha1.CheckoutIDAnnotationKey]
	return !ok || id == pvc.Annotations[v1alpha1.CheckoutIDAnnotationKey]
}

// PodOf is the pod recorded on pvc as having used it, and whether the
// claim's history is tracked at all: false for a claim without the
// used-by-pod annotation (made by an earlier version). A tracked claim
// with an empty identity was used by no pod the operator has seen.
func PodOf(pvc *corev1.PersistentVolumeClaim) (v1alpha1.ObjectIdentity, bool) {
	v, tracked := pvc.Annotations[v1alpha1.UsedByPodAnnotationKey]
	name, uid, _ := strings.Cut(v, "/")
	return v1alpha1.ObjectIdentity{Name: name, UID: types.UID(uid)}, tracked
}

// Records is true when pvc records pod as the pod that used it.
func Records(pvc *corev1.PersistentVolumeClaim, pod v1alpha1.ObjectIdentity) bool {
	return pvc.Annotations[v1alpha1.UsedByPodAnnotationKey] == usedBy(pod)
}

// usedBy is the used-by-pod annotation's value for pod.
func usedBy(pod v1alpha1.ObjectIdentity) string {
	return pod.Name + "/" + string(pod.UID)
}

// PodWait is how long after its admission a claim's pod is waited for: the
// API server creates the pod moments after the webhook hands it the claim.
// Past it, a claim with no pod in the cache gets its binding without one
// (the binding then spares no write: the record of the pod and the status
// of its new generation), and its holder is removed: a pod deleted before
// the operator recorded it leaves nothing else to wait for, and its claim
// is drained once the orphan grace period is over, since the pods' history
// shows a pod created with it.
const PodWait = 5 * time.Second

// AdmittedAt is when the webhook handed pvc (or the claim of binding
// annotations) to a pod, from the admitted-at annotation of annotations;
// false when it is missing or malformed. Times in whole seconds, written
// by earlier versions, parse too.
func AdmittedAt(annotations map[string]string) (time.Time, bool) {
	t, err := time.Parse(time.RFC3339, annotations[v1alpha1.AdmittedAtAnnotationKey])
	return t, err == nil
}

const (
	// maxPrefixLen keeps claim names short enough that a drain Job name
	// "<claim>-drain-<n>" stays within the 63 characters of a label value.
	maxPrefixLen = 40
	suffixLen    = 10
	// checkoutIDLen is the length of a checkout token: 16 characters from
	// utilrand's 27-letter alphabet, about 76 bits.
	checkoutIDLen = 16
)

// Name returns a fresh name for a claim and its binding made from the
// FluentPVC fluentPVCName: a readable prefix from that name and a random
// suffix. The result is a DNS-1123 label of at most 51 characters whatever
// the FluentPVC's name length.
func Name(fluentPVCName string) string {
	prefix := strings.ReplaceAll(fluentPVCName, ".", "-")
	if len(prefix) > maxPrefixLen {
		prefix = prefix[:maxPrefixLen]
	}
	prefix = strings.TrimRight(prefix, "-")
	if prefix == "" {
		prefix = "fluent-pvc"
	}
	return prefix + "-" + utilrand.String(suffixLen)
}

// NewCheckoutID is a fresh token for one checkout of a claim (see
// v1alpha1.CheckoutIDAnnotationKey).
func NewCheckoutID() string {
	return utilrand.String(checkoutIDLen)
}

// MaxReservation is the longest a reservation that names its end
// (v1alpha1.ReservedUntilAnnotationKey) runs; whoever reads one takes an
// end further ahead than that for a clock that is off.
const MaxReservation = 10 * time.Minute

// Reservation is who holds the reservation of claim pvc
// (v1alpha1.ReservedByAnnotationKey) and, when the claim names it, until
// when (v1alpha1.ReservedUntilAnnotationKey; the zero time when the
// holder's Lease says it); false when pvc is not a claim reserved ahead of
// its pod that records no pod yet. A reservation whose time is over still
// counts here: only its holder knows whether it handed the claim out.
func Reservation(pvc *corev1.PersistentVolumeClaim) (string, time.Time, bool) {
	by := pvc.Annotations[v1alpha1.ReservedByAnnotationKey]
	if by == "" || StateOf(pvc) != Claimed {
		return "", time.Time{}, false
	}
	until, _ := ReservedUntil(pvc)
	return by, until, true
}

// Reserved says whether claim pvc was checked out ahead of its pod (a
// reservation), whether or not it records its pod since; false for a
// claim checked out at its pod's admission.
func Reserved(pvc *corev1.PersistentVolumeClaim) bool {
	return pvc.Annotations[v1alpha1.ReservedByAnnotationKey] != ""
}

// ReservedUntil is the end that the reservation claim pvc was checked out
// under names, if it names one (v1alpha1.ReservedUntilAnnotationKey).
func ReservedUntil(pvc *corev1.PersistentVolumeClaim) (time.Time, bool) {
	until, err := time.Parse(time.RFC3339Nano, pvc.Annotations[v1alpha1.ReservedUntilAnnotationKey])
	return until, err == nil
}

// PodsSince is the resourceVersion that every pod created with held claim
// pvc comes after, "" when the claim does not record one (see
// v1alpha1.PodsSinceAnnotationKey).
func PodsSince(pvc *corev1.PersistentVolumeClaim) string {
	return pvc.Annotations[v1alpha1.PodsSinceAnnotationKey]
}
