// Package objects builds the Kubernetes objects that a FluentPVC makes and
// that the webhook, the pool and the controllers all need: the pod mutation,
// the claim, the FluentPVCBinding and the finalizer (drain) Job. It is a leaf:
// it imports only the API types and Kubernetes libraries, and nothing here
// talks to the API server.
package objects

import (
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"

	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
)

const (
	// maxPrefixLen keeps claim names short enough that a drain Job name
	// "<claim>-drain-<n>" stays within the 63 characters of a label value.
	maxPrefixLen = 40
	suffixLen    = 10
)

// ClaimName returns a fresh name for a claim and its binding made from the
// FluentPVC fluentPVCName: a readable prefix from that name and a random
// suffix. The result is a DNS-1123 label of at most 51 characters whatever
// the FluentPVC's name length.
func ClaimName(fluentPVCName string) string {
	return claimName(fluentPVCName, utilrand.String(suffixLen))
}

func claimName(fluentPVCName, suffix string) string {
	prefix := strings.ReplaceAll(fluentPVCName, ".", "-")
	if len(prefix) > maxPrefixLen {
		prefix = prefix[:maxPrefixLen]
	}
	prefix = strings.TrimRight(prefix, "-")
	if prefix == "" {
		prefix = "fluent-pvc"
	}
	return prefix + "-" + suffix
}

// Claim is the PVC named name in namespace made from fpvc's pvcSpecTemplate
// (whose hash is templateHash) and handed to a pod at admission time now. Its labels put it in the
// operator's cache; its finalizer keeps it until it is drained; its
// annotations are the orphan record and whether it came from the pool.
func Claim(fpvc *v1alpha1.FluentPVC, namespace, name, templateHash, checkout string, now time.Time) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: namespace,
			Labels: map[string]string{
				v1alpha1.FluentPVCNameLabelKey: fpvc.Name,
				v1alpha1.BindingNameLabelKey:   name,
				v1alpha1.ClaimRoleLabelKey:     v1alpha1.ClaimRoleClaimed,
				v1alpha1.TemplateHashLabelKey:  templateHash,
			},
			Annotations: map[string]string{
				v1alpha1.AdmittedAtAnnotationKey: now.UTC().Format(time.RFC3339Nano),
				v1alpha1.CheckoutAnnotationKey:   checkout,
				v1alpha1.UsedByPodAnnotationKey:  "",
				v1alpha1.CheckoutIDAnnotationKey: NewCheckoutID(),
			},
			Finalizers: []string{v1alpha1.PVCProtectionFinalizer},
		},
		Spec: *fpvc.Spec.PVCSpecTemplate.DeepCopy(),
	}
}

// checkoutIDLen is the length of a checkout token: 16 characters from
// utilrand's 27-letter alphabet, about 76 bits.
const checkoutIDLen = 16

// NewCheckoutID is a fresh token for one checkout of a claim (see
// v1alpha1.CheckoutIDAnnotationKey).
func NewCheckoutID() string {
	return utilrand.String(checkoutIDLen)
}

// SameCheckout is true when claim is still the checkout that binding b
// records: the claim b recorded (its UID, once known), not back in the
// pool, not labelled for another binding, and carrying b's checkout token.
// A binding without a token (made by an earlier version) is matched
// without it. A false result means that b's checkout is over: the claim
// went back to the pool, the only writer that removes the token, and may
// have been handed to another pod since, so b must neither release,
// return nor delete it. A claim whose binding label was removed by hand
// still matches: no other checkout can hold it, and it keeps its drain.
func SameCheckout(b *v1alpha1.FluentPVCBinding, claim *corev1.PersistentVolumeClaim) bool {
	if b.Spec.PVC.UID != "" && claim.UID != b.Spec.PVC.UID {
		return false
	}
	if claim.Labels[v1alpha1.ClaimRoleLabelKey] == v1alpha1.ClaimRoleWarm {
		return false
	}
	if l := claim.Labels[v1alpha1.BindingNameLabelKey]; l != "" && l != b.Name {
		return false
	}
	id, ok := b.Annotations[v1alpha1.CheckoutIDAnnotationKey]
	return !ok || id == claim.Annotations[v1alpha1.CheckoutIDAnnotationKey]
}

// Claimed is true when claim is a pod's claim that needs a binding: claimed
// by the webhook, named in its binding label, and still held by the
// operator's finalizer. A claim let go of (drained, reclaimed or abandoned)
// has lost the finalizer and is done with; one being deleted that still has
// it was never let go of, and needs its binding to be drained or released.
func Claimed(claim *corev1.PersistentVolumeClaim) bool {
	return claim.Labels[v1alpha1.ClaimRoleLabelKey] == v1alpha1.ClaimRoleClaimed &&
		claim.Labels[v1alpha1.BindingNameLabelKey] != "" && claim.Labels[v1alpha1.FluentPVCNameLabelKey] != "" &&
		controllerutil.ContainsFinalizer(claim, v1alpha1.PVCProtectionFinalizer)
}

// ClaimVolume is the pod volume named name that mounts claim claimName.
func ClaimVolume(name, claimName string) corev1.Volume {
	return corev1.Volume{
		Name: name,
		VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claimName},
		},
	}
}

// ClaimPod is the pod recorded on claim as having used it, and whether the
// claim's history is tracked at all: false for a claim without the
// used-by-pod annotation (made by an earlier version). A tracked claim
// with an empty identity was used by no pod the operator has seen.
func ClaimPod(claim *corev1.PersistentVolumeClaim) (v1alpha1.ObjectIdentity, bool) {
	v, tracked := claim.Annotations[v1alpha1.UsedByPodAnnotationKey]
	name, uid, _ := strings.Cut(v, "/")
	return v1alpha1.ObjectIdentity{Name: name, UID: types.UID(uid)}, tracked
}

// UsedByPod is the used-by-pod annotation's value for pod.
func UsedByPod(pod v1alpha1.ObjectIdentity) string {
	return pod.Name + "/" + string(pod.UID)
}
