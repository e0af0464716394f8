package claim

import (
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/st-tech/fluent-pvc-operator/apis/objects"
	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
)

// MountObjection says why pod may not mount pvc, "" when it may. Only the
// operator's PVCs are guarded, and only while the operator holds them:
//
//   - a warm PVC, by the pool's binder pod or holder pod of that PVC
//     alone, a holder only while the PVC records its request, made
//     less than HolderAdmitWindow before now (HolderRequested);
//   - a claim handed out and not yet recording its pod, by the pod it was
//     handed to: one that carries its opt-in and binding labels (the
//     webhook hands out the claim and refuses copies of such pods before
//     this is asked);
//   - a claim recording its pod, by that pod alone;
//   - either of the last two, also by its own drain pods.
//
// The binder and drain pods are known by their controlling Job, job (as
// read; nil when pod names none or it was not found): pod's controller
// must be that Job, which must be the operator's for this PVC
// (objects.BinderPodOf, objects.DrainPodOf). A holder is known by its
// creator: byOperator says the operator itself creates pod
// (objects.HolderPodOf). Their labels alone prove nothing, since whoever
// creates a pod chooses them.
//
// A claim let go of (drained, abandoned, or kept for the user) is no
// longer guarded: a person may mount it to read its data.
func MountObjection(pod *corev1.Pod, pvc *corev1.PersistentVolumeClaim, job *batchv1.Job, byOperator bool, now time.Time) string {
	fpvc := pvc.Labels[v1alpha1.FluentPVCNameLabelKey]
	switch StateOf(pvc) {
	case Warm:
		if objects.BinderPodOf(pod, job, pvc.Name) {
			return ""
		}
		if objects.HolderPodOf(pod, pvc, byOperator) {
			if HolderRequested(pod, pvc, now) {
				return ""
			}
			return fmt.Sprintf("holder %s does not carry a holder request of warm PVC %s made within %s (the PVC records %q, the holder %q): the pool requests a holder on the PVC before it creates one",
				pod.Name, pvc.Name, HolderAdmitWindow, pvc.Annotations[v1alpha1.HolderRequestAnnotationKey], pod.Annotations[v1alpha1.HolderRequestAnnotationKey])
		}
		return fmt.Sprintf("PVC %s is a warm PVC of FluentPVC %q, kept for a pod that opts in: no pod may mount it by name. "+
			"Label the pod %s=%s instead, and it gets a claim of its own", pvc.Name, fpvc, v1alpha1.FluentPVCNameLabelKey, fpvc)
	case Claimed, Used:
	default:
		return ""
	}
	if objects.DrainPodOf(pod, job, pvc.Labels[v1alpha1.BindingNameLabelKey]) {
		return ""
	}
	holder := "the pod being admitted with it"
	switch used, _ := PodOf(pvc); {
	case used.UID != "" && used.UID == pod.UID:
		return ""
	case used.UID != "":
		holder = "pod " + used.Name
	case pod.Labels[v1alpha1.BindingNameLabelKey] == pvc.Name && pod.Labels[v1alpha1.FluentPVCNameLabelKey] == fpvc:
		return "" // the pod it was handed to
	}
	return fmt.Sprintf("PVC %s is the claim of %s (FluentPVC %q), held until its FluentPVCBinding %s/%s has drained it: no other pod may mount it, "+
		"or its drain would run while that pod writes. To read its data, wait until the drain is done, or give the pod its own claim with the label %s=%s",
		pvc.Name, holder, fpvc, pvc.Namespace, pvc.Labels[v1alpha1.BindingNameLabelKey], v1alpha1.FluentPVCNameLabelKey, fpvc)
}
