package pool

import (
	"testing"

	"k8s.io/utils/ptr"

	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

// TestLimit: what a FluentPVC asks for, or the stock's target, at most
// the replica's share of the
func TestLimit(t *testing.T) {
	for name, tc := range map[string]struct {
		size, target, replicas int
		reserveAhead           *int32
		want                   int
	}{
		"nothing asked":                             {size: 4, target: 0, replicas: 1},
		"the target":                                {size: 4, target: 2, replicas: 1, want: 2},
		"the share, alone":                          {size: 4, target: ReserveShare, replicas: 1, want: 4},
		"the share of two":                          {size: 4, target: ReserveShare, replicas: 2, want: 2},
		"the share of two, rounded up":              {size: 5, target: ReserveShare, replicas: 2, want: 3},
		"the share of more replicas than PVCs":      {size: 1, target: ReserveShare, replicas: 3, want: 1},
		"no replica counted: alone":                 {size: 4, target: ReserveShare, replicas: 0, want: 4},
		"a size of 0":                               {size: 0, target: ReserveShare, replicas: 1},
		"the target, at most the share":             {size: 4, target: 4, replicas: 2, want: 2},
		"the FluentPVC's number":                    {size: 4, target: ReserveShare, replicas: 1, reserveAhead: ptr.To[int32](1), want: 1},
		"the FluentPVC's number, at most the share": {size: 4, target: 0, replicas: 2, reserveAhead: ptr.To[int32](4), want: 2},
		"the FluentPVC asks for none":               {size: 4, target: ReserveShare, replicas: 1, reserveAhead: ptr.To[int32](0)},
	} {
		t.Run(name, func(t *testing.T) {
			f := fixtures.MakeFluentPVC("f").PoolSize(int32(tc.size)).Obj()
			f.Spec.Pool.ReserveAhead = tc.reserveAhead
			if got := Limit(f, tc.target, tc.replicas); got != tc.want {
				t.Errorf("Limit = %d, want %d", got, tc.want)
			}
		})
	}
}
