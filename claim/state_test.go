package claim_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/st-tech/fluent-pvc-operator/apis/objects"
	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

// newClaimed is claim f-abc as the webhook creates it on a miss.
func newClaimed() *corev1.PersistentVolumeClaim {
	return claim.NewClaimed(fixtures.MakeFluentPVC("f").Obj(), "ns", "f-abc", "h", v1alpha1.CheckoutMiss, "token", "", fixtures.Epoch).Object
}

func with(c *corev1.PersistentVolumeClaim, mutate func(*corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
	c = c.DeepCopy()
	mutate(c)
	return c
}

// reserveUnprotected makes claim c a reservation as claim.Reserve
// writes it: reserved by a replica's Lease, without the finalizer.
func reserveUnprotected(c *corev1.PersistentVolumeClaim) {
	c.Annotations[v1alpha1.ReservedByAnnotationKey] = "ns/replica-a"
	c.Finalizers = nil
}

func TestName(t *testing.T) {
	cases := map[string]struct {
		fluentPVC  string
		wantPrefix string
	}{
		"short name":               {fluentPVC: "fluent-pvc-sample", wantPrefix: "fluent-pvc-sample-"},
		"60-character name":        {fluentPVC: strings.Repeat("a", 60), wantPrefix: strings.Repeat("a", 40) + "-"},
		"dots become dashes":       {fluentPVC: "logs.example.com", wantPrefix: "logs-example-com-"},
		"no dash before suffix":    {fluentPVC: strings.Repeat("a", 39) + "-b", wantPrefix: strings.Repeat("a", 39) + "-"},
		"253-character subdomain":  {fluentPVC: strings.Repeat("ab.", 84), wantPrefix: "ab-ab-ab-ab-ab-ab-ab-ab-ab-ab-ab-ab-ab-ab-"[:38] + "-"},
		"name that is only dashes": {fluentPVC: "-", wantPrefix: "fluent-pvc-"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := claim.Name(tc.fluentPVC)
			if !strings.HasPrefix(got, tc.wantPrefix) {
				t.Errorf("Name(%q) = %q, want prefix %q", tc.fluentPVC, got, tc.wantPrefix)
			}
			if errs := validation.IsDNS1123Label(got); len(errs) > 0 {
				t.Errorf("Name(%q) = %q is not a DNS-1123 label: %v", tc.fluentPVC, got, errs)
			}
			job := objects.DrainJobName(got, 99999)
			if errs := validation.IsValidLabelValue(job); len(errs) > 0 {
				t.Errorf("drain Job name %q is not a label value: %v", job, errs)
			}
			if again := claim.Name(tc.fluentPVC); again == got {
				t.Errorf("Name(%q) returned %q twice", tc.fluentPVC, got)
			}
		})
	}
}

