package checkout

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/pool"
)

// stockPoll is how often a Stock looks for warm PVCs to reserve and for
// reservations to extend or give back.
const stockPoll = time.Second

// Stock is what one webhook replica holds of the warm pools: up to the
// pool's reserveAhead (Target when unset) claims per FluentPVC and
// namespace, at most its share of the pool (pool.Limit), reserved ahead of
// their pods (claim.Reserve), which its admissions hand out without an API
// write. The reservation is the checkout's write made before the pod
// comes, so a claim handed out is already a claim, with everything its
// drain needs. Of a pool that stages its warm PVCs, the stock reserves
// those a holder stages, and hands each to a pod that can run on its
// holder's node, pinned there, as a checkout that writes does.
//
// The stock's reservations live as long as its Lease (coordination/v1, in
// Namespace), which it renews for LeaseDuration (see there), the way
// a node's Lease covers its pods: a reservation names the Lease and has
// no end of its own, so keeping it costs no write. The live Leases are
// the replicas that share each pool. The stock hands out and writes its
// claims only while its Lease has a third of it left by its own count;
// once the Lease is over (or gone), it forgets them all and starts a new
// Lease under a new name: the binding controller reclaims them as claims
// whose pods never came, once the Lease is over for it too.
//
// Sync keeps the stock: it renews the Lease, reserves Bound warm PVCs of
// the current template (in a pool that stages, only those a running
// holder stages), and gives back (to the pool, as warm PVCs) those of a
// FluentPVC that is gone, being deleted or changed its template, those no
// pod can take or no running holder stages any more (prune), and those
// beyond its pool.Limit (the size shrank, or more replicas share the
// pool). A claim
// is handed out or given back under the stock's lock, so never both;
// once handed out or given back, the stock forgets it. A give-back whose
// outcome is unknown (a timeout, a 5xx, a conflict) leaves the claim
// busy, never handed out again: Sync gives it back once more while the
// cache shows it reserved by the stock's Lease (giveBackAgain).
type Stock struct {
	// Name names this process in its Lease, whose name is Name and a
	// random suffix, new with each Lease: a restarted process never takes
	// the reservations of the one before it for its own.
	Name string
	// Namespace is where its Lease lives: the operator's.
	Namespace string
	// Target is how many claims to hold per FluentPVC and namespace for a
	// FluentPVC whose spec.pool.reserveAhead is unset, or pool.ReserveShare.
	// Whatever asks, a stock holds at most its share of the pool: the
	// size divided by the live stock Leases, rounded up.
	Target int
	// Stopping, when set, says that the replica is stopping: it reserves
	// no more (it gives everything back once stopped), while it keeps and
	// hands out what it holds.
	Stopping func() bool
	// Checkouts are the replica's checkouts, whose cache and writer the
	// stock uses and whose record of the warm PVCs taken it shares, so
	// that neither tries a PVC the other took while the cache lags.
	Checkouts *Checkouter
	// Clock is the API server's (Leases end on its time).
	Clock clock.PassiveClock

	// lastReplicas is the last count of live Leases, 0 before any;
	// countFailing says whether its last count failed.
	lastReplicas int
	countFailing bool

	// creating is the Lease the stock last tried to make, until it is
	// known to be made or not. Only Sync uses it.
	creating *coordinationv1.Lease

	mu     sync.Mutex
	closed bool
	term   term
	held   map[types.NamespacedName]*stocked
	// handedOut are the claims the stock handed out whose pods nothing
	// has recorded yet (unrecordedHandouts).
	handedOut map[types.NamespacedName]*handout
	// reported are the FluentPVCs the reservedClaims gauge has a value for.
	reported map[string]bool
}

// stocked is one claim of a Stock.
type stocked struct {
	// pvc is the claim as reserved.
	pvc *corev1.PersistentVolumeClaim
	// busy is true while the stock gives it back: it is not handed out
	// meanwhile.
	busy bool
	// returning is true once a give-back's outcome was unknown: the
	// claim stays busy until a give-back is known to have landed, or the
	// cache shows it no longer reserved by the stock. retryAt is when
	// Sync gives it back again: a quarter of LeaseDuration after the last
	// try, so that a refusal that lasts costs a write per claim as often
	// as the Lease's renewal, not one a second.
	returning bool
	retryAt   time.Time
}

