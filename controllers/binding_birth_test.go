package controllers

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/checkout"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/expectations"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

// TestDecideBirth: what createBinding does about a claim whose binding
// does not exist, from the cache's copy (decideBirth) and, when that asks
// for it, from the claim read live (decideLiveBirth).
func TestDecideBirth(t *testing.T) {
	admitted := fixtures.Epoch
	// A pod's start: its claim's admission is within the pod's creation
	// second.
	starting := admitted.Add(300 * time.Millisecond)
	podWaitOver := admitted.Add(claim.PodWait)
	f := fixtures.MakeFluentPVC("f").PoolSize(1).Obj()
	fresh := fixtures.Claim(f, "ns", "c", "h", v1alpha1.CheckoutHit, admitted)
	fresh.UID = "c-uid"
	p := v1alpha1.ObjectIdentity{Name: "p", UID: "p-uid"}
	q := v1alpha1.ObjectIdentity{Name: "q", UID: "q-uid"}
	pending := func(node string) corev1.Pod {
		pod := startPod("p", "c", admitted, false)
		pod.Spec.NodeName = node
		return *pod
	}
	records := func(pvc *corev1.PersistentVolumeClaim, id v1alpha1.ObjectIdentity) *corev1.PersistentVolumeClaim {
		w, err := claim.RecordPod(pvc.DeepCopy(), id)
		if err != nil {
			t.Fatal(err)
		}
		return w.Object
	}
	reservedUntil := func(pvc *corev1.PersistentVolumeClaim, until time.Time) *corev1.PersistentVolumeClaim {
		pvc = pvc.DeepCopy()
		pvc.Annotations[v1alpha1.ReservedByAnnotationKey] = "replica-a"
		pvc.Annotations[v1alpha1.ReservedUntilAnnotationKey] = until.Format(time.RFC3339Nano)
		return pvc
	}
	reserved := reservedUntil(fresh, admitted.Add(time.Minute))
	leased := fresh.DeepCopy()
	leased.Annotations[v1alpha1.ReservedByAnnotationKey] = "sys/replica-a"
	otherBinding := fresh.DeepCopy()
	otherBinding.Labels[v1alpha1.BindingNameLabelKey] = "d"

	cases := map[string]struct {
		// claim is the cached claim; nil: none.
		claim *corev1.PersistentVolumeClaim
		// live is the claim read live; nil: the cached one's copy.
		live *corev1.PersistentVolumeClaim
		// liveGone: the live read finds no claim.
		liveGone bool
		// holderEnd and liveHolderEnd are when the Lease of the claim's
		// reservation holder is over, as cached and as read live.
		holderEnd, liveHolderEnd time.Time
		pods                     []corev1.Pod
		ownClaimStale            bool
		// seen is the pod remembered for the cached checkout.
		seen     *v1alpha1.ObjectIdentity
		now      time.Time
		wantPlan birthPlan
		// wantLive is the plan after the live read, which wantPlan asks for.
		wantLive birthPlan
	}{
		"no claim": {
			now: starting,
		},
		"a claim back in the pool": {
			claim: fixtures.Returned(fresh), now: starting,
		},
		"a claim labelled for another binding": {
			claim: otherBinding, now: starting,
		},
		"a claim its binding let go of in order to delete it, the binding gone before the deletion": {
			claim: releasedFor(fresh, true), now: starting, wantPlan: birthPlan{step: birthDeleteReleased},
		},
		"a claim let go of to be kept for the user": {
			claim: releasedFor(fresh, false), now: starting,
		},
		"a claim let go of for deletion, labelled for another binding": {
			claim: releasedFor(otherBinding, true), now: starting,
		},
		"the cache has not seen the record of the pod on the claim": {
			claim: records(fresh, p), pods: []corev1.Pod{pending("n")}, ownClaimStale: true, now: starting,
			wantPlan: birthPlan{step: birthWait, wait: expectations.TTL},
		},
		"no pod cached yet: its pod may come": {
			claim: fresh, now: admitted.Add(time.Second),
			wantPlan: birthPlan{step: birthWait, wait: claim.PodWait - time.Second},
		},
		"two pods labelled with the binding's name: neither is taken for its pod": {
			claim: fresh, pods: []corev1.Pod{pending("n"), *startPod("q", "c", admitted, false)}, now: starting,
			wantPlan: birthPlan{step: birthWait, wait: claim.PodWait - 300*time.Millisecond},
		},
		"reserved ahead, no pod yet: it may come until the reservation ends": {
			claim: reserved, now: admitted.Add(time.Second),
			wantPlan: birthPlan{step: birthWait, wait: time.Minute + claim.PodWait - time.Second},
		},
		"reserved under a Lease, no pod yet: it may come until the Lease is over": {
			claim: leased, holderEnd: admitted.Add(40 * time.Second), now: admitted.Add(time.Second),
			wantPlan: birthPlan{step: birthWait, wait: 39*time.Second + claim.PodWait},
		},
		"reserved under a Lease that is over and gone from the cache, renewed by the live read: its pod may still come": {
			claim: leased, liveHolderEnd: podWaitOver.Add(30 * time.Second), now: podWaitOver,
			wantPlan: birthPlan{step: birthReadLive},
			wantLive: birthPlan{step: birthWait, wait: 30*time.Second + claim.PodWait},
		},
		"reserved under a Lease over for the live read too: made without a pod": {
			claim: leased, liveHolderEnd: admitted.Add(time.Second), now: admitted.Add(time.Second + claim.PodWait),
			wantPlan: birthPlan{step: birthReadLive},
			wantLive: birthPlan{step: birthCreate},
		},
		"reserved under a Lease whose clock runs ahead: waits no longer than a Lease": {
			claim: leased, holderEnd: admitted.Add(time.Hour), now: admitted,
			wantPlan: birthPlan{step: birthWait, wait: checkout.LeaseDuration + claim.PodWait},
		},
		"pod cached, not scheduled: made with the pod at once": {
			claim: fresh, pods: []corev1.Pod{pending("")}, now: starting,
			wantPlan: birthPlan{step: birthReadLive},
			wantLive: birthPlan{step: birthCreate, pod: p, remember: true},
		},
		"scheduled and starting: made with the pod at once": {
			claim: fresh, pods: []corev1.Pod{pending("n")}, now: starting,
			wantPlan: birthPlan{step: birthReadLive},
			wantLive: birthPlan{step: birthCreate, pod: p, remember: true},
		},
		"scheduled and starting, reserved ahead: made with the pod at once": {
			claim: reserved, pods: []corev1.Pod{pending("n")}, now: starting,
			wantPlan: birthPlan{step: birthReadLive},
			wantLive: birthPlan{step: birthCreate, pod: p, remember: true},
		},
		"scheduled and starting, the claim records it already: made with the claim's record": {
			claim: records(fresh, p), pods: []corev1.Pod{pending("n")}, now: starting,
			wantPlan: birthPlan{step: birthReadLive},
			wantLive: birthPlan{step: birthCreate, pod: p},
		},
		"the pod being deleted while it starts: made with the pod at once": {
			claim: fresh, pods: []corev1.Pod{*startPod("p", "c", admitted, true)}, now: starting,
			wantPlan: birthPlan{step: birthReadLive},
			wantLive: birthPlan{step: birthCreate, pod: p, remember: true},
		},
		"the claim records another pod than the cached one: made with the claim's": {
			claim: records(fresh, q), pods: []corev1.Pod{pending("n")}, now: starting,
			wantPlan: birthPlan{step: birthReadLive},
			wantLive: birthPlan{step: birthCreate, pod: q},
		},
		"lost after the claim recorded its pod, which is gone: made with the claim's": {
			claim: records(fresh, p), now: starting,
			wantPlan: birthPlan{step: birthReadLive},
			wantLive: birthPlan{step: birthCreate, pod: p},
		},
		"no pod and never seen, after the wait: made without a pod": {
			claim: fresh, now: podWaitOver,
			wantPlan: birthPlan{step: birthReadLive},
			wantLive: birthPlan{step: birthCreate},
		},
		"no pod cached, seen earlier: made with the seen pod": {
			claim: fresh, seen: &p, now: starting,
			wantPlan: birthPlan{step: birthReadLive},
			wantLive: birthPlan{step: birthCreate, pod: p, remember: true},
		},
		"a pod cached and one seen: the cached one counts": {
			claim: fresh, pods: []corev1.Pod{pending("")}, seen: &q, now: starting,
			wantPlan: birthPlan{step: birthReadLive},
			wantLive: birthPlan{step: birthCreate, pod: p, remember: true},
		},
		"no pod and never seen, the live reservation extended: its pod may still come": {
			claim: fresh, live: reservedUntil(fresh, podWaitOver.Add(30*time.Second)), now: podWaitOver,
			wantPlan: birthPlan{step: birthReadLive},
			wantLive: birthPlan{step: birthWait, wait: 30*time.Second + claim.PodWait},
		},
		"seen earlier, the live reservation extended: made with the seen pod": {
			claim: fresh, live: reservedUntil(fresh, podWaitOver.Add(30*time.Second)), seen: &p, now: podWaitOver,
			wantPlan: birthPlan{step: birthReadLive},
			wantLive: birthPlan{step: birthCreate, pod: p, remember: true},
		},
		"the claim handed out again since the cached copy": {
			claim: fresh, live: fixtures.CheckedOut(fixtures.Returned(fresh), podWaitOver), seen: &p, now: podWaitOver,
			wantPlan: birthPlan{step: birthReadLive},
			wantLive: birthPlan{step: birthWait, wait: unwatchedRecheck},
		},
		"the claim gone by the live read": {
			claim: fresh, liveGone: true, now: podWaitOver,
			wantPlan: birthPlan{step: birthReadLive},
		},
		"the claim back in the pool by the live read": {
			claim: fresh, live: fixtures.Returned(fresh), seen: &p, now: podWaitOver,
			wantPlan: birthPlan{step: birthReadLive},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o := birth{key: client.ObjectKey{Namespace: "ns", Name: "c"}, pods: tc.pods, ownClaimStale: tc.ownClaimStale, holderEnd: tc.holderEnd}
			if tc.claim != nil {
				o.claim = tc.claim.DeepCopy()
				o.checkout = seenKeyOf(tc.claim)
			}
			if tc.seen != nil {
				o.seen, o.wasSeen = *tc.seen, true
			}
			got := decideBirth(o, tc.now)
			if diff := cmp.Diff(tc.wantPlan, got, cmp.AllowUnexported(birthPlan{})); diff != "" {
				t.Fatalf("decideBirth (-want +got):\n%s", diff)
			}
			if got.step != birthReadLive {
				if tc.wantLive != (birthPlan{}) {
					t.Fatalf("decideBirth = %+v, no live read; want one, then %+v", got, tc.wantLive)
				}
				return
			}
			switch {
			case tc.liveGone:
				o.claim = nil
			case tc.live != nil:
				o.claim = tc.live.DeepCopy()
			}
			o.holderEnd = tc.liveHolderEnd
			if diff := cmp.Diff(tc.wantLive, decideLiveBirth(o, tc.now), cmp.AllowUnexported(birthPlan{})); diff != "" {
				t.Errorf("decideLiveBirth (-want +got):\n%s", diff)
			}
		})
	}
}

