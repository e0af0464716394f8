package controllers

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/pool"
)

// binderPatience is how long a binder Job may wait before its pod is read:
// the scheduler places a pod in milliseconds when it can, so a binder still
// unbound after this is worth a look, and a healthy pool costs no reads.
const binderPatience = 10 * time.Second

// unschedulableBinders says why the binders of f that have waited longer
// than binderPatience cannot be scheduled, quoting the scheduler, and when
// to look again while some wait. Binder pods are not in the cache (they
// carry no FluentPVC label, so that the pod webhook leaves them alone), so
// they are read live, only then, per namespace.
func (r *FluentPVCReconciler) unschedulableBinders(ctx context.Context, f *v1alpha1.FluentPVC, o poolObserved) ([]string, time.Duration, error) {
	now := r.clock.Now()
	var namespaces []string
	var requeueAfter time.Duration
	for _, j := range o.binders {
		if !j.DeletionTimestamp.IsZero() {
			continue
		}
		if left := j.CreationTimestamp.Add(binderPatience).Sub(now); left > 0 {
			if requeueAfter == 0 || left < requeueAfter {
				requeueAfter = left
			}
			continue
		}
		namespaces = append(namespaces, j.Namespace)
		requeueAfter = binderPatience
	}
	slices.Sort(namespaces)
	var warnings []string
	for _, ns := range slices.Compact(namespaces) {
		var pods corev1.PodList
		if err := r.apiReader.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels(pool.BinderPodLabels(f.Name))); err != nil {
			return nil, 0, fmt.Errorf("listing binder pods in %s: %w", ns, err)
		}
		warnings = append(warnings, pool.BinderUnschedulable(pods.Items)...)
	}
	return warnings, requeueAfter, nil
}
