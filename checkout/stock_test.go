package checkout

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/st-tech/fluent-pvc-operator/apis/objects"
	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/pool"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

// The parts of a Lease's life (see LeaseDuration): how often a stock
// renews it, how much of it must be left for the stock to write, and how
// long after its end any stock deletes it.
const (
	leaseRenew  = LeaseDuration / 4
	leaseMargin = LeaseDuration / 3
	leaseGC     = LeaseDuration
)

// warmPVCs are n Bound warm PVCs of f in namespace "ns", usable anywhere.
func warmPVCs(f *v1alpha1.FluentPVC, n int) []client.Object {
	var out []client.Object
	for i := range n {
		w := boundWarm(f)
		w.Name, w.UID = fmt.Sprintf("f-warm-%d", i), types.UID(fmt.Sprintf("warm-uid-%d", i))
		w.Spec.VolumeName = fmt.Sprintf("pv-%d", i)
		out = append(out, w)
	}
	return out
}

// stockFixture is a Stock of process "replica-a", whose Lease lives in
// namespace "sys", over a fake API server that counts the writes made.
type stockFixture struct {
	// api is the API server as the stock sees it; raw writes past the
	// hooks and counters (the test's own writes).
	api   client.Client
	raw   client.Client
	stock *Stock
	clock *clocktesting.FakePassiveClock
	// writes counts the writes of PVCs; leaseWrites those of Leases.
	writes, leaseWrites *atomic.Int32
	hooks               *stockHooks
}

// stockHooks change the fake API server's answers, each when set. Set
// them before any concurrent use of the stock.
type stockHooks struct {
	// writing runs inside each PVC write, before it is made, with the
	// name of the PVC.
	writing func(name string)
	// answer is what each PVC write returns once made: an error the
	// client sees although the write landed.
	answer func(name string) error
	// fails is what each PVC write returns instead of being made: an
	// error of a write that did not land; nil lets it through.
	fails func(name string) error
	// leaseFails is what a Lease write (op "create", "update" or
	// "delete") returns instead of being made; nil lets it through.
	leaseFails func(op string, l *coordinationv1.Lease) error
	// leaseAnswer is what a Lease update returns once made.
	leaseAnswer func(l *coordinationv1.Lease) error
	// createAnswer is what a Lease create returns once made.
	createAnswer func(l *coordinationv1.Lease) error
}

func newStockFixture(t *testing.T, target int, objs ...client.Object) stockFixture {
	t.Helper()
	var writes, leaseWrites atomic.Int32
	h := &stockHooks{}
	// lease runs a write of a Lease, pvc one of a PVC; any other object
	// is written as is.
	lease := func(op string, obj client.Object, write func() error) error {
		l, ok := obj.(*coordinationv1.Lease)
		if !ok {
			return write()
		}
		leaseWrites.Add(1)
		if h.leaseFails != nil {
			if err := h.leaseFails(op, l); err != nil {
				return err
			}
		}
		err := write()
		switch {
		case err != nil:
			return err
		case op == "create" && h.createAnswer != nil:
			return h.createAnswer(l)
		case op == "update" && h.leaseAnswer != nil:
			return h.leaseAnswer(l)
		}
		return nil
	}
	pvc := func(obj client.Object, write func() error) error {
		if _, ok := obj.(*corev1.PersistentVolumeClaim); !ok {
			return write()
		}
		writes.Add(1)
		if h.writing != nil {
			h.writing(obj.GetName())
		}
		if h.fails != nil {
			if err := h.fails(obj.GetName()); err != nil {
				return err
			}
		}
		if err := write(); err != nil || h.answer == nil {
			return err
		}
		return h.answer(obj.GetName())
	}
	funcs := interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			return lease("create", obj, func() error { return pvc(obj, func() error { return c.Create(ctx, obj, opts...) }) })
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			return lease("update", obj, func() error { return pvc(obj, func() error { return c.Update(ctx, obj, opts...) }) })
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			return lease("update", obj, func() error { return pvc(obj, func() error { return c.Patch(ctx, obj, patch, opts...) }) })
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			return lease("delete", obj, func() error { return pvc(obj, func() error { return c.Delete(ctx, obj, opts...) }) })
		},
	}
	for _, o := range objs {
		// The pool reconciler learned namespace "ns" for each FluentPVC
		// that lists none.
		if f, ok := o.(*v1alpha1.FluentPVC); ok && len(f.Spec.Pool.Namespaces) == 0 && len(f.Status.Pool) == 0 {
			f.Status.Pool = []v1alpha1.PoolNamespaceStatus{{Namespace: "ns"}}
		}
	}
	objs = append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}})
	raw := indexed(fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objs...)).Build()
	api := interceptor.NewClient(raw, funcs)
	clk := clocktesting.NewFakePassiveClock(fixtures.Epoch)
	s := NewStock("replica-a", "sys", target, NewCheckouter(api, api, api), clk)
	return stockFixture{api: api, raw: raw, clock: clk, writes: &writes, leaseWrites: &leaseWrites, hooks: h, stock: s}
}

// newReservedFixture is a stockFixture of target over a pool of size
// Bound warm PVCs of FluentPVC "f", synced once at fixtures.Epoch: it
// holds them all.
func newReservedFixture(t *testing.T, target, size int) (stockFixture, *v1alpha1.FluentPVC) {
	t.Helper()
	fpvc := fixtures.MakeFluentPVC("f").PoolSize(int32(size)).Obj()
	f := newStockFixture(t, target, append([]client.Object{fpvc}, warmPVCs(fpvc, size)...)...)
	if err := f.stock.Sync(context.Background()); err != nil || f.stock.Len() != size {
		t.Fatalf("reserving: %v, stock %d, want %d", err, f.stock.Len(), size)
	}
	return f, fpvc
}

// reserved counts the claims of namespace "ns" that the stock's current
// Lease holds.
func (f stockFixture) reserved(t *testing.T) int {
	t.Helper()
	return len(f.reservedBy(t, f.stock.term.holder))
}

// reservedBy names the claims of namespace "ns" reserved by holder.
func (f stockFixture) reservedBy(t *testing.T, holder string) []string {
	t.Helper()
	var pvcs corev1.PersistentVolumeClaimList
	if err := f.api.List(context.Background(), &pvcs, client.InNamespace("ns")); err != nil {
		t.Fatal(err)
	}
	var out []string
	for i := range pvcs.Items {
		if by, _, ok := claim.Reservation(&pvcs.Items[i]); ok && by == holder {
			out = append(out, pvcs.Items[i].Name)
		}
	}
	return out
}

// leases are the stock Leases in "sys".
func (f stockFixture) leases(t *testing.T) []coordinationv1.Lease {
	t.Helper()
	var leases coordinationv1.LeaseList
	if err := f.api.List(context.Background(), &leases, client.InNamespace("sys"), client.MatchingLabels{v1alpha1.StockLeaseLabelKey: "true"}); err != nil {
		t.Fatal(err)
	}
	return leases.Items
}

// lease is the stock's Lease as the API server has it.
func (f stockFixture) lease(t *testing.T, name string) *coordinationv1.Lease {
	t.Helper()
	l := &coordinationv1.Lease{}
	if err := f.api.Get(context.Background(), client.ObjectKey{Namespace: "sys", Name: name}, l); err != nil {
		t.Fatal(err)
	}
	return l
}

// takeAll hands out every claim of fpvc in "ns" the stock hands out now,
// by name.
func (f stockFixture) takeAll(fpvc *v1alpha1.FluentPVC) []string {
	var out []string
	for c := f.take(fpvc); c != nil; c = f.take(fpvc) {
		out = append(out, c.Name)
	}
	return out
}

// take hands out a claim of fpvc in "ns", if the stock has one.
func (f stockFixture) take(fpvc *v1alpha1.FluentPVC) *corev1.PersistentVolumeClaim {
	return f.stock.take(context.Background(), fpvc.Name, "ns", pool.TemplateHash(&fpvc.Spec.PVCSpecTemplate), func(string) bool { return true }, nil)
}

// otherLease is the stock Lease of another replica in "sys", last
// renewed at renewed.
func otherLease(name string, renewed time.Time) *coordinationv1.Lease {
	at := metav1.NewMicroTime(renewed)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "sys", Name: name, Labels: map[string]string{v1alpha1.StockLeaseLabelKey: "true"}},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(name),
			LeaseDurationSeconds: ptr.To(int32(LeaseDuration / time.Second)),
			AcquireTime:          &at,
			RenewTime:            &at,
		},
	}
}

// create writes obj as the test's own write.
func (f stockFixture) create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := f.raw.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
}

// reserveAhead is FluentPVC "f" with a pool of size whose
// spec.pool.reserveAhead is n.
func reserveAhead(size, n int32) *v1alpha1.FluentPVC {
	f := fixtures.MakeFluentPVC("f").PoolSize(size).Obj()
	f.Spec.Pool.ReserveAhead = ptr.To(n)
	return f
}

// failingLeases fails every list of Leases while fail is set, and reads
// everything else through the Reader.
type failingLeases struct {
	client.Reader
	fail *bool
}

func (f failingLeases) List(ctx context.Context, l client.ObjectList, opts ...client.ListOption) error {
	if _, ok := l.(*coordinationv1.LeaseList); ok && *f.fail {
		return apierrors.NewForbidden(coordinationv1.Resource("leases"), "", errors.New("no list"))
	}
	return f.Reader.List(ctx, l, opts...)
}

