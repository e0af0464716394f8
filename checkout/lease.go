package checkout

import (
	"context"
	"fmt"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
)

// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=fluent-pvc-operator-system,resources=leases,verbs=get;list;watch;create;update;delete

// LeaseDuration is how long a stock's Lease runs from its last renewal.
// The reservations it holds are free once it is over (plus the wait of a
// claim's binding for its pod): a replica that dies frees its claims
// within a minute. The rest of a Lease's life is counted in parts of it:
//   - a stock renews its Lease once a quarter of LeaseDuration has
//     passed since its last renewal, as a kubelet renews its node's
//     Lease, and at each of its syncs after that until a renewal lands:
//     renewals may fail for over half of LeaseDuration before the stock
//     stops writing;
//   - a stock hands out and writes its claims only while a third of
//     LeaseDuration is left by its own count (term.usable): a pod it
//     admits is created, and seen, well before the Lease is over for
//     anyone else;
//   - any stock deletes a Lease over for LeaseDuration: its holder
//     stopped renewing it long before, and a holder's Lease that is gone
//     holds nothing (HolderEnd).
const LeaseDuration = 45 * time.Second

// StockLeases restricts a cache's Leases to the stocks' Leases in
// namespace ns (the operator's): a handful, whatever the size of the
// cluster, whose nodes each have a Lease too.
func StockLeases(ns string) cache.ByObject {
	return cache.ByObject{
		Namespaces: map[string]cache.Config{ns: {}},
		Label:      labels.SelectorFromSet(labels.Set{v1alpha1.StockLeaseLabelKey: "true"}),
	}
}

// LeaseEnd is when stock Lease l is over, as seen at now: its last
// renewal, no later than now, and its duration, at most LeaseDuration,
// so that a writer whose clock is off holds nothing for longer.
func LeaseEnd(l *coordinationv1.Lease, now time.Time) time.Time {
	renewed := l.Spec.RenewTime
	if renewed == nil {
		renewed = l.Spec.AcquireTime
	}
	if renewed == nil {
		renewed = &metav1.MicroTime{Time: l.CreationTimestamp.Time}
	}
	d := time.Duration(ptr.Deref(l.Spec.LeaseDurationSeconds, 0)) * time.Second
	if renewed.After(now) {
		return now.Add(min(d, LeaseDuration))
	}
	return renewed.Add(min(d, LeaseDuration))
}

// HolderEnd is when the Lease of reservation holder holder
// (v1alpha1.ReservedByAnnotationKey) is over, as r shows it at now. found is
// false when r shows no such Lease: a holder's Lease is made before its
// first reservation and deleted only long after it is over, so
// its claims are free. A holder that names no Lease holds nothing
// either.
func HolderEnd(ctx context.Context, r client.Reader, holder string, now time.Time) (end time.Time, found bool, err error) {
	ns, name, ok := strings.Cut(holder, "/")
	if !ok || ns == "" || name == "" {
		return time.Time{}, false, nil
	}
	l := &coordinationv1.Lease{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, l); err != nil {
		if apierrors.IsNotFound(err) {
			return time.Time{}, false, nil
		}
		return time.Time{}, false, fmt.Errorf("reading the Lease of reservation holder %s: %w", holder, err)
	}
	return LeaseEnd(l, now), true, nil
}

// term is a stock's hold on its Lease.
type term struct {
	// lease is the Lease as last written; nil before the first write, and
	// after the stock lost it.
	lease *coordinationv1.Lease
	// holder names it in reservations: "namespace/name".
	holder string
	// validUntil is when the Lease is over by the stock's count: the time
	// its last write was sent, plus LeaseDuration.
	validUntil time.Time
}

// usable says whether the term has at least a third of LeaseDuration
// left at now: the stock may hand out and write its claims.
func (t term) usable(now time.Time) bool {
	return t.lease != nil && now.Before(t.writableUntil())
}

// writableUntil is when the term stops being usable.
func (t term) writableUntil() time.Time {
	return t.validUntil.Add(-LeaseDuration / 3)
}

// newLease is a fresh stock Lease for a process named base, in namespace
// ns, written at now.
func newLease(ns, base string, now time.Time) *coordinationv1.Lease {
	name := base[:min(len(base), 240)] + "-" + utilrand.String(5)
	at := metav1.NewMicroTime(now)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{v1alpha1.StockLeaseLabelKey: "true"}},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(name),
			LeaseDurationSeconds: ptr.To(int32(LeaseDuration / time.Second)),
			AcquireTime:          &at,
			RenewTime:            &at,
		},
	}
}