// handout is a claim the stock handed out, at at, while no pod is
// recorded on it. retryAt is when Sync tries again to end its
// reservation after a try whose outcome was not a success.
type handout struct {
	pvc     *corev1.PersistentVolumeClaim
	at      time.Time
	retryAt time.Time
}

// NewStock is a Stock of the process named name, whose Lease lives in
// namespace ns, holding target claims per FluentPVC and namespace, for
// the checkouts of c, on the API server's clock clk.
func NewStock(name, ns string, target int, c *Checkouter, clk clock.PassiveClock) *Stock {
	return &Stock{Name: name, Namespace: ns, Target: target, Checkouts: c, Clock: clk, held: map[types.NamespacedName]*stocked{}}
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: every
// replica serves admissions, so every replica keeps a stock.
func (s *Stock) NeedLeaderElection() bool { return false }

// Start keeps the stock (Sync) until ctx ends, then gives every claim it
// still holds back to the pool; admissions meanwhile take none.
func (s *Stock) Start(ctx context.Context) error {
	t := time.NewTicker(stockPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			// Give-backs are written only while the Lease is usable, and
			// for a quarter of LeaseDuration at most, so that the Lease
			// is ended (Close) within the manager's graceful shutdown.
			s.mu.Lock()
			left := min(s.term.writableUntil().Sub(s.Clock.Now()), LeaseDuration/4)
			s.mu.Unlock()
			giveBack, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(left, 0))
			defer cancel()
			if err := s.Close(giveBack); err != nil {
				log.FromContext(ctx).Error(err, "giving reserved claims back to the pool; they are reclaimed once the stock's Lease is over")
			}
			return nil
		case <-t.C:
			if err := s.Sync(ctx); err != nil {
				log.FromContext(ctx).Error(err, "keeping the reserved claims")
			}
		}
	}
}

// take hands out a claim of FluentPVC fpvc, made from the template of
// hash hash, in namespace, whose volume usable accepts and that skip does
// not refuse, while the stock's Lease is usable (term.usable); nil when the
// stock has none. The stock forgets it.
func (s *Stock) take(ctx context.Context, fpvc, namespace, hash string, usable func(affinity string) bool, skip func(*corev1.PersistentVolumeClaim) bool) *corev1.PersistentVolumeClaim {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || !s.term.usable(s.Clock.Now()) {
		return nil
	}
	for key, st := range s.held {
		c := st.pvc
		if st.busy || key.Namespace != namespace || c.Labels[v1alpha1.FluentPVCNameLabelKey] != fpvc || c.Labels[v1alpha1.TemplateHashLabelKey] != hash {
			continue
		}
		if affinity, ok := pool.WarmAffinity(c); !ok || !usable(affinity) || (skip != nil && skip(c)) {
			continue
		}
		switch held, known := s.stillHeld(ctx, c); {
		case !known:
			continue // kept, and tried again later
		case !held:
			delete(s.held, key)
			continue
		}
		delete(s.held, key)
		if s.handedOut == nil {
			s.handedOut = map[types.NamespacedName]*handout{}
		}
		s.handedOut[key] = &handout{pvc: c, at: s.Clock.Now()}
		return c
	}
	return nil
}

// stillHeld says whether the cache, which shows what the API server had
// moments ago, still shows claim c reserved by this stock, or the warm
// PVC it was reserved from, not seen reserved yet: not deleted,
// reclaimed, or taken by another checkout since (none of which the
// stock's own copy shows). known is false when the cache cannot say.
func (s *Stock) stillHeld(ctx context.Context, c *corev1.PersistentVolumeClaim) (held, known bool) {
	cached := &corev1.PersistentVolumeClaim{}
	if err := s.Checkouts.Cache.Get(ctx, client.ObjectKeyFromObject(c), cached, client.UnsafeDisableDeepCopy); err != nil {
		return false, apierrors.IsNotFound(err)
	}
	if cached.UID != c.UID || !cached.DeletionTimestamp.IsZero() {
		return false, true
	}
	if cached.ResourceVersion == claim.PodsSince(c) {
		// The cache has not seen the reservation yet: it shows the warm
		// PVC as read for it.
		return true, true
	}
	by, _, ok := claim.Reservation(cached)
	return ok && by == s.term.holder, true
}

