package controllers

import (
	"context"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/st-tech/fluent-pvc-operator/apis/objects"
	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

// TestReconcileJobCacheLag reconciles a draining binding whose status names
// its running attempt-1 Job while the Job cache does not show that Job yet,
// as happens when the status write's own event arrives first (issue 12,
// hole 4). Attempt 2 must not start beside attempt 1.
func TestReconcileJobCacheLag(t *testing.T) {
	now := fixtures.Epoch.Add(time.Hour)
	fpvc := fixtures.MakeFluentPVC("f").Obj()
	pvc := objects.Claim(fpvc, "ns", "f-abc", "h", v1alpha1.CheckoutMiss, fixtures.Epoch)
	pvc.UID = "pvc-uid"
	b := objects.Binding(pvc, fpvc.UID)
	b.Spec.Pod = v1alpha1.ObjectIdentity{Name: "gone", UID: "pod-uid"}
	b.Status.Phase = v1alpha1.BindingPhaseDraining
	b.Status.DrainAttempts = 1
	b.Status.DrainJobName = objects.DrainJobName(b.Name, 1)
	b.Status.DrainStartTime = &metav1.Time{Time: now.Add(-time.Second)}
	running := objects.DrainJob(fpvc, b, 1)

	scheme := newScheme(t)
	byBindingLabel := func(obj client.Object) []string { return []string{obj.GetLabels()[v1alpha1.BindingNameLabelKey]} }
	live := fake.NewClientBuilder().WithScheme(scheme).
		WithObjects(fpvc, pvc, b, running).
		WithStatusSubresource(&v1alpha1.FluentPVCBinding{}).
		WithIndex(&corev1.Pod{}, podBindingIndex, byBindingLabel).
		WithIndex(&batchv1.Job{}, jobBindingIndex, byBindingLabel).
		Build()
	// The cache: the same objects, but Job lists miss the new Job.
	cached := interceptor.NewClient(live, interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*batchv1.JobList); ok {
				return nil
			}
			return c.List(ctx, list, opts...)
		},
	})
	r := NewBindingReconciler(cached, live, events.NewFakeRecorder(10), clocktesting.NewFakePassiveClock(now),
		Options{OrphanGracePeriod: 2 * time.Minute, DrainBackoffBase: 10 * time.Second, DrainBackoffMax: 10 * time.Minute})

	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(b)}); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	var jobs batchv1.JobList
	if err := live.List(context.Background(), &jobs); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, j := range jobs.Items {
		names = append(names, j.Name)
	}
	if len(names) != 1 || names[0] != running.Name {
		t.Errorf("drain Jobs = %v, want only %s", names, running.Name)
	}
}

// newScheme is a scheme with the core kinds and this operator's.
func newScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	return scheme
}
