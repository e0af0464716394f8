package controllers

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/claim"
)

// newClaim is claim name of f in ns as the webhook hands it to a pod at
// at: created on a miss, or checked out on a hit (checkout).
func newClaim(f *v1alpha1.FluentPVC, ns, name, hash, checkout string, at time.Time) *corev1.PersistentVolumeClaim {
	return claim.NewClaimed(f, ns, name, hash, checkout, claim.NewCheckoutID(), at).Object
}

// bindingOf is the binding the operator makes for held claim c.
func bindingOf(c *corev1.PersistentVolumeClaim, fpvcUID types.UID) *v1alpha1.FluentPVCBinding {
	return claim.Binding(c, fpvcUID)
}

// returned is held claim c given back to the pool, as its binding returns it.
func returned(c *corev1.PersistentVolumeClaim) *corev1.PersistentVolumeClaim {
	w, err := claim.Return(claim.Binding(c, ""), c)
	if err != nil {
		panic(err)
	}
	return w.Object
}

// checkedOut is warm PVC c handed to a pod admitted at at.
func checkedOut(c *corev1.PersistentVolumeClaim, at time.Time) *corev1.PersistentVolumeClaim {
	w, err := claim.Checkout(c, at, claim.NewCheckoutID())
	if err != nil {
		panic(err)
	}
	return w.Object
}
