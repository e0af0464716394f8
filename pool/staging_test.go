package pool

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/st-tech/fluent-pvc-operator/apis/objects"
	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

func TestStagingOn(t *testing.T) {
	class := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "disk"}, Provisioner: "disk.csi"}
	attach := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "disk.csi"}, Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(true)}}
	noAttach := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "disk.csi"}, Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(false)}}
	defaulted := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "disk.csi"}}
	cases := map[string]struct {
		setting v1alpha1.PoolStaging
		class   *storagev1.StorageClass
		driver  *storagev1.CSIDriver
		block   bool
		want    bool
	}{
		"auto, a driver that attaches":                   {setting: v1alpha1.PoolStagingAuto, class: class, driver: attach, want: true},
		"unset is auto":                                  {class: class, driver: attach, want: true},
		"auto, attachRequired defaulted":                 {setting: v1alpha1.PoolStagingAuto, class: class, driver: defaulted, want: true},
		"auto, a driver without attach":                  {setting: v1alpha1.PoolStagingAuto, class: class, driver: noAttach},
		"enabled, a driver without attach":               {setting: v1alpha1.PoolStagingEnabled, class: class, driver: noAttach, want: true},
		"enabled, not a CSI volume":                      {setting: v1alpha1.PoolStagingEnabled, class: class},
		"enabled, no class":                              {setting: v1alpha1.PoolStagingEnabled, driver: attach},
		"disabled":                                       {setting: v1alpha1.PoolStagingDisabled, class: class, driver: attach},
		"a block volume, which no holder mounts as a fs": {setting: v1alpha1.PoolStagingEnabled, class: class, driver: attach, block: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := StagingOn(tc.setting, tc.class, tc.driver, tc.block); got != tc.want {
				t.Errorf("StagingOn = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestNodeRoom(t *testing.T) {
	cases := map[string]struct {
		perNode, holders int
		allocatable      *int32
		attached         int
		want             int
	}{
		"no attach limit: the cap":                      {perNode: 8, holders: 3, want: 5},
		"the cap reached":                               {perNode: 8, holders: 8, want: 0},
		"over the cap (lowered): two must go":           {perNode: 2, holders: 4, want: -2},
		"staging off":                                   {perNode: 0, want: 0},
		"an empty node: half its slots":                 {perNode: 100, allocatable: ptr.To[int32](16), want: 8},
		"half of what other volumes leave":              {perNode: 100, allocatable: ptr.To[int32](16), attached: 10, want: 3},
		"holders' own attachments are not others'":      {perNode: 100, holders: 4, allocatable: ptr.To[int32](16), attached: 4, want: 4},
		"one slot free: it stays free":                  {perNode: 100, allocatable: ptr.To[int32](16), attached: 15, want: 0},
		"two slots free: one for a holder":              {perNode: 100, allocatable: ptr.To[int32](16), attached: 14, want: 1},
		"others filled the node after holders came":     {perNode: 100, holders: 3, allocatable: ptr.To[int32](16), attached: 16, want: -2},
		"8 holders, then 8 other volumes: 4 holders go": {perNode: 100, holders: 8, allocatable: ptr.To[int32](16), attached: 16, want: -4},
		"the cap is lower than half the free slots":     {perNode: 2, allocatable: ptr.To[int32](40), want: 2},
		"attachments not yet seen are taken as holders": {perNode: 100, holders: 2, allocatable: ptr.To[int32](8), attached: 0, want: 2},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := NodeRoom(tc.perNode, tc.holders, tc.allocatable, tc.attached); got != tc.want {
				t.Errorf("NodeRoom = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestPlanStaging(t *testing.T) {
	zoneOf := map[string]string{"a-0": "a", "a-1": "a", "b-0": "b"}
	zonal := func(name, zone, node string) StageClaim {
		return StageClaim{Name: name, Node: node, Reaches: func(n string) bool { return zoneOf[n] == zone }}
	}
	all := func(string) bool { return true }
	cases := map[string]struct {
		in   StageInput
		want StagePlan
		// wantRoom is the room left.
		wantRoom map[string]int
	}{
		"off: nothing staged": {
			in:   StageInput{Warm: []StageClaim{zonal("w1", "a", "a-0")}, Eligible: all, Room: map[string]int{"a-0": 8}},
			want: StagePlan{}, wantRoom: map[string]int{"a-0": 8},
		},
		"off: holders of warm PVCs go": {
			in: StageInput{Warm: []StageClaim{zonal("w1", "a", "a-0")}, Holders: []Holder{{Name: "w1-hold", Claim: "w1", Node: "a-0"}},
				Eligible: all, Room: map[string]int{"a-0": 8}},
			want: StagePlan{Delete: []string{"w1-hold"}}, wantRoom: map[string]int{"a-0": 8},
		},
		"a PVC named for a node is staged there": {
			in:   StageInput{On: true, Warm: []StageClaim{zonal("w1", "a", "a-1")}, Eligible: all, Room: map[string]int{"a-0": 8, "a-1": 1}},
			want: StagePlan{Create: []Stage{{Claim: "w1", Node: "a-1"}}, Staged: 1}, wantRoom: map[string]int{"a-0": 8, "a-1": 0},
		},
		"its node full: another node of its zone": {
			in:   StageInput{On: true, Warm: []StageClaim{zonal("w1", "a", "a-1")}, Eligible: all, Room: map[string]int{"a-0": 2, "a-1": 0, "b-0": 8}},
			want: StagePlan{Create: []Stage{{Claim: "w1", Node: "a-0"}}, Staged: 1}, wantRoom: map[string]int{"a-0": 1, "a-1": 0, "b-0": 8},
		},
		"no room in its zone: left unstaged": {
			in:   StageInput{On: true, Warm: []StageClaim{zonal("w1", "a", "")}, Eligible: all, Room: map[string]int{"a-0": 0, "b-0": 8}},
			want: StagePlan{Unstaged: 1}, wantRoom: map[string]int{"a-0": 0, "b-0": 8},
		},
		"an ineligible node takes none": {
			in: StageInput{On: true, Warm: []StageClaim{zonal("w1", "a", "a-0")}, Eligible: func(n string) bool { return n != "a-0" },
				Room: map[string]int{"a-0": 8, "a-1": 1}},
			want: StagePlan{Create: []Stage{{Claim: "w1", Node: "a-1"}}, Staged: 1}, wantRoom: map[string]int{"a-0": 8, "a-1": 0},
		},
		"demand first, then room": {
			in: StageInput{On: true, Warm: []StageClaim{zonal("w1", "a", ""), zonal("w2", "a", ""), zonal("w3", "a", "")}, Eligible: all,
				Room: map[string]int{"a-0": 8, "a-1": 3}, Demand: []DemandNode{{Name: "a-1", Claims: 2}}},
			want:     StagePlan{Create: []Stage{{Claim: "w1", Node: "a-1"}, {Claim: "w2", Node: "a-1"}, {Claim: "w3", Node: "a-0"}}, Staged: 3},
			wantRoom: map[string]int{"a-0": 7, "a-1": 1},
		},
		"a staged PVC keeps its holder": {
			in: StageInput{On: true, Warm: []StageClaim{zonal("w1", "a", "a-0"), zonal("w2", "a", "a-0")}, Holders: []Holder{{Name: "w1-hold", Claim: "w1", Node: "a-0"}},
				Eligible: all, Room: map[string]int{"a-0": 1}},
			want: StagePlan{Create: []Stage{{Claim: "w2", Node: "a-0"}}, Staged: 2}, wantRoom: map[string]int{"a-0": 0},
		},
		"a holder on a node that went away goes; its PVC waits for it": {
			in: StageInput{On: true, Warm: []StageClaim{zonal("w1", "a", "a-0")}, Holders: []Holder{{Name: "w1-hold", Claim: "w1", Node: "a-0"}},
				Eligible: func(n string) bool { return n != "a-0" }, Room: map[string]int{"a-1": 8}},
			want: StagePlan{Delete: []string{"w1-hold"}}, wantRoom: map[string]int{"a-1": 8},
		},
		"a holder being deleted: its PVC waits for it to go": {
			in: StageInput{On: true, Warm: []StageClaim{zonal("w1", "a", "a-0")}, Holders: []Holder{{Name: "w1-hold", Claim: "w1", Node: "a-0", Deleting: true}},
				Eligible: all, Room: map[string]int{"a-0": 8}},
			want: StagePlan{}, wantRoom: map[string]int{"a-0": 8},
		},
		"other volumes need a node's slots: its holders go, as many as it is over": {
			in: StageInput{On: true, Warm: []StageClaim{zonal("w1", "a", "a-0"), zonal("w2", "a", "a-0"), zonal("w3", "a", "a-0")},
				Holders:  []Holder{{Name: "w1-hold", Claim: "w1", Node: "a-0"}, {Name: "w2-hold", Claim: "w2", Node: "a-0"}, {Name: "w3-hold", Claim: "w3", Node: "a-0"}},
				Eligible: all, Room: map[string]int{"a-0": -2, "a-1": 4}},
			want: StagePlan{Delete: []string{"w1-hold", "w2-hold"}, Staged: 1}, wantRoom: map[string]int{"a-0": 0, "a-1": 4},
		},
		"a holder its node has no room for: the PVC is staged on another node": {
			in: StageInput{On: true, Warm: []StageClaim{zonal("w1", "a", "a-0")}, Holders: []Holder{{Name: "w1-hold", Claim: "w1", Node: "a-0", Unschedulable: true}},
				Eligible: all, Room: map[string]int{"a-0": 7, "a-1": 2}},
			want: StagePlan{Delete: []string{"w1-hold"}, Create: []Stage{{Claim: "w1", Node: "a-1"}}, Staged: 1}, wantRoom: map[string]int{"a-0": 7, "a-1": 1},
		},
		"a holder with no room, and no other node: it waits where it is": {
			in: StageInput{On: true, Warm: []StageClaim{zonal("w1", "b", "b-0")}, Holders: []Holder{{Name: "w1-hold", Claim: "w1", Node: "b-0", Unschedulable: true}},
				Eligible: all, Room: map[string]int{"b-0": 7}},
			want: StagePlan{Staged: 1}, wantRoom: map[string]int{"b-0": 7},
		},
		"holders of PVCs handed out are left to the holder reconciler": {
			in:   StageInput{On: false, Holders: []Holder{{Name: "w9-hold", Claim: "w9", Node: "a-0"}}, Eligible: all, Room: map[string]int{}},
			want: StagePlan{}, wantRoom: map[string]int{},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := PlanStaging(tc.in)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("PlanStaging (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantRoom, tc.in.Room, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("room left (-want +got):\n%s", diff)
			}
		})
	}
}

func TestHolderFate(t *testing.T) {
	now := fixtures.Epoch.Add(time.Hour)
	fpvc := fixtures.MakeFluentPVC("f").Obj()
	warm := fixtures.Claim(fpvc, "ns", "f-abc", "h", v1alpha1.CheckoutHit, now)
	warm = fixtures.Returned(warm)
	warm.UID = "warm-uid"
	holder := objects.HolderPod("f", warm, "n1", "pause", "")
	holder.Spec.NodeName, holder.Status.Phase = "n1", corev1.PodRunning
	checkedOut := func(ago time.Duration) *corev1.PersistentVolumeClaim {
		c := fixtures.CheckedOut(warm, now.Add(-ago))
		c.UID = warm.UID
		return c
	}
	pod := func(node string) *corev1.Pod { return fixtures.MakePod("app", "ns").NodeName(node).Obj() }
	unscheduled := fixtures.MakePod("app", "ns").Obj()
	unschedulable := fixtures.MakePod("app", "ns").Obj()
	unschedulable.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}
	other := warm.DeepCopy()
	other.UID = "other-uid"
	deleting := warm.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{Time: now}
	with := func(f func(*corev1.Pod)) *corev1.Pod {
		h := holder.DeepCopy()
		f(h)
		return h
	}
	// reserved is the PVC reserved ahead of its pod an hour ago.
	reserved := with2(checkedOut(time.Hour), func(c *corev1.PersistentVolumeClaim) {
		c.Annotations[v1alpha1.ReservedByAnnotationKey] = "sys/replica-a"
	})
	createdAgo := func(p *corev1.Pod, ago time.Duration) *corev1.Pod {
		p.CreationTimestamp = metav1.NewTime(now.Add(-ago))
		return p
	}
	cases := map[string]struct {
		holder      *corev1.Pod
		pvc         *corev1.PersistentVolumeClaim
		pod         *corev1.Pod
		bound       bool
		wantReason  string
		wantRecheck time.Duration
	}{
		"reserved ahead, no pod carries it: it stays":                                      {holder: holder, pvc: reserved},
		"reserved ahead, its binding made without a pod (taken back): it goes":             {holder: holder, pvc: reserved, bound: true, wantReason: HolderAbandoned},
		"reserved ahead and handed out, the pod created moments ago, not scheduled: waits": {holder: holder, pvc: reserved, pod: createdAgo(fixtures.MakePod("app", "ns").Obj(), time.Second), bound: true, wantRecheck: MinHolderRecheck},
		"reserved ahead and handed out, the pod on the holder's node":                      {holder: holder, pvc: reserved, pod: createdAgo(pod("n1"), time.Second), wantReason: HolderServed},
		"reserved ahead and handed out, no pod on a node within patience of its creation":  {holder: holder, pvc: reserved, pod: createdAgo(fixtures.MakePod("app", "ns").Obj(), HolderPatience), wantReason: HolderAbandoned},
		"warm: it stays": {holder: holder, pvc: warm},
		"warm, a pod labelled for it on a node: stays": {holder: holder, pvc: warm, pod: pod("n2")},
		"the PVC is gone":              {holder: holder, wantReason: HolderOrphaned},
		"the PVC is being deleted":     {holder: holder, pvc: deleting, wantReason: HolderOrphaned},
		"another PVC of the same name": {holder: holder, pvc: other, wantReason: HolderOrphaned},
		"preempted": {holder: with(func(h *corev1.Pod) {
			h.Status.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}}
		}), pvc: warm, wantReason: HolderEvicted},
		"evicted by the kubelet":                                                              {holder: with(func(h *corev1.Pod) { h.Status.Phase = corev1.PodFailed }), pvc: warm, wantReason: HolderEvicted},
		"handed out, the pod on the holder's node":                                            {holder: holder, pvc: checkedOut(time.Second), pod: pod("n1"), wantReason: HolderServed},
		"handed out, the pod on another node":                                                 {holder: holder, pvc: checkedOut(time.Second), pod: pod("n2"), wantReason: HolderMoved},
		"handed out, no pod yet: waits, looking again in a second":                            {holder: holder, pvc: checkedOut(time.Second), wantRecheck: MinHolderRecheck},
		"handed out, the pod not scheduled yet: looks again in a second":                      {holder: holder, pvc: checkedOut(10 * time.Second), pod: unscheduled, wantRecheck: MinHolderRecheck},
		"handed out, the pod unschedulable: looks again in a quarter of the wait":             {holder: holder, pvc: checkedOut(10 * time.Second), pod: unschedulable, wantRecheck: 2500 * time.Millisecond},
		"handed out, the pod unschedulable just after the admission: looks again in a second": {holder: holder, pvc: checkedOut(2 * time.Second), pod: unschedulable, wantRecheck: MinHolderRecheck},
		"handed out long ago, the pod unschedulable: looks again at most every 4 s":           {holder: holder, pvc: checkedOut(40 * time.Second), pod: unschedulable, wantRecheck: MaxHolderRecheck},
		"handed out, patience almost over: looks again as it ends":                            {holder: holder, pvc: checkedOut(HolderPatience - time.Second), pod: unschedulable, wantRecheck: time.Second},
		"handed out, no pod on a node within patience":                                        {holder: holder, pvc: checkedOut(HolderPatience), pod: unscheduled, wantReason: HolderAbandoned},
		"handed out, no pod at all a while after the admission: it came and went unrecorded":  {holder: holder, pvc: checkedOut(claim.PodWait), wantReason: HolderAbandoned},
		"handed out without an admission time":                                                {holder: holder, pvc: with2(checkedOut(0), func(c *corev1.PersistentVolumeClaim) { delete(c.Annotations, v1alpha1.AdmittedAtAnnotationKey) }), wantReason: HolderAbandoned},
		"handed out, then let go of without a pod coming":                                     {holder: holder, pvc: with2(checkedOut(0), func(c *corev1.PersistentVolumeClaim) { c.Finalizers = nil }), wantReason: HolderAbandoned},
		"its pod recorded and gone: it goes, not to hold the drain up":                        {holder: holder, pvc: with2(checkedOut(time.Second), func(c *corev1.PersistentVolumeClaim) { c.Annotations[v1alpha1.UsedByPodAnnotationKey] = "app/uid" }), wantReason: HolderAbandoned},
		"its pod recorded, not on a node yet: waits":                                          {holder: holder, pvc: with2(checkedOut(time.Second), func(c *corev1.PersistentVolumeClaim) { c.Annotations[v1alpha1.UsedByPodAnnotationKey] = "app/uid" }), pod: unscheduled, wantRecheck: MinHolderRecheck},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			reason, recheck := HolderFate(tc.holder, tc.pvc, tc.pod, tc.bound, now)
			if reason != tc.wantReason || recheck != tc.wantRecheck {
				t.Errorf("HolderFate = (%q, %s), want (%q, %s)", reason, recheck, tc.wantReason, tc.wantRecheck)
			}
		})
	}
}

