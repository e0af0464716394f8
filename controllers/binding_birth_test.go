package controllers

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
	const podStartWait = 2 * time.Second
	admitted := fixtures.Epoch
	// A pod's start, which ends at admitted+podStartWait: its claim's
	// admission is within the pod's creation second.
	starting := admitted.Add(300 * time.Millisecond)
	startLeft := podStartWait - 300*time.Millisecond
	podWaitOver := admitted.Add(claim.PodWait)
	f := fixtures.MakeFluentPVC("f").PoolSize(1).Obj()
	fresh := fixtures.Claim(f, "ns", "c", "h", v1alpha1.CheckoutHit, admitted)
	fresh.UID = "c-uid"
	p := v1alpha1.ObjectIdentity{Name: "p", UID: "p-uid"}
	q := v1alpha1.ObjectIdentity{Name: "q", UID: "q-uid"}
	pending := func(node string) corev1.Pod {
		pod := startPod("p", "c", corev1.PodPending, admitted, false)
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
		seen        *v1alpha1.ObjectIdentity
		now         time.Time
		noStartWait bool
		wantPlan    birthPlan
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
			claim: fresh, pods: []corev1.Pod{pending("n"), *startPod("q", "c", corev1.PodPending, admitted, false)}, now: starting,
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
		"pod cached, not scheduled: the binding waits for its scheduling": {
			claim: fresh, pods: []corev1.Pod{pending("")}, now: starting,
			wantPlan: birthPlan{step: birthWait, wait: startLeft, pod: p, remember: true},
		},
		"pod cached, not scheduled, its wait over: made with the pod": {
			claim: fresh, pods: []corev1.Pod{pending("")}, now: admitted.Add(podStartWait),
			wantPlan: birthPlan{step: birthReadLive},
			wantLive: birthPlan{step: birthCreate, pod: p, remember: true},
		},
		"scheduled and starting: the claim records the pod, the binding waits": {
			claim: fresh, pods: []corev1.Pod{pending("n")}, now: starting,
			wantPlan: birthPlan{step: birthWait, wait: startLeft, pod: p, remember: true, record: true},
		},
		"scheduled and starting, reserved ahead: recorded (with the finalizer), the binding waits": {
			claim: reserved, pods: []corev1.Pod{pending("n")}, now: starting,
			wantPlan: birthPlan{step: birthWait, wait: startLeft, pod: p, remember: true, record: true},
		},
		"scheduled and starting, the claim records it already: the binding waits": {
			claim: records(fresh, p), pods: []corev1.Pod{pending("n")}, now: starting,
			wantPlan: birthPlan{step: birthWait, wait: startLeft},
		},
		"scheduled, its start over: made with the pod": {
			claim: fresh, pods: []corev1.Pod{pending("n")}, now: admitted.Add(podStartWait),
			wantPlan: birthPlan{step: birthReadLive},
			wantLive: birthPlan{step: birthCreate, pod: p, remember: true},
		},
		"scheduled, its start over, the claim records it: made with the claim's record": {
			claim: records(fresh, p), pods: []corev1.Pod{pending("n")}, now: admitted.Add(podStartWait),
			wantPlan: birthPlan{step: birthReadLive},
			wantLive: birthPlan{step: birthCreate, pod: p},
		},
		"the pod being deleted while it starts: made with the pod at once": {
			claim: fresh, pods: []corev1.Pod{*startPod("p", "c", corev1.PodPending, admitted, true)}, now: starting,
			wantPlan: birthPlan{step: birthReadLive},
			wantLive: birthPlan{step: birthCreate, pod: p, remember: true},
		},
		"no start wait configured: made with the pod at once": {
			claim: fresh, pods: []corev1.Pod{pending("")}, now: starting, noStartWait: true,
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
			wantPlan: birthPlan{step: birthWait, wait: startLeft, pod: p, remember: true},
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
			wantLive: birthPlan{step: birthWait, wait: conflictRetry},
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
			wait := podStartWait
			if tc.noStartWait {
				wait = 0
			}
			o := birth{key: client.ObjectKey{Namespace: "ns", Name: "c"}, pods: tc.pods, ownClaimStale: tc.ownClaimStale, holderEnd: tc.holderEnd}
			if tc.claim != nil {
				o.claim = tc.claim.DeepCopy()
				o.checkout = seenKeyOf(tc.claim)
			}
			if tc.seen != nil {
				o.seen, o.wasSeen = *tc.seen, true
			}
			got := decideBirth(o, tc.now, wait)
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