// releasedFor is claim pvc let go of by its binding (its finalizer
// removed), marked for deletion when forDeletion, as the binding does
// before it deletes the claim.
func releasedFor(pvc *corev1.PersistentVolumeClaim, forDeletion bool) *corev1.PersistentVolumeClaim {
	b := claim.Binding(pvc, "")
	b.Spec.PVC.UID = pvc.UID
	release := claim.Release
	if forDeletion {
		release = claim.ReleaseForDeletion
	}
	w, err := release(b, pvc)
	if err != nil {
		panic(err)
	}
	return w.Object
}

// startPod is a labelled pod of claim, created at created, pending (and
// being deleted when deleting).
func startPod(name, claimName string, created time.Time, deleting bool) *corev1.Pod {
	p := fixtures.MakePod(name, "ns").FluentPVC("f").Label(v1alpha1.BindingNameLabelKey, claimName).Claim(claimName).Obj()
	p.UID = types.UID(name + "-uid")
	p.CreationTimestamp = metav1.NewTime(created)
	p.Status.Phase = corev1.PodPending
	if deleting {
		p.DeletionTimestamp = &metav1.Time{Time: created}
		p.Finalizers = []string{"test/keep"}
	}
	return p
}

func TestSeenPods(t *testing.T) {
	t0 := fixtures.Epoch
	key := seenKey{claim: client.ObjectKey{Namespace: "ns", Name: "c"}, checkout: "co-2"}
	id := v1alpha1.ObjectIdentity{Name: "p", UID: "p-uid"}
	cases := map[string]struct {
		do   func(s *seenPods)
		at   time.Time
		want bool
	}{
		"remembered": {do: func(s *seenPods) { s.Expect(key, "", id, t0) }, at: t0.Add(time.Second), want: true},
		"forgotten":  {do: func(s *seenPods) { s.Expect(key, "", id, t0); s.Drop(key) }, at: t0},
		"too old":    {do: func(s *seenPods) { s.Expect(key, "", id, t0) }, at: t0.Add(expectations.TTL)},
		"never seen": {do: func(*seenPods) {}, at: t0},
		"another claim's pod": {do: func(s *seenPods) {
			s.Expect(seenKey{claim: client.ObjectKey{Namespace: "ns", Name: "other"}, checkout: "co-2"}, "", id, t0)
		}, at: t0},
		"the pod of an earlier checkout of the claim": {do: func(s *seenPods) { s.Expect(seenKey{claim: key.claim, checkout: "co-1"}, "", id, t0) }, at: t0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var s seenPods
			tc.do(&s)
			got, ok := s.Value(key, tc.at)
			if ok != tc.want || (ok && got != id) {
				t.Errorf("get = %v, %v; want %v", got, ok, tc.want)
			}
		})
	}
}

