package controllers

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/st-tech/fluent-pvc-operator/apis/objects"
	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/pool"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

// TestPlanPool plans a FluentPVC's pool from observed values alone: which
// namespaces hold a pool, how many warm PVCs each gets, and what the
// status reports.
func TestPlanPool(t *testing.T) {
	now := fixtures.Epoch.Add(time.Hour)
	opts := Options{PoolIdleNamespaceTTL: 24 * time.Hour}
	listed := func(size int32, namespaces ...string) *v1alpha1.FluentPVC {
		return fixtures.MakeFluentPVC("f").PoolSize(size).Mutate(func(f *v1alpha1.FluentPVC) { f.Spec.Pool.Namespaces = namespaces }).Obj()
	}
	selecting := fixtures.MakeFluentPVC("f").PoolSize(1).Mutate(func(f *v1alpha1.FluentPVC) {
		f.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"logs": "on"}}
	}).Obj()
	// warm is a Bound warm PVC of f in ns, usable on any node, made from
	// f's template unless hash says otherwise.
	warm := func(f *v1alpha1.FluentPVC, ns, name, hash string) corev1.PersistentVolumeClaim {
		c := claim.NewWarm(f, ns, pool.TemplateHash(&f.Spec.PVCSpecTemplate), "").Object
		c.Name, c.Status.Phase = name, corev1.ClaimBound
		c.Annotations = map[string]string{v1alpha1.NodeAffinityAnnotationKey: ""}
		if hash != "" {
			c.Labels[v1alpha1.TemplateHashLabelKey] = hash
		}
		return *c
	}
	onVolume := func(c corev1.PersistentVolumeClaim, pv string) corev1.PersistentVolumeClaim {
		c.Spec.VolumeName = pv
		return c
	}
	existing := func(names ...string) map[string]map[string]string {
		out := map[string]map[string]string{}
		for _, n := range names {
			out[n] = map[string]string{}
		}
		return out
	}
	type nsWant struct {
		namespace string
		kept      bool
		create    int
		delete    []string
		warm      int32
	}
	cases := map[string]struct {
		f           *v1alpha1.FluentPVC
		o           poolObserved
		want        []nsWant
		wantMissing []string
		wantRows    []string
		// wantReserved is the status rows' reserved counts, by namespace,
		// when set.
		wantReserved map[string]int32
	}{
		"claims reserved ahead count as warm, and the status shows them": {
			f:            listed(3, "a"),
			o:            poolObserved{warm: []corev1.PersistentVolumeClaim{warm(listed(3, "a"), "a", "w1", "")}, namespaces: existing("a"), reserved: map[string]int{"a": 2}},
			want:         []nsWant{{namespace: "a", kept: true, warm: 1}},
			wantRows:     []string{"a"},
			wantReserved: map[string]int32{"a": 2},
		},
		"a listed namespace short of warm PVCs: the rest created at once": {
			f:        listed(3, "a"),
			o:        poolObserved{warm: []corev1.PersistentVolumeClaim{warm(listed(3, "a"), "a", "w1", "")}, namespaces: existing("a")},
			want:     []nsWant{{namespace: "a", kept: true, create: 2, warm: 1}},
			wantRows: []string{"a"},
		},
		"a listed namespace that does not exist: reported, nothing created": {
			f:           listed(3, "a", "b"),
			o:           poolObserved{namespaces: existing("a")},
			want:        []nsWant{{namespace: "a", kept: true, create: 3}},
			wantMissing: []string{"b"},
			wantRows:    []string{"a"},
		},
		"a stale warm PVC: replaced": {
			f:        listed(1, "a"),
			o:        poolObserved{warm: []corev1.PersistentVolumeClaim{warm(listed(1, "a"), "a", "old", "other")}, namespaces: existing("a")},
			want:     []nsWant{{namespace: "a", kept: true, create: 1, delete: []string{"old"}}},
			wantRows: []string{"a"},
		},
		"a warm PVC whose volume is stranded on a gone node: replaced": {
			f: listed(1, "a"),
			o: poolObserved{
				warm:       []corev1.PersistentVolumeClaim{onVolume(warm(listed(1, "a"), "a", "w1", ""), "pv-1")},
				namespaces: existing("a"),
				stranded:   map[string]string{"pv-1": "gone"},
			},
			want:     []nsWant{{namespace: "a", kept: true, create: 1, delete: []string{"w1"}}},
			wantRows: []string{"a"},
		},
		"a namespace being deleted: nothing created there, which the API server would refuse": {
			f:        listed(3, "a"),
			o:        poolObserved{namespaces: existing("a"), terminating: map[string]bool{"a": true}},
			want:     []nsWant{{namespace: "a", kept: true}},
			wantRows: []string{"a"},
		},
		"pool turned off: the namespace is emptied and has no row": {
			f:    listed(0, "a"),
			o:    poolObserved{warm: []corev1.PersistentVolumeClaim{warm(listed(0, "a"), "a", "w1", "")}, namespaces: existing("a")},
			want: []nsWant{{namespace: "a", delete: []string{"w1"}}},
		},
		"learned namespaces: only those the namespaceSelector selects": {
			f: selecting,
			o: poolObserved{
				lastAdmission: map[string]time.Time{"on": now, "off": now},
				namespaces:    map[string]map[string]string{"on": {"logs": "on"}, "off": {}},
			},
			want:     []nsWant{{namespace: "on", kept: true, create: 1}},
			wantRows: []string{"on"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pp := planPool(tc.f, tc.o, now, opts)
			var got []nsWant
			for _, np := range pp.namespaces {
				got = append(got, nsWant{namespace: np.namespace, kept: np.kept, create: np.plan.Create, delete: np.plan.Delete, warm: np.plan.Warm})
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(nsWant{}), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("namespace plans (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantMissing, pp.result.missing, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("missing (-want +got):\n%s", diff)
			}
			var rows []string
			for _, r := range pp.result.namespaces {
				rows = append(rows, r.Namespace)
			}
			if diff := cmp.Diff(tc.wantRows, rows, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("status rows (-want +got):\n%s", diff)
			}
			if tc.wantReserved != nil {
				got := map[string]int32{}
				for _, r := range pp.result.namespaces {
					got[r.Namespace] = r.Reserved
				}
				if diff := cmp.Diff(tc.wantReserved, got); diff != "" {
					t.Errorf("status rows' reserved (-want +got):\n%s", diff)
				}
			}
		})
	}
}

