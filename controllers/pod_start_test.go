package controllers

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/expectations"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

// startPod is a labelled pod of claim, created at created, in phase (and
// being deleted when deleting).
func startPod(name, claimName string, phase corev1.PodPhase, created time.Time, deleting bool) *corev1.Pod {
	p := fixtures.MakePod(name, "ns").FluentPVC("f").Label(v1alpha1.BindingNameLabelKey, claimName).Claim(claimName).Obj()
	p.UID = types.UID(name + "-uid")
	p.CreationTimestamp = metav1.NewTime(created)
	p.Status.Phase = phase
	if deleting {
		p.DeletionTimestamp = &metav1.Time{Time: created}
		p.Finalizers = []string{"test/keep"}
	}
	return p
}

// TestPodCreated: a pod's creationTimestamp is in whole seconds; the
// admission time its claim records places the creation within that
// second, unless it lies outside it.
func TestPodCreated(t *testing.T) {
	second := fixtures.Epoch.Add(time.Hour)
	pod := startPod("p", "c", corev1.PodPending, second, false)
	admitted := func(at time.Time) map[string]string {
		return map[string]string{v1alpha1.AdmittedAtAnnotationKey: at.UTC().Format(time.RFC3339Nano)}
	}
	cases := map[string]struct {
		pod         *corev1.Pod
		annotations map[string]string
		want        time.Time
	}{
		"no admission time":                                     {pod: pod, want: second},
		"a malformed admission time":                            {pod: pod, annotations: map[string]string{v1alpha1.AdmittedAtAnnotationKey: "soon"}, want: second},
		"admitted within the creation's second":                 {pod: pod, annotations: admitted(second.Add(700 * time.Millisecond)), want: second.Add(700 * time.Millisecond)},
		"admitted at the second's start":                        {pod: pod, annotations: admitted(second), want: second},
		"admitted in the second before":                         {pod: pod, annotations: admitted(second.Add(-300 * time.Millisecond)), want: second},
		"admitted a second later: the replica's clock is ahead": {pod: pod, annotations: admitted(second.Add(time.Second)), want: second},
		"no pod": {annotations: admitted(second)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := podCreated(tc.pod, tc.annotations); !got.Equal(tc.want) {
				t.Errorf("podCreated = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestAwaitScheduling(t *testing.T) {
	created := fixtures.Epoch
	soon := created.Add(300 * time.Millisecond)
	scheduled := func(p *corev1.Pod) *corev1.Pod { p.Spec.NodeName = "n"; return p }
	cases := map[string]struct {
		pod  *corev1.Pod
		now  time.Time
		wait time.Duration
		want time.Duration
	}{
		"no node yet: wait for it":            {pod: startPod("p", "c", corev1.PodPending, created, false), now: soon, wait: 2 * time.Second, want: 1700 * time.Millisecond},
		"scheduled: its containers may write": {pod: scheduled(startPod("p", "c", corev1.PodPending, created, false)), now: soon, wait: 2 * time.Second},
		"being deleted":                       {pod: startPod("p", "c", corev1.PodPending, created, true), now: soon, wait: 2 * time.Second},
		"Failed without a node":               {pod: startPod("p", "c", corev1.PodFailed, created, false), now: soon, wait: 2 * time.Second},
		"no node after the wait":              {pod: startPod("p", "c", corev1.PodPending, created, false), now: created.Add(2 * time.Second), wait: 2 * time.Second},
		"no wait configured":                  {pod: startPod("p", "c", corev1.PodPending, created, false), now: soon},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := awaitScheduling(tc.pod, tc.pod.CreationTimestamp.Time, tc.now, tc.wait); got != tc.want {
				t.Errorf("awaitScheduling = %s, want %s", got, tc.want)
			}
		})
	}
}

// underLease makes a reserved claim's holder the Lease named holder, with
// no end of its own.
func underLease(holder string) func(*corev1.PersistentVolumeClaim) {
	return func(c *corev1.PersistentVolumeClaim) {
		c.Annotations[v1alpha1.ReservedByAnnotationKey] = holder
		delete(c.Annotations, v1alpha1.ReservedUntilAnnotationKey)
	}
}

func TestReservedStock(t *testing.T) {
	now := fixtures.Epoch
	f := fixtures.MakeFluentPVC("f").PoolSize(1).Obj()
	reserved := func(ns, name, hash string, until time.Duration, edit func(*corev1.PersistentVolumeClaim)) corev1.PersistentVolumeClaim {
		c := fixtures.Claim(f, ns, name, hash, v1alpha1.CheckoutHit, now.Add(-time.Minute))
		c.Annotations[v1alpha1.ReservedByAnnotationKey] = "replica-a"
		c.Annotations[v1alpha1.ReservedUntilAnnotationKey] = now.Add(until).Format(time.RFC3339Nano)
		if edit != nil {
			edit(c)
		}
		return *c
	}
	used := func(c *corev1.PersistentVolumeClaim) { c.Annotations[v1alpha1.UsedByPodAnnotationKey] = "p/p-uid" }
	deleting := func(c *corev1.PersistentVolumeClaim) { c.DeletionTimestamp = &metav1.Time{Time: now} }
	cases := map[string]struct {
		claimed []corev1.PersistentVolumeClaim
		want    map[string]int
		recheck time.Duration
	}{
		"none":                    {},
		"two and one elsewhere":   {claimed: []corev1.PersistentVolumeClaim{reserved("ns", "a", "h", time.Minute, nil), reserved("ns", "b", "h", 2*time.Minute, nil), reserved("other", "c", "h", 3*time.Minute, nil)}, want: map[string]int{"ns": 2, "other": 1}, recheck: time.Minute},
		"over":                    {claimed: []corev1.PersistentVolumeClaim{reserved("ns", "a", "h", 0, nil)}},
		"recording its pod":       {claimed: []corev1.PersistentVolumeClaim{reserved("ns", "a", "h", time.Minute, used)}},
		"of an older template":    {claimed: []corev1.PersistentVolumeClaim{reserved("ns", "a", "old", time.Minute, nil)}},
		"being deleted":           {claimed: []corev1.PersistentVolumeClaim{reserved("ns", "a", "h", time.Minute, deleting)}},
		"a claim of an admission": {claimed: []corev1.PersistentVolumeClaim{*fixtures.Claim(f, "ns", "a", "h", v1alpha1.CheckoutHit, now)}},
		"ending far ahead: counted, rechecked within the longest reservation": {
			claimed: []corev1.PersistentVolumeClaim{reserved("ns", "a", "h", 24*time.Hour, nil)}, want: map[string]int{"ns": 1}, recheck: claim.MaxReservation},
		"held under a live Lease": {
			claimed: []corev1.PersistentVolumeClaim{reserved("ns", "a", "h", 0, underLease("sys/live")), reserved("ns", "b", "h", 0, underLease("sys/live"))}, want: map[string]int{"ns": 2}, recheck: 30 * time.Second},
		"held under a Lease that is over": {claimed: []corev1.PersistentVolumeClaim{reserved("ns", "a", "h", 0, underLease("sys/over"))}},
		"held under a Lease that is gone": {claimed: []corev1.PersistentVolumeClaim{reserved("ns", "a", "h", 0, underLease("sys/gone"))}},
	}
	ends := map[string]time.Time{"sys/live": now.Add(30 * time.Second), "sys/over": now.Add(-time.Second)}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, recheck := reservedStock(tc.claimed, "h", now, ends)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" || recheck != tc.recheck {
				t.Errorf("reservedStock = %v, %s; want %v, %s", got, recheck, tc.want, tc.recheck)
			}
		})
	}
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
		"remembered":                          {do: func(s *seenPods) { s.Expect(key, "", id, t0) }, at: t0.Add(time.Second), want: true},
		"remembered through the longest wait": {do: func(s *seenPods) { s.Expect(key, "", id, t0) }, at: t0.Add(maxPodStartWait + time.Second), want: true},
		"forgotten":                           {do: func(s *seenPods) { s.Expect(key, "", id, t0); s.Drop(key) }, at: t0},
		"too old":                             {do: func(s *seenPods) { s.Expect(key, "", id, t0) }, at: t0.Add(expectations.TTL)},
		"never seen":                          {do: func(*seenPods) {}, at: t0},
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

