// Package hostpath is a test-only dynamic provisioner for kwok clusters:
// it gives every claim of a StorageClass whose provisioner is
// ProvisionerName a hostPath PV pinned to a zone, after a delay that models
// a cloud disk, and deletes the PVs its claims release. The class parameter
// topologyKey (TopologyKeyParameter) keys the PVs by another node label: a
// CSI driver's zone key such as topology.gke.io/zone, or
// kubernetes.io/hostname for node-local volumes.
//
// It follows the hand-off of the PV controller and the scheduler to an
// external provisioner: the PV controller annotates a claim with
// volume.kubernetes.io/storage-provisioner; for WaitForFirstConsumer the
// scheduler adds volume.kubernetes.io/selected-node; the provisioner then
// creates a PV pre-bound to the claim, which the PV controller binds.
package hostpath

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Options configure the provisioner.
type Options struct {
	// Delay is how long each volume takes to provision, counted from when its
	// claim is ready for it. Volumes wait concurrently, not one after another.
	Delay time.Duration
	// Clock defaults to the real clock.
	Clock clock.Clock
}

// Setup adds the claim and volume controllers to mgr.
func Setup(mgr ctrl.Manager, opts Options) error {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	claims := &ClaimReconciler{Client: mgr.GetClient(), Clock: opts.Clock, Delay: opts.Delay, pending: map[types.NamespacedName]pendingClaim{}}
	if err := ctrl.NewControllerManagedBy(mgr).
		Named("claim").
		For(&corev1.PersistentVolumeClaim{}).
		// A class created after its claims brings them back.
		Watches(&storagev1.StorageClass{}, handler.EnqueueRequestsFromMapFunc(claims.claimsOfClass),
			builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
				return o.(*storagev1.StorageClass).Provisioner == ProvisionerName
			}))).
		WithOptions(controller.Options{MaxConcurrentReconciles: 8}).
		Complete(claims); err != nil {
		return fmt.Errorf("setting up the claim controller: %w", err)
	}
	if err := ctrl.NewControllerManagedBy(mgr).
		Named("volume").
		For(&corev1.PersistentVolume{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetAnnotations()[ProvisionedByAnnotationKey] == ProvisionerName
		}))).
		WithOptions(controller.Options{MaxConcurrentReconciles: 8}).
		Complete(&VolumeReconciler{Client: mgr.GetClient()}); err != nil {
		return fmt.Errorf("setting up the volume controller: %w", err)
	}
	return nil
}

type pendingClaim struct {
	uid types.UID
	due time.Time
}

// ClaimReconciler provisions the volumes of claims.
type ClaimReconciler struct {
	Client client.Client
	Clock  clock.Clock
	Delay  time.Duration

	mu      sync.Mutex
	pending map[types.NamespacedName]pendingClaim
	next    int // round-robin position over zones for Immediate classes
}

