package webhook

import (
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

var (
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
	metrics.Registry.MustRegister(admissionsTotal, admissionDuration, mountsRefused)
}
