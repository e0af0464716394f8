package controllers

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/pool"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

// TestObserveStranded: a Bound warm PVC's volume attached to a node that
// is gone is reported once the pool has seen it for pool.StrandedAfter,
// and only when a live read proves the node gone.
func TestObserveStranded(t *testing.T) {
	t0 := fixtures.Epoch
	node := func(name string) corev1.Node { return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}} }
	va := func(uid, pv, node string) storagev1.VolumeAttachment {
		return storagev1.VolumeAttachment{
			ObjectMeta: metav1.ObjectMeta{Name: uid, UID: types.UID(uid)},
			Spec:       storagev1.VolumeAttachmentSpec{NodeName: node, Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To(pv)}},
		}
	}
	warm := claim.NewWarm(fixtures.MakeFluentPVC("f").Obj(), "ns", "h", "").Object
	warm.Spec.VolumeName, warm.Status.Phase = "pv-w", corev1.ClaimBound
	cases := map[string]struct {
		vas []storagev1.VolumeAttachment
		// live are the nodes the API server has; the cache has n1 only.
		live        []client.Object
		readFails   bool
		seenFor     time.Duration // since the pool first saw the attachments
		want        map[string]string
		wantRecheck time.Duration
	}{
		"on a gone node, just seen: waits":     {vas: []storagev1.VolumeAttachment{va("a", "pv-w", "gone")}, wantRecheck: pool.StrandedAfter},
		"on a gone node, seen for the wait":    {vas: []storagev1.VolumeAttachment{va("a", "pv-w", "gone")}, seenFor: pool.StrandedAfter, want: map[string]string{"pv-w": "gone"}},
		"on a node the cache has not seen yet": {vas: []storagev1.VolumeAttachment{va("a", "pv-w", "new")}, live: []client.Object{&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "new"}}}, seenFor: pool.StrandedAfter},
		"the live read fails: not proved gone": {vas: []storagev1.VolumeAttachment{va("a", "pv-w", "gone")}, readFails: true, seenFor: pool.StrandedAfter},
		"on a node that exists":                {vas: []storagev1.VolumeAttachment{va("a", "pv-w", "n1")}, seenFor: pool.StrandedAfter},
		"another volume, on a gone node":       {vas: []storagev1.VolumeAttachment{va("a", "pv-x", "gone")}, seenFor: pool.StrandedAfter},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			api := fakeAPI(t, interceptor.Funcs{}, tc.live...)
			live := client.Reader(api)
			if tc.readFails {
				live = fakeAPI(t, interceptor.Funcs{Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
					return apierrors.NewServiceUnavailable("etcd is down")
				}})
			}
			clk := clocktesting.NewFakePassiveClock(t0)
			r := NewPoolReconciler(api, live, clk, Options{})
			observe := func() poolObserved {
				o := poolObserved{warm: []corev1.PersistentVolumeClaim{*warm}}
				r.observeStranded(context.Background(), []corev1.Node{node("n1")}, tc.vas, &o)
				return o
			}
			o := observe()
			if tc.seenFor > 0 {
				clk.SetTime(t0.Add(tc.seenFor))
				o = observe()
			}
			if diff := cmp.Diff(tc.want, o.stranded, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("stranded (-want +got):\n%s", diff)
			}
			if o.strandedRecheck != tc.wantRecheck {
				t.Errorf("recheck = %s, want %s", o.strandedRecheck, tc.wantRecheck)
			}
		})
	}
}

// TestPoolOpsStrandedDeleted: a stranded warm PVC's replacement is told
// (the WarmPVCStranded Warning) once its delete is made, not when a
// checkout took the PVC first and the delete lost.
func TestPoolOpsStrandedDeleted(t *testing.T) {
	f := fixtures.MakeFluentPVC("f").PoolSize(1).Obj()
	hash := pool.TemplateHash(&f.Spec.PVCSpecTemplate)
	warm := claim.NewWarm(f, "ns", hash, "").Object
	warm.Name, warm.Spec.VolumeName, warm.Status.Phase = "w", "pv-w", corev1.ClaimBound
	for name, tc := range map[string]struct {
		deleteErr error
		want      []string
	}{
		"deleted: told":                      {want: []string{"ns/w"}},
		"a checkout took it first: not told": {deleteErr: apierrors.NewConflict(corev1.Resource("persistentvolumeclaims"), "w", errors.New("the object has been modified"))},
	} {
		t.Run(name, func(t *testing.T) {
			api := fakeAPI(t, interceptor.Funcs{Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
				if tc.deleteErr != nil {
					return tc.deleteErr
				}
				return c.Delete(ctx, obj, opts...)
			}}, warm.DeepCopy())
			live := &corev1.PersistentVolumeClaim{}
			if err := api.Get(context.Background(), client.ObjectKeyFromObject(warm), live); err != nil {
				t.Fatal(err)
			}
			r := NewPoolReconciler(api, api, clocktesting.NewFakePassiveClock(fixtures.Epoch), Options{})
			np := namespacePlan{namespace: "ns", plan: pool.Plan{Delete: []string{"w"}}, kept: true, size: 1}
			pp := poolPlan{hash: hash, replaced: map[string]string{"ns/w": pool.ReplacedStranded}}
			deleted := &keyLog{}
			if err := runParallel(r.poolOps(context.Background(), f, np, pp, poolObserved{}, map[string]*corev1.PersistentVolumeClaim{"w": live}, deleted), 1); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, deleted.sorted(), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("told (-want +got):\n%s", diff)
			}
		})
	}
}

