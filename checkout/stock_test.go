package checkout

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/pool"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
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

// stockFixture is a Stock of replica "replica-a" over a fake API server
// that counts the writes made.
type stockFixture struct {
	api    client.Client
	stock  *Stock
	clock  *clocktesting.FakePassiveClock
	writes *atomic.Int32
	// duringWrite, when set, runs inside each update, before it is made.
	duringWrite *func()
	// writing, when set, runs inside each update, before it is made,
	// with the name of the object updated.
	writing *func(name string)
	// answer, when set, is what each update returns once made, by the
	// name of the object updated: an error the client sees although the
	// update landed.
	answer *func(name string) error
}

func newStockFixture(t *testing.T, target int, objs ...client.Object) stockFixture {
	t.Helper()
	var writes atomic.Int32
	during, writing, answer := new(func()), new(func(string)), new(func(string) error)
	count := func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
		writes.Add(1)
		if *during != nil {
			(*during)()
		}
		if *writing != nil {
			(*writing)(obj.GetName())
		}
		if err := c.Update(ctx, obj, opts...); err != nil || *answer == nil {
			return err
		}
		return (*answer)(obj.GetName())
	}
	for _, o := range objs {
		// The pool reconciler learned namespace "ns" for each FluentPVC
		// that lists none.
		if f, ok := o.(*v1alpha1.FluentPVC); ok && len(f.Spec.Pool.Namespaces) == 0 && len(f.Status.Pool) == 0 {
			f.Status.Pool = []v1alpha1.PoolNamespaceStatus{{Namespace: "ns"}}
		}
	}
	objs = append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}})
	api := indexed(fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objs...)).
		WithInterceptorFuncs(interceptor.Funcs{Update: count}).Build()
	clk := clocktesting.NewFakePassiveClock(fixtures.Epoch)
	return stockFixture{api: api, clock: clk, writes: &writes, duringWrite: during, writing: writing, answer: answer,
		stock: NewStock("replica-a", target, NewCheckouter(api, api, api), clk)}
}

// newReservedFixture is a stockFixture of target over a pool of size
// Bound warm PVCs of FluentPVC "f", synced once: it holds them all.
func newReservedFixture(t *testing.T, target, size int) (stockFixture, *v1alpha1.FluentPVC) {
	t.Helper()
	fpvc := fixtures.MakeFluentPVC("f").PoolSize(int32(size)).Obj()
	f := newStockFixture(t, target, append([]client.Object{fpvc}, warmPVCs(fpvc, size)...)...)
	if err := f.stock.Sync(context.Background()); err != nil || f.stock.Len() != size {
		t.Fatalf("reserving: %v, stock %d, want %d", err, f.stock.Len(), size)
	}
	return f, fpvc
}

// reserved counts the claims of namespace "ns" that replica-a reserved.
func (f stockFixture) reserved(t *testing.T) int {
	t.Helper()
	var pvcs corev1.PersistentVolumeClaimList
	if err := f.api.List(context.Background(), &pvcs, client.InNamespace("ns")); err != nil {
		t.Fatal(err)
	}
	n := 0
	for i := range pvcs.Items {
		if by, _, ok := claim.Reservation(&pvcs.Items[i]); ok && by == "replica-a" {
			n++
		}
	}
	return n
}

// reserveAhead is FluentPVC "f" with a pool of size whose
// spec.pool.reserveAhead is n.
func reserveAhead(size, n int32) *v1alpha1.FluentPVC {
	f := fixtures.MakeFluentPVC("f").PoolSize(size).Obj()
	f.Spec.Pool.ReserveAhead = ptr.To(n)
	return f
}