// TestStockSync: the stock reserves Bound warm PVCs up to the
// FluentPVC's spec.pool.reserveAhead or, when unset, its target, never
// more than its share of the pool among the live stock Leases, none of a
// FluentPVC being deleted, only those a running holder stages of a pool
// that stages its warm PVCs, and none with a holder of a pool that does
// not. It makes its Lease first, with one write.
func TestStockSync(t *testing.T) {
	staged := fixtures.MakeFluentPVC("f").PoolSize(3).Obj()
	staged.Spec.PVCSpecTemplate.StorageClassName = ptr.To("disk")
	class := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "disk"}, Provisioner: "disk.csi"}
	driver := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "disk.csi"}}
	deleting := fixtures.MakeFluentPVC("f").PoolSize(3).Obj()
	deleting.DeletionTimestamp, deleting.Finalizers = &metav1.Time{Time: fixtures.Epoch}, []string{"keep"}
	for name, tc := range map[string]struct {
		fpvc   *v1alpha1.FluentPVC
		extra  []client.Object
		target int
		// others are the live Leases of other replicas; -1: the Leases
		// cannot be listed.
		others   int
		stopping bool
		// holders are holder pods of the warm PVCs, by index, on the node
		// named, running; pending when the node is "".
		holders map[int]string
		want    int
	}{
		"a stopping replica: none":         {fpvc: fixtures.MakeFluentPVC("f").PoolSize(3).Obj(), target: pool.ReserveShare, stopping: true},
		"up to the target":                 {fpvc: fixtures.MakeFluentPVC("f").PoolSize(3).Obj(), target: 2, want: 2},
		"its share, alone: the whole pool": {fpvc: fixtures.MakeFluentPVC("f").PoolSize(3).Obj(), target: pool.ReserveShare, want: 3},
		"its share of two replicas, rounded up": {
			fpvc: fixtures.MakeFluentPVC("f").PoolSize(3).Obj(), target: pool.ReserveShare, others: 1, want: 2},
		"the Leases unknown: as if alone": {
			fpvc: fixtures.MakeFluentPVC("f").PoolSize(3).Obj(), target: pool.ReserveShare, others: -1, want: 3},
		"the target, at most its share":                 {fpvc: fixtures.MakeFluentPVC("f").PoolSize(3).Obj(), target: 3, others: 2, want: 1},
		"the FluentPVC's own number, at most its share": {fpvc: reserveAhead(3, 3), target: 0, others: 1, want: 2},
		"at most the pool's size":                       {fpvc: fixtures.MakeFluentPVC("f").PoolSize(1).Obj(), target: 5, want: 1},
		"every warm PVC there is":                       {fpvc: fixtures.MakeFluentPVC("f").PoolSize(5).Obj(), target: 5, want: 3},
		"a staged pool, nothing staged yet: none":       {fpvc: staged, extra: []client.Object{class, driver}, target: 2},
		"a staged pool: those a running holder stages": {
			fpvc: staged, extra: []client.Object{class, driver}, target: 3, holders: map[int]string{0: "n1", 1: "n2", 2: ""}, want: 2},
		"a pool that does not stage: none with a holder left": {
			fpvc: fixtures.MakeFluentPVC("f").PoolSize(3).Obj(), target: 3, holders: map[int]string{0: "n1"}, want: 2},
		"a FluentPVC being deleted: none": {fpvc: deleting, target: 2},
		"the FluentPVC's own number":      {fpvc: reserveAhead(3, 2), target: 0, want: 2},
		"the FluentPVC's own number wins": {fpvc: reserveAhead(3, 1), target: 3, want: 1},
		"the FluentPVC asks for none":     {fpvc: reserveAhead(3, 0), target: 3},
		"neither asks (the default)":      {fpvc: fixtures.MakeFluentPVC("f").PoolSize(3).Obj(), target: 0},
		"its number, at most the size":    {fpvc: reserveAhead(2, 9), target: 0, want: 2},
	} {
		t.Run(name, func(t *testing.T) {
			warm := warmPVCs(tc.fpvc, 3)
			objs := append(append([]client.Object{tc.fpvc}, tc.extra...), warm...)
			for i, node := range tc.holders {
				h := objects.HolderPod(tc.fpvc.Name, warm[i].(*corev1.PersistentVolumeClaim), cmp.Or(node, "n1"), "pause", "")
				if node != "" {
					h.Spec.NodeName, h.Status.Phase = node, corev1.PodRunning
				}
				objs = append(objs, h)
			}
			for i := range tc.others {
				objs = append(objs, otherLease(fmt.Sprintf("replica-%d-abcde", i), fixtures.Epoch))
			}
			f := newStockFixture(t, tc.target, objs...)
			if tc.others < 0 {
				f.stock.Checkouts.Cache = failingLeases{Reader: f.api, fail: ptr.To(true)}
			}
			f.stock.Stopping = func() bool { return tc.stopping }
			if err := f.stock.Sync(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got := f.reserved(t); got != tc.want || f.stock.Len() != tc.want {
				t.Errorf("reserved %d (stock %d), want %d", got, f.stock.Len(), tc.want)
			}
			if w := int(f.writes.Load()); w != tc.want {
				t.Errorf("%d PVC writes, want one per reservation (%d)", w, tc.want)
			}
			if w := f.leaseWrites.Load(); w != 1 {
				t.Errorf("%d Lease writes, want 1 (its making)", w)
			}
		})
	}
}

// TestStockLease: the stock makes its Lease on its first sync, in its
// namespace, labelled, named after the process, and names it in its
// reservations, which name no end; it renews the Lease leaseRenew after
// its last write, and only then, with no PVC write.
func TestStockLease(t *testing.T) {
	ctx := context.Background()
	f, fpvc := newReservedFixture(t, 2, 2)
	leases := f.leases(t)
	if len(leases) != 1 {
		t.Fatalf("%d stock Leases in sys, want 1", len(leases))
	}
	l := leases[0]
	if !strings.HasPrefix(l.Name, "replica-a-") || len(l.Name) != len("replica-a-")+5 {
		t.Errorf("Lease named %q, want replica-a- and 5 random characters", l.Name)
	}
	if got := ptr.Deref(l.Spec.HolderIdentity, ""); got != l.Name {
		t.Errorf("holder identity %q, want the Lease's name %q", got, l.Name)
	}
	if got := ptr.Deref(l.Spec.LeaseDurationSeconds, 0); got != int32(LeaseDuration/time.Second) {
		t.Errorf("duration %ds, want %v", got, LeaseDuration)
	}
	if l.Spec.RenewTime == nil || !l.Spec.RenewTime.Time.Equal(fixtures.Epoch) {
		t.Errorf("renewed %v, want %v", l.Spec.RenewTime, fixtures.Epoch)
	}
	holder := "sys/" + l.Name
	if f.stock.term.holder != holder {
		t.Errorf("the stock holds as %q, want %q", f.stock.term.holder, holder)
	}
	if got := f.reservedBy(t, holder); len(got) != 2 {
		t.Errorf("claims reserved by %s: %v, want both", holder, got)
	}
	var pvcs corev1.PersistentVolumeClaimList
	if err := f.api.List(ctx, &pvcs); err != nil {
		t.Fatal(err)
	}
	for i := range pvcs.Items {
		if _, ok := claim.ReservedUntil(&pvcs.Items[i]); ok {
			t.Errorf("%s names an end of its reservation: %v", pvcs.Items[i].Name, pvcs.Items[i].Annotations)
		}
	}

	for _, step := range []struct {
		after   time.Duration
		renewed time.Duration
	}{
		{after: time.Second, renewed: 0},
		{after: leaseRenew - time.Second, renewed: 0},
		{after: leaseRenew, renewed: leaseRenew},
		{after: leaseRenew + time.Second, renewed: leaseRenew},
		{after: 2*leaseRenew + time.Second, renewed: 2*leaseRenew + time.Second},
	} {
		now := fixtures.Epoch.Add(step.after)
		f.clock.SetTime(now)
		leaseWrites, writes := f.leaseWrites.Load(), f.writes.Load()
		if err := f.stock.Sync(ctx); err != nil {
			t.Fatalf("sync at +%v: %v", step.after, err)
		}
		got := f.lease(t, l.Name)
		wantRenewed := fixtures.Epoch.Add(step.renewed)
		if !got.Spec.RenewTime.Time.Equal(wantRenewed) {
			t.Errorf("sync at +%v: renewed at %v, want %v", step.after, got.Spec.RenewTime, wantRenewed)
		}
		wantWrites := int32(0)
		if step.renewed == step.after {
			wantWrites = 1
		}
		if w := f.leaseWrites.Load() - leaseWrites; w != wantWrites {
			t.Errorf("sync at +%v: %d Lease writes, want %d", step.after, w, wantWrites)
		}
		if w := f.writes.Load() - writes; w != 0 {
			t.Errorf("sync at +%v: %d PVC writes, want none", step.after, w)
		}
		if !f.stock.term.validUntil.Equal(wantRenewed.Add(LeaseDuration)) {
			t.Errorf("sync at +%v: valid until %v, want %v", step.after, f.stock.term.validUntil, wantRenewed.Add(LeaseDuration))
		}
		if len(f.leases(t)) != 1 || f.stock.Len() != 2 || f.stock.term.holder != holder {
			t.Errorf("sync at +%v: %d Leases, stock %d, holder %s; want the one Lease, both claims", step.after, len(f.leases(t)), f.stock.Len(), f.stock.term.holder)
		}
	}
	if got := f.take(fpvc); got == nil {
		t.Error("the stock with its Lease renewed hands out nothing")
	}
}