// TestCreateBinding: the binding of a claim whose pod is scheduled is
// made at once, whatever else starts. One whose pod has no node yet waits
// for it to be scheduled, and records that pod once it is made, even if
// the pod went meanwhile without the cache showing it deleted (as the API
// server deletes a pod with no node). A binding lost before the claim
// records its pod is made again with that pod, even if the pod went too.
func TestCreateBinding(t *testing.T) {
	admitted := fixtures.Epoch
	now := admitted.Add(300 * time.Millisecond)
	cases := map[string]struct {
		node string
		// deleting: the pod is being deleted.
		deleting bool
		// goneWhileWaiting: the binding waits, and the pod goes meanwhile.
		goneWhileWaiting bool
		// handedOutAgain: then the claim records another checkout, and no
		// pod of it shows within the binding's wait for one: its binding
		// is made without the pod that went.
		handedOutAgain bool
		// liveCheckout: the claim read live records this checkout, not
		// the cached one.
		liveCheckout string
		// lostWithPod: once made, the binding is deleted, and so is the
		// pod.
		lostWithPod bool
		// longestWait: PodStartWait is the longest allowed, and the next
		// reconcile comes as late after the wait's end as the first came
		// after the pod's creation.
		longestWait bool
		// reserved: the claim was handed out from a reservation, which
		// has no finalizer until its record.
		reserved bool
	}{
		"scheduled, with another pod starting":                                 {node: "n"},
		"scheduled, handed out from a reservation":                             {node: "n", reserved: true},
		"scheduled, handed out from a reservation, then force-deleted":         {node: "n", reserved: true, goneWhileWaiting: true},
		"scheduled, then force-deleted before the binding":                     {node: "n", goneWhileWaiting: true},
		"scheduled and being deleted":                                          {node: "n", deleting: true},
		"gone before its node":                                                 {goneWhileWaiting: true},
		"gone before its node, at the longest wait":                            {goneWhileWaiting: true, longestWait: true},
		"gone before its node, the claim handed out again":                     {goneWhileWaiting: true, handedOutAgain: true},
		"scheduled, the claim handed out again since the cached copy":          {node: "n", liveCheckout: "later"},
		"scheduled, the binding lost with the pod":                             {node: "n", lostWithPod: true},
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
			own := startPod("p", "c", corev1.PodPending, admitted, tc.deleting)
			own.Spec.NodeName = tc.node
			other := startPod("q", "d", corev1.PodPending, now, false)
			c := fakeAPI(t, interceptor.Funcs{}, pvc, own, other)
			live := client.Reader(c)
			if tc.liveCheckout != "" {
				again := pvc.DeepCopy()
				again.Annotations[v1alpha1.CheckoutIDAnnotationKey] = tc.liveCheckout
				live = fakeAPI(t, interceptor.Funcs{}, again)
			}
			clk := clocktesting.NewFakePassiveClock(now)
			podStartWait := 2 * time.Second
			if tc.longestWait {
				podStartWait = maxPodStartWait
			}
			r := NewBindingReconciler(c, live, events.NewFakeRecorder(10), clk, Options{PodStartWait: podStartWait})
			ctx := context.Background()
			key := client.ObjectKeyFromObject(pvc)
			ownID := v1alpha1.ObjectIdentity{Name: own.Name, UID: own.UID}
			noBinding := func(why string) {
				t.Helper()
				if err := c.Get(ctx, key, &v1alpha1.FluentPVCBinding{}); !apierrors.IsNotFound(err) {
					t.Fatalf("a binding was made %s (err %v)", why, err)
				}
			}
			// deletePod deletes own, its test finalizer first.
			deletePod := func() {
				t.Helper()
				if tc.deleting {
					if err := c.Get(ctx, client.ObjectKeyFromObject(own), own); err != nil {
						t.Fatal(err)
					}
					own.Finalizers = nil
					if err := c.Update(ctx, own); err != nil && !apierrors.IsNotFound(err) {
						t.Fatal(err)
					}
				}
				if err := c.Delete(ctx, own); err != nil && !apierrors.IsNotFound(err) {
					t.Fatal(err)
				}
			}

			wait, err := r.createBinding(ctx, key, now)
			if err != nil {
				t.Fatal(err)
			}
			scheduled := tc.node != "" && !tc.deleting
			if tc.goneWhileWaiting || scheduled {
				if wait == 0 {
					t.Fatal("createBinding for a starting pod made the binding; want a wait")
				}
				noBinding("while its pod starts")
				got := &corev1.PersistentVolumeClaim{}
				if err := c.Get(ctx, key, got); err != nil {
					t.Fatal(err)
				}
				if used, _ := claim.PodOf(got); scheduled && used != ownID {
					t.Fatalf("the claim of a scheduled pod records pod %v, want %v", used, ownID)
				} else if !scheduled && used.UID != "" {
					t.Fatalf("the claim of a pod with no node records pod %v before its binding", used)
				}
				if scheduled && !controllerutil.ContainsFinalizer(got, v1alpha1.PVCProtectionFinalizer) {
					t.Fatalf("the claim of a scheduled pod has no finalizer: %v", got.Finalizers)
				}
			}
			if tc.goneWhileWaiting {
				deletePod()
				if tc.handedOutAgain {
					handOutAgain(ctx, t, c, key)
				}
				later := now.Add(100 * time.Millisecond)
				switch {
				case tc.handedOutAgain:
					later = admitted.Add(claim.PodWait)
				case tc.longestWait:
					later = now.Add(podStartWait)
				}
				clk.SetTime(later)
				if wait, err = r.createBinding(ctx, key, later); err != nil {
					t.Fatal(err)
				}
			} else if scheduled {
				// Once the pod's start is over, the binding is made.
				later := admitted.Add(podStartWait)
				clk.SetTime(later)
				if wait, err = r.createBinding(ctx, key, later); err != nil {
					t.Fatal(err)
				}
			}
			if tc.lostWithPod {
				if wait != 0 {
					t.Fatalf("createBinding = %s; want the binding made", wait)
				}
				if err := c.Delete(ctx, &v1alpha1.FluentPVCBinding{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}); err != nil {
					t.Fatal(err)
				}
				deletePod()
				later := admitted.Add(podStartWait + 500*time.Millisecond)
				if tc.handedOutAgain {
					handOutAgain(ctx, t, c, key)
					later = admitted.Add(claim.PodWait)
				}
				clk.SetTime(later)
				if wait, err = r.createBinding(ctx, key, later); err != nil {
					t.Fatal(err)
				}
			}
			switch {
			case tc.liveCheckout != "":
				if wait == 0 {
					t.Error("createBinding = 0; want a wait")
				}
				noBinding("for the later checkout with what was found for the cached one")
				return
			case tc.handedOutAgain:
				if wait != 0 {
					t.Fatalf("createBinding = %s; want the binding made", wait)
				}
				b := &v1alpha1.FluentPVCBinding{}
				if err := c.Get(ctx, key, b); err != nil {
					t.Fatal(err)
				}
				if b.Spec.Pod != (v1alpha1.ObjectIdentity{}) {
					t.Errorf("the later checkout's binding records pod %v, the earlier checkout's", b.Spec.Pod)
				}
				return
			}
			if wait != 0 {
				t.Fatalf("createBinding = %s; want the binding made", wait)
			}
			b := &v1alpha1.FluentPVCBinding{}
			if err := c.Get(ctx, key, b); err != nil {
				t.Fatal(err)
			}
			if b.Spec.Pod != ownID {
				t.Errorf("the binding records pod %v, want %v", b.Spec.Pod, ownID)
			}
		})
	}
}

