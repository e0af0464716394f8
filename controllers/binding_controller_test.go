package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	dto "github.com/prometheus/client_model/go"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/st-tech/fluent-pvc-operator/apis/objects"
	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/pool"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

// TestReconcileJobCacheLag reconciles a draining binding whose status names
// its running attempt-1 Job while the Job cache does not show that Job yet,
// as happens when the status write's own event arrives first. Attempt 2
// must not start beside attempt 1.
func TestReconcileJobCacheLag(t *testing.T) {
	now := fixtures.Epoch.Add(time.Hour)
	fpvc := fixtures.MakeFluentPVC("f").Obj()
	pvc := fixtures.Claim(fpvc, "ns", "f-abc", "h", v1alpha1.CheckoutMiss, fixtures.Epoch)
	pvc.UID = "pvc-uid"
	b := fixtures.Binding(pvc, fpvc.UID)
	b.Spec.Pod = v1alpha1.ObjectIdentity{Name: "gone", UID: "pod-uid"}
	b.Status.Phase = v1alpha1.BindingPhaseDraining
	b.Status.DrainAttempts = 1
	b.Status.DrainJobName = objects.DrainJobName(b.Name, 1)
	b.Status.DrainStartTime = &metav1.Time{Time: now.Add(-time.Second)}
	running := objects.DrainJob(fpvc, b, 1)

	live := fakeAPI(t, interceptor.Funcs{}, fpvc, pvc, b, running)
	// The cache: the same objects, but Job lists miss the new Job.
	cached := interceptor.NewClient(live, interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*batchv1.JobList); ok {
				return nil
			}
			return c.List(ctx, list, opts...)
		},
	})
	r := testBindingReconciler(cached, live, now)

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

// TestReconcileStaleBindingAfterReturn reconciles a binding whose claim went
// back to the pool: the binding outlived the return, by
// a SIGKILL between the return and its removal or by cache lag. The claim,
// whatever became of it since, must be left alone, and the binding end.
func TestReconcileStaleBindingAfterReturn(t *testing.T) {
	now := fixtures.Epoch.Add(time.Hour)
	fpvc := fixtures.MakeFluentPVC("f").PoolSize(3).Obj()
	hash := pool.TemplateHash(&fpvc.Spec.PVCSpecTemplate)
	first := fixtures.Claim(fpvc, "ns", "f-abc", hash, v1alpha1.CheckoutHit, fixtures.Epoch)
	first.UID = "pvc-uid"
	stale := fixtures.Binding(first, fpvc.UID)
	stale.UID = "stale-binding-uid"
	stale.Status.Phase = v1alpha1.BindingPhasePending
	returned := fixtures.Returned(first)

	cases := map[string]struct {
		claim *corev1.PersistentVolumeClaim
	}{
		"back in the pool":                           {claim: returned},
		"checked out again, its pod not created yet": {claim: fixtures.CheckedOut(returned, now)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			claim := tc.claim.DeepCopy()
			live := fakeAPI(t, interceptor.Funcs{}, fpvc, claim, stale.DeepCopy())
			r := testBindingReconciler(live, live, now)
			ctx := context.Background()
			if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(stale)}); err != nil {
				t.Fatalf("Reconcile: %v", err)
			}

			got := &corev1.PersistentVolumeClaim{}
			if err := live.Get(ctx, client.ObjectKeyFromObject(claim), got); err != nil {
				t.Fatalf("the claim is gone: %v", err)
			}
			if diff := cmp.Diff(claim.Labels, got.Labels); diff != "" {
				t.Errorf("claim labels changed (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(claim.Annotations, got.Annotations, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("claim annotations changed (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(claim.Finalizers, got.Finalizers, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("claim finalizers changed (-want +got):\n%s", diff)
			}
			var jobs batchv1.JobList
			if err := live.List(ctx, &jobs); err != nil {
				t.Fatal(err)
			}
			if len(jobs.Items) != 0 {
				t.Errorf("%d drain Jobs were created for a claim that is not the binding's", len(jobs.Items))
			}
			err := live.Get(ctx, client.ObjectKeyFromObject(stale), &v1alpha1.FluentPVCBinding{})
			if !apierrors.IsNotFound(err) {
				t.Errorf("the stale binding is still there (err %v)", err)
			}
		})
	}
}

// fakeAPI is a fake API server holding objs, with the field indexes the
// binding reconciler's cache has; funcs intercept its calls.
func fakeAPI(t *testing.T, funcs interceptor.Funcs, objs ...client.Object) client.WithWatch {
	return fake.NewClientBuilder().WithScheme(newScheme(t)).
		WithObjects(objs...).
		WithStatusSubresource(&v1alpha1.FluentPVCBinding{}).
		WithIndex(&corev1.Pod{}, podBindingIndex, byBindingLabel).
		WithIndex(&batchv1.Job{}, jobBindingIndex, byBindingLabel).
		// The API server's own field selectors of events.
		WithIndex(&corev1.Event{}, "involvedObject.uid", func(o client.Object) []string { return []string{string(o.(*corev1.Event).InvolvedObject.UID)} }).
		WithIndex(&corev1.Event{}, "reason", func(o client.Object) []string { return []string{o.(*corev1.Event).Reason} }).
		WithInterceptorFuncs(funcs).
		Build()
}

