package pool

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apimachinery/pkg/types"
)

func TestStrandingsDue(t *testing.T) {
	a := GoneAttachment{UID: "a", Volume: "pv-a", Node: "gone"}
	b := GoneAttachment{UID: "b", Volume: "pv-b", Node: "gone"}
	all := func(types.UID) bool { return true }
	cases := map[string]struct {
		// before are earlier calls at the start; the call under test
		// comes after later, with exists.
		before      [][]GoneAttachment
		exists      func(types.UID) bool
		after       time.Duration
		gone        []GoneAttachment
		wantDue     []GoneAttachment
		wantRecheck time.Duration
	}{
		"first seen: waits":             {gone: []GoneAttachment{a}, exists: all, wantRecheck: StrandedAfter},
		"seen for less than the wait":   {before: [][]GoneAttachment{{a}}, exists: all, after: StrandedAfter - time.Second, gone: []GoneAttachment{a}, wantRecheck: time.Second},
		"seen for the wait: due":        {before: [][]GoneAttachment{{a}}, exists: all, after: StrandedAfter, gone: []GoneAttachment{a}, wantDue: []GoneAttachment{a}},
		"one due, one waits":            {before: [][]GoneAttachment{{a}}, exists: all, after: StrandedAfter, gone: []GoneAttachment{a, b}, wantDue: []GoneAttachment{a}, wantRecheck: StrandedAfter},
		"detached meanwhile: forgotten": {before: [][]GoneAttachment{{a}}, exists: func(types.UID) bool { return false }, after: StrandedAfter, gone: []GoneAttachment{a}, wantRecheck: StrandedAfter},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var s Strandings
			t0 := epoch
			for _, g := range tc.before {
				s.Due(g, all, t0, StrandedAfter)
			}
			due, recheck := s.Due(tc.gone, tc.exists, t0.Add(tc.after), StrandedAfter)
			if diff := cmp.Diff(tc.wantDue, due, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("due (-want +got):\n%s", diff)
			}
			if recheck != tc.wantRecheck {
				t.Errorf("recheck = %s, want %s", recheck, tc.wantRecheck)
			}
		})
	}
}
