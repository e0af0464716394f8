package checkout

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/st-tech/fluent-pvc-operator/apis/objects"
	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/expectations"
	"github.com/st-tech/fluent-pvc-operator/pool"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

// indexed is b with the indexes IndexWarm adds to the webhook's cache.
func indexed(b *fake.ClientBuilder) *fake.ClientBuilder {
	return b.WithIndex(&corev1.PersistentVolumeClaim{}, WarmIndex, warmKey).
		WithIndex(&corev1.Pod{}, HolderIndex, holderKey).
		WithIndex(&storagev1.VolumeAttachment{}, AttachmentIndex, attachmentKey)
}

// boundWarm is a Bound warm PVC of f in namespace ns, usable on any node,
// named f-warm.
func boundWarm(f *v1alpha1.FluentPVC) *corev1.PersistentVolumeClaim {
	warm := claim.NewWarm(f, "ns", pool.TemplateHash(&f.Spec.PVCSpecTemplate), "").Object
	warm.Name, warm.UID = "f-warm", "warm-uid"
	warm.Annotations = map[string]string{v1alpha1.NodeAffinityAnnotationKey: ""}
	warm.Spec.VolumeName, warm.Status.Phase = "pv-warm", corev1.ClaimBound
	return warm
}

// testScheme is a scheme with the types the fixtures use.
func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := fixtures.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return scheme
}

// TestCheckoutSkipsAStrandedVolume: a warm PVC whose volume is attached to
// a node the cache does not have goes to no pod; one attached to a node
// that exists does.
func TestCheckoutSkipsAStrandedVolume(t *testing.T) {
	now := fixtures.Epoch.Add(time.Hour)
	f := fixtures.MakeFluentPVC("f").PoolSize(1).Obj()
	for name, tc := range map[string]struct {
		attachedTo []string
		hit        bool
	}{
		"not attached":                     {hit: true},
		"attached to a node that exists":   {attachedTo: []string{"n1"}, hit: true},
		"attached to a node that is gone":  {attachedTo: []string{"gone"}},
		"attached here and to a gone node": {attachedTo: []string{"n1", "gone"}},
	} {
		t.Run(name, func(t *testing.T) {
			warm := boundWarm(f)
			objs := []client.Object{warm, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}}
			for _, node := range tc.attachedTo {
				objs = append(objs, attachment(warm.Spec.VolumeName, node))
			}
			api := indexed(fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objs...)).Build()
			got, err := NewCheckouter(api, api, api).Checkout(context.Background(), f, fixtures.MakePod("p", "ns").FluentPVC(f.Name).Obj(), now)
			if err != nil {
				t.Fatal(err)
			}
			if hit := got.PVC != nil; hit != tc.hit {
				t.Errorf("hit: %v, want %v", hit, tc.hit)
			}
		})
	}
}

// attachment is a VolumeAttachment of volume pv to node.
func attachment(pv, node string) *storagev1.VolumeAttachment {
	return &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: "va-" + pv + "-" + node},
		Spec:       storagev1.VolumeAttachmentSpec{NodeName: node, Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pv}},
	}
}

// TestCheckoutReadsAGoneNodeOnce: the warm PVCs staged on one node that
// is gone cost one read of that node, not one each.
func TestCheckoutReadsAGoneNodeOnce(t *testing.T) {
	f := fixtures.MakeFluentPVC("f").PoolSize(3).Obj()
	var objs []client.Object
	for _, name := range []string{"a", "b", "c"} {
		warm := boundWarm(f)
		warm.Name, warm.UID, warm.Spec.VolumeName = "f-"+name, types.UID(name), "pv-"+name
		objs = append(objs, warm, attachment(warm.Spec.VolumeName, "gone"))
	}
	var nodeReads atomic.Int32
	api := indexed(fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objs...)).
		WithInterceptorFuncs(interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*corev1.Node); ok {
				nodeReads.Add(1)
			}
			return c.Get(ctx, key, obj, opts...)
		}}).Build()
	got, err := NewCheckouter(api, api, api).Checkout(context.Background(), f, fixtures.MakePod("p", "ns").FluentPVC(f.Name).Obj(), fixtures.Epoch.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if got.PVC != nil {
		t.Errorf("got %s, want a miss: every volume is attached to a gone node", got.PVC.Name)
	}
	if n := nodeReads.Load(); n != 1 {
		t.Errorf("%d reads of nodes, want 1", n)
	}
}