// pagedPods is live serving a list of a namespace's pods with a limit in
// pages, by name, each continued from where the last one ended; unlike the
// API server's, its pages are not one snapshot, and its continuations never
// expire. It fails t for such a list that asks for no limit, or for more
// than livePodPage pods a page. Lists with a selector pass through.
func pagedPods(t *testing.T, live client.WithWatch) client.WithWatch {
	return interceptor.NewClient(live, interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			page, ok := list.(*corev1.PodList)
			o := (&client.ListOptions{}).ApplyOptions(opts)
			if !ok || o.LabelSelector != nil || o.FieldSelector != nil {
				return c.List(ctx, list, opts...)
			}
			if o.Limit <= 0 || o.Limit > livePodPage {
				t.Errorf("a live list of namespace %q's pods asks for %d pods a page, want 1 to %d", o.Namespace, o.Limit, livePodPage)
				o.Limit = livePodPage
			}
			all := &corev1.PodList{}
			if err := c.List(ctx, all, client.InNamespace(o.Namespace)); err != nil {
				return err
			}
			slices.SortFunc(all.Items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
			from := 0
			if o.Continue != "" {
				var err error
				if from, err = strconv.Atoi(o.Continue); err != nil {
					return apierrors.NewBadRequest("continue " + o.Continue)
				}
			}
			to := min(from+int(o.Limit), len(all.Items))
			page.Items, page.ResourceVersion, page.Continue = all.Items[from:to], all.ResourceVersion, ""
			if to < len(all.Items) {
				page.Continue = strconv.Itoa(to)
			}
			return nil
		},
	})
}

// withoutPods is a cache over live that holds no pod, as the operator's
// holds no pod whose opt-in label was removed.
func withoutPods(live client.WithWatch) client.WithWatch {
	return interceptor.NewClient(live, interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*corev1.PodList); ok {
				return nil
			}
			return c.List(ctx, list, opts...)
		},
	})
}

// testBindingReconciler reconciles through cached and live at time now.
func testBindingReconciler(cached, live client.Client, now time.Time) *BindingReconciler {
	return NewBindingReconciler(cached, live, events.NewFakeRecorder(10), clocktesting.NewFakePassiveClock(now),
		Options{OrphanGracePeriod: 2 * time.Minute, DrainBackoffBase: 10 * time.Second, DrainBackoffMax: 10 * time.Minute})
}

// namespaceTerminating is the API server's refusal to create name in a
// terminating namespace.
func namespaceTerminating(gr schema.GroupResource, name string) error {
	err := apierrors.NewForbidden(gr, name, fmt.Errorf("unable to create new content in namespace ns because it is being terminated"))
	err.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause}}
	return err
}

func byBindingLabel(obj client.Object) []string {
	return []string{obj.GetLabels()[v1alpha1.BindingNameLabelKey]}
}

// TestReconcileUnlabelledBeforeRecorded reconciles a binding whose pod lost
// its opt-in label before the operator recorded it: the pod is out of the
// cache but runs, holding the pod-protection finalizer. Found by the chaos
// suite: the claim was drained while the pod ran, and the pod, once
// deleted, stayed Terminating forever.
func TestReconcileUnlabelledBeforeRecorded(t *testing.T) {
	now := fixtures.Epoch.Add(time.Hour)
	fpvc, claim := claimFixture()
	b := fixtures.Binding(claim, fpvc.UID)
	b.Status.Phase = v1alpha1.BindingPhasePending
	pod := fixtures.MakePod("app", "ns").Label(v1alpha1.BindingNameLabelKey, b.Name).Claim(claim.Name).Obj()
	pod.UID, pod.Finalizers, pod.Status.Phase = "pod-uid", []string{v1alpha1.PodProtectionFinalizer}, corev1.PodRunning

	live := fakeAPI(t, interceptor.Funcs{}, fpvc, claim, b, pod)
	// The cache holds only pods with the opt-in label.
	cached := withoutPods(live)
	r := testBindingReconciler(cached, live, now)
	ctx := context.Background()
	for range 2 {
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(b)}); err != nil {
			t.Fatalf("Reconcile: %v", err)
		}
	}

	var jobs batchv1.JobList
	if err := live.List(ctx, &jobs); err != nil {
		t.Fatal(err)
	}
	if len(jobs.Items) != 0 {
		t.Errorf("a drain Job started while the pod runs: %s", jobs.Items[0].Name)
	}
	got := &corev1.Pod{}
	if err := live.Get(ctx, client.ObjectKeyFromObject(pod), got); err != nil {
		t.Fatal(err)
	}
	if len(got.Finalizers) != 0 {
		t.Errorf("pod finalizers = %v, want none once the pod is recorded", got.Finalizers)
	}
	gotB := &v1alpha1.FluentPVCBinding{}
	if err := live.Get(ctx, client.ObjectKeyFromObject(b), gotB); err != nil {
		t.Fatal(err)
	}
	if gotB.Spec.Pod.UID != pod.UID || gotB.Status.Phase != v1alpha1.BindingPhaseInUse {
		t.Errorf("binding records pod %q in phase %s, want %q in %s", gotB.Spec.Pod.UID, gotB.Status.Phase, pod.UID, v1alpha1.BindingPhaseInUse)
	}
}