// Reconcile provisions the claim's volume once its delay has passed. The
// delay is a requeue, not a sleep, so many claims wait at once.
func (r *ClaimReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	pvc := &corev1.PersistentVolumeClaim{}
	if err := r.Client.Get(ctx, req.NamespacedName, pvc); err != nil {
		r.forget(req.NamespacedName)
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	var class *storagev1.StorageClass
	if name := ptrValue(pvc.Spec.StorageClassName); name != "" {
		class = &storagev1.StorageClass{}
		if err := r.Client.Get(ctx, client.ObjectKey{Name: name}, class); apierrors.IsNotFound(err) {
			class = nil
		} else if err != nil {
			return reconcile.Result{}, fmt.Errorf("getting StorageClass %s: %w", name, err)
		}
	}
	if DecideClaim(pvc, class) != ClaimProvision {
		r.forget(req.NamespacedName)
		return reconcile.Result{}, nil
	}

	// Idempotency: the volume's name derives from the claim's UID.
	pvName := PVName(pvc)
	if err := r.Client.Get(ctx, client.ObjectKey{Name: pvName}, &corev1.PersistentVolume{}); err == nil {
		r.forget(req.NamespacedName)
		return reconcile.Result{}, nil
	} else if !apierrors.IsNotFound(err) {
		return reconcile.Result{}, fmt.Errorf("getting PV %s: %w", pvName, err)
	}
	if wait := r.wait(req.NamespacedName, pvc.UID); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}

	nodeZone := ""
	if isDelayed(class) {
		node := &corev1.Node{}
		nodeName := pvc.Annotations[SelectedNodeAnnotationKey]
		if err := r.Client.Get(ctx, client.ObjectKey{Name: nodeName}, node); err != nil {
			return reconcile.Result{}, fmt.Errorf("getting the selected node %s: %w", nodeName, err)
		}
		nodeZone = node.Labels[TopologyKey(class)]
	}
	nodes := &corev1.NodeList{}
	if err := r.Client.List(ctx, nodes); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing nodes: %w", err)
	}
	zones := make([]string, 0, len(nodes.Items))
	for _, n := range nodes.Items {
		zones = append(zones, n.Labels[TopologyKey(class)])
	}
	next := 0
	if !isDelayed(class) {
		next = r.takeNext()
	}
	zone, err := ChooseZone(class, nodeZone, zones, next)
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("choosing a zone for %s: %w", req.NamespacedName, err)
	}
	pv := ConstructPV(pvc, class, zone)
	if err := r.Client.Create(ctx, pv); err != nil && !apierrors.IsAlreadyExists(err) {
		return reconcile.Result{}, fmt.Errorf("creating PV %s: %w", pv.Name, err)
	}
	log.FromContext(ctx).Info("provisioned", "pv", pv.Name, "zone", zone, "capacity", pv.Spec.Capacity.Storage().String())
	r.forget(req.NamespacedName)
	return reconcile.Result{}, nil
}

// wait records when the claim first became ready and returns how long it
// still has to wait.
func (r *ClaimReconciler) wait(key types.NamespacedName, uid types.UID) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.Clock.Now()
	p, ok := r.pending[key]
	if !ok || p.uid != uid {
		p = pendingClaim{uid: uid, due: now.Add(r.Delay)}
		r.pending[key] = p
	}
	return p.due.Sub(now)
}

func (r *ClaimReconciler) forget(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.pending, key)
}

func (r *ClaimReconciler) takeNext() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.next
	r.next++
	return n
}

func (r *ClaimReconciler) claimsOfClass(ctx context.Context, o client.Object) []reconcile.Request {
	claims := &corev1.PersistentVolumeClaimList{}
	if err := r.Client.List(ctx, claims); err != nil {
		log.FromContext(ctx).Error(err, "listing claims for a StorageClass", "class", o.GetName())
		return nil
	}
	var reqs []reconcile.Request
	for _, c := range claims.Items {
		if ptrValue(c.Spec.StorageClassName) == o.GetName() && c.Spec.VolumeName == "" {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&c)})
		}
	}
	return reqs
}

// VolumeReconciler deletes the released volumes whose reclaim policy is
// Delete, as the PV controller leaves that to the external provisioner.
type VolumeReconciler struct {
	Client client.Client
}

// Reconcile deletes the volume if ShouldDelete says so.
func (r *VolumeReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	pv := &corev1.PersistentVolume{}
	if err := r.Client.Get(ctx, req.NamespacedName, pv); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !ShouldDelete(pv) {
		return reconcile.Result{}, nil
	}
	if err := r.Client.Delete(ctx, pv, client.Preconditions{UID: &pv.UID}); client.IgnoreNotFound(err) != nil {
		return reconcile.Result{}, fmt.Errorf("deleting released PV %s: %w", pv.Name, err)
	}
	log.FromContext(ctx).Info("deleted released volume", "pv", pv.Name)
	return reconcile.Result{}, nil
}

func ptrValue(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