// TestStockLeaseShare: the other replicas' live stock Leases share each
// pool with the stock (its own counts once); a Lease over counts for
// none, and is deleted once over for leaseGC, unless renewed meanwhile;
// Leases of another namespace, or unlabelled, are no stock's.
func TestStockLeaseShare(t *testing.T) {
	ctx := context.Background()
	now := fixtures.Epoch.Add(time.Hour)
	unlabelled := otherLease("replica-b-abcde", now)
	unlabelled.Labels = nil
	elsewhere := otherLease("replica-b-abcde", now)
	elsewhere.Namespace = "other"
	for name, tc := range map[string]struct {
		other *coordinationv1.Lease
		// renewing renews the other Lease between the stock's list and
		// its deletion.
		renewing bool
		want     int // the stock's share of a pool of 4
		// next is its share on the next sync, when not want.
		next    int
		deleted bool
	}{
		"none":                           {want: 4},
		"a live Lease: counts":           {other: otherLease("replica-b-abcde", now), want: 2},
		"renewed moments ago: counts":    {other: otherLease("replica-b-abcde", now.Add(-LeaseDuration+time.Second)), want: 2},
		"renewed ahead of the clock":     {other: otherLease("replica-b-abcde", now.Add(time.Minute)), want: 2},
		"just over: no count":            {other: otherLease("replica-b-abcde", now.Add(-LeaseDuration)), want: 4},
		"over for less than leaseGC":     {other: otherLease("replica-b-abcde", now.Add(-LeaseDuration-leaseGC+time.Second)), want: 4},
		"over for leaseGC exactly":       {other: otherLease("replica-b-abcde", now.Add(-LeaseDuration-leaseGC)), want: 4},
		"over for longer than leaseGC":   {other: otherLease("replica-b-abcde", now.Add(-LeaseDuration-leaseGC-time.Second)), want: 4, deleted: true},
		"renewed before its deletion":    {other: otherLease("replica-b-abcde", now.Add(-LeaseDuration-leaseGC-time.Second)), renewing: true, want: 4, next: 2},
		"unlabelled: no stock's":         {other: unlabelled, want: 4},
		"in another namespace: no count": {other: elsewhere, want: 4},
	} {
		t.Run(name, func(t *testing.T) {
			fpvc := fixtures.MakeFluentPVC("f").PoolSize(4).Obj()
			objs := append([]client.Object{fpvc}, warmPVCs(fpvc, 4)...)
			if tc.other != nil {
				objs = append(objs, tc.other)
			}
			f := newStockFixture(t, pool.ReserveShare, objs...)
			f.clock.SetTime(now)
			if tc.renewing {
				f.hooks.leaseFails = func(op string, l *coordinationv1.Lease) error {
					if op != "delete" {
						return nil
					}
					live := f.lease(t, l.Name)
					at := metav1.NewMicroTime(now)
					live.Spec.RenewTime = &at
					if err := f.raw.Update(ctx, live); err != nil {
						t.Fatal(err)
					}
					return nil
				}
			}
			if err := f.stock.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			if got := f.stock.Len(); got != tc.want {
				t.Errorf("holds %d, want %d", got, tc.want)
			}
			if tc.other == nil {
				return
			}
			err := f.raw.Get(ctx, client.ObjectKeyFromObject(tc.other), &coordinationv1.Lease{})
			if gone := apierrors.IsNotFound(err); gone != tc.deleted || (err != nil && !gone) {
				t.Errorf("the other Lease: %v; deleted %v, want %v", err, gone, tc.deleted)
			}
			// Once deleted, the next sync neither counts it nor tries again.
			leaseWrites := f.leaseWrites.Load()
			if err := f.stock.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			next := tc.want
			if tc.next != 0 {
				next = tc.next
			}
			if got := f.stock.Len(); got != next {
				t.Errorf("holds %d after another sync, want %d", got, next)
			}
			if tc.deleted {
				if w := f.leaseWrites.Load() - leaseWrites; w != 0 {
					t.Errorf("%d Lease writes on the next sync, want none", w)
				}
			}
		})
	}
}

// TestStockFenced: once its Lease is lost (over by the stock's count
// before a renewal landed, or deleted), the stock forgets every claim,
// without a write, and hands out none; its next sync makes a new Lease,
// under another name, and reserves anew, while the claims of the Lease
// lost, still reserved by it, are never handed out.
func TestStockFenced(t *testing.T) {
	ctx := context.Background()
	unavailable := apierrors.NewServiceUnavailable("the API server is away")
	for name, tc := range map[string]struct {
		// lose runs after the first sync, at fixtures.Epoch.
		lose func(t *testing.T, f stockFixture, lease string)
		// syncs are when the next syncs run, after fixtures.Epoch: the
		// stock holds its claims until the last, which loses the Lease.
		syncs []time.Duration
	}{
		"renewals fail until the Lease is over": {
			lose: func(t *testing.T, f stockFixture, _ string) {
				f.hooks.leaseFails = func(op string, _ *coordinationv1.Lease) error {
					if op == "update" {
						return unavailable
					}
					return nil
				}
			},
			syncs: []time.Duration{leaseRenew, 2 * leaseRenew, 3 * leaseRenew, LeaseDuration - time.Second, LeaseDuration},
		},
		"renewals fail, the last long after": {
			lose: func(t *testing.T, f stockFixture, _ string) {
				f.hooks.leaseFails = func(op string, _ *coordinationv1.Lease) error {
					if op == "update" {
						return unavailable
					}
					return nil
				}
			},
			syncs: []time.Duration{leaseRenew, time.Hour},
		},
		"the Lease is deleted": {
			lose: func(t *testing.T, f stockFixture, lease string) {
				if err := f.raw.Delete(ctx, f.lease(t, lease)); err != nil {
					t.Fatal(err)
				}
			},
			syncs: []time.Duration{leaseRenew},
		},
		// The Lease is over for others too by then: its claims may be
		// being reclaimed.
		"no sync until the Lease is over, the renewal lands late": {
			lose:  func(*testing.T, stockFixture, string) {},
			syncs: []time.Duration{LeaseDuration + time.Second},
		},
	} {
		t.Run(name, func(t *testing.T) {
			fpvc := fixtures.MakeFluentPVC("f").PoolSize(4).Obj()
			f := newStockFixture(t, 2, append([]client.Object{fpvc}, warmPVCs(fpvc, 4)...)...)
			if err := f.stock.Sync(ctx); err != nil || f.stock.Len() != 2 {
				t.Fatalf("reserving: %v, stock %d, want 2", err, f.stock.Len())
			}
			first, oldHolder := f.stock.term.lease.Name, f.stock.term.holder
			old := f.reservedBy(t, oldHolder)
			tc.lose(t, f, first)
			writes := f.writes.Load()
			for i, after := range tc.syncs {
				f.clock.SetTime(fixtures.Epoch.Add(after))
				_ = f.stock.Sync(ctx)
				if last := i == len(tc.syncs)-1; !last && f.stock.Len() != 2 {
					t.Fatalf("sync at +%v: stock %d, want both claims kept", after, f.stock.Len())
				}
			}
			lost := f.clock.Now()
			if got := f.stock.Len(); got != 0 {
				t.Fatalf("the stock holds %d claims once its Lease is lost, want none", got)
			}
			if w := f.writes.Load() - writes; w != 0 {
				t.Errorf("%d PVC writes while the Lease is lost, want none", w)
			}
			if got := f.reservedBy(t, oldHolder); len(got) != 2 {
				t.Errorf("claims still reserved by the lost Lease: %v, want both", got)
			}
			if got := f.take(fpvc); got != nil {
				t.Errorf("handed out %s with its Lease lost", got.Name)
			}

			// The API works again.
			f.hooks.leaseFails = nil
			f.clock.SetTime(lost.Add(time.Second))
			if err := f.stock.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			if f.stock.term.lease == nil || f.stock.term.lease.Name == first || !strings.HasPrefix(f.stock.term.lease.Name, "replica-a-") {
				t.Fatalf("after the loss, the stock's Lease is %v, want a new one (not %s)", f.stock.term.lease, first)
			}
			if f.stock.term.holder == oldHolder {
				t.Errorf("the stock still holds as %s", oldHolder)
			}
			fresh := f.reservedBy(t, f.stock.term.holder)
			if len(fresh) != 2 || f.stock.Len() != 2 {
				t.Errorf("reserved anew %v (stock %d), want 2 others", fresh, f.stock.Len())
			}
			handed := f.takeAll(fpvc)
			slices.Sort(handed)
			slices.Sort(fresh)
			if !slices.Equal(handed, fresh) {
				t.Errorf("handed out %v, want the claims reserved anew %v (not %v)", handed, fresh, old)
			}
		})
	}
}

