package cluster

import (
	"strings"
	"testing"
	"time"
)

func TestParseGCTrace(t *testing.T) {
	start := time.Unix(1000, 0)
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	const (
		// Started 6.163 s in, 169.213 ms of wall clock; CPU 0.35 + 33 + 97
		// + 0.086 ms, the idle workers' 28 ms left out.
		gc17 = "gc 17 @6.163s 6%: 0.17+169+0.043 ms clock, 0.35+33/97/28+0.086 ms cpu, 207->240->130 MB, 244 MB goal, 3 MB stacks, 0 MB globals, 2 P (forced)"
		gc18 = "gc 18 @10.5s 7%: 0.1+200+0.9 ms clock, 0.2+50/100/40+0.8 ms cpu, 225->247->122 MB, 265 MB goal, 3 MB stacks, 0 MB globals, 2 P"
		gc1  = "gc 1 @0.02s 2%: 0.01+1+0.01 ms clock, 0.02+0/1/0+0.02 ms cpu, 4->4->1 MB, 4 MB goal, 0 MB stacks, 0 MB globals, 2 P"
		klog = "I1128 08:14:33.123456   12345 handler.go:42] gc 3 @1.0s is not a trace line"
	)
	cases := map[string]struct {
		log        string
		want       []GCCycle
		wantUnread int
	}{
		"cycles among other lines": {
			log:        strings.Join([]string{klog, gc17, "gc 17 without its times", gc18}, "\n"),
			wantUnread: 16, // 1 to 16 are not in the log
			want: []GCCycle{
				{Start: at(6163), End: at(6163).Add(169213 * time.Microsecond), CPU: 130436 * time.Microsecond},
				{Start: at(10500), End: at(10500).Add(201 * time.Millisecond), CPU: 151 * time.Millisecond},
			},
		},
		"a restarted process: only the last run's cycles": {
			log:  strings.Join([]string{gc17, gc18, gc1}, "\n"),
			want: []GCCycle{{Start: at(20), End: at(20).Add(1020 * time.Microsecond), CPU: 1040 * time.Microsecond}},
		},
		"a line split by another": {
			log:        strings.Join([]string{gc17, "gc 18 @10.5s 7%: 0.1+200+0.9 ms clock, 0.2+50/1I1128 08:14:33.1 handler.go:42] GET /api", "00/40+0.8 ms cpu, 225->247->122 MB", strings.Replace(gc18, "gc 18", "gc 19", 1)}, "\n"),
			want:       []GCCycle{{Start: at(6163), End: at(6163).Add(169213 * time.Microsecond), CPU: 130436 * time.Microsecond}, {Start: at(10500), End: at(10500).Add(201 * time.Millisecond), CPU: 151 * time.Millisecond}},
			wantUnread: 17,
		},
		"no cycle": {log: klog},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, unread, err := ParseGCTrace(strings.NewReader(tc.log), start)
			if err != nil {
				t.Fatal(err)
			}
			if unread != tc.wantUnread {
				t.Errorf("unread = %d, want %d", unread, tc.wantUnread)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %d cycles %v, want %d", len(got), got, len(tc.want))
			}
			for i, w := range tc.want {
				g := got[i]
				if !near(g.Start, w.Start) || !near(g.End, w.End) || (g.CPU-w.CPU).Abs() > time.Microsecond {
					t.Errorf("cycle %d = %v–%v, CPU %v; want %v–%v, CPU %v", i, g.Start, g.End, g.CPU, w.Start, w.End, w.CPU)
				}
			}
		})
	}
}

// near allows for the float seconds of a trace line.
func near(a, b time.Time) bool { return a.Sub(b).Abs() <= time.Microsecond }

// TestKwokctlConfigTraceGC: the trace's environment goes to kube-apiserver's
// patch, also when the real node adds kwok-controller's after it.
func TestKwokctlConfigTraceGC(t *testing.T) {
	for name, tc := range map[string]struct{ realNode, traceGC bool }{
		"traced":                {traceGC: true},
		"traced, real node":     {realNode: true, traceGC: true},
		"not traced, real node": {realNode: true},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := kwokctlConfig("kubectl", nil, tc.realNode, tc.traceGC)
			env := strings.Index(cfg, "  extraEnvs:\n  - name: GODEBUG\n    value: gctrace=1\n")
			if (env >= 0) != tc.traceGC {
				t.Fatalf("gctrace set = %v, want %v:\n%s", env >= 0, tc.traceGC, cfg)
			}
			if env < 0 {
				return
			}
			apiserver, kwok := strings.Index(cfg, "- name: kube-apiserver"), strings.Index(cfg, "- name: kwok-controller")
			if env < apiserver || (kwok >= 0 && env > kwok) {
				t.Errorf("gctrace is not in kube-apiserver's patch:\n%s", cfg)
			}
		})
	}
}
