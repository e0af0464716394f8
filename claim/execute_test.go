package claim_test

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

// TestExecuteRecordPod writes a pod's record on a claim read before
// others wrote it: the PV binder's annotation and the pvc-protection
// finalizer, written just after a miss's claim is made, do not fail it
// (they failed it on the version read, one write in two on a miss); a new
// checkout of the claim, a role left, another pod recorded, or another
// claim of the name do.
func TestExecuteRecordPod(t *testing.T) {
	read := newClaimed()
	read.UID = "uid-1"
	scheme := runtime.NewScheme()
	if err := fixtures.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	pod := v1alpha1.ObjectIdentity{Name: "app", UID: "pod-uid"}
	// calls are the writes Execute sends: an update while the claim is
	// as read (the same write, cheaper for the API server), the patch
	// after an update that failed for any reason but the claim being gone.
	cases := map[string]struct {
		since   func(*corev1.PersistentVolumeClaim)
		wantErr bool
		calls   []string
		// updateErr, when set, is what the API server answers the update.
		updateErr error
	}{
		"as read": {calls: []string{"update"}},
		"as read, the update refused": {calls: []string{"update", "patch"},
			updateErr: apierrors.NewInvalid(schema.GroupKind{Kind: "PersistentVolumeClaim"}, "c", field.ErrorList{field.Forbidden(field.NewPath("spec"), "immutable")})},
		"gone": {calls: []string{"update"}, wantErr: true,
			updateErr: apierrors.NewNotFound(schema.GroupResource{Resource: "persistentvolumeclaims"}, "c")},
		"written unchanged since": {since: func(*corev1.PersistentVolumeClaim) {}, calls: []string{"update", "patch"}},
		"bound and protected since": {since: func(c *corev1.PersistentVolumeClaim) {
			c.Annotations["pv.kubernetes.io/bind-completed"] = "yes"
			c.Finalizers = append(c.Finalizers, "kubernetes.io/pvc-protection")
		}, calls: []string{"update", "patch"}},
		"checked out again since":    {since: func(c *corev1.PersistentVolumeClaim) { c.Annotations[v1alpha1.CheckoutIDAnnotationKey] = "next" }, wantErr: true, calls: []string{"update", "patch"}},
		"returned to the pool since": {since: func(c *corev1.PersistentVolumeClaim) { c.Labels[v1alpha1.ClaimRoleLabelKey] = v1alpha1.ClaimRoleWarm }, wantErr: true, calls: []string{"update", "patch"}},
		"another pod recorded since": {since: func(c *corev1.PersistentVolumeClaim) {
			c.Annotations[v1alpha1.UsedByPodAnnotationKey] = "other/other-uid"
		}, wantErr: true, calls: []string{"update", "patch"}},
		"another claim of the name": {since: func(*corev1.PersistentVolumeClaim) {}, wantErr: true, calls: []string{"update", "patch"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var calls []string
			api := fake.NewClientBuilder().WithScheme(scheme).WithObjects(read.DeepCopy()).WithInterceptorFuncs(interceptor.Funcs{
				Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
					calls = append(calls, "update")
					if tc.updateErr != nil {
						return tc.updateErr
					}
					return c.Update(ctx, obj, opts...)
				},
				Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
					calls = append(calls, "patch")
					return c.Patch(ctx, obj, patch, opts...)
				},
			}).Build()
			ctx := context.Background()
			stored := &corev1.PersistentVolumeClaim{}
			if err := api.Get(ctx, client.ObjectKeyFromObject(read), stored); err != nil {
				t.Fatal(err)
			}
			as := stored.DeepCopy()
			if tc.since != nil {
				tc.since(stored)
				if err := api.Update(ctx, stored); err != nil {
					t.Fatal(err)
				}
			}
			if name == "another claim of the name" {
				as.UID = "read-uid" // the claim read was deleted and made again since
			}
			w, err := claim.RecordPod(as, pod)
			if err != nil {
				t.Fatal(err)
			}
			calls = nil
			err = claim.Execute(ctx, api, w)
			if !slices.Equal(calls, tc.calls) {
				t.Errorf("writes %v, want %v", calls, tc.calls)
			}
			if (err != nil) != tc.wantErr {
				t.Fatalf("Execute: %v, want an error: %v", err, tc.wantErr)
			}
			got := &corev1.PersistentVolumeClaim{}
			if err := api.Get(ctx, client.ObjectKeyFromObject(read), got); err != nil {
				t.Fatal(err)
			}
			if recorded := claim.Records(got, pod); recorded == tc.wantErr {
				t.Errorf("recorded %v, want %v", recorded, !tc.wantErr)
			}
			if !tc.wantErr && len(got.Finalizers) != len(stored.Finalizers) {
				t.Errorf("finalizers %v, want the ones written since, %v", got.Finalizers, stored.Finalizers)
			}
		})
	}
}
