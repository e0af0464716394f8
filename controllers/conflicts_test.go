package controllers

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

func TestQuietConflicts(t *testing.T) {
	pvcs := schema.GroupResource{Resource: "persistentvolumeclaims"}
	conflict := apierrors.NewConflict(pvcs, "f-abc", errors.New("the object has been modified"))
	refused := apierrors.NewForbidden(pvcs, "f-abc", errors.New("quota"))
	cases := map[string]struct {
		err        error
		wantResult reconcile.Result
		wantErr    bool
	}{
		"no error":               {},
		"a conflict":             {err: conflict, wantResult: reconcile.Result{RequeueAfter: unwatchedRecheck}},
		"a wrapped conflict":     {err: fmt.Errorf("recording the pod: %w", conflict), wantResult: reconcile.Result{RequeueAfter: unwatchedRecheck}},
		"joined conflicts":       {err: fmt.Errorf("pool: %w", errors.Join(conflict, fmt.Errorf("x: %w", conflict))), wantResult: reconcile.Result{RequeueAfter: unwatchedRecheck}},
		"a conflict and another": {err: errors.Join(conflict, refused), wantErr: true},
		"another API error":      {err: fmt.Errorf("creating: %w", refused), wantErr: true},
		"not an API error":       {err: errors.New("boom"), wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := quietConflicts(reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
				return reconcile.Result{}, tc.err
			}))
			got, err := r.Reconcile(context.Background(), reconcile.Request{})
			if (err != nil) != tc.wantErr {
				t.Fatalf("error = %v, want error: %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.wantResult, got); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
		})
	}
}