// TestReconcileNamespaceTerminatingBeforeBinding drains a claim whose
// namespace began terminating while its binding is not yet marked for
// deletion: the drain Job is refused. Found by the chaos suite: the binding
// retried the Job forever and the namespace never went away.
func TestReconcileNamespaceTerminatingBeforeBinding(t *testing.T) {
	now := fixtures.Epoch.Add(time.Hour)
	fpvc, claim := claimFixture()
	claim.Annotations[v1alpha1.UsedByPodAnnotationKey] = "gone/pod-uid"
	b := fixtures.Binding(claim, fpvc.UID)
	b.Spec.Pod = v1alpha1.ObjectIdentity{Name: "gone", UID: "pod-uid"}
	b.Status.Phase = v1alpha1.BindingPhaseInUse

	live := fakeAPI(t, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*batchv1.Job); ok {
				return namespaceTerminating(batchv1.Resource("jobs"), obj.GetName())
			}
			return c.Create(ctx, obj, opts...)
		},
	}, fpvc, claim, b)
	r := testBindingReconciler(live, live, now)
	ctx := context.Background()
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(b)}); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	got := &corev1.PersistentVolumeClaim{}
	if err := live.Get(ctx, client.ObjectKeyFromObject(claim), got); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(got.Finalizers, v1alpha1.PVCProtectionFinalizer) {
		t.Errorf("the claim is still held: finalizers %v", got.Finalizers)
	}
	if err := live.Get(ctx, client.ObjectKeyFromObject(b), &v1alpha1.FluentPVCBinding{}); !apierrors.IsNotFound(err) {
		t.Errorf("the binding is still there (err %v)", err)
	}
}

// TestReconcileAbandonUnlabelledPod remakes the binding of a claim in a
// terminating namespace (its binding was removed by hand), whose pod lost
// its opt-in label. Found by the chaos suite: the claim was let go of but
// the pod, out of the cache, kept the pod-protection finalizer and stayed
// Terminating forever, and with it the namespace.
func TestReconcileAbandonUnlabelledPod(t *testing.T) {
	now := fixtures.Epoch.Add(time.Hour)
	fpvc, claim := claimFixture()
	pod := fixtures.MakePod("app", "ns").Label(v1alpha1.BindingNameLabelKey, claim.Name).Claim(claim.Name).Obj()
	pod.UID, pod.Finalizers, pod.Status.Phase = "pod-uid", []string{v1alpha1.PodProtectionFinalizer}, corev1.PodRunning

	live := fakeAPI(t, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*v1alpha1.FluentPVCBinding); ok {
				return namespaceTerminating(v1alpha1.GroupVersion.WithResource("fluentpvcbindings").GroupResource(), obj.GetName())
			}
			return c.Create(ctx, obj, opts...)
		},
	}, fpvc, claim, pod)
	cached := withoutPods(live)
	r := testBindingReconciler(cached, live, now)
	ctx := context.Background()
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Namespace: "ns", Name: claim.Name}}); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	got := &corev1.Pod{}
	if err := live.Get(ctx, client.ObjectKeyFromObject(pod), got); err != nil {
		t.Fatal(err)
	}
	if len(got.Finalizers) != 0 {
		t.Errorf("pod finalizers = %v, want none: the namespace must be able to go", got.Finalizers)
	}
}

// A claim deleted after its drain succeeded is gone before the cache has
// the binding's Drained phase: the binding must finish without reporting
// the claim lost (found by the real-node suite, where a ClaimLost Warning
// followed a successful drain).
func TestReconcileDrainedClaimOnStaleBinding(t *testing.T) {
	now := fixtures.Epoch.Add(time.Hour)
	fpvc, claim := claimFixture()
	drainedBinding := fixtures.Binding(claim, fpvc.UID)
	drainedBinding.UID = "binding-uid"
	drainedBinding.Spec.Pod = v1alpha1.ObjectIdentity{Name: "app", UID: "pod-uid"}
	drainedBinding.Status.Phase = v1alpha1.BindingPhaseDrained
	stale := drainedBinding.DeepCopy()
	stale.Status.Phase = v1alpha1.BindingPhaseDraining

	live := fakeAPI(t, interceptor.Funcs{}, fpvc, drainedBinding)
	// The cache still has the binding as it was before its last status write.
	cached := interceptor.NewClient(live, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if b, ok := obj.(*v1alpha1.FluentPVCBinding); ok {
				if err := c.Get(ctx, key, b, opts...); err != nil {
					return err
				}
				b.Status = stale.Status
				return nil
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	recorder := events.NewFakeRecorder(10)
	r := NewBindingReconciler(cached, live, recorder, clocktesting.NewFakePassiveClock(now),
		Options{OrphanGracePeriod: 2 * time.Minute, DrainBackoffBase: 10 * time.Second, DrainBackoffMax: 10 * time.Minute})
	ctx := context.Background()
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(stale)}); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	close(recorder.Events)
	for e := range recorder.Events {
		t.Errorf("event on a binding whose claim was drained: %s", e)
	}
	bindingGone(t, live, client.ObjectKeyFromObject(stale))
}

// bindingGone fails t unless the binding of key is gone.
func bindingGone(t *testing.T, c client.Client, key client.ObjectKey) {
	t.Helper()
	if err := c.Get(context.Background(), key, &v1alpha1.FluentPVCBinding{}); !apierrors.IsNotFound(err) {
		t.Errorf("the binding is still there (err %v)", err)
	}
}

