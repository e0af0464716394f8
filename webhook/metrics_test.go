package webhook

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestCountCheckout: a checkout counts once, under its result and, for a
// hit, under how its warm PVC was staged; the FluentPVC's other series
// exist at zero; forgetMetrics removes them all.
func TestCountCheckout(t *testing.T) {
	const f = "count-test"
	reg := prometheus.NewRegistry()
	reg.MustRegister(checkoutsTotal, stagedHits, mountsRefused)
	// values are f's counters by their other label's value.
	values := func() map[string]float64 {
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, fam := range families {
			for _, m := range fam.GetMetric() {
				var mine bool
				var other string
				for _, l := range m.GetLabel() {
					if l.GetName() == "fluentpvc" {
						mine = l.GetValue() == f
					} else {
						other = l.GetValue()
					}
				}
				if mine {
					out[fam.GetName()+"/"+other] = m.GetCounter().GetValue()
				}
			}
		}
		return out
	}
	cases := map[string]struct {
		hit, staged bool
		want        map[string]float64
	}{
		"a staged hit": {hit: true, staged: true, want: map[string]float64{
			"fluentpvc_pool_checkouts_total/hit": 1, "fluentpvc_pool_checkouts_total/miss": 0,
			"fluentpvc_pool_staged_hits_total/staged": 1, "fluentpvc_pool_staged_hits_total/unstaged": 0,
		}},
		"an unstaged hit": {hit: true, want: map[string]float64{
			"fluentpvc_pool_checkouts_total/hit": 1, "fluentpvc_pool_checkouts_total/miss": 0,
			"fluentpvc_pool_staged_hits_total/staged": 0, "fluentpvc_pool_staged_hits_total/unstaged": 1,
		}},
		"a miss": {want: map[string]float64{
			"fluentpvc_pool_checkouts_total/hit": 0, "fluentpvc_pool_checkouts_total/miss": 1,
			"fluentpvc_pool_staged_hits_total/staged": 0, "fluentpvc_pool_staged_hits_total/unstaged": 0,
		}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			countCheckout(f, tc.hit, tc.staged, time.Millisecond)
			got := values()
			if len(got) != len(tc.want) {
				t.Errorf("series %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("%s: %v, want %v", k, got[k], v)
				}
			}
			mountsRefused.WithLabelValues(f).Inc()
			forgetMetrics(f)
			if got := values(); len(got) != 0 {
				t.Errorf("series left after forgetMetrics: %v", got)
			}
		})
	}
}
