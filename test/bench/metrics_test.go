package main

import "testing"

func TestHistogramQuantile(t *testing.T) {
	// 10 observations ≤ 5 ms, 80 in (5, 25], 10 in (25, 100].
	h := hist{bounds: []float64{.005, .025, .1}, counts: []float64{10, 90, 100}, count: 100}
	cases := map[string]struct {
		q    float64
		want float64
	}{
		"p10 at the first bound": {q: .10, want: .005},
		"p50 interpolated":       {q: .50, want: .005 + .020*40/80},
		"p99 in the last bucket": {q: .99, want: .025 + .075*9/10},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := h.quantile(tc.q); got < tc.want-1e-9 || got > tc.want+1e-9 {
				t.Errorf("quantile(%v) = %v, want %v", tc.q, got, tc.want)
			}
		})
	}
	if got := h.fractionAtMost(.025); got != .9 {
		t.Errorf("fractionAtMost(.025) = %v, want .9", got)
	}
}