// TestStockLeaseMargin: while its Lease has less than leaseMargin left
// by its count, the stock hands out nothing and writes no claim: a sync
// that cannot renew gives none back, and a stock that closes forgets its
// claims; once renewed, it gives back again.
func TestStockLeaseMargin(t *testing.T) {
	ctx := context.Background()
	for name, tc := range map[string]struct {
		renews     bool
		close      bool
		wantHeld   int
		wantWrites int32
	}{
		"a sync that cannot renew: nothing given back": {wantHeld: 2},
		"closed: forgotten, nothing given back":        {close: true},
		"a sync that renews: given back":               {renews: true, wantHeld: 1, wantWrites: 1},
	} {
		t.Run(name, func(t *testing.T) {
			f, fpvc := newReservedFixture(t, 2, 2)
			holder := f.stock.term.holder
			live := &v1alpha1.FluentPVC{}
			if err := f.api.Get(ctx, client.ObjectKeyFromObject(fpvc), live); err != nil {
				t.Fatal(err)
			}
			live.Spec.Pool.Size = 1
			update(t, f.raw, live)

			f.clock.SetTime(fixtures.Epoch.Add(LeaseDuration - leaseMargin - time.Nanosecond))
			if !f.stock.term.usable(f.clock.Now()) {
				t.Fatal("the Lease is not usable with more than leaseMargin left")
			}
			f.clock.SetTime(fixtures.Epoch.Add(LeaseDuration - leaseMargin))
			if got := f.take(fpvc); got != nil {
				t.Errorf("handed out %s with leaseMargin left", got.Name)
			}
			if f.stock.Len() != 2 {
				t.Fatalf("stock %d after a refused take, want 2", f.stock.Len())
			}
			if !tc.renews {
				f.hooks.leaseFails = func(string, *coordinationv1.Lease) error {
					return apierrors.NewServiceUnavailable("the API server is away")
				}
			}
			var err error
			if tc.close {
				err = f.stock.Close(ctx)
			} else {
				err = f.stock.Sync(ctx)
			}
			if tc.renews && err != nil {
				t.Fatal(err)
			}
			if got := f.stock.Len(); got != tc.wantHeld {
				t.Errorf("stock %d, want %d", got, tc.wantHeld)
			}
			if w := f.writes.Load(); w != 2+tc.wantWrites {
				t.Errorf("%d PVC writes after the reservations, want %d", w-2, tc.wantWrites)
			}
			if got := len(f.reservedBy(t, holder)); got != 2-int(tc.wantWrites) {
				t.Errorf("%d claims reserved, want %d", got, 2-int(tc.wantWrites))
			}
			if tc.renews {
				if got := f.take(fpvc); got == nil {
					t.Error("the stock with its Lease renewed hands out nothing")
				}
			}
		})
	}
}

// TestStockRenewalAnswerLost: a renewal that lands although its answer
// is an error (a timeout; a conflict, which a client's retry of it meets)
// costs the stock nothing: the next renewal conflicts, the stock reads
// the Lease as it is and renews it on a later sync, holding its claims
// throughout, without a PVC write.
func TestStockRenewalAnswerLost(t *testing.T) {
	ctx := context.Background()
	for name, answer := range map[string]error{
		"a timeout":  apierrors.NewTimeoutError("the renewal's answer", 1),
		"a conflict": apierrors.NewConflict(coordinationv1.Resource("leases"), "replica-a", errors.New("the object has been modified")),
	} {
		t.Run(name, func(t *testing.T) {
			f, fpvc := newReservedFixture(t, 2, 2)
			name, holder := f.stock.term.lease.Name, f.stock.term.holder
			f.hooks.leaseAnswer = func(*coordinationv1.Lease) error {
				f.hooks.leaseAnswer = nil
				return answer
			}
			f.clock.SetTime(fixtures.Epoch.Add(leaseRenew))
			if err := f.stock.Sync(ctx); err == nil {
				t.Error("a sync whose renewal's answer is lost says nothing")
			}
			if got := f.lease(t, name).Spec.RenewTime; !got.Time.Equal(fixtures.Epoch.Add(leaseRenew)) {
				t.Fatalf("the lost renewal did not land: renewed %v", got)
			}
			f.clock.SetTime(fixtures.Epoch.Add(leaseRenew + time.Second))
			_ = f.stock.Sync(ctx)
			if f.stock.Len() != 2 || f.stock.term.holder != holder {
				t.Fatalf("stock %d as %s after the lost renewal, want both claims as %s", f.stock.Len(), f.stock.term.holder, holder)
			}
			renew := fixtures.Epoch.Add(2 * leaseRenew)
			f.clock.SetTime(renew)
			if err := f.stock.Sync(ctx); err != nil {
				t.Fatalf("the renewal after the lost one: %v", err)
			}
			if got := f.lease(t, name).Spec.RenewTime; !got.Time.Equal(renew) {
				t.Errorf("renewed %v, want %v", got, renew)
			}
			if !f.stock.term.validUntil.Equal(renew.Add(LeaseDuration)) {
				t.Errorf("valid until %v, want %v", f.stock.term.validUntil, renew.Add(LeaseDuration))
			}
			if f.stock.Len() != 2 || f.stock.term.holder != holder || len(f.leases(t)) != 1 {
				t.Errorf("stock %d as %s, %d Leases; want both claims, as %s, one Lease", f.stock.Len(), f.stock.term.holder, len(f.leases(t)), holder)
			}
			if w := f.writes.Load(); w != 2 {
				t.Errorf("%d PVC writes after the reservations, want none", w-2)
			}
			f.clock.SetTime(renew.Add(LeaseDuration - leaseMargin - time.Second))
			if got := f.take(fpvc); got == nil {
				t.Error("the stock hands out nothing under its renewed Lease")
			}
		})
	}
}

// TestStockHandoutStaged: of a pool that stages its warm PVCs, a
// checkout hands out a reserved claim, without a write, to a pod that can
// run where its holder stages it, and pins the pod there; a pod pinned
// to other nodes (a DaemonSet's) does not get it, and the stock keeps it;
// a pod that cannot run there but pins itself to no node gets it when
// nothing else is left, unpinned, and the volume moves to it.
func TestStockHandoutStaged(t *testing.T) {
	ctx := context.Background()
	fpvc := fixtures.MakeFluentPVC("f").PoolSize(1).Obj()
	fpvc.Spec.PVCSpecTemplate.StorageClassName = ptr.To("disk")
	class := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "disk"}, Provisioner: "disk.csi"}
	driver := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "disk.csi"}}
	warm := warmPVCs(fpvc, 1)[0]
	h := objects.HolderPod(fpvc.Name, warm.(*corev1.PersistentVolumeClaim), "n1", "pause", "")
	h.Spec.NodeName, h.Status.Phase = "n1", corev1.PodRunning
	// objs are new objects for each fixture.
	objs := func() []client.Object {
		return []client.Object{fpvc.DeepCopy(), class.DeepCopy(), driver.DeepCopy(), h.DeepCopy(), warm.DeepCopyObject().(client.Object),
			fixtures.MakeNode("n1").Label(corev1.LabelHostname, "n1").Obj(), fixtures.MakeNode("n2").Label(corev1.LabelHostname, "n2").Obj()}
	}
	f := newStockFixture(t, 1, objs()...)
	f.stock.Checkouts.Stock = f.stock
	if err := f.stock.Sync(ctx); err != nil || f.stock.Len() != 1 {
		t.Fatalf("reserving the staged PVC: %v, stock %d", err, f.stock.Len())
	}
	before := f.writes.Load()

	got, err := f.stock.Checkouts.Checkout(ctx, fpvc, fixtures.MakePod("pinned", "ns").FluentPVC(fpvc.Name).PinnedTo("n2").Obj(), f.clock.Now())
	if err != nil || got.PVC != nil {
		t.Fatalf("a pod pinned to n2 got %v (%v); want none: the claim is staged on n1", got.PVC, err)
	}
	if w := f.writes.Load() - before; w != 0 {
		t.Errorf("the checkout made %d PVC writes, want none", w)
	}
	if f.stock.Len() != 1 {
		t.Fatalf("the stock holds %d claims, want the staged one kept", f.stock.Len())
	}
	for name, tc := range map[string]struct {
		pod      *corev1.Pod
		stagedOn string
	}{
		"a pod that may run anywhere: pinned to the holder's node": {pod: fixtures.MakePod("free", "ns").FluentPVC(fpvc.Name).Obj(), stagedOn: "n1"},
		"a pod that selects another node: the volume moves":        {pod: fixtures.MakePod("elsewhere", "ns").FluentPVC(fpvc.Name).NodeSelector(corev1.LabelHostname, "n2").Obj()},
	} {
		t.Run(name, func(t *testing.T) {
			f := newStockFixture(t, 1, objs()...)
			f.stock.Checkouts.Stock = f.stock
			if err := f.stock.Sync(ctx); err != nil || f.stock.Len() != 1 {
				t.Fatalf("reserving the staged PVC: %v, stock %d", err, f.stock.Len())
			}
			before := f.writes.Load()
			got, err := f.stock.Checkouts.Checkout(ctx, fpvc, tc.pod, f.clock.Now())
			if err != nil || got.PVC == nil {
				t.Fatalf("checkout: %v, %v; want the reserved claim", got.PVC, err)
			}
			if got.PVC.Name != warm.GetName() || got.Holder != h.Name || got.StagedOn != tc.stagedOn {
				t.Errorf("handed out %s, holder %q, staged on %q; want %s, %s, %q", got.PVC.Name, got.Holder, got.StagedOn, warm.GetName(), h.Name, tc.stagedOn)
			}
			if w := f.writes.Load() - before; w != 0 {
				t.Errorf("the checkout made %d PVC writes, want none", w)
			}
		})
	}
}

