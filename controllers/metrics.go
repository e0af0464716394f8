package controllers

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/pool"
)

var (
	drainsStarted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fluentpvc_drains_started_total",
		Help: "Finalizer Jobs started, by FluentPVC.",
	}, []string{"fluentpvc"})

	drainsSucceeded = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fluentpvc_drains_succeeded_total",
		Help: "Claims drained by a successful finalizer Job, by FluentPVC.",
	}, []string{"fluentpvc"})

	drainsFailed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fluentpvc_drains_failed_total",
		Help: "Finalizer Jobs that failed and will be retried, by FluentPVC.",
	}, []string{"fluentpvc"})

	drainJobsRejected = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fluentpvc_drain_job_rejections_total",
		Help: "Finalizer Jobs the API server refused to create (an invalid or forbidden template), by FluentPVC.",
	}, []string{"fluentpvc"})

	drainsBlocked = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fluentpvc_drains_blocked_total",
		Help: "Times a finalizer Job was found unable to make progress (its pod unschedulable or refused, or its claim being deleted), by FluentPVC.",
	}, []string{"fluentpvc"})

	bindingsRejected = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fluentpvc_binding_rejections_total",
		Help: "FluentPVCBindings the API server refused to create (a quota or a policy), by FluentPVC; each refusal is retried.",
	}, []string{"fluentpvc"})

	drainDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "fluentpvc_drain_duration_seconds",
		Help:    "Time from a claim's first finalizer Job to its successful drain, retries included.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 14),
	}, []string{"fluentpvc"})

	podsDeletedForSidecar = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fluentpvc_sidecar_failure_pod_deletions_total",
		Help: "Pods deleted because their injected sidecar terminated with a non-zero exit code.",
	}, []string{"fluentpvc"})

	orphansReclaimed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fluentpvc_orphan_claims_reclaimed_total",
		Help: "Claims reclaimed without draining because their pod never appeared.",
	}, []string{"fluentpvc"})

	claimsAbandoned = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fluentpvc_claims_abandoned_total",
		Help: "Claims let go of undrained: their namespace was deleted, or their FluentPVC stayed gone for an hour.",
	}, []string{"fluentpvc"})

	oldestUndrainedClaim = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fluentpvc_oldest_undrained_claim_timestamp_seconds",
		Help: "Since when (Unix time) the oldest claim of the FluentPVC whose pod is gone has waited for its drain; no series while none waits.",
	}, []string{"fluentpvc"})

	poolWarm = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fluentpvc_pool_warm",
		Help: "Warm, Bound PVCs ready to be handed out, by FluentPVC and namespace.",
	}, []string{"fluentpvc", "namespace"})

	poolTarget = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fluentpvc_pool_target",
		Help: "Warm PVCs the pool keeps, by FluentPVC and namespace: spec.pool.size, or 0 while the namespace terminates.",
	}, []string{"fluentpvc", "namespace"})

	poolReplaced = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fluentpvc_pool_replaced_total",
		Help: "Warm PVCs replaced by one made elsewhere, by FluentPVC and reason: unreachable (no node accepts the volume; deleted at once), stranded (the volume stays attached to a node that is gone; deleted at once) or demand (moved to a node where pods run; deleted once the pool provisions nothing more).",
	}, []string{"fluentpvc", "reason"})

	poolStaged = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fluentpvc_pool_staged",
		Help: "Warm PVCs kept attached and staged on a node by a running holder pod, by FluentPVC and node.",
	}, []string{"fluentpvc", "node"})

	holdersRemoved = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fluentpvc_pool_holders_removed_total",
		Help: "Holder pods removed, by FluentPVC and reason: served, moved (their PVC's pod is on a node), abandoned (no pod came in time), orphaned (their PVC is gone), evicted (preempted, evicted or failed), unstaged (their node can no longer take them, or staging is off).",
	}, []string{"fluentpvc", "reason"})

	timeToWarm = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "fluentpvc_pool_time_to_warm_seconds",
		Help:    "Time from a pool PVC's creation to its being Bound and ready.",
		Buckets: prometheus.ExponentialBuckets(0.25, 2, 12),
	}, []string{"fluentpvc"})
)

func init() {
	metrics.Registry.MustRegister(drainsStarted, drainsSucceeded, drainsFailed, drainJobsRejected, drainsBlocked, bindingsRejected, drainDuration,
		podsDeletedForSidecar, orphansReclaimed, claimsAbandoned, oldestUndrainedClaim,
		poolWarm, poolTarget, poolReplaced, poolStaged, holdersRemoved, timeToWarm)
}

// fluentPVCCounters are the counters above, each with the one label
// fluentpvc.
var fluentPVCCounters = []*prometheus.CounterVec{drainsStarted, drainsSucceeded, drainsFailed, drainJobsRejected, drainsBlocked,
	bindingsRejected, podsDeletedForSidecar, orphansReclaimed, claimsAbandoned}

// initMetrics makes FluentPVC name's series of the metrics above, at zero
// until something happens: a rate, a ratio or an alert over them then has
// data from the FluentPVC's creation on, not from its first event.
func initMetrics(name string) {
	for _, c := range fluentPVCCounters {
		c.WithLabelValues(name)
	}
	drainDuration.WithLabelValues(name)
	for _, r := range []string{pool.ReplacedUnreachable, pool.ReplacedStranded, pool.ReplacedDemand} {
		poolReplaced.WithLabelValues(name, r)
	}
	for _, r := range []string{pool.HolderServed, pool.HolderMoved, pool.HolderAbandoned, pool.HolderOrphaned, pool.HolderEvicted, pool.HolderUnstaged} {
		holdersRemoved.WithLabelValues(name, r)
	}
	timeToWarm.WithLabelValues(name)
}

// forgetMetrics removes FluentPVC name's series, once it is gone: the
// series stay as many as the FluentPVCs.
func forgetMetrics(name string) {
	for _, c := range fluentPVCCounters {
		c.DeleteLabelValues(name)
	}
	drainDuration.DeleteLabelValues(name)
	oldestUndrainedClaim.DeleteLabelValues(name)
	match := prometheus.Labels{"fluentpvc": name}
	for _, m := range []interface {
		DeletePartialMatch(prometheus.Labels) int
	}{poolWarm, poolTarget, poolReplaced, poolStaged, holdersRemoved, timeToWarm} {
		m.DeletePartialMatch(match)
	}
}

// setOldestUndrained sets FluentPVC name's oldestUndrainedClaim from its
// bindings, or removes its series when no claim waits for a drain.
func setOldestUndrained(name string, bindings []v1alpha1.FluentPVCBinding) {
	if since, ok := oldestUndrained(bindings); ok {
		oldestUndrainedClaim.WithLabelValues(name).Set(float64(since.UnixNano()) / 1e9)
		return
	}
	oldestUndrainedClaim.DeleteLabelValues(name)
}
