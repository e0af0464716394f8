package controllers

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/st-tech/fluent-pvc-operator/apis/objects"
	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/pool"
)

// +kubebuilder:rbac:groups=scheduling.k8s.io,resources=priorityclasses,verbs=get;create

// DefaultHolderPriorityClass is the PriorityClass of holder pods unless
// --holder-priority-class says otherwise.
const DefaultHolderPriorityClass = "fluent-pvc-operator-holder"

// holderPriority is the value of the holders' PriorityClass: below every
// pod without a class (0), so that any of them preempts a holder.
const holderPriority = -100

// EnsureHolderPriorityClass creates PriorityClass name for holder pods if
// it does not exist: a negative value, and a policy that never preempts.
// One made by hand is left as it is.
func EnsureHolderPriorityClass(ctx context.Context, c client.Client, name string) error {
	if name == "" {
		return nil
	}
	never := corev1.PreemptNever
	pc := &schedulingv1.PriorityClass{
		ObjectMeta:       metav1.ObjectMeta{Name: name, Labels: map[string]string{v1alpha1.ComponentLabelKey: v1alpha1.ComponentHolder}},
		Value:            holderPriority,
		PreemptionPolicy: &never,
		Description:      "Holder pods of fluent-pvc-operator, which keep warm PVCs attached and staged on nodes: preempted before any other pod, never preempting one.",
	}
	if err := c.Create(ctx, pc); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating PriorityClass %s for holder pods: %w", name, err)
	}
	return nil
}

// HolderReconciler removes a holder pod once its warm PVC has been handed
// out and the pod it went to is on a node (pool.HolderFate): on the same
// node, that pod keeps the volume attached and staged; on another, the
// volume must detach from the holder's node before it attaches there, so
// the holder goes at once. It also removes holders that outlived their
// PVC's checkout, ended, or lost their PVC. The pool creates holders.
type HolderReconciler struct {
	client.Client
	// apiReader reads the pod a claim records when the cache does not
	// hold it (its opt-in label was removed).
	apiReader client.Reader
	clock     clock.PassiveClock
	// ended remembers the holders counted as evicted, so that each is
	// counted once while its deletion is seen again; forgotten once gone.
	endedMu sync.Mutex
	ended   map[types.NamespacedName]types.UID
}

// forgetEnd forgets holder key, once it is gone.
func (r *HolderReconciler) forgetEnd(key types.NamespacedName) {
	r.endedMu.Lock()
	defer r.endedMu.Unlock()
	delete(r.ended, key)
}

// firstEnd records holder key, of uid, as counted evicted, and says
// whether it was not yet.
func (r *HolderReconciler) firstEnd(key types.NamespacedName, uid types.UID) bool {
	r.endedMu.Lock()
	defer r.endedMu.Unlock()
	if r.ended[key] == uid {
		return false
	}
	r.ended[key] = uid
	return true
}

// NewHolderReconciler returns a HolderReconciler reading the cache
// through c, and what the cache cannot hold through apiReader.
func NewHolderReconciler(c client.Client, apiReader client.Reader, clk clock.PassiveClock) *HolderReconciler {
	return &HolderReconciler{Client: c, apiReader: apiReader, clock: clk, ended: map[types.NamespacedName]types.UID{}}
}

