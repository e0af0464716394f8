package controllers

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

func TestHoldFollowUp(t *testing.T) {
	t0 := fixtures.Epoch
	cases := map[string]struct {
		starting bool
		since    time.Duration // from the admission to now
		wait     time.Duration
		want     time.Duration
	}{
		"pods starting: look again soon":      {starting: true, since: 100 * time.Millisecond, wait: 2 * time.Second, want: startPoll},
		"pods starting, the wait nearly over": {starting: true, since: 1950 * time.Millisecond, wait: 2 * time.Second, want: 50 * time.Millisecond},
		"pods starting, the wait over":        {starting: true, since: 2 * time.Second, wait: 2 * time.Second},
		"no pod starting":                     {since: 100 * time.Millisecond, wait: 2 * time.Second},
		"no wait configured":                  {starting: true, since: 100 * time.Millisecond},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := holdFollowUp(t0, tc.starting, t0.Add(tc.since), tc.wait); got != tc.want {
				t.Errorf("holdFollowUp = %s, want %s", got, tc.want)
			}
		})
	}
}

// startPod is a labelled pod of claim, created at created, in phase (and
// being deleted when deleting).
func startPod(name, claimName string, phase corev1.PodPhase, created time.Time, deleting bool) *corev1.Pod {
	p := fixtures.MakePod(name, "ns").FluentPVC("f").Label(v1alpha1.BindingNameLabelKey, claimName).Obj()
	p.UID = types.UID(name + "-uid")
	p.CreationTimestamp = metav1.NewTime(created)
	p.Status.Phase = phase
	if deleting {
		p.DeletionTimestamp = &metav1.Time{Time: created}
		p.Finalizers = []string{"test/keep"}
	}
	return p
}

