// Package v1alpha1 holds the public API of fluent-pvc-operator: the
// cluster-scoped FluentPVC, the namespaced FluentPVCBinding, and the label,
// annotation and finalizer keys the operator puts on pods, PVCs and Jobs.
//
// +kubebuilder:object:generate=true
// +groupName=fluent-pvc-operator.tech.zozo.com
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "fluent-pvc-operator.tech.zozo.com", Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this package with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the kinds of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