// Reconcile implements reconcile.Reconciler.
func (r *HolderReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	h := &corev1.Pod{}
	if err := r.Get(ctx, req.NamespacedName, h); err != nil {
		if apierrors.IsNotFound(err) {
			r.forgetEnd(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	claimName := objects.HolderOf(h)
	if claimName == "" {
		return ctrl.Result{}, nil
	}
	var pvc *corev1.PersistentVolumeClaim
	c := &corev1.PersistentVolumeClaim{}
	switch err := r.Get(ctx, client.ObjectKey{Namespace: h.Namespace, Name: claimName}, c); {
	case err == nil:
		pvc = c
	case !apierrors.IsNotFound(err):
		return ctrl.Result{}, fmt.Errorf("reading warm PVC %s: %w", claimName, err)
	}
	if pvc != nil && claim.StateOf(pvc) == claim.Warm {
		var err error
		if pvc, err = r.checkedOutLive(ctx, pvc); err != nil {
			return ctrl.Result{}, err
		}
	}
	pod, err := r.claimPod(ctx, h, pvc)
	if err != nil {
		return ctrl.Result{}, err
	}
	bound, err := r.bound(ctx, pvc)
	if err != nil {
		return ctrl.Result{}, err
	}
	reason, recheck := pool.HolderFate(h, pvc, pod, bound, r.clock.Now())
	if reason == "" {
		return ctrl.Result{RequeueAfter: recheck}, nil
	}
	fpvc := h.Labels[v1alpha1.FluentPVCNameLabelKey]
	if reason == pool.HolderEvicted {
		if r.firstEnd(req.NamespacedName, h.UID) {
			holdersRemoved.WithLabelValues(fpvc, reason).Inc()
		}
		if !h.DeletionTimestamp.IsZero() {
			return ctrl.Result{}, nil
		}
	} else if !h.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	switch err := r.Delete(ctx, h, client.Preconditions{UID: &h.UID}); {
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		return ctrl.Result{}, nil
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("removing holder %s: %w", h.Name, err)
	}
	ctrl.LoggerFrom(ctx).V(1).Info("holder removed", "holder", klog.KObj(h), "node", h.Spec.NodeName, "reason", reason)
	if pvc != nil && claim.StateOf(pvc) == claim.Warm {
		// An evicted holder of a PVC still warm: the pool stages it again.
		if err := withdrawHolderRequest(ctx, r, h, pvc, r.clock.Now()); err != nil {
			return ctrl.Result{}, err
		}
	}
	if reason != pool.HolderEvicted {
		holdersRemoved.WithLabelValues(fpvc, reason).Inc()
	}
	return ctrl.Result{}, nil
}

// bound says whether the cache holds the binding of claim pvc (nil: gone),
// which a claim reserved ahead of its pod gets once a pod carries it, or
// once its replica is gone.
func (r *HolderReconciler) bound(ctx context.Context, pvc *corev1.PersistentVolumeClaim) (bool, error) {
	if pvc == nil || pvc.Labels[v1alpha1.BindingNameLabelKey] == "" {
		return false, nil
	}
	key := client.ObjectKey{Namespace: pvc.Namespace, Name: pvc.Labels[v1alpha1.BindingNameLabelKey]}
	switch err := r.Get(ctx, key, &v1alpha1.FluentPVCBinding{}); {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading binding %s: %w", key, err)
	}
	return true, nil
}

// claimPod is the pod that warm PVC pvc was handed to: one carrying its
// binding label and mounting it, not holder h. The cache holds only pods
// with the opt-in label, and a pod whose label was removed still uses the
// claim and still sends the holder away: when the cache has none, the
// pods with the binding label are listed live, and then the pod the claim
// records (its binding saw it) is read live. nil when there is none yet,
// or pvc is nil or still warm.
func (r *HolderReconciler) claimPod(ctx context.Context, h *corev1.Pod, pvc *corev1.PersistentVolumeClaim) (*corev1.Pod, error) {
	if pvc == nil || pvc.Labels[v1alpha1.BindingNameLabelKey] == "" {
		return nil, nil
	}
	binding := pvc.Labels[v1alpha1.BindingNameLabelKey]
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(h.Namespace), client.MatchingFields{podBindingIndex: binding}); err != nil {
		return nil, fmt.Errorf("listing the pods of claim %s: %w", pvc.Name, err)
	}
	found := preferOnNode(nil, pods.Items, h, pvc.Name)
	if found == nil || found.Spec.NodeName == "" {
		// The claim's pod may have lost its opt-in label before this cache
		// saw it on a node (it keeps its binding label), or this cache may
		// lag behind its binding (a watch cut and not yet listed again).
		var live corev1.PodList
		if err := r.apiReader.List(ctx, &live, client.InNamespace(h.Namespace), client.MatchingLabels{v1alpha1.BindingNameLabelKey: binding}); err != nil {
			return nil, fmt.Errorf("listing the pods of claim %s: %w", pvc.Name, err)
		}
		found = preferOnNode(found, live.Items, h, pvc.Name)
	}
	if used, _ := claim.PodOf(pvc); found == nil && used.UID != "" {
		p := &corev1.Pod{}
		switch err := r.apiReader.Get(ctx, client.ObjectKey{Namespace: h.Namespace, Name: used.Name}, p); {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, fmt.Errorf("reading pod %s, which claim %s records: %w", used.Name, pvc.Name, err)
		case p.UID == used.UID && claimantPod(p, pvc.Name):
			found = p
		}
	}
	return found, nil
}

// checkedOutLive is warm PVC pvc as the cache has it, or, when a cached
// pod carries its name as binding label (the webhook hands a pod the PVC
// and that label at once), as read live: this cache has then missed the
// checkout (a PVC watch cut and not yet back), which would keep the holder
// beside the started pod for as long.
func (r *HolderReconciler) checkedOutLive(ctx context.Context, pvc *corev1.PersistentVolumeClaim) (*corev1.PersistentVolumeClaim, error) {
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(pvc.Namespace), client.MatchingFields{podBindingIndex: pvc.Name}); err != nil {
		return nil, fmt.Errorf("listing the pods of claim %s: %w", pvc.Name, err)
	}
	if len(pods.Items) == 0 {
		return pvc, nil
	}
	live := &corev1.PersistentVolumeClaim{}
	switch err := r.apiReader.Get(ctx, client.ObjectKeyFromObject(pvc), live); {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading PVC %s: %w", pvc.Name, err)
	}
	return live, nil
}

// preferOnNode is the pod among found and pods that uses claim (not holder
// h, nor any holder), one on a node before one not; found when none is
// better.
func preferOnNode(found *corev1.Pod, pods []corev1.Pod, h *corev1.Pod, claim string) *corev1.Pod {
	for i := range pods {
		p := &pods[i]
		if p.Name == h.Name || objects.IsHolder(p) || !claimantPod(p, claim) {
			continue
		}
		if found == nil || (found.Spec.NodeName == "" && p.Spec.NodeName != "") {
			found = p
		}
	}
	return found
}

// SetupWithManager registers the reconciler: holder pods, the pods their
// PVCs are handed to (by their binding label, which names the PVC of a
// hit), their PVCs once handed out or being deleted, and their claims'
// bindings.
func (r *HolderReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("holder").
		For(&corev1.Pod{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetLabels()[v1alpha1.ComponentLabelKey] == v1alpha1.ComponentHolder
		}))).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.holderOfPod)).
		Watches(&corev1.PersistentVolumeClaim{}, handler.EnqueueRequestsFromMapFunc(r.holderOfClaim)).
		Watches(&v1alpha1.FluentPVCBinding{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return r.cachedHolder(ctx, o.GetName(), o.GetNamespace())
		}), builder.WithPredicates(predicate.Funcs{
			// Only a binding's birth changes a holder's fate.
			UpdateFunc: func(event.UpdateEvent) bool { return false },
			DeleteFunc: func(event.DeleteEvent) bool { return false },
		})).
		Complete(r)
}