// TestReconcileStatusFromStaleBinding reconciles a binding the cache still
// has as InUse while the API server already has its drain started: the
// reconcile's status, computed from the stale copy, must not overwrite the
// newer one (here it would restart the drain's clock), and the reconcile
// must not fail, since the newer copy's own event reconciles it again.
func TestReconcileStatusFromStaleBinding(t *testing.T) {
	now := fixtures.Epoch.Add(time.Hour)
	fpvc := fixtures.MakeFluentPVC("f").Obj()
	pvc := fixtures.Claim(fpvc, "ns", "f-abc", "h", v1alpha1.CheckoutMiss, fixtures.Epoch)
	pvc.UID = "pvc-uid"
	b := fixtures.Binding(pvc, fpvc.UID)
	b.Spec.Pod = v1alpha1.ObjectIdentity{Name: "gone", UID: "pod-uid"}
	b.Status.Phase = v1alpha1.BindingPhaseDraining
	b.Status.DrainAttempts = 1
	b.Status.DrainJobName = objects.DrainJobName(b.Name, 1)
	b.Status.DrainStartTime = &metav1.Time{Time: now.Add(-time.Minute)}
	running := objects.DrainJob(fpvc, b, 1)

	live := fakeAPI(t, interceptor.Funcs{}, fpvc, pvc, b, running)
	before := &v1alpha1.FluentPVCBinding{}
	if err := live.Get(context.Background(), client.ObjectKeyFromObject(b), before); err != nil {
		t.Fatal(err)
	}
	// The cache: the binding before its drain began, at an older version.
	cached := interceptor.NewClient(live, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := c.Get(ctx, key, obj, opts...); err != nil {
				return err
			}
			if sb, ok := obj.(*v1alpha1.FluentPVCBinding); ok {
				sb.ResourceVersion = "1"
				sb.Status = v1alpha1.FluentPVCBindingStatus{Phase: v1alpha1.BindingPhaseInUse}
			}
			return nil
		},
	})
	r := testBindingReconciler(cached, live, now)

	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(b)}); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	after := &v1alpha1.FluentPVCBinding{}
	if err := live.Get(context.Background(), client.ObjectKeyFromObject(b), after); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before.Status, after.Status); diff != "" {
		t.Errorf("a status computed from a stale binding overwrote the newer one (-before +after):\n%s", diff)
	}
}

// TestReconcileDrainPodIsNotTheClaimsPod reconciles a binding, read before
// its drain started, whose claim tracks its pod and records none, while
// the drain Job's pod runs with the binding label. That pod mounts the
// claim but is not the pod the claim was made for: it is not recorded as
// the binding's pod, and the started drain goes on.
func TestReconcileDrainPodIsNotTheClaimsPod(t *testing.T) {
	now := fixtures.Epoch.Add(time.Hour)
	fpvc, claim := claimFixture()
	b := fixtures.Binding(claim, fpvc.UID)
	b.UID = "binding-uid"
	b.Status.Phase = v1alpha1.BindingPhasePending
	job := objects.DrainJob(fpvc, b, 1)
	job.UID = "job-uid"
	drainPod := fixtures.MakePod("f-abc-drain-1-x", "ns").Obj()
	drainPod.Labels = job.Spec.Template.Labels
	drainPod.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))}
	drainPod.UID, drainPod.Status.Phase = "drain-pod-uid", corev1.PodRunning

	live := fakeAPI(t, interceptor.Funcs{}, fpvc, claim, b, job, drainPod)
	cached := withoutPods(live)
	gotB := reconcileTwice(t, testBindingReconciler(cached, pagedPods(t, live), now), live, b)
	if gotB.Spec.Pod.UID != "" {
		t.Errorf("binding records pod %s/%s, want none: it is the drain Job's", gotB.Spec.Pod.Name, gotB.Spec.Pod.UID)
	}
	if gotB.Status.Phase != v1alpha1.BindingPhaseDraining {
		t.Errorf("binding phase = %s, want %s", gotB.Status.Phase, v1alpha1.BindingPhaseDraining)
	}
	claimKept(t, live, claim, "drain runs")
	var jobs batchv1.JobList
	if err := live.List(context.Background(), &jobs); err != nil {
		t.Fatal(err)
	}
	if len(jobs.Items) != 1 {
		t.Errorf("%d Jobs, want the one drain Job", len(jobs.Items))
	}
}

// TestReconcileClaimsPodByVolume reconciles a binding that has not recorded
// its pod yet, past the orphan grace period, while the pod that mounts the
// claim no longer carries its labels (edited on the running pod), and
// another pod carries the binding label of a claim it does not mount.
// The pod is found by its volume: it is recorded, the claim stays in use,
// and the other pod is not taken for the claim's. Before, the claim was
// proven "unused" by a list of the binding label and reclaimed while its
// pod wrote to it.
func TestReconcileClaimsPodByVolume(t *testing.T) {
	now := fixtures.Epoch.Add(time.Hour)
	fpvc, claim := claimFixture()
	b := fixtures.Binding(claim, fpvc.UID)
	b.Status.Phase = v1alpha1.BindingPhasePending
	unlabelled := fixtures.MakePod("app", "ns").Claim(claim.Name).Obj()
	unlabelled.UID, unlabelled.Finalizers, unlabelled.Status.Phase = "pod-uid", []string{v1alpha1.PodProtectionFinalizer}, corev1.PodRunning
	relabelled := fixtures.MakePod("other", "ns").FluentPVC(fpvc.Name).Label(v1alpha1.BindingNameLabelKey, claim.Name).Claim("f-xyz").Obj()
	relabelled.UID, relabelled.Status.Phase = "other-uid", corev1.PodRunning

	live := fakeAPI(t, interceptor.Funcs{}, fpvc, claim, b, unlabelled, relabelled)
	// The cache holds the pod with the opt-in label, not the other.
	cached := interceptor.NewClient(live, interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if err := c.List(ctx, list, opts...); err != nil {
				return err
			}
			if l, ok := list.(*corev1.PodList); ok {
				l.Items = slices.DeleteFunc(l.Items, func(p corev1.Pod) bool { return p.Labels[v1alpha1.FluentPVCNameLabelKey] == "" })
			}
			return nil
		},
	})
	gotB := reconcileTwice(t, testBindingReconciler(cached, pagedPods(t, live), now), live, b)
	if gotB.Spec.Pod.UID != unlabelled.UID || gotB.Status.Phase != v1alpha1.BindingPhaseInUse {
		t.Errorf("binding records pod %q in phase %s, want %q in %s", gotB.Spec.Pod.UID, gotB.Status.Phase, unlabelled.UID, v1alpha1.BindingPhaseInUse)
	}
	claimKept(t, live, claim, "pod runs")
}

