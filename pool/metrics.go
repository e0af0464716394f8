package pool

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Why warm PVCs are replaced, the "reason" label of Replaced.
const (
	// ReplacedUnreachable: no node accepts the volume any more.
	ReplacedUnreachable = "unreachable"
	// ReplacedDemand: it served no node where pods run while one waited.
	ReplacedDemand = "demand"
	// ReplacedStranded: its volume stays attached to a node that is gone.
	ReplacedStranded = "stranded"
)

// Checkout results, the "result" label of CheckoutsTotal.
const (
	ResultHit  = "hit"
	ResultMiss = "miss"
)

// HitUnstaged is the "served" label of StagedHits for a hit on a warm PVC
// without a holder; HolderServed and HolderMoved are the others.
const HitUnstaged = "unstaged"

// HolderUnstaged is the "reason" label of HoldersRemoved for a holder the
// pool removes: its node can no longer take it, or staging is off.
const HolderUnstaged = "unstaged"

var (
	// CheckoutsTotal counts checkouts by FluentPVC and result.
	CheckoutsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fluentpvc_pool_checkouts_total",
		Help: "Claims handed to pods, by FluentPVC and result: hit (from the warm pool) or miss (created at admission).",
	}, []string{"fluentpvc", "result"})

	// Reserved is how many claims this replica holds reserved ahead of
	// their pods, by FluentPVC (checkout.Stock).
	Reserved = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fluentpvc_pool_reserved_claims",
		Help: "Claims this webhook replica holds reserved ahead of their pods (--reserve-ahead), which it hands out without an API write, by FluentPVC.",
	}, []string{"fluentpvc"})

	// CheckoutDuration is how long taking a claim took, by result.
	CheckoutDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "fluentpvc_pool_checkout_duration_seconds",
		Help:    "Time the webhook took to take a warm PVC, or to create a claim on a miss.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
	}, []string{"result"})

	// Warm is the number of warm, Bound PVCs by FluentPVC and namespace.
	Warm = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fluentpvc_pool_warm",
		Help: "Warm, Bound PVCs ready to be handed out, by FluentPVC and namespace.",
	}, []string{"fluentpvc", "namespace"})

	// Target is the number of warm PVCs the pool keeps, by FluentPVC and
	// namespace.
	Target = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fluentpvc_pool_target",
		Help: "Warm PVCs the pool keeps, by FluentPVC and namespace: spec.pool.size, or 0 while the namespace terminates.",
	}, []string{"fluentpvc", "namespace"})

	// Replaced counts warm PVCs deleted to be made again elsewhere.
	Replaced = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fluentpvc_pool_replaced_total",
		Help: "Warm PVCs replaced by one made elsewhere, by FluentPVC and reason: unreachable (no node accepts the volume; deleted at once), stranded (the volume stays attached to a node that is gone; deleted at once) or demand (moved to a node where pods run; deleted once the pool provisions nothing more).",
	}, []string{"fluentpvc", "reason"})

	// Staged is the number of warm PVCs staged by a running holder, by
	// FluentPVC and node.
	Staged = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fluentpvc_pool_staged",
		Help: "Warm PVCs kept attached and staged on a node by a running holder pod, by FluentPVC and node.",
	}, []string{"fluentpvc", "node"})

	// StagedHits counts hits by how the pod found its volume.
	StagedHits = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fluentpvc_pool_staged_hits_total",
		Help: "Hits by how the volume met the pod: served (staged on the node the pod went to), moved (staged on another node: detached, then attached on demand) or unstaged (attached on demand).",
	}, []string{"fluentpvc", "served"})

	// HoldersRemoved counts holder pods removed, by why.
	HoldersRemoved = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fluentpvc_pool_holders_removed_total",
		Help: "Holder pods removed, by FluentPVC and reason: served, moved (their PVC's pod is on a node), abandoned (no pod came in time), orphaned (their PVC is gone), evicted (preempted, evicted or failed), unstaged (their node can no longer take them, or staging is off).",
	}, []string{"fluentpvc", "reason"})

	// TimeToWarm is the time from a pool PVC's creation to its being Bound.
	TimeToWarm = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "fluentpvc_pool_time_to_warm_seconds",
		Help:    "Time from a pool PVC's creation to its being Bound and ready.",
		Buckets: prometheus.ExponentialBuckets(0.25, 2, 12),
	}, []string{"fluentpvc"})
)

func init() {
	metrics.Registry.MustRegister(CheckoutsTotal, CheckoutDuration, Warm, Target, Replaced, TimeToWarm, Staged, StagedHits, HoldersRemoved, Reserved)
}

// InitMetrics makes FluentPVC name's series of the pool's counters and
// histogram, at zero, for every value of their other label: a hit ratio
// or an alert over them has data from the FluentPVC's creation on.
func InitMetrics(name string) {
	for _, r := range []string{ResultHit, ResultMiss} {
		CheckoutsTotal.WithLabelValues(name, r)
	}
	for _, r := range []string{ReplacedUnreachable, ReplacedStranded, ReplacedDemand} {
		Replaced.WithLabelValues(name, r)
	}
	for _, s := range []string{HolderServed, HolderMoved, HitUnstaged} {
		StagedHits.WithLabelValues(name, s)
	}
	for _, r := range []string{HolderServed, HolderMoved, HolderAbandoned, HolderOrphaned, HolderEvicted, HolderUnstaged} {
		HoldersRemoved.WithLabelValues(name, r)
	}
	TimeToWarm.WithLabelValues(name)
}

// ForgetMetrics removes FluentPVC name's series of the pool's metrics,
// once it is gone.
func ForgetMetrics(name string) {
	match := prometheus.Labels{"fluentpvc": name}
	for _, m := range []interface {
		DeletePartialMatch(prometheus.Labels) int
	}{CheckoutsTotal, Warm, Target, Replaced, Staged, StagedHits, HoldersRemoved, TimeToWarm} {
		m.DeletePartialMatch(match)
	}
}