// TestCreateBindingRecordFails: a scheduled pod's record on its claim
// that fails leaves the reconciler as it would be had the write not been
// tried.
//   - The claim is gone (deleted after the cache's copy): no own write is
//     left behind, so that the next reconcile, on a cache that still has
//     the claim, is not held back waiting for that write's event.
//   - The API server refuses the write, and the pod goes before the record
//     is written again: the pod is recorded in its binding all the same.
func TestCreateBindingRecordFails(t *testing.T) {
	cases := map[string]struct {
		err func() error
		// podGoes deletes the pod after the first reconcile and reconciles
		// again once the binding no longer waits for it; otherwise the
		// claim is reconciled again at once.
		podGoes bool
	}{
		"the claim is gone": {
			err: func() error { return apierrors.NewNotFound(corev1.Resource("persistentvolumeclaims"), "c") },
		},
		"the write is refused and the pod goes": {
			err:     func() error { return apierrors.NewServiceUnavailable("etcd is down") },
			podGoes: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			admitted := fixtures.Epoch
			now := admitted.Add(300 * time.Millisecond)
			f := fixtures.MakeFluentPVC("f").PoolSize(1).Obj()
			pvc := fixtures.Claim(f, "ns", "c", "h", v1alpha1.CheckoutHit, admitted)
			pvc.UID = "c-uid"
			own := startPod("p", "c", corev1.PodPending, admitted, false)
			own.Spec.NodeName = "n"
			failing := interceptor.Funcs{
				Update: func(context.Context, client.WithWatch, client.Object, ...client.UpdateOption) error { return tc.err() },
				Patch: func(context.Context, client.WithWatch, client.Object, client.Patch, ...client.PatchOption) error {
					return tc.err()
				},
			}
			c := fakeAPI(t, failing, pvc, own)
			clk := clocktesting.NewFakePassiveClock(now)
			podStartWait := 2 * time.Second
			r := NewBindingReconciler(c, c, events.NewFakeRecorder(10), clk, Options{PodStartWait: podStartWait})
			ctx := context.Background()
			key := client.ObjectKeyFromObject(pvc)
			if !tc.podGoes {
				for i := range 2 {
					wait, err := r.createBinding(ctx, key, now)
					if err != nil {
						t.Fatal(err)
					}
					if wait <= 0 || wait > podStartWait {
						t.Fatalf("createBinding #%d = %s; want a wait within the pod's start (%s)", i+1, wait, podStartWait)
					}
				}
				return
			}
			if _, err := r.createBinding(ctx, key, now); err == nil {
				t.Fatal("createBinding succeeded with the claim's record failing")
			}
			if err := c.Delete(ctx, own); err != nil {
				t.Fatal(err)
			}
			later := admitted.Add(claim.PodWait)
			clk.SetTime(later)
			if wait, err := r.createBinding(ctx, key, later); err != nil || wait != 0 {
				t.Fatalf("createBinding = %s, %v; want the binding made", wait, err)
			}
			b := &v1alpha1.FluentPVCBinding{}
			if err := c.Get(ctx, key, b); err != nil {
				t.Fatal(err)
			}
			if want := (v1alpha1.ObjectIdentity{Name: own.Name, UID: own.UID}); b.Spec.Pod != want {
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
			r := NewBindingReconciler(c, c, events.NewFakeRecorder(10), clocktesting.NewFakePassiveClock(now), Options{PodStartWait: 2 * time.Second})
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