// reconcileTwice reconciles b twice with r and returns it as live holds it
// then.
func reconcileTwice(t *testing.T, r *BindingReconciler, live client.Client, b *v1alpha1.FluentPVCBinding) *v1alpha1.FluentPVCBinding {
	t.Helper()
	ctx := context.Background()
	for range 2 {
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(b)}); err != nil {
			t.Fatalf("Reconcile: %v", err)
		}
	}
	got := &v1alpha1.FluentPVCBinding{}
	if err := live.Get(ctx, client.ObjectKeyFromObject(b), got); err != nil {
		t.Fatalf("binding: %v", err)
	}
	return got
}

// claimKept fails t unless claim still exists in live, claimed and not
// deleting, as it must while its pod runs or its drain does.
func claimKept(t *testing.T, live client.Client, claim *corev1.PersistentVolumeClaim, while string) {
	t.Helper()
	got := &corev1.PersistentVolumeClaim{}
	if err := live.Get(context.Background(), client.ObjectKeyFromObject(claim), got); err != nil {
		t.Fatalf("claim: %v", err)
	}
	if got.Labels[v1alpha1.ClaimRoleLabelKey] == v1alpha1.ClaimRoleWarm || !got.DeletionTimestamp.IsZero() {
		t.Errorf("claim %s went back to the pool or is deleted while its %s", claim.Name, while)
	}
}

// claimFixture is FluentPVC f and its claim f-abc (UID pvc-uid) in
// namespace ns, handed out on a miss at fixtures.Epoch.
func claimFixture() (*v1alpha1.FluentPVC, *corev1.PersistentVolumeClaim) {
	fpvc := fixtures.MakeFluentPVC("f").Obj()
	claim := fixtures.Claim(fpvc, "ns", "f-abc", "h", v1alpha1.CheckoutMiss, fixtures.Epoch)
	claim.UID = "pvc-uid"
	return fpvc, claim
}

// steppingClock reads start, then start+step, start+2*step, ...
type steppingClock struct {
	clock.PassiveClock
	next, step time.Duration
	start      time.Time
}

func (c *steppingClock) Now() time.Time {
	t := c.start.Add(c.next)
	c.next += c.step
	return t
}

func (c *steppingClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// TestReconcileGraceEndsMidReconcile reconciles an unused claim's binding
// while the orphan grace period ends between the reconcile's reads of the
// clock. Before, what was observed (within the grace period: no proof
// looked for) and what was decided (past it: no proof, so drain) read the
// clock apart, and a drain Job started for a claim no pod used.
func TestReconcileGraceEndsMidReconcile(t *testing.T) {
	fpvc, claim := claimFixture()
	b := fixtures.Binding(claim, fpvc.UID)
	b.Status.Phase = v1alpha1.BindingPhasePending
	b.CreationTimestamp = metav1.NewTime(fixtures.Epoch) // the grace period starts here
	live := fakeAPI(t, interceptor.Funcs{}, fpvc, claim, b)
	clk := &steppingClock{start: fixtures.Epoch.Add(2*time.Minute - 500*time.Millisecond), step: time.Second}
	r := NewBindingReconciler(withoutPods(live), pagedPods(t, live), events.NewFakeRecorder(10), clk,
		Options{OrphanGracePeriod: 2 * time.Minute, DrainBackoffBase: 10 * time.Second, DrainBackoffMax: 10 * time.Minute})

	res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(b)})
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	var jobs batchv1.JobList
	if err := live.List(context.Background(), &jobs); err != nil {
		t.Fatal(err)
	}
	if len(jobs.Items) != 0 {
		t.Errorf("a drain Job started for a claim within its grace period: %s", jobs.Items[0].Name)
	}
	if res.RequeueAfter != 500*time.Millisecond {
		t.Errorf("requeue after %s, want the 500ms left of the grace period", res.RequeueAfter)
	}
}

// TestReconcileOrphanListsPodsOnce reconciles the binding of a claim that
// never recorded a pod, past the orphan grace period, with no pod left:
// the search for its pod and the check for other pods that mount the
// claim share one live list of the namespace's pods.
func TestReconcileOrphanListsPodsOnce(t *testing.T) {
	now := fixtures.Epoch.Add(time.Hour)
	fpvc, claim := claimFixture()
	b := fixtures.Binding(claim, fpvc.UID)
	b.CreationTimestamp = metav1.NewTime(fixtures.Epoch)
	b.Status.Phase = v1alpha1.BindingPhasePending
	lists := 0
	live := fakeAPI(t, interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*corev1.PodList); ok && len(opts) == 1 {
				lists++ // the namespace's pods, no selector
			}
			return c.List(ctx, list, opts...)
		},
	}, fpvc, claim, b)
	if _, err := testBindingReconciler(withoutPods(live), pagedPods(t, live), now).Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(b)}); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if lists != 1 {
		t.Errorf("%d live lists of the namespace's pods, want 1", lists)
	}
}

