package checkout

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/st-tech/fluent-pvc-operator/apis/objects"
	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/expectations"
	"github.com/st-tech/fluent-pvc-operator/pool"
)

// DefaultMaxTries bounds the warm PVCs a checkout tries on each list (the
// cached one, then, if every try lost a race, one uncached list) before the
// pod gets a freshly created claim.
const DefaultMaxTries = 5

// WarmIndex is a cache index of warm PVCs by their FluentPVC's name, so
// that a checkout reads only its pool's warm PVCs in the pod's namespace,
// not every claim there; the Checkouter's cache must have it (IndexWarm).
const WarmIndex = "fluent-pvc-operator.tech.zozo.com/warm"

// HolderIndex is a cache index of holder pods by their FluentPVC's name,
// so that a checkout reads only its pool's holders, not every labelled pod
// of the namespace.
const HolderIndex = "fluent-pvc-operator.tech.zozo.com/holder"

// AttachmentIndex is a cache index of VolumeAttachments by the name of
// their PersistentVolume, so that a checkout finds a volume stranded on a
// node that is gone (stranded).
const AttachmentIndex = "fluent-pvc-operator.tech.zozo.com/attachment"

// IndexWarm adds WarmIndex, HolderIndex and AttachmentIndex to a cache.
func IndexWarm(ctx context.Context, indexer client.FieldIndexer) error {
	if err := indexer.IndexField(ctx, &corev1.PersistentVolumeClaim{}, WarmIndex, warmKey); err != nil {
		return err
	}
	if err := indexer.IndexField(ctx, &corev1.Pod{}, HolderIndex, holderKey); err != nil {
		return err
	}
	return indexer.IndexField(ctx, &storagev1.VolumeAttachment{}, AttachmentIndex, attachmentKey)
}

// attachmentKey is the AttachmentIndex value of a VolumeAttachment: its
// PersistentVolume's name.
func attachmentKey(obj client.Object) []string {
	if va, ok := obj.(*storagev1.VolumeAttachment); ok && va.Spec.Source.PersistentVolumeName != nil {
		return []string{*va.Spec.Source.PersistentVolumeName}
	}
	return nil
}

// warmKey is the WarmIndex value of a PVC: its FluentPVC's name, if warm.
func warmKey(obj client.Object) []string {
	l := obj.GetLabels()
	if l[v1alpha1.ClaimRoleLabelKey] != v1alpha1.ClaimRoleWarm || l[v1alpha1.FluentPVCNameLabelKey] == "" {
		return nil
	}
	return []string{l[v1alpha1.FluentPVCNameLabelKey]}
}

// holderKey is the HolderIndex value of a pod: its FluentPVC's name, if a
// holder.
func holderKey(obj client.Object) []string {
	l := obj.GetLabels()
	if l[v1alpha1.ComponentLabelKey] != v1alpha1.ComponentHolder || l[v1alpha1.FluentPVCNameLabelKey] == "" {
		return nil
	}
	return []string{l[v1alpha1.FluentPVCNameLabelKey]}
}

// Checkouter hands warm PVCs to pods. One serves one webhook replica.
type Checkouter struct {
	// Cache lists warm PVCs; Live lists them uncached, once, when every try
	// on the cached list lost a race (the cache lags behind a burst).
	Cache, Live client.Reader
	Writer      client.Writer
	// Nodes, when set and synced, lists the cached nodes without copying
	// them for a pod that pins no node; else Cache lists them.
	Nodes *NodeStore
	// MaxTries bounds the updates tried on each list.
	MaxTries int
	// Stock, when set, holds claims reserved ahead of their pods, which a
	// checkout hands out first, without a write.
	Stock *Stock
	// Affinities parses the volumes' affinities for the checkouts and the
	// stock.
	Affinities *pool.Affinities

	// taken expects, by UID, the writes of the PVCs' versions this
	// replica is handing out, handed out or lost a race for, so that its
	// other checkouts skip those versions while its cache is stale.
	taken expectations.Expectations[types.UID, struct{}]
}

// NewCheckouter is a Checkouter with DefaultMaxTries; cache must have
// WarmIndex and HolderIndex (IndexWarm).
func NewCheckouter(cache, live client.Reader, w client.Writer) *Checkouter {
	return &Checkouter{Cache: cache, Live: live, Writer: w, MaxTries: DefaultMaxTries, Affinities: pool.NewAffinities()}
}

// Checkedout is what Checkout hands a pod.
type Checkedout struct {
	// PVC is the warm PVC taken, nil on a miss.
	PVC *corev1.PersistentVolumeClaim
	// Holder is the name of its holder pod, "" when it had none.
	Holder string
	// StagedOn is the node it is staged on, when the pod can run there;
	// "" otherwise.
	StagedOn string
}

