package controllers

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/pool"
)

// +kubebuilder:rbac:groups=fluent-pvc-operator.tech.zozo.com,resources=fluentpvcs,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=fluent-pvc-operator.tech.zozo.com,resources=fluentpvcs/status,verbs=get;update;patch

// FluentPVCReconciler keeps a FluentPVC's finalizer, warm pool and status:
// it counts the bindings by phase, keeps every pool namespace at its size,
// and lets a deleted FluentPVC go only after all of its bindings have
// finished draining.
type FluentPVCReconciler struct {
	client.Client
	// apiReader reads PVs, which are not cached, and what the cache may not
	// have seen yet.
	apiReader client.Reader
	recorder  events.EventRecorder
	clock     clock.PassiveClock
	// pool keeps the warm pool; this reconciler writes what it reports.
	pool *PoolReconciler

	// lastStatusWrite is when each FluentPVC's status was last written.
	lastStatusWrite sync.Map
}

// NewFluentPVCReconciler returns a FluentPVCReconciler that reads through c
// (cached) and apiReader (live), sends events through recorder, and takes
// the binder image, the pool bind mode and the idle namespace TTL from opts.
func NewFluentPVCReconciler(c client.Client, apiReader client.Reader, recorder events.EventRecorder, clk clock.PassiveClock, opts Options) *FluentPVCReconciler {
	return &FluentPVCReconciler{Client: c, apiReader: apiReader, recorder: recorder, clock: clk, pool: NewPoolReconciler(c, apiReader, clk, opts)}
}

