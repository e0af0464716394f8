package claim

import (
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
// A claim reserved ahead of its pod (Reserved) carries the time of
// its reservation as its admission, which may be long before the pod it
// was handed to without a write: its binding records no admission time,
// and its creation (moments after the pod's) stands for it.
//
// It has no finalizer: the operator deletes it at the end of the claim's
// life (one write), and one deleted before that is made again from the
// claim (which records its pod), so that a finalizer would cost a write
// per pod and protect nothing the claim does not.
func Binding(pvc *corev1.PersistentVolumeClaim, fpvcUID types.UID) *v1alpha1.FluentPVCBinding {
	fpvc := pvc.Labels[v1alpha1.FluentPVCNameLabelKey]
	b := &v1alpha1.FluentPVCBinding{
		ObjectMeta: metav1.ObjectMeta{
			Name:      pvc.Labels[v1alpha1.BindingNameLabelKey],
			Namespace: pvc.Namespace,
			Labels:    map[string]string{v1alpha1.FluentPVCNameLabelKey: fpvc},
			Annotations: map[string]string{
				v1alpha1.AdmittedAtAnnotationKey: pvc.Annotations[v1alpha1.AdmittedAtAnnotationKey],
				v1alpha1.CheckoutAnnotationKey:   pvc.Annotations[v1alpha1.CheckoutAnnotationKey],
				v1alpha1.CheckoutIDAnnotationKey: pvc.Annotations[v1alpha1.CheckoutIDAnnotationKey],
			},
		},
		Spec: v1alpha1.FluentPVCBindingSpec{
			FluentPVC: v1alpha1.ObjectIdentity{Name: fpvc, UID: fpvcUID},
			PVC:       v1alpha1.ObjectIdentity{Name: pvc.Name, UID: pvc.UID},
		},
	}
	if Reserved(pvc) {
		delete(b.Annotations, v1alpha1.AdmittedAtAnnotationKey)
	}
	return b
}