func with2(c *corev1.PersistentVolumeClaim, f func(*corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
	c = c.DeepCopy()
	f(c)
	return c
}

func TestRank(t *testing.T) {
	pvc := func(name string) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name}}
	}
	holders := map[string]string{"here": "n1", "there": "n2", "scheduling": ""}
	holderNode := func(c string) (string, bool) { n, ok := holders[c]; return n, ok }
	fits := func(n string) bool { return n == "n1" }
	names := func(cs []*corev1.PersistentVolumeClaim) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.Name)
		}
		return out
	}
	cases := map[string]struct {
		cands  []string
		pinned bool
		want   []string
	}{
		"staged where the pod fits first, elsewhere last": {cands: []string{"there", "unstaged", "here"}, want: []string{"here", "unstaged", "there"}},
		"a holder not on a node ranks as unstaged":        {cands: []string{"scheduling", "unstaged", "here"}, want: []string{"here", "scheduling", "unstaged"}},
		"a pinned pod never takes another node's":         {cands: []string{"there", "unstaged"}, pinned: true, want: []string{"unstaged"}},
		"only another node's: a pinned pod misses":        {cands: []string{"there"}, pinned: true},
		"only another node's: others take it":             {cands: []string{"there"}, want: []string{"there"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var cands []*corev1.PersistentVolumeClaim
			for _, n := range tc.cands {
				cands = append(cands, pvc(n))
			}
			got := names(Rank(cands, holderNode, fits, tc.pinned))
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Rank (-want +got):\n%s", diff)
			}
		})
	}
}