// TestStrandedMessage names each deleted warm PVC with the node its
// volume stays attached to.
func TestStrandedMessage(t *testing.T) {
	warm := func(ns, name, pv string) corev1.PersistentVolumeClaim {
		return corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PersistentVolumeClaimSpec{VolumeName: pv}}
	}
	for name, tc := range map[string]struct {
		deleted []string
		want    string
	}{
		"one":               {deleted: []string{"a/w1"}, want: "a/w1 (on node gone-1)"},
		"two, two nodes":    {deleted: []string{"a/w1", "b/w2"}, want: "a/w1 (on node gone-1), b/w2 (on node gone-2)"},
		"a name in another": {deleted: []string{"b/w1"}, want: "b/w1 (on node gone-2)"},
	} {
		t.Run(name, func(t *testing.T) {
			got := strandedMessage(tc.deleted, map[string]string{"pv-1": "gone-1", "pv-2": "gone-2", "pv-3": "gone-2"},
				[]corev1.PersistentVolumeClaim{warm("a", "w1", "pv-1"), warm("b", "w2", "pv-2"), warm("b", "w1", "pv-3")}, time.Minute)
			if !strings.Contains(got, "for 1m0s or longer: "+tc.want+";") {
				t.Errorf("message %q does not name %q", got, tc.want)
			}
		})
	}
}

// TestReconcileTellsStrandedDeletes: the WarmPVCStranded Warning comes
// with the delete of the stranded warm PVC, and not when the delete lost
// to a checkout.
func TestReconcileTellsStrandedDeletes(t *testing.T) {
	t0 := fixtures.Epoch
	f := fixtures.MakeFluentPVC("f").PoolSize(1).Mutate(func(f *v1alpha1.FluentPVC) {
		f.Spec.Pool.Namespaces = []string{"ns"}
	}).Obj()
	warm := claim.NewWarm(f, "ns", pool.TemplateHash(&f.Spec.PVCSpecTemplate), "").Object
	warm.Name, warm.Spec.VolumeName, warm.Status.Phase = "w", "pv-w", corev1.ClaimBound
	warm.Annotations = map[string]string{v1alpha1.NodeAffinityAnnotationKey: ""}
	objs := []client.Object{
		warm,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}},
		&storagev1.VolumeAttachment{
			ObjectMeta: metav1.ObjectMeta{Name: "va", UID: "va-uid"},
			Spec:       storagev1.VolumeAttachmentSpec{NodeName: "gone", Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To("pv-w")}},
		},
	}
	for name, tc := range map[string]struct {
		deleteErr error
		told      bool
	}{
		"deleted: told":                      {told: true},
		"a checkout took it first: not told": {deleteErr: apierrors.NewConflict(corev1.Resource("persistentvolumeclaims"), "w", errors.New("the object has been modified"))},
	} {
		t.Run(name, func(t *testing.T) {
			api := fakeAPI(t, interceptor.Funcs{Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
				if _, ok := obj.(*corev1.PersistentVolumeClaim); ok && tc.deleteErr != nil {
					return tc.deleteErr
				}
				return c.Delete(ctx, obj, opts...)
			}}, objs...)
			clk := clocktesting.NewFakePassiveClock(t0)
			r := NewPoolReconciler(api, api, clk, Options{})
			told := func() bool {
				res, err := r.Reconcile(context.Background(), f, nil)
				if err != nil {
					t.Fatal(err)
				}
				return slices.ContainsFunc(res.warnings, func(w poolWarning) bool { return w.reason == v1alpha1.EventReasonWarmPVCStranded })
			}
			if told() {
				t.Fatal("told before the attachment was seen for the timeout")
			}
			clk.SetTime(t0.Add(pool.StrandedAfter))
			if got := told(); got != tc.told {
				t.Errorf("told = %v, want %v", got, tc.told)
			}
		})
	}
}
