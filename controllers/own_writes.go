package controllers

import (
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// ownWriteTTL bounds how long a write of a reconciler is waited for in
// its cache: its watch event comes within moments, and a relist brings the
// object anyway.
const ownWriteTTL = 30 * time.Second

// ownWrites remembers, per object, the resourceVersions a reconciler's own
// writes replaced, until its cache shows a version that is none of them.
// A cached copy at one of those versions is older than the reconciler's
// last write: a decision made from it would repeat or undo that write, and
// a write conditioned on it would fail with a conflict. The reconciler
// then waits for its write's watch event, which brings the object again.
// Only equality of versions is used, never their order. An object the
// reconciler created is remembered with the version "" until it is seen.
// Safe for concurrent use.
type ownWrites struct {
	mu sync.Mutex
	m  map[types.NamespacedName]ownWrite
}

type ownWrite struct {
	replaced []string
	at       time.Time
}

// wrote records that a write replaced version before of key, at now.
func (w *ownWrites) wrote(key types.NamespacedName, before string, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[types.NamespacedName]ownWrite{}
	}
	e := w.m[key]
	if !slices.Contains(e.replaced, before) {
		e.replaced = append(e.replaced, before)
	}
	e.at = now
	w.m[key] = e
}

// created records that key was created at now.
func (w *ownWrites) created(key types.NamespacedName, now time.Time) { w.wrote(key, "", now) }

// stale says whether a cached copy of key at version (found: "" when the
// cache does not hold key) is older than a write recorded in the last
// ownWriteTTL. Once it is not, key is forgotten.
func (w *ownWrites) stale(key types.NamespacedName, version string, now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.m[key]
	if !ok {
		return false
	}
	if now.Sub(e.at) < ownWriteTTL && slices.Contains(e.replaced, version) {
		return true
	}
	delete(w.m, key)
	return false
}