// Len is how many claims the stock holds.
func (s *Stock) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.held)
}

// reservable are the FluentPVCs whose pools the stock reserves from, by
// name: a pool of some size that asks for reservations (limit), not being
// deleted; staged says which of them stage their warm PVCs.
func (s *Stock) reservable(ctx context.Context, replicas int) (fpvcs map[string]*v1alpha1.FluentPVC, staged map[string]bool, err error) {
	var list v1alpha1.FluentPVCList
	if err := s.Checkouts.Cache.List(ctx, &list); err != nil {
		return nil, nil, fmt.Errorf("listing FluentPVCs: %w", err)
	}
	fpvcs, staged = map[string]*v1alpha1.FluentPVC{}, map[string]bool{}
	for i := range list.Items {
		f := &list.Items[i]
		if s.limit(f, replicas) <= 0 || !f.DeletionTimestamp.IsZero() {
			continue
		}
		if staged[f.Name], err = Stages(ctx, s.Checkouts.Cache, f); err != nil {
			return nil, nil, err
		}
		fpvcs[f.Name] = f
	}
	return fpvcs, staged, nil
}

// Sync renews the stock's Lease and brings the stock to its pool.Limit
// per FluentPVC and namespace where the pool has Bound warm PVCs, and
// gives back those no longer wanted (see Stock).
func (s *Stock) Sync(ctx context.Context) error {
	leaseErr := s.keepLease(ctx)
	errs := []error{leaseErr}
	for _, c := range s.giveBackAgain(ctx, s.Clock.Now()) {
		errs = append(errs, s.giveBack(ctx, c))
	}
	for key, h := range s.unrecordedHandouts(ctx, s.Clock.Now()) {
		errs = append(errs, s.endReservation(ctx, key, h))
	}
	replicas := s.replicas(ctx)
	fpvcs, staged, err := s.reservable(ctx, replicas)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	usable := s.usableOnSomeNode(ctx)
	unfit, err := s.prune(ctx, fpvcs, staged, usable)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	now := s.Clock.Now()
	giveBack, count := s.plan(fpvcs, unfit, now, replicas)
	for _, c := range giveBack {
		errs = append(errs, s.giveBack(ctx, c))
	}
	if (s.Stopping == nil || !s.Stopping()) && s.term.usable(now) {
		for name, f := range fpvcs {
			errs = append(errs, s.reserve(ctx, f, staged[name], count[name], usable, now, replicas))
		}
	}
	s.report(fpvcs)
	return errors.Join(errs...)
}

// plan picks, under the lock, the claims to give back (those of another
// template and those unfit, besides those beyond the limit), and marks
// them busy; count is how many the stock keeps per FluentPVC and
// namespace. While its Lease is not usable (term.usable), the stock
// writes none: it keeps them until the Lease is renewed or over.
func (s *Stock) plan(fpvcs map[string]*v1alpha1.FluentPVC, unfit map[types.NamespacedName]bool, now time.Time, replicas int) (giveBack []*corev1.PersistentVolumeClaim, count map[string]map[string]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	count = map[string]map[string]int{}
	writable := s.term.usable(now)
	for _, st := range s.held {
		if st.busy {
			continue
		}
		c := st.pvc
		name := c.Labels[v1alpha1.FluentPVCNameLabelKey]
		f, ok := fpvcs[name]
		switch {
		case !ok || c.Labels[v1alpha1.TemplateHashLabelKey] != pool.TemplateHash(&f.Spec.PVCSpecTemplate) || unfit[client.ObjectKeyFromObject(c)]:
		case count[name][c.Namespace] >= s.limit(f, replicas):
		default:
			if count[name] == nil {
				count[name] = map[string]int{}
			}
			count[name][c.Namespace]++
			continue
		}
		if writable {
			giveBack = append(giveBack, c)
			st.busy = true
		}
	}
	return giveBack, count
}

