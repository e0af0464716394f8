// Package v1alpha1 holds the public API of fluent-pvc-operator: the
// cluster-scoped FluentPVC, the namespaced FluentPVCBinding, and the label,
// annotation and finalizer keys the operator puts on pods, PVCs and Jobs.
//
// +kubebuilder:object:generate=true
// +groupName=fluent-pvc-operator.tech.zozo.com
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "fluent-pvc-operator.tech.zozo.com", Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this package with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the kinds of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// addKnownTypes registers the kinds of this package and the meta/v1 options
// types under GroupVersion.
func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&FluentPVC{}, &FluentPVCList{},
		&FluentPVCBinding{}, &FluentPVCBindingList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
