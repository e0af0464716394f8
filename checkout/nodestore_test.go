package checkout

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

// storeOnly is an informer with a store and a sync state, nothing more.
type storeOnly struct {
	store  toolscache.Store
	synced bool
}

func (s storeOnly) GetStore() toolscache.Store { return s.store }
func (s storeOnly) HasSynced() bool            { return s.synced }

// TestNodeStore: the nodes listed are the store's own objects, not
// copies; an informer that has not synced, or none, lists nothing, so
// that the checkout lists through the cache.
func TestNodeStore(t *testing.T) {
	store := toolscache.NewStore(toolscache.MetaNamespaceKeyFunc)
	n1, n2 := fixtures.MakeNode("n1").Obj(), fixtures.MakeNode("n2").Obj()
	for _, n := range []*corev1.Node{n1, n2} {
		if err := store.Add(n); err != nil {
			t.Fatal(err)
		}
	}
	for name, tc := range map[string]struct {
		informer any
		want     []*corev1.Node
		ok       bool
	}{
		"synced":            {informer: storeOnly{store: store, synced: true}, want: []*corev1.Node{n1, n2}, ok: true},
		"not synced":        {informer: storeOnly{store: store}},
		"not an informer":   {informer: struct{}{}},
		"no store":          {informer: storeOnly{synced: true}},
		"no informer (nil)": {informer: nil},
	} {
		t.Run(name, func(t *testing.T) {
			got, ok := NewNodeStore(tc.informer).List()
			if ok != tc.ok {
				t.Fatalf("ok = %v, want %v", ok, tc.ok)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("%d nodes, want %d", len(got), len(tc.want))
			}
			for _, w := range tc.want {
				found := false
				for _, g := range got {
					found = found || g == w // the same object, not a copy
				}
				if !found {
					t.Errorf("node %s is not the store's object", w.Name)
				}
			}
		})
	}
}