// prune forgets the claims the cache no longer shows reserved by this
// stock (stillHeld), and says which of the others no pod can take, to be
// given back: those of a namespace being deleted (so that their
// finalizers do not hold it), of a namespace that left their pool
// (pool.PoolNamespaces of fpvcs), those whose volume no node can use
// (usable) or is attached to a node that is gone, and those of a pool
// that stages (staged) that no running holder stages any more (its node
// went, or it was evicted): given back, the pool stages them again.
func (s *Stock) prune(ctx context.Context, fpvcs map[string]*v1alpha1.FluentPVC, staged map[string]bool, usable func(affinity string) bool) (map[types.NamespacedName]bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	unfit := map[types.NamespacedName]bool{}
	// By namespace, node and FluentPVC: a pool's claims share a few.
	going, gone := map[string]bool{}, map[string]bool{}
	inPool := map[string]sets.Set[string]{}
	holders := map[types.NamespacedName]map[string]*corev1.Pod{} // by FluentPVC and namespace
	for key, st := range s.held {
		if st.busy {
			continue
		}
		if held, known := s.stillHeld(ctx, st.pvc); known && !held {
			delete(s.held, key)
			continue
		}
		g, seen := going[key.Namespace]
		if !seen {
			var err error
			if g, err = s.namespaceGoing(ctx, key.Namespace); err != nil {
				return nil, err
			}
			going[key.Namespace] = g
		}
		name := st.pvc.Labels[v1alpha1.FluentPVCNameLabelKey]
		left := false
		if f := fpvcs[name]; f != nil {
			if inPool[name] == nil {
				inPool[name] = pool.PoolNamespaces(f)
			}
			left = !inPool[name].Has(key.Namespace)
		}
		unstaged := false
		if staged[name] {
			pk := types.NamespacedName{Namespace: key.Namespace, Name: name}
			hs, listed := holders[pk]
			if !listed {
				var err error
				if hs, _, err = s.Checkouts.holders(ctx, name, key.Namespace); err != nil {
					return nil, err
				}
				holders[pk] = hs
			}
			h := hs[key.Name]
			unstaged = h == nil || !pool.HolderStaged(h)
		}
		affinity, _ := pool.WarmAffinity(st.pvc)
		unfit[key] = g || left || unstaged || !usable(affinity) || s.Checkouts.stranded(ctx, st.pvc, gone)
	}
	return unfit, nil
}

// usableOnSomeNode says, for one sync, whether a volume of an affinity
// (a NodeAffinityAnnotationKey value) can be used on a cached node
// (pool.Affinities.UsableOnSomeNode). The nodes are listed at the first question
// only, and each affinity answered once. While the nodes cannot be
// listed, every volume counts as usable: a claim is kept rather than
// given back on no evidence.
func (s *Stock) usableOnSomeNode(ctx context.Context) func(affinity string) bool {
	var nodes []*corev1.Node
	listed := false
	answers := map[string]bool{}
	return func(affinity string) bool {
		if !listed {
			listed = true
			var err error
			if nodes, err = s.Checkouts.allNodes(ctx); err != nil {
				log.FromContext(ctx).V(1).Info("cannot list the nodes; every reserved volume counts as usable", "error", err.Error())
				nodes = nil
			}
		}
		u, ok := answers[affinity]
		if !ok {
			u = s.Checkouts.Affinities.UsableOnSomeNode(affinity, nodes)
			answers[affinity] = u
		}
		return u
	}
}

// namespaceGoing says whether the cache shows namespace ns being deleted
// or gone.
func (s *Stock) namespaceGoing(ctx context.Context, ns string) (bool, error) {
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	if err := s.Checkouts.Cache.Get(ctx, client.ObjectKey{Name: ns}, meta); err != nil {
		if !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("reading namespace %s: %w", ns, err)
		}
		return true, nil
	}
	return !meta.DeletionTimestamp.IsZero(), nil
}

