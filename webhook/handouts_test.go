package webhook

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

// TestOwnHandout tells the reinvocation of an admission that handed out a
// claim from a copy of the admitted pod's manifest, with no live read:
// the copy is made from the pod once it exists, so either its name differs
// from the one the claim went to or the cache holds what the original
// left (the pod, or the binding or the claim recording it). The case that
// failed before: a copy under another name while the cache has not seen
// the original yet.
func TestOwnHandout(t *testing.T) {
	now := fixtures.Epoch.Add(time.Hour)
	f := fixtures.MakeFluentPVC("f").Obj()
	pvc := fixtures.CheckedOut(fixtures.Returned(fixtures.Claim(f, "ns", "f-abc", "h", v1alpha1.CheckoutHit, now)), now)
	pod := func(name string) *corev1.Pod {
		return fixtures.MakePod(name, "ns").FluentPVC(f.Name).Claim(pvc.Name).Label(v1alpha1.BindingNameLabelKey, pvc.Name).Obj()
	}
	original := pod("app")
	original.UID = "app-uid"
	recorded, err := claim.RecordPod(pvc, v1alpha1.ObjectIdentity{Name: "app", UID: "app-uid"})
	if err != nil {
		t.Fatal(err)
	}
	binding := claim.Binding(pvc, f.UID)
	binding.Spec.Pod = v1alpha1.ObjectIdentity{Name: "app", UID: "app-uid"}
	cases := map[string]struct {
		cached []client.Object
		pod    *corev1.Pod
		want   bool
	}{
		"the reinvocation, the claim cached as handed out": {cached: []client.Object{pvc}, pod: pod("app"), want: true},
		"the reinvocation of a miss, its claim not cached": {pod: pod("app"), want: true},
		"a copy under another name, nothing cached yet":    {cached: []client.Object{pvc}, pod: pod("copy")},
		"the same name, the original pod cached":           {cached: []client.Object{pvc, original}, pod: pod("app")},
		"the same name, the binding recording a pod":       {cached: []client.Object{pvc, binding}, pod: pod("app")},
		"the same name, the claim recording a pod":         {cached: []client.Object{recorded.Object}, pod: pod("app")},
	}
	scheme := runtime.NewScheme()
	if err := fixtures.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cache := fake.NewClientBuilder().WithScheme(scheme).WithObjects(tc.cached...).Build()
			m := &PodMutator{Reader: cache, Handouts: NewHandouts(), Clock: clocktesting.NewFakePassiveClock(now)}
			m.Handouts.Record(types.NamespacedName{Namespace: "ns", Name: pvc.Name}, HandoutPod(pod("app")), now.Add(-time.Millisecond))
			got, err := m.ownHandout(context.Background(), tc.pod, false)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("ownHandout = %v, want %v", got, tc.want)
			}
		})
	}
}
