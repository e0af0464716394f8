package objects

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// NamespaceSelected reports whether a FluentPVC whose namespaceSelector is
// selector admits pods of a namespace labelled nsLabels; nil or empty
// selects every namespace. An invalid selector selects none.
func NamespaceSelected(selector *metav1.LabelSelector, nsLabels map[string]string) (bool, error) {
	if selector == nil {
		return true, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return false, err
	}
	return sel.Matches(labels.Set(nsLabels)), nil
}
