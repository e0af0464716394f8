package controllers

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/st-tech/fluent-pvc-operator/apis/objects"
	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/pool"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

// TestStagingOpsRefusedHolder runs the pool's creation of a holder that
// the API server refuses (403, as the mount webhook refuses the holder of
// a PVC no longer warm): a refusal is a HolderRejected for a person to
// look into only while the PVC, read live, is still the warm one the
// cache showed.
func TestStagingOpsRefusedHolder(t *testing.T) {
	now := fixtures.Epoch.Add(time.Hour)
	f := fixtures.MakeFluentPVC("f").Obj()
	warm := fixtures.Returned(fixtures.Claim(f, "ns", "f-abc", "h", v1alpha1.CheckoutHit, now))
	warm.UID = "warm-uid"
	handedOut := fixtures.CheckedOut(warm, now)
	handedOut.UID = warm.UID
	replaced := warm.DeepCopy()
	replaced.UID = "another-uid"
	cases := map[string]struct {
		live        []client.Object
		readFails   bool
		wantRefusal bool
	}{
		"the PVC is still warm: a rejection":           {live: []client.Object{warm}, wantRefusal: true},
		"the PVC was checked out since: no rejection":  {live: []client.Object{handedOut}},
		"the PVC is gone: no rejection":                {},
		"another PVC of that name: no rejection":       {live: []client.Object{replaced}},
		"the live read fails: reported as a rejection": {live: []client.Object{warm}, readFails: true, wantRefusal: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			refuse := interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				if _, ok := obj.(*corev1.Pod); ok {
					return apierrors.NewForbidden(corev1.Resource("pods"), obj.GetName(), errors.New("admission webhook denied the request"))
				}
				return c.Create(ctx, obj, opts...)
			}}
			cached := fakeAPI(t, refuse, warm.DeepCopy())
			live := client.Reader(fakeAPI(t, interceptor.Funcs{}, tc.live...))
			if tc.readFails {
				live = fakeAPI(t, interceptor.Funcs{Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
					return apierrors.NewServiceUnavailable("etcd is down")
				}}, tc.live...)
			}
			r := NewPoolReconciler(cached, live, clocktesting.NewFakePassiveClock(now), Options{BinderImage: "pause"})
			np := namespacePlan{namespace: "ns", stage: pool.StagePlan{Create: []pool.Stage{{Claim: warm.Name, Node: "n1"}}}}
			read := &corev1.PersistentVolumeClaim{}
			if err := cached.Get(context.Background(), client.ObjectKeyFromObject(warm), read); err != nil {
				t.Fatal(err)
			}
			ops := r.stagingOps(context.Background(), f, np, map[string]*corev1.PersistentVolumeClaim{warm.Name: read}, poolObserved{})
			if len(ops) != 1 {
				t.Fatalf("%d operations, want the one create", len(ops))
			}
			err := ops[0]()
			after := &corev1.PersistentVolumeClaim{}
			if err := cached.Get(context.Background(), client.ObjectKeyFromObject(warm), after); err != nil {
				t.Fatal(err)
			}
			if req, ok := after.Annotations[v1alpha1.HolderRequestAnnotationKey]; ok {
				t.Errorf("the refused holder's request %q is left on the PVC, keeping it from checkouts", req)
			}
			if got := len(rejectedHolders(err)) == 1; got != tc.wantRefusal {
				t.Errorf("error %v: a HolderRejected: %v, want %v", err, got, tc.wantRefusal)
			}
			if !tc.wantRefusal && err != nil {
				t.Errorf("error %v, want none", err)
			}
		})
	}
}

// TestStagingOpsRequestsTheHolderFirst: the pool records a holder request
// on the warm PVC, conditioned on the version its plan read, before it
// creates the holder, which carries the request. A PVC written since that
// version (checked out, say) gets no holder. Before, the holder was created
// whatever happened to the PVC since the cache saw it.
func TestStagingOpsRequestsTheHolderFirst(t *testing.T) {
	now := fixtures.Epoch.Add(time.Hour)
	f := fixtures.MakeFluentPVC("f").Obj()
	warm := fixtures.Returned(fixtures.Claim(f, "ns", "f-abc", "h", v1alpha1.CheckoutHit, now))
	warm.UID = "warm-uid"
	for name, stale := range map[string]bool{"the PVC as read": false, "the PVC written since it was read": true} {
		t.Run(name, func(t *testing.T) {
			api := fakeAPI(t, interceptor.Funcs{}, warm.DeepCopy())
			read := &corev1.PersistentVolumeClaim{}
			if err := api.Get(context.Background(), client.ObjectKeyFromObject(warm), read); err != nil {
				t.Fatal(err)
			}
			if stale {
				read.ResourceVersion = "1"
			}
			r := NewPoolReconciler(api, api, clocktesting.NewFakePassiveClock(now), Options{BinderImage: "pause"})
			np := namespacePlan{namespace: "ns", stage: pool.StagePlan{Create: []pool.Stage{{Claim: warm.Name, Node: "n1"}}}}
			ops := r.stagingOps(context.Background(), f, np, map[string]*corev1.PersistentVolumeClaim{warm.Name: read}, poolObserved{})
			if len(ops) != 1 {
				t.Fatalf("%d operations, want the one create", len(ops))
			}
			if err := ops[0](); err != nil {
				t.Fatal(err)
			}
			after := &corev1.PersistentVolumeClaim{}
			if err := api.Get(context.Background(), client.ObjectKeyFromObject(warm), after); err != nil {
				t.Fatal(err)
			}
			h := &corev1.Pod{}
			err := api.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: objects.HolderName(warm.Name)}, h)
			if stale {
				if !apierrors.IsNotFound(err) {
					t.Errorf("a holder of a PVC written since the plan read it: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			req := after.Annotations[v1alpha1.HolderRequestAnnotationKey]
			if req == "" || h.Annotations[v1alpha1.HolderRequestAnnotationKey] != req {
				t.Errorf("PVC records request %q, holder carries %q: want one request, on both", req, h.Annotations[v1alpha1.HolderRequestAnnotationKey])
			}
		})
	}
}
