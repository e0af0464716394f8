package webhook

import (
	"context"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/claim"
)

// ClaimPath is where the claim deletion webhook is served.
const ClaimPath = "/validate-v1-persistentvolumeclaim"

// The failure policy is Ignore: while the operator is down, deleting a PVC
// of the operator (a namespace's deletion among them) must not wait for it.
// A held claim deleted then is told by its binding (DrainBlocked, reason
// ClaimDeleting) once the operator is back, and kept until drained.
// +kubebuilder:webhook:path=/validate-v1-persistentvolumeclaim,mutating=false,failurePolicy=ignore,sideEffects=None,groups="",resources=persistentvolumeclaims,verbs=delete,versions=v1,name=claim.fluent-pvc-operator.tech.zozo.com,admissionReviewVersions=v1,timeoutSeconds=10

// ClaimDeletionValidator refuses to delete a claim the operator holds: one
// handed to a pod whose data has not been drained yet. Kubernetes schedules
// no new pod that mounts a PVC being deleted, so the claim's drain Job
// could never run, and the only way out would be to give up the data.
// Warm PVCs, claims already let go of, and the claims of a namespace being
// deleted (the operator lets go of those undrained) are not refused.
type ClaimDeletionValidator struct {
	Decoder admission.Decoder
	// Reader reads namespaces' metadata, from the manager's cache.
	Reader client.Reader
}

// Handle implements admission.Handler.
func (v *ClaimDeletionValidator) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Delete {
		return admission.Allowed("")
	}
	pvc := &corev1.PersistentVolumeClaim{}
	if err := v.Decoder.DecodeRaw(req.OldObject, pvc); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if !claim.Held(pvc) {
		return admission.Allowed("not a claim the operator holds")
	}
	ns := namespaceMeta()
	switch err := v.Reader.Get(ctx, client.ObjectKey{Name: pvc.Namespace}, ns); {
	case apierrors.IsNotFound(err):
		return admission.Allowed("its namespace is gone")
	case err != nil:
		return admission.Errored(http.StatusInternalServerError, fmt.Errorf("reading namespace %s: %w", pvc.Namespace, err))
	case !ns.DeletionTimestamp.IsZero():
		return admission.Allowed("its namespace is being deleted")
	}
	return admission.Denied(deletionDenial(pvc))
}

// deletionDenial says why held claim pvc may not be deleted, and what to
// do instead.
func deletionDenial(pvc *corev1.PersistentVolumeClaim) string {
	return fmt.Sprintf("PVC %s is a claim of FluentPVC %q that fluent-pvc-operator holds until its FluentPVCBinding %s/%s has drained it: "+
		"deleted now, it could never be drained, since no new pod may mount a PVC being deleted. "+
		"Delete the pod that uses it instead: the claim is then drained and deleted by itself. "+
		"To give up its data, remove the finalizer %s from the PVC first",
		pvc.Name, pvc.Labels[v1alpha1.FluentPVCNameLabelKey], pvc.Namespace, pvc.Labels[v1alpha1.BindingNameLabelKey], v1alpha1.PVCProtectionFinalizer)
}

var _ admission.Handler = &ClaimDeletionValidator{}