// TestPlanPoolStaging plans the holders of a staged pool: a warm PVC
// without one gets one where there is room, a stale one being replaced
// gets none, a holder of a PVC handed out is left to the holder
// reconciler, and the status counts the running holders.
func TestPlanPoolStaging(t *testing.T) {
	now := fixtures.Epoch.Add(time.Hour)
	f := fixtures.MakeFluentPVC("f").PoolSize(3).Mutate(func(f *v1alpha1.FluentPVC) { f.Spec.Pool.Namespaces = []string{"a"} }).Obj()
	hash := pool.TemplateHash(&f.Spec.PVCSpecTemplate)
	warm := func(name, hash string) corev1.PersistentVolumeClaim {
		c := claim.NewWarm(f, "a", hash, "").Object
		c.Name, c.UID, c.Status.Phase = name, "uid-"+types.UID(name), corev1.ClaimBound
		c.Annotations = map[string]string{v1alpha1.NodeAffinityAnnotationKey: ""}
		return *c
	}
	w1, w2, stale := warm("w1", hash), warm("w2", hash), warm("stale", "other")
	running := func(c corev1.PersistentVolumeClaim, node string) corev1.Pod {
		h := objects.HolderPod(f.Name, &c, node, "pause", "")
		h.Spec.NodeName, h.Status.Phase = node, corev1.PodRunning
		return *h
	}
	handedOut := warm("gone", hash)
	o := poolObserved{
		warm:       []corev1.PersistentVolumeClaim{w1, w2, stale},
		namespaces: map[string]map[string]string{"a": {}},
		nodes:      map[string]*corev1.Node{"n1": fixtures.MakeNode("n1").Obj(), "n2": fixtures.MakeNode("n2").Obj()},
		staging:    true,
		holders:    []corev1.Pod{running(w1, "n1"), running(handedOut, "n1")},
		room:       map[string]int{"n1": 1, "n2": 8},
	}
	pp := planPool(f, o, now, Options{PoolIdleNamespaceTTL: time.Hour})
	if len(pp.namespaces) != 1 {
		t.Fatalf("%d namespace plans, want 1", len(pp.namespaces))
	}
	want := pool.StagePlan{Create: []pool.Stage{{Claim: "w2", Node: "n2"}}, Staged: 2}
	if diff := cmp.Diff(want, pp.namespaces[0].stage, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("staging (-want +got):\n%s", diff)
	}
	if got := pp.result.namespaces[0].Staged; got != 1 {
		t.Errorf("status staged %d, want 1 (w1's running holder)", got)
	}
	if got := pp.namespaces[0].size; got != 3 {
		t.Errorf("target size %d, want the pool's 3 (fluentpvc_pool_target)", got)
	}
}

