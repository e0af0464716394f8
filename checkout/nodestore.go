package checkout

import (
	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
)

// NodeStore lists the cached nodes as the informer's store holds them:
// pointers, not copies. A checkout reads every node of the cluster, and a
// list through the cache copies each Node (784 bytes, however slim) into
// a new slice first: about 0.8 MB, and the garbage collector's work on
// it, per checkout on 1,000 nodes. The nodes listed are the cache's, to
// read and never change.
type NodeStore struct {
	store  toolscache.Store
	synced func() bool
}

// storeInformer is the part of client-go's SharedIndexInformer that
// NodeStore reads.
type storeInformer interface {
	GetStore() toolscache.Store
	HasSynced() bool
}

// NewNodeStore is the NodeStore of informer, the cache's informer of
// nodes; nil when informer has no store (a cache of another kind), whose
// List then says so.
func NewNodeStore(informer any) *NodeStore {
	i, ok := informer.(storeInformer)
	if !ok || i.GetStore() == nil {
		return nil
	}
	return &NodeStore{store: i.GetStore(), synced: i.HasSynced}
}

// List is every node in the store; ok is false, and the caller lists
// through the cache instead, when there is no store or it has not synced
// yet (a partial list would hide nodes).
func (s *NodeStore) List() (nodes []*corev1.Node, ok bool) {
	if s == nil || !s.synced() {
		return nil, false
	}
	objs := s.store.List()
	nodes = make([]*corev1.Node, 0, len(objs))
	for _, o := range objs {
		if n, isNode := o.(*corev1.Node); isNode {
			nodes = append(nodes, n)
		}
	}
	return nodes, true
}