// replicas is how many replicas share the pools: the live stock Leases
// the cache shows, this one's included, at least 1; the last count while
// the Leases cannot be listed, said once when it starts failing and once
// when it stops. Only Sync calls it. It deletes the Leases over for
// LeaseDuration (conditioned on their version): their holders' claims
// are free.
func (s *Stock) replicas(ctx context.Context) int {
	var leases coordinationv1.LeaseList
	err := s.Checkouts.Cache.List(ctx, &leases, client.InNamespace(s.Namespace), client.MatchingLabels{v1alpha1.StockLeaseLabelKey: "true"})
	if err != nil {
		if !s.countFailing {
			log.FromContext(ctx).Info("cannot count the stocks' Leases; each pool's share stays as last counted (as if alone before any count)",
				"replicas", max(s.lastReplicas, 1), "error", err.Error())
		}
		s.countFailing = true
		return max(s.lastReplicas, 1)
	}
	now := s.Clock.Now()
	n := 1
	for i := range leases.Items {
		l := &leases.Items[i]
		switch end := LeaseEnd(l, now); {
		case s.term.lease != nil && l.Name == s.term.lease.Name:
		case now.Before(end):
			n++
		case now.Sub(end) > LeaseDuration:
			err := s.Checkouts.Writer.Delete(ctx, l, client.Preconditions{UID: &l.UID, ResourceVersion: &l.ResourceVersion})
			if client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
				log.FromContext(ctx).V(1).Info("deleting a stock Lease over long ago", "lease", l.Name, "error", err.Error())
			}
		}
	}
	if s.countFailing || n != s.lastReplicas {
		log.FromContext(ctx).Info("the replicas share each pool's reservations", "replicas", n)
	}
	s.countFailing, s.lastReplicas = false, n
	return n
}

// keepLease makes the stock's Lease, or renews it a quarter of
// LeaseDuration after its last write. A Lease deleted, or over by the stock's count before a
// renewal landed, is lost: the stock forgets its claims (fence) and
// makes a new Lease on its next sync.
func (s *Stock) keepLease(ctx context.Context) error {
	now := s.Clock.Now()
	t := s.term
	if t.lease != nil && now.Sub(t.lease.Spec.RenewTime.Time) < LeaseDuration/4 {
		return nil
	}
	l, err := s.writeLease(ctx, t.lease, now)
	switch {
	case err == nil && t.lease != nil && !now.Before(t.validUntil):
		// Renewed after it was over by the stock's count: the binding
		// controller may have taken its claims for unheld meanwhile.
		s.fence(ctx, "its Lease was over before it was renewed")
		return nil
	case err == nil:
		s.setTerm(term{lease: l, holder: l.Namespace + "/" + l.Name, validUntil: now.Add(LeaseDuration)})
		return nil
	case t.lease == nil:
	case apierrors.IsNotFound(err):
		s.fence(ctx, "its Lease was deleted")
	case !now.Before(t.validUntil):
		s.fence(ctx, "its Lease ran out before a renewal landed")
	case apierrors.IsConflict(err):
		// A renewal whose answer was lost may have landed: the next one
		// writes over the Lease as it is now. The Lease runs on, by the
		// stock's count, from the last renewal known to have landed.
		live := &coordinationv1.Lease{}
		if getErr := s.Checkouts.Live.Get(ctx, client.ObjectKeyFromObject(t.lease), live); getErr == nil && live.UID == t.lease.UID {
			t.lease = live
			s.setTerm(t)
		}
	}
	return fmt.Errorf("keeping the stock's Lease: %w", err)
}

// writeLease renews lease, as written at now, or, when it is nil, makes
// the stock's Lease. A Lease whose create was answered with an error may
// have been made: the next try reads it, and renews it if it was,
// rather than make a second one, which would count as another replica
// until it is over.
func (s *Stock) writeLease(ctx context.Context, lease *coordinationv1.Lease, now time.Time) (*coordinationv1.Lease, error) {
	if lease == nil && s.creating != nil {
		live := &coordinationv1.Lease{}
		switch err := s.Checkouts.Live.Get(ctx, client.ObjectKeyFromObject(s.creating), live); {
		case err == nil:
			lease = live
		case !apierrors.IsNotFound(err):
			return nil, err
		}
	}
	at := metav1.NewMicroTime(now)
	if lease == nil {
		if s.creating == nil {
			s.creating = newLease(s.Namespace, s.Name, now)
		}
		l := s.creating.DeepCopy()
		l.Spec.AcquireTime, l.Spec.RenewTime = &at, &at
		err := s.Checkouts.Writer.Create(ctx, l)
		if err == nil {
			s.creating = nil
		}
		return l, err
	}
	s.creating = nil
	l := lease.DeepCopy()
	l.Spec.RenewTime = &at
	return l, s.Checkouts.Writer.Update(ctx, l)
}

