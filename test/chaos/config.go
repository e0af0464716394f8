package chaos

import (
	"fmt"
	"time"
)

// mode sizes a run: how long the load lasts and how often each fault strikes.
type mode struct {
	Name string
	// Load is how long pods are created and faults injected.
	Load time.Duration
	// Namespaces run the load at once; a deleted one is replaced.
	Namespaces int
	// BarePodEvery is the pace of bare pod creations; each lives
	// BarePodLife (from, to).
	BarePodEvery time.Duration
	BarePodLife  [2]time.Duration
	// MinPods is the fewest labelled pods a run must create to count.
	MinPods int
	// Every fault strikes at a random time within its interval.
	KillEvery, NamespaceEvery, FluentPVCEvery, StripEvery, UnlabelEvery, CopyEvery, ScaleEvery [2]time.Duration
	// And those of faults.go: unlabelled copies, users' deletions of held
	// claims, refused binding writes, quotas on bindings, refused drain
	// pods, deleted nodes (with node-local claims, with holders), killed
	// holders.
	DebugCopyEvery, ClaimDeleteEvery, BindingRefusalEvery, BindingQuotaEvery, DrainRefusalEvery, NodeEvery, StagedNodeEvery,
	HolderKillEvery [2]time.Duration
	// Same-name re-creations and generateName copies of running pods;
	// namespaces leaving the main pool for a window.
	RecreateEvery, LeavePoolEvery [2]time.Duration
	// Window is how long a refusal or quota lasts; NodeDown how long a
	// deleted node stays away.
	Window, NodeDown [2]time.Duration
	// Settle bounds the wait for the system to settle after the load.
	Settle time.Duration
	// PerRequestLB puts the replicas behind an L7 balancer that spreads
	// requests, rather than a TCP one that spreads connections.
	PerRequestLB bool
}

var (
	reduced = mode{
		Name: "reduced", Load: 70 * time.Second, Namespaces: 2,
		BarePodEvery: 700 * time.Millisecond, BarePodLife: [2]time.Duration{3 * time.Second, 20 * time.Second}, MinPods: 60,
		KillEvery: [2]time.Duration{10 * time.Second, 30 * time.Second}, NamespaceEvery: [2]time.Duration{25 * time.Second, 40 * time.Second},
		FluentPVCEvery: [2]time.Duration{8 * time.Second, 15 * time.Second}, StripEvery: [2]time.Duration{4 * time.Second, 8 * time.Second},
		UnlabelEvery: [2]time.Duration{6 * time.Second, 12 * time.Second}, CopyEvery: [2]time.Duration{5 * time.Second, 10 * time.Second},
		ScaleEvery: [2]time.Duration{2 * time.Second, 5 * time.Second}, Settle: 4 * time.Minute,
		DebugCopyEvery: [2]time.Duration{6 * time.Second, 12 * time.Second}, ClaimDeleteEvery: [2]time.Duration{6 * time.Second, 12 * time.Second},
		BindingRefusalEvery: [2]time.Duration{5 * time.Second, 20 * time.Second}, BindingQuotaEvery: [2]time.Duration{10 * time.Second, 25 * time.Second},
		DrainRefusalEvery: [2]time.Duration{10 * time.Second, 25 * time.Second}, NodeEvery: [2]time.Duration{10 * time.Second, 20 * time.Second},
		StagedNodeEvery: [2]time.Duration{10 * time.Second, 20 * time.Second}, HolderKillEvery: [2]time.Duration{3 * time.Second, 8 * time.Second},
		RecreateEvery: [2]time.Duration{6 * time.Second, 12 * time.Second}, LeavePoolEvery: [2]time.Duration{15 * time.Second, 25 * time.Second},
		Window: [2]time.Duration{15 * time.Second, 25 * time.Second}, NodeDown: [2]time.Duration{30 * time.Second, 60 * time.Second},
	}
	full = mode{
		Name: "full", Load: 8 * time.Minute, Namespaces: 4, PerRequestLB: true,
		BarePodEvery: time.Second, BarePodLife: [2]time.Duration{3 * time.Second, 40 * time.Second}, MinPods: 300,
		KillEvery: [2]time.Duration{10 * time.Second, 30 * time.Second}, NamespaceEvery: [2]time.Duration{40 * time.Second, 80 * time.Second},
		FluentPVCEvery: [2]time.Duration{10 * time.Second, 25 * time.Second}, StripEvery: [2]time.Duration{5 * time.Second, 12 * time.Second},
		UnlabelEvery: [2]time.Duration{8 * time.Second, 15 * time.Second}, CopyEvery: [2]time.Duration{6 * time.Second, 12 * time.Second},
		ScaleEvery: [2]time.Duration{2 * time.Second, 6 * time.Second}, Settle: 5 * time.Minute,
		DebugCopyEvery: [2]time.Duration{8 * time.Second, 15 * time.Second}, ClaimDeleteEvery: [2]time.Duration{10 * time.Second, 20 * time.Second},
		BindingRefusalEvery: [2]time.Duration{30 * time.Second, 60 * time.Second}, BindingQuotaEvery: [2]time.Duration{40 * time.Second, 80 * time.Second},
		DrainRefusalEvery: [2]time.Duration{40 * time.Second, 80 * time.Second}, NodeEvery: [2]time.Duration{60 * time.Second, 120 * time.Second},
		StagedNodeEvery: [2]time.Duration{60 * time.Second, 120 * time.Second}, HolderKillEvery: [2]time.Duration{5 * time.Second, 12 * time.Second},
		RecreateEvery: [2]time.Duration{8 * time.Second, 15 * time.Second}, LeavePoolEvery: [2]time.Duration{30 * time.Second, 60 * time.Second},
		Window: [2]time.Duration{15 * time.Second, 25 * time.Second}, NodeDown: [2]time.Duration{30 * time.Second, 60 * time.Second},
	}
)

func modeNamed(name string) (mode, error) {
	switch name {
	case reduced.Name:
		return reduced, nil
	case full.Name:
		return full, nil
	}
	return mode{}, fmt.Errorf("CHAOS=%q: want %q or %q", name, reduced.Name, full.Name)
}
