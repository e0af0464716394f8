package pool

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
)

// DefaultMaxTries bounds the warm PVCs a checkout tries before it gives up
// and the pod gets a freshly created claim.
const DefaultMaxTries = 5

// Candidates are the warm PVCs a pod allowed in zones may take, in random
// order: Bound, made from the current template (hash), not being deleted,
// and usable in one of the pod's zones. Random order spreads concurrent
// checkouts over the pool instead of making them all race for one PVC.
func Candidates(warm []corev1.PersistentVolumeClaim, hash string, zones Zones) []*corev1.PersistentVolumeClaim {
	var out []*corev1.PersistentVolumeClaim
	for i := range warm {
		c := &warm[i]
		if c.Labels[v1alpha1.ClaimRoleLabelKey] != v1alpha1.ClaimRoleWarm || c.Labels[v1alpha1.TemplateHashLabelKey] != hash ||
			c.Status.Phase != corev1.ClaimBound || !c.DeletionTimestamp.IsZero() {
			continue
		}
		if zones != nil {
			if _, recorded := c.Annotations[v1alpha1.ZonesAnnotationKey]; !recorded || !Usable(c.Annotations[v1alpha1.ZonesAnnotationKey], zones) {
				continue
			}
		}
		out = append(out, c)
	}
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// CheckedOut is warm PVC c turned into a pod's claim: the claim role and
// binding label, the orphan record, and the finalizer that keeps it until
// it is drained.
func CheckedOut(c *corev1.PersistentVolumeClaim, admittedAt time.Time) *corev1.PersistentVolumeClaim {
	out := c.DeepCopy()
	out.Labels[v1alpha1.ClaimRoleLabelKey] = v1alpha1.ClaimRoleClaimed
	out.Labels[v1alpha1.BindingNameLabelKey] = c.Name
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	out.Annotations[v1alpha1.AdmittedAtAnnotationKey] = admittedAt.UTC().Format(time.RFC3339)
	out.Annotations[v1alpha1.CheckoutAnnotationKey] = v1alpha1.CheckoutHit
	controllerutil.AddFinalizer(out, v1alpha1.PVCProtectionFinalizer)
	return out
}

// Returned is checked-out claim c given back to the pool, for a claim no pod
// ever used.
func Returned(c *corev1.PersistentVolumeClaim) *corev1.PersistentVolumeClaim {
	out := c.DeepCopy()
	out.Labels[v1alpha1.ClaimRoleLabelKey] = v1alpha1.ClaimRoleWarm
	delete(out.Labels, v1alpha1.BindingNameLabelKey)
	delete(out.Annotations, v1alpha1.AdmittedAtAnnotationKey)
	delete(out.Annotations, v1alpha1.CheckoutAnnotationKey)
	controllerutil.RemoveFinalizer(out, v1alpha1.PVCProtectionFinalizer)
	return out
}

// Checkout takes one warm PVC of fpvc in namespace for a pod allowed in
// zones. Each try is one update conditioned on the resourceVersion read from
// the cache, so two webhooks, in one replica or several, never hand the same
// PVC to two pods: the loser gets a conflict and tries another. It returns
// nil when no warm PVC fits or every try lost a race (a miss).
func Checkout(ctx context.Context, r client.Reader, w client.Writer, fpvc *v1alpha1.FluentPVC, namespace string, zones Zones, admittedAt time.Time, maxTries int) (*corev1.PersistentVolumeClaim, error) {
	var warm corev1.PersistentVolumeClaimList
	if err := r.List(ctx, &warm, client.InNamespace(namespace), client.MatchingLabels{
		v1alpha1.FluentPVCNameLabelKey: fpvc.Name,
		v1alpha1.ClaimRoleLabelKey:     v1alpha1.ClaimRoleWarm,
	}); err != nil {
		return nil, fmt.Errorf("listing warm PVCs: %w", err)
	}
	for i, c := range Candidates(warm.Items, TemplateHash(&fpvc.Spec.PVCSpecTemplate), zones) {
		if i >= maxTries {
			break
		}
		claim := CheckedOut(c, admittedAt)
		err := w.Update(ctx, claim)
		if err == nil {
			return claim, nil
		}
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("checking out warm PVC %s/%s: %w", namespace, c.Name, err)
		}
	}
	return nil, nil
}
