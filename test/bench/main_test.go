package main

import (
	"os"
	"testing"
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
	cases := map[string]struct {
		args         []string
		wantN        int
		wantLevels   []int
		wantName     string
		wantRealNode bool
		wantRealN    int
	}{
		"defaults":              {args: nil, wantN: 40, wantLevels: []int{1, 10, 50}, wantName: "bench", wantRealNode: true, wantRealN: 20},
		"smoke":                 {args: []string{"-smoke"}, wantN: 3, wantLevels: []int{1, 5}, wantName: "bench-smoke", wantRealNode: true, wantRealN: 3},
		"smoke keeps set flags": {args: []string{"-smoke", "-n", "7", "-real-n", "5"}, wantN: 7, wantLevels: []int{1, 5}, wantName: "bench-smoke", wantRealNode: true, wantRealN: 5},
		"without the real node": {args: []string{"-real-node=false"}, wantN: 40, wantLevels: []int{1, 10, 50}, wantName: "bench", wantRealN: 20},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := parseFlags(tc.args)
			if err != nil {
				t.Fatal(err)
			}
			if got.N != tc.wantN || got.Name != tc.wantName || len(got.Levels) != len(tc.wantLevels) || got.RealNode != tc.wantRealNode || got.RealN != tc.wantRealN {
				t.Errorf("parseFlags(%v) = n %d, name %q, levels %v, real node %v, real n %d; want %d, %q, %v, %v, %d",
					tc.args, got.N, got.Name, got.Levels, got.RealNode, got.RealN, tc.wantN, tc.wantName, tc.wantLevels, tc.wantRealNode, tc.wantRealN)
			}
		})
	}
}