// TestPlanPoolStagingNoRoom: a warm PVC left unstaged for lack of room is
// planned again soon. Room comes back as other volumes detach, and nothing
// the FluentPVC controller watches says so: without the recheck, a pool
// refilled while its old claims detached stayed half staged.
func TestPlanPoolStagingNoRoom(t *testing.T) {
	f := fixtures.MakeFluentPVC("f").PoolSize(1).Mutate(func(f *v1alpha1.FluentPVC) { f.Spec.Pool.Namespaces = []string{"a"} }).Obj()
	c := claim.NewWarm(f, "a", pool.TemplateHash(&f.Spec.PVCSpecTemplate), "").Object
	c.Name, c.Status.Phase = "w1", corev1.ClaimBound
	c.Annotations = map[string]string{v1alpha1.NodeAffinityAnnotationKey: ""}
	o := poolObserved{
		warm:       []corev1.PersistentVolumeClaim{*c},
		namespaces: map[string]map[string]string{"a": {}},
		nodes:      map[string]*corev1.Node{"n1": fixtures.MakeNode("n1").Obj()},
		staging:    true, room: map[string]int{"n1": 0},
	}
	pp := planPool(f, o, fixtures.Epoch, Options{PoolIdleNamespaceTTL: time.Hour})
	if got := pp.result.requeueAfter; got != unwatchedRecheck {
		t.Errorf("requeue after %s, want %s", got, unwatchedRecheck)
	}
}

// TestPlanPoolStagingPendingRequest: a warm PVC whose recent holder
// request has no holder carrying it in the cache gets no second request
// (which would lift the first one's hold on checkouts while its holder
// may still be created) until a holder carrying it shows, or the request
// is older than its TTL; the pool looks again soon meanwhile.
func TestPlanPoolStagingPendingRequest(t *testing.T) {
	now := fixtures.Epoch.Add(time.Hour)
	f := fixtures.MakeFluentPVC("f").PoolSize(1).Mutate(func(f *v1alpha1.FluentPVC) { f.Spec.Pool.Namespaces = []string{"a"} }).Obj()
	hash := pool.TemplateHash(&f.Spec.PVCSpecTemplate)
	request := func(at time.Time) string { return at.UTC().Format(time.RFC3339Nano) }
	for name, tc := range map[string]struct {
		request, holder string // holder: the request its holder carries; "-": no holder
		create          bool
	}{
		"no request":                         {holder: "-", create: true},
		"a recent request, no holder":        {request: request(now.Add(-time.Second)), holder: "-"},
		"a request past its TTL, no holder":  {request: request(now.Add(-claim.HolderAdmitWindow - claim.AdmissionBound)), holder: "-", create: true},
		"a recent request, its holder there": {request: request(now.Add(-time.Second)), holder: request(now.Add(-time.Second))},
	} {
		t.Run(name, func(t *testing.T) {
			c := claim.NewWarm(f, "a", hash, "").Object
			c.Name, c.UID, c.Status.Phase = "w1", "uid-w1", corev1.ClaimBound
			c.Annotations = map[string]string{v1alpha1.NodeAffinityAnnotationKey: ""}
			if tc.request != "" {
				c.Annotations[v1alpha1.HolderRequestAnnotationKey] = tc.request
			}
			o := poolObserved{
				warm:       []corev1.PersistentVolumeClaim{*c},
				namespaces: map[string]map[string]string{"a": {}},
				nodes:      map[string]*corev1.Node{"n1": fixtures.MakeNode("n1").Obj()},
				staging:    true,
				room:       map[string]int{"n1": 8},
			}
			if tc.holder != "-" {
				h := objects.HolderPod(f.Name, c, "n1", "pause", "")
				h.Annotations[v1alpha1.HolderRequestAnnotationKey] = tc.holder
				o.holders = []corev1.Pod{*h}
			}
			pp := planPool(f, o, now, Options{PoolIdleNamespaceTTL: time.Hour})
			if got := len(pp.namespaces[0].stage.Create) == 1; got != tc.create {
				t.Errorf("a holder planned: %v, want %v (%+v)", got, tc.create, pp.namespaces[0].stage)
			}
			if pending := tc.request != "" && tc.holder == "-" && !tc.create; pending && pp.result.requeueAfter == 0 {
				t.Error("no recheck planned while a request is pending")
			}
		})
	}
}

