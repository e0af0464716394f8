package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestChooseTier(t *testing.T) {
	cases := map[string]struct {
		asked, unavailable string
		wantTier           tier
		wantReason         string
		wantErr            bool
	}{
		"auto on a machine that can": {
			wantTier: tierReal,
		},
		"auto spelled out": {
			asked:    "auto",
			wantTier: tierReal,
		},
		"auto falls back with the reason": {
			unavailable: "the real node needs root",
			wantTier:    tierKwok,
			wantReason:  "simulated cluster only (kwok): the real node needs root",
		},
		"kwok asked on a machine that can": {
			asked:      "kwok",
			wantTier:   tierKwok,
			wantReason: "simulated cluster only (kwok), as DEMO_TIER=kwok asks",
		},
		"real asked on a machine that can": {
			asked:    "real",
			wantTier: tierReal,
		},
		"real asked on a machine that cannot": {
			asked:       "real",
			unavailable: "the real node needs root",
			wantErr:     true,
		},
		"unknown tier": {
			asked:   "fake",
			wantErr: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			gotTier, gotReason, err := chooseTier(tc.asked, tc.unavailable)
			if (err != nil) != tc.wantErr {
				t.Fatalf("chooseTier(%q, %q) error = %v, want error %v", tc.asked, tc.unavailable, err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.wantTier, gotTier); diff != "" {
				t.Errorf("tier (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantReason, gotReason); diff != "" {
				t.Errorf("reason (-want +got):\n%s", diff)
			}
		})
	}
}