// TestStockSync: the stock reserves Bound warm PVCs up to the
// FluentPVC's spec.pool.reserveAhead or, when unset, its target, never
// more than the pool's size, and none of a pool that stages its
// warm PVCs or of a FluentPVC being deleted.
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
		// replicas is what Stock.Replicas answers; unset when 0, an
		// error when -1.
		replicas int
		stopping bool
		want     int
	}{
		"a stopping replica: none":         {fpvc: fixtures.MakeFluentPVC("f").PoolSize(3).Obj(), target: pool.ReserveShare, stopping: true},
		"up to the target":                 {fpvc: fixtures.MakeFluentPVC("f").PoolSize(3).Obj(), target: 2, want: 2},
		"its share, alone: the whole pool": {fpvc: fixtures.MakeFluentPVC("f").PoolSize(3).Obj(), target: pool.ReserveShare, replicas: 1, want: 3},
		"its share of two replicas, rounded up": {
			fpvc: fixtures.MakeFluentPVC("f").PoolSize(3).Obj(), target: pool.ReserveShare, replicas: 2, want: 2},
		"the replicas unknown: as if alone": {
			fpvc: fixtures.MakeFluentPVC("f").PoolSize(3).Obj(), target: pool.ReserveShare, replicas: -1, want: 3},
		"the target, at most its share":                 {fpvc: fixtures.MakeFluentPVC("f").PoolSize(3).Obj(), target: 3, replicas: 3, want: 1},
		"the FluentPVC's own number, at most its share": {fpvc: reserveAhead(3, 3), target: 0, replicas: 2, want: 2},
		"at most the pool's size":                       {fpvc: fixtures.MakeFluentPVC("f").PoolSize(1).Obj(), target: 5, want: 1},
		"every warm PVC there is":                       {fpvc: fixtures.MakeFluentPVC("f").PoolSize(5).Obj(), target: 5, want: 3},
		"a staged pool: none":                           {fpvc: staged, extra: []client.Object{class, driver}, target: 2},
		"a FluentPVC being deleted: none":               {fpvc: deleting, target: 2},
		"the FluentPVC's own number":                    {fpvc: reserveAhead(3, 2), target: 0, want: 2},
		"the FluentPVC's own number wins":               {fpvc: reserveAhead(3, 1), target: 3, want: 1},
		"the FluentPVC asks for none":                   {fpvc: reserveAhead(3, 0), target: 3},
		"neither asks (the default)":                    {fpvc: fixtures.MakeFluentPVC("f").PoolSize(3).Obj(), target: 0},
		"its number, at most the size":                  {fpvc: reserveAhead(2, 9), target: 0, want: 2},
	} {
		t.Run(name, func(t *testing.T) {
			objs := append(append([]client.Object{tc.fpvc}, tc.extra...), warmPVCs(tc.fpvc, 3)...)
			f := newStockFixture(t, tc.target, objs...)
			switch tc.replicas {
			case 0:
			case -1:
				f.stock.Replicas = func(context.Context) (int, error) { return 0, errors.New("forbidden") }
			default:
				f.stock.Replicas = func(context.Context) (int, error) { return tc.replicas, nil }
			}
			f.stock.Stopping = func() bool { return tc.stopping }
			if err := f.stock.Sync(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got := f.reserved(t); got != tc.want || f.stock.Len() != tc.want {
				t.Errorf("reserved %d (stock %d), want %d", got, f.stock.Len(), tc.want)
			}
			if w := int(f.writes.Load()); w != tc.want {
				t.Errorf("%d writes, want one per reservation (%d)", w, tc.want)
			}
		})
	}
}

