package main

import (
	"os"
	"testing"

	"github.com/st-tech/fluent-pvc-operator/pool"
)

// TestSmoke runs the bench's reduced mode (-smoke) on its own kwok cluster:
// it fails only if a measurement could not be taken, never on a missed
// goal. It runs only with BENCH_SMOKE=1.
func TestSmoke(t *testing.T) {
	if os.Getenv("BENCH_SMOKE") != "1" {
		t.Skip("set BENCH_SMOKE=1 to run the bench's smoke mode on a kwok cluster")
	}
	cfg, err := parseFlags([]string{"-smoke", "-out", t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := run(t.Context(), cfg, testWriter{t}, testWriter{t}); err != nil {
		t.Fatal(err)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

func TestParseFlags(t *testing.T) {
	all := map[string]bool{tierKwok: true, tierRealNode: true, tierCSI: true}
	cases := map[string]struct {
		args         []string
		wantN        int
		wantLevels   []int
		wantName     string
		wantRealNode bool
		wantRealN    int
		wantCSIN     int
		// wantRuns are the tiers the run includes (config.runs).
		wantRuns map[string]bool
	}{
		"defaults":              {args: nil, wantN: 40, wantLevels: []int{1, 10, 50}, wantName: "bench", wantRealNode: true, wantRealN: 20, wantCSIN: 6, wantRuns: all},
		"smoke":                 {args: []string{"-smoke"}, wantN: 3, wantLevels: []int{1, 5}, wantName: "bench-smoke", wantRealNode: true, wantRealN: 3, wantCSIN: 1, wantRuns: all},
		"smoke keeps set flags": {args: []string{"-smoke", "-n", "7", "-real-n", "5", "-csi-n", "2"}, wantN: 7, wantLevels: []int{1, 5}, wantName: "bench-smoke", wantRealNode: true, wantRealN: 5, wantCSIN: 2, wantRuns: all},
		"without the real node": {args: []string{"-real-node=false"}, wantN: 40, wantLevels: []int{1, 10, 50}, wantName: "bench", wantRealN: 20, wantCSIN: 6, wantRuns: map[string]bool{tierKwok: true}},
		"the CSI tier alone":    {args: []string{"-smoke", "-tiers", "csi"}, wantN: 3, wantLevels: []int{1, 5}, wantName: "bench-smoke", wantRealNode: true, wantRealN: 3, wantCSIN: 1, wantRuns: map[string]bool{tierCSI: true}},
		"-real-node=false wins over -tiers": {
			args: []string{"-tiers", "kwok,csi", "-real-node=false"}, wantN: 40, wantLevels: []int{1, 10, 50}, wantName: "bench", wantRealN: 20, wantCSIN: 6, wantRuns: map[string]bool{tierKwok: true},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := parseFlags(tc.args)
			if err != nil {
				t.Fatal(err)
			}
			if got.N != tc.wantN || got.Name != tc.wantName || len(got.Levels) != len(tc.wantLevels) || got.RealNode != tc.wantRealNode || got.RealN != tc.wantRealN || got.CSIN != tc.wantCSIN {
				t.Errorf("parseFlags(%v) = n %d, name %q, levels %v, real node %v, real n %d, csi n %d; want %d, %q, %v, %v, %d, %d",
					tc.args, got.N, got.Name, got.Levels, got.RealNode, got.RealN, got.CSIN, tc.wantN, tc.wantName, tc.wantLevels, tc.wantRealNode, tc.wantRealN, tc.wantCSIN)
			}
			for _, tier := range allTiers {
				if got.runs(tier) != tc.wantRuns[tier] {
					t.Errorf("parseFlags(%v) runs tier %s: %v, want %v", tc.args, tier, got.runs(tier), tc.wantRuns[tier])
				}
			}
		})
	}
}

func TestParseFlagsErrors(t *testing.T) {
	cases := map[string][]string{
		"an unknown tier":               {"-tiers", "kwok,gpu"},
		"no CSI pods":                   {"-csi-n", "0"},
		"an unknown phase":              {"-phases", "start-up,warp"},
		"no burst rounds":               {"-burst-rounds", "0"},
		"a negative reservation":        {"-reserve-ahead", "-1"},
		"more reserved than a pool has": {"-reserve-ahead", "1001"},
	}
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := parseFlags(args); err == nil {
				t.Errorf("parseFlags(%v) = nil error, want one", args)
			}
		})
	}
}

// TestOperatorReserve: the bench runs the operator as the chart does
// (reserving its share) unless -operator-args says otherwise; the last
// --reserve-ahead wins, as in the operator's own flag parsing.
func TestOperatorReserve(t *testing.T) {
	for name, tc := range map[string]struct {
		operatorArgs string
		want         int
	}{
		"the chart's default": {want: pool.ReserveShare},
		"none":                {operatorArgs: "--reserve-ahead=0", want: 0},
		"a number":            {operatorArgs: "--pprof-bind-address=127.0.0.1:6060 --reserve-ahead=3", want: 3},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := parseFlags([]string{"-operator-args", tc.operatorArgs})
			if err != nil {
				t.Fatal(err)
			}
			if got := operatorReserve(c.OperatorArgs); got != tc.want {
				t.Errorf("operatorReserve(%v) = %d, want %d", c.OperatorArgs, got, tc.want)
			}
		})
	}
	if got := operatorReserve(nil); got != 0 {
		t.Errorf("operatorReserve(nil) = %d, want 0 (the binary's default)", got)
	}
}
