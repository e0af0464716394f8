package main

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/pool"
	"github.com/st-tech/fluent-pvc-operator/test/cluster"
	"github.com/st-tech/fluent-pvc-operator/webhook"
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
		created: at(0), returned: at(60), bound: at(70), claim: true,
		attachSeen: at(100), attached: at(8100),
		stageStart: at(8700), staged: at(10700), published: at(10710),
		running: at(11110),
	}
	// A staged hit of d: its volume attached and staged before the
	// create call; only the publish is left.
	prestaged := volumeSteps{
		created: at(0), returned: at(60), bound: at(70), claim: true, prestaged: true,
		published: at(150), running: at(550),
	}
	// A hit of g: its volume detached from another node, then attached,
	// staged (formatted) and published.
	moved := volumeSteps{
		created: at(0), returned: at(60), bound: at(70), claim: true, elsewhere: true, detached: at(8170),
		attachSeen: at(8270), attached: at(16270),
		stageStart: at(16870), staged: at(18870), published: at(18880),
		running: at(19280),
	}
	nan := math.NaN()
	type want struct {
		detach, toAttach, attach, toStage, stage, publish, stagePublish, toPublish, start float64
		prestaged, elsewhere                                                              int
	}
	cases := map[string]struct {
		steps []volumeSteps
		want  want
	}{
		"a pod with a volume": {
			steps: []volumeSteps{hit},
			want:  want{nan, 0.03, 8, 0.6, 2, 0.01, 2.61, 10.64, 0.4, 0, 0},
		},
		"a staged hit: no attach or stage, the publish from bound": {
			steps: []volumeSteps{prestaged},
			want:  want{nan, nan, nan, nan, nan, nan, nan, 0.08, 0.4, 1, 0},
		},
		"a hit staged elsewhere: the detach, then the rest": {
			steps: []volumeSteps{moved},
			want:  want{8.1, 8.2, 8, 0.6, 2, 0.01, 2.61, 18.81, 0.4, 0, 1},
		},
		"a pod without a volume: only the container start, from bound": {
			steps: []volumeSteps{{created: at(0), returned: at(10), bound: at(15), running: at(480)}},
			want:  want{nan, nan, nan, nan, nan, nan, nan, nan, 0.465, 0, 0},
		},
		"a step not seen is left out, the others kept": {
			steps: []volumeSteps{func() volumeSteps { s := hit; s.stageStart, s.staged = time.Time{}, time.Time{}; return s }()},
			want:  want{nan, 0.03, 8, nan, nan, nan, 2.61, 10.64, 0.4, 0, 0},
		},
		"a step the informer saw late counts as 0": {
			steps: []volumeSteps{func() volumeSteps { s := hit; s.attached = at(8800); return s }()},
			want:  want{nan, 0.03, 8.7, 0, 2, 0.01, 1.91, 10.64, 0.4, 0, 0},
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
			want: want{nan, 0.03, 9, 0.6, 2, 0.01, 2.61, 11.64, 0.4, 0, 0},
		},
		"no pods": {want: want{nan, nan, nan, nan, nan, nan, nan, nan, nan, 0, 0}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			sp := splitOf(tc.steps)
			for _, c := range []struct {
				name      string
				got, want float64
			}{
				{"detach", sp.Detach.P50, tc.want.detach},
				{"to attach", sp.ToAttach.P50, tc.want.toAttach}, {"attach", sp.Attach.P50, tc.want.attach},
				{"to stage", sp.ToStage.P50, tc.want.toStage}, {"stage", sp.Stage.P50, tc.want.stage},
				{"publish", sp.Publish.P50, tc.want.publish}, {"stage + publish", sp.StagePublish.P50, tc.want.stagePublish},
				{"bound to published", sp.ToPublish.P50, tc.want.toPublish}, {"container start", sp.ContainerStart.P50, tc.want.start},
			} {
				if math.IsNaN(c.want) != math.IsNaN(c.got) || (!math.IsNaN(c.want) && math.Abs(c.got-c.want) > 1e-9) {
					t.Errorf("%s p50 = %v, want %v", c.name, c.got, c.want)
				}
			}
			if sp.Prestaged != tc.want.prestaged || sp.Elsewhere != tc.want.elsewhere {
				t.Errorf("prestaged, elsewhere = %d, %d; want %d, %d", sp.Prestaged, sp.Elsewhere, tc.want.prestaged, tc.want.elsewhere)
			}
		})
	}
}