// setTerm makes t the stock's term.
func (s *Stock) setTerm(t term) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.term = t
}

// fence forgets every claim the stock holds, and its Lease, which is
// over or gone: the binding controller may be reclaiming the claims.
func (s *Stock) fence(ctx context.Context, why string) {
	s.mu.Lock()
	n := len(s.held)
	s.held = map[types.NamespacedName]*stocked{}
	s.handedOut = nil
	s.term = term{}
	s.mu.Unlock()
	log.FromContext(ctx).Info("the stock lost its Lease: it forgets its reserved claims, which are reclaimed, and makes a new Lease", "reason", why, "claims", n)
}

// limit is pool.Limit for the stock's Target.
func (s *Stock) limit(f *v1alpha1.FluentPVC, replicas int) int {
	return pool.Limit(f, s.Target, replicas)
}

// giveBack gives held claim c back to the pool (claim.Unreserve), busy
// meanwhile, and forgets it once given back or gone. Any other answer
// leaves its outcome unknown (a timeout or a 5xx may or may not have
// landed; a conflict is what a client's retry of a write that landed
// meets): the claim stays busy, never handed out again by this stock,
// and is given back again at the next Sync (giveBackAgain). A
// reservation that stays when the stock stops is reclaimed once its
// Lease is over.
func (s *Stock) giveBack(ctx context.Context, c *corev1.PersistentVolumeClaim) error {
	key := client.ObjectKeyFromObject(c)
	w, err := claim.Unreserve(c, s.term.holder)
	if err == nil {
		err = claim.Execute(ctx, s.Checkouts.Writer, w)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil || apierrors.IsNotFound(err) {
		delete(s.held, key)
		return nil
	}
	if st, ok := s.held[key]; ok {
		st.returning, st.retryAt = true, s.Clock.Now().Add(LeaseDuration/4)
	}
	return fmt.Errorf("giving claim %s back: %w", key, err)
}

// unrecordedHandouts picks, while the Lease is writable, the claims the
// stock handed out at least claim.AdmissionBound before now, whose
// reservations are due to end (endReservation): by then the pod admitted
// with a claim is stored, or never will be (the API server refused it
// after the webhook, or gave up waiting for the webhook's answer). A
// claim whose pod is recorded, or that the cache shows gone, being
// deleted or no longer reserved by the stock, is forgotten; one the cache
// cannot tell of is kept for later. Each is returned as the cache shows
// it, the version the write is conditioned on.
func (s *Stock) unrecordedHandouts(ctx context.Context, now time.Time) map[types.NamespacedName]handout {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.term.usable(now) {
		return nil
	}
	var due map[types.NamespacedName]handout
	for key, h := range s.handedOut {
		// A claim that records its pod is no longer a reservation, so it
		// is not held either.
		switch held, known := s.stillHeld(ctx, h.pvc); {
		case !known:
			continue
		case !held:
			delete(s.handedOut, key)
			continue
		}
		if now.Sub(h.at) < claim.AdmissionBound || now.Before(h.retryAt) {
			continue
		}
		cached := &corev1.PersistentVolumeClaim{}
		if err := s.Checkouts.Cache.Get(ctx, key, cached); err != nil || cached.ResourceVersion == claim.PodsSince(h.pvc) {
			continue
		}
		if due == nil {
			due = map[types.NamespacedName]handout{}
		}
		due[key] = handout{pvc: cached, at: h.at}
	}
	return due
}

// endReservation ends the reservation of claim h.pvc, of key, handed out
// with no pod recorded since (claim.EndReservation), so that the binding
// controller reclaims or drains it now rather than at the end of the
// stock's Lease. It is forgotten once that landed, or the claim is gone;
// otherwise tried again a quarter of LeaseDuration later.
func (s *Stock) endReservation(ctx context.Context, key types.NamespacedName, h handout) error {
	w, err := claim.EndReservation(h.pvc, s.term.holder, h.at)
	if err == nil {
		err = claim.Execute(ctx, s.Checkouts.Writer, w)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil || apierrors.IsNotFound(err) {
		delete(s.handedOut, key)
		if err == nil {
			log.FromContext(ctx).Info("a claim handed out from the stock has no pod recorded since; its reservation is ended, for its binding to reclaim or drain it",
				"claim", key, "handedOut", h.at)
		}
		return nil
	}
	if cur, ok := s.handedOut[key]; ok {
		cur.retryAt = s.Clock.Now().Add(LeaseDuration / 4)
	}
	return fmt.Errorf("ending the reservation of claim %s, handed out with no pod recorded since: %w", key, err)
}

// giveBackAgain picks the claims whose give-back had an unknown outcome,
// due again at now, and that the cache still shows reserved by the
// stock's Lease, as the cache shows them (stillReserved), while the Lease
// is writable.
func (s *Stock) giveBackAgain(ctx context.Context, now time.Time) []*corev1.PersistentVolumeClaim {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.term.usable(now) {
		return nil
	}
	var again []*corev1.PersistentVolumeClaim
	for key, st := range s.held {
		if !st.returning || now.Before(st.retryAt) {
			continue
		}
		if c := s.stillReserved(ctx, key, st); c != nil {
			again = append(again, c)
		}
	}
	return again
}

// stillReserved is returning claim st, of key, as the cache shows it,
// while the cache shows it reserved by the stock's Lease (stillHeld);
// nil otherwise. It forgets the claim once the cache shows it given back,
// gone or taken since, and keeps it, for later, while the cache cannot
// tell or has not seen the reservation yet. Called under the lock.
func (s *Stock) stillReserved(ctx context.Context, key types.NamespacedName, st *stocked) *corev1.PersistentVolumeClaim {
	switch held, known := s.stillHeld(ctx, st.pvc); {
	case !known:
		return nil
	case !held:
		delete(s.held, key)
		return nil
	}
	cached := &corev1.PersistentVolumeClaim{}
	if err := s.Checkouts.Cache.Get(ctx, key, cached); err != nil || cached.ResourceVersion == claim.PodsSince(st.pvc) {
		return nil
	}
	return cached
}

// reserve reserves Bound warm PVCs of f's pool whose volume a node can
// use (usable), in every namespace of the pool that has them, until the stock
// holds its limit there (held: how many it holds, by namespace). Of a
// pool that stages (staged), only warm PVCs that a running holder stages
// are reserved, and their holders stay; of another, only those without a
// holder.
func (s *Stock) reserve(ctx context.Context, f *v1alpha1.FluentPVC, staged bool, held map[string]int, usable func(affinity string) bool, now time.Time, replicas int) error {
	c := s.Checkouts
	var warm corev1.PersistentVolumeClaimList
	if err := c.Cache.List(ctx, &warm, client.MatchingFields{WarmIndex: f.Name}, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing the warm PVCs of FluentPVC %s: %w", f.Name, err)
	}
	byNS := map[string][]corev1.PersistentVolumeClaim{}
	for _, w := range warm.Items {
		byNS[w.Namespace] = append(byNS[w.Namespace], w)
	}
	hash, limit := pool.TemplateHash(&f.Spec.PVCSpecTemplate), s.limit(f, replicas)
	inPool := pool.PoolNamespaces(f)
	var errs []error
	for ns, items := range byNS {
		want := limit - held[ns]
		if want <= 0 || !inPool.Has(ns) {
			continue
		}
		if going, err := s.namespaceGoing(ctx, ns); err != nil {
			errs = append(errs, err)
			continue
		} else if going {
			continue
		}
		holders, requests, err := c.holders(ctx, f.Name, ns)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, cand := range pool.Candidates(items, hash, usable) {
			if want <= 0 {
				break
			}
			// A PVC whose holder may still be created is left to the
			// pool's staging, and so is one whose holder the pool is to
			// remove (it stopped staging moments ago).
			h, hasHolder := holders[cand.Name]
			stagedHere := hasHolder && pool.HolderStaged(h)
			if (staged && !stagedHere) || (!staged && hasHolder) ||
				claim.HolderPending(cand, func(req string) bool { return requests[pool.HolderRequestKey(cand.Name, req)] }, now) ||
				!c.take(cand, now) {
				continue
			}
			w, err := claim.Reserve(cand, now, s.term.holder, claim.NewCheckoutID())
			if err == nil {
				err = claim.Execute(ctx, c.Writer, w)
			}
			switch {
			case err == nil:
				if !s.add(w.Object) {
					return nil
				}
				want--
			case apierrors.IsConflict(err), apierrors.IsNotFound(err):
			default:
				errs = append(errs, fmt.Errorf("reserving warm PVC %s/%s: %w", ns, cand.Name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// add keeps reserved claim c; false when the stock is closed: c is then
// given back at once.
func (s *Stock) add(c *corev1.PersistentVolumeClaim) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.held[client.ObjectKeyFromObject(c)] = &stocked{pvc: c}
	return true
}

// counts is how many claims the stock holds per FluentPVC.
func (s *Stock) counts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for _, st := range s.held {
		out[st.pvc.Labels[v1alpha1.FluentPVCNameLabelKey]]++
	}
	return out
}

// Close stops handing out claims and gives back every claim the stock
// holds, while its Lease is usable; it forgets them otherwise
// (they are reclaimed once the Lease is over). Then it ends its Lease a
// second later (endLease).
func (s *Stock) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	var all []*corev1.PersistentVolumeClaim
	writable := s.term.usable(s.Clock.Now())
	for key, st := range s.held {
		switch {
		case !writable:
			delete(s.held, key)
		case st.returning:
			if c := s.stillReserved(ctx, key, st); c != nil {
				all = append(all, c)
			}
		case !st.busy:
			st.busy = true
			all = append(all, st.pvc)
		}
	}
	s.mu.Unlock()
	var errs []error
	for _, c := range all {
		if err := s.giveBack(ctx, c); err != nil {
			errs = append(errs, err)
		}
	}
	if len(all) > 0 {
		log.FromContext(ctx).Info("gave reserved claims back to the pool", "claims", len(all), "failed", len(errs))
	}
	// The Lease ends whatever the give-backs took: ending it early is
	// always safe, and the other replicas take their share at once.
	end, cancel := context.WithTimeout(context.WithoutCancel(ctx), LeaseDuration/4)
	defer cancel()
	return errors.Join(append(errs, s.endLease(end))...)
}

// endLease makes the stock's Lease end a second from now: the other
// replicas take their share of the pools without it at their next sync,
// and the claims whose give-back failed are reclaimed that much sooner.
// The pods it admitted before it closed are created by then, and the
// binding controller waits for them 5 s past the end as for any Lease.
func (s *Stock) endLease(ctx context.Context) error {
	s.mu.Lock()
	t := s.term
	s.term = term{}
	s.mu.Unlock()
	if t.lease == nil {
		return nil
	}
	l := t.lease.DeepCopy()
	at := metav1.NewMicroTime(s.Clock.Now())
	l.Spec.RenewTime, l.Spec.LeaseDurationSeconds = &at, ptr.To[int32](1)
	if err := s.Checkouts.Writer.Update(ctx, l); err != nil {
		return fmt.Errorf("ending the stock's Lease (it ends %s after its last renewal instead): %w", LeaseDuration, err)
	}
	return nil
}

// report sets the reservedClaims gauge of every FluentPVC the stock reserves
// from or holds claims of, and removes it for the others.
func (s *Stock) report(fpvcs map[string]*v1alpha1.FluentPVC) {
	counts := s.counts()
	if s.reported == nil {
		s.reported = map[string]bool{}
	}
	for name := range s.reported {
		if _, ok := fpvcs[name]; !ok && counts[name] == 0 {
			reservedClaims.DeleteLabelValues(name)
			delete(s.reported, name)
		}
	}
	for name := range fpvcs {
		reservedClaims.WithLabelValues(name).Set(float64(counts[name]))
		s.reported[name] = true
	}
	for name, n := range counts {
		reservedClaims.WithLabelValues(name).Set(float64(n))
		s.reported[name] = true
	}
}
