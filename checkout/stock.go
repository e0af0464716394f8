package checkout

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/pool"
)

// ReserveTTL is how long a reservation runs from the write that makes or
// extends it when Stock.TTL is unset.
const ReserveTTL = 5 * time.Minute

// MinReserveTTL is the shortest Stock.TTL: twice HandoutMargin, so that a
// claim is handed out for half its reservation or more.
const MinReserveTTL = 2 * HandoutMargin

// HandoutMargin is how much of a reservation must be left for it to be
// handed to a pod: the pod is created, and its binding sees it, well
// before the reservation ends, when the binding stops waiting for it.
const HandoutMargin = 30 * time.Second

// writeMargin is the least of a reservation that must be left for its
// holder to write it (extend it or give it back), and before which an
// extension must have landed for the claim to be kept: the binding
// controller takes a claim whose reservation ended 5 s ago, and that
// records no pod, for one whose pod never came, and reclaims it. A claim
// with less left is forgotten without a write and reclaimed that way.
const writeMargin = 10 * time.Second

// stockPoll is how often a Stock looks for warm PVCs to reserve and for
// reservations to extend or give back.
const stockPoll = time.Second

// giveBackTimeout bounds how long a Stock that stops spends giving its
// reservations back.
const giveBackTimeout = 10 * time.Second

// Stock is what one webhook replica holds of the warm pools: up to the
// pool's reserveAhead (Target when unset) claims per FluentPVC and
// namespace, at most its share of the pool (pool.Limit), reserved ahead of
// their pods (claim.Reserve), which its admissions hand out without an API
// write. The reservation is the checkout's write made before the pod
// comes, so a claim handed out is already a claim, with everything its
// drain needs. Only pools that do not stage their warm PVCs are reserved
// from: a staged pool's warm PVCs wait for their holders.
//
// Sync keeps the stock: it reserves Bound warm PVCs of the current
// template, extends reservations before they end, and gives back (to the
// pool, as warm PVCs) those of a FluentPVC that is gone, being deleted,
// staged or changed its template, and those beyond its pool.Limit (the
// size shrank, or more replicas share the pool). A claim is handed out,
// extended or given back under the stock's lock, so never two of them at
// once; once handed out, or given back (whether or not the write is known
// to have landed), the stock forgets it. A replica that dies holds its
// stock until the reservations end; the binding controller then reclaims
// them as claims whose pods never came.
type Stock struct {
	// Owner names this process in the claims it reserves.
	Owner string
	// Target is how many claims to hold per FluentPVC and namespace for a
	// FluentPVC whose spec.pool.reserveAhead is unset, or pool.ReserveShare.
	// Whatever asks, a stock holds at most its share of the pool: the
	// size divided by the replicas, rounded up.
	Target int
	// Replicas, when set, says how many webhook replicas serve
	// admissions, and so share the pools; fewer than 1 counts as 1 (the
	// replica is alone). On an error the last count stands (1 before any).
	Replicas func(context.Context) (int, error)
	// Stopping, when set, says that the replica is stopping: it reserves
	// no more (it gives everything back once stopped), while it keeps and
	// hands out what it holds.
	Stopping func() bool
	// Checkouts are the replica's checkouts, whose cache and writer the
	// stock uses and whose record of the warm PVCs taken it shares, so
	// that neither tries a PVC the other took while the cache lags.
	Checkouts *Checkouter
	// Clock is the API server's (reservations end on its time).
	Clock clock.PassiveClock
	// TTL is how long a reservation runs from the write that makes or
	// extends it, from MinReserveTTL to claim.MaxReservation; ReserveTTL
	// when 0. The holder extends it when half is left.
	TTL time.Duration

	// lastReplicas is the last count of Replicas, 0 before any;
	// countFailing says whether its last call failed.
	lastReplicas int
	countFailing bool

	mu     sync.Mutex
	closed bool
	held   map[types.NamespacedName]*stocked
	// reported are the FluentPVCs the pool.Reserved gauge has a value for.
	reported map[string]bool
}

// stocked is one claim of a Stock.
type stocked struct {
	// pvc is the claim as last written by the stock.
	pvc *corev1.PersistentVolumeClaim
	// busy is true while the stock writes it (an extension, a give-back):
	// it is not handed out meanwhile.
	busy bool
}

