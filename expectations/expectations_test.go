package expectations

import (
	"slices"
	"testing"
	"time"
)

func TestStale(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const key = "ns/f-abc"
	type step struct {
		wrote   string // the version a write replaced
		created bool
		at      time.Duration
		seen    *string // a reconcile that finds the cache at this version ("": not cached)
		want    bool    // of Stale
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
		"a write never seen within the TTL":        {{wrote: "5"}, {seen: v("5"), at: TTL}, {seen: v("5"), at: TTL + time.Millisecond}},
		"a second write renews the TTL":            {{wrote: "5"}, {wrote: "6", at: TTL - time.Second}, {seen: v("5"), at: TTL, want: true}},
		"a write after the TTL starts afresh":      {{wrote: "5"}, {wrote: "6", at: TTL}, {seen: v("5"), at: TTL + time.Millisecond}},
	}
	for name, steps := range cases {
		t.Run(name, func(t *testing.T) {
			var e Expectations[string, struct{}]
			for i, s := range steps {
				now := t0.Add(s.at)
				switch {
				case s.created:
					e.Expect(key, "", struct{}{}, now)
				case s.seen != nil:
					if got := e.Stale(key, *s.seen, now); got != s.want {
						t.Errorf("step %d: Stale(%q) = %v, want %v", i, *s.seen, got, s.want)
					}
				default:
					e.Expect(key, s.wrote, struct{}{}, now)
				}
			}
		})
	}
}

// TestFirst: every version tried stays expected for the TTL, and only
// those; a newer one does not make an older one free again.
func TestFirst(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	type try struct {
		version string
		after   time.Duration
		first   bool
	}
	for name, tc := range map[string][]try{
		"a version once":                   {{version: "1", first: true}, {version: "1"}},
		"a newer version":                  {{version: "1", first: true}, {version: "2", first: true}},
		"lost on 1, won on 2, 1 cached":    {{version: "1", first: true}, {version: "2", first: true}, {version: "1"}, {version: "2"}},
		"a version again after the TTL":    {{version: "1", first: true}, {version: "1", after: TTL, first: true}},
		"2 renews the TTL of 1 with it":    {{version: "1", first: true}, {version: "2", after: TTL / 2, first: true}, {version: "1", after: TTL - time.Second}},
		"the TTL over, 1 is not kept by 2": {{version: "1", first: true}, {version: "2", after: TTL, first: true}, {version: "1", after: TTL, first: true}},
	} {
		t.Run(name, func(t *testing.T) {
			var e Expectations[string, struct{}]
			for i, tr := range tc {
				if got := e.First("uid", tr.version, struct{}{}, t0.Add(tr.after)); got != tr.first {
					t.Errorf("try %d of version %s: first %v, want %v", i, tr.version, got, tr.first)
				}
			}
		})
	}
}

func TestPendingAndForget(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := map[string]struct {
		created []string
		seen    []string // keys the cache then shows, at version "1"
		forget  string   // a key prefix forgotten
		at      time.Duration
		want    []string
	}{
		"created and not seen: pending":   {created: []string{"a/1", "a/2"}, at: time.Second, want: []string{"a/1", "a/2"}},
		"seen once: forgotten for good":   {created: []string{"a/1", "a/2"}, seen: []string{"a/1"}, at: time.Second, want: []string{"a/2"}},
		"older than the TTL: forgotten":   {created: []string{"a/1"}, at: TTL},
		"forgotten by their owner's name": {created: []string{"a/1", "b/1"}, forget: "a/", at: time.Second, want: []string{"b/1"}},
		"nothing created":                 {at: time.Second},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var e Expectations[string, int]
			for i, k := range tc.created {
				e.Expect(k, "", i, t0)
			}
			for _, k := range tc.seen {
				if e.Stale(k, "1", t0.Add(time.Millisecond)) {
					t.Fatalf("%s cached at a version no write replaced: stale", k)
				}
			}
			if tc.forget != "" {
				e.Forget(func(k string) bool { return k[:len(tc.forget)] == tc.forget })
			}
			for range 2 {
				var got []string
				e.Pending(t0.Add(tc.at), func(k string, i int) {
					if tc.created[i] != k {
						t.Errorf("%s pending with the value of %s", k, tc.created[i])
					}
					got = append(got, k)
				})
				slices.Sort(got)
				if !slices.Equal(got, tc.want) {
					t.Errorf("Pending: %v, want %v", got, tc.want)
				}
			}
		})
	}
}