// TestStockHandout: a checkout hands out a reserved claim without a
// write, only one with HandoutMargin left, of the current template, and
// each claim once.
func TestStockHandout(t *testing.T) {
	fpvc := fixtures.MakeFluentPVC("f").PoolSize(2).Obj()
	f := newStockFixture(t, 2, append([]client.Object{fpvc}, warmPVCs(fpvc, 2)...)...)
	f.stock.Checkouts.Stock = f.stock
	if err := f.stock.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := f.writes.Load()
	pod := fixtures.MakePod("p", "ns").FluentPVC(fpvc.Name).Obj()
	taken := map[string]bool{}
	for range 2 {
		got, err := f.stock.Checkouts.Checkout(context.Background(), fpvc, pod, f.clock.Now())
		if err != nil || got.PVC == nil {
			t.Fatalf("checkout: %v, %v; want a reserved claim", got.PVC, err)
		}
		if _, _, ok := claim.Reservation(got.PVC); !ok || taken[got.PVC.Name] {
			t.Fatalf("handed out %s, not a reserved claim handed out once (%v)", got.PVC.Name, taken)
		}
		taken[got.PVC.Name] = true
	}
	if w := f.writes.Load() - before; w != 0 {
		t.Errorf("the handouts made %d writes, want none", w)
	}
	if f.stock.Len() != 0 {
		t.Errorf("the stock still holds %d claims after handing out both", f.stock.Len())
	}

	// A reservation about to end is not handed out.
	g := newStockFixture(t, 1, append([]client.Object{fpvc}, warmPVCs(fpvc, 1)...)...)
	if err := g.stock.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	g.clock.SetTime(fixtures.Epoch.Add(ReserveTTL - HandoutMargin + time.Second))
	if got := g.stock.take(context.Background(), fpvc.Name, "ns", pool.TemplateHash(&fpvc.Spec.PVCSpecTemplate), func(string) bool { return true }, nil); got != nil {
		t.Errorf("handed out %s with less than HandoutMargin left", got.Name)
	}
	if got := g.stock.take(context.Background(), fpvc.Name, "ns", "other-hash", func(string) bool { return true }, nil); got != nil {
		t.Errorf("handed out %s for another template", got.Name)
	}
	if got := g.stock.take(context.Background(), fpvc.Name, "other-ns", pool.TemplateHash(&fpvc.Spec.PVCSpecTemplate), func(string) bool { return true }, nil); got != nil {
		t.Errorf("handed out %s for another namespace", got.Name)
	}
}