// Reconcile implements reconcile.Reconciler.
func (r *FluentPVCReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	f := &v1alpha1.FluentPVC{}
	if err := r.Get(ctx, req.NamespacedName, f); err != nil {
		if apierrors.IsNotFound(err) {
			r.pool.Forget(req.Name)
			r.lastStatusWrite.Delete(req.Name)
			forgetMetrics(req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	initMetrics(f.Name)
	if f.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(f, v1alpha1.FluentPVCProtectionFinalizer) {
		patch := client.MergeFromWithOptions(f.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(f, v1alpha1.FluentPVCProtectionFinalizer)
		if err := r.Patch(ctx, f, patch); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding the finalizer: %w", err)
		}
	}
	return r.reconcile(ctx, f)
}

func (r *FluentPVCReconciler) reconcile(ctx context.Context, f *v1alpha1.FluentPVC) (ctrl.Result, error) {
	var bindings v1alpha1.FluentPVCBindingList
	// Read-only lists share the cache's objects instead of copying them:
	// a burst of pods brings a pool event per checkout, and each would
	// otherwise copy every binding and warm PVC of the FluentPVC.
	if err := r.List(ctx, &bindings, client.MatchingFields{bindingFluentPVCIndex: f.Name}, client.UnsafeDisableDeepCopy); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing bindings: %w", err)
	}
	setOldestUndrained(f.Name, bindings.Items)
	pr, poolErr := r.pool.Reconcile(ctx, f, bindings.Items)
	if !pr.observed {
		return ctrl.Result{}, poolErr
	}

	now := r.clock.Now()
	status := constructFluentPVCStatus(f, bindings.Items, pr, now)
	result := ctrl.Result{RequeueAfter: pr.requeueAfter}
	if !equality.Semantic.DeepEqual(f.Status, status) {
		if wait := r.countsOnlyWait(f, status, now); wait > 0 {
			// Only counts and admission times changed and the status was
			// written less than statusCountsInterval ago: write them once
			// the interval is over, so that pods coming and going cost one
			// status write per interval instead of one per binding change.
			if result.RequeueAfter == 0 || wait < result.RequeueAfter {
				result.RequeueAfter = wait
			}
		} else {
			patch := client.MergeFrom(f.DeepCopy())
			f.Status = status
			if err := r.Status().Patch(ctx, f, patch); err != nil {
				return ctrl.Result{}, fmt.Errorf("writing status: %w", err)
			}
			r.lastStatusWrite.Store(f.Name, now)
		}
	}
	for _, w := range pr.warnings {
		r.recorder.Eventf(f, nil, corev1.EventTypeWarning, w.reason, w.reason, "%s", w.message)
	}
	if poolErr != nil {
		return ctrl.Result{}, poolErr
	}
	if !f.DeletionTimestamp.IsZero() && len(bindings.Items) == 0 && pr.emptied {
		// A claim whose binding is not made yet still has to be drained.
		var claimed corev1.PersistentVolumeClaimList
		if err := r.List(ctx, &claimed, client.MatchingLabels{v1alpha1.FluentPVCNameLabelKey: f.Name, v1alpha1.ClaimRoleLabelKey: v1alpha1.ClaimRoleClaimed}, client.UnsafeDisableDeepCopy); err != nil {
			return ctrl.Result{}, fmt.Errorf("listing claims: %w", err)
		}
		if slices.ContainsFunc(claimed.Items, func(c corev1.PersistentVolumeClaim) bool { return claim.Held(&c) }) {
			return result, nil
		}
		// Another webhook replica, whose cache has not yet seen the deletion,
		// may have just admitted a pod, and this cache may not show its claim
		// or binding yet; or it may be about to hand out a warm PVC this
		// cache does not show. Without the FluentPVC that binding could never
		// be drained: only live reads may let it go.
		if waiting, err := r.claimsWaitLive(ctx, f); err != nil || waiting {
			return result, err
		}
		if err := removeFinalizer(ctx, r.Client, f, v1alpha1.FluentPVCProtectionFinalizer); err != nil {
			return ctrl.Result{}, fmt.Errorf("removing the finalizer: %w", err)
		}
	}
	return result, nil
}

// claimsWaitLive is true when a live read finds a binding or a claimed PVC
// of f, or a warm PVC of f not being deleted. A webhook hands out a warm
// PVC by an update conditioned on the resourceVersion it read, and its
// deletion changes that version, so once every warm PVC is being deleted
// no admission can hand one out: a hit needs no live read of f to know
// that f stays until its claim is drained.
func (r *FluentPVCReconciler) claimsWaitLive(ctx context.Context, f *v1alpha1.FluentPVC) (bool, error) {
	ofF := client.MatchingLabels{v1alpha1.FluentPVCNameLabelKey: f.Name}
	var warm corev1.PersistentVolumeClaimList
	if err := r.apiReader.List(ctx, &warm, client.MatchingLabels{v1alpha1.FluentPVCNameLabelKey: f.Name, v1alpha1.ClaimRoleLabelKey: v1alpha1.ClaimRoleWarm}); err != nil {
		return false, fmt.Errorf("listing warm PVCs: %w", err)
	}
	if slices.ContainsFunc(warm.Items, func(c corev1.PersistentVolumeClaim) bool { return c.DeletionTimestamp.IsZero() }) {
		return true, nil
	}
	var bindings v1alpha1.FluentPVCBindingList
	if err := r.apiReader.List(ctx, &bindings, ofF); err != nil {
		return false, fmt.Errorf("listing bindings: %w", err)
	}
	if len(bindings.Items) > 0 {
		return true, nil
	}
	var claimed corev1.PersistentVolumeClaimList
	if err := r.apiReader.List(ctx, &claimed, client.MatchingLabels{v1alpha1.FluentPVCNameLabelKey: f.Name, v1alpha1.ClaimRoleLabelKey: v1alpha1.ClaimRoleClaimed}); err != nil {
		return false, fmt.Errorf("listing claims: %w", err)
	}
	return slices.ContainsFunc(claimed.Items, func(c corev1.PersistentVolumeClaim) bool { return claim.Held(&c) }), nil
}

// pools are the FluentPVCs that keep a warm pool.
func (r *FluentPVCReconciler) pools(ctx context.Context, _ client.Object) []reconcile.Request {
	var l v1alpha1.FluentPVCList
	if err := r.List(ctx, &l, client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for _, f := range l.Items {
		if f.Spec.Pool.Size > 0 {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKey{Name: f.Name}})
		}
	}
	return reqs
}

// namespaceMeta is a Namespace as the cache keeps it: metadata only.
func namespaceMeta() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	return m
}

