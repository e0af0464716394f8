package pool

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

// TestCheckoutSkipsWhatThisReplicaIsTaking runs two checkouts of one
// replica at once, the second while the first one's write of the pool's
// only warm PVC is in flight: the second leaves that PVC to the first
// instead of writing it too and making one of the two lose a race (an
// extra write, and a conflict retried on a live list, on the admission
// path). Before, both wrote it.
func TestCheckoutSkipsWhatThisReplicaIsTaking(t *testing.T) {
	now := fixtures.Epoch.Add(time.Hour)
	f := fixtures.MakeFluentPVC("f").PoolSize(1).Obj()
	warm := claim.NewWarm(f, "ns", TemplateHash(&f.Spec.PVCSpecTemplate), "").Object
	warm.Name = "f-warm"
	warm.Annotations = map[string]string{v1alpha1.NodeAffinityAnnotationKey: ""}
	warm.Status.Phase = corev1.ClaimBound
	scheme := runtime.NewScheme()
	if err := fixtures.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	inFlight, secondDone := make(chan struct{}), make(chan struct{})
	var updates atomic.Int32
	api := fake.NewClientBuilder().WithScheme(scheme).WithObjects(warm).
		WithIndex(&corev1.PersistentVolumeClaim{}, WarmIndex, warmKey).
		WithIndex(&corev1.Pod{}, HolderIndex, holderKey).
		WithInterceptorFuncs(interceptor.Funcs{Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if updates.Add(1) == 1 {
				close(inFlight)
				<-secondDone
			}
			return c.Update(ctx, obj, opts...)
		}}).Build()
	c := NewCheckouter(api, api, api)
	pod := func(name string) *corev1.Pod { return fixtures.MakePod(name, "ns").FluentPVC(f.Name).Obj() }
	first := make(chan Checkedout)
	go func() {
		got, err := c.Checkout(context.Background(), f, pod("a"), now)
		if err != nil {
			t.Error(err)
		}
		first <- got
	}()
	<-inFlight
	second, err := c.Checkout(context.Background(), f, pod("b"), now)
	close(secondDone)
	if err != nil {
		t.Fatal(err)
	}
	got := <-first
	if got.PVC == nil || second.PVC != nil {
		t.Errorf("first got %v, second %v: want the first to take the PVC and the second to miss", got.PVC != nil, second.PVC != nil)
	}
	if n := updates.Load(); n != 1 {
		t.Errorf("%d writes of the warm PVC, want 1", n)
	}
}
