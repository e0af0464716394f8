package controllers

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/pool"
)

// unschedulableBinders says why the binders of f that have waited longer
// than unwatchedRecheck for their warm PVC to be Bound cannot be scheduled,
// quoting the scheduler, and when to look again while some wait. Binder
// pods are not in the cache (they carry no FluentPVC label, so that the pod
// webhook leaves them alone), so they are read live, only then, in the
// namespaces of those binders.
func (r *PoolReconciler) unschedulableBinders(ctx context.Context, f *v1alpha1.FluentPVC, o poolObserved) ([]string, time.Duration, error) {
	bound := sets.New[string]()
	for _, c := range o.warm {
		if c.Status.Phase == corev1.ClaimBound {
			bound.Insert(c.Namespace + "/" + c.Name)
		}
	}
	now := r.clock.Now()
	waiting := sets.New[string]() // "namespace/warm PVC"
	var namespaces []string
	var requeueAfter time.Duration
	for _, j := range o.binders {
		claim := j.Namespace + "/" + j.Labels[v1alpha1.WarmClaimLabelKey]
		if !j.DeletionTimestamp.IsZero() || bound.Has(claim) {
			continue // done: deleted in this reconcile or the last
		}
		// Look again when a young binder comes of age, or every
		// unwatchedRecheck while an old one waits.
		recheck := j.CreationTimestamp.Add(unwatchedRecheck).Sub(now)
		if recheck <= 0 {
			recheck = unwatchedRecheck
			waiting.Insert(claim)
			namespaces = append(namespaces, j.Namespace)
		}
		if requeueAfter == 0 || recheck < requeueAfter {
			requeueAfter = recheck
		}
	}
	slices.Sort(namespaces)
	var warnings []string
	for _, ns := range slices.Compact(namespaces) {
		var pods corev1.PodList
		if err := r.apiReader.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels(pool.BinderPodLabels(f.Name))); err != nil {
			return nil, 0, fmt.Errorf("listing binder pods in %s: %w", ns, err)
		}
		pods.Items = slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool {
			return !waiting.Has(p.Namespace + "/" + p.Labels[v1alpha1.WarmClaimLabelKey])
		})
		warnings = append(warnings, pool.BinderUnschedulable(pods.Items)...)
	}
	return warnings, requeueAfter, nil
}
