package controllers

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
)

// statusCountsInterval is the shortest time between two status writes of a
// FluentPVC that change nothing but counts and admission times: pods
// coming and going one at a time would otherwise cost a status write
// each.
const statusCountsInterval = 5 * time.Second

// countsOnlyWait is how long to hold back a status write that changes only
// counts (bindings, warm, provisioning and staged PVCs) and the
// namespaces' last admission times; 0 to write now.
func (r *FluentPVCReconciler) countsOnlyWait(f *v1alpha1.FluentPVC, next v1alpha1.FluentPVCStatus, now time.Time) time.Duration {
	last, ok := r.lastStatusWrite.Load(f.Name)
	if !ok || !equality.Semantic.DeepEqual(withoutCounts(f.Status), withoutCounts(next)) {
		return 0
	}
	return max(last.(time.Time).Add(statusCountsInterval).Sub(now), 0)
}

func withoutCounts(s v1alpha1.FluentPVCStatus) v1alpha1.FluentPVCStatus {
	s = *s.DeepCopy()
	s.Bindings, s.Active, s.Warm = v1alpha1.BindingCounts{}, 0, 0
	for i := range s.Pool {
		s.Pool[i].Warm, s.Pool[i].Reserved, s.Pool[i].Provisioning, s.Pool[i].Staged, s.Pool[i].LastAdmissionTime = 0, 0, 0, 0, nil
	}
	for i := range s.Conditions {
		c := &s.Conditions[i]
		c.Message = "" // carries counts too
		if c.Type == v1alpha1.FluentPVCConditionPoolReady && (c.Reason == v1alpha1.PoolReadyReasonFull || c.Reason == v1alpha1.PoolReadyReasonFilling) {
			// A pool full, then one short while a checkout's PVC is
			// replaced: a count, too.
			c.Status, c.Reason, c.LastTransitionTime = "", "", metav1.Time{}
		}
	}
	return s
}