// TestCreateBinding: the binding of a claim whose pod is cached is made
// at once, with that pod, whether the pod is scheduled or not, and
// whatever else starts. A binding lost before the claim records its pod
// is made again with that pod, even if the pod went too (the API server
// deletes a pod with no node at once, and the cache may show only its
// absence), unless the claim was handed out again meanwhile.
func TestCreateBinding(t *testing.T) {
	admitted := fixtures.Epoch
	now := admitted.Add(300 * time.Millisecond)
	cases := map[string]struct {
		node string
		// deleting: the pod is being deleted.
		deleting bool
		// reserved: the claim was handed out from a reservation.
		reserved bool
		// liveCheckout: the claim read live records this checkout, not
		// the cached one.
		liveCheckout string
		// lostWithPod: once made, the binding is deleted, and so is the
		// pod.
		lostWithPod bool
		// handedOutAgain: then the claim records another checkout, and no
		// pod of it shows within the binding's wait for one: its binding
		// is made without the pod that went.
		handedOutAgain bool
	}{
		"scheduled, with another pod starting":                                 {node: "n"},
		"not scheduled yet":                                                    {},
		"scheduled, handed out from a reservation":                             {node: "n", reserved: true},
		"scheduled and being deleted":                                          {node: "n", deleting: true},
		"scheduled, the claim handed out again since the cached copy":          {node: "n", liveCheckout: "later"},
		"scheduled, the binding lost with the pod":                             {node: "n", lostWithPod: true},
		"not scheduled, the binding lost with the pod":                         {lostWithPod: true},
		"scheduled, the binding lost with the pod, the claim handed out again": {node: "n", lostWithPod: true, handedOutAgain: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := fixtures.MakeFluentPVC("f").PoolSize(1).Obj()
			pvc := fixtures.Claim(f, "ns", "c", "h", v1alpha1.CheckoutHit, admitted)
			pvc.UID = "c-uid"
			if tc.reserved {
				pvc.Annotations[v1alpha1.ReservedByAnnotationKey] = "replica-a"
				pvc.Annotations[v1alpha1.ReservedUntilAnnotationKey] = admitted.Add(time.Minute).Format(time.RFC3339Nano)
				pvc.Finalizers = nil
			}
			own := startPod("p", "c", admitted, tc.deleting)
			own.Spec.NodeName = tc.node
			other := startPod("q", "d", now, false)
			c := fakeAPI(t, interceptor.Funcs{}, pvc, own, other)
			live := client.Reader(c)
			if tc.liveCheckout != "" {
				again := pvc.DeepCopy()
				again.Annotations[v1alpha1.CheckoutIDAnnotationKey] = tc.liveCheckout
				live = fakeAPI(t, interceptor.Funcs{}, again)
			}
			clk := clocktesting.NewFakePassiveClock(now)
			r := NewBindingReconciler(c, live, events.NewFakeRecorder(10), clk, Options{})
			ctx := context.Background()
			key := client.ObjectKeyFromObject(pvc)
			ownID := v1alpha1.ObjectIdentity{Name: own.Name, UID: own.UID}

			wait, err := r.createBinding(ctx, key, now)
			if err != nil {
				t.Fatal(err)
			}
			if tc.liveCheckout != "" {
				if wait == 0 {
					t.Error("createBinding = 0; want a wait")
				}
				if err := c.Get(ctx, key, &v1alpha1.FluentPVCBinding{}); !apierrors.IsNotFound(err) {
					t.Fatalf("a binding was made for the later checkout with what was found for the cached one (err %v)", err)
				}
				return
			}
			want := ownID
			if tc.lostWithPod {
				if wait != 0 {
					t.Fatalf("createBinding = %s; want the binding made", wait)
				}
				if err := c.Delete(ctx, &v1alpha1.FluentPVCBinding{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}); err != nil {
					t.Fatal(err)
				}
				if err := c.Delete(ctx, own); err != nil {
					t.Fatal(err)
				}
				later := now.Add(500 * time.Millisecond)
				if tc.handedOutAgain {
					handOutAgain(ctx, t, c, key)
					later, want = admitted.Add(claim.PodWait), v1alpha1.ObjectIdentity{}
				}
				clk.SetTime(later)
				if wait, err = r.createBinding(ctx, key, later); err != nil {
					t.Fatal(err)
				}
			}
			if wait != 0 {
				t.Fatalf("createBinding = %s; want the binding made", wait)
			}
			b := &v1alpha1.FluentPVCBinding{}
			if err := c.Get(ctx, key, b); err != nil {
				t.Fatal(err)
			}
			if b.Spec.Pod != want {
				t.Errorf("the binding records pod %v, want %v", b.Spec.Pod, want)
			}
		})
	}
}

