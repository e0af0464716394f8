package webhook

import (
	"testing"

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