// TestStockHandout: a checkout hands out a reserved claim without a
// write, of the current template and namespace, each claim once, while
// its Lease has more than leaseMargin left.
func TestStockHandout(t *testing.T) {
	fpvc := fixtures.MakeFluentPVC("f").PoolSize(2).Obj()
	f := newStockFixture(t, 2, append([]client.Object{fpvc}, warmPVCs(fpvc, 2)...)...)
	f.stock.Checkouts.Stock = f.stock
	if err := f.stock.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	before, leaseBefore := f.writes.Load(), f.leaseWrites.Load()
	f.clock.SetTime(fixtures.Epoch.Add(LeaseDuration - leaseMargin - time.Second))
	pod := fixtures.MakePod("p", "ns").FluentPVC(fpvc.Name).Obj()
	taken := map[string]bool{}
	for range 2 {
		got, err := f.stock.Checkouts.Checkout(context.Background(), fpvc, pod, f.clock.Now())
		if err != nil || got.PVC == nil {
			t.Fatalf("checkout: %v, %v; want a reserved claim", got.PVC, err)
		}
		if by, _, ok := claim.Reservation(got.PVC); !ok || by != f.stock.term.holder || taken[got.PVC.Name] {
			t.Fatalf("handed out %s, not a claim of this stock handed out once (%v)", got.PVC.Name, taken)
		}
		taken[got.PVC.Name] = true
	}
	if w := f.writes.Load() - before; w != 0 {
		t.Errorf("the handouts made %d PVC writes, want none", w)
	}
	if w := f.leaseWrites.Load() - leaseBefore; w != 0 {
		t.Errorf("the handouts made %d Lease writes, want none", w)
	}
	if f.stock.Len() != 0 {
		t.Errorf("the stock still holds %d claims after handing out both", f.stock.Len())
	}

	g := newStockFixture(t, 1, append([]client.Object{fpvc}, warmPVCs(fpvc, 1)...)...)
	if err := g.stock.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := g.stock.take(context.Background(), fpvc.Name, "ns", "other-hash", func(string) bool { return true }, nil); got != nil {
		t.Errorf("handed out %s for another template", got.Name)
	}
	if got := g.stock.take(context.Background(), fpvc.Name, "other-ns", pool.TemplateHash(&fpvc.Spec.PVCSpecTemplate), func(string) bool { return true }, nil); got != nil {
		t.Errorf("handed out %s for another namespace", got.Name)
	}
	if got := g.stock.take(context.Background(), "other", "ns", pool.TemplateHash(&fpvc.Spec.PVCSpecTemplate), func(string) bool { return true }, nil); got != nil {
		t.Errorf("handed out %s for another FluentPVC", got.Name)
	}
	if got := g.stock.take(context.Background(), fpvc.Name, "ns", pool.TemplateHash(&fpvc.Spec.PVCSpecTemplate), func(string) bool { return false }, nil); got != nil {
		t.Errorf("handed out %s whose volume the pod cannot use", got.Name)
	}
	if got := g.stock.take(context.Background(), fpvc.Name, "ns", pool.TemplateHash(&fpvc.Spec.PVCSpecTemplate), func(string) bool { return true }, func(*corev1.PersistentVolumeClaim) bool { return true }); got != nil {
		t.Errorf("handed out %s, which the checkout skips", got.Name)
	}
	if g.stock.Len() != 1 {
		t.Errorf("stock %d after refused takes, want the claim kept", g.stock.Len())
	}
}

