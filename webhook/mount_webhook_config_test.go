package webhook

import (
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

// TestMountWebhookFailurePolicy reads config/webhook as `make deploy`
// installs it: every pod with a PVC in a user namespace reaches the mount
// check exactly once, a pod labelled as a holder with failure policy Fail
// (a holder the webhook cannot judge is not created), any other with
// Ignore.
func TestMountWebhookFailurePolicy(t *testing.T) {
	config, err := fixtures.FluentPVCWebhookConfiguration()
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		podLabels map[string]string
		namespace string
		want      admissionregistrationv1.FailurePolicyType
	}{
		"a holder":                       {podLabels: map[string]string{v1alpha1.ComponentLabelKey: v1alpha1.ComponentHolder}, namespace: "app", want: admissionregistrationv1.Fail},
		"a labelled pod":                 {podLabels: map[string]string{v1alpha1.FluentPVCNameLabelKey: "f"}, namespace: "app", want: admissionregistrationv1.Ignore},
		"a pod with no labels":           {namespace: "app", want: admissionregistrationv1.Ignore},
		"a drain pod":                    {podLabels: map[string]string{v1alpha1.ComponentLabelKey: v1alpha1.ComponentDrain}, namespace: "app", want: admissionregistrationv1.Ignore},
		"a holder in a system namespace": {podLabels: map[string]string{v1alpha1.ComponentLabelKey: v1alpha1.ComponentHolder}, namespace: "kube-system"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			nsLabels := labels.Set{"kubernetes.io/metadata.name": tc.namespace}
			var reached []admissionregistrationv1.FailurePolicyType
			for _, w := range config.Webhooks {
				if w.ClientConfig.Service == nil || w.ClientConfig.Service.Path == nil || *w.ClientConfig.Service.Path != MountPath {
					continue
				}
				if !matches(t, w.ObjectSelector, labels.Set(tc.podLabels)) || !matches(t, w.NamespaceSelector, nsLabels) {
					continue
				}
				reached = append(reached, *w.FailurePolicy)
			}
			switch {
			case tc.want == "" && len(reached) != 0:
				t.Errorf("reaches the mount check with failure policies %v, want not at all", reached)
			case tc.want != "" && (len(reached) != 1 || reached[0] != tc.want):
				t.Errorf("reaches the mount check with failure policies %v, want once with %s", reached, tc.want)
			}
		})
	}
}

// matches says whether selector (nil: everything) selects set.
func matches(t *testing.T, selector *metav1.LabelSelector, set labels.Set) bool {
	t.Helper()
	if selector == nil {
		return true
	}
	s, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		t.Fatal(err)
	}
	return s.Matches(set)
}