func TestStateOf(t *testing.T) {
	held := newClaimed()
	cases := map[string]struct {
		pvc  *corev1.PersistentVolumeClaim
		want claim.State
	}{
		"a PVC of someone else's":     {&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "ns"}}, claim.None},
		"warm":                        {claim.NewWarm(fixtures.MakeFluentPVC("f").Obj(), "ns", "h", "").Object, claim.Warm},
		"handed out, no pod recorded": {held, claim.Claimed},
		"pod recorded":                {with(held, func(c *corev1.PersistentVolumeClaim) { c.Annotations[v1alpha1.UsedByPodAnnotationKey] = "app/uid" }), claim.Used},
		"made by an earlier version":  {with(held, func(c *corev1.PersistentVolumeClaim) { delete(c.Annotations, v1alpha1.UsedByPodAnnotationKey) }), claim.Used},
		"held and being deleted":      {with(held, func(c *corev1.PersistentVolumeClaim) { c.DeletionTimestamp = &metav1.Time{Time: fixtures.Epoch} }), claim.Claimed},
		"released and being deleted": {with(held, func(c *corev1.PersistentVolumeClaim) {
			c.Finalizers, c.DeletionTimestamp = nil, &metav1.Time{Time: fixtures.Epoch}
		}), claim.Released},
		"let go of and kept for the user": {with(held, func(c *corev1.PersistentVolumeClaim) { c.Finalizers = nil }), claim.Kept},
		"reserved ahead, no pod recorded": {with(held, reserveUnprotected), claim.Claimed},
		"reserved ahead and being deleted": {with(held, func(c *corev1.PersistentVolumeClaim) {
			reserveUnprotected(c)
			c.DeletionTimestamp = &metav1.Time{Time: fixtures.Epoch}
		}), claim.Released},
		"reserved ahead, pod recorded, finalizer removed by hand": {with(held, func(c *corev1.PersistentVolumeClaim) {
			reserveUnprotected(c)
			c.Annotations[v1alpha1.UsedByPodAnnotationKey] = "app/uid"
		}), claim.Kept},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := claim.StateOf(tc.pvc); got != tc.want {
				t.Errorf("StateOf = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestHeld(t *testing.T) {
	held := newClaimed()
	cases := map[string]struct {
		pvc  *corev1.PersistentVolumeClaim
		want bool
	}{
		"a claim made at admission":         {held, true},
		"a warm PVC":                        {with(held, func(c *corev1.PersistentVolumeClaim) { c.Labels[v1alpha1.ClaimRoleLabelKey] = v1alpha1.ClaimRoleWarm }), false},
		"no binding label":                  {with(held, func(c *corev1.PersistentVolumeClaim) { delete(c.Labels, v1alpha1.BindingNameLabelKey) }), false},
		"no FluentPVC label":                {with(held, func(c *corev1.PersistentVolumeClaim) { delete(c.Labels, v1alpha1.FluentPVCNameLabelKey) }), false},
		"released (drained or abandoned)":   {with(held, func(c *corev1.PersistentVolumeClaim) { c.Finalizers = nil }), false},
		"being deleted but never let go of": {with(held, func(c *corev1.PersistentVolumeClaim) { c.DeletionTimestamp = &metav1.Time{Time: fixtures.Epoch} }), true},
		"reserved ahead, no finalizer yet":  {with(held, reserveUnprotected), true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := claim.Held(tc.pvc); got != tc.want {
				t.Errorf("Held = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPodOf(t *testing.T) {
	pod := v1alpha1.ObjectIdentity{Name: "app", UID: "uid-1"}
	cases := map[string]struct {
		pvc         *corev1.PersistentVolumeClaim
		wantPod     v1alpha1.ObjectIdentity
		wantTracked bool
	}{
		"as handed out: tracked, no pod": {pvc: newClaimed(), wantTracked: true},
		"pod recorded": {pvc: with(newClaimed(), func(c *corev1.PersistentVolumeClaim) {
			c.Annotations[v1alpha1.UsedByPodAnnotationKey] = "app/uid-1"
		}), wantPod: pod, wantTracked: true},
		"from an earlier version: not tracked": {pvc: with(newClaimed(), func(c *corev1.PersistentVolumeClaim) {
			delete(c.Annotations, v1alpha1.UsedByPodAnnotationKey)
		})},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, tracked := claim.PodOf(tc.pvc)
			if diff := cmp.Diff(tc.wantPod, got); diff != "" || tracked != tc.wantTracked {
				t.Errorf("PodOf = %v, %v; want %v, %v", got, tracked, tc.wantPod, tc.wantTracked)
			}
			if tc.wantPod.UID != "" && !claim.Records(tc.pvc, pod) {
				t.Errorf("Records(%v) = false on a claim that records it", pod)
			}
		})
	}
}

func TestSameCheckout(t *testing.T) {
	pvc := newClaimed()
	pvc.UID = "pvc-uid"
	b := claim.Binding(pvc, "fpvc-uid")
	returned := func(c *corev1.PersistentVolumeClaim) {
		c.Labels[v1alpha1.ClaimRoleLabelKey] = v1alpha1.ClaimRoleWarm
		delete(c.Labels, v1alpha1.BindingNameLabelKey)
		delete(c.Annotations, v1alpha1.CheckoutIDAnnotationKey)
	}
	legacy := b.DeepCopy()
	delete(legacy.Annotations, v1alpha1.CheckoutIDAnnotationKey)
	cases := map[string]struct {
		binding *v1alpha1.FluentPVCBinding
		pvc     *corev1.PersistentVolumeClaim
		want    bool
	}{
		"the claim it was made from": {b, pvc, true},
		"checked out again: another token": {b, with(pvc, func(c *corev1.PersistentVolumeClaim) {
			c.Annotations[v1alpha1.CheckoutIDAnnotationKey] = "another"
		}), false},
		"back in the pool":          {b, with(pvc, returned), false},
		"another object, same name": {b, with(pvc, func(c *corev1.PersistentVolumeClaim) { c.UID = "other-uid" }), false},
		"labelled for another binding": {b, with(pvc, func(c *corev1.PersistentVolumeClaim) {
			c.Labels[v1alpha1.BindingNameLabelKey] = "f-xyz"
		}), false},
		"binding label removed by hand: still drained under its binding": {b, with(pvc, func(c *corev1.PersistentVolumeClaim) {
			delete(c.Labels, v1alpha1.BindingNameLabelKey)
		}), true},
		"checked out again by an earlier version: token gone": {b, with(pvc, func(c *corev1.PersistentVolumeClaim) {
			delete(c.Annotations, v1alpha1.CheckoutIDAnnotationKey)
		}), false},
		"binding from an earlier version":                         {legacy, pvc, true},
		"binding from an earlier version, claim back in the pool": {legacy, with(pvc, returned), false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := claim.SameCheckout(tc.binding, tc.pvc); got != tc.want {
				t.Errorf("SameCheckout = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCheckoutTokens(t *testing.T) {
	a, c := claim.NewCheckoutID(), claim.NewCheckoutID()
	if len(a) != 16 || a == c {
		t.Errorf("checkout tokens %q and %q: want two different tokens of 16 characters", a, c)
	}
	pvc := claim.NewClaimed(fixtures.MakeFluentPVC("f").Obj(), "ns", "f-abc", "h", v1alpha1.CheckoutMiss, a, "", fixtures.Epoch).Object
	if got := claim.Binding(pvc, "").Annotations[v1alpha1.CheckoutIDAnnotationKey]; got != a {
		t.Errorf("binding's token = %q, want the claim's %q", got, a)
	}
}

func TestAdmittedAt(t *testing.T) {
	cases := map[string]struct {
		value  string
		want   string
		wantOK bool
	}{
		"with a fraction":       {"2026-01-02T03:04:05.123456789Z", "2026-01-02T03:04:05.123456789Z", true},
		"whole seconds (older)": {"2026-01-02T03:04:05Z", "2026-01-02T03:04:05Z", true},
		"missing":               {"", "0001-01-01T00:00:00Z", false},
		"not a time":            {"yesterday", "0001-01-01T00:00:00Z", false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok := claim.AdmittedAt(map[string]string{v1alpha1.AdmittedAtAnnotationKey: tc.value})
			if got.UTC().Format("2006-01-02T15:04:05.999999999Z07:00") != tc.want || ok != tc.wantOK {
				t.Errorf("AdmittedAt(%q) = %v, %v; want %s, %v", tc.value, got, ok, tc.want, tc.wantOK)
			}
		})
	}
}
