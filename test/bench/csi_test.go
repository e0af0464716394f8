package main

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

func TestParseNodeLog(t *testing.T) {
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	cases := map[string]struct {
		log  string
		want []nodeEvent
	}{
		"stage and publish lines, in zap's console encoding": {
			log: "2026-11-25T19:03:01Z\tINFO\tstaging volume\t{\"driver\": \"disk\", \"volume\": \"vol-1\", \"staging\": \"/s\", \"at\": \"2026-11-25T19:03:01.25Z\"}\n" +
				"2026-11-25T19:03:03Z\tINFO\tstaged volume\t{\"driver\": \"disk\", \"volume\": \"vol-1\", \"staging\": \"/s\", \"at\": \"2026-11-25T19:03:03.5Z\"}\n" +
				"2026-11-25T19:03:03Z\tINFO\tpublished volume\t{\"driver\": \"disk\", \"volume\": \"vol-1\", \"target\": \"/pods/uid-1/volumes/x/mount\", \"at\": \"2026-11-25T19:03:03.512345678Z\"}\n",
			want: []nodeEvent{
				{Msg: msgStaging, Volume: "vol-1", At: at("2026-11-25T19:03:01.25Z")},
				{Msg: msgStaged, Volume: "vol-1", At: at("2026-11-25T19:03:03.5Z")},
				{Msg: msgPublished, Volume: "vol-1", Target: "/pods/uid-1/volumes/x/mount", At: at("2026-11-25T19:03:03.512345678Z")},
			},
		},
		"a logger's name before the message": {
			log:  "2026-11-25T19:03:03Z\tINFO\tnode\tstaged volume\t{\"volume\": \"vol-2\", \"at\": \"2026-11-25T19:03:03.5Z\"}\n",
			want: []nodeEvent{{Msg: msgStaged, Volume: "vol-2", At: at("2026-11-25T19:03:03.5Z")}},
		},
		"other lines are skipped": {
			log: "2026-11-25T19:03:01Z\tINFO\tformatted volume\t{\"volume\": \"vol-1\"}\n" +
				"2026-11-25T19:03:01Z\tINFO\tregistered with the kubelet\n" +
				"not a log line\n",
		},
		"a line without a time or with bad JSON is skipped": {
			log: "2026-11-25T19:03:01Z\tINFO\tstaged volume\t{\"volume\": \"vol-1\"}\n" +
				"2026-11-25T19:03:01Z\tINFO\tstaged volume\t{\"volume\": \n" +
				"2026-11-25T19:03:01Z\tINFO\tstaged volume\n",
		},
		"empty": {},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := parseNodeLog(strings.NewReader(tc.log))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("parseNodeLog (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFirstEvent(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 19, 0, 0, 0, time.UTC)
	events := []nodeEvent{
		{Msg: msgStaging, Volume: "old", At: t0.Add(-time.Minute)},
		{Msg: msgStaging, Volume: "v", At: t0.Add(3 * time.Second)},
		{Msg: msgStaging, Volume: "v", At: t0.Add(-time.Second)},
		{Msg: msgStaging, Volume: "v", At: t0.Add(2 * time.Second)},
		{Msg: msgStaged, Volume: "v", At: t0.Add(time.Second)},
	}
	ofV := func(ev nodeEvent) bool { return ev.Volume == "v" }
	cases := map[string]struct {
		msg    string
		since  time.Time
		match  func(nodeEvent) bool
		want   time.Time
		wantOK bool
	}{
		"the earliest at or after since":    {msg: msgStaging, since: t0, match: ofV, want: t0.Add(2 * time.Second), wantOK: true},
		"one of another message is not":     {msg: msgStaged, since: t0.Add(2 * time.Second), match: ofV},
		"one of another volume is not":      {msg: msgStaging, since: t0.Add(-2 * time.Minute), match: func(ev nodeEvent) bool { return ev.Volume == "old" }, want: t0.Add(-time.Minute), wantOK: true},
		"none after since":                  {msg: msgStaging, since: t0.Add(time.Hour), match: ofV},
		"since itself counts":               {msg: msgStaged, since: t0.Add(time.Second), match: ofV, want: t0.Add(time.Second), wantOK: true},
		"no match for any event":            {msg: msgPublished, since: t0, match: ofV},
		"before since, the earliest is not": {msg: msgStaging, since: t0.Add(-30 * time.Second), match: ofV, want: t0.Add(-time.Second), wantOK: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok := firstEvent(events, tc.msg, tc.since, tc.match)
			if ok != tc.wantOK || !got.Equal(tc.want) {
				t.Errorf("firstEvent = %v, %v; want %v, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestPodClaim(t *testing.T) {
	pod := func(vols ...corev1.Volume) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{Volumes: vols}}
	}
	claim := corev1.Volume{Name: "fluent-pvc", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}}
	eph := corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{}}}
	other := corev1.Volume{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	cases := map[string]struct {
		pod  *corev1.Pod
		want string
	}{
		"a claim (c, d, e)":              {pod: pod(other, claim), want: "c"},
		"a generic ephemeral volume (b)": {pod: pod(eph), want: "p-data"},
		"no volume (a)":                  {pod: pod(), want: ""},
		"neither":                        {pod: pod(other), want: ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := podClaim(tc.pod); got != tc.want {
				t.Errorf("podClaim = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestSplitOf(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 19, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// A pod of d: bound at 70 ms, its volume attached 8 s after its
	// VolumeAttachment, staged (formatted) for 2 s, Running 400 ms after
	// its publish.
	hit := volumeSteps{
		created: at(0), returned: at(60), bound: at(70),
		attachSeen: at(100), attached: at(8100),
		stageStart: at(8700), staged: at(10700), published: at(10710),
		running: at(11110),
	}
	nan := math.NaN()
	type want struct{ toAttach, attach, toStage, stage, publish, stagePublish, start float64 }
	cases := map[string]struct {
		steps []volumeSteps
		want  want
	}{
		"a pod with a volume": {
			steps: []volumeSteps{hit},
			want:  want{0.03, 8, 0.6, 2, 0.01, 2.61, 0.4},
		},
		"a pod without a volume: only the container start, from bound": {
			steps: []volumeSteps{{created: at(0), returned: at(10), bound: at(15), running: at(480)}},
			want:  want{nan, nan, nan, nan, nan, nan, 0.465},
		},
		"a step not seen is left out, the others kept": {
			steps: []volumeSteps{func() volumeSteps { s := hit; s.stageStart, s.staged = time.Time{}, time.Time{}; return s }()},
			want:  want{0.03, 8, nan, nan, nan, 2.61, 0.4},
		},
		"a step the informer saw late counts as 0": {
			steps: []volumeSteps{func() volumeSteps { s := hit; s.attached = at(8800); return s }()},
			want:  want{0.03, 8.7, 0, 2, 0.01, 1.91, 0.4},
		},
		"p50 over pods (nearest rank)": {
			steps: []volumeSteps{hit, func() volumeSteps {
				s := hit
				s.attached, s.stageStart, s.staged, s.published, s.running = at(9100), at(9700), at(11700), at(11710), at(12110)
				return s
			}(), func() volumeSteps {
				s := hit
				s.attached, s.stageStart, s.staged, s.published, s.running = at(10100), at(10700), at(12700), at(12710), at(13110)
				return s
			}()},
			want: want{0.03, 9, 0.6, 2, 0.01, 2.61, 0.4},
		},
		"no pods": {want: want{nan, nan, nan, nan, nan, nan, nan}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			sp := splitOf(tc.steps)
			for _, c := range []struct {
				name      string
				got, want float64
			}{
				{"to attach", sp.ToAttach.P50, tc.want.toAttach}, {"attach", sp.Attach.P50, tc.want.attach},
				{"to stage", sp.ToStage.P50, tc.want.toStage}, {"stage", sp.Stage.P50, tc.want.stage},
				{"publish", sp.Publish.P50, tc.want.publish}, {"stage + publish", sp.StagePublish.P50, tc.want.stagePublish},
				{"container start", sp.ContainerStart.P50, tc.want.start},
			} {
				if math.IsNaN(c.want) != math.IsNaN(c.got) || (!math.IsNaN(c.want) && math.Abs(c.got-c.want) > 1e-9) {
					t.Errorf("%s p50 = %v, want %v", c.name, c.got, c.want)
				}
			}
		})
	}
}

func TestAttachTimeline(t *testing.T) {
	va := func(uid, pv string, attached bool) *storagev1.VolumeAttachment {
		return &storagev1.VolumeAttachment{
			ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid)},
			Spec:       storagev1.VolumeAttachmentSpec{NodeName: "real-0", Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To(pv)}},
			Status:     storagev1.VolumeAttachmentStatus{Attached: attached},
		}
	}
	tl := newAttachTimeline()
	tl.observe(va("1", "pv-a", false))
	before := time.Now()
	tl.observe(va("1", "pv-a", true))
	tl.observe(va("1", "pv-a", true)) // a later event keeps the first sight
	tl.observe(va("2", "pv-b", false))
	tl.observe(&storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{UID: "3"}}) // an inline volume's: no PV
	// pv-a detached and attached again: a new VolumeAttachment.
	again := time.Now()
	tl.observe(va("4", "pv-a", false))

	cases := map[string]struct {
		pv           string
		since        time.Time
		wantUID      string
		wantAttached bool
	}{
		"the first attachment of a PV":               {pv: "pv-a", since: time.Time{}, wantUID: "1", wantAttached: true},
		"an attachment after since, not the earlier": {pv: "pv-a", since: again, wantUID: "4"},
		"not attached yet":                           {pv: "pv-b", since: time.Time{}, wantUID: "2"},
		"none":                                       {pv: "pv-c", since: time.Time{}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok := tl.first(tc.pv, tc.since)
			if ok != (tc.wantUID != "") {
				t.Fatalf("first(%s) found %v, want %v", tc.pv, ok, tc.wantUID != "")
			}
			if !ok {
				return
			}
			if want := tl.va[types.UID(tc.wantUID)].Seen; !got.Seen.Equal(want) {
				t.Errorf("first(%s) seen at %v, want VolumeAttachment %s's %v", tc.pv, got.Seen, tc.wantUID, want)
			}
			if got.Attached.IsZero() == tc.wantAttached {
				t.Errorf("first(%s) attached at %v, want attached %v", tc.pv, got.Attached, tc.wantAttached)
			}
			if tc.wantAttached && got.Attached.Before(before) {
				t.Errorf("attached at %v, before it was seen attached (%v)", got.Attached, before)
			}
		})
	}
}

