package inject

import (
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
)

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
				v1alpha1.AdmittedAtAnnotationKey: now.UTC().Format(time.RFC3339),
				v1alpha1.CheckoutAnnotationKey:   checkout,
			},
			Finalizers: []string{v1alpha1.PVCProtectionFinalizer},
		},
		Spec: *fpvc.Spec.PVCSpecTemplate.DeepCopy(),
	}
}

// BindingFor is the FluentPVCBinding of claim: the record through which the
// operator drains and reclaims it. The operator makes it from the claim the
// webhook created or checked out, so that admission costs one API write;
// fpvcUID is the claim's FluentPVC's UID ("" if it is gone). The pod is not
// known yet: the operator records it when it first sees it.
func BindingFor(claim *corev1.PersistentVolumeClaim, fpvcUID types.UID) *v1alpha1.FluentPVCBinding {
	fpvc := claim.Labels[v1alpha1.FluentPVCNameLabelKey]
	return &v1alpha1.FluentPVCBinding{
		ObjectMeta: metav1.ObjectMeta{
			Name:      claim.Labels[v1alpha1.BindingNameLabelKey],
			Namespace: claim.Namespace,
			Labels:    map[string]string{v1alpha1.FluentPVCNameLabelKey: fpvc},
			Annotations: map[string]string{
				v1alpha1.AdmittedAtAnnotationKey: claim.Annotations[v1alpha1.AdmittedAtAnnotationKey],
				v1alpha1.CheckoutAnnotationKey:   claim.Annotations[v1alpha1.CheckoutAnnotationKey],
			},
			Finalizers: []string{v1alpha1.BindingProtectionFinalizer},
		},
		Spec: v1alpha1.FluentPVCBindingSpec{
			FluentPVC: v1alpha1.ObjectIdentity{Name: fpvc, UID: fpvcUID},
			PVC:       v1alpha1.ObjectIdentity{Name: claim.Name, UID: claim.UID},
		},
	}
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

// DrainJob is the attempt-th finalizer Job of binding b: fpvc's
// pvcFinalizerJobSpecTemplate with the claim mounted at pvcVolumeMountPath
// and the common volumes, mounts and envs. It is owned by the binding.
func DrainJob(fpvc *v1alpha1.FluentPVC, b *v1alpha1.FluentPVCBinding, attempt int32) *batchv1.Job {
	spec := fpvc.Spec.PVCFinalizerJobSpecTemplate.DeepCopy()
	if spec.Template.Spec.RestartPolicy == "" {
		spec.Template.Spec.RestartPolicy = corev1.RestartPolicyNever
	}
	PodSpec(&spec.Template.Spec, &fpvc.Spec, b.Spec.PVC.Name)
	if spec.Template.Labels == nil {
		spec.Template.Labels = map[string]string{}
	}
	spec.Template.Labels[v1alpha1.BindingNameLabelKey] = b.Name
	spec.Template.Labels[v1alpha1.ComponentLabelKey] = v1alpha1.ComponentDrain
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name:      DrainJobName(b.Name, attempt),
			Namespace: b.Namespace,
			Labels: map[string]string{
				v1alpha1.FluentPVCNameLabelKey: fpvc.Name,
				v1alpha1.BindingNameLabelKey:   b.Name,
				v1alpha1.ComponentLabelKey:     v1alpha1.ComponentDrain,
				v1alpha1.DrainAttemptLabelKey:  strconv.Itoa(int(attempt)),
			},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(b, v1alpha1.GroupVersion.WithKind("FluentPVCBinding"))},
		},
		Spec: *spec,
	}
}
