package checkout

import (
	"context"
	"errors"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

// TestLeaseEnd: a stock Lease is over its duration, at most
// LeaseDuration, after its last renewal (its acquisition, or its making,
// when it names none), and a renewal ahead of now counts as made now.
func TestLeaseEnd(t *testing.T) {
	now := fixtures.Epoch.Add(time.Hour)
	at := func(d time.Duration) *metav1.MicroTime { return ptr.To(metav1.NewMicroTime(now.Add(d))) }
	for name, tc := range map[string]struct {
		renew, acquire *metav1.MicroTime
		created        time.Time
		duration       *int32
		want           time.Time
	}{
		"renewed":                      {renew: at(-10 * time.Second), acquire: at(-time.Hour), duration: ptr.To[int32](45), want: now.Add(35 * time.Second)},
		"renewed long ago":             {renew: at(-time.Hour), duration: ptr.To[int32](45), want: now.Add(-time.Hour + 45*time.Second)},
		"not renewed: its acquisition": {acquire: at(-10 * time.Second), created: now.Add(-time.Hour), duration: ptr.To[int32](45), want: now.Add(35 * time.Second)},
		"neither: its making":          {created: now.Add(-10 * time.Second), duration: ptr.To[int32](45), want: now.Add(35 * time.Second)},
		"renewed ahead of now":         {renew: at(time.Minute), duration: ptr.To[int32](45), want: now.Add(45 * time.Second)},
		"a shorter duration":           {renew: at(-10 * time.Second), duration: ptr.To[int32](20), want: now.Add(10 * time.Second)},
		"a longer duration: capped":    {renew: at(-10 * time.Second), duration: ptr.To[int32](3600), want: now.Add(LeaseDuration - 10*time.Second)},
		"ahead, longer: both capped":   {renew: at(time.Hour), duration: ptr.To[int32](3600), want: now.Add(LeaseDuration)},
		"no duration: over at renewal": {renew: at(-10 * time.Second), want: now.Add(-10 * time.Second)},
	} {
		t.Run(name, func(t *testing.T) {
			l := &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(tc.created)},
				Spec:       coordinationv1.LeaseSpec{RenewTime: tc.renew, AcquireTime: tc.acquire, LeaseDurationSeconds: tc.duration},
			}
			if got := LeaseEnd(l, now); !got.Equal(tc.want) {
				t.Errorf("LeaseEnd = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestHolderEnd: a reservation holder's Lease end is read from the
// Lease it names ("namespace/name"); a Lease that is gone, or a holder
// that names none, is not found, without an error; a read that fails is
// an error.
func TestHolderEnd(t *testing.T) {
	now := fixtures.Epoch.Add(time.Hour)
	lease := otherLease("replica-b-abcde", now.Add(-10*time.Second))
	for name, tc := range map[string]struct {
		holder  string
		getErr  error
		want    time.Time
		found   bool
		wantErr bool
		// reads: the holder names a Lease, which is read.
		reads bool
	}{
		"its Lease":          {holder: "sys/replica-b-abcde", want: now.Add(35 * time.Second), found: true, reads: true},
		"its Lease gone":     {holder: "sys/replica-c-abcde", reads: true},
		"another namespace":  {holder: "other/replica-b-abcde", reads: true},
		"no namespace":       {holder: "replica-b-abcde"},
		"an empty namespace": {holder: "/replica-b-abcde"},
		"an empty name":      {holder: "sys/"},
		"none":               {},
		"a read that fails":  {holder: "sys/replica-b-abcde", getErr: errors.New("cache down"), wantErr: true, reads: true},
	} {
		t.Run(name, func(t *testing.T) {
			var gets int
			get := func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				gets++
				if tc.getErr != nil {
					return tc.getErr
				}
				return c.Get(ctx, key, obj, opts...)
			}
			r := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(lease.DeepCopy()).
				WithInterceptorFuncs(interceptor.Funcs{Get: get}).Build()
			end, found, err := HolderEnd(context.Background(), r, tc.holder, now)
			if (err != nil) != tc.wantErr || found != tc.found || !end.Equal(tc.want) {
				t.Errorf("HolderEnd = %v, %v, %v; want %v, %v, error %v", end, found, err, tc.want, tc.found, tc.wantErr)
			}
			if (gets > 0) != tc.reads {
				t.Errorf("%d reads for holder %q, want a read: %v", gets, tc.holder, tc.reads)
			}
		})
	}
}
