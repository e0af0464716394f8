package controllers

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/st-tech/fluent-pvc-operator/apis/objects"
	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/pool"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

// TestHolderReconcile runs the holder reconciler against a fake API
// server: it finds the pod a staged PVC went to through the binding
// index, and removes the holder only once that pod is on a node.
func TestHolderReconcile(t *testing.T) {
	now := fixtures.Epoch.Add(time.Hour)
	f := fixtures.MakeFluentPVC("f").Obj()
	warm := fixtures.Returned(fixtures.Claim(f, "ns", "f-abc", "h", v1alpha1.CheckoutHit, now))
	warm.UID = "warm-uid"
	handedOut := fixtures.CheckedOut(warm, now.Add(-time.Second))
	handedOut.UID = warm.UID
	holder := objects.HolderPod(f.Name, warm, "n1", "pause", "")
	holder.Spec.NodeName, holder.Status.Phase = "n1", corev1.PodRunning
	app := func(node string) *corev1.Pod {
		return fixtures.MakePod("app", "ns").FluentPVC(f.Name).Claim(warm.Name).Label(v1alpha1.BindingNameLabelKey, warm.Name).NodeName(node).Obj()
	}
	// A pod whose opt-in label was removed, which the operator's cache
	// (labelled pods only) no longer holds. The fake API serves both the
	// cache's reads and the live ones: without the labels, its List by
	// binding label does not find the pod, as the cache would not, and a
	// Get by name does, as a live read would.
	unlabelled := func(node string) *corev1.Pod {
		p := fixtures.MakePod("app", "ns").Claim(warm.Name).NodeName(node).Obj()
		p.UID = "app-uid"
		return p
	}
	rec, err := claim.RecordPod(handedOut, v1alpha1.ObjectIdentity{Name: "app", UID: "app-uid"})
	if err != nil {
		t.Fatal(err)
	}
	recorded := rec.Object
	// A pod that carries the binding label but mounts another claim.
	impostor := fixtures.MakePod("impostor", "ns").FluentPVC(f.Name).Claim("other").Label(v1alpha1.BindingNameLabelKey, warm.Name).NodeName("n2").Obj()
	cases := map[string]struct {
		objs []client.Object
		// uncached: the cache holds none of the pods; unbound: it holds
		// them as they were before their binding.
		uncached, unbound bool
		// stalePVC: the cache holds the PVC as it was before its checkout.
		stalePVC    bool
		wantDeleted bool
		wantRequeue bool
	}{
		"a warm PVC keeps its holder":                       {objs: []client.Object{warm, holder}},
		"handed out, no pod yet: it waits":                  {objs: []client.Object{handedOut, holder}, wantRequeue: true},
		"handed out, the pod not on a node: it waits":       {objs: []client.Object{handedOut, holder, app("")}, wantRequeue: true},
		"handed out, the pod on the holder's node: it goes": {objs: []client.Object{handedOut, holder, app("n1")}, wantDeleted: true},
		"handed out, the pod on another node: it goes":      {objs: []client.Object{handedOut, holder, app("n2")}, wantDeleted: true},
		"a pod with the label that mounts another claim":    {objs: []client.Object{handedOut, holder, impostor}, wantRequeue: true},
		"its PVC is gone: it goes":                          {objs: []client.Object{holder}, wantDeleted: true},
		"the pod the claim records, out of the cache (its opt-in label removed), on the holder's node: it goes": {
			objs: []client.Object{recorded, holder, unlabelled("n1")}, wantDeleted: true,
		},
		"the pod the claim records, out of the cache, not on a node: it waits": {
			objs: []client.Object{recorded, holder, unlabelled("")}, wantRequeue: true,
		},
		"the pod the claim records is gone: it goes, not to hold the drain up": {objs: []client.Object{recorded, holder}, wantDeleted: true},
		"the pod out of the cache before its binding recorded it, on the holder's node: it goes": {
			objs: []client.Object{handedOut, holder, app("n1")}, uncached: true, wantDeleted: true,
		},
		"the pod out of the cache, not on a node: it waits":         {objs: []client.Object{handedOut, holder, app("")}, uncached: true, wantRequeue: true},
		"the cache behind the pod's binding (a cut watch): it goes": {objs: []client.Object{handedOut, holder, app("n1")}, unbound: true, wantDeleted: true},
		"the cache behind the PVC's checkout (a cut watch), the pod on a node: it goes": {
			objs: []client.Object{handedOut, holder, app("n1")}, stalePVC: true, wantDeleted: true,
		},
		"the PVC warm, no pod carries it: it stays": {objs: []client.Object{warm, holder}, stalePVC: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			api := fakeAPI(t, interceptor.Funcs{}, tc.objs...)
			cached := client.Client(api)
			if tc.stalePVC {
				cached = interceptor.NewClient(api, interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
					if pvc, ok := obj.(*corev1.PersistentVolumeClaim); ok && key.Name == warm.Name {
						warm.DeepCopyInto(pvc)
						return nil
					}
					return c.Get(ctx, key, obj, opts...)
				}})
			}
			if tc.uncached || tc.unbound {
				cached = interceptor.NewClient(api, interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
					pods, ok := list.(*corev1.PodList)
					switch {
					case ok && tc.uncached:
						return nil // their opt-in label was removed
					case ok:
						if err := c.List(ctx, list, opts...); err != nil {
							return err
						}
						for i := range pods.Items {
							pods.Items[i].Spec.NodeName = ""
						}
						return nil
					}
					return c.List(ctx, list, opts...)
				}})
			}
			r := NewHolderReconciler(cached, api, clocktesting.NewFakePassiveClock(now))
			res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: holder.Name}})
			if err != nil {
				t.Fatal(err)
			}
			err = api.Get(context.Background(), client.ObjectKeyFromObject(holder), &corev1.Pod{})
			if deleted := apierrors.IsNotFound(err); deleted != tc.wantDeleted {
				t.Errorf("holder deleted: %v, want %v (get: %v)", deleted, tc.wantDeleted, err)
			}
			if requeue := res.RequeueAfter > 0; requeue != tc.wantRequeue {
				t.Errorf("requeue after %s, want one: %v", res.RequeueAfter, tc.wantRequeue)
			}
			if res.RequeueAfter > pool.MinHolderRecheck {
				// Every case that waits has a PVC handed out: its pod's
				// events may come late.
				t.Errorf("requeue after %s, want at most %s", res.RequeueAfter, pool.MinHolderRecheck)
			}
		})
	}
}