// TestStockKeeps: the stock extends a reservation before it ends (and
// forgets one it could not extend in time, which the binding controller
// reclaims), and
// gives its claims back to the pool, as warm PVCs, when the template
// changes, the pool shrinks or asks for fewer, the FluentPVC is being
// deleted, and when it
// closes; a closed stock hands out nothing.
func TestStockKeeps(t *testing.T) {
	ctx := context.Background()
	for name, tc := range map[string]struct {
		change func(f *v1alpha1.FluentPVC)
		// replicas, when set, is how many replicas share the pool
		// after the first sync (alone before it).
		replicas int
		after    time.Duration
		close    bool
		// namespaceGoing deletes the namespace (held by a finalizer).
		namespaceGoing bool
		want           int // claims still reserved
		extended       bool
		// forgotten: the stock holds none of the claims still reserved.
		forgotten bool
		// writeTakes is how long the API server takes to answer a write.
		writeTakes time.Duration
	}{
		"its end near (extensions failed): forgotten, no write": {
			after: ReserveTTL - writeMargin + time.Second, want: 2, forgotten: true},
		"extended too late to be sure: forgotten": {
			after: ReserveTTL/2 + time.Second, writeTakes: ReserveTTL / 2, want: 2, extended: true, forgotten: true},
		"half its time left: extended":    {after: ReserveTTL/2 + time.Second, want: 2, extended: true},
		"most of its time left: kept":     {after: time.Second, want: 2},
		"the template changed":            {change: func(f *v1alpha1.FluentPVC) { f.Spec.PVCSpecTemplate.VolumeName = "other" }},
		"the pool shrank":                 {change: func(f *v1alpha1.FluentPVC) { f.Spec.Pool.Size = 1 }, want: 1},
		"the FluentPVC asks for fewer":    {change: func(f *v1alpha1.FluentPVC) { f.Spec.Pool.ReserveAhead = ptr.To[int32](1) }, want: 1},
		"the FluentPVC asks for none":     {change: func(f *v1alpha1.FluentPVC) { f.Spec.Pool.ReserveAhead = ptr.To[int32](0) }},
		"another replica shares the pool": {replicas: 2, want: 1},
		"the FluentPVC is being deleted": {change: func(f *v1alpha1.FluentPVC) {
			f.Finalizers = []string{"keep"}
		}},
		"closed":                         {close: true},
		"its namespace is being deleted": {namespaceGoing: true},
	} {
		t.Run(name, func(t *testing.T) {
			fpvc := fixtures.MakeFluentPVC("f").PoolSize(2).Obj()
			f := newStockFixture(t, 2, append([]client.Object{fpvc}, warmPVCs(fpvc, 2)...)...)
			if err := f.stock.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			if tc.change != nil {
				live := &v1alpha1.FluentPVC{}
				if err := f.api.Get(ctx, client.ObjectKeyFromObject(fpvc), live); err != nil {
					t.Fatal(err)
				}
				tc.change(live)
				if err := f.api.Update(ctx, live); err != nil {
					t.Fatal(err)
				}
				if name == "the FluentPVC is being deleted" {
					if err := f.api.Delete(ctx, live); err != nil {
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
				if err := f.api.Update(ctx, ns); err != nil {
					t.Fatal(err)
				}
				if err := f.api.Delete(ctx, ns); err != nil {
					t.Fatal(err)
				}
			}
			if tc.replicas > 0 {
				f.stock.Replicas = func(context.Context) (int, error) { return tc.replicas, nil }
			}
			f.clock.SetTime(fixtures.Epoch.Add(tc.after))
			if tc.writeTakes > 0 {
				*f.duringWrite = func() { f.clock.SetTime(fixtures.Epoch.Add(tc.after + tc.writeTakes)) }
			}
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
			wantHeld := tc.want
			if tc.forgotten {
				wantHeld = 0
			}
			if got := f.reserved(t); got != tc.want || f.stock.Len() != wantHeld {
				t.Errorf("reserved %d (stock %d), want %d (stock %d)", got, f.stock.Len(), tc.want, wantHeld)
			}
			if tc.forgotten && !tc.extended && f.writes.Load() != before {
				t.Errorf("%d writes of claims whose reservations end, want none", f.writes.Load()-before)
			}
			var pvcs corev1.PersistentVolumeClaimList
			if err := f.api.List(ctx, &pvcs); err != nil {
				t.Fatal(err)
			}
			for i := range pvcs.Items {
				c := &pvcs.Items[i]
				if _, until, ok := claim.Reservation(c); ok {
					if extended := until.After(fixtures.Epoch.Add(ReserveTTL)); extended != tc.extended {
						t.Errorf("%s ends %v; extended %v, want %v", c.Name, until, extended, tc.extended)
					}
					continue
				}
				if claim.StateOf(c) != claim.Warm || len(c.Finalizers) > 0 || c.Annotations[v1alpha1.ReservedByAnnotationKey] != "" {
					t.Errorf("%s given back is not a plain warm PVC: %+v", c.Name, c.ObjectMeta)
				}
			}
			if tc.close {
				if got := f.stock.take(context.Background(), fpvc.Name, "ns", pool.TemplateHash(&fpvc.Spec.PVCSpecTemplate), func(string) bool { return true }, nil); got != nil {
					t.Errorf("a closed stock handed out %s", got.Name)
				}
			}
		})
	}
}

// TestStockWriteConflict: when another write lands on a claim between
// the stock's read and its extension, the stock keeps the claim as the
// cache now shows it if it is still this stock's reservation (and
// extends it on the next sync), and forgets it otherwise, without an
// error either way.
func TestStockWriteConflict(t *testing.T) {
	ctx := context.Background()
	for name, tc := range map[string]struct {
		// meanwhile changes the stored claim.
		meanwhile func(c *corev1.PersistentVolumeClaim)
		kept      bool
	}{
		"still this stock's, labelled by others": {
			meanwhile: func(c *corev1.PersistentVolumeClaim) { c.Labels["team"] = "a" },
			kept:      true,
		},
		"given back to the pool by others": {
			meanwhile: func(c *corev1.PersistentVolumeClaim) {
				c.Labels[v1alpha1.ClaimRoleLabelKey] = v1alpha1.ClaimRoleWarm
				delete(c.Annotations, v1alpha1.ReservedByAnnotationKey)
				delete(c.Annotations, v1alpha1.ReservedUntilAnnotationKey)
			},
		},
		"reserved by another replica": {
			meanwhile: func(c *corev1.PersistentVolumeClaim) { c.Annotations[v1alpha1.ReservedByAnnotationKey] = "replica-b" },
		},
		"recording a pod": {
			meanwhile: func(c *corev1.PersistentVolumeClaim) { c.Annotations[v1alpha1.UsedByPodAnnotationKey] = "ns/p-uid" },
		},
	} {
		t.Run(name, func(t *testing.T) {
			fpvc := fixtures.MakeFluentPVC("f").PoolSize(1).Obj()
			f := newStockFixture(t, 1, append([]client.Object{fpvc}, warmPVCs(fpvc, 1)...)...)
			if err := f.stock.Sync(ctx); err != nil || f.stock.Len() != 1 {
				t.Fatalf("reserving: %v, stock %d", err, f.stock.Len())
			}
			key := client.ObjectKey{Namespace: "ns", Name: "f-warm-0"}
			*f.duringWrite = func() {
				*f.duringWrite = nil
				c := &corev1.PersistentVolumeClaim{}
				if err := f.api.Get(ctx, key, c); err != nil {
					t.Fatal(err)
				}
				tc.meanwhile(c)
				if err := f.api.Update(ctx, c); err != nil {
					t.Fatal(err)
				}
			}
			f.clock.SetTime(fixtures.Epoch.Add(ReserveTTL/2 + time.Second))
			if err := f.stock.Sync(ctx); err != nil {
				t.Fatalf("sync with a conflicting write: %v", err)
			}
			stored := &corev1.PersistentVolumeClaim{}
			if err := f.api.Get(ctx, key, stored); err != nil {
				t.Fatal(err)
			}
			if _, until, _ := claim.Reservation(stored); until.After(fixtures.Epoch.Add(ReserveTTL)) {
				t.Fatalf("the extension landed over the other write (ends %v)", until)
			}
			if held := f.stock.Len() == 1; held != tc.kept {
				t.Fatalf("the stock holds the claim: %v, want %v", held, tc.kept)
			}
			if !tc.kept {
				if got := f.stock.take(ctx, fpvc.Name, "ns", pool.TemplateHash(&fpvc.Spec.PVCSpecTemplate), func(string) bool { return true }, nil); got != nil {
					t.Errorf("handed out %s, no longer this stock's", got.Name)
				}
				return
			}
			// Kept as the cache shows it: the next sync extends it.
			if err := f.stock.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			if err := f.api.Get(ctx, key, stored); err != nil {
				t.Fatal(err)
			}
			if _, until, ok := claim.Reservation(stored); !ok || !until.After(fixtures.Epoch.Add(ReserveTTL)) || stored.Labels["team"] != "a" {
				t.Errorf("after the next sync: reserved %v until %v, labels %v; want extended, the other write kept", ok, until, stored.Labels)
			}
		})
	}
}

// TestStockConcurrentTake: admissions taking claims while a sync extends
// them hand each claim out at most once, and every claim is either handed
// out or still held. Run with -race.
func TestStockConcurrentTake(t *testing.T) {
	ctx := context.Background()
	const claims, takers = 4, 8
	f, fpvc := newReservedFixture(t, claims, claims)
	f.clock.SetTime(fixtures.Epoch.Add(ReserveTTL/2 + time.Second))
	hash := pool.TemplateHash(&fpvc.Spec.PVCSpecTemplate)
	var mu sync.Mutex
	taken := map[string]int{}
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := f.stock.Sync(ctx); err != nil {
			t.Error(err)
		}
	})
	for range takers {
		wg.Go(func() {
			if c := f.stock.take(ctx, fpvc.Name, "ns", hash, func(string) bool { return true }, nil); c != nil {
				mu.Lock()
				taken[c.Name]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for name, n := range taken {
		if n > 1 {
			t.Errorf("%s handed out %d times", name, n)
		}
	}
	if got := len(taken) + f.stock.Len(); got != claims {
		t.Errorf("%d handed out and %d held, want %d in all", len(taken), f.stock.Len(), claims)
	}
}

// TestStockTakeDuringExtension: an admission that comes while a sync
// writes an extension (each write runs a take) never gets the claim being
// written, nor one still waiting for its extension, only those extended;
// every claim is handed out once, as extended.
func TestStockTakeDuringExtension(t *testing.T) {
	ctx := context.Background()
	const claims = 3
	f, fpvc := newReservedFixture(t, claims, claims)
	f.clock.SetTime(fixtures.Epoch.Add(ReserveTTL/2 + time.Second))
	hash := pool.TemplateHash(&fpvc.Spec.PVCSpecTemplate)
	take := func() *corev1.PersistentVolumeClaim {
		return f.stock.take(ctx, fpvc.Name, "ns", hash, func(string) bool { return true }, nil)
	}
	handed := map[string]int{}
	handOut := func(c *corev1.PersistentVolumeClaim) {
		handed[c.Name]++
		if _, until, _ := claim.Reservation(c); !until.After(fixtures.Epoch.Add(ReserveTTL)) {
			t.Errorf("%s handed out as reserved until %v, not as extended", c.Name, until)
		}
	}
	tries := 0
	*f.writing = func(name string) {
		tries++
		if c := take(); c != nil {
			if c.Name == name {
				t.Errorf("%s handed out while its extension was written", name)
			}
			handOut(c)
		}
	}
	before := f.writes.Load()
	if err := f.stock.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if w := f.writes.Load() - before; w != claims || tries != claims {
		t.Fatalf("%d extensions, %d takes during them; want %d of each", w, tries, claims)
	}
	*f.writing = nil
	for c := take(); c != nil; c = take() {
		handOut(c)
	}
	if len(handed) != claims {
		t.Errorf("handed out %v, want each of the %d claims", handed, claims)
	}
	for name, n := range handed {
		if n != 1 {
			t.Errorf("%s handed out %d times", name, n)
		}
	}
}

// TestStockReplicasUnknown: while the replicas cannot be counted, the
// last count stands; before any count, the replica reserves as if alone.
func TestStockReplicasUnknown(t *testing.T) {
	ctx := context.Background()
	fpvc := fixtures.MakeFluentPVC("f").PoolSize(4).Obj()
	f := newStockFixture(t, pool.ReserveShare, append([]client.Object{fpvc}, warmPVCs(fpvc, 4)...)...)
	counted := 0
	f.stock.Replicas = func(context.Context) (int, error) {
		if counted == 0 {
			return 0, errors.New("forbidden")
		}
		return counted, nil
	}
	for _, step := range []struct {
		counted, want int
	}{
		{counted: 4, want: 1},
		{counted: 0, want: 1}, // the count fails: still a share of 1
		{counted: 2, want: 2},
		{counted: 0, want: 2},
		{counted: 1, want: 4},
	} {
		counted = step.counted
		if err := f.stock.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		if got := f.stock.Len(); got != step.want {
			t.Errorf("counted %d: holds %d, want %d", step.counted, got, step.want)
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
			f.stock.Replicas = func(context.Context) (int, error) { return 2, nil }
			*f.answer = func(string) error { return answer }
			_ = f.stock.Sync(ctx)
			if got := f.reserved(t); got != 1 {
				t.Fatalf("%d reserved after giving one back, want 1", got)
			}
			*f.answer = nil
			hash := pool.TemplateHash(&fpvc.Spec.PVCSpecTemplate)
			var handed []string
			for c := f.stock.take(ctx, fpvc.Name, "ns", hash, func(string) bool { return true }, nil); c != nil; c = f.stock.take(ctx, fpvc.Name, "ns", hash, func(string) bool { return true }, nil) {
				handed = append(handed, c.Name)
			}
			if len(handed) != 1 {
				t.Fatalf("handed out %v, want only the claim still reserved", handed)
			}
			live := &corev1.PersistentVolumeClaim{}
			if err := f.api.Get(ctx, client.ObjectKey{Namespace: "ns", Name: handed[0]}, live); err != nil {
				t.Fatal(err)
			}
			if by, _, ok := claim.Reservation(live); !ok || by != "replica-a" {
				t.Errorf("handed out %s, which the API server shows given back", handed[0])
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
// reserved by this stock, or still shows the warm PVC it was reserved
// from; not once the cache shows it reclaimed, reserved by another
// replica, or deleted.
func TestStockStillHeld(t *testing.T) {
	fpvc := fixtures.MakeFluentPVC("f").PoolSize(1).Obj()
	warm := warmPVCs(fpvc, 1)[0].(*corev1.PersistentVolumeClaim)
	warm.ResourceVersion = "41"
	w, err := claim.Reserve(warm, fixtures.Epoch, fixtures.Epoch.Add(ReserveTTL), "replica-a", "token")
	if err != nil {
		t.Fatal(err)
	}
	mine := w.Object
	mine.ResourceVersion = "42"
	other := mine.DeepCopy()
	other.Annotations[v1alpha1.ReservedByAnnotationKey] = "replica-b"
	used := mine.DeepCopy()
	used.Annotations[v1alpha1.UsedByPodAnnotationKey] = "p/p-uid"
	returned := warm.DeepCopy()
	returned.ResourceVersion = "50"
	replaced := mine.DeepCopy()
	replaced.UID = "another-uid"
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
		"recording a pod":                   {cached: used},
		"warm again, given back by others":  {cached: returned},
		"another PVC of that name":          {cached: replaced},
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
			s := NewStock("replica-a", 1, NewCheckouter(api, api, api), clk)
			if got, known := s.stillHeld(context.Background(), mine); got != tc.want || known == tc.unknown {
				t.Errorf("stillHeld = %v (known %v), want %v (known %v)", got, known, tc.want, !tc.unknown)
			}
		})
	}
}

// TestStockTTL: a reservation runs for the stock's TTL, within
// MinReserveTTL and claim.MaxReservation, and ReserveTTL when unset; the
// reserved claim's end says so.
func TestStockTTL(t *testing.T) {
	for name, tc := range map[string]struct {
		ttl, want time.Duration
	}{
		"unset":     {want: ReserveTTL},
		"a minute":  {ttl: time.Minute, want: time.Minute},
		"too short": {ttl: time.Second, want: MinReserveTTL},
		"too long":  {ttl: time.Hour, want: claim.MaxReservation},
	} {
		t.Run(name, func(t *testing.T) {
			fpvc := fixtures.MakeFluentPVC("f").PoolSize(1).Obj()
			f := newStockFixture(t, 1, append([]client.Object{fpvc}, warmPVCs(fpvc, 1)...)...)
			f.stock.TTL = tc.ttl
			if err := f.stock.Sync(context.Background()); err != nil {
				t.Fatal(err)
			}
			got := &corev1.PersistentVolumeClaim{}
			if err := f.api.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "f-warm-0"}, got); err != nil {
				t.Fatal(err)
			}
			if _, until, ok := claim.Reservation(got); !ok || !until.Equal(fixtures.Epoch.Add(tc.want)) {
				t.Errorf("reserved %v until %v, want until %v", ok, until, fixtures.Epoch.Add(tc.want))
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
			tc.change(t, f.api, live)
			if err := f.stock.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			if got := f.reserved(t); got != tc.want || f.stock.Len() != tc.want {
				t.Errorf("reserved %d (stock %d), want %d", got, f.stock.Len(), tc.want)
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
	if err := f.api.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n-other", Labels: map[string]string{corev1.LabelHostname: "n-other"}}}); err != nil {
		t.Fatal(err)
	}
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