// TestPoolOpsRefusedCreate: when the API server refuses a warm PVC's
// create (a full quota, say), the spares being moved are deleted, so that
// their replacements fit at the next try; with nothing moving, nothing is
// deleted.
func TestPoolOpsRefusedCreate(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := fixtures.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	f := fixtures.MakeFluentPVC("f").PoolSize(2).Obj()
	hash := pool.TemplateHash(&f.Spec.PVCSpecTemplate)
	spare := claim.NewWarm(f, "ns", hash, "").Object
	spare.Name, spare.Status.Phase = "spare", corev1.ClaimBound
	quota := apierrors.NewForbidden(corev1.Resource("persistentvolumeclaims"), "", errors.New("exceeded quota: pvcs, requested: persistentvolumeclaims=1, used: persistentvolumeclaims=2, limited: persistentvolumeclaims=2"))
	for name, tc := range map[string]struct {
		plan        pool.Plan
		refuse      error
		wantDeleted bool
	}{
		"refused while a spare moves: the spare goes":  {plan: pool.Plan{Create: 1, Moved: []string{"spare"}, Leaving: []string{"spare"}}, refuse: quota, wantDeleted: true},
		"refused with nothing moving: nothing deleted": {plan: pool.Plan{Create: 1}, refuse: quota},
		"made: the spare stays until it is Bound":      {plan: pool.Plan{Create: 1, Moved: []string{"spare"}, Leaving: []string{"spare"}}},
	} {
		t.Run(name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(spare.DeepCopy()).WithInterceptorFuncs(interceptor.Funcs{
				Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
					if tc.refuse != nil {
						return tc.refuse
					}
					return c.Create(ctx, obj, opts...)
				}}).Build()
			live := &corev1.PersistentVolumeClaim{}
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(spare), live); err != nil {
				t.Fatal(err)
			}
			r := NewPoolReconciler(c, c, clocktesting.NewFakePassiveClock(fixtures.Epoch), Options{})
			np := namespacePlan{namespace: "ns", plan: tc.plan, kept: true, size: 2}
			pp := poolPlan{hash: hash, replaced: map[string]string{}}
			err := runParallel(r.poolOps(context.Background(), f, np, pp, poolObserved{}, map[string]*corev1.PersistentVolumeClaim{"spare": live}, nil), 1)
			if (err != nil) != (tc.refuse != nil) {
				t.Errorf("error = %v, want one: %v", err, tc.refuse != nil)
			}
			gone := apierrors.IsNotFound(c.Get(context.Background(), client.ObjectKeyFromObject(spare), &corev1.PersistentVolumeClaim{}))
			if gone != tc.wantDeleted {
				t.Errorf("spare deleted = %v, want %v", gone, tc.wantDeleted)
			}
		})
	}
}

