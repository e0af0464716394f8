package objects

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
)

// Binding is the FluentPVCBinding of claim: the record through which the
// operator drains and reclaims it. The operator makes it from the claim the
// webhook created or checked out, so that admission costs one API write;
// fpvcUID is the claim's FluentPVC's UID ("" if it is gone). The pod is not
// known yet: the operator records it when it first sees it.
func Binding(claim *corev1.PersistentVolumeClaim, fpvcUID types.UID) *v1alpha1.FluentPVCBinding {
	fpvc := claim.Labels[v1alpha1.FluentPVCNameLabelKey]
	return &v1alpha1.FluentPVCBinding{
		ObjectMeta: metav1.ObjectMeta{
			Name:      claim.Labels[v1alpha1.BindingNameLabelKey],
			Namespace: claim.Namespace,
			Labels:    map[string]string{v1alpha1.FluentPVCNameLabelKey: fpvc},
			Annotations: map[string]string{
				v1alpha1.AdmittedAtAnnotationKey: claim.Annotations[v1alpha1.AdmittedAtAnnotationKey],
				v1alpha1.CheckoutAnnotationKey:   claim.Annotations[v1alpha1.CheckoutAnnotationKey],
				v1alpha1.CheckoutIDAnnotationKey: claim.Annotations[v1alpha1.CheckoutIDAnnotationKey],
			},
			Finalizers: []string{v1alpha1.BindingProtectionFinalizer},
		},
		Spec: v1alpha1.FluentPVCBindingSpec{
			FluentPVC: v1alpha1.ObjectIdentity{Name: fpvc, UID: fpvcUID},
			PVC:       v1alpha1.ObjectIdentity{Name: claim.Name, UID: claim.UID},
		},
	}
}
