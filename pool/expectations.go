package pool

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// ExpectationTTL bounds how long a created warm PVC is expected: a cache
// that has not shown it by then is not waited for any longer.
const ExpectationTTL = 30 * time.Second

// Expectations remember the warm PVCs a pool reconcile created until the
// cache shows them. Without them, a reconcile that runs before the cache
// catches up counts the pool short and creates the same PVCs again, and the
// surplus has to be deleted: a burst's refill then costs twice the writes.
type Expectations struct {
	mu      sync.Mutex
	created map[string]map[types.NamespacedName]Expected // by FluentPVC
}

// Expected is a created warm PVC not seen in the cache yet.
type Expected struct {
	Key types.NamespacedName
	// Zone and Node are the node named for it and its zone ("" if none).
	Zone, Node string
	At         time.Time
}

// NewExpectations is an empty Expectations.
func NewExpectations() *Expectations {
	return &Expectations{created: map[string]map[types.NamespacedName]Expected{}}
}

// Created records warm PVC key of FluentPVC fpvc as just created, named
// for the node and zone in x (its Key and At are set here).
func (e *Expectations) Created(fpvc string, key types.NamespacedName, x Expected, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	m := e.created[fpvc]
	if m == nil {
		m = map[types.NamespacedName]Expected{}
		e.created[fpvc] = m
	}
	x.Key, x.At = key, now
	m[key] = x
}

// Unseen returns fpvc's created PVCs that seen (the cache) does not know
// yet, and forgets those it knows and those older than ExpectationTTL.
func (e *Expectations) Unseen(fpvc string, seen func(types.NamespacedName) bool, now time.Time) []Expected {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []Expected
	for key, x := range e.created[fpvc] {
		if now.Sub(x.At) >= ExpectationTTL || seen(key) {
			delete(e.created[fpvc], key)
			continue
		}
		out = append(out, x)
	}
	if len(e.created[fpvc]) == 0 {
		delete(e.created, fpvc)
	}
	return out
}

// Forget drops every expectation of fpvc, e.g. once it is deleted.
func (e *Expectations) Forget(fpvc string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.created, fpvc)
}