// TestReleasePod removes the pod-protection finalizer from pods read some
// time ago: a status write since the read must not make it fail, another
// pod of the same name or finalizers that moved must.
func TestReleasePod(t *testing.T) {
	read := fixtures.MakePod("app", "ns").Obj()
	read.UID = "app-uid"
	read.Finalizers = []string{"example.com/other", v1alpha1.PodProtectionFinalizer}
	with := func(f func(*corev1.Pod)) *corev1.Pod {
		p := read.DeepCopy()
		f(p)
		return p
	}
	cases := map[string]struct {
		live          *corev1.Pod // nil: gone
		afterRead     func(*corev1.Pod)
		wantErr       bool
		wantFinalizer []string
	}{
		"as read":                           {live: read, wantFinalizer: []string{"example.com/other"}},
		"its status written since the read": {live: read, afterRead: func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning }, wantFinalizer: []string{"example.com/other"}},
		"another pod of the same name":      {live: with(func(p *corev1.Pod) { p.UID = "new-uid" }), wantErr: true, wantFinalizer: read.Finalizers},
		"its finalizers moved":              {live: with(func(p *corev1.Pod) { p.Finalizers = []string{v1alpha1.PodProtectionFinalizer, "example.com/other"} }), wantErr: true, wantFinalizer: []string{v1alpha1.PodProtectionFinalizer, "example.com/other"}},
		"already released":                  {live: with(func(p *corev1.Pod) { p.Finalizers = []string{"example.com/other"} }), wantErr: true, wantFinalizer: []string{"example.com/other"}},
		"gone":                              {},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var objs []client.Object
			if tc.live != nil {
				objs = append(objs, tc.live.DeepCopy())
			}
			c := fakeAPI(t, interceptor.Funcs{}, objs...)
			pod := read.DeepCopy()
			if tc.live != nil {
				got := &corev1.Pod{}
				if err := c.Get(context.Background(), client.ObjectKeyFromObject(read), got); err != nil {
					t.Fatal(err)
				}
				pod.ResourceVersion = got.ResourceVersion
				if tc.afterRead != nil {
					tc.afterRead(got)
					if err := c.Update(context.Background(), got); err != nil {
						t.Fatal(err)
					}
				}
			}
			err := releasePod(context.Background(), c, pod)
			if (err != nil) != tc.wantErr {
				t.Fatalf("releasePod: %v, want error %v", err, tc.wantErr)
			}
			if tc.live == nil {
				return
			}
			got := &corev1.Pod{}
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(read), got); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.Finalizers, tc.wantFinalizer) {
				t.Errorf("finalizers %v, want %v", got.Finalizers, tc.wantFinalizer)
			}
		})
	}
}

// TestReconcileCreateBinding runs the making of a held claim's binding:
// made with its pod recorded once the cache shows the pod, in one write;
// awaited for a few seconds after the admission while it does not; made
// without a pod once those have passed, or at once for a claim that
// records its pod.
func TestReconcileCreateBinding(t *testing.T) {
	admitted := fixtures.Epoch.Add(time.Hour)
	fpvc := fixtures.MakeFluentPVC("f").Obj()
	held := fixtures.Claim(fpvc, "ns", "f-abc", "h", v1alpha1.CheckoutMiss, admitted)
	held.UID = "pvc-uid"
	pod := fixtures.MakePod("app", "ns").FluentPVC(fpvc.Name).Claim(held.Name).Label(v1alpha1.BindingNameLabelKey, held.Name).Obj()
	pod.UID = "app-uid"
	recording := held.DeepCopy()
	recording.Annotations[v1alpha1.UsedByPodAnnotationKey] = "gone/gone-uid"
	reserved := held.DeepCopy()
	reserved.Annotations[v1alpha1.ReservedByAnnotationKey] = "replica-a"
	reserved.Annotations[v1alpha1.ReservedUntilAnnotationKey] = admitted.Add(time.Minute).Format(time.RFC3339Nano)
	farReserved := reserved.DeepCopy()
	farReserved.Annotations[v1alpha1.ReservedUntilAnnotationKey] = admitted.Add(24 * time.Hour).Format(time.RFC3339Nano)
	extended := reserved.DeepCopy()
	extended.Annotations[v1alpha1.ReservedUntilAnnotationKey] = admitted.Add(6 * time.Minute).Format(time.RFC3339Nano)
	cases := map[string]struct {
		claim *corev1.PersistentVolumeClaim
		// live is the API server's copy of the claim, when the cache's
		// (claim) lags behind it.
		live        *corev1.PersistentVolumeClaim
		pod         *corev1.Pod
		after       time.Duration
		wantPod     string // the pod the binding records
		wantBinding bool
		wantRequeue time.Duration
	}{
		"the pod cached: made with it":                               {claim: held, pod: pod, after: 10 * time.Millisecond, wantBinding: true, wantPod: "app"},
		"no pod yet, just admitted: waits":                           {claim: held, after: time.Second, wantRequeue: claim.PodWait - time.Second},
		"no pod within the wait: made without one":                   {claim: held, after: claim.PodWait, wantBinding: true},
		"the claim records its pod: made again with it":              {claim: recording, after: 10 * time.Millisecond, wantBinding: true, wantPod: "gone"},
		"a clock far behind the admission's: waits at most the wait": {claim: held, after: -time.Hour, wantRequeue: claim.PodWait},
		// A reserved claim may be handed to a pod until its reservation ends.
		"reserved, past the admission's wait: waits for the reservation's end": {
			claim: reserved, after: claim.PodWait, wantRequeue: time.Minute},
		"reserved, its end passed, within the wait: waits":     {claim: reserved, after: time.Minute + time.Second, wantRequeue: claim.PodWait - time.Second},
		"reserved, no pod within the wait after its end: made": {claim: reserved, after: time.Minute + claim.PodWait, wantBinding: true},
		"reserved, the pod cached: made with it":               {claim: reserved, pod: pod, after: time.Second, wantBinding: true, wantPod: "app"},
		"reserved far ahead: waits at most the longest reservation": {
			claim: farReserved, after: time.Second, wantRequeue: claim.MaxReservation + claim.PodWait},
		"reserved, its end passed in the cache, extended since: waits for the new end": {
			claim: reserved, live: extended, after: time.Minute + claim.PodWait, wantRequeue: 5 * time.Minute},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			objs := []client.Object{fpvc, tc.claim}
			if tc.pod != nil {
				objs = append(objs, tc.pod)
			}
			api := fakeAPI(t, interceptor.Funcs{}, objs...)
			live := api
			if tc.live != nil {
				live = fakeAPI(t, interceptor.Funcs{}, append([]client.Object{tc.live}, objs[2:]...)...)
			}
			r := testBindingReconciler(api, live, admitted.Add(tc.after))
			key := client.ObjectKeyFromObject(tc.claim)
			res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: key})
			if err != nil {
				t.Fatal(err)
			}
			b := &v1alpha1.FluentPVCBinding{}
			err = api.Get(context.Background(), key, b)
			if made := err == nil; made != tc.wantBinding {
				t.Fatalf("binding made: %v, want %v (get: %v)", made, tc.wantBinding, err)
			}
			if tc.wantBinding && b.Spec.Pod.Name != tc.wantPod {
				t.Errorf("binding records pod %q, want %q", b.Spec.Pod.Name, tc.wantPod)
			}
			if !tc.wantBinding && res.RequeueAfter != tc.wantRequeue {
				t.Errorf("requeue after %s, want %s", res.RequeueAfter, tc.wantRequeue)
			}
		})
	}
}