// TestCheckoutReadsNodesFromTheStore: with a NodeStore, a checkout
// places the pod on the store's nodes, not on a list through the cache.
// The cache here has no node, with which any warm PVC would be handed
// out; the store has only a zone-b node, which the zone-a volume does
// not reach.
func TestCheckoutReadsNodesFromTheStore(t *testing.T) {
	f := fixtures.MakeFluentPVC("f").PoolSize(1).Obj()
	warm := boundWarm(f)
	warm.Annotations[v1alpha1.NodeAffinityAnnotationKey] = pool.VolumeAffinity(fixtures.MakePV("pv", fixtures.InTerm(pool.ZoneLabelKey, "zone-a")))
	store := toolscache.NewStore(toolscache.MetaNamespaceKeyFunc)
	if err := store.Add(fixtures.MakeNode("n-b").Zone("zone-b").Obj()); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		nodes *NodeStore
		hit   bool
	}{
		"the cache's nodes (none): handed out": {hit: true},
		"the store's nodes: missed":            {nodes: NewNodeStore(storeOnly{store: store, synced: true})},
		"the store not synced: the cache's":    {nodes: NewNodeStore(storeOnly{store: store}), hit: true},
	} {
		t.Run(name, func(t *testing.T) {
			api := indexed(fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(warm.DeepCopy())).Build()
			c := NewCheckouter(api, api, api)
			c.Nodes = tc.nodes
			got, err := c.Checkout(context.Background(), f, fixtures.MakePod("p", "ns").FluentPVC(f.Name).Obj(), fixtures.Epoch.Add(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			if hit := got.PVC != nil; hit != tc.hit {
				t.Errorf("hit: %v, want %v", hit, tc.hit)
			}
		})
	}
}

// TestCheckoutSkipsWhatThisReplicaIsTaking runs two checkouts of one
// replica at once, the second while the first one's write of the pool's
// only warm PVC is in flight: the second leaves that PVC to the first
// instead of writing it too and making one of the two lose a race (an
// extra write, and a conflict retried on a live list, on the admission
// path). Before, both wrote it.
func TestCheckoutSkipsWhatThisReplicaIsTaking(t *testing.T) {
	now := fixtures.Epoch.Add(time.Hour)
	f := fixtures.MakeFluentPVC("f").PoolSize(1).Obj()
	warm := boundWarm(f)
	inFlight, secondDone := make(chan struct{}), make(chan struct{})
	var updates atomic.Int32
	api := indexed(fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(warm)).
		WithInterceptorFuncs(interceptor.Funcs{Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if updates.Add(1) == 1 {
				close(inFlight)
				<-secondDone
			}
			return c.Update(ctx, obj, opts...)
		}}).Build()
	c := NewCheckouter(api, api, api)
	pod := func(name string) *corev1.Pod { return fixtures.MakePod(name, "ns").FluentPVC(f.Name).Obj() }
	first := make(chan Checkedout)
	go func() {
		got, err := c.Checkout(context.Background(), f, pod("a"), now)
		if err != nil {
			t.Error(err)
		}
		first <- got
	}()
	<-inFlight
	second, err := c.Checkout(context.Background(), f, pod("b"), now)
	close(secondDone)
	if err != nil {
		t.Fatal(err)
	}
	got := <-first
	if got.PVC == nil || second.PVC != nil {
		t.Errorf("first got %v, second %v: want the first to take the PVC and the second to miss", got.PVC != nil, second.PVC != nil)
	}
	if n := updates.Load(); n != 1 {
		t.Errorf("%d writes of the warm PVC, want 1", n)
	}
}

