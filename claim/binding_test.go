package claim_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

func TestBinding(t *testing.T) {
	fpvc := fixtures.MakeFluentPVC("f").Obj()
	pvc := claim.NewClaimed(fpvc, "ns", "f-abc", "h", v1alpha1.CheckoutHit, "token", "", fixtures.Epoch).Object
	pvc.UID = "claim-uid"
	want := &v1alpha1.FluentPVCBinding{
		ObjectMeta: metav1.ObjectMeta{
			Name: "f-abc", Namespace: "ns",
			Labels: map[string]string{v1alpha1.FluentPVCNameLabelKey: "f"},
			Annotations: map[string]string{
				v1alpha1.AdmittedAtAnnotationKey: fixtures.Epoch.UTC().Format(time.RFC3339),
				v1alpha1.CheckoutAnnotationKey:   v1alpha1.CheckoutHit,
				v1alpha1.CheckoutIDAnnotationKey: "token",
			},
		},
		Spec: v1alpha1.FluentPVCBindingSpec{
			FluentPVC: v1alpha1.ObjectIdentity{Name: "f", UID: "fpvc-uid"},
			PVC:       v1alpha1.ObjectIdentity{Name: "f-abc", UID: "claim-uid"},
		},
	}
	if diff := cmp.Diff(want, claim.Binding(pvc, "fpvc-uid")); diff != "" {
		t.Errorf("Binding (-want +got):\n%s", diff)
	}
}