// TestStockKeeps: the stock keeps its claims, renewing its Lease, and
// gives them back to the pool, as warm PVCs, when the template changes,
// the pool shrinks or asks for fewer, another replica shares the pool,
// the FluentPVC or the namespace is being deleted, and when it closes; a
// closed stock hands out nothing.
func TestStockKeeps(t *testing.T) {
	ctx := context.Background()
	for name, tc := range map[string]struct {
		change func(f *v1alpha1.FluentPVC)
		// other, when set, is another replica's live Lease, made after
		// the first sync.
		other          bool
		after          time.Duration
		close          bool
		namespaceGoing bool
		want           int // claims still reserved
	}{
		"unchanged: kept":                 {after: time.Second, want: 2},
		"renewed: kept":                   {after: leaseRenew, want: 2},
		"the template changed":            {change: func(f *v1alpha1.FluentPVC) { f.Spec.PVCSpecTemplate.VolumeName = "other" }},
		"the pool shrank":                 {change: func(f *v1alpha1.FluentPVC) { f.Spec.Pool.Size = 1 }, want: 1},
		"the FluentPVC asks for fewer":    {change: func(f *v1alpha1.FluentPVC) { f.Spec.Pool.ReserveAhead = ptr.To[int32](1) }, want: 1},
		"the FluentPVC asks for none":     {change: func(f *v1alpha1.FluentPVC) { f.Spec.Pool.ReserveAhead = ptr.To[int32](0) }},
		"another replica shares the pool": {other: true, want: 1},
		"the FluentPVC is being deleted": {change: func(f *v1alpha1.FluentPVC) {
			f.Finalizers = []string{"keep"}
		}},
		"closed":                         {close: true},
		"closed, the Lease renewed":      {close: true, after: leaseRenew},
		"its namespace is being deleted": {namespaceGoing: true},
	} {
		t.Run(name, func(t *testing.T) {
			fpvc := fixtures.MakeFluentPVC("f").PoolSize(2).Obj()
			f := newStockFixture(t, 2, append([]client.Object{fpvc}, warmPVCs(fpvc, 2)...)...)
			if err := f.stock.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			holder := f.stock.term.holder
			if tc.change != nil {
				live := &v1alpha1.FluentPVC{}
				if err := f.api.Get(ctx, client.ObjectKeyFromObject(fpvc), live); err != nil {
					t.Fatal(err)
				}
				tc.change(live)
				update(t, f.raw, live)
				if name == "the FluentPVC is being deleted" {
					if err := f.raw.Delete(ctx, live); err != nil {
						t.Fatal(err)
					}
				}
			}
			if tc.namespaceGoing {
				ns := &corev1.Namespace{}
				if err := f.api.Get(ctx, client.ObjectKey{Name: "ns"}, ns); err != nil {
					t.Fatal(err)
				}
				ns.Finalizers = []string{"keep"}
				update(t, f.raw, ns)
				if err := f.raw.Delete(ctx, ns); err != nil {
					t.Fatal(err)
				}
			}
			if tc.other {
				f.create(t, otherLease("replica-b-abcde", fixtures.Epoch))
			}
			f.clock.SetTime(fixtures.Epoch.Add(tc.after))
			before := f.writes.Load()
			var err error
			if tc.close {
				err = f.stock.Close(ctx)
			} else {
				err = f.stock.Sync(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := len(f.reservedBy(t, holder)); got != tc.want || f.stock.Len() != tc.want {
				t.Errorf("reserved %d (stock %d), want %d", got, f.stock.Len(), tc.want)
			}
			if w := int(f.writes.Load() - before); w != 2-tc.want {
				t.Errorf("%d PVC writes, want one per claim given back (%d)", w, 2-tc.want)
			}
			var pvcs corev1.PersistentVolumeClaimList
			if err := f.api.List(ctx, &pvcs); err != nil {
				t.Fatal(err)
			}
			for i := range pvcs.Items {
				c := &pvcs.Items[i]
				if _, _, ok := claim.Reservation(c); ok {
					continue
				}
				if claim.StateOf(c) != claim.Warm || len(c.Finalizers) > 0 || c.Annotations[v1alpha1.ReservedByAnnotationKey] != "" {
					t.Errorf("%s given back is not a plain warm PVC: %+v", c.Name, c.ObjectMeta)
				}
			}
			if tc.close {
				if got := f.take(fpvc); got != nil {
					t.Errorf("a closed stock handed out %s", got.Name)
				}
				if err := f.stock.Sync(ctx); err != nil {
					t.Fatal(err)
				}
				if f.stock.Len() != 0 {
					t.Errorf("a closed stock reserved %d on a sync", f.stock.Len())
				}
			}
		})
	}
}

// TestStockConcurrentTake: admissions taking claims while a sync renews
// the Lease and gives claims back (another replica came) hand each claim
// out at most once, never one given back, and every claim is handed out,
// given back or still held. Run with -race.
func TestStockConcurrentTake(t *testing.T) {
	ctx := context.Background()
	const claims, takers = 4, 8
	f, fpvc := newReservedFixture(t, claims, claims)
	f.create(t, otherLease("replica-b-abcde", fixtures.Epoch.Add(leaseRenew)))
	f.clock.SetTime(fixtures.Epoch.Add(leaseRenew))
	var mu sync.Mutex
	taken, given := map[string]int{}, map[string]bool{}
	f.hooks.writing = func(name string) {
		mu.Lock()
		defer mu.Unlock()
		given[name] = true
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := f.stock.Sync(ctx); err != nil {
			t.Error(err)
		}
	})
	for range takers {
		wg.Go(func() {
			if c := f.take(fpvc); c != nil {
				mu.Lock()
				taken[c.Name]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for name, n := range taken {
		if n > 1 || given[name] {
			t.Errorf("%s handed out %d times, given back %v", name, n, given[name])
		}
	}
	if got := len(taken) + len(given) + f.stock.Len(); got != claims {
		t.Errorf("%d handed out, %d given back, %d held; want %d in all", len(taken), len(given), f.stock.Len(), claims)
	}
	if l := f.lease(t, f.stock.term.lease.Name); !l.Spec.RenewTime.Time.Equal(fixtures.Epoch.Add(leaseRenew)) {
		t.Errorf("the Lease renewed at %v, want %v", l.Spec.RenewTime, fixtures.Epoch.Add(leaseRenew))
	}
}

// TestStockTakeDuringGiveBack: an admission that comes while a sync
// gives claims back (each write runs a take) never gets the claim being
// written, nor one still waiting for its give-back, only a claim kept;
// every claim kept is handed out once.
func TestStockTakeDuringGiveBack(t *testing.T) {
	ctx := context.Background()
	const claims, kept = 3, 1
	f, fpvc := newReservedFixture(t, claims, claims)
	live := &v1alpha1.FluentPVC{}
	if err := f.api.Get(ctx, client.ObjectKeyFromObject(fpvc), live); err != nil {
		t.Fatal(err)
	}
	live.Spec.Pool.Size = kept
	update(t, f.raw, live)
	handed, given := map[string]int{}, map[string]bool{}
	tries := 0
	f.hooks.writing = func(name string) {
		tries++
		given[name] = true
		if c := f.take(fpvc); c != nil {
			handed[c.Name]++
		}
	}
	before := f.writes.Load()
	if err := f.stock.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if w := f.writes.Load() - before; w != claims-kept || tries != claims-kept {
		t.Fatalf("%d give-backs, %d takes during them; want %d of each", w, tries, claims-kept)
	}
	f.hooks.writing = nil
	for _, name := range f.takeAll(fpvc) {
		handed[name]++
	}
	if len(handed) != kept {
		t.Errorf("handed out %v, want the %d claim kept", handed, kept)
	}
	for name, n := range handed {
		if n != 1 || given[name] {
			t.Errorf("%s handed out %d times, given back %v", name, n, given[name])
		}
	}
	if got := f.reserved(t); got != kept {
		t.Errorf("%d claims reserved, want %d", got, kept)
	}
}

// TestStockReplicasUnknown: while the stock Leases cannot be listed, the
// last count stands; before any count, the replica reserves as if alone.
func TestStockReplicasUnknown(t *testing.T) {
	ctx := context.Background()
	fpvc := fixtures.MakeFluentPVC("f").PoolSize(4).Obj()
	f := newStockFixture(t, pool.ReserveShare, append([]client.Object{fpvc}, warmPVCs(fpvc, 4)...)...)
	fail := new(bool)
	f.stock.Checkouts.Cache = failingLeases{Reader: f.api, fail: fail}
	others := 0
	setOthers := func(n int) {
		for ; others < n; others++ {
			f.create(t, otherLease(fmt.Sprintf("replica-%d-abcde", others), fixtures.Epoch))
		}
		for ; others > n; others-- {
			if err := f.raw.Delete(ctx, otherLease(fmt.Sprintf("replica-%d-abcde", others-1), fixtures.Epoch)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, step := range []struct {
		others int
		fail   bool
		want   int
	}{
		{others: 3, fail: true, want: 4}, // no count yet: alone
		{others: 3, want: 1},
		{others: 0, fail: true, want: 1},
		{others: 1, want: 2},
		{others: 3, fail: true, want: 2},
		{others: 0, want: 4},
	} {
		setOthers(step.others)
		*fail = step.fail
		if err := f.stock.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		if got := f.stock.Len(); got != step.want {
			t.Errorf("step %d (%d others, listing fails %v): holds %d, want %d", i, step.others, step.fail, got, step.want)
		}
	}
}

// TestStockGiveBackUnknown: a give-back whose answer is an error, although
// it landed (a timeout, say), leaves the claim forgotten: never handed out
// again while the cache still shows it reserved.
func TestStockGiveBackUnknown(t *testing.T) {
	for name, answer := range map[string]error{
		"a timeout": apierrors.NewTimeoutError("the write's answer", 1),
		// A client's retry of a write that landed, after a 5xx, conflicts
		// with that write.
		"a conflict": apierrors.NewConflict(corev1.Resource("persistentvolumeclaims"), "f-warm", errors.New("the object has been modified")),
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			f, fpvc := newReservedFixture(t, pool.ReserveShare, 2)
			// The cache as it was before the give-back lands in it: still
			// reserved.
			var before corev1.PersistentVolumeClaimList
			if err := f.api.List(ctx, &before); err != nil {
				t.Fatal(err)
			}
			f.stock.Checkouts.Cache = frozen{Reader: f.api, pvcs: before.Items}
			f.create(t, otherLease("replica-b-abcde", fixtures.Epoch))
			f.hooks.answer = func(string) error { return answer }
			if err := f.stock.Sync(ctx); err == nil {
				t.Error("a sync whose give-back's answer is an error says nothing")
			}
			// The stock keeps the claim given back, busy, until the
			// cache tells.
			if got := f.reserved(t); got != 1 || f.stock.Len() != 2 {
				t.Fatalf("%d reserved (stock %d) after giving one back, want 1 (stock 2)", got, f.stock.Len())
			}
			f.hooks.answer = nil
			handed := f.takeAll(fpvc)
			if len(handed) != 1 {
				t.Fatalf("handed out %v, want only the claim still reserved", handed)
			}
			live := &corev1.PersistentVolumeClaim{}
			if err := f.api.Get(ctx, client.ObjectKey{Namespace: "ns", Name: handed[0]}, live); err != nil {
				t.Fatal(err)
			}
			if by, _, ok := claim.Reservation(live); !ok || by != f.stock.term.holder {
				t.Errorf("handed out %s, which the API server shows given back", handed[0])
			}
		})
	}
}

// TestStockGiveBackNotLanded: a give-back that fails without landing (a
// 500) leaves the claim reserved by the stock's live Lease. The stock
// never hands it out, and gives it back at its next sync, rather than
// forgetting a claim that no one else may take while its Lease lives.
func TestStockGiveBackNotLanded(t *testing.T) {
	for name, fails := range map[string]int{
		"once":         1,
		"at two syncs": 2,
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			f, fpvc := newReservedFixture(t, pool.ReserveShare, 2)
			f.create(t, otherLease("replica-b-abcde", fixtures.Epoch))
			left, failed := fails, ""
			f.hooks.fails = func(name string) error {
				if left == 0 {
					return nil
				}
				left--
				failed = name
				return apierrors.NewInternalError(errors.New("etcd is unavailable"))
			}
			for i := range fails {
				if i > 0 {
					// A give-back that failed is tried again a quarter
					// of LeaseDuration later.
					f.clock.SetTime(f.clock.Now().Add(leaseRenew))
				}
				if err := f.stock.Sync(ctx); err == nil {
					t.Errorf("sync %d, whose give-back failed, says nothing", i)
				}
				if got := f.reserved(t); got != 2 {
					t.Fatalf("sync %d: %d reserved, want both while the give-back fails", i, got)
				}
				// What the stock would hand out, without taking it.
				var offered []string
				f.stock.take(ctx, fpvc.Name, "ns", pool.TemplateHash(&fpvc.Spec.PVCSpecTemplate), func(string) bool { return true }, func(c *corev1.PersistentVolumeClaim) bool {
					offered = append(offered, c.Name)
					return true
				})
				if len(offered) != 1 || offered[0] == failed {
					t.Fatalf("sync %d: the stock offers %v, want only the claim it keeps, not %s", i, offered, failed)
				}
			}
			f.clock.SetTime(f.clock.Now().Add(leaseRenew - time.Nanosecond))
			if err := f.stock.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			if got := f.reserved(t); got != 2 {
				t.Fatalf("%d reserved, want the claim whose give-back failed kept until its retry is due", got)
			}
			f.clock.SetTime(f.clock.Now().Add(time.Nanosecond))
			if err := f.stock.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			if got := f.reserved(t); got != 1 || f.stock.Len() != 1 {
				t.Errorf("%d reserved (stock %d) once the give-back lands, want 1", got, f.stock.Len())
			}
			live := &corev1.PersistentVolumeClaim{}
			if err := f.api.Get(ctx, client.ObjectKey{Namespace: "ns", Name: failed}, live); err != nil {
				t.Fatal(err)
			}
			if claim.StateOf(live) != claim.Warm {
				t.Errorf("claim %s is %v once the give-back lands, want warm again", failed, claim.StateOf(live))
			}
		})
	}
}

// frozen answers Gets of PVCs from pvcs, as a cache that has not caught
// up, and everything else from the Reader.
type frozen struct {
	client.Reader
	pvcs []corev1.PersistentVolumeClaim
}

func (f frozen) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if pvc, ok := obj.(*corev1.PersistentVolumeClaim); ok {
		for i := range f.pvcs {
			if f.pvcs[i].Namespace == key.Namespace && f.pvcs[i].Name == key.Name {
				f.pvcs[i].DeepCopyInto(pvc)
				return nil
			}
		}
	}
	return f.Reader.Get(ctx, key, obj, opts...)
}

// TestStockStillHeld: a claim is handed out while the cache shows it
// reserved by this stock's Lease, or still shows the warm PVC it was
// reserved from; not once the cache shows it reclaimed, reserved by
// another Lease (another replica's, or this process's lost one), or
// deleted.
func TestStockStillHeld(t *testing.T) {
	const holder = "sys/replica-a-abcde"
	fpvc := fixtures.MakeFluentPVC("f").PoolSize(1).Obj()
	warm := warmPVCs(fpvc, 1)[0].(*corev1.PersistentVolumeClaim)
	warm.ResourceVersion = "41"
	w, err := claim.Reserve(warm, fixtures.Epoch, holder, "token")
	if err != nil {
		t.Fatal(err)
	}
	mine := w.Object
	mine.ResourceVersion = "42"
	other := mine.DeepCopy()
	other.Annotations[v1alpha1.ReservedByAnnotationKey] = "sys/replica-b-abcde"
	lost := mine.DeepCopy()
	lost.Annotations[v1alpha1.ReservedByAnnotationKey] = "sys/replica-a-fghij"
	used := mine.DeepCopy()
	used.Annotations[v1alpha1.UsedByPodAnnotationKey] = "p/p-uid"
	returned := warm.DeepCopy()
	returned.ResourceVersion = "50"
	replaced := mine.DeepCopy()
	replaced.UID = "another-uid"
	deleting := mine.DeepCopy()
	deleting.DeletionTimestamp, deleting.Finalizers = &metav1.Time{Time: fixtures.Epoch}, []string{"keep"}
	for name, tc := range map[string]struct {
		cached *corev1.PersistentVolumeClaim
		getErr error
		want   bool
		// unknown: the cache cannot say (the claim is neither handed out
		// nor forgotten).
		unknown bool
	}{
		"a cache that fails":                {cached: mine, getErr: errors.New("cache down"), unknown: true},
		"reserved by this stock":            {cached: mine, want: true},
		"the warm PVC it was reserved from": {cached: warm, want: true},
		"reserved by another replica":       {cached: other},
		"reserved by a Lease lost":          {cached: lost},
		"recording a pod":                   {cached: used},
		"warm again, given back by others":  {cached: returned},
		"another PVC of that name":          {cached: replaced},
		"being deleted":                     {cached: deleting},
		"gone":                              {},
	} {
		t.Run(name, func(t *testing.T) {
			var objs []client.Object
			if tc.cached != nil {
				objs = append(objs, tc.cached)
			}
			failing := func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if tc.getErr != nil {
					return tc.getErr
				}
				return c.Get(ctx, key, obj, opts...)
			}
			api := indexed(fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objs...)).
				WithInterceptorFuncs(interceptor.Funcs{Get: failing}).Build()
			clk := clocktesting.NewFakePassiveClock(fixtures.Epoch)
			s := NewStock("replica-a", "sys", 1, NewCheckouter(api, api, api), clk)
			s.term.holder = holder
			if got, known := s.stillHeld(context.Background(), mine); got != tc.want || known == tc.unknown {
				t.Errorf("stillHeld = %v (known %v), want %v (known %v)", got, known, tc.want, !tc.unknown)
			}
		})
	}
}

// TestStockGivesBackUnfit: a reservation goes back to the pool as soon as
// no pod can take it: its namespace left the pool (dropped from
// spec.pool.namespaces, or no longer learned) or is being deleted, or no
// node can use its volume (its node was deleted); none is made of such a
// warm PVC either.
func TestStockGivesBackUnfit(t *testing.T) {
	node := func(name string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}}}
	}
	for name, tc := range map[string]struct {
		// listed are spec.pool.namespaces at first; nil: "ns" is learned.
		listed []string
		// change makes the cluster what it becomes after the reservations.
		change func(t *testing.T, api client.Client, f *v1alpha1.FluentPVC)
		want   int
	}{
		"nothing changed": {change: func(*testing.T, client.Client, *v1alpha1.FluentPVC) {}, want: 3},
		"still listed": {listed: []string{"ns", "other"}, change: func(t *testing.T, api client.Client, f *v1alpha1.FluentPVC) {
			f.Spec.Pool.Namespaces = []string{"ns"}
			update(t, api, f)
		}, want: 3},
		"dropped from spec.pool.namespaces": {listed: []string{"ns"}, change: func(t *testing.T, api client.Client, f *v1alpha1.FluentPVC) {
			f.Spec.Pool.Namespaces = []string{"other"}
			update(t, api, f)
		}},
		"no longer learned (idle, or deselected)": {change: func(t *testing.T, api client.Client, f *v1alpha1.FluentPVC) {
			f.Status.Pool = []v1alpha1.PoolNamespaceStatus{{Namespace: "other"}}
			update(t, api, f)
		}},
		"being deleted": {change: func(t *testing.T, api client.Client, _ *v1alpha1.FluentPVC) {
			ns := &corev1.Namespace{}
			if err := api.Get(context.Background(), client.ObjectKey{Name: "ns"}, ns); err != nil {
				t.Fatal(err)
			}
			ns.Finalizers = []string{"kubernetes"}
			update(t, api, ns)
			if err := api.Delete(context.Background(), ns); err != nil {
				t.Fatal(err)
			}
		}},
		"their node deleted": {change: func(t *testing.T, api client.Client, _ *v1alpha1.FluentPVC) {
			if err := api.Delete(context.Background(), node("n1")); err != nil {
				t.Fatal(err)
			}
		}, want: 1},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			fpvc := fixtures.MakeFluentPVC("f").PoolSize(3).Obj()
			fpvc.Spec.Pool.Namespaces = tc.listed
			objs := []client.Object{fpvc, node("n1"), node("n2")}
			// Two volumes local to n1, one to n2.
			for i, w := range warmPVCs(fpvc, 3) {
				w.GetAnnotations()[v1alpha1.NodeAffinityAnnotationKey] = localTo([]string{"n1", "n1", "n2"}[i])
				objs = append(objs, w)
			}
			f := newStockFixture(t, pool.ReserveShare, objs...)
			if err := f.stock.Sync(ctx); err != nil || f.stock.Len() != 3 {
				t.Fatalf("reserving: %v, stock %d, want 3", err, f.stock.Len())
			}
			live := &v1alpha1.FluentPVC{}
			if err := f.api.Get(ctx, client.ObjectKeyFromObject(fpvc), live); err != nil {
				t.Fatal(err)
			}
			tc.change(t, f.raw, live)
			before := f.writes.Load()
			if err := f.stock.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			if got := f.reserved(t); got != tc.want || f.stock.Len() != tc.want {
				t.Errorf("reserved %d (stock %d), want %d", got, f.stock.Len(), tc.want)
			}
			if w := int(f.writes.Load() - before); w != 3-tc.want {
				t.Errorf("%d PVC writes, want one per claim given back (%d)", w, 3-tc.want)
			}
			// Sync again: nothing unfit is reserved anew.
			if err := f.stock.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			if got := f.reserved(t); got != tc.want {
				t.Errorf("reserved %d after another sync, want %d", got, tc.want)
			}
		})
	}
}

