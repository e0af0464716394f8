// Package controllers holds the reconcilers that carry each claim through its
// life: record the pod, delete it if its sidecar failed, drain the claim with
// a finalizer Job once the pod is gone, and delete the claim only after a
// successful drain.
package controllers

import (
	"context"
	"flag"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/pool"
)

// Options configure the controllers.
type Options struct {
	// OrphanGracePeriod is how long a claim waits for its pod before it is
	// drained, or reclaimed as an orphan, counted on the API server's clock
	// from its binding's creation.
	OrphanGracePeriod time.Duration
	// AllowShortOrphanGracePeriod accepts a grace period below the safe
	// minimum, for test clusters whose admissions are known to be quick.
	AllowShortOrphanGracePeriod bool
	// Clock tells the API server's time (package apiclock); the local
	// clock when nil. Not a flag.
	Clock clock.PassiveClock
	// DrainBackoffBase and DrainBackoffMax bound the exponential backoff
	// between failed finalizer Jobs.
	DrainBackoffBase time.Duration
	DrainBackoffMax  time.Duration
	// FluentPVCMissingTimeout is how long a binding that must drain waits
	// for its deleted FluentPVC to come back before it lets go of its claim
	// undrained. The PVC itself, with its data, is kept.
	FluentPVCMissingTimeout time.Duration
	// BinderImage is the image of the pool's binder Jobs.
	BinderImage string
	// PoolBindMode is how warm PVCs of WaitForFirstConsumer classes get
	// their volumes: PoolBindSelectNode or PoolBindBinderJob.
	PoolBindMode string
	// PoolIdleNamespaceTTL is how long a learned pool namespace keeps its
	// warm PVCs without admissions.
	PoolIdleNamespaceTTL time.Duration
	// StagePerNode is how many warm PVCs, of all pools, a node keeps
	// staged at most.
	StagePerNode int
	// HolderPriorityClass is the PriorityClass of holder pods ("" none).
	HolderPriorityClass string
	// StrandedAttachmentTimeout is how long the volume of a warm PVC may
	// stay attached to a deleted node before the pool replaces the PVC;
	// 0 means pool.StrandedAfter.
	StrandedAttachmentTimeout time.Duration
}

// BindFlags registers the options as command-line flags with their
// defaults, and sets the options that are not flags to theirs.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	o.FluentPVCMissingTimeout = fluentPVCMissingTimeout
	o.PoolIdleNamespaceTTL = poolIdleNamespaceTTL
	o.DrainBackoffMax = drainBackoffMax
	fs.DurationVar(&o.OrphanGracePeriod, "orphan-grace-period", 2*time.Minute, "How long a claim waits for its pod to appear, counted on the API server's clock from its binding's creation, before it is drained, or reclaimed undrained when no pod was ever created with it. At least "+claim.AdmissionBound.String()+": the API server's --request-timeout (1m unless raised) plus 30s; a cluster that raises that timeout must raise this with it.")
	fs.BoolVar(&o.AllowShortOrphanGracePeriod, "allow-short-orphan-grace-period", false, "Accept an --orphan-grace-period below the safe minimum. For test clusters only: a pod admitted more slowly than the grace period is never recorded, and its claim may be handed to another pod.")
	fs.DurationVar(&o.DrainBackoffBase, "drain-backoff-base", 10*time.Second, "Wait before retrying a failed finalizer Job; doubles with each failure, up to "+drainBackoffMax.String()+" (or this, if longer).")
	fs.StringVar(&o.BinderImage, "binder-image", "registry.k8s.io/pause:3.10", "Image of the short-lived pods that bind warm PVCs of WaitForFirstConsumer StorageClasses.")
	fs.StringVar(&o.PoolBindMode, "pool-bind-mode", PoolBindSelectNode, "How warm PVCs of WaitForFirstConsumer StorageClasses get their volumes: \""+PoolBindSelectNode+"\" names a Ready, untainted node (spread over zones) on the PVC so that the provisioner starts at once; \""+PoolBindBinderJob+"\" runs a binder Job per PVC and lets the scheduler choose, slower but aware of everything the scheduler checks (e.g. CSI storage capacity).")
	fs.IntVar(&o.StagePerNode, "stage-per-node", pool.DefaultStagePerNode, "How many warm PVCs, of all FluentPVCs, a node keeps attached and staged at most, each with a holder pod. Holders also never take more than half of the attach slots that other volumes leave free on a node.")
	fs.StringVar(&o.HolderPriorityClass, "holder-priority-class", DefaultHolderPriorityClass, "PriorityClass of the holder pods that keep warm PVCs staged: a low value that never preempts, so that real pods preempt holders. The operator creates it at start-up if it does not exist; \"\" gives holders no class.")
	fs.DurationVar(&o.StrandedAttachmentTimeout, "stranded-attachment-timeout", pool.StrandedAfter, "How long the volume of a warm PVC may stay attached to a node that is deleted before the pool deletes that warm PVC and makes a new one. Such a volume can be attached nowhere else until it is detached, which can take minutes or, when the CSI attacher no longer finds the node, never happen. 0 means the default.")
}

