package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/st-tech/fluent-pvc-operator/apis/objects"
	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

// TestReconcileDrainBlocked reconciles a draining binding whose finalizer
// Job cannot make progress. What blocks it is told (a DrainBlocked
// condition quoting the cause and a Warning), the claim is kept, and the
// condition goes once the cause is gone.
func TestReconcileDrainBlocked(t *testing.T) {
	now := fixtures.Epoch.Add(time.Hour)
	fpvc, pvc := claimFixture()
	b := fixtures.Binding(pvc, fpvc.UID)
	b.Spec.Pod = v1alpha1.ObjectIdentity{Name: "gone", UID: "pod-uid"}
	pvc.Annotations[v1alpha1.UsedByPodAnnotationKey] = "gone/pod-uid"
	b.Status.Phase, b.Status.DrainAttempts = v1alpha1.BindingPhaseDraining, 1
	b.Status.DrainJobName = objects.DrainJobName(b.Name, 1)
	b.Status.DrainStartTime = &metav1.Time{Time: now.Add(-time.Minute)}
	job := func(age time.Duration, active, ready int32) *batchv1.Job {
		j := objects.DrainJob(fpvc, b, 1)
		j.UID = "job-uid"
		j.CreationTimestamp = metav1.NewTime(now.Add(-age))
		j.Status.Active, j.Status.Ready = active, ptr.To(ready)
		return j
	}
	drainPod := func(j *batchv1.Job, scheduled bool) *corev1.Pod {
		p := fixtures.MakePod("f-abc-drain-1-x", "ns").Label(v1alpha1.BindingNameLabelKey, b.Name).Label(v1alpha1.ComponentLabelKey, v1alpha1.ComponentDrain).Claim(pvc.Name).Obj()
		p.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(j, batchv1.SchemeGroupVersion.WithKind("Job"))}
		if scheduled {
			p.Spec.NodeName = "node-1"
		} else {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
				Message: "0/3 nodes are available: 3 node(s) had volume node affinity conflict."}}
		}
		return p
	}
	refused := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "f-abc-drain-1.1", Namespace: "ns"},
		InvolvedObject: corev1.ObjectReference{Kind: "Job", Namespace: "ns", Name: "f-abc-drain-1", UID: "job-uid"},
		Reason:         "FailedCreate", LastTimestamp: metav1.NewTime(now.Add(-10 * time.Second)),
		Message: `Error creating: pods "f-abc-drain-1-x" is forbidden: exceeded quota: pods, requested: pods=1, used: pods=10, limited: pods=10`,
	}
	namespace := func(terminating bool) *corev1.Namespace {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}}
		if terminating {
			ns.DeletionTimestamp, ns.Finalizers = &metav1.Time{Time: now}, []string{"kubernetes"}
		}
		return ns
	}
	deleting := pvc.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{Time: now.Add(-time.Minute)}

	cases := map[string]struct {
		objs         []client.Object
		wantReason   string // "" for no DrainBlocked condition
		wantMessage  string
		wantRequeue  time.Duration
		blockedSince bool // the condition is True from an earlier reconcile: no second Warning
	}{
		"a pod the scheduler cannot place": {
			objs:        []client.Object{pvc, job(time.Minute, 1, 0), drainPod(job(time.Minute, 1, 0), false)},
			wantReason:  v1alpha1.DrainBlockedReasonUnschedulable,
			wantMessage: "volume node affinity conflict",
			wantRequeue: unwatchedRecheck,
		},
		"still unschedulable: no second Warning": {
			objs:         []client.Object{pvc, job(time.Minute, 1, 0), drainPod(job(time.Minute, 1, 0), false)},
			wantReason:   v1alpha1.DrainBlockedReasonUnschedulable,
			wantMessage:  "volume node affinity conflict",
			wantRequeue:  unwatchedRecheck,
			blockedSince: true,
		},
		"pods refused by a quota": {
			objs:        []client.Object{pvc, job(time.Minute, 0, 0), refused},
			wantReason:  v1alpha1.DrainBlockedReasonPodsRefused,
			wantMessage: "exceeded quota",
			wantRequeue: unwatchedRecheck,
		},
		"the claim is being deleted": {
			objs:        []client.Object{namespace(false), deleting, job(time.Minute, 1, 0)},
			wantReason:  v1alpha1.DrainBlockedReasonClaimDeleting,
			wantMessage: "was deleted while the operator holds it",
		},
		"the claim is being deleted with its namespace: nothing to tell": {
			objs: []client.Object{namespace(true), deleting, job(time.Minute, 1, 0)},
		},
		"pods refused long ago, then a pod ran and failed: not blocked": {
			objs:        []client.Object{pvc, func() *batchv1.Job { j := job(time.Hour, 0, 0); j.Status.Failed = 1; return j }(), refused},
			wantRequeue: unwatchedRecheck,
		},
		"a young Job: looked at once it has had its time": {
			objs:        []client.Object{pvc, job(4*time.Second, 1, 0), drainPod(job(4*time.Second, 1, 0), false)},
			wantRequeue: unwatchedRecheck - 4*time.Second,
		},
		"the pod was placed: the condition goes": {
			objs:         []client.Object{pvc, job(time.Minute, 1, 1), drainPod(job(time.Minute, 1, 1), true)},
			blockedSince: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			b := b.DeepCopy()
			if tc.blockedSince {
				setCondition(&b.Status, v1alpha1.BindingConditionDrainBlocked, metav1.ConditionTrue, v1alpha1.DrainBlockedReasonUnschedulable, "earlier", b.Generation, now.Add(-time.Minute))
			}
			live := fakeAPI(t, interceptor.Funcs{}, append(tc.objs, fpvc, b)...)
			recorder := events.NewFakeRecorder(10)
			r := NewBindingReconciler(live, live, recorder, clocktesting.NewFakePassiveClock(now),
				Options{OrphanGracePeriod: 2 * time.Minute, DrainBackoffBase: 10 * time.Second, DrainBackoffMax: 10 * time.Minute})
			res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(b)})
			if err != nil {
				t.Fatalf("Reconcile: %v", err)
			}
			got := &v1alpha1.FluentPVCBinding{}
			if err := live.Get(context.Background(), client.ObjectKeyFromObject(b), got); err != nil {
				t.Fatal(err)
			}
			c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.BindingConditionDrainBlocked)
			switch {
			case tc.wantReason == "" && c != nil:
				t.Errorf("DrainBlocked = %s %s %q, want none", c.Status, c.Reason, c.Message)
			case tc.wantReason != "" && (c == nil || c.Status != metav1.ConditionTrue || c.Reason != tc.wantReason || !strings.Contains(c.Message, tc.wantMessage)):
				t.Errorf("DrainBlocked = %+v, want True %s quoting %q", c, tc.wantReason, tc.wantMessage)
			}
			var warnings []string
			for len(recorder.Events) > 0 {
				if e := <-recorder.Events; strings.Contains(e, v1alpha1.EventReasonDrainBlocked) {
					warnings = append(warnings, e)
				}
			}
			wantWarnings := 0
			if tc.wantReason != "" && (!tc.blockedSince || tc.wantReason != v1alpha1.DrainBlockedReasonUnschedulable) {
				wantWarnings = 2 // the binding's and the FluentPVC's
			}
			if len(warnings) != wantWarnings {
				t.Errorf("DrainBlocked Warnings = %q, want %d", warnings, wantWarnings)
			}
			if res.RequeueAfter != tc.wantRequeue {
				t.Errorf("requeue after %s, want %s", res.RequeueAfter, tc.wantRequeue)
			}
			if slices.Contains(tc.objs, client.Object(deleting)) {
				// Deleted by someone else: the operator's finalizer still
				// holds it, with its data.
				kept := &corev1.PersistentVolumeClaim{}
				if err := live.Get(context.Background(), client.ObjectKeyFromObject(pvc), kept); err != nil || !controllerutil.ContainsFinalizer(kept, v1alpha1.PVCProtectionFinalizer) {
					t.Errorf("claim %s let go of while it is being deleted undrained (err %v)", pvc.Name, err)
				}
				return
			}
			claimKept(t, live, pvc, "drain is blocked")
		})
	}
}

