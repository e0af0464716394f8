package webhook

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

func TestNativeSidecarSupport(t *testing.T) {
	cases := map[string]struct {
		gitVersion string
		supported  bool
	}{
		"1.36":                               {gitVersion: "v1.36.3", supported: true},
		"1.29, the first with them":          {gitVersion: "v1.29.0", supported: true},
		"a vendor build of 1.30":             {gitVersion: "v1.30.4-eks-a737599", supported: true},
		"1.28":                               {gitVersion: "v1.28.15", supported: false},
		"1.27 with a vendor suffix":          {gitVersion: "v1.27.2+k3s1", supported: false},
		"unreadable: the API server decides": {gitVersion: "unknown", supported: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			why := NativeSidecarSupport(tc.gitVersion)
			if (why == "") != tc.supported {
				t.Errorf("NativeSidecarSupport(%q) = %q, want supported=%v", tc.gitVersion, why, tc.supported)
			}
		})
	}
}

// informerState is an informer that has synced or not.
type informerState struct {
	cache.Informer
	synced bool
}

func (s informerState) HasSynced() bool { return s.synced }

func TestCachesSynced(t *testing.T) {
	cases := map[string]struct {
		synced map[string]bool
		want   string
	}{
		"all synced":     {synced: map[string]bool{"Pod": true, "Node": true}},
		"one not, named": {synced: map[string]bool{"Pod": true, "FluentPVCBinding": false}, want: "the webhooks' cache has not synced FluentPVCBinding yet"},
		"several not, in order": {
			synced: map[string]bool{"Pod": false, "Node": false, "FluentPVC": true},
			want:   "the webhooks' cache has not synced Node, Pod yet",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := &Caches{informers: map[string]cache.Informer{}}
			for kind, synced := range tc.synced {
				c.informers[kind] = informerState{synced: synced}
			}
			err := c.Synced(nil)
			if (err == nil) != (tc.want == "") || (err != nil && err.Error() != tc.want) {
				t.Errorf("Synced() = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestHandouts(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := types.NamespacedName{Namespace: "ns", Name: "f-abc"}
	type step struct {
		record bool
		claim  types.NamespacedName
		pod    string        // "": "app/"
		at     time.Duration // after t0
		want   bool          // of a take
	}
	cases := map[string]struct {
		steps   []step
		wantLen int
	}{
		"the reinvocation of its admission takes it": {steps: []step{{record: true, claim: a}, {claim: a, at: time.Millisecond, want: true}}},
		"taken once: a second pod carrying it is a copy": {steps: []step{
			{record: true, claim: a}, {claim: a, at: time.Millisecond, want: true}, {claim: a, at: 2 * time.Millisecond},
		}},
		"never handed out here (a copy, or another replica's)": {steps: []step{{claim: a}}},
		"the same name in another namespace":                   {steps: []step{{record: true, claim: a}, {claim: types.NamespacedName{Namespace: "other", Name: a.Name}}}, wantLen: 1},
		"expired":                                              {steps: []step{{record: true, claim: a}, {claim: a, at: HandoutTTL}}},
		"just within the TTL":                                  {steps: []step{{record: true, claim: a}, {claim: a, at: HandoutTTL - time.Nanosecond, want: true}}},
		"a clock that went back":                               {steps: []step{{record: true, claim: a, at: time.Second}, {claim: a}}},
		"a pod of another name (a copy) carrying it":           {steps: []step{{record: true, claim: a}, {claim: a, pod: "copy/", at: time.Millisecond}}},
		"a generated name's pod, reinvoked":                    {steps: []step{{record: true, claim: a, pod: "/app-"}, {claim: a, pod: "/app-", at: time.Millisecond, want: true}}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := NewHandouts()
			for i, s := range tc.steps {
				if s.pod == "" {
					s.pod = "app/"
				}
				if s.record {
					h.Record(s.claim, s.pod, t0.Add(s.at))
					continue
				}
				if got := h.Take(s.claim, s.pod, t0.Add(s.at)); got != s.want {
					t.Errorf("step %d: Take(%s) = %v, want %v", i, s.claim, got, s.want)
				}
			}
			if h.Len() != tc.wantLen {
				t.Errorf("Len() = %d, want %d", h.Len(), tc.wantLen)
			}
		})
	}
}

// TestHandoutsPrune checks that a record forgets the expired claims once
// the set is large, and keeps the ones within the TTL.
func TestHandoutsPrune(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := NewHandouts()
	for i := range handoutsPruneAt {
		h.Record(types.NamespacedName{Namespace: "ns", Name: fmt.Sprint("old-", i)}, "app/", t0)
	}
	h.Record(types.NamespacedName{Namespace: "ns", Name: "recent"}, "app/", t0.Add(HandoutTTL-time.Second))
	h.Record(types.NamespacedName{Namespace: "ns", Name: "new"}, "app/", t0.Add(HandoutTTL))
	if h.Len() != 2 {
		t.Errorf("Len() = %d, want 2 (recent and new)", h.Len())
	}
	if !h.Take(types.NamespacedName{Namespace: "ns", Name: "recent"}, "app/", t0.Add(HandoutTTL)) {
		t.Error("the claim within the TTL was forgotten")
	}
}