func TestRejectedHolders(t *testing.T) {
	forbidden := apierrors.NewForbidden(corev1.Resource("pods"), "h", nil)
	err := errors.Join(holderRejected{forbidden}, apierrors.NewTimeoutError("slow", 1), errors.Join(holderRejected{forbidden}))
	if got := rejectedHolders(err); len(got) != 2 {
		t.Errorf("rejectedHolders = %q, want the two refusals", got)
	}
	if got := rejectedHolders(nil); got != nil {
		t.Errorf("rejectedHolders(nil) = %q", got)
	}
}

// TestHolderReconcileWithdrawsAnEvictedHoldersRequest: the holder of a
// warm PVC that ended (evicted, preempted) is removed, and the holder
// request it carried is withdrawn from the PVC: with no holder carrying it
// left to see, the request would keep the PVC from checkouts, and from a
// new holder, until its TTL.
func TestHolderReconcileWithdrawsAnEvictedHoldersRequest(t *testing.T) {
	now := fixtures.Epoch.Add(time.Hour)
	f := fixtures.MakeFluentPVC("f").Obj()
	warm := requestedWarm(f, now)
	holder := objects.HolderPod(f.Name, warm, "n1", "pause", "")
	holder.Spec.NodeName, holder.Status.Phase = "n1", corev1.PodFailed
	api := fakeAPI(t, interceptor.Funcs{}, warm, holder)
	r := NewHolderReconciler(api, api, clocktesting.NewFakePassiveClock(now))
	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(holder)}); err != nil {
		t.Fatal(err)
	}
	if err := api.Get(context.Background(), client.ObjectKeyFromObject(holder), &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Errorf("the evicted holder is still there: %v", err)
	}
	after := getPVC(t, api, warm)
	if req, ok := after.Annotations[v1alpha1.HolderRequestAnnotationKey]; ok {
		t.Errorf("the evicted holder's request %q is left on the PVC", req)
	}
}

// TestHolderEvents: a pod handed a claim, and a claim handed out or being
// deleted while warm, reconcile the claim's holder only when the cache
// has one; a holder the cache has not yet is reconciled by its own event.
func TestHolderEvents(t *testing.T) {
	now := fixtures.Epoch.Add(time.Hour)
	f := fixtures.MakeFluentPVC("f").Obj()
	warm := fixtures.Returned(fixtures.Claim(f, "ns", "f-abc", "h", v1alpha1.CheckoutHit, now))
	handedOut := fixtures.CheckedOut(warm, now.Add(-time.Second))
	deleting := warm.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{Time: now}
	holder := objects.HolderPod(f.Name, warm, "n1", "pause", "")
	app := fixtures.MakePod("app", "ns").FluentPVC(f.Name).Claim(warm.Name).Label(v1alpha1.BindingNameLabelKey, warm.Name).Obj()
	drain := app.DeepCopy()
	drain.Labels[v1alpha1.ComponentLabelKey] = v1alpha1.ComponentDrain
	want := []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(holder)}}
	cases := map[string]struct {
		obj       client.Object
		holderSet bool
		want      []reconcile.Request
	}{
		"a pod handed the claim, its holder cached":       {obj: app, holderSet: true, want: want},
		"a pod handed the claim, no holder":               {obj: app},
		"a drain pod of the claim":                        {obj: drain, holderSet: true},
		"the claim handed out, its holder cached":         {obj: handedOut, holderSet: true, want: want},
		"the claim handed out, no holder":                 {obj: handedOut},
		"the claim deleted while warm, its holder cached": {obj: deleting, holderSet: true, want: want},
		"the claim deleted while warm, no holder":         {obj: deleting},
		"the claim warm":                                  {obj: warm, holderSet: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var objs []client.Object
			if tc.holderSet {
				objs = append(objs, holder)
			}
			api := fakeAPI(t, interceptor.Funcs{}, objs...)
			r := NewHolderReconciler(api, api, clocktesting.NewFakePassiveClock(now))
			var got []reconcile.Request
			switch tc.obj.(type) {
			case *corev1.Pod:
				got = r.holderOfPod(context.Background(), tc.obj)
			default:
				got = r.holderOfClaim(context.Background(), tc.obj)
			}
			if !equality.Semantic.DeepEqual(got, tc.want) {
				t.Errorf("requests = %v, want %v", got, tc.want)
			}
		})
	}
}
