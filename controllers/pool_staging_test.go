package controllers

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	// The PVC as the pool's request left it: the holder carries the same.
	requested := warm.DeepCopy()
	metav1.SetMetaDataAnnotation(&requested.ObjectMeta, v1alpha1.HolderRequestAnnotationKey, now.UTC().Format(time.RFC3339Nano))
	rerequested := warm.DeepCopy()
	metav1.SetMetaDataAnnotation(&rerequested.ObjectMeta, v1alpha1.HolderRequestAnnotationKey, now.Add(time.Second).UTC().Format(time.RFC3339Nano))
	cases := map[string]struct {
		live        []client.Object
		readFails   bool
		wantRefusal bool
	}{
		"the PVC is still warm: a rejection":               {live: []client.Object{requested}, wantRefusal: true},
		"the PVC was checked out since: no rejection":      {live: []client.Object{handedOut}},
		"the PVC is gone: no rejection":                    {},
		"another PVC of that name: no rejection":           {live: []client.Object{replaced}},
		"another replica's request replaced: no rejection": {live: []client.Object{rerequested}},
		"the live read fails: reported as a rejection":     {live: []client.Object{requested}, readFails: true, wantRefusal: true},
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
			read := getPVC(t, api, warm)
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
			after := getPVC(t, api, warm)
			h := &corev1.Pod{}
			err := api.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: objects.HolderName(warm.Name)}, h)
			if stale {
				if !apierrors.IsNotFound(err) {
					t.Errorf("a holder of a PVC written since the plan read it: %v", err)
				}
				if req, ok := after.Annotations[v1alpha1.HolderRequestAnnotationKey]; ok {
					t.Errorf("a PVC written since the plan read it got request %q", req)
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

// TestStagingOpsWithdrawsARefusedRequest: when the API server answers a
// holder's create with a refusal, which proves the holder was not stored,
// the pool withdraws the PVC's holder request at once, so that checkouts
// take the PVC unstaged; when the answer proves nothing (a storage error,
// a proxy's, a timeout, none), the request stays until its TTL.
func TestStagingOpsWithdrawsARefusedRequest(t *testing.T) {
	now := fixtures.Epoch.Add(time.Hour)
	f := fixtures.MakeFluentPVC("f").Obj()
	warm := fixtures.Returned(fixtures.Claim(f, "ns", "f-abc", "h", v1alpha1.CheckoutHit, now))
	warm.UID = "warm-uid"
	pods := corev1.Resource("pods")
	for name, tc := range map[string]struct {
		err      error
		withdraw bool
	}{
		"forbidden":          {err: apierrors.NewForbidden(pods, "h", errors.New("quota exceeded")), withdraw: true},
		"already exists":     {err: apierrors.NewAlreadyExists(pods, "h"), withdraw: true},
		"invalid":            {err: apierrors.NewInvalid(corev1.SchemeGroupVersion.WithKind("Pod").GroupKind(), "h", nil), withdraw: true},
		"too many requests":  {err: apierrors.NewTooManyRequests("slow down", 1), withdraw: true},
		"webhook not called": {err: apierrors.NewInternalError(errors.New(`failed calling webhook "holders.fluent-pvc-operator.tech.zozo.com": connection refused`)), withdraw: true},
		"storage error":      {err: apierrors.NewInternalError(errors.New("etcdserver: request timed out"))},
		"unavailable":        {err: apierrors.NewServiceUnavailable("the proxy found no backend")},
		"server timeout":     {err: apierrors.NewTimeoutError("request did not complete", 1)},
		"no answer":          {err: context.DeadlineExceeded},
	} {
		t.Run(name, func(t *testing.T) {
			api := fakeAPI(t, interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				if _, ok := obj.(*corev1.Pod); ok {
					return tc.err
				}
				return c.Create(ctx, obj, opts...)
			}}, warm.DeepCopy())
			read := getPVC(t, api, warm)
			r := NewPoolReconciler(api, api, clocktesting.NewFakePassiveClock(now), Options{BinderImage: "pause"})
			np := namespacePlan{namespace: "ns", stage: pool.StagePlan{Create: []pool.Stage{{Claim: warm.Name, Node: "n1"}}}}
			ops := r.stagingOps(context.Background(), f, np, map[string]*corev1.PersistentVolumeClaim{warm.Name: read}, poolObserved{})
			_ = ops[0]()
			after := getPVC(t, api, warm)
			if _, kept := after.Annotations[v1alpha1.HolderRequestAnnotationKey]; kept == tc.withdraw {
				t.Errorf("request kept: %v, want %v", kept, !tc.withdraw)
			}
		})
	}
}

// TestStagingOpsWithdrawsARemovedHoldersRequest: the pool removing a
// holder whose request its warm PVC still records, younger than the TTL,
// withdraws the request: with no holder carrying it left to see, it would
// keep the PVC from checkouts until the TTL, though its holder was made.
func TestStagingOpsWithdrawsARemovedHoldersRequest(t *testing.T) {
	now := fixtures.Epoch.Add(time.Hour)
	f := fixtures.MakeFluentPVC("f").Obj()
	warm := requestedWarm(f, now)
	h := objects.HolderPod(f.Name, warm, "n1", "pause", "")
	api := fakeAPI(t, interceptor.Funcs{}, warm.DeepCopy(), h)
	read := getPVC(t, api, warm)
	cachedHolder := &corev1.Pod{}
	if err := api.Get(context.Background(), client.ObjectKeyFromObject(h), cachedHolder); err != nil {
		t.Fatal(err)
	}
	r := NewPoolReconciler(api, api, clocktesting.NewFakePassiveClock(now), Options{BinderImage: "pause"})
	np := namespacePlan{namespace: "ns", stage: pool.StagePlan{Delete: []string{h.Name}}}
	ops := r.stagingOps(context.Background(), f, np, map[string]*corev1.PersistentVolumeClaim{warm.Name: read}, poolObserved{holders: []corev1.Pod{*cachedHolder}})
	if len(ops) != 1 {
		t.Fatalf("%d operations, want the one removal", len(ops))
	}
	if err := ops[0](); err != nil {
		t.Fatal(err)
	}
	after := getPVC(t, api, warm)
	if req, ok := after.Annotations[v1alpha1.HolderRequestAnnotationKey]; ok {
		t.Errorf("the removed holder's request %q is left on the PVC", req)
	}
	if err := api.Get(context.Background(), client.ObjectKeyFromObject(h), &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Errorf("the holder is still there: %v", err)
	}
}

// requestedWarm is a warm PVC of f that records a holder request made a
// second before now.
func requestedWarm(f *v1alpha1.FluentPVC, now time.Time) *corev1.PersistentVolumeClaim {
	warm := fixtures.Returned(fixtures.Claim(f, "ns", "f-abc", "h", v1alpha1.CheckoutHit, now))
	warm.UID = "warm-uid"
	metav1.SetMetaDataAnnotation(&warm.ObjectMeta, v1alpha1.HolderRequestAnnotationKey, now.Add(-time.Second).UTC().Format(time.RFC3339Nano))
	return warm
}

// getPVC reads PVC pvc's namespace and name through c.
func getPVC(t *testing.T, c client.Reader, pvc *corev1.PersistentVolumeClaim) *corev1.PersistentVolumeClaim {
	t.Helper()
	got := &corev1.PersistentVolumeClaim{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(pvc), got); err != nil {
		t.Fatal(err)
	}
	return got
}