// handOutAgain gives claim key another checkout's ID, without a record of
// the last checkout's pod, as a claim returned and handed out again has.
func handOutAgain(ctx context.Context, t *testing.T, c client.Client, key client.ObjectKey) {
	t.Helper()
	again := &corev1.PersistentVolumeClaim{}
	if err := c.Get(ctx, key, again); err != nil {
		t.Fatal(err)
	}
	delete(again.Annotations, v1alpha1.UsedByPodAnnotationKey)
	again.Annotations[v1alpha1.CheckoutIDAnnotationKey] = "again"
	if err := c.Update(ctx, again); err != nil {
		t.Fatal(err)
	}
}

// TestRecordPodOwnWrite: a record of a pod on its claim is this
// reconciler's own write, to wait for in the cache, only when it wrote:
// not when the claim records the pod already, nor once the claim is gone.
func TestRecordPodOwnWrite(t *testing.T) {
	admitted := fixtures.Epoch
	now := admitted.Add(time.Second)
	f := fixtures.MakeFluentPVC("f").PoolSize(1).Obj()
	pvc := fixtures.Claim(f, "ns", "c", "h", v1alpha1.CheckoutHit, admitted)
	pvc.UID = "c-uid"
	id := v1alpha1.ObjectIdentity{Name: "p", UID: "p-uid"}
	rec, err := claim.RecordPod(pvc, id)
	if err != nil {
		t.Fatal(err)
	}
	recorded := rec.Object
	cases := map[string]struct {
		pvc      *corev1.PersistentVolumeClaim
		gone     bool
		wantOwn  bool
		wantGone bool
	}{
		"the record written":          {pvc: pvc, wantOwn: true},
		"the claim records the pod":   {pvc: recorded},
		"the claim is gone meanwhile": {pvc: pvc, gone: true, wantGone: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var objs []client.Object
			if !tc.gone {
				objs = append(objs, tc.pvc)
			}
			c := fakeAPI(t, interceptor.Funcs{}, objs...)
			read := tc.pvc.DeepCopy()
			if !tc.gone {
				if err := c.Get(context.Background(), client.ObjectKeyFromObject(read), read); err != nil {
					t.Fatal(err)
				}
			}
			r := NewBindingReconciler(c, c, events.NewFakeRecorder(10), clocktesting.NewFakePassiveClock(now), Options{})
			written, err := r.recordPod(context.Background(), read, id, now)
			if err != nil {
				t.Fatal(err)
			}
			if (written == nil) != tc.wantGone {
				t.Fatalf("recordPod = %v, want the claim gone: %t", written, tc.wantGone)
			}
			if got := r.ownClaims.Stale(client.ObjectKeyFromObject(read), read.ResourceVersion, now); got != tc.wantOwn {
				t.Errorf("the version read is behind an own write: %t, want %t", got, tc.wantOwn)
			}
		})
	}
}
