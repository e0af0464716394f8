package controllers

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// seriesOf counts the series of reg whose fluentpvc label is name.
func seriesOf(t *testing.T, reg *prometheus.Registry, name string) int {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "fluentpvc" && l.GetValue() == name {
					n++
				}
			}
		}
	}
	return n
}

// TestInitAndForgetMetrics: a FluentPVC's series of the controllers'
// counters and histograms exist at zero once it is seen, for every value of
// their other label, and every series of it is gone once it is.
func TestInitAndForgetMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(fluentPVCCounters[0], drainDuration, poolReplaced, holdersRemoved, timeToWarm, poolWarm, poolStaged)
	for _, c := range fluentPVCCounters[1:] {
		reg.MustRegister(c)
	}
	cases := map[string]struct {
		gauges bool // the pool's gauges were set
		want   int
	}{
		// the counters, the drain histogram, three reasons of replacement,
		// six reasons a holder left, the time to warm.
		"seen":                       {want: len(fluentPVCCounters) + 1 + 3 + 6 + 1},
		"seen, with a pool's gauges": {gauges: true, want: len(fluentPVCCounters) + 1 + 3 + 6 + 1 + 2},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			initMetrics("metrics-test")
			if tc.gauges {
				poolWarm.WithLabelValues("metrics-test", "ns").Set(1)
				poolStaged.WithLabelValues("metrics-test", "node").Set(1)
			}
			if got := seriesOf(t, reg, "metrics-test"); got != tc.want {
				t.Errorf("%d series after initMetrics, want %d", got, tc.want)
			}
			forgetMetrics("metrics-test")
			if got := seriesOf(t, reg, "metrics-test"); got != 0 {
				t.Errorf("%d series after forgetMetrics, want none", got)
			}
		})
	}
}