// Checkout takes one warm PVC of fpvc for pod, in its namespace, whose
// volume can be used on a node the pod can run on (the cache's nodes; see
// pool.Placement). Each try is one update conditioned on the
// resourceVersion read, so two webhooks, in one replica or several, never
// hand the same PVC to two pods: the loser gets a conflict and tries
// another. Warm PVCs staged on a node the pod can run on come first
// (pool.Rank). It returns no PVC when no warm PVC fits (a miss).
func (c *Checkouter) Checkout(ctx context.Context, fpvc *v1alpha1.FluentPVC, pod *corev1.Pod, admittedAt time.Time) (Checkedout, error) {
	hash := pool.TemplateHash(&fpvc.Spec.PVCSpecTemplate)
	namespace := pod.Namespace
	placement := pool.NewPlacement(pod, func() ([]*corev1.Node, error) { return c.podNodes(ctx, pod) }, c.Affinities)
	// Nodes found missing from the cache, or not, by name: the staged
	// candidates of a pool share a few nodes.
	gone := map[string]bool{}
	if got, ok := c.takeReserved(ctx, fpvc, pod, placement, gone, false); ok {
		return got, nil
	}
	holders, requests, err := c.holders(ctx, fpvc.Name, namespace)
	if err != nil {
		return Checkedout{}, err
	}
	holderNode := func(claim string) (string, bool) {
		h, ok := holders[claim]
		if !ok {
			return "", false
		}
		return h.Spec.NodeName, true
	}
	_, pinned := pool.PinnedNodeNames(pod)
	lostRace := false
	var warmSeen, candidates int
	// Readers are told apart by position: interface comparison panics on
	// readers of uncomparable types.
	for i, r := range []client.Reader{c.Cache, c.Live} {
		live := i == 1
		if r == nil || (live && !lostRace) {
			continue
		}
		warm, err := listWarm(ctx, r, live, namespace, fpvc.Name)
		if err != nil {
			return Checkedout{}, err
		}
		// A PVC whose holder may still be created goes to no pod: the holder
		// could be admitted on a read before this checkout and be created
		// after it.
		cands := slices.DeleteFunc(pool.Candidates(warm, hash, placement.Usable), func(pvc *corev1.PersistentVolumeClaim) bool {
			return claim.HolderPending(pvc, func(req string) bool { return requests[pool.HolderRequestKey(pvc.Name, req)] }, admittedAt)
		})
		if len(holders) > 0 {
			cands = pool.Rank(cands, holderNode, placement.FitsNode, pinned)
		}
		if err := placement.Err(); err != nil {
			// Only volumes usable anywhere were candidates: the pod may
			// miss, which costs it time, not its start.
			log.FromContext(ctx).Error(err, "reading nodes for a checkout; only warm PVCs usable on any node are handed out")
		}
		warmSeen, candidates = len(warm), len(cands)
		got, lost, err := c.try(ctx, cands, admittedAt, gone)
		switch {
		case err != nil:
			return Checkedout{}, err
		case got != nil:
			return staging(got, holders[got.Name], placement), nil
		}
		lostRace = lostRace || lost
	}
	// As with warm PVCs, a reserved claim staged where the pod cannot run
	// comes last, and never to a pod pinned to its nodes.
	if !pinned && c.Stock != nil {
		if got, ok := c.takeReserved(ctx, fpvc, pod, placement, gone, true); ok {
			return got, nil
		}
	}
	log.FromContext(ctx).V(1).Info("checkout missed; the pod gets a new claim",
		"fluentPVC", klog.KObj(fpvc), "namespace", namespace, "reason", missReason(warmSeen, candidates, lostRace))
	return Checkedout{}, nil
}

