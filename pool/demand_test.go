package pool

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

func TestFollowDemand(t *testing.T) {
	now := fixtures.Epoch.Add(time.Hour)
	settled := now.Add(-SpareSettle)
	zoneOf := map[string]string{"a-0": "a", "a-1": "a", "b-0": "b", "b-1": "b", "c-0": "c", "c-1": "c"}
	// A node-local warm PVC reaches its node; a zonal one, its zone.
	local := func(name, node string, created time.Time) WarmPlace {
		return WarmPlace{Name: name, Bound: true, Created: created, Reaches: func(n string) bool { return n == node }}
	}
	zonal := func(name, zone string, created time.Time) WarmPlace {
		return WarmPlace{Name: name, Bound: true, Created: created, Reaches: func(n string) bool { return zoneOf[n] == zone }}
	}
	pending := func(name, node string) WarmPlace {
		w := local(name, node, now)
		w.Bound = false
		return w
	}
	miss := func(node string) DemandNode { return DemandNode{Name: node, Misses: 1, Claims: 1} }
	hit := func(node string) DemandNode { return DemandNode{Name: node, Claims: 1} }
	allNodes := func(string) bool { return true }
	cases := map[string]struct {
		demand        []DemandNode
		warm          []WarmPlace
		eligible      func(string) bool
		wantUncovered []string
		wantMove      []string
		wantSpare     []string
		wantRequeue   time.Duration
	}{
		"no demand: nothing moves": {
			warm:      []WarmPlace{local("w1", "a-0", settled)},
			wantSpare: []string{"w1"},
		},
		"DaemonSet, node-local: a second PVC on one node moves to the uncovered node": {
			demand:        []DemandNode{miss("a-0"), miss("a-1"), miss("b-0")},
			warm:          []WarmPlace{local("w1", "a-0", settled), local("w2", "a-0", settled.Add(-time.Second)), local("w3", "b-0", settled)},
			wantUncovered: []string{"a-1"},
			wantMove:      []string{"w2"},
			wantSpare:     []string{"w2"},
		},
		"zonal: a PVC in a zone without pods moves where misses were": {
			demand:        []DemandNode{hit("a-0"), miss("a-1")},
			warm:          []WarmPlace{zonal("wa", "a", settled), zonal("wc", "c", settled)},
			wantUncovered: []string{"a-0"},
			wantMove:      []string{"wc"},
			wantSpare:     []string{"wc"},
		},
		"zonal, pods in every zone: stable": {
			demand: []DemandNode{hit("a-0"), hit("b-0"), hit("c-0"), hit("a-1")},
			warm:   []WarmPlace{zonal("wa", "a", settled), zonal("wb", "b", settled), zonal("wc", "c", settled)},
			// a-1 is uncovered, but no PVC is spare.
			wantUncovered: []string{"a-1"},
		},
		"a spare with no node uncovered is told, and stays": {
			demand:    []DemandNode{hit("a-0"), hit("b-0")},
			warm:      []WarmPlace{zonal("wa", "a", settled), zonal("wb", "b", settled), zonal("wc", "c", settled)},
			wantSpare: []string{"wc"},
		},
		"misses are covered first": {
			demand:        []DemandNode{hit("a-0"), miss("a-1")},
			warm:          []WarmPlace{zonal("wa", "a", settled)},
			wantUncovered: []string{"a-0"},
		},
		"a spare that has not settled waits, and says when": {
			demand:        []DemandNode{miss("a-1")},
			warm:          []WarmPlace{local("w1", "b-0", now.Add(-10*time.Second))},
			wantUncovered: []string{"a-1"},
			wantRequeue:   SpareSettle - 10*time.Second,
			wantSpare:     []string{"w1"},
		},
		"a pending PVC is never replaced, but covers its node": {
			demand: []DemandNode{miss("a-1"), miss("a-0")},
			warm:   []WarmPlace{pending("p1", "a-0"), pending("p2", "c-0")},
			// a-1 stays uncovered for new PVCs; p2 is left to bind.
			wantUncovered: []string{"a-1"},
			wantSpare:     []string{"p2"},
		},
		"demand on a node that cannot be named moves nothing": {
			demand:    []DemandNode{miss("a-1")},
			warm:      []WarmPlace{local("w1", "b-0", settled)},
			eligible:  func(n string) bool { return n != "a-1" },
			wantSpare: []string{"w1"},
		},
		"no more replaced than nodes uncovered, oldest first": {
			demand:        []DemandNode{miss("a-1")},
			warm:          []WarmPlace{local("new", "b-0", settled), local("old", "c-0", settled.Add(-time.Minute))},
			wantUncovered: []string{"a-1"},
			wantMove:      []string{"old"},
			wantSpare:     []string{"new", "old"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if tc.eligible == nil {
				tc.eligible = allNodes
			}
			got := FollowDemand(tc.demand, tc.warm, tc.eligible, now)
			want := Following{Uncovered: tc.wantUncovered, Move: tc.wantMove, Spare: tc.wantSpare, RequeueAfter: tc.wantRequeue}
			if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("FollowDemand (-want +got):\n%s", diff)
			}
		})
	}
}
