package webhook

import (
	"context"
	"sync/atomic"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

// TestControllingJob: a drain pod's Job, made before the pod, is read from
// the cache when the cache shows it, with no live read; a Job the cache
// does not show (not the operator's, or a cache behind or not synced) is
// read live, once, with no wait.
func TestControllingJob(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := fixtures.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "drain", UID: "job-uid"}}
	for name, tc := range map[string]struct {
		cachedAfter int       // cache Gets that find nothing first; -1: never cached
		cachedUID   types.UID // of the Job the cache holds; "": job's
		cacheErr    bool      // the cache fails (not synced, say)
		live        bool      // the API server holds the Job
		want        types.UID
		liveReads   int32
	}{
		"cached":                          {live: true, want: "job-uid"},
		"cached moments after the pod":    {cachedAfter: 1, live: true, want: "job-uid", liveReads: 1},
		"cache not synced":                {cacheErr: true, live: true, want: "job-uid", liveReads: 1},
		"not cached, live":                {cachedAfter: -1, live: true, want: "job-uid", liveReads: 1},
		"gone":                            {cachedAfter: -1, liveReads: 1},
		"an older Job of the name cached": {cachedUID: "old-uid", live: true, want: "job-uid", liveReads: 1},
	} {
		t.Run(name, func(t *testing.T) {
			var gets int
			cachedJob := job.DeepCopy()
			if tc.cachedUID != "" {
				cachedJob.UID = tc.cachedUID
			}
			cached := fake.NewClientBuilder().WithScheme(scheme).WithObjects(cachedJob).WithInterceptorFuncs(interceptor.Funcs{
				Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
					gets++
					if tc.cacheErr {
						return apierrors.NewTimeoutError("the cache has not synced", 1)
					}
					if tc.cachedAfter < 0 || gets <= tc.cachedAfter {
						return apierrors.NewNotFound(batchv1.Resource("jobs"), key.Name)
					}
					return c.Get(ctx, key, obj, opts...)
				}}).Build()
			var liveReads atomic.Int32
			b := fake.NewClientBuilder().WithScheme(scheme)
			if tc.live {
				b = b.WithObjects(job.DeepCopy())
			}
			live := b.WithInterceptorFuncs(interceptor.Funcs{
				Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
					liveReads.Add(1)
					return c.Get(ctx, key, obj, opts...)
				}}).Build()
			pod := fixtures.MakePod("drain-abc", "ns").Obj()
			pod.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))}
			got, err := controllingJob(context.Background(), cached, live, pod)
			if err != nil {
				t.Fatal(err)
			}
			var uid types.UID
			if got != nil {
				uid = got.UID
			}
			if uid != tc.want {
				t.Errorf("got the Job of uid %q, want %q", uid, tc.want)
			}
			if n := liveReads.Load(); n != tc.liveReads {
				t.Errorf("%d live reads, want %d", n, tc.liveReads)
			}
		})
	}
}
