package webhook

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Admission outcomes, the "result" label of admissionsTotal.
const (
	resultMutated = "mutated" // a claim was handed to the pod
	resultSkipped = "skipped" // already injected, nothing to do
	resultDenied  = "denied"  // bad input; "reason" says which
	resultError   = "error"   // the API server failed us
)

// Denial reasons, the "reason" label of admissionsTotal.
const (
	reasonNone              = ""
	reasonFluentPVCNotFound = "FluentPVCNotFound"
	reasonFluentPVCDeleting = "FluentPVCDeleting"
	reasonConflict          = "Conflict"
	reasonUndecodable       = "Undecodable"
	reasonCopied            = "CopiedClaim"
	// reasonNativeSidecarUnsupported: a Native FluentPVC on a cluster
	// older than 1.29.
	reasonNativeSidecarUnsupported = "NativeSidecarUnsupported"
	// reasonNamespaceNotSelected: the FluentPVC's namespaceSelector leaves
	// the pod's namespace out.
	reasonNamespaceNotSelected = "NamespaceNotSelected"
	// reasonUseForbidden: the pod's creator may not "use" the FluentPVC.
	reasonUseForbidden = "UseForbidden"
)

// Checkout results, the "result" label of checkoutsTotal and
// checkoutDuration.
const (
	CheckoutHit  = "hit"
	CheckoutMiss = "miss"
)

// How a hit's warm PVC was found, the "served" label of stagedHits.
const (
	// HitStaged: a holder kept it attached and staged on a node.
	HitStaged = "staged"
	// HitUnstaged: it had no holder, and is attached on demand.
	HitUnstaged = "unstaged"
)

var (
	checkoutsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fluentpvc_pool_checkouts_total",
		Help: "Claims handed to pods, by FluentPVC and result: hit (from the warm pool) or miss (created at admission).",
	}, []string{"fluentpvc", "result"})

	checkoutDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "fluentpvc_pool_checkout_duration_seconds",
		Help:    "Time the webhook took to take a warm PVC, or to create a claim on a miss.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
	}, []string{"result"})

	stagedHits = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fluentpvc_pool_staged_hits_total",
		Help: "Hits by whether a holder pod kept their warm PVC staged on a node: staged or unstaged (attached on demand). Where the staged ones went is fluentpvc_pool_holders_removed_total's served (the pod's node) and moved (another node).",
	}, []string{"fluentpvc", "served"})

	admissionsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fluentpvc_webhook_admissions_total",
		Help: "Pod admissions handled by the fluent-pvc-operator webhook, by result and denial reason.",
	}, []string{"result", "reason"})

	admissionDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "fluentpvc_webhook_admission_duration_seconds",
		Help:    "Time the fluent-pvc-operator webhook took to handle a pod admission, by result.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
	}, []string{"result"})

	mountsRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fluentpvc_webhook_mounts_refused_total",
		Help: "Pods refused because they mount a PVC the operator holds for another pod (or a warm PVC), by FluentPVC.",
	}, []string{"fluentpvc"})
)

func init() {
	metrics.Registry.MustRegister(admissionsTotal, admissionDuration, mountsRefused, checkoutsTotal, checkoutDuration, stagedHits)
}

// countCheckout counts a checkout of FluentPVC name that took d: a hit
// (staged: its warm PVC had a holder) or a miss. The other label values of
// the FluentPVC's series are made at zero with it, so that a hit ratio has
// data from its first admission on.
func countCheckout(name string, hit, staged bool, d time.Duration) {
	result, served := CheckoutMiss, HitUnstaged
	if hit {
		result = CheckoutHit
	}
	if staged {
		served = HitStaged
	}
	for _, r := range []string{CheckoutHit, CheckoutMiss} {
		c := checkoutsTotal.WithLabelValues(name, r)
		if r == result {
			c.Inc()
		}
	}
	for _, s := range []string{HitStaged, HitUnstaged} {
		c := stagedHits.WithLabelValues(name, s)
		if hit && s == served {
			c.Inc()
		}
	}
	checkoutDuration.WithLabelValues(result).Observe(d.Seconds())
}

// forgetMetrics removes FluentPVC name's series, once it is gone.
func forgetMetrics(name string) {
	match := prometheus.Labels{"fluentpvc": name}
	checkoutsTotal.DeletePartialMatch(match)
	stagedHits.DeletePartialMatch(match)
	mountsRefused.DeletePartialMatch(match)
}
