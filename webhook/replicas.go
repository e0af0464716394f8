package webhook

import (
	"context"
	"errors"
	"fmt"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// +kubebuilder:rbac:groups=discovery.k8s.io,namespace=fluent-pvc-operator-system,resources=endpointslices,verbs=list;watch

// ServiceEndpoints restricts a cache's EndpointSlices to those of Service
// svc: the replicas that serve its admissions, whatever the size of the
// cluster.
func ServiceEndpoints(svc types.NamespacedName) cache.ByObject {
	return cache.ByObject{
		Namespaces: map[string]cache.Config{svc.Namespace: {}},
		Label:      labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: svc.Name}),
	}
}

// Replicas counts the ready endpoints of Service svc, as r (a cache that
// informer fills) shows its EndpointSlices: the webhook replicas the API
// server sends admissions to. It fails until the informer has synced.
func Replicas(r client.Reader, informer cache.Informer, svc types.NamespacedName) func(context.Context) (int, error) {
	return func(ctx context.Context) (int, error) {
		if !informer.HasSynced() {
			return 0, errors.New("the webhook Service's EndpointSlices have not synced")
		}
		var slices discoveryv1.EndpointSliceList
		if err := r.List(ctx, &slices, client.InNamespace(svc.Namespace), client.MatchingLabels{discoveryv1.LabelServiceName: svc.Name}); err != nil {
			return 0, fmt.Errorf("listing the EndpointSlices of Service %s: %w", svc, err)
		}
		return ReadyEndpoints(slices.Items), nil
	}
}

// ReadyEndpoints counts the ready endpoints of slices, each pod once: a
// dual-stack Service has a slice per address family, and an endpoint
// with no pod behind it counts by its first address.
func ReadyEndpoints(slices []discoveryv1.EndpointSlice) int {
	seen := map[string]bool{}
	for _, s := range slices {
		for _, e := range s.Endpoints {
			// An unknown condition means ready (the API's convention).
			if !ptr.Deref(e.Conditions.Ready, true) {
				continue
			}
			var key string
			switch {
			case e.TargetRef != nil && e.TargetRef.UID != "":
				key = "uid/" + string(e.TargetRef.UID)
			case e.TargetRef != nil:
				key = "ref/" + e.TargetRef.Namespace + "/" + e.TargetRef.Name
			case len(e.Addresses) > 0:
				key = "address/" + e.Addresses[0]
			default:
				continue
			}
			seen[key] = true
		}
	}
	return len(seen)
}
