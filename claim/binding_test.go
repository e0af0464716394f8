package claim_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

func TestBinding(t *testing.T) {
	fpvc := fixtures.MakeFluentPVC("f").Obj()
	checkedOut := claim.NewClaimed(fpvc, "ns", "f-abc", "h", v1alpha1.CheckoutHit, "token", "", fixtures.Epoch).Object
	checkedOut.UID = "claim-uid"
	binding := func(admittedAt string) *v1alpha1.FluentPVCBinding {
		b := &v1alpha1.FluentPVCBinding{
			ObjectMeta: metav1.ObjectMeta{
				Name: "f-abc", Namespace: "ns",
				Labels: map[string]string{v1alpha1.FluentPVCNameLabelKey: "f"},
				Annotations: map[string]string{
					v1alpha1.CheckoutAnnotationKey:   v1alpha1.CheckoutHit,
					v1alpha1.CheckoutIDAnnotationKey: "token",
				},
			},
			Spec: v1alpha1.FluentPVCBindingSpec{
				FluentPVC: v1alpha1.ObjectIdentity{Name: "f", UID: "fpvc-uid"},
				PVC:       v1alpha1.ObjectIdentity{Name: "f-abc", UID: "claim-uid"},
			},
		}
		if admittedAt != "" {
			b.Annotations[v1alpha1.AdmittedAtAnnotationKey] = admittedAt
		}
		return b
	}
	cases := map[string]struct {
		pvc  *corev1.PersistentVolumeClaim
		want *v1alpha1.FluentPVCBinding
	}{
		"checked out at its pod's admission: the admission time carries over": {
			pvc:  checkedOut,
			want: binding(fixtures.Epoch.UTC().Format(time.RFC3339)),
		},
		"reserved ahead of its pod: no admission time (the binding's creation stands for it)": {
			pvc:  reserved(checkedOut),
			want: binding(""),
		},
		"reserved ahead, its pod recorded: no admission time either": {
			pvc:  with(reserved(checkedOut), func(c *corev1.PersistentVolumeClaim) { c.Annotations[v1alpha1.UsedByPodAnnotationKey] = "ns/pod-uid" }),
			want: binding(""),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pvc := tc.pvc
			if diff := cmp.Diff(tc.want, claim.Binding(pvc, "fpvc-uid")); diff != "" {
				t.Errorf("Binding (-want +got):\n%s", diff)
			}
		})
	}
}