// TestCheckoutLeavesAPVCWhoseHolderIsPending: a warm PVC that records a
// recent holder request goes to no pod until the cache holds a holder
// carrying that request, since the holder's admission may have read the
// PVC warm before the checkout and the holder be created after it. Before,
// such a PVC was handed out, and its holder was created beside the pod.
func TestCheckoutLeavesAPVCWhoseHolderIsPending(t *testing.T) {
	now := fixtures.Epoch.Add(time.Hour)
	f := fixtures.MakeFluentPVC("f").PoolSize(1).Obj()
	request := func(at time.Time) string { return at.UTC().Format(time.RFC3339Nano) }
	for name, tc := range map[string]struct {
		request string
		holder  string // the request the cached holder carries; "-": no holder
		// elsewhere: the cached holder holds another warm PVC.
		elsewhere bool
		hit       bool
	}{
		"a recent request, another PVC's holder with the same": {request: request(now.Add(-time.Second)), holder: request(now.Add(-time.Second)), elsewhere: true},
		"no request":                          {holder: "-", hit: true},
		"a recent request, no holder yet":     {request: request(now.Add(-time.Second)), holder: "-"},
		"a recent request, its holder cached": {request: request(now.Add(-time.Second)), holder: request(now.Add(-time.Second)), hit: true},
		"a recent request, an older holder":   {request: request(now.Add(-time.Second)), holder: request(now.Add(-time.Minute))},
		"a request past its TTL, no holder":   {request: request(now.Add(-claim.HolderAdmitWindow - claim.AdmissionBound)), holder: "-", hit: true},
		"a malformed request":                 {request: "soon", holder: "-", hit: true},
	} {
		t.Run(name, func(t *testing.T) {
			warm := boundWarm(f)
			if tc.request != "" {
				warm.Annotations[v1alpha1.HolderRequestAnnotationKey] = tc.request
			}
			objs := []client.Object{warm}
			if tc.holder != "-" {
				of := warm
				if tc.elsewhere {
					of = warm.DeepCopy()
					of.Name, of.UID = "f-other", "other-uid"
					of.Annotations = map[string]string{v1alpha1.NodeAffinityAnnotationKey: ""}
					of.Status.Phase = corev1.ClaimPending
					objs = append(objs, of)
				}
				h := objects.HolderPod(f.Name, of, "n1", "pause", "")
				h.Annotations = map[string]string{v1alpha1.HolderRequestAnnotationKey: tc.holder}
				objs = append(objs, h)
			}
			api := indexed(fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objs...)).Build()
			got, err := NewCheckouter(api, api, api).Checkout(context.Background(), f, fixtures.MakePod("p", "ns").FluentPVC(f.Name).Obj(), now)
			if err != nil {
				t.Fatal(err)
			}
			if hit := got.PVC != nil; hit != tc.hit {
				t.Errorf("hit: %v, want %v", hit, tc.hit)
			}
			if got.PVC != nil {
				if _, ok := got.PVC.Annotations[v1alpha1.HolderRequestAnnotationKey]; ok {
					t.Errorf("the claim keeps its holder request: %v", got.PVC.Annotations)
				}
			}
		})
	}
}