// nodeEligibilityChanged passes node events that can change which nodes a
// pool may name: creation, deletion, and updates of readiness, taints,
// cordoning or labels; not the heartbeats in between.
var nodeEligibilityChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*corev1.Node)
		n, ok2 := e.ObjectNew.(*corev1.Node)
		if !ok1 || !ok2 {
			return true
		}
		return len(pool.EligibleNodes([]corev1.Node{*o}, nil, nil)) != len(pool.EligibleNodes([]corev1.Node{*n}, nil, nil)) ||
			!equality.Semantic.DeepEqual(o.Labels, n.Labels)
	},
}

// SetupWithManager registers the reconciler and its watches: pool PVCs and
// binder Jobs refill the pool as soon as they change, a checkout included.
func (r *FluentPVCReconciler) SetupWithManager(mgr ctrl.Manager) error {
	byFluentPVCLabel := coalesced(func(_ context.Context, obj client.Object) []reconcile.Request {
		if name := obj.GetLabels()[v1alpha1.FluentPVCNameLabelKey]; name != "" {
			return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: name}}}
		}
		return nil
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("fluentpvc").
		For(&v1alpha1.FluentPVC{}).
		Watches(&corev1.PersistentVolumeClaim{}, byFluentPVCLabel).
		Watches(&batchv1.Job{}, byFluentPVCLabel).
		// A holder that starts, ends or goes changes what is staged.
		Watches(&corev1.Pod{}, byFluentPVCLabel, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetLabels()[v1alpha1.ComponentLabelKey] == v1alpha1.ComponentHolder
		}))).
		// A node that comes, goes or changes whether it qualifies may be
		// what a pool's pending PVCs wait for (see observePool).
		// Coalesced over nodeCoalesce: a cluster that gains or loses many
		// nodes at once (a scale-up) makes one reconcile of each pool a
		// second, not one per node.
		Watches(&corev1.Node{}, coalescedAfter(nodeCoalesce, r.pools), builder.WithPredicates(nodeEligibilityChanged)).
		// An attachment that comes or goes changes how many holders its
		// node may keep (pool.NodeRoom): other volumes take slots from
		// holders, and slots freed are staged again.
		Watches(&storagev1.VolumeAttachment{}, coalesced(r.pools), builder.WithPredicates(predicate.Funcs{
			UpdateFunc: func(event.UpdateEvent) bool { return false },
		})).
		// A pool namespace created after its FluentPVC is filled at once.
		WatchesMetadata(namespaceMeta(), handler.EnqueueRequestsFromMapFunc(r.pools), builder.WithPredicates(predicate.Funcs{
			UpdateFunc: func(event.UpdateEvent) bool { return false },
			DeleteFunc: func(event.DeleteEvent) bool { return false },
		})).
		Watches(&v1alpha1.FluentPVCBinding{}, coalesced(func(_ context.Context, obj client.Object) []reconcile.Request {
			b := obj.(*v1alpha1.FluentPVCBinding)
			return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: b.Spec.FluentPVC.Name}}}
		})).
		Complete(quietConflicts(r))
}

// fluentPVCCoalesce is how long after an event of one of its PVCs, Jobs,
// holders or bindings, or of a VolumeAttachment, a FluentPVC is
// reconciled. The events of a burst of admissions (a checkout, then the
// binding, each) come within it and make one reconcile, and the pool's
// refill is written after the admission that took the PVC, not while it
// runs.
const fluentPVCCoalesce = 100 * time.Millisecond

// nodeCoalesce is how long after a node's event the pools are reconciled.
// Every pool reads every node, so a reconcile costs CPU in proportion to
// the cluster's size, and a node that comes or goes is what a pending PVC
// or a holder waits for seconds at least, never a pod's start.
const nodeCoalesce = time.Second

// coalesced enqueues the FluentPVCs that m maps an event's object to,
// fluentPVCCoalesce after the event; a FluentPVC already waiting keeps
// its earlier time.
func coalesced(m handler.MapFunc) handler.EventHandler {
	return coalescedAfter(fluentPVCCoalesce, m)
}

// coalescedAfter is coalesced with a window of its own.
func coalescedAfter(window time.Duration, m handler.MapFunc) handler.EventHandler {
	add := func(ctx context.Context, obj client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		for _, req := range m(ctx, obj) {
			q.AddAfter(req, window)
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, e.Object, q)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, e.ObjectOld, q)
			add(ctx, e.ObjectNew, q)
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, e.Object, q)
		},
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, e.Object, q)
		},
	}
}
