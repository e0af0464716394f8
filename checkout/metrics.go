package checkout

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// reservedClaims is how many claims this replica's stock holds reserved
// ahead of their pods, by FluentPVC.
var reservedClaims = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "fluentpvc_pool_reserved_claims",
	Help: "Claims this webhook replica holds reserved ahead of their pods (--reserve-ahead), which it hands out without an API write, by FluentPVC.",
}, []string{"fluentpvc"})

func init() {
	metrics.Registry.MustRegister(reservedClaims)
}