// NewStock is a Stock of owner holding target claims per FluentPVC and
// namespace, for the checkouts of c, on the API server's clock clk.
func NewStock(owner string, target int, c *Checkouter, clk clock.PassiveClock) *Stock {
	return &Stock{Owner: owner, Target: target, Checkouts: c, Clock: clk, held: map[types.NamespacedName]*stocked{}}
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
			giveBack, cancel := context.WithTimeout(context.WithoutCancel(ctx), giveBackTimeout)
			defer cancel()
			if err := s.Close(giveBack); err != nil {
				log.FromContext(ctx).Error(err, "giving reserved claims back to the pool; they are reclaimed once their reservations end")
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
// not refuse, with at least HandoutMargin of its reservation left; nil
// when the stock has none. The stock forgets it.
func (s *Stock) take(ctx context.Context, fpvc, namespace, hash string, usable func(affinity string) bool, skip func(*corev1.PersistentVolumeClaim) bool) *corev1.PersistentVolumeClaim {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	now := s.Clock.Now()
	for key, st := range s.held {
		c := st.pvc
		if st.busy || key.Namespace != namespace || c.Labels[v1alpha1.FluentPVCNameLabelKey] != fpvc || c.Labels[v1alpha1.TemplateHashLabelKey] != hash {
			continue
		}
		if _, until, ok := claim.Reservation(c); !ok || until.Sub(now) < HandoutMargin {
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
	return ok && by == s.Owner, true
}

// Len is how many claims the stock holds.
func (s *Stock) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.held)
}

// reservable are the FluentPVCs whose pools the stock reserves from, by
// name: a pool of some size that asks for reservations (limit), not being
// deleted, not staged.
func (s *Stock) reservable(ctx context.Context, replicas int) (map[string]*v1alpha1.FluentPVC, error) {
	var fpvcs v1alpha1.FluentPVCList
	if err := s.Checkouts.Cache.List(ctx, &fpvcs); err != nil {
		return nil, fmt.Errorf("listing FluentPVCs: %w", err)
	}
	out := map[string]*v1alpha1.FluentPVC{}
	for i := range fpvcs.Items {
		f := &fpvcs.Items[i]
		if s.limit(f, replicas) <= 0 || !f.DeletionTimestamp.IsZero() {
			continue
		}
		staged, err := Stages(ctx, s.Checkouts.Cache, f)
		if err != nil {
			return nil, err
		}
		if !staged {
			out[f.Name] = f
		}
	}
	return out, nil
}

// Sync brings the stock to its pool.Limit per FluentPVC and namespace
// where the pool has Bound warm PVCs, extends the reservations that run
// out, and gives back those no longer wanted (see Stock).
func (s *Stock) Sync(ctx context.Context) error {
	replicas := s.replicas(ctx)
	fpvcs, err := s.reservable(ctx, replicas)
	if err != nil {
		return err
	}
	now := s.Clock.Now()
	usable := s.usableOnSomeNode(ctx)
	unfit, err := s.prune(ctx, fpvcs, usable)
	if err != nil {
		return err
	}
	extend, giveBack, count := s.plan(fpvcs, unfit, now, replicas)
	errs := []error{}
	for _, c := range giveBack {
		errs = append(errs, s.write(ctx, c, func(c *corev1.PersistentVolumeClaim) (claim.Write, error) { return claim.Unreserve(c, s.Owner) }))
	}
	for _, c := range extend {
		errs = append(errs, s.write(ctx, c, func(c *corev1.PersistentVolumeClaim) (claim.Write, error) {
			return claim.Extend(c, s.Owner, now.Add(s.ttl()))
		}))
	}
	if s.Stopping == nil || !s.Stopping() {
		for name, f := range fpvcs {
			errs = append(errs, s.reserve(ctx, f, count[name], usable, now, replicas))
		}
	}
	s.report(fpvcs)
	return errors.Join(errs...)
}

// plan picks, under the lock, the claims to extend and to give back (those
// of another template and those unfit, besides those beyond the limit),
// and marks them busy; count is how many the stock keeps per FluentPVC
// and namespace.
func (s *Stock) plan(fpvcs map[string]*v1alpha1.FluentPVC, unfit map[types.NamespacedName]bool, now time.Time, replicas int) (extend, giveBack []*corev1.PersistentVolumeClaim, count map[string]map[string]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	count = map[string]map[string]int{}
	for key, st := range s.held {
		if st.busy {
			continue
		}
		c := st.pvc
		name := c.Labels[v1alpha1.FluentPVCNameLabelKey]
		f, ok := fpvcs[name]
		_, until, _ := claim.Reservation(c)
		switch {
		case until.Sub(now) < writeMargin:
			// Its extensions failed until too late (writeMargin): the
			// binding controller may be reclaiming it already.
			delete(s.held, key)
			continue
		case !ok || c.Labels[v1alpha1.TemplateHashLabelKey] != pool.TemplateHash(&f.Spec.PVCSpecTemplate) || unfit[key]:
			giveBack = append(giveBack, c)
		case count[name][c.Namespace] >= s.limit(f, replicas):
			giveBack = append(giveBack, c)
		default:
			if count[name] == nil {
				count[name] = map[string]int{}
			}
			count[name][c.Namespace]++
			if until.Sub(now) >= s.ttl()/2 {
				continue
			}
			extend = append(extend, c)
		}
		st.busy = true
	}
	return extend, giveBack, count
}

// prune forgets the claims the cache no longer shows reserved by this
// stock (stillHeld), and says which of the others no pod can take, to be
// given back: those of a namespace being deleted (so that their
// finalizers do not hold it), of a namespace that left their pool
// (pool.PoolNamespaces of fpvcs), and those whose volume no node can use
// (usable) or is attached to a node that is gone.
func (s *Stock) prune(ctx context.Context, fpvcs map[string]*v1alpha1.FluentPVC, usable func(affinity string) bool) (map[types.NamespacedName]bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	unfit := map[types.NamespacedName]bool{}
	// By namespace, node and FluentPVC: a pool's claims share a few.
	going, gone := map[string]bool{}, map[string]bool{}
	inPool := map[string]sets.Set[string]{}
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
		affinity, _ := pool.WarmAffinity(st.pvc)
		unfit[key] = g || left || !usable(affinity) || s.Checkouts.stranded(ctx, st.pvc, gone)
	}
	return unfit, nil
}

// usableOnSomeNode says, for one sync, whether a volume of an affinity
// (a NodeAffinityAnnotationKey value) can be used on a cached node
// (pool.UsableOnSomeNode). The nodes are listed at the first question
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
			u = pool.UsableOnSomeNode(affinity, nodes)
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

// ttl is how long a reservation runs (TTL, within its bounds).
func (s *Stock) ttl() time.Duration {
	if s.TTL == 0 {
		return ReserveTTL
	}
	return min(max(s.TTL, MinReserveTTL), claim.MaxReservation)
}

// replicas is how many replicas share the pools (Replicas), at least 1;
// the last count while Replicas fails, said once when it starts failing
// and once when it stops. Only Sync calls it.
func (s *Stock) replicas(ctx context.Context) int {
	if s.Replicas == nil {
		return 1
	}
	n, err := s.Replicas(ctx)
	if err != nil {
		if !s.countFailing {
			log.FromContext(ctx).Info("cannot count the webhook's replicas; each pool's share stays as last counted (as if alone before any count)",
				"replicas", max(s.lastReplicas, 1), "error", err.Error())
		}
		s.countFailing = true
		return max(s.lastReplicas, 1)
	}
	if s.countFailing || n != s.lastReplicas {
		log.FromContext(ctx).Info("the webhook's replicas share each pool's reservations", "replicas", max(n, 1))
	}
	s.countFailing, s.lastReplicas = false, max(n, 1)
	return s.lastReplicas
}

// limit is pool.Limit for the stock's Target.
func (s *Stock) limit(f *v1alpha1.FluentPVC, replicas int) int {
	return pool.Limit(f, s.Target, replicas)
}

// write makes transition's write of held claim c, busy meanwhile, and
// keeps what it leaves: the claim as written while still reserved, none
// once given back or gone. A claim that changed since (a conflict) is
// read again from the cache and kept if it is still this stock's.
func (s *Stock) write(ctx context.Context, c *corev1.PersistentVolumeClaim, transition func(*corev1.PersistentVolumeClaim) (claim.Write, error)) error {
	key := client.ObjectKeyFromObject(c)
	w, err := transition(c)
	if err == nil {
		err = claim.Execute(ctx, s.Checkouts.Writer, w)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.held[key]
	if st == nil {
		return err
	}
	st.busy = false
	_, until, _ := claim.Reservation(c)
	switch {
	case err == nil && w.To() == claim.Claimed && !s.Clock.Now().Before(until.Add(-writeMargin)):
		// Extended too late to be sure the binding controller had not
		// taken the reservation for over (writeMargin): never handed out,
		// it is reclaimed once the extension ends.
		delete(s.held, key)
	case err == nil && w.To() == claim.Claimed:
		st.pvc = w.Object
	case err == nil, apierrors.IsNotFound(err):
		delete(s.held, key)
	case w.Object != nil && w.To() != claim.Claimed:
		// A give-back whose outcome is unknown may have landed: a timeout,
		// or a conflict, which a client's retry of a write that landed
		// meets. The cache still shows the claim reserved until it catches
		// up: never handed out again by this stock. A reservation that
		// stays is reclaimed once it ends.
		delete(s.held, key)
	case apierrors.IsConflict(err):
		cached := &corev1.PersistentVolumeClaim{}
		if getErr := s.Checkouts.Cache.Get(ctx, key, cached); getErr != nil {
			return errors.Join(err, getErr)
		}
		if by, _, ok := claim.Reservation(cached); !ok || by != s.Owner || cached.UID != c.UID {
			// Reclaimed or deleted by others: nothing the stock may hand out.
			delete(s.held, key)
			return nil
		}
		st.pvc = cached.DeepCopy()
		return nil // tried again on the next sync
	}
	if err != nil {
		return fmt.Errorf("claim %s: %w", key, err)
	}
	return nil
}

// reserve reserves Bound warm PVCs of f's pool whose volume a node can
// use (usable), in every namespace of the pool that has them, until the stock
// holds its limit there (held: how many it holds, by namespace).
func (s *Stock) reserve(ctx context.Context, f *v1alpha1.FluentPVC, held map[string]int, usable func(affinity string) bool, now time.Time, replicas int) error {
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
		// A PVC with a holder, or whose holder may still be created, is
		// left to the pool's staging (the pool stopped staging moments
		// ago): a reserved claim has no holder to leave.
		holders, requests, err := c.holders(ctx, f.Name, ns)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, cand := range pool.Candidates(items, hash, usable) {
			if want <= 0 {
				break
			}
			if _, held := holders[cand.Name]; held ||
				claim.HolderPending(cand, func(req string) bool { return requests[pool.HolderRequestKey(cand.Name, req)] }, now) ||
				!c.take(cand, now) {
				continue
			}
			w, err := claim.Reserve(cand, now, now.Add(s.ttl()), s.Owner, claim.NewCheckoutID())
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
// holds.
func (s *Stock) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	now := s.Clock.Now()
	var all []*corev1.PersistentVolumeClaim
	for key, st := range s.held {
		if _, until, _ := claim.Reservation(st.pvc); until.Sub(now) < writeMargin {
			delete(s.held, key) // reclaimed by the binding controller (plan)
			continue
		}
		if !st.busy {
			st.busy = true
			all = append(all, st.pvc)
		}
	}
	s.mu.Unlock()
	var errs []error
	for _, c := range all {
		if err := s.write(ctx, c, func(c *corev1.PersistentVolumeClaim) (claim.Write, error) { return claim.Unreserve(c, s.Owner) }); err != nil {
			errs = append(errs, err)
		}
	}
	if len(all) > 0 {
		log.FromContext(ctx).Info("gave reserved claims back to the pool", "claims", len(all), "failed", len(errs))
	}
	return errors.Join(errs...)
}

// report sets the pool.Reserved gauge of every FluentPVC the stock reserves
// from or holds claims of, and removes it for the others.
func (s *Stock) report(fpvcs map[string]*v1alpha1.FluentPVC) {
	counts := s.counts()
	if s.reported == nil {
		s.reported = map[string]bool{}
	}
	for name := range s.reported {
		if _, ok := fpvcs[name]; !ok && counts[name] == 0 {
			pool.Reserved.DeleteLabelValues(name)
			delete(s.reported, name)
		}
	}
	for name := range fpvcs {
		pool.Reserved.WithLabelValues(name).Set(float64(counts[name]))
		s.reported[name] = true
	}
	for name, n := range counts {
		pool.Reserved.WithLabelValues(name).Set(float64(n))
		s.reported[name] = true
	}
}
