package pool

import "github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"

// ReserveShare, as a checkout.Stock's Target, reserves the replica's share
// of each pool: its size divided by the replicas, rounded up
// (checkout.Stock.Replicas).
const ReserveShare = -1

// Limit is how many claims of f's pool a stock (checkout.Stock) holds per
// namespace, for a Target of target among replicas replicas:
// spec.pool.reserveAhead, or target when it is unset, at most the
// replica's share of the size (the size divided by the replicas, rounded
// up), which ReserveShare asks for whole.
func Limit(f *v1alpha1.FluentPVC, target, replicas int) int {
	want := target
	if f.Spec.Pool.ReserveAhead != nil {
		want = int(*f.Spec.Pool.ReserveAhead)
	}
	size, replicas := int(f.Spec.Pool.Size), max(replicas, 1)
	share := (size + replicas - 1) / replicas
	if want == ReserveShare {
		want = share
	}
	return max(0, min(want, share))
}
