package webhook

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// endpoint is a ready (nil: unknown) endpoint of pod, at address.
func endpoint(pod, address string, ready *bool) discoveryv1.Endpoint {
	e := discoveryv1.Endpoint{Addresses: []string{address}, Conditions: discoveryv1.EndpointConditions{Ready: ready}}
	if pod != "" {
		e.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: "system", Name: pod, UID: types.UID(pod + "-uid")}
	}
	return e
}

func TestReadyEndpoints(t *testing.T) {
	slice := func(es ...discoveryv1.Endpoint) discoveryv1.EndpointSlice {
		return discoveryv1.EndpointSlice{Endpoints: es}
	}
	for name, tc := range map[string]struct {
		slices []discoveryv1.EndpointSlice
		want   int
	}{
		"none":                              {},
		"two ready pods":                    {slices: []discoveryv1.EndpointSlice{slice(endpoint("a", "10.0.0.1", ptr.To(true)), endpoint("b", "10.0.0.2", ptr.To(true)))}, want: 2},
		"one not ready":                     {slices: []discoveryv1.EndpointSlice{slice(endpoint("a", "10.0.0.1", ptr.To(true)), endpoint("b", "10.0.0.2", ptr.To(false)))}, want: 1},
		"readiness unknown counts as ready": {slices: []discoveryv1.EndpointSlice{slice(endpoint("a", "10.0.0.1", nil))}, want: 1},
		"dual stack: each pod once": {slices: []discoveryv1.EndpointSlice{
			slice(endpoint("a", "10.0.0.1", ptr.To(true)), endpoint("b", "10.0.0.2", ptr.To(true))),
			slice(endpoint("a", "fd00::1", ptr.To(true)), endpoint("b", "fd00::2", ptr.To(true))),
		}, want: 2},
		"no pod behind: by address": {slices: []discoveryv1.EndpointSlice{
			slice(endpoint("", "10.0.0.1", ptr.To(true)), endpoint("", "10.0.0.2", ptr.To(true))),
			slice(endpoint("", "10.0.0.1", ptr.To(true))),
		}, want: 2},
	} {
		t.Run(name, func(t *testing.T) {
			if got := ReadyEndpoints(tc.slices); got != tc.want {
				t.Errorf("ReadyEndpoints = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestReplicas(t *testing.T) {
	svc := types.NamespacedName{Namespace: "system", Name: "webhook"}
	scheme := runtime.NewScheme()
	if err := discoveryv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	ours := func(name, ns, service string, es ...discoveryv1.Endpoint) client.Object {
		return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: service}},
			AddressType: discoveryv1.AddressTypeIPv4, Endpoints: es}
	}
	r := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		ours("webhook-1", "system", "webhook", endpoint("a", "10.0.0.1", ptr.To(true))),
		ours("webhook-2", "system", "webhook", endpoint("b", "10.0.0.2", ptr.To(true)), endpoint("c", "10.0.0.3", ptr.To(false))),
		ours("other", "system", "metrics", endpoint("a", "10.0.0.1", ptr.To(true)), endpoint("d", "10.0.0.4", ptr.To(true))),
		ours("elsewhere", "apps", "webhook", endpoint("e", "10.0.0.5", ptr.To(true))),
	).Build()
	for name, tc := range map[string]struct {
		synced  bool
		want    int
		wantErr bool
	}{
		"synced: the Service's ready pods": {synced: true, want: 2},
		"not synced: an error":             {wantErr: true},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := Replicas(r, informerState{synced: tc.synced}, svc)(context.Background())
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("Replicas = %d, %v; want %d, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}