func underLease(holder string) func(*corev1.PersistentVolumeClaim) {
	return func(c *corev1.PersistentVolumeClaim) {
		c.Annotations[v1alpha1.ReservedByAnnotationKey] = holder
		delete(c.Annotations, v1alpha1.ReservedUntilAnnotationKey)
	}
}

func TestReservedStock(t *testing.T) {
	now := fixtures.Epoch
	f := fixtures.MakeFluentPVC("f").PoolSize(1).Obj()
	reserved := func(ns, name, hash string, until time.Duration, edit func(*corev1.PersistentVolumeClaim)) corev1.PersistentVolumeClaim {
		c := fixtures.Claim(f, ns, name, hash, v1alpha1.CheckoutHit, now.Add(-time.Minute))
		c.Annotations[v1alpha1.ReservedByAnnotationKey] = "replica-a"
		c.Annotations[v1alpha1.ReservedUntilAnnotationKey] = now.Add(until).Format(time.RFC3339Nano)
		if edit != nil {
			edit(c)
		}
		return *c
	}
	used := func(c *corev1.PersistentVolumeClaim) { c.Annotations[v1alpha1.UsedByPodAnnotationKey] = "p/p-uid" }
	deleting := func(c *corev1.PersistentVolumeClaim) { c.DeletionTimestamp = &metav1.Time{Time: now} }
	cases := map[string]struct {
		claimed []corev1.PersistentVolumeClaim
		want    map[string]int
		recheck time.Duration
	}{
		"none":                    {},
		"two and one elsewhere":   {claimed: []corev1.PersistentVolumeClaim{reserved("ns", "a", "h", time.Minute, nil), reserved("ns", "b", "h", 2*time.Minute, nil), reserved("other", "c", "h", 3*time.Minute, nil)}, want: map[string]int{"ns": 2, "other": 1}, recheck: time.Minute},
		"over":                    {claimed: []corev1.PersistentVolumeClaim{reserved("ns", "a", "h", 0, nil)}},
		"recording its pod":       {claimed: []corev1.PersistentVolumeClaim{reserved("ns", "a", "h", time.Minute, used)}},
		"of an older template":    {claimed: []corev1.PersistentVolumeClaim{reserved("ns", "a", "old", time.Minute, nil)}},
		"being deleted":           {claimed: []corev1.PersistentVolumeClaim{reserved("ns", "a", "h", time.Minute, deleting)}},
		"a claim of an admission": {claimed: []corev1.PersistentVolumeClaim{*fixtures.Claim(f, "ns", "a", "h", v1alpha1.CheckoutHit, now)}},
		"ending far ahead: counted, rechecked within the longest reservation": {
			claimed: []corev1.PersistentVolumeClaim{reserved("ns", "a", "h", 24*time.Hour, nil)}, want: map[string]int{"ns": 1}, recheck: claim.MaxReservation},
		"held under a live Lease": {
			claimed: []corev1.PersistentVolumeClaim{reserved("ns", "a", "h", 0, underLease("sys/live")), reserved("ns", "b", "h", 0, underLease("sys/live"))}, want: map[string]int{"ns": 2}, recheck: 30 * time.Second},
		"held under a Lease that is over": {claimed: []corev1.PersistentVolumeClaim{reserved("ns", "a", "h", 0, underLease("sys/over"))}},
		"held under a Lease that is gone": {claimed: []corev1.PersistentVolumeClaim{reserved("ns", "a", "h", 0, underLease("sys/gone"))}},
	}
	ends := map[string]time.Time{"sys/live": now.Add(30 * time.Second), "sys/over": now.Add(-time.Second)}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, recheck := reservedStock(tc.claimed, "h", now, ends)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" || recheck != tc.recheck {
				t.Errorf("reservedStock = %v, %s; want %v, %s", got, recheck, tc.want, tc.recheck)
			}
		})
	}
}