func TestCSIMarkdown(t *testing.T) {
	run := func(mode string, p50, p99 float64) startupRun {
		return startupRun{Mode: mode, Stats: summary{N: 3, P50: p50, P99: p99}}
	}
	hit := run(modeHit, 11.2, 11.6)
	hit.Hits = 3
	hit.CreateCall, hit.ToScheduled = summary{N: 3, P50: 0.063}, summary{N: 3, P50: 0.01}
	hit.Split = &volumeSplit{
		ToAttach: summary{N: 3, P50: 0.031}, Attach: summary{N: 3, P50: 8.016}, ToStage: summary{N: 3, P50: 0.627},
		Stage: summary{N: 3, P50: 2.001}, Publish: summary{N: 3, P50: 0.009}, StagePublish: summary{N: 3, P50: 2.636},
		ContainerStart: summary{N: 3, P50: 0.406},
	}
	measured := &realNodeResult{N: 3, CSI: delaysOf(csiOptions), Startup: startupRuns{
		run(modePlain, 0.5, 0.6), run(modeEphemeral, 17.3, 17.9), run(modeMiss, 16.8, 18.6), hit, run(modeOwnClaim, 11, 11.6),
	}}
	cases := map[string]struct {
		csi  *realNodeResult
		want []string
	}{
		"measured": {
			csi: measured,
			want: []string{
				"## Start-up latency on a real node with CSI storage",
				"a volume takes 5s to create (and to delete), 8s to attach (and to detach), and 2s to format",
				"| d/e | 1.02× | 1.00× | n/a |",
				"| b/d | 1.54× | 1.54× | n/a |",
				"| c/d | 1.50× | 1.60× | n/a |",
				"| d/a | 22.40× | 19.33× | n/a |",
				"| d | operator, warm pool (hit) | 3 | 11.20 s |",
				"| d | 11.20 s | 63 ms | 10 ms | 31 ms | 8.02 s | 627 ms | 2.00 s | 9 ms | 2.64 s | 406 ms |",
				"| a | 500 ms | 0 ms | 0 ms | n/a | n/a | n/a | n/a | n/a | n/a | n/a |",
				"| real node, CSI: start-up d/e p50, sequential | ≤ 1.05 | 1.02× | PASS |",
				"(create 5s, attach 8s, format 2s); N=3 per mode",
			},
		},
		"skipped": {
			csi:  &realNodeResult{Skipped: "the CSI registration socket's path is too long"},
			want: []string{"| real node, CSI | skipped: the CSI registration socket's path is too long |", "| real node, CSI: start-up d/e p50, sequential | ≤ 1.05 | skipped: the CSI registration socket's path is too long | n/a |"},
		},
		"not run": {
			want: []string{"| real node, CSI | not run |", "| real node, CSI: start-up d/e p50, sequential | ≤ 1.05 | not measured | n/a |"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := &results{CSI: tc.csi}
			r.evaluateGoals()
			md := r.markdown("chart.svg")
			for _, w := range tc.want {
				if !strings.Contains(md, w) {
					t.Errorf("the markdown lacks %q:\n%s", w, md)
				}
			}
			if tc.csi == nil && strings.Contains(md, "with CSI storage") {
				t.Errorf("the markdown has a CSI section without a CSI tier")
			}
		})
	}
}