// takeReserved hands pod a claim of fpvc that the replica's stock holds
// (Stock.take), if one fits, without an API write: one whose volume a
// node the pod can run on can use, not stranded (gone is stranded's
// memory of nodes), and, if a holder stages it, on a node the pod can run
// on, where the pod is then pinned; with anyNode, one staged elsewhere
// too, whose volume then moves to the pod's node.
func (c *Checkouter) takeReserved(ctx context.Context, fpvc *v1alpha1.FluentPVC, pod *corev1.Pod, placement *pool.Placement, gone map[string]bool, anyNode bool) (Checkedout, bool) {
	var holders map[string]*corev1.Pod
	listed := false
	holderOf := func(name string) *corev1.Pod {
		if c.Stock == nil {
			return nil
		}
		if !listed {
			listed = true
			var err error
			if holders, _, err = c.holders(ctx, fpvc.Name, pod.Namespace); err != nil {
				// Handed out unstaged: the volume follows the pod.
				log.FromContext(ctx).V(1).Info("cannot list holders; a reserved claim is handed out as if unstaged", "error", err.Error())
			}
		}
		return holders[name]
	}
	got := c.Stock.take(ctx, fpvc.Name, pod.Namespace, pool.TemplateHash(&fpvc.Spec.PVCSpecTemplate), placement.Usable, func(pvc *corev1.PersistentVolumeClaim) bool {
		if h := holderOf(pvc.Name); !anyNode && h != nil && h.Spec.NodeName != "" && !placement.FitsNode(h.Spec.NodeName) {
			return true // left for a pod that can run where it is staged
		}
		return c.stranded(ctx, pvc, gone)
	})
	if got == nil {
		return Checkedout{}, false
	}
	log.FromContext(ctx).V(1).Info("handed out a reserved claim", "claim", klog.KObj(got))
	return staging(got, holderOf(got.Name), placement), true
}

// staging is what a checkout hands a pod of placement with claim pvc,
// whose holder is h (nil: none): the holder, and its node if the pod can
// run there.
func staging(pvc *corev1.PersistentVolumeClaim, h *corev1.Pod, placement *pool.Placement) Checkedout {
	out := Checkedout{PVC: pvc}
	if h != nil {
		out.Holder = h.Name
		if node := h.Spec.NodeName; node != "" && placement.FitsNode(node) {
			out.StagedOn = node
		}
	}
	return out
}

// listWarm lists the warm PVCs of FluentPVC fpvc in namespace through r:
// the cache (live false), whose objects are listed as they are, through
// the index (pool.Candidates only reads, and claim.Checkout copies the one
// taken), or the API server.
func listWarm(ctx context.Context, r client.Reader, live bool, namespace, fpvc string) ([]corev1.PersistentVolumeClaim, error) {
	var warm corev1.PersistentVolumeClaimList
	opts := []client.ListOption{client.InNamespace(namespace), client.MatchingFields{WarmIndex: fpvc}, client.UnsafeDisableDeepCopy}
	if live {
		opts = []client.ListOption{client.InNamespace(namespace), client.MatchingLabels{
			v1alpha1.FluentPVCNameLabelKey: fpvc,
			v1alpha1.ClaimRoleLabelKey:     v1alpha1.ClaimRoleWarm,
		}}
	}
	if err := r.List(ctx, &warm, opts...); err != nil {
		return nil, fmt.Errorf("listing warm PVCs: %w", err)
	}
	return warm.Items, nil
}

// try checks out the first of cands that it can, in order, making at most
// MaxTries writes: the claim written, or nil with lost true when a write
// lost a race (a conflict, or the PVC gone). gone is stranded's memory of
// nodes.
func (c *Checkouter) try(ctx context.Context, cands []*corev1.PersistentVolumeClaim, admittedAt time.Time, gone map[string]bool) (got *corev1.PersistentVolumeClaim, lost bool, err error) {
	tries := 0
	for _, cand := range cands {
		if tries >= c.MaxTries {
			break
		}
		if c.stranded(ctx, cand, gone) {
			continue
		}
		// Taken before the write, so that the checkouts of this replica
		// running meanwhile try other PVCs instead of losing a race to
		// this one.
		if !c.take(cand, admittedAt) {
			continue
		}
		tries++
		w, err := claim.Checkout(cand, admittedAt, claim.NewCheckoutID())
		if err != nil {
			return nil, lost, err // candidates are warm and not being deleted
		}
		err = claim.Execute(ctx, c.Writer, w)
		if err == nil {
			return w.Object, lost, nil
		}
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return nil, lost, err
		}
		lost = true
	}
	return nil, lost, nil
}