// holderOfPod is the holder of the claim that pod o was handed (its
// binding label), unless o is a holder or another pod of the operator's.
func (r *HolderReconciler) holderOfPod(ctx context.Context, o client.Object) []reconcile.Request {
	if b := o.GetLabels()[v1alpha1.BindingNameLabelKey]; b != "" && o.GetLabels()[v1alpha1.ComponentLabelKey] == "" {
		return r.cachedHolder(ctx, b, o.GetNamespace())
	}
	return nil
}

// holderOfClaim is the holder of PVC o once it is handed out on a hit, or
// being deleted while warm: its holder keeps it from going (a PVC in use
// by a pod is deleted once the pod is gone, and the garbage collector
// deletes the holder only once the PVC is gone).
func (r *HolderReconciler) holderOfClaim(ctx context.Context, o client.Object) []reconcile.Request {
	role := o.GetLabels()[v1alpha1.ClaimRoleLabelKey]
	handedOut := role == v1alpha1.ClaimRoleClaimed && o.GetAnnotations()[v1alpha1.CheckoutAnnotationKey] == v1alpha1.CheckoutHit
	if handedOut || (!o.GetDeletionTimestamp().IsZero() && role == v1alpha1.ClaimRoleWarm) {
		return r.cachedHolder(ctx, o.GetName(), o.GetNamespace())
	}
	return nil
}

// cachedHolder is the holder of claim in namespace, unless the cache has
// none. Most claims have none (no holder is staged where volumes need no
// attachment), and their pods' and claims' events need no reconcile; a
// holder the cache gets later is reconciled by its own event.
func (r *HolderReconciler) cachedHolder(ctx context.Context, claim, namespace string) []reconcile.Request {
	key := types.NamespacedName{Namespace: namespace, Name: objects.HolderName(claim)}
	if err := r.Get(ctx, key, &corev1.Pod{}, client.UnsafeDisableDeepCopy); apierrors.IsNotFound(err) {
		return nil
	}
	return []reconcile.Request{{NamespacedName: key}}
}