// constructFluentPVCStatus counts bindings by phase, reports the pool, and
// sets Ready and PoolReady.
func constructFluentPVCStatus(f *v1alpha1.FluentPVC, bindings []v1alpha1.FluentPVCBinding, pr poolResult, now time.Time) v1alpha1.FluentPVCStatus {
	poolNS := pr.namespaces
	s := *f.Status.DeepCopy()
	s.ObservedGeneration = f.Generation
	s.Pool = poolNS
	s.Warm = 0
	full := true
	for _, ns := range poolNS {
		s.Warm += ns.Warm
		full = full && ns.Warm >= f.Spec.Pool.Size
	}
	poolReady := metav1.Condition{Type: v1alpha1.FluentPVCConditionPoolReady, ObservedGeneration: f.Generation, LastTransitionTime: metav1.NewTime(now)}
	switch {
	case f.Spec.Pool.Size == 0:
		poolReady.Status, poolReady.Reason, poolReady.Message = metav1.ConditionFalse, v1alpha1.PoolReadyReasonDisabled, "spec.pool.size is 0: every claim is created at admission"
	case len(pr.missing) > 0:
		poolReady.Status, poolReady.Reason, poolReady.Message = metav1.ConditionFalse, v1alpha1.PoolReadyReasonNamespaceNotFound,
			fmt.Sprintf("pool namespaces %s do not exist: their warm PVCs are created once they do", strings.Join(pr.missing, ", "))
	case len(poolNS) == 0:
		poolReady.Status, poolReady.Reason, poolReady.Message = metav1.ConditionFalse, v1alpha1.PoolReadyReasonNoNamespaces, "no pool namespace is listed in spec.pool.namespaces or learned from admissions yet"
	case full:
		poolReady.Status, poolReady.Reason, poolReady.Message = metav1.ConditionTrue, v1alpha1.PoolReadyReasonFull, fmt.Sprintf("%d warm PVCs in each of %d namespaces", f.Spec.Pool.Size, len(poolNS))
	default:
		poolReady.Status, poolReady.Reason, poolReady.Message = metav1.ConditionFalse, v1alpha1.PoolReadyReasonFilling, fmt.Sprintf("%d of %d warm PVCs are ready", s.Warm, int(f.Spec.Pool.Size)*len(poolNS))
	}
	meta.SetStatusCondition(&s.Conditions, poolReady)
	if f.Spec.Pool.MaxNamespaces == 0 {
		meta.RemoveStatusCondition(&s.Conditions, v1alpha1.FluentPVCConditionNamespaceLimitReached)
	} else {
		limit := metav1.Condition{Type: v1alpha1.FluentPVCConditionNamespaceLimitReached, ObservedGeneration: f.Generation, LastTransitionTime: metav1.NewTime(now),
			Status: metav1.ConditionFalse, Reason: v1alpha1.NamespaceLimitReasonBelow,
			Message: fmt.Sprintf("every learned namespace has a pool (at most %d)", f.Spec.Pool.MaxNamespaces)}
		if len(pr.capped) > 0 {
			shown := pr.capped[:min(len(pr.capped), 10)]
			limit.Status, limit.Reason = metav1.ConditionTrue, v1alpha1.NamespaceLimitReasonReached
			limit.Message = fmt.Sprintf("spec.pool.maxNamespaces (%d) leaves %d learned namespaces without a pool: %s", f.Spec.Pool.MaxNamespaces, len(pr.capped), strings.Join(shown, ", "))
		}
		meta.SetStatusCondition(&s.Conditions, limit)
	}
	s.Bindings = v1alpha1.BindingCounts{}
	for _, b := range bindings {
		switch b.Status.Phase {
		case "":
			// A binding made for a pod it saw records it and writes no
			// status while the pod uses the claim (statusNews).
			if b.Spec.Pod.UID != "" {
				s.Bindings.InUse++
			} else {
				s.Bindings.Pending++
			}
		case v1alpha1.BindingPhasePending:
			s.Bindings.Pending++
		case v1alpha1.BindingPhaseInUse:
			s.Bindings.InUse++
		case v1alpha1.BindingPhaseDraining, v1alpha1.BindingPhaseDrained:
			s.Bindings.Draining++
		case v1alpha1.BindingPhaseOrphaned, v1alpha1.BindingPhaseAbandoned:
			s.Bindings.Orphaned++
		}
	}
	s.Active = s.Bindings.InUse + s.Bindings.Draining
	ready := metav1.Condition{Type: v1alpha1.FluentPVCConditionReady, Status: metav1.ConditionTrue,
		Reason: v1alpha1.FluentPVCReadyReasonAdmitting, Message: "pods that opt in get a claim", ObservedGeneration: f.Generation,
		LastTransitionTime: metav1.NewTime(now)}
	if !f.DeletionTimestamp.IsZero() {
		ready.Status, ready.Reason = metav1.ConditionFalse, v1alpha1.FluentPVCReadyReasonDeleting
		ready.Message = fmt.Sprintf("being deleted: new pods are denied; waiting for %d bindings to finish draining", len(bindings))
	}
	meta.SetStatusCondition(&s.Conditions, ready)
	return s
}

// oldestUndrained is since when the longest-waiting claim among bindings
// has waited for its drain. A binding Draining (its pod gone or finished,
// no drain succeeded yet) waits since its pod was seen gone (its PodReady
// condition turned False), or since its drain started if that is earlier,
// or else since its creation. false when none is Draining.
func oldestUndrained(bindings []v1alpha1.FluentPVCBinding) (time.Time, bool) {
	var oldest time.Time
	found := false
	for i := range bindings {
		b := &bindings[i]
		if b.Status.Phase != v1alpha1.BindingPhaseDraining {
			continue
		}
		since := b.CreationTimestamp.Time
		if c := meta.FindStatusCondition(b.Status.Conditions, v1alpha1.BindingConditionPodReady); c != nil && c.Status == metav1.ConditionFalse {
			since = c.LastTransitionTime.Time
		}
		if b.Status.DrainStartTime != nil && b.Status.DrainStartTime.Before(&metav1.Time{Time: since}) {
			since = b.Status.DrainStartTime.Time
		}
		if !found || since.Before(oldest) {
			oldest, found = since, true
		}
	}
	return oldest, found
}