// update writes obj, status included, as the fake API server takes it.
func update(t *testing.T, api client.Client, obj client.Object) {
	t.Helper()
	if err := api.Update(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
}

// TestStockNodesUnknown: while the nodes cannot be listed, no reserved
// claim is given back for want of a node that can use its volume, and
// the stock goes on syncing.
func TestStockNodesUnknown(t *testing.T) {
	ctx := context.Background()
	fpvc := fixtures.MakeFluentPVC("f").PoolSize(2).Obj()
	gone := localTo("n-gone")
	objs := []client.Object{fpvc}
	for _, w := range warmPVCs(fpvc, 2) {
		w.GetAnnotations()[v1alpha1.NodeAffinityAnnotationKey] = gone
		objs = append(objs, w)
	}
	f := newStockFixture(t, pool.ReserveShare, objs...)
	// No node exists, so nothing is known against the volumes: reserved.
	if err := f.stock.Sync(ctx); err != nil || f.stock.Len() != 2 {
		t.Fatalf("reserving: %v, stock %d, want 2", err, f.stock.Len())
	}
	f.create(t, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n-other", Labels: map[string]string{corev1.LabelHostname: "n-other"}}})
	f.stock.Checkouts.Cache = failingNodes{f.api}
	if err := f.stock.Sync(ctx); err != nil {
		t.Fatalf("Sync while the nodes cannot be listed: %v", err)
	}
	if got := f.reserved(t); got != 2 || f.stock.Len() != 2 {
		t.Errorf("reserved %d (stock %d) while the nodes cannot be listed, want both kept", got, f.stock.Len())
	}
	f.stock.Checkouts.Cache = f.api
	if err := f.stock.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := f.reserved(t); got != 0 {
		t.Errorf("reserved %d once the nodes show none that can use them, want 0", got)
	}
}

// localTo is the NodeAffinityAnnotationKey value of a volume local to
// node.
func localTo(node string) string {
	return pool.VolumeAffinity(&corev1.PersistentVolume{Spec: corev1.PersistentVolumeSpec{NodeAffinity: &corev1.VolumeNodeAffinity{
		Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
			Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node},
		}}}}},
	}}})
}

// failingNodes fails every list of nodes and reads everything else
// through the Reader.
type failingNodes struct{ client.Reader }

func (f failingNodes) List(ctx context.Context, l client.ObjectList, opts ...client.ListOption) error {
	if _, ok := l.(*corev1.NodeList); ok {
		return apierrors.NewServiceUnavailable("nodes cannot be listed")
	}
	return f.Reader.List(ctx, l, opts...)
}

