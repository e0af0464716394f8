package pool

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestInitAndForgetMetrics: a FluentPVC's series exist at zero once it is
// seen, for every value of the other label, and are gone once it is.
func TestInitAndForgetMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(CheckoutsTotal, Replaced, StagedHits, HoldersRemoved, TimeToWarm)
	series := func(name string) int {
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
	InitMetrics("metrics-test")
	// hit and miss, three reasons of replacement, three ways a hit met its
	// volume, six reasons a holder left, and the histogram.
	if got, want := series("metrics-test"), 2+3+3+6+1; got != want {
		t.Errorf("%d series after InitMetrics, want %d", got, want)
	}
	ForgetMetrics("metrics-test")
	if got := series("metrics-test"); got != 0 {
		t.Errorf("%d series after ForgetMetrics, want none", got)
	}
}