func TestAttachTimeline(t *testing.T) {
	va := func(uid, pv, node string, attached bool) *storagev1.VolumeAttachment {
		return &storagev1.VolumeAttachment{
			ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid)},
			Spec:       storagev1.VolumeAttachmentSpec{NodeName: node, Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To(pv)}},
			Status:     storagev1.VolumeAttachmentStatus{Attached: attached},
		}
	}
	tl := newAttachTimeline()
	tl.observe(va("1", "pv-a", "real-0", false), false)
	before := time.Now()
	tl.observe(va("1", "pv-a", "real-0", true), false)
	tl.observe(va("1", "pv-a", "real-0", true), false) // a later event keeps the first sight
	tl.observe(va("2", "pv-b", "real-0", false), false)
	tl.observe(&storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{UID: "3"}}, false) // an inline volume's: no PV
	// pv-c attached to a kwok node, then detached from it.
	tl.observe(va("5", "pv-c", "kwok-0", true), false)
	whileOnKwok := time.Now()
	tl.observe(toolscache.DeletedFinalStateUnknown{Obj: va("5", "pv-c", "kwok-0", true)}, true)
	// pv-a detached and attached again: a new VolumeAttachment.
	again := time.Now()
	tl.observe(va("4", "pv-a", "real-0", false), false)

	firsts := map[string]struct {
		pv, node     string
		since        time.Time
		wantUID      string
		wantAttached bool
	}{
		"the first attachment of a PV":               {pv: "pv-a", node: "real-0", since: time.Time{}, wantUID: "1", wantAttached: true},
		"an attachment after since, not the earlier": {pv: "pv-a", node: "real-0", since: again, wantUID: "4"},
		"not attached yet":                           {pv: "pv-b", node: "real-0", since: time.Time{}, wantUID: "2"},
		"none to that node":                          {pv: "pv-c", node: "real-0", since: time.Time{}},
		"none":                                       {pv: "pv-d", node: "real-0", since: time.Time{}},
	}
	for name, tc := range firsts {
		t.Run(name, func(t *testing.T) {
			got, ok := tl.first(tc.pv, tc.node, tc.since)
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

	ats := map[string]struct {
		pv, node string
		onNode   bool
		at       time.Time
		wantUID  string
	}{
		"attached to the node (a staged hit's)":             {pv: "pv-a", node: "real-0", onNode: true, at: whileOnKwok, wantUID: "1"},
		"not attached to another node":                      {pv: "pv-a", node: "real-0", at: whileOnKwok},
		"before it was attached":                            {pv: "pv-a", node: "real-0", onNode: true, at: before.Add(-time.Second)},
		"attached to another node (a moved hit's)":          {pv: "pv-c", node: "real-0", at: whileOnKwok, wantUID: "5"},
		"not after its deletion":                            {pv: "pv-c", node: "real-0", at: again},
		"never attached":                                    {pv: "pv-b", node: "real-0", onNode: true, at: again},
		"to the node, while it is attached only to another": {pv: "pv-c", node: "real-0", onNode: true, at: whileOnKwok},
	}
	for name, tc := range ats {
		t.Run(name, func(t *testing.T) {
			got, ok := tl.attachedAt(tc.pv, tc.node, tc.onNode, tc.at)
			if ok != (tc.wantUID != "") {
				t.Fatalf("attachedAt(%s, %s, %v) found %v, want %v", tc.pv, tc.node, tc.onNode, ok, tc.wantUID != "")
			}
			if ok && got != *tl.va[types.UID(tc.wantUID)] {
				t.Errorf("attachedAt = %+v, want VolumeAttachment %s's %+v", got, tc.wantUID, *tl.va[types.UID(tc.wantUID)])
			}
		})
	}
	if d := tl.va["5"].Deleted; d.Before(whileOnKwok) || d.After(again) {
		t.Errorf("pv-c's VolumeAttachment deleted at %v, want between %v and %v", d, whileOnKwok, again)
	}
}

func TestBusyAttachments(t *testing.T) {
	va := func(pv string, attached, deleting bool) storagev1.VolumeAttachment {
		a := storagev1.VolumeAttachment{
			Spec:   storagev1.VolumeAttachmentSpec{NodeName: "real-0", Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To(pv)}},
			Status: storagev1.VolumeAttachmentStatus{Attached: attached},
		}
		if deleting {
			a.DeletionTimestamp = &metav1.Time{Time: time.Now()}
		}
		return a
	}
	warm := func(pv string, deleting bool) corev1.PersistentVolumeClaim {
		c := corev1.PersistentVolumeClaim{Spec: corev1.PersistentVolumeClaimSpec{VolumeName: pv}}
		if deleting {
			c.DeletionTimestamp = &metav1.Time{Time: time.Now()}
		}
		return c
	}
	cases := map[string]struct {
		vas  []storagev1.VolumeAttachment
		warm []corev1.PersistentVolumeClaim
		want int
	}{
		"none":                                   {},
		"warm PVCs' volumes, attached: kept":     {vas: []storagev1.VolumeAttachment{va("pv-1", true, false), va("pv-2", true, false)}, warm: []corev1.PersistentVolumeClaim{warm("pv-1", false), warm("pv-2", false)}},
		"a warm PVC's volume still attaching":    {vas: []storagev1.VolumeAttachment{va("pv-1", false, false)}, warm: []corev1.PersistentVolumeClaim{warm("pv-1", false)}, want: 1},
		"a warm PVC's volume detaching":          {vas: []storagev1.VolumeAttachment{va("pv-1", true, true)}, warm: []corev1.PersistentVolumeClaim{warm("pv-1", false)}, want: 1},
		"a claimed PVC's volume":                 {vas: []storagev1.VolumeAttachment{va("pv-1", true, false), va("pv-9", true, false)}, warm: []corev1.PersistentVolumeClaim{warm("pv-1", false)}, want: 1},
		"a warm PVC being deleted keeps nothing": {vas: []storagev1.VolumeAttachment{va("pv-1", true, false)}, warm: []corev1.PersistentVolumeClaim{warm("pv-1", true)}, want: 1},
		"an inline volume's":                     {vas: []storagev1.VolumeAttachment{{Status: storagev1.VolumeAttachmentStatus{Attached: true}}}, want: 1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := busyAttachments(tc.vas, tc.warm); got != tc.want {
				t.Errorf("busyAttachments = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestAttachedTo(t *testing.T) {
	va := func(pv, node string, attached bool) storagev1.VolumeAttachment {
		return storagev1.VolumeAttachment{
			Spec:   storagev1.VolumeAttachmentSpec{NodeName: node, Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To(pv)}},
			Status: storagev1.VolumeAttachmentStatus{Attached: attached},
		}
	}
	pvc := func(pv string) corev1.PersistentVolumeClaim {
		return corev1.PersistentVolumeClaim{Spec: corev1.PersistentVolumeClaimSpec{VolumeName: pv}}
	}
	gone := pvc("pv-5")
	gone.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	vas := []storagev1.VolumeAttachment{va("pv-1", "kwok-0", true), va("pv-2", "kwok-0", false), va("pv-3", "real-0", true), va("pv-5", "kwok-0", true)}
	live, attached := attachedTo(vas, []corev1.PersistentVolumeClaim{pvc("pv-1"), pvc("pv-2"), pvc("pv-3"), pvc("pv-4"), pvc(""), gone}, "kwok-0")
	if live != 5 || attached != 1 {
		t.Errorf("attachedTo = %d live, %d attached; want 5, 1 (pv-1 only: pv-2 attaching, pv-3 on another node, pv-4 not attached)", live, attached)
	}
}

func TestMovedPod(t *testing.T) {
	p := (&env{real: true}).podFor(modeMoved, "bench-g-seq", "g-0")
	if got := p.Spec.NodeSelector[corev1.LabelHostname]; got != cluster.RealNodeName {
		t.Errorf("nodeSelector %s = %q, want %s", corev1.LabelHostname, got, cluster.RealNodeName)
	}
	if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		t.Errorf("a required node affinity, which the operator may take as pinned: %+v", a.NodeAffinity)
	}
	if !slices.ContainsFunc(p.Spec.Tolerations, func(tol corev1.Toleration) bool { return tol.ToleratesTaint(klog.Background(), &movedTaint, false) }) {
		t.Errorf("tolerations %v do not tolerate %v", p.Spec.Tolerations, movedTaint)
	}
	if p.Labels[v1alpha1.FluentPVCNameLabelKey] != fpvcMoved || p.Labels[measureLabelKey] != "true" {
		t.Errorf("labels %v, want FluentPVC %s and measured", p.Labels, fpvcMoved)
	}
}

func TestAddCounts(t *testing.T) {
	counts := func(hits, removed map[string]float64) *holderCounts {
		return &holderCounts{
			hits:    map[string]map[string]float64{fpvcHit: hits, fpvcUnstaged: {webhook.HitUnstaged: 100}},
			removed: map[string]map[string]float64{fpvcHit: removed},
		}
	}
	before := counts(map[string]float64{webhook.HitStaged: 2}, map[string]float64{pool.HolderServed: 2, pool.HolderAbandoned: 1})
	after := counts(map[string]float64{webhook.HitStaged: 10, webhook.HitUnstaged: 1}, map[string]float64{pool.HolderServed: 10, pool.HolderAbandoned: 1, pool.HolderEvicted: 1})
	cases := map[string]struct {
		mode          string
		before, after *holderCounts
		wantHits      map[string]int
		wantRemoved   map[string]int
	}{
		"d's FluentPVC only, each how shown, reasons that changed": {
			mode: modeHit, before: before, after: after,
			wantHits:    map[string]int{pool.HolderServed: 8, pool.HolderMoved: 0, webhook.HitUnstaged: 1},
			wantRemoved: map[string]int{pool.HolderServed: 8, pool.HolderEvicted: 1},
		},
		"a mode without a FluentPVC": {mode: modePlain, before: before, after: after},
		"not read":                   {mode: modeHit, before: nil, after: after},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			run := startupRun{Mode: tc.mode}
			run.addCounts(tc.before, tc.after)
			if diff := cmp.Diff(tc.wantHits, run.StagedHits); diff != "" {
				t.Errorf("StagedHits (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantRemoved, run.HoldersRemoved); diff != "" {
				t.Errorf("HoldersRemoved (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCSIMarkdown(t *testing.T) {
	run := func(mode string, p50, p99 float64) startupRun {
		return startupRun{Mode: mode, Stats: summary{N: 8, P50: p50, P99: p99}}
	}
	hit := run(modeHit, 0.6, 0.8)
	hit.Hits = 8
	hit.StagedHits = map[string]int{"served": 8, "moved": 0, "unstaged": 0}
	hit.HoldersRemoved = map[string]int{"served": 8}
	hit.CreateCall, hit.ToScheduled = summary{N: 8, P50: 0.063}, summary{N: 8, P50: 0.01}
	hit.Split = func() *volumeSplit {
		sp := splitOf(nil)
		sp.Prestaged = 8
		sp.ToPublish, sp.ContainerStart = summary{N: 8, P50: 0.081}, summary{N: 8, P50: 0.406}
		return &sp
	}()
	unstaged := run(modeUnstaged, 11.2, 11.6)
	unstaged.Hits = 8
	unstaged.StagedHits = map[string]int{"served": 0, "moved": 0, "unstaged": 8}
	unstaged.HoldersRemoved = map[string]int{}
	unstaged.CreateCall, unstaged.ToScheduled = summary{N: 8, P50: 0.063}, summary{N: 8, P50: 0.01}
	unstaged.Split = &volumeSplit{
		Detach: summary{P50: math.NaN()}, ToAttach: summary{N: 8, P50: 0.031}, Attach: summary{N: 8, P50: 8.016}, ToStage: summary{N: 8, P50: 0.627},
		Stage: summary{N: 8, P50: 2.001}, Publish: summary{N: 8, P50: 0.009}, StagePublish: summary{N: 8, P50: 2.636},
		ToPublish: summary{N: 8, P50: 10.7}, ContainerStart: summary{N: 8, P50: 0.406},
	}
	moved := run(modeMoved, 19.5, 20.5)
	moved.StagedHits = map[string]int{"served": 0, "moved": 8, "unstaged": 0}
	moved.Split = func() *volumeSplit {
		sp := splitOf(nil)
		sp.Elsewhere = 8
		return &sp
	}()
	measured := &realNodeResult{N: 8, CSI: delaysOf(csiOptions), AttachSlots: 16, PoolFillSeconds: 6.1, PoolStagedSeconds: 16.2, Startup: startupRuns{
		run(modePlain, 0.5, 0.6), run(modeEphemeral, 17.3, 17.9), run(modeMiss, 16.8, 18.6), hit, run(modeOwnClaim, 11, 11.6), unstaged, moved,
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
				"the real node is tainted `bench.fluent-pvc-operator/no-holders` and kwok node kwok-zone-a-0",
				"filled in 6.1s and staged on real-0 16.2s after its creation",
				"which takes 16 of the driver's, and the scheduler does not preempt a holder for an attach slot",
				"the node has room for 8 more volumes, and b beside c need 16",
				"| d/a | staged hit / no volume | 1.20× | 1.33× | n/a |",
				"| b/d | generic ephemeral / staged hit | 28.83× | 22.37× | n/a |",
				"| e/d | own Bound PVC / staged hit | 18.33× | 14.50× | n/a |",
				"| f/a | control: hit without staging / no volume | 22.40× | 19.33× | n/a |",
				"| b/f | control: generic ephemeral / hit without staging | 1.54× | 1.54× | n/a |",
				"| e/f | control: own Bound PVC / hit without staging | 0.98× | 1.00× | n/a |",
				"| f/d | what staging saves: hit without / with staging | 18.67× | 14.50× | n/a |",
				"| g/f | hit staged elsewhere (moved) / hit without staging | 1.74× | 1.77× | n/a |",
				"| d | operator, warm pool (hit) | 8 | 600 ms | ",
				"| 8 / 0 | 8 / 0 / 0 | served 8 |",
				"| f | the operator, warm pool with staging Disabled (hit, attached on demand) | 8 | 11.20 s |",
				"| 8 / 0 | 0 / 0 / 8 | none |",
				"| 0 / 0 | 0 / 8 / 0 | none |",
				"| d | 600 ms | 63 ms | 10 ms | n/a | n/a | n/a | n/a | n/a | n/a | n/a | 81 ms | 406 ms | 8 staged, 0 elsewhere |",
				"| f | 11.20 s | 63 ms | 10 ms | n/a | 31 ms | 8.02 s | 627 ms | 2.00 s | 9 ms | 2.64 s | 10.70 s | 406 ms |  |",
				"| g | 19.50 s |",
				"0 staged, 8 elsewhere |",
				"| a | 500 ms | 0 ms | 0 ms | n/a | n/a | n/a | n/a | n/a | n/a | n/a | n/a | n/a |  |",
				"| real node, CSI: start-up d/a p50, sequential | ≤ 1.30 | 1.20× | PASS |",
				"| real node, CSI: start-up d/a p99, sequential | ≤ 1.50 | 1.33× | PASS |",
				"| real node, CSI: start-up b/d p50, sequential | ≥ 10 | 28.83× | PASS |",
				"| real node, CSI: start-up e/d p50, sequential | ≥ 10 | 18.33× | PASS |",
				"| real node, CSI: start-up f/e p50, sequential | ≤ 1.05 | 1.02× | PASS |",
				"(create 5s, attach 8s, format 2s); N=8 per mode",
			},
		},
		"skipped": {
			csi: &realNodeResult{Skipped: "the CSI registration socket's path is too long"},
			want: []string{
				"| real node, CSI | skipped: the CSI registration socket's path is too long |",
				"| real node, CSI: start-up d/a p50, sequential | ≤ 1.30 | skipped: the CSI registration socket's path is too long | n/a |",
				"| real node, CSI: start-up f/e p50, sequential | ≤ 1.05 | skipped: the CSI registration socket's path is too long | n/a |",
			},
		},
		"not run": {
			want: []string{"| real node, CSI | not run |", "| real node, CSI: start-up d/a p50, sequential | ≤ 1.30 | not measured | n/a |"},
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

func TestCSIOperatorArgs(t *testing.T) {
	cases := map[string]struct {
		args []string
		n    int
		want []string
	}{
		"the default stages a pool of n":    {args: []string{"--pprof-bind-address=:6060"}, n: 8, want: []string{"--pprof-bind-address=:6060"}},
		"a larger pool raises it":           {args: []string{"--pprof-bind-address=:6060"}, n: 12, want: []string{"--pprof-bind-address=:6060", "--stage-per-node=12"}},
		"a value given is kept":             {args: []string{"--stage-per-node=4"}, n: 12, want: []string{"--stage-per-node=4"}},
		"a value given as two args is kept": {args: []string{"-stage-per-node", "20"}, n: 12, want: []string{"-stage-per-node", "20"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, csiOperatorArgs(tc.args, tc.n)); diff != "" {
				t.Errorf("csiOperatorArgs (-want +got):\n%s", diff)
			}
		})
	}
}