// TestStockLeaseCreateAnswerLost: a Lease create that lands but is
// answered with an error (a timeout, or a conflict, which a client's retry
// of a create that landed meets as AlreadyExists) leaves one Lease: the
// next sync finds it, renews it and reserves under it, and no second
// Lease halves the share.
func TestStockLeaseCreateAnswerLost(t *testing.T) {
	ctx := context.Background()
	for name, answer := range map[string]error{
		"a timeout":      apierrors.NewTimeoutError("request timed out", 1),
		"already exists": apierrors.NewAlreadyExists(coordinationv1.Resource("leases"), "replica-a"),
	} {
		t.Run(name, func(t *testing.T) {
			fpvc := fixtures.MakeFluentPVC("f").PoolSize(2).Obj()
			f := newStockFixture(t, pool.ReserveShare, append([]client.Object{fpvc}, warmPVCs(fpvc, 2)...)...)
			f.hooks.createAnswer = func(*coordinationv1.Lease) error { return answer }
			if err := f.stock.Sync(ctx); err == nil {
				t.Fatal("the first sync's create answered with an error: want the error")
			}
			if f.stock.Len() != 0 || f.writes.Load() != 0 {
				t.Fatalf("reserved %d claims (%d writes) before the Lease was known", f.stock.Len(), f.writes.Load())
			}
			f.hooks.createAnswer = nil
			f.clock.SetTime(fixtures.Epoch.Add(time.Second))
			if err := f.stock.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			var leases coordinationv1.LeaseList
			if err := f.raw.List(ctx, &leases, client.InNamespace("sys")); err != nil {
				t.Fatal(err)
			}
			if len(leases.Items) != 1 {
				t.Fatalf("%d Leases, want the one made", len(leases.Items))
			}
			l := leases.Items[0]
			if want := fixtures.Epoch.Add(time.Second); !l.Spec.RenewTime.Time.Equal(want) {
				t.Errorf("Lease renewed at %v, want %v", l.Spec.RenewTime.Time, want)
			}
			if got := len(f.reservedBy(t, "sys/"+l.Name)); got != 2 || f.stock.Len() != 2 {
				t.Errorf("reserved %d under %s (stock %d), want the whole pool: no second Lease shares it", got, l.Name, f.stock.Len())
			}
		})
	}
}

// TestStockGivesBackUnstaged: of a pool that stages its warm PVCs, the
// stock gives back a reserved claim that no running holder stages any
// more (its holder deleted with its node, or evicted), so that the pool
// stages it again, and reserves it only once it is staged again.
func TestStockGivesBackUnstaged(t *testing.T) {
	for name, change := range map[string]func(t *testing.T, api client.Client, h *corev1.Pod){
		"its holder deleted": func(t *testing.T, api client.Client, h *corev1.Pod) {
			if err := api.Delete(context.Background(), h); err != nil {
				t.Fatal(err)
			}
		},
		"its holder evicted": func(t *testing.T, api client.Client, h *corev1.Pod) {
			h.Status.Phase = corev1.PodFailed
			if err := api.Status().Update(context.Background(), h); err != nil {
				t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			fpvc := fixtures.MakeFluentPVC("f").PoolSize(2).Obj()
			fpvc.Spec.PVCSpecTemplate.StorageClassName = ptr.To("disk")
			objs := []client.Object{fpvc,
				&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "disk"}, Provisioner: "disk.csi"},
				&storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "disk.csi"}}}
			var holders []*corev1.Pod
			for i, w := range warmPVCs(fpvc, 2) {
				node := []string{"n1", "n2"}[i]
				h := objects.HolderPod(fpvc.Name, w.(*corev1.PersistentVolumeClaim), node, "pause", "")
				h.Spec.NodeName, h.Status.Phase = node, corev1.PodRunning
				holders = append(holders, h)
				objs = append(objs, w, h)
			}
			f := newStockFixture(t, pool.ReserveShare, objs...)
			if err := f.stock.Sync(ctx); err != nil || f.stock.Len() != 2 {
				t.Fatalf("reserving: %v, stock %d, want 2", err, f.stock.Len())
			}
			h := &corev1.Pod{}
			if err := f.raw.Get(ctx, client.ObjectKeyFromObject(holders[0]), h); err != nil {
				t.Fatal(err)
			}
			change(t, f.raw, h)
			before := f.writes.Load()
			for range 2 {
				if err := f.stock.Sync(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if got := f.reserved(t); got != 1 || f.stock.Len() != 1 {
				t.Errorf("reserved %d (stock %d), want 1: the one still staged", got, f.stock.Len())
			}
			if w := f.writes.Load() - before; w != 1 {
				t.Errorf("%d PVC writes, want one give-back", w)
			}
			c := &corev1.PersistentVolumeClaim{}
			if err := f.raw.Get(ctx, client.ObjectKey{Namespace: "ns", Name: objects.HolderOf(holders[0])}, c); err != nil {
				t.Fatal(err)
			}
			if claim.StateOf(c) != claim.Warm {
				t.Errorf("the claim no holder stages is %v, want warm again", claim.StateOf(c))
			}
		})
	}
}

// TestStockCloseEndsLease: a stock that closes gives its claims back and
// ends its Lease a second later, so that the other replicas' share grows
// at their next sync rather than a LeaseDuration later; a stock whose
// Lease cannot be written says so.
func TestStockCloseEndsLease(t *testing.T) {
	for name, fails := range map[string]bool{"ended": false, "the write fails": true} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			f, _ := newReservedFixture(t, 2, 2)
			f.clock.SetTime(fixtures.Epoch.Add(5 * time.Second))
			if fails {
				f.hooks.leaseFails = func(string, *coordinationv1.Lease) error { return apierrors.NewServiceUnavailable("down") }
			}
			err := f.stock.Close(ctx)
			if (err != nil) != fails {
				t.Fatalf("Close: %v; want an error: %v", err, fails)
			}
			if f.reserved(t) != 0 {
				t.Errorf("%d claims still reserved after Close", f.reserved(t))
			}
			leases := f.leases(t)
			if len(leases) != 1 {
				t.Fatalf("%d Leases, want 1", len(leases))
			}
			end, want := LeaseEnd(&leases[0], f.clock.Now()), fixtures.Epoch.Add(LeaseDuration)
			if !fails {
				want = f.clock.Now().Add(time.Second)
			}
			if !end.Equal(want) {
				t.Errorf("the Lease ends at %v, want %v", end, want)
			}
		})
	}
}

// TestStockHandoutWithoutPod: a claim the stock handed out whose pod
// nothing records within claim.AdmissionBound (the API server refused
// the pod after the webhook, or gave up waiting for its answer) has its
// reservation ended by the stock, so that its binding reclaims or drains
// it while the replica lives. Before, it stayed reserved under the live
// Lease for as long as the replica lived, out of every pool.
func TestStockHandoutWithoutPod(t *testing.T) {
	cases := map[string]struct {
		// record records a pod on the claim after the handout.
		record bool
		// fails is how many writes of the end fail (500) before one lands.
		fails     int
		wantEnded bool
	}{
		"no pod recorded":                 {wantEnded: true},
		"its pod recorded":                {record: true},
		"the first end fails, then lands": {fails: 1, wantEnded: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f, fpvc := newReservedFixture(t, 1, 1)
			ctx := context.Background()
			c := f.take(fpvc)
			if c == nil {
				t.Fatal("the stock handed out no claim")
			}
			handedOut := f.clock.Now()
			key := client.ObjectKeyFromObject(c)
			get := func() *corev1.PersistentVolumeClaim {
				t.Helper()
				got := &corev1.PersistentVolumeClaim{}
				if err := f.api.Get(ctx, key, got); err != nil {
					t.Fatal(err)
				}
				return got
			}
			if tc.record {
				w, err := claim.RecordPod(get(), v1alpha1.ObjectIdentity{Name: "app", UID: "app-uid"})
				if err != nil {
					t.Fatal(err)
				}
				if err := claim.Execute(ctx, f.api, w); err != nil {
					t.Fatal(err)
				}
			}
			failed := 0
			f.hooks.fails = func(name string) error {
				if name == c.Name && failed < tc.fails {
					failed++
					return apierrors.NewInternalError(errors.New("etcd is down"))
				}
				return nil
			}
			// Sync as the stock does, every few seconds, so that its Lease
			// stays renewed.
			syncUntil := func(end time.Time) {
				for f.clock.Now().Before(end) {
					next := f.clock.Now().Add(5 * time.Second)
					if next.After(end) {
						next = end
					}
					f.clock.SetTime(next)
					_ = f.stock.Sync(ctx)
				}
			}
			syncUntil(handedOut.Add(claim.AdmissionBound - time.Second))
			if got := get(); !claim.Reserved(got) {
				t.Fatalf("the reservation ended %s after the handout, before claim.AdmissionBound", f.clock.Now().Sub(handedOut))
			}
			syncUntil(handedOut.Add(claim.AdmissionBound + LeaseDuration/2))
			got := get()
			if ended := !claim.Reserved(got); ended != tc.wantEnded {
				t.Fatalf("reservation ended: %t, want %t (%v)", ended, tc.wantEnded, got.Annotations)
			}
			if tc.wantEnded {
				at, _ := claim.AdmittedAt(got.Annotations)
				if claim.StateOf(got) != claim.Claimed || !at.Equal(handedOut) || !controllerutil.ContainsFinalizer(got, v1alpha1.PVCProtectionFinalizer) {
					t.Errorf("ended claim is %s, admitted at %v, finalizers %v; want Claimed, admitted at the handout %v, with the finalizer",
						claim.StateOf(got), at, got.Finalizers, handedOut)
				}
			}
			if n := len(f.stock.handedOut); n != 0 {
				t.Errorf("the stock remembers %d handouts, want none", n)
			}
		})
	}
}