// TestReconcileBindingRejected makes the binding of a claim while the API
// server refuses it (a quota on bindings): the claim, its pod and the
// FluentPVC are told why, the claim is kept, and the binding is tried
// again (an error, for the rate limiter's backoff).
func TestReconcileBindingRejected(t *testing.T) {
	now := fixtures.Epoch.Add(time.Minute)
	fpvc, pvc := claimFixture()
	fpvc.UID = "fpvc-uid"
	pod := fixtures.MakePod("app", "ns").FluentPVC(fpvc.Name).Label(v1alpha1.BindingNameLabelKey, pvc.Name).Claim(pvc.Name).Obj()
	quota := apierrors.NewForbidden(schema.GroupResource{Group: v1alpha1.GroupVersion.Group, Resource: "fluentpvcbindings"}, pvc.Name,
		errors.New("exceeded quota: bindings, requested: count/fluentpvcbindings.fluent-pvc-operator.tech.zozo.com=1, used: 5, limited: 5"))
	live := fakeAPI(t, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*v1alpha1.FluentPVCBinding); ok {
				return quota
			}
			return c.Create(ctx, obj, opts...)
		},
	}, fpvc, pvc, pod)
	recorder := events.NewFakeRecorder(10)
	r := NewBindingReconciler(live, live, recorder, clocktesting.NewFakePassiveClock(now),
		Options{OrphanGracePeriod: 2 * time.Minute, DrainBackoffBase: 10 * time.Second, DrainBackoffMax: 10 * time.Minute})

	_, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(pvc)})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("Reconcile = %v, want the refusal, for a retry with backoff", err)
	}
	var told []string
	for len(recorder.Events) > 0 {
		if e := <-recorder.Events; strings.Contains(e, v1alpha1.EventReasonBindingRejected) && strings.Contains(e, "exceeded quota") {
			told = append(told, e)
		}
	}
	if len(told) != 3 {
		t.Errorf("BindingRejected Warnings = %q, want 3 (the claim, its pod, the FluentPVC)", told)
	}
	claimKept(t, live, pvc, "binding is refused")
}

