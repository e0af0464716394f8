package controllers

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

// TestReconcileDeletedFluentPVCStaleCache reconciles a FluentPVC being
// deleted while the cache does not show yet the claim (and its binding)
// that another webhook replica just admitted. The
// finalizer must stay until that claim is drained, or its binding would
// wait forever for a FluentPVC that is gone.
func TestReconcileDeletedFluentPVCStaleCache(t *testing.T) {
	now := fixtures.Epoch.Add(time.Hour)
	deleted := fixtures.MakeFluentPVC("f").Obj()
	deleted.Finalizers = []string{v1alpha1.FluentPVCProtectionFinalizer}
	deleted.DeletionTimestamp = &metav1.Time{Time: now}
	other := fixtures.MakeFluentPVC("other").Obj()
	claimOf := func(f *v1alpha1.FluentPVC) *corev1.PersistentVolumeClaim {
		return fixtures.Claim(f, "ns", f.Name+"-abc", "h", v1alpha1.CheckoutMiss, now)
	}

	warmOf := func(f *v1alpha1.FluentPVC, deleting *metav1.Time) *corev1.PersistentVolumeClaim {
		c := fixtures.Returned(claimOf(f))
		c.Name = f.Name + "-warm"
		if deleting != nil {
			c.DeletionTimestamp = deleting
			c.Finalizers = append(c.Finalizers, "kubernetes.io/pvc-protection")
		}
		return c
	}

	scheme := newScheme(t)
	cases := map[string]struct {
		objs          []client.Object
		wantFinalizer bool
	}{
		"its new claim and binding, not cached yet: keep the finalizer": {
			objs:          []client.Object{claimOf(deleted), fixtures.Binding(claimOf(deleted), deleted.UID)},
			wantFinalizer: true,
		},
		"its new claim, before its binding is made: keep the finalizer": {
			objs:          []client.Object{claimOf(deleted)},
			wantFinalizer: true,
		},
		"its warm PVC, not cached, not being deleted: keep the finalizer": {
			// A webhook replica that has not seen the deletion may hand it
			// out, with no live read of the FluentPVC.
			objs:          []client.Object{warmOf(deleted, nil)},
			wantFinalizer: true,
		},
		"its warm PVC, being deleted: let go": {
			objs: []client.Object{warmOf(deleted, &metav1.Time{Time: now})},
		},
		"only another FluentPVC's claim: let go": {
			objs: []client.Object{other, claimOf(other), fixtures.Binding(claimOf(other), other.UID)},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			live := fake.NewClientBuilder().WithScheme(scheme).
				WithObjects(append([]client.Object{deleted.DeepCopy()}, tc.objs...)...).
				WithStatusSubresource(&v1alpha1.FluentPVC{}).
				WithIndex(&v1alpha1.FluentPVCBinding{}, bindingFluentPVCIndex, func(obj client.Object) []string {
					return []string{obj.(*v1alpha1.FluentPVCBinding).Spec.FluentPVC.Name}
				}).
				Build()
			// The cache has not seen the new claims and bindings yet.
			cached := interceptor.NewClient(live, interceptor.Funcs{
				List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
					switch list.(type) {
					case *corev1.PersistentVolumeClaimList, *v1alpha1.FluentPVCBindingList:
						return nil
					}
					return c.List(ctx, list, opts...)
				},
			})
			r := NewFluentPVCReconciler(cached, live, events.NewFakeRecorder(10), clocktesting.NewFakePassiveClock(now), Options{PoolIdleNamespaceTTL: time.Hour})

			if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(deleted)}); err != nil {
				t.Fatalf("Reconcile: %v", err)
			}
			got := &v1alpha1.FluentPVC{}
			err := live.Get(context.Background(), client.ObjectKeyFromObject(deleted), got)
			if kept := err == nil && controllerutil.ContainsFinalizer(got, v1alpha1.FluentPVCProtectionFinalizer); kept != tc.wantFinalizer {
				t.Errorf("finalizer kept = %v (get: %v), want %v", kept, err, tc.wantFinalizer)
			}
		})
	}
}
