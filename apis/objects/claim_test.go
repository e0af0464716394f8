package objects

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

func TestClaimName(t *testing.T) {
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
			got := ClaimName(tc.fluentPVC)
			if !strings.HasPrefix(got, tc.wantPrefix) {
				t.Errorf("ClaimName(%q) = %q, want prefix %q", tc.fluentPVC, got, tc.wantPrefix)
			}
			if errs := validation.IsDNS1123Label(got); len(errs) > 0 {
				t.Errorf("ClaimName(%q) = %q is not a DNS-1123 label: %v", tc.fluentPVC, got, errs)
			}
			job := DrainJobName(got, 99999)
			if errs := validation.IsValidLabelValue(job); len(errs) > 0 {
				t.Errorf("drain Job name %q is not a label value: %v", job, errs)
			}
			if again := ClaimName(tc.fluentPVC); again == got {
				t.Errorf("ClaimName(%q) returned %q twice", tc.fluentPVC, got)
			}
		})
	}
}

func TestClaimed(t *testing.T) {
	fpvc := fixtures.MakeFluentPVC("f").Obj()
	claimed := func(mutate func(*corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
		c := Claim(fpvc, "ns", "f-abc", "h", v1alpha1.CheckoutMiss, fixtures.Epoch)
		mutate(c)
		return c
	}
	cases := map[string]struct {
		claim *corev1.PersistentVolumeClaim
		want  bool
	}{
		"a claim made at admission":         {claimed(func(*corev1.PersistentVolumeClaim) {}), true},
		"a warm PVC":                        {claimed(func(c *corev1.PersistentVolumeClaim) { c.Labels[v1alpha1.ClaimRoleLabelKey] = v1alpha1.ClaimRoleWarm }), false},
		"no binding label":                  {claimed(func(c *corev1.PersistentVolumeClaim) { delete(c.Labels, v1alpha1.BindingNameLabelKey) }), false},
		"no FluentPVC label":                {claimed(func(c *corev1.PersistentVolumeClaim) { delete(c.Labels, v1alpha1.FluentPVCNameLabelKey) }), false},
		"released (drained or abandoned)":   {claimed(func(c *corev1.PersistentVolumeClaim) { c.Finalizers = nil }), false},
		"being deleted but never let go of": {claimed(func(c *corev1.PersistentVolumeClaim) { c.DeletionTimestamp = &metav1.Time{Time: fixtures.Epoch} }), true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := Claimed(tc.claim); got != tc.want {
				t.Errorf("Claimed = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestClaimPod(t *testing.T) {
	withAnnotation := func(v *string) *corev1.PersistentVolumeClaim {
		c := Claim(fixtures.MakeFluentPVC("f").Obj(), "ns", "f-abc", "h", v1alpha1.CheckoutMiss, fixtures.Epoch)
		if v == nil {
			delete(c.Annotations, v1alpha1.UsedByPodAnnotationKey)
		} else {
			c.Annotations[v1alpha1.UsedByPodAnnotationKey] = *v
		}
		return c
	}
	pod := v1alpha1.ObjectIdentity{Name: "app", UID: "uid-1"}
	recorded := UsedByPod(pod)
	cases := map[string]struct {
		claim       *corev1.PersistentVolumeClaim
		wantPod     v1alpha1.ObjectIdentity
		wantTracked bool
	}{
		"as handed out: tracked, no pod":       {claim: Claim(fixtures.MakeFluentPVC("f").Obj(), "ns", "f-abc", "h", v1alpha1.CheckoutHit, fixtures.Epoch), wantTracked: true},
		"pod recorded":                         {claim: withAnnotation(&recorded), wantPod: pod, wantTracked: true},
		"from an earlier version: not tracked": {claim: withAnnotation(nil)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, tracked := ClaimPod(tc.claim)
			if diff := cmp.Diff(tc.wantPod, got); diff != "" || tracked != tc.wantTracked {
				t.Errorf("ClaimPod = %v, %v; want %v, %v", got, tracked, tc.wantPod, tc.wantTracked)
			}
		})
	}
}

func TestSameCheckout(t *testing.T) {
	fpvc := fixtures.MakeFluentPVC("f").Obj()
	claim := Claim(fpvc, "ns", "f-abc", "h", v1alpha1.CheckoutMiss, fixtures.Epoch)
	claim.UID = "pvc-uid"
	b := Binding(claim, fpvc.UID)
	with := func(mutate func(*corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
		c := claim.DeepCopy()
		mutate(c)
		return c
	}
	// What pool.Returned does to a claim.
	returned := func(c *corev1.PersistentVolumeClaim) {
		c.Labels[v1alpha1.ClaimRoleLabelKey] = v1alpha1.ClaimRoleWarm
		delete(c.Labels, v1alpha1.BindingNameLabelKey)
		delete(c.Annotations, v1alpha1.CheckoutIDAnnotationKey)
	}
	legacy := b.DeepCopy()
	delete(legacy.Annotations, v1alpha1.CheckoutIDAnnotationKey)
	cases := map[string]struct {
		binding *v1alpha1.FluentPVCBinding
		claim   *corev1.PersistentVolumeClaim
		want    bool
	}{
		"the claim it was made from": {b, claim, true},
		"checked out again: another token": {b, with(func(c *corev1.PersistentVolumeClaim) {
			c.Annotations[v1alpha1.CheckoutIDAnnotationKey] = "another"
		}), false},
		"back in the pool":          {b, with(returned), false},
		"another object, same name": {b, with(func(c *corev1.PersistentVolumeClaim) { c.UID = "other-uid" }), false},
		"labelled for another binding": {b, with(func(c *corev1.PersistentVolumeClaim) {
			c.Labels[v1alpha1.BindingNameLabelKey] = "f-xyz"
		}), false},
		"binding label removed by hand: still drained under its binding": {b, with(func(c *corev1.PersistentVolumeClaim) {
			delete(c.Labels, v1alpha1.BindingNameLabelKey)
		}), true},
		"checked out again by an earlier version: token gone": {b, with(func(c *corev1.PersistentVolumeClaim) {
			delete(c.Annotations, v1alpha1.CheckoutIDAnnotationKey)
		}), false},
		"binding from an earlier version":                         {legacy, claim, true},
		"binding from an earlier version, claim back in the pool": {legacy, with(returned), false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := SameCheckout(tc.binding, tc.claim); got != tc.want {
				t.Errorf("SameCheckout = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestClaimTokens(t *testing.T) {
	fpvc := fixtures.MakeFluentPVC("f").Obj()
	a := Claim(fpvc, "ns", "f-abc", "h", v1alpha1.CheckoutMiss, fixtures.Epoch)
	c := Claim(fpvc, "ns", "f-abc", "h", v1alpha1.CheckoutMiss, fixtures.Epoch)
	ta, tc := a.Annotations[v1alpha1.CheckoutIDAnnotationKey], c.Annotations[v1alpha1.CheckoutIDAnnotationKey]
	if len(ta) != checkoutIDLen || ta == tc {
		t.Errorf("checkout tokens %q and %q: want two different tokens of %d characters", ta, tc, checkoutIDLen)
	}
	if got := Binding(a, fpvc.UID).Annotations[v1alpha1.CheckoutIDAnnotationKey]; got != ta {
		t.Errorf("binding's token = %q, want the claim's %q", got, ta)
	}
}