// Values of Options.PoolBindMode.
const (
	PoolBindSelectNode = "select-node"
	PoolBindBinderJob  = "binder-job"
)

// Defaults of the options that are not flags.
const (
	// fluentPVCMissingTimeout is how long a claim that must be drained
	// waits for its deleted FluentPVC to be recreated before it is let go
	// of undrained, and kept.
	fluentPVCMissingTimeout = time.Hour
	// poolIdleNamespaceTTL is how long a namespace learned from admissions
	// keeps its warm pool without a new admission.
	poolIdleNamespaceTTL = time.Hour
	// drainBackoffMax is the longest wait between finalizer Job attempts
	// (or --drain-backoff-base, if that is longer).
	drainBackoffMax = 10 * time.Minute
)

// Validate reports options that cannot work, or are unsafe.
func (o *Options) Validate() error {
	if o.OrphanGracePeriod < claim.AdmissionBound && !o.AllowShortOrphanGracePeriod {
		return fmt.Errorf("--orphan-grace-period=%s is too short: a pod's admission may last up to the API server's request timeout "+
			"(1m by default) after its claim was handed out, and a claim reclaimed before its pod is created "+
			"could go to another pod while that pod writes to it. Set it to at least %s (the timeout plus 30s)",
			o.OrphanGracePeriod, claim.AdmissionBound)
	}
	if o.StrandedAttachmentTimeout < 0 {
		return fmt.Errorf("--stranded-attachment-timeout=%s: must not be negative", o.StrandedAttachmentTimeout)
	}
	if o.StagePerNode < 0 {
		return fmt.Errorf("--stage-per-node=%d: must be 0 (no staging) or more", o.StagePerNode)
	}
	if o.PoolBindMode != PoolBindSelectNode && o.PoolBindMode != PoolBindBinderJob {
		return fmt.Errorf("--pool-bind-mode: %q is neither %q nor %q", o.PoolBindMode, PoolBindSelectNode, PoolBindBinderJob)
	}
	return nil
}

// CacheOptions restricts the manager's caches to the operator's own objects:
// pods with the opt-in label, and PVCs and Jobs with the operator's labels.
// The cache's memory therefore grows with the operator's pods, not with the
// cluster's. managedFields are dropped from every cached object. Nodes, which
// the pool reads to pick where warm volumes go, are cut to what that needs.
func CacheOptions() cache.Options {
	return cache.Options{
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}:                   {Label: exists(v1alpha1.FluentPVCNameLabelKey)},
			&corev1.PersistentVolumeClaim{}: {Label: exists(v1alpha1.FluentPVCNameLabelKey)},
			&batchv1.Job{}:                  {Label: exists(v1alpha1.ComponentLabelKey)},
			&corev1.Node{}:                  {Transform: slimNode},
			&storagev1.VolumeAttachment{}:   {Transform: slimAttachment},
		},
	}
}

