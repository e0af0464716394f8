package claim

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
)

// Binding is the FluentPVCBinding of held claim pvc: the record through
// which the operator drains and reclaims it. The operator makes it from
// the claim the webhook created or checked out, so that admission costs
// one API write; fpvcUID is the claim's FluentPVC's UID ("" if it is
// gone). It copies the claim's checkout token, which is what lets the
// binding tell its checkout from the claim's next one. The pod is not
// known yet: the operator records it when it first sees it.
//
// The claim owns its binding: once the claim is deleted after its drain,
// the operator removes the binding's finalizer and the garbage collector
// deletes the binding, which spares the operator that write.
func Binding(pvc *corev1.PersistentVolumeClaim, fpvcUID types.UID) *v1alpha1.FluentPVCBinding {
	fpvc := pvc.Labels[v1alpha1.FluentPVCNameLabelKey]
	return &v1alpha1.FluentPVCBinding{
		ObjectMeta: metav1.ObjectMeta{
			Name:      pvc.Labels[v1alpha1.BindingNameLabelKey],
			Namespace: pvc.Namespace,
			Labels:    map[string]string{v1alpha1.FluentPVCNameLabelKey: fpvc},
			Annotations: map[string]string{
				v1alpha1.AdmittedAtAnnotationKey: pvc.Annotations[v1alpha1.AdmittedAtAnnotationKey],
				v1alpha1.CheckoutAnnotationKey:   pvc.Annotations[v1alpha1.CheckoutAnnotationKey],
				v1alpha1.CheckoutIDAnnotationKey: pvc.Annotations[v1alpha1.CheckoutIDAnnotationKey],
			},
			Finalizers: []string{v1alpha1.BindingProtectionFinalizer},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "PersistentVolumeClaim", Name: pvc.Name, UID: pvc.UID,
			}},
		},
		Spec: v1alpha1.FluentPVCBindingSpec{
			FluentPVC: v1alpha1.ObjectIdentity{Name: fpvc, UID: fpvcUID},
			PVC:       v1alpha1.ObjectIdentity{Name: pvc.Name, UID: pvc.UID},
		},
	}
}

// OwnedByClaim says whether binding b is owned by the claim it records
// (Binding): the garbage collector deletes it once that claim is gone.
// Bindings made by earlier versions are not.
func OwnedByClaim(b *v1alpha1.FluentPVCBinding) bool {
	for _, ref := range b.OwnerReferences {
		if ref.APIVersion == "v1" && ref.Kind == "PersistentVolumeClaim" && ref.Name == b.Spec.PVC.Name && ref.UID != "" && ref.UID == b.Spec.PVC.UID {
			return true
		}
	}
	return false
}

// Finished says whether binding b has ended and only waits for the garbage
// collector: the operator removed its finalizer once its claim was deleted,
// and its claim owns it. claimDeleted says the claim b records is gone or
// being deleted.
func Finished(b *v1alpha1.FluentPVCBinding, claimDeleted bool) bool {
	return claimDeleted && OwnedByClaim(b) && !slices.Contains(b.Finalizers, v1alpha1.BindingProtectionFinalizer)
}
