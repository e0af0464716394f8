package objects_test

import (
	"github.com/st-tech/fluent-pvc-operator/apis/objects"

	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestNamespaceSelected(t *testing.T) {
	team := map[string]string{"team": "logging", "env": "prod"}
	cases := map[string]struct {
		selector *metav1.LabelSelector
		labels   map[string]string
		want     bool
		wantErr  bool
	}{
		"no selector: every namespace":    {labels: team, want: true},
		"empty selector: every namespace": {selector: &metav1.LabelSelector{}, labels: nil, want: true},
		"matching labels":                 {selector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "logging"}}, labels: team, want: true},
		"other labels":                    {selector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "web"}}, labels: team},
		"an expression": {selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "env", Operator: metav1.LabelSelectorOpIn, Values: []string{"prod", "staging"}},
		}}, labels: team, want: true},
		"an unlabelled namespace": {selector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "logging"}}},
		"an invalid selector selects none": {selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "env", Operator: "Bogus"},
		}}, labels: team, wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := objects.NamespaceSelected(tc.selector, tc.labels)
			if got != tc.want || (err != nil) != tc.wantErr {
				t.Errorf("NamespaceSelected = %v, %v; want %v, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}