// TestReconcileDrainedFinishesAtOnce reconciles a binding whose drain Job
// succeeded: the claim is released and deleted, and the binding ends in
// the same reconcile, with no status write (its Drained status was
// written, then the binding deleted, one reconcile later) and the drain
// counted once.
func TestReconcileDrainedFinishesAtOnce(t *testing.T) {
	now := fixtures.Epoch.Add(time.Hour)
	fpvc, pvc, b, done := drainedFixture(t, "f-finish", now)
	var statusWrites int
	api := fakeAPI(t, interceptor.Funcs{SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
		statusWrites++
		return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
	}}, fpvc, pvc, b, done)
	r := testBindingReconciler(api, api, now)
	count := func() float64 {
		m := &dto.Metric{}
		if err := drainsSucceeded.WithLabelValues(fpvc.Name).Write(m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	before := count()
	ctx := context.Background()
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(b)}); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if err := api.Get(ctx, client.ObjectKeyFromObject(pvc), &corev1.PersistentVolumeClaim{}); !apierrors.IsNotFound(err) {
		t.Errorf("the drained claim is still there (err %v)", err)
	}
	bindingGone(t, api, client.ObjectKeyFromObject(b))
	// An event of the claim's deletion may reconcile the binding again:
	// nothing more is written or counted.
	writes := 0
	again := testBindingReconciler(interceptor.NewClient(api, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			writes++
			return c.Patch(ctx, obj, patch, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			writes++
			return c.Delete(ctx, obj, opts...)
		},
	}), api, now)
	if _, err := again.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(b)}); err != nil {
		t.Fatalf("Reconcile again: %v", err)
	}
	if statusWrites != 0 || writes != 0 {
		t.Errorf("%d status writes and %d other writes, want none", statusWrites, writes)
	}
	if n := count() - before; n != 1 {
		t.Errorf("drains counted: %v, want 1", n)
	}
}

// TestReconcileRecordsPodOnClaimOnce reconciles a binding twice while the
// cache has not yet seen the record of its pod on the claim (a pod event
// comes first): the record is written once, not once per reconcile (the
// cost suite counted 1.6 claim patches for it per pod).
func TestReconcileRecordsPodOnClaimOnce(t *testing.T) {
	now := fixtures.Epoch.Add(time.Second)
	fpvc, pvc := claimFixture()
	pod := fixtures.MakePod("app", "ns").FluentPVC(fpvc.Name).Label(v1alpha1.BindingNameLabelKey, pvc.Name).Claim(pvc.Name).Obj()
	pod.UID, pod.Status.Phase = "pod-uid", corev1.PodRunning
	b := fixtures.Binding(pvc, fpvc.UID)
	b.Spec.Pod = v1alpha1.ObjectIdentity{Name: pod.Name, UID: pod.UID}
	writes := 0
	live := fakeAPI(t, interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if _, ok := obj.(*corev1.PersistentVolumeClaim); ok {
				writes++
			}
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if _, ok := obj.(*corev1.PersistentVolumeClaim); ok {
				writes++
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
	}, fpvc, pvc, b, pod)
	// The cache still has the claim as the webhook handed it out.
	stale := pvc.DeepCopy()
	if err := live.Get(context.Background(), client.ObjectKeyFromObject(pvc), stale); err != nil {
		t.Fatal(err)
	}
	cached := interceptor.NewClient(live, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if p, ok := obj.(*corev1.PersistentVolumeClaim); ok && key == client.ObjectKeyFromObject(stale) {
				stale.DeepCopyInto(p)
				return nil
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	r := testBindingReconciler(cached, live, now)
	for range 2 {
		if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(b)}); err != nil {
			t.Fatalf("Reconcile: %v", err)
		}
	}
	got := &corev1.PersistentVolumeClaim{}
	if err := live.Get(context.Background(), client.ObjectKeyFromObject(pvc), got); err != nil {
		t.Fatal(err)
	}
	if !claim.Records(got, b.Spec.Pod) {
		t.Errorf("the claim does not record pod %s", b.Spec.Pod.Name)
	}
	if writes != 1 {
		t.Errorf("%d writes of the claim, want 1", writes)
	}
}

