package objects

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/google/go-cmp/cmp"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

func TestBindingFor(t *testing.T) {
	fpvc := fixtures.MakeFluentPVC("f").Obj()
	fpvc.UID = "fpvc-uid"
	claim := Claim(fpvc, "ns", "f-abc", "h", v1alpha1.CheckoutHit, fixtures.Epoch)
	claim.UID = "claim-uid"
	claim.Annotations[v1alpha1.CheckoutIDAnnotationKey] = "token"
	want := &v1alpha1.FluentPVCBinding{
		ObjectMeta: metav1.ObjectMeta{
			Name: "f-abc", Namespace: "ns",
			Labels: map[string]string{v1alpha1.FluentPVCNameLabelKey: "f"},
			Annotations: map[string]string{
				v1alpha1.AdmittedAtAnnotationKey: fixtures.Epoch.UTC().Format(time.RFC3339),
				v1alpha1.CheckoutAnnotationKey:   v1alpha1.CheckoutHit,
				v1alpha1.CheckoutIDAnnotationKey: "token",
			},
			Finalizers: []string{v1alpha1.BindingProtectionFinalizer},
		},
		Spec: v1alpha1.FluentPVCBindingSpec{
			FluentPVC: v1alpha1.ObjectIdentity{Name: "f", UID: "fpvc-uid"},
			PVC:       v1alpha1.ObjectIdentity{Name: "f-abc", UID: "claim-uid"},
		},
	}
	if diff := cmp.Diff(want, Binding(claim, fpvc.UID)); diff != "" {
		t.Errorf("Binding (-want +got):\n%s", diff)
	}
}