// stranded says whether the volume of warm PVC pvc is attached, as cached,
// to a node the cache does not have. Such a volume may stay attached to a
// deleted node for minutes, or for good (see pool.StrandedAfter), and a pod
// given it would wait as long; the pool replaces the PVC in time. A node
// the cache has not seen yet costs a miss, nothing more. An error reading
// the cache counts as no attachment. gone remembers, by node name, what
// the cache answered, for the checkout's other candidates.
func (c *Checkouter) stranded(ctx context.Context, pvc *corev1.PersistentVolumeClaim, gone map[string]bool) bool {
	if pvc.Spec.VolumeName == "" {
		return false
	}
	var vas storagev1.VolumeAttachmentList
	if err := c.Cache.List(ctx, &vas, client.MatchingFields{AttachmentIndex: pvc.Spec.VolumeName}, client.UnsafeDisableDeepCopy); err != nil {
		log.FromContext(ctx).Error(err, "listing the VolumeAttachments of a warm PVC's volume", "pvc", klog.KObj(pvc))
		return false
	}
	for _, va := range vas.Items {
		node := va.Spec.NodeName
		missing, seen := gone[node]
		if !seen {
			// Only whether it exists matters: the cache's object is not deep-copied.
			err := c.Cache.Get(ctx, client.ObjectKey{Name: node}, &corev1.Node{}, client.UnsafeDisableDeepCopy)
			missing = apierrors.IsNotFound(err)
			gone[node] = missing
		}
		if missing {
			log.FromContext(ctx).V(1).Info("skipping a warm PVC whose volume is attached to a node that is gone", "pvc", klog.KObj(pvc), "node", node)
			return true
		}
	}
	return false
}

// holders are the holder pods of fpvc's pool in namespace, from the
// cache, by the warm PVC each holds, those being deleted left out; and the
// holder requests (v1alpha1.HolderRequestAnnotationKey) the cached holders
// carry, those being deleted included, by pool.HolderRequestKey.
func (c *Checkouter) holders(ctx context.Context, fpvc, namespace string) (map[string]*corev1.Pod, map[string]bool, error) {
	var pods corev1.PodList
	if err := c.Cache.List(ctx, &pods, client.InNamespace(namespace), client.MatchingFields{HolderIndex: fpvc}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, nil, fmt.Errorf("listing holder pods: %w", err)
	}
	out, requests := make(map[string]*corev1.Pod, len(pods.Items)), make(map[string]bool, len(pods.Items))
	for i := range pods.Items {
		h := &pods.Items[i]
		claim := objects.HolderOf(h)
		if claim == "" {
			continue
		}
		if req := h.Annotations[v1alpha1.HolderRequestAnnotationKey]; req != "" {
			requests[pool.HolderRequestKey(claim, req)] = true
		}
		if h.DeletionTimestamp.IsZero() {
			out[claim] = h
		}
	}
	return out, requests, nil
}

// missReason says why a checkout found no warm PVC, from how many warm PVCs
// the last list held, how many of them the pod could take, and whether
// another admission took the ones tried first.
func missReason(warm, candidates int, lostRace bool) string {
	switch {
	case warm == 0:
		return "the pool has no warm PVC in the namespace"
	case candidates == 0:
		return "no warm PVC is Bound, from the current template, usable on a node the pod can run on and without a holder being created"
	case lostRace:
		return "concurrent admissions took every warm PVC tried"
	default:
		return "every warm PVC was taken moments ago by this replica"
	}
}

// podNodes are the nodes pod may run on as far as names go, from the cache:
// the ones it pins itself to (pool.PinnedNodeNames; one Get each, so that a
// DaemonSet's pod costs the same on any cluster), else all of them.
func (c *Checkouter) podNodes(ctx context.Context, pod *corev1.Pod) ([]*corev1.Node, error) {
	if names, ok := pool.PinnedNodeNames(pod); ok {
		out := make([]*corev1.Node, 0, len(names))
		for _, name := range names {
			n := &corev1.Node{}
			if err := c.Cache.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
				if apierrors.IsNotFound(err) {
					continue
				}
				return nil, err
			}
			out = append(out, n)
		}
		return out, nil
	}
	if nodes, ok := c.Nodes.List(); ok {
		return nodes, nil
	}
	var nodes corev1.NodeList
	// pool.Placement only reads them, so the cache's objects are listed as they are.
	if err := c.Cache.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	out := make([]*corev1.Node, len(nodes.Items))
	for i := range nodes.Items {
		out[i] = &nodes.Items[i]
	}
	return out, nil
}

// allNodes lists every cached node, as the cache holds them (to read,
// never to change).
func (c *Checkouter) allNodes(ctx context.Context) ([]*corev1.Node, error) {
	return c.podNodes(ctx, &corev1.Pod{})
}

// take marks the version of pvc read taken at now and says whether it was
// free: no checkout of this replica tried that version in the
// expectations.TTL before now. Every version tried stays taken, whether
// its write wins, loses a race, or fails: until this replica's cache
// catches up, it still shows the version the write replaced. A newer
// version is free. Still warm, it lost only a write that left it so (an
// annotation of the pool's, a binding of the PV controller's); a checkout
// of another replica made it no candidate.
func (c *Checkouter) take(pvc *corev1.PersistentVolumeClaim, now time.Time) bool {
	return c.taken.First(pvc.UID, pvc.ResourceVersion, struct{}{}, now)
}