// TestCheckoutRetriesAPVCThatLostOnlyAnotherWrite: a checkout whose write
// of the only warm PVC loses a race retries it on a live list when the
// write that won left it warm (an annotation of the pool's, the PV
// controller's binding), and leaves it when another replica checked it
// out. Before, a PVC this replica had tried stayed skipped for a minute,
// whatever its version: the pod missed, and so did this replica's next
// pods, while the PVC sat warm.
func TestCheckoutRetriesAPVCThatLostOnlyAnotherWrite(t *testing.T) {
	now := fixtures.Epoch.Add(time.Hour)
	f := fixtures.MakeFluentPVC("f").PoolSize(1).Obj()
	for name, tc := range map[string]struct {
		// meanwhile writes the PVC between the checkout's read and its write.
		meanwhile func(pvc *corev1.PersistentVolumeClaim) *corev1.PersistentVolumeClaim
		hit       bool
		writes    int32
	}{
		"nothing meanwhile": {meanwhile: nil, hit: true, writes: 1},
		"an annotation meanwhile": {meanwhile: func(pvc *corev1.PersistentVolumeClaim) *corev1.PersistentVolumeClaim {
			pvc.Annotations["example.com/note"] = "x"
			return pvc
		}, hit: true, writes: 2},
		"another replica's checkout meanwhile": {meanwhile: func(pvc *corev1.PersistentVolumeClaim) *corev1.PersistentVolumeClaim {
			w, err := claim.Checkout(pvc, now, claim.NewCheckoutID())
			if err != nil {
				t.Fatal(err)
			}
			return w.Object
		}, hit: false, writes: 1},
	} {
		t.Run(name, func(t *testing.T) {
			warm := boundWarm(f)
			var checkoutWrites atomic.Int32
			api := indexed(fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(warm)).
				WithInterceptorFuncs(interceptor.Funcs{Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
					if checkoutWrites.Add(1) == 1 && tc.meanwhile != nil {
						cur := &corev1.PersistentVolumeClaim{}
						if err := c.Get(ctx, client.ObjectKeyFromObject(obj), cur); err != nil {
							return err
						}
						if err := c.Update(ctx, tc.meanwhile(cur)); err != nil {
							return err
						}
					}
					return c.Update(ctx, obj, opts...)
				}}).Build()
			got, err := NewCheckouter(api, api, api).Checkout(context.Background(), f, fixtures.MakePod("p", "ns").FluentPVC(f.Name).Obj(), now)
			if err != nil {
				t.Fatal(err)
			}
			if hit := got.PVC != nil; hit != tc.hit {
				t.Errorf("hit: %v, want %v", hit, tc.hit)
			}
			if n := checkoutWrites.Load(); n != tc.writes {
				t.Errorf("%d checkout writes, want %d", n, tc.writes)
			}
		})
	}
}

// TestTake: a replica skips every version of a PVC it tried in the last
// expectations.TTL, and only those. Before, it remembered only the last: a cache
// still showing the version an earlier try lost on made the next
// checkout write it again and lose again.
func TestTake(t *testing.T) {
	now := fixtures.Epoch.Add(time.Hour)
	pvc := func(version string) *corev1.PersistentVolumeClaim {
		p := &corev1.PersistentVolumeClaim{}
		p.UID, p.ResourceVersion = "uid", version
		return p
	}
	type try struct {
		version string
		after   time.Duration
		free    bool
	}
	for name, tc := range map[string][]try{
		"a version once":                {{version: "1", free: true}, {version: "1"}},
		"a newer version":               {{version: "1", free: true}, {version: "2", free: true}},
		"lost on 1, won on 2, 1 cached": {{version: "1", free: true}, {version: "2", free: true}, {version: "1"}, {version: "2"}},
		"a version again after the TTL": {{version: "1", free: true}, {version: "1", after: expectations.TTL, free: true}},
	} {
		t.Run(name, func(t *testing.T) {
			c := NewCheckouter(nil, nil, nil)
			for i, tr := range tc {
				if got := c.take(pvc(tr.version), now.Add(tr.after)); got != tr.free {
					t.Errorf("try %d of version %s: free %v, want %v", i, tr.version, got, tr.free)
				}
			}
		})
	}
}

func TestMissReason(t *testing.T) {
	cases := map[string]struct {
		warm, candidates int
		lostRace         bool
		want             string
	}{
		"empty pool":            {want: "the pool has no warm PVC in the namespace"},
		"none usable":           {warm: 3, want: "no warm PVC is Bound, from the current template, usable on a node the pod can run on and without a holder being created"},
		"lost every race":       {warm: 3, candidates: 2, lostRace: true, want: "concurrent admissions took every warm PVC tried"},
		"all taken just before": {warm: 3, candidates: 2, want: "every warm PVC was taken moments ago by this replica"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := missReason(tc.warm, tc.candidates, tc.lostRace); got != tc.want {
				t.Errorf("missReason = %q, want %q", got, tc.want)
			}
		})
	}
}
