// Package expectations remembers an actor's own writes until its cache
// shows them, the way the ReplicaSet controller's expectations do: a
// decision read from a cache that does not show them yet would repeat or
// undo them.
package expectations

import (
	"slices"
	"sync"
	"time"
)

// TTL bounds how long a write is expected: its watch event comes within
// moments, and a relist brings the object anyway. A restart loses every
// expectation, which costs at most a write that fails with a conflict or
// one that the next reconcile undoes.
const TTL = 30 * time.Second

// Expectations remember, per key, the versions that the owner's writes
// replaced ("" for an object it created), with a value of its choosing,
// until its cache shows a version that is none of them, or for TTL. Only
// equality of versions is used, never their order. The zero value is
// ready; safe for concurrent use.
type Expectations[K comparable, V any] struct {
	mu sync.Mutex
	m  map[K]entry[V]
	// pruned is when Expect last forgot what is older than TTL.
	pruned time.Time
}

type entry[V any] struct {
	replaced []string
	value    V
	at       time.Time
}

// Expect records at now that a write replaced version before of key ("":
// the write created key), with value v.
func (e *Expectations[K, V]) Expect(key K, before string, v V, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.expect(key, before, v, now)
}

// First records, as Expect does, that a write is about to replace version
// of key, unless one already is expected to: it says whether this write is
// the first. Unlike Stale, it keeps the other versions of key expected: a
// cache behind another reader may still show them.
func (e *Expectations[K, V]) First(key K, version string, v V, now time.Time) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if x, ok := e.m[key]; ok && now.Sub(x.at) < TTL && slices.Contains(x.replaced, version) {
		return false
	}
	e.expect(key, version, v, now)
	return true
}

// Stale says whether a cached copy of key at version ("" when the cache
// does not hold key) is older than a write expected in the TTL before now.
// Once it is not, key is forgotten.
func (e *Expectations[K, V]) Stale(key K, version string, now time.Time) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stale(key, version, now)
}

func (e *Expectations[K, V]) expect(key K, before string, v V, now time.Time) {
	if e.m == nil {
		e.m = map[K]entry[V]{}
	}
	if now.Sub(e.pruned) >= TTL {
		for k, x := range e.m {
			if now.Sub(x.at) >= TTL {
				delete(e.m, k)
			}
		}
		e.pruned = now
	}
	x := e.m[key]
	if now.Sub(x.at) >= TTL {
		x = entry[V]{}
	}
	if !slices.Contains(x.replaced, before) {
		x.replaced = append(x.replaced, before)
	}
	x.value, x.at = v, now
	e.m[key] = x
}

func (e *Expectations[K, V]) stale(key K, version string, now time.Time) bool {
	x, ok := e.m[key]
	if !ok {
		return false
	}
	if now.Sub(x.at) < TTL && slices.Contains(x.replaced, version) {
		return true
	}
	delete(e.m, key)
	return false
}

// Value is the value of key expected in the TTL before now.
func (e *Expectations[K, V]) Value(key K, now time.Time) (V, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	x, ok := e.m[key]
	if !ok || now.Sub(x.at) >= TTL {
		var zero V
		return zero, false
	}
	return x.value, true
}

// Drop forgets key.
func (e *Expectations[K, V]) Drop(key K) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.m, key)
}

// Pending calls f with each key expected in the TTL before now, and its
// value, and forgets the others. f must not call e.
func (e *Expectations[K, V]) Pending(now time.Time, f func(K, V)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for k, x := range e.m {
		if now.Sub(x.at) >= TTL {
			delete(e.m, k)
			continue
		}
		f(k, x.value)
	}
}

// Forget drops every key for which drop is true.
func (e *Expectations[K, V]) Forget(drop func(K) bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for k := range e.m {
		if drop(k) {
			delete(e.m, k)
		}
	}
}