// TestReconcileDrainingReadsNoPod reconciles a binding whose first drain
// Job runs while its status is not written yet (quietFirstDrain): the
// Job's events must not each read the gone pod live again (the cost suite
// counted five live reads of it per pod).
func TestReconcileDrainingReadsNoPod(t *testing.T) {
	now := fixtures.Epoch.Add(time.Hour)
	fpvc, pvc := claimFixture()
	gone := v1alpha1.ObjectIdentity{Name: "gone", UID: "pod-uid"}
	rec, err := claim.RecordPod(pvc, gone)
	if err != nil {
		t.Fatal(err)
	}
	b := fixtures.Binding(rec.Object, fpvc.UID)
	b.Spec.Pod = gone
	running := objects.DrainJob(fpvc, b, 1)
	running.CreationTimestamp = metav1.NewTime(now.Add(-time.Second))
	podReads := 0
	live := fakeAPI(t, interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if _, ok := obj.(*corev1.Pod); ok {
			podReads++
		}
		return c.Get(ctx, key, obj, opts...)
	}}, fpvc, rec.Object, b, running)
	r := testBindingReconciler(live, live, now)
	res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(b)})
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if podReads != 0 {
		t.Errorf("%d reads of the gone pod, want none once its drain Job exists", podReads)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > unwatchedRecheck {
		t.Errorf("requeue after %s, want within %s, when the Draining status is due", res.RequeueAfter, unwatchedRecheck)
	}
}

// TestReconcileBindingGoneBetweenReleaseAndDelete: a drained claim's
// deletion fails after its release, and the binding is stripped and
// deleted before it is tried again: the claim, let go of in order to be
// deleted, is deleted all the same when its binding's key is reconciled
// next, rather than left behind as a claim kept for the user.
func TestReconcileBindingGoneBetweenReleaseAndDelete(t *testing.T) {
	now := fixtures.Epoch.Add(time.Hour)
	fpvc, pvc, b, done := drainedFixture(t, "f-gone", now)
	failDelete := true
	api := fakeAPI(t, interceptor.Funcs{Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
		if _, ok := obj.(*corev1.PersistentVolumeClaim); ok && failDelete {
			failDelete = false
			return apierrors.NewInternalError(errors.New("the API server failed the deletion"))
		}
		return c.Delete(ctx, obj, opts...)
	}}, fpvc, pvc, b, done)
	r := testBindingReconciler(api, api, now)
	ctx := context.Background()
	key := client.ObjectKeyFromObject(b)
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err == nil {
		t.Fatal("Reconcile: the claim's deletion failed, but no error")
	}
	released := &corev1.PersistentVolumeClaim{}
	if err := api.Get(ctx, client.ObjectKeyFromObject(pvc), released); err != nil {
		t.Fatal(err)
	}
	if claim.StateOf(released) != claim.Kept {
		t.Fatalf("claim is %s after the failed deletion, want let go of (Kept)", claim.StateOf(released))
	}
	// A user strips the binding's finalizers and deletes it.
	live := &v1alpha1.FluentPVCBinding{}
	if err := api.Get(ctx, key, live); err != nil {
		t.Fatal(err)
	}
	live.Finalizers = nil
	if err := api.Update(ctx, live); err != nil {
		t.Fatal(err)
	}
	if err := api.Delete(ctx, live); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil {
		t.Fatalf("Reconcile after the binding went: %v", err)
	}
	if err := api.Get(ctx, client.ObjectKeyFromObject(pvc), &corev1.PersistentVolumeClaim{}); !apierrors.IsNotFound(err) {
		t.Errorf("the drained claim is left behind (err %v)", err)
	}
	bindingGone(t, api, key)
}

// drainedFixture is FluentPVC name, a claim its gone pod used, the claim's
// binding Draining since a second before now, and its finalizer Job,
// Complete.
func drainedFixture(t *testing.T, name string, now time.Time) (*v1alpha1.FluentPVC, *corev1.PersistentVolumeClaim, *v1alpha1.FluentPVCBinding, *batchv1.Job) {
	t.Helper()
	fpvc := fixtures.MakeFluentPVC(name).Obj()
	pvc := fixtures.Claim(fpvc, "ns", "f-abc", "h", v1alpha1.CheckoutMiss, fixtures.Epoch)
	pvc.UID = "pvc-uid"
	gone := v1alpha1.ObjectIdentity{Name: "gone", UID: "pod-uid"}
	rec, err := claim.RecordPod(pvc, gone)
	if err != nil {
		t.Fatal(err)
	}
	pvc = rec.Object
	b := fixtures.Binding(pvc, fpvc.UID)
	b.Spec.Pod = gone
	b.Status.Phase = v1alpha1.BindingPhaseDraining
	b.Status.DrainAttempts = 1
	b.Status.DrainJobName = objects.DrainJobName(b.Name, 1)
	b.Status.DrainStartTime = &metav1.Time{Time: now.Add(-time.Second)}
	done := objects.DrainJob(fpvc, b, 1)
	done.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
	return fpvc, pvc, b, done
}