// TestReconcileCopyMountsClaim reconciles the binding of a claim whose pod
// is gone while a copy of that pod (`kubectl debug --copy-to`, admitted
// while the operator was down) mounts the claim: no drain Job starts, and
// a drained claim is not deleted, while the copy exists; the binding says
// which pod it waits for. Once the copy is gone, the drain goes on. Before,
// the drain ran under the copy, and the claim was deleted once the copy
// exited, with what it wrote after the drain. A pod that carries a drain
// pod's labels, with no drain Job for its controller, is such a copy too.
// The namespace's pods are listed live in pages (pagedPods): a copy on a
// later page counts as one on the first.
func TestReconcileCopyMountsClaim(t *testing.T) {
	now := fixtures.Epoch.Add(time.Hour)
	for name, tc := range map[string]struct {
		drained bool
		// drainLabels gives the copy a drain pod's labels.
		drainLabels bool
		// others are pods that mount nothing, listed before the copy.
		others int
	}{
		"the pod is gone: no Job yet":                          {},
		"the drain succeeded: no deletion":                     {drained: true},
		"a copy with a drain pod's labels: no Job yet":         {drainLabels: true},
		"a copy with a drain pod's labels: no deletion either": {drained: true, drainLabels: true},
		"the copy on the third page: no Job yet":               {others: 2*livePodPage + 10},
		"the copy on the third page: no deletion either":       {drained: true, others: 2*livePodPage + 10},
	} {
		t.Run(name, func(t *testing.T) {
			fpvc, pvc := claimFixture()
			pvc.Annotations[v1alpha1.UsedByPodAnnotationKey] = "app/app-uid"
			b := fixtures.Binding(pvc, fpvc.UID)
			b.CreationTimestamp = metav1.NewTime(fixtures.Epoch)
			b.Spec.Pod = v1alpha1.ObjectIdentity{Name: "app", UID: "app-uid"}
			b.Status.Phase = v1alpha1.BindingPhaseInUse
			copied := fixtures.MakePod("app-debug", "ns").Claim(pvc.Name).Obj()
			copied.UID, copied.Status.Phase = "copy-uid", corev1.PodRunning
			if tc.drainLabels {
				copied.Labels = objects.DrainJob(fpvc, b, 1).Spec.Template.Labels
			}
			objs := []client.Object{fpvc, pvc, b, copied}
			if tc.drained {
				b.Status.Phase, b.Status.DrainAttempts = v1alpha1.BindingPhaseDraining, 1
				job := objects.DrainJob(fpvc, b, 1)
				job.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
				objs = append(objs, job)
			}
			fixed := len(objs)
			for i := range tc.others {
				// Named to come before the copy in the list.
				other := fixtures.MakePod(fmt.Sprintf("a-%04d", i), "ns").Obj()
				other.UID, other.Status.Phase = types.UID(fmt.Sprintf("other-%d", i)), corev1.PodRunning
				objs = append(objs, other)
			}
			live := fakeAPI(t, interceptor.Funcs{}, objs...)
			recorder := events.NewFakeRecorder(10)
			r := NewBindingReconciler(withoutPods(live), pagedPods(t, live), recorder, clocktesting.NewFakePassiveClock(now),
				Options{OrphanGracePeriod: 2 * time.Minute, DrainBackoffBase: 10 * time.Second, DrainBackoffMax: 10 * time.Minute})
			reconcile := func() ctrl.Result {
				t.Helper()
				res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(b)})
				if err != nil {
					t.Fatalf("Reconcile: %v", err)
				}
				return res
			}
			jobs := func() int {
				var l batchv1.JobList
				if err := live.List(context.Background(), &l); err != nil {
					t.Fatal(err)
				}
				return len(l.Items)
			}

			res := reconcile()
			claimKept(t, live, pvc, "copy still mounts it")
			if got := jobs(); got != fixed-4 {
				t.Errorf("%d finalizer Jobs while the copy mounts the claim, want %d", got, fixed-4)
			}
			got := &v1alpha1.FluentPVCBinding{}
			if err := live.Get(context.Background(), client.ObjectKeyFromObject(b), got); err != nil {
				t.Fatal(err)
			}
			c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.BindingConditionDrainBlocked)
			if c == nil || c.Reason != v1alpha1.DrainBlockedReasonMountedByOtherPod || !strings.Contains(c.Message, "pod app-debug") {
				t.Errorf("DrainBlocked = %+v, want reason %s naming pod app-debug", c, v1alpha1.DrainBlockedReasonMountedByOtherPod)
			}
			if res.RequeueAfter == 0 {
				t.Error("no look again at a pod out of the cache")
			}
			warned := false
			for len(recorder.Events) > 0 {
				if strings.Contains(<-recorder.Events, v1alpha1.EventReasonDrainBlocked) {
					warned = true
				}
			}
			if !warned {
				t.Error("no DrainBlocked Warning")
			}

			if err := live.Delete(context.Background(), copied); err != nil {
				t.Fatal(err)
			}
			reconcile()
			if tc.drained {
				if err := live.Get(context.Background(), client.ObjectKeyFromObject(pvc), &corev1.PersistentVolumeClaim{}); !apierrors.IsNotFound(err) {
					t.Errorf("drained claim not deleted once the copy is gone: %v", err)
				}
			} else if jobs() != 1 {
				t.Error("no finalizer Job once the copy is gone")
			}
		})
	}
}

// TestBindingRetryCapped fails one binding's reconcile 30 times: the wait
// before the next try stays within maxBindingRetry, so that a binding
// refused by a quota or a policy for long recovers soon after the fix.
// Before, the default limiter waited up to 16 minutes, and a claim whose
// binding a quota refused stayed without one long after the quota went.
func TestBindingRetryCapped(t *testing.T) {
	limiter := bindingRateLimiter()
	req := ctrl.Request{NamespacedName: client.ObjectKey{Namespace: "ns", Name: "f-abc"}}
	var last time.Duration
	for range 30 {
		last = limiter.When(req)
	}
	if last > maxBindingRetry || last < maxBindingRetry/2 {
		t.Errorf("wait after 30 failures = %s, want at most %s (and backing off up to it)", last, maxBindingRetry)
	}
}
