package controllers

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

func TestOwnWrites(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	key := types.NamespacedName{Namespace: "ns", Name: "f-abc"}
	type step struct {
		wrote   string // the version a write replaced
		created bool
		at      time.Duration
		seen    *string // a reconcile that finds the cache at this version ("": not cached)
		want    bool    // of stale
	}
	v := func(s string) *string { return &s }
	cases := map[string][]step{
		"nothing written: not stale":                  {{seen: v("5")}},
		"the cache still at the version written over": {{wrote: "5"}, {seen: v("5"), at: time.Millisecond, want: true}},
		"the cache shows the write, then forgets":     {{wrote: "5"}, {seen: v("6"), at: time.Millisecond}, {seen: v("5"), at: 2 * time.Millisecond}},
		"two writes in one reconcile: either older version is stale": {
			{wrote: "5"}, {wrote: "6"}, {seen: v("5"), at: time.Millisecond, want: true}, {seen: v("6"), at: time.Millisecond, want: true}, {seen: v("7"), at: time.Millisecond},
		},
		"created, not cached yet":                  {{created: true}, {seen: v(""), at: time.Millisecond, want: true}},
		"created, then cached":                     {{created: true}, {seen: v("1"), at: time.Millisecond}, {seen: v(""), at: 2 * time.Millisecond}},
		"deleted after a write: gone is not stale": {{wrote: "5"}, {seen: v(""), at: time.Millisecond}},
		"a write never seen within the TTL":        {{wrote: "5"}, {seen: v("5"), at: ownWriteTTL}, {seen: v("5"), at: ownWriteTTL + time.Millisecond}},
		"a second write renews the TTL":            {{wrote: "5"}, {wrote: "6", at: ownWriteTTL - time.Second}, {seen: v("5"), at: ownWriteTTL, want: true}},
	}
	for name, steps := range cases {
		t.Run(name, func(t *testing.T) {
			var w ownWrites
			for i, s := range steps {
				now := t0.Add(s.at)
				switch {
				case s.created:
					w.created(key, now)
				case s.seen != nil:
					if got := w.stale(key, *s.seen, now); got != s.want {
						t.Errorf("step %d: stale(%q) = %v, want %v", i, *s.seen, got, s.want)
					}
				default:
					w.wrote(key, s.wrote, now)
				}
			}
		})
	}
}