func TestStartingKey(t *testing.T) {
	t0 := fixtures.Epoch
	cases := map[string]struct {
		pod  *corev1.Pod
		want bool
	}{
		"Pending":                {pod: startPod("p", "c", corev1.PodPending, t0, false), want: true},
		"no phase yet":           {pod: startPod("p", "c", "", t0, false), want: true},
		"Running":                {pod: startPod("p", "c", corev1.PodRunning, t0, false)},
		"Failed":                 {pod: startPod("p", "c", corev1.PodFailed, t0, false)},
		"Pending, being deleted": {pod: startPod("p", "c", corev1.PodPending, t0, true)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := len(startingKey(tc.pod)) > 0; got != tc.want {
				t.Errorf("indexed as starting: %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPodsStarting(t *testing.T) {
	now := fixtures.Epoch.Add(time.Hour)
	wait := 2 * time.Second
	cases := map[string]struct {
		pods []client.Object
		want bool
	}{
		"a pod created moments ago is Pending": {pods: []client.Object{startPod("p", "c", corev1.PodPending, now.Add(-time.Second), false)}, want: true},
		"every pod Running":                    {pods: []client.Object{startPod("p", "c", corev1.PodRunning, now.Add(-time.Second), false)}},
		"a pod Pending for longer than the wait holds nothing back": {
			pods: []client.Object{startPod("p", "c", corev1.PodPending, now.Add(-time.Minute), false)},
		},
		"no pod": {},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := fakeAPI(t, interceptor.Funcs{}, tc.pods...)
			got, err := podsStarting(context.Background(), c, now, wait)
			if err != nil || got != tc.want {
				t.Errorf("podsStarting = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestYieldToStarting(t *testing.T) {
	admitted := fixtures.Epoch
	f := fixtures.MakeFluentPVC("f").PoolSize(1).Obj()
	held := fixtures.Claim(f, "ns", "c", "h", v1alpha1.CheckoutHit, admitted)
	recorded := func() *corev1.PersistentVolumeClaim {
		w, err := claim.RecordPod(held.DeepCopy(), v1alpha1.ObjectIdentity{Name: "p", UID: "p-uid"})
		if err != nil {
			t.Fatal(err)
		}
		return w.Object
	}()
	soon := admitted.Add(300 * time.Millisecond)
	cases := map[string]struct {
		pvc    *corev1.PersistentVolumeClaim
		pod    *corev1.Pod // the claim's, as cached
		others []client.Object
		now    time.Time
		wait   time.Duration
		want   time.Duration
	}{
		"its pod starts":                         {pvc: held, pod: startPod("p", "c", corev1.PodPending, admitted, false), now: soon, wait: 2 * time.Second, want: startPoll},
		"its pod runs, another starts":           {pvc: held, pod: startPod("p", "c", corev1.PodRunning, admitted, false), others: []client.Object{startPod("q", "d", corev1.PodPending, soon, false)}, now: soon, wait: 2 * time.Second, want: startPoll},
		"its pod runs, no other starts":          {pvc: held, pod: startPod("p", "c", corev1.PodRunning, admitted, false), now: soon, wait: 2 * time.Second},
		"its pod is being deleted":               {pvc: held, pod: startPod("p", "c", corev1.PodPending, admitted, true), now: soon, wait: 2 * time.Second},
		"the wait is over":                       {pvc: held, pod: startPod("p", "c", corev1.PodPending, admitted, false), now: admitted.Add(2 * time.Second), wait: 2 * time.Second},
		"no wait configured":                     {pvc: held, pod: startPod("p", "c", corev1.PodPending, admitted, false), now: soon},
		"a claim that records its pod: remade":   {pvc: recorded, pod: startPod("p", "c", corev1.PodPending, admitted, false), now: soon, wait: 2 * time.Second},
		"its pod never came (no longer awaited)": {pvc: held, others: []client.Object{startPod("q", "d", corev1.PodPending, soon, false)}, now: soon, wait: 2 * time.Second, want: startPoll},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			objs := append([]client.Object{tc.pvc.DeepCopy()}, tc.others...)
			if tc.pod != nil {
				objs = append(objs, tc.pod)
			}
			r := &BindingReconciler{Client: fakeAPI(t, interceptor.Funcs{}, objs...), opts: Options{PodStartWait: tc.wait}}
			got, err := r.yieldToStarting(context.Background(), tc.pvc, tc.pod, tc.now)
			if err != nil || got != tc.want {
				t.Errorf("yieldToStarting = %s, %v; want %s", got, err, tc.want)
			}
		})
	}
}

func TestRefillHeld(t *testing.T) {
	admitted := fixtures.Epoch
	f := fixtures.MakeFluentPVC("f").PoolSize(1).Obj()
	hit := fixtures.Claim(f, "ns", "c", "h", v1alpha1.CheckoutHit, admitted)
	miss := fixtures.Claim(f, "ns", "c", "h", v1alpha1.CheckoutMiss, admitted)
	deleting := hit.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{Time: admitted}
	soon := admitted.Add(300 * time.Millisecond)
	cases := map[string]struct {
		pvc      *corev1.PersistentVolumeClaim
		starting bool
		now      time.Time
		want     time.Duration
	}{
		"a hit while pods start":   {pvc: hit, starting: true, now: soon, want: startPoll},
		"a hit once no pod starts": {pvc: hit, now: soon},
		"a hit after the wait":     {pvc: hit, starting: true, now: admitted.Add(time.Minute)},
		"a miss took no warm PVC":  {pvc: miss, starting: true, now: soon},
		"a claim being deleted":    {pvc: deleting, starting: true, now: soon},
		"a hit without admission time": {pvc: func() *corev1.PersistentVolumeClaim {
			c := hit.DeepCopy()
			delete(c.Annotations, v1alpha1.AdmittedAtAnnotationKey)
			return c
		}(), starting: true, now: soon},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := refillHeld(tc.pvc, tc.starting, tc.now, 2*time.Second); got != tc.want {
				t.Errorf("refillHeld = %s, want %s", got, tc.want)
			}
		})
	}
}