// slimNode keeps of a node its name, labels, schedulability, taints and
// Ready condition: a few hundred bytes instead of kilobytes of images and
// addresses.
func slimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	slim := &corev1.Node{
		TypeMeta: n.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion, Labels: n.Labels,
			DeletionTimestamp: n.DeletionTimestamp,
		},
		Spec: corev1.NodeSpec{Unschedulable: n.Spec.Unschedulable, Taints: n.Spec.Taints},
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			slim.Status.Conditions = []corev1.NodeCondition{{Type: c.Type, Status: c.Status}}
		}
	}
	return slim, nil
}

// slimAttachment keeps of a VolumeAttachment what the pool counts: its
// attacher, node and volume.
func slimAttachment(obj any) (any, error) {
	va, ok := obj.(*storagev1.VolumeAttachment)
	if !ok {
		return obj, nil
	}
	return &storagev1.VolumeAttachment{
		TypeMeta:   va.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Name: va.Name, UID: va.UID, ResourceVersion: va.ResourceVersion},
		Spec: storagev1.VolumeAttachmentSpec{Attacher: va.Spec.Attacher, NodeName: va.Spec.NodeName,
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: va.Spec.Source.PersistentVolumeName}},
	}, nil
}

func exists(key string) labels.Selector {
	r, err := labels.NewRequirement(key, selection.Exists, nil)
	if err != nil {
		panic(err) // key is a constant, so this is a programming error
	}
	return labels.NewSelector().Add(*r)
}

// Field indexes of the manager's cache.
const (
	podBindingIndex       = "podBinding"       // a pod's binding label
	jobBindingIndex       = "jobBinding"       // a Job's binding label
	bindingFluentPVCIndex = "bindingFluentPVC" // a binding's FluentPVC
)

// Setup registers the indexes and every controller with mgr.
func Setup(mgr ctrl.Manager, opts Options) error {
	ctx := context.Background()
	idx := mgr.GetFieldIndexer()
	byBindingLabel := func(obj client.Object) []string {
		if v := obj.GetLabels()[v1alpha1.BindingNameLabelKey]; v != "" {
			return []string{v}
		}
		return nil
	}
	if err := idx.IndexField(ctx, &corev1.Pod{}, podBindingIndex, byBindingLabel); err != nil {
		return fmt.Errorf("indexing pods: %w", err)
	}
	if err := idx.IndexField(ctx, &batchv1.Job{}, jobBindingIndex, byBindingLabel); err != nil {
		return fmt.Errorf("indexing Jobs: %w", err)
	}
	if err := idx.IndexField(ctx, &v1alpha1.FluentPVCBinding{}, bindingFluentPVCIndex, func(obj client.Object) []string {
		return []string{obj.(*v1alpha1.FluentPVCBinding).Spec.FluentPVC.Name}
	}); err != nil {
		return fmt.Errorf("indexing bindings: %w", err)
	}

	var clk clock.PassiveClock = clock.RealClock{}
	if opts.Clock != nil {
		clk = opts.Clock
	}
	recorder := mgr.GetEventRecorder("fluent-pvc-operator")
	c, live := mgr.GetClient(), mgr.GetAPIReader()
	watcher, err := client.NewWithWatch(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
	if err != nil {
		return fmt.Errorf("creating a client that watches: %w", err)
	}
	bindings := NewBindingReconciler(c, live, recorder, clk, opts)
	bindings.history = podHistory{watcher: watcher}
	if err := bindings.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the binding controller: %w", err)
	}
	if err := NewSidecarReconciler(c, recorder).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the sidecar controller: %w", err)
	}
	fluentPVCs := NewFluentPVCReconciler(c, live, recorder, clk, opts)
	if err := fluentPVCs.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the FluentPVC controller: %w", err)
	}
	if err := NewHolderReconciler(c, mgr.GetAPIReader(), clk).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the holder controller: %w", err)
	}
	return nil
}
