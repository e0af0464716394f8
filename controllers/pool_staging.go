package controllers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/objects"
	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/checkout"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/pool"
)

// observeStaging reads, into o, whether f's pool stages its warm PVCs, its
// holder pods, and how many more holders each node may take: the holders
// of every pool on it, and the CSI driver's attach limit and attachments
// there (vas, every VolumeAttachment). All from the cache.
func (r *PoolReconciler) observeStaging(ctx context.Context, f *v1alpha1.FluentPVC, sc *storagev1.StorageClass, nodes []corev1.Node, csiNodes []storagev1.CSINode, vas []storagev1.VolumeAttachment, o *poolObserved) error {
	var all corev1.PodList
	if err := r.List(ctx, &all, client.MatchingLabels{v1alpha1.ComponentLabelKey: v1alpha1.ComponentHolder}, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing holder pods: %w", err)
	}
	perNode := map[string]int{}
	for i := range all.Items {
		h := &all.Items[i]
		if objects.HolderOf(h) == "" {
			continue
		}
		if h.Labels[v1alpha1.FluentPVCNameLabelKey] == f.Name {
			o.holders = append(o.holders, *h)
		}
		if h.DeletionTimestamp.IsZero() {
			perNode[holderNode(h)]++
		}
	}
	driver, staging, err := checkout.StagingOf(ctx, r, f, sc)
	if err != nil {
		return err
	}
	if o.staging = staging; !o.staging {
		return nil
	}
	attached := map[string]int{}
	for _, va := range vas {
		if va.Spec.Attacher == driver.Name {
			attached[va.Spec.NodeName]++
		}
	}
	limits := map[string]*int32{}
	for _, cn := range csiNodes {
		if i := slices.IndexFunc(cn.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == driver.Name }); i >= 0 {
			var limit *int32
			if a := cn.Spec.Drivers[i].Allocatable; a != nil {
				limit = a.Count
			}
			limits[cn.Name] = limit
		}
	}
	o.room = map[string]int{}
	for _, n := range pool.EligibleNodes(nodes, sc, csiNodes) {
		limit, registered := limits[n.Name]
		if !registered {
			continue // the kubelet there cannot stage the volume
		}
		o.room[n.Name] = pool.NodeRoom(r.opts.StagePerNode, perNode[n.Name], limit, attached[n.Name])
	}
	return nil
}

// observeStranded finds, among vas (every VolumeAttachment, as cached),
// the attachments of o's Bound warm PVCs' volumes to nodes that are not
// among nodes (the cache's), and records in o those seen for
// Options.StrandedAttachmentTimeout or longer whose node a live read
// proves gone.
func (r *PoolReconciler) observeStranded(ctx context.Context, nodes []corev1.Node, vas []storagev1.VolumeAttachment, o *poolObserved) {
	warm := map[string]bool{}
	for _, c := range o.warm {
		if c.Status.Phase == corev1.ClaimBound && c.Spec.VolumeName != "" {
			warm[c.Spec.VolumeName] = true
		}
	}
	known := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		known[n.Name] = true
	}
	// Timings are kept for every attachment to a node the cache lacks, of
	// any pool: one whose node is back (or that is gone) starts afresh.
	away := make(map[types.UID]bool, len(vas))
	var gone []pool.GoneAttachment
	for _, va := range vas {
		if known[va.Spec.NodeName] {
			continue
		}
		away[va.UID] = true
		if pv := ptr.Deref(va.Spec.Source.PersistentVolumeName, ""); warm[pv] {
			gone = append(gone, pool.GoneAttachment{UID: va.UID, Volume: pv, Node: va.Spec.NodeName})
		}
	}
	due, recheck := r.strandings.Due(gone, func(uid types.UID) bool { return away[uid] }, r.clock.Now(), r.opts.StrandedAttachmentTimeout)
	o.strandedRecheck = recheck
	proved := map[string]bool{}
	for _, g := range due {
		if _, checked := proved[g.Node]; !checked {
			err := r.apiReader.Get(ctx, client.ObjectKey{Name: g.Node}, &corev1.Node{})
			if err != nil && !apierrors.IsNotFound(err) {
				// Not proved gone: the next reconcile reads again.
				ctrl.LoggerFrom(ctx).Error(err, "reading a node that a warm PVC's volume is attached to", "node", g.Node)
			}
			proved[g.Node] = apierrors.IsNotFound(err)
		}
		if !proved[g.Node] {
			continue // the cache is behind: the node is there
		}
		if o.stranded == nil {
			o.stranded = map[string]string{}
		}
		o.stranded[g.Volume] = g.Node
	}
}

// strandedMessage tells which warm PVCs (deleted, "namespace/name") the
// pool deleted to replace them, and on which gone node (volumes, by
// volume name) their volume stays attached, for after or longer; warm are
// the warm PVCs, for their volumes.
func strandedMessage(deleted []string, volumes map[string]string, warm []corev1.PersistentVolumeClaim, after time.Duration) string {
	volumeOf := make(map[string]string, len(warm))
	for _, c := range warm {
		volumeOf[c.Namespace+"/"+c.Name] = c.Spec.VolumeName
	}
	parts := make([]string, 0, len(deleted))
	for _, key := range deleted {
		parts = append(parts, fmt.Sprintf("%s (on node %s)", key, volumes[volumeOf[key]]))
	}
	return fmt.Sprintf("deleted warm PVCs, for the pool to make new ones, whose volume stays attached to a node that is gone, for %s or longer: %s; the attach/detach controller or the CSI attacher cannot detach them",
		after, strings.Join(parts, ", "))
}

// holderRejected is a holder pod the API server refused, which a person
// must look into: a policy, a quota, a missing PriorityClass.
type holderRejected struct{ error }

func (e holderRejected) Unwrap() error { return e.error }

// rejectedHolders are the holderRejected errors among err's (errors.Join).
func rejectedHolders(err error) []string {
	var out []string
	var walk func(error)
	walk = func(err error) {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		var hr holderRejected
		if errors.As(err, &hr) {
			out = append(out, hr.Error())
		}
	}
	if err != nil {
		walk(err)
	}
	return out
}

// unschedulableHolder says whether the scheduler found no room for h.
func unschedulableHolder(h *corev1.Pod) bool {
	_, ok := pool.Unschedulable(h)
	return ok
}

// holderNode is the node holder pod h runs on, or else the one its
// required node affinity names.
func holderNode(h *corev1.Pod) string {
	if names, ok := pool.PinnedNodeNames(h); ok && len(names) == 1 {
		return names[0]
	}
	return ""
}

// stageInput is namespace ns's part of o for pool.PlanStaging, given the
// warm PVCs that namespace's plan keeps (not deleted, current template,
// Bound, affinity recorded), at now. A warm PVC whose holder request is
// pending (claim.HolderPending: no holder carrying it cached yet) is left
// out: its holder may still be created, and a second request would lift
// the first one's hold on checkouts. pending counts them.
func stageInput(o poolObserved, ns, hash string, deleted []string, demand []pool.DemandNode, now time.Time) (in pool.StageInput, pending int) {
	in = pool.StageInput{
		On:       o.staging,
		Eligible: func(node string) bool { _, ok := o.room[node]; return ok },
		Room:     o.room,
		Demand:   demand,
	}
	requests := map[string]bool{}
	for i := range o.holders {
		h := &o.holders[i]
		if h.Namespace != ns {
			continue
		}
		in.Holders = append(in.Holders, pool.Holder{Name: h.Name, Claim: objects.HolderOf(h), Node: holderNode(h),
			Deleting: !h.DeletionTimestamp.IsZero(), Unschedulable: unschedulableHolder(h)})
		requests[pool.HolderRequestKey(objects.HolderOf(h), h.Annotations[v1alpha1.HolderRequestAnnotationKey])] = true
	}
	for i := range o.warm {
		c := &o.warm[i]
		if c.Namespace != ns || c.Labels[v1alpha1.TemplateHashLabelKey] != hash || c.Status.Phase != corev1.ClaimBound ||
			!c.DeletionTimestamp.IsZero() || slices.Contains(deleted, c.Name) {
			continue
		}
		affinity, ok := pool.WarmAffinity(c)
		if !ok {
			continue
		}
		m, err := o.affinities.Parse(affinity)
		if err != nil {
			continue
		}
		if claim.HolderPending(c, func(req string) bool { return requests[pool.HolderRequestKey(c.Name, req)] }, now) {
			pending++
			continue
		}
		in.Warm = append(in.Warm, pool.StageClaim{
			Name: c.Name,
			Node: c.Annotations[v1alpha1.SelectedNodeAnnotationKey],
			Reaches: func(node string) bool {
				n, ok := o.nodes[node]
				return ok && m.Match(n)
			},
		})
	}
	return in, pending
}

// stagedPerNode counts, per node, the warm PVCs of o's pool that a running
// holder stages, those reserved ahead of their pods included, and per
// namespace.
func stagedPerNode(o poolObserved) (perNode, perNamespace map[string]int) {
	warm := map[string]bool{}
	for i := range o.warm {
		if o.warm[i].DeletionTimestamp.IsZero() {
			warm[o.warm[i].Namespace+"/"+o.warm[i].Name] = true
		}
	}
	for i := range o.claimed {
		if _, _, reserved := claim.Reservation(&o.claimed[i]); reserved && o.claimed[i].DeletionTimestamp.IsZero() {
			warm[o.claimed[i].Namespace+"/"+o.claimed[i].Name] = true
		}
	}
	perNode, perNamespace = map[string]int{}, map[string]int{}
	for i := range o.holders {
		h := &o.holders[i]
		if pool.HolderStaged(h) && warm[h.Namespace+"/"+objects.HolderOf(h)] {
			perNode[h.Spec.NodeName]++
			perNamespace[h.Namespace]++
		}
	}
	return perNode, perNamespace
}

// stagingOps are the API calls of namespace plan np's staging: create the
// holders it plans, and delete those it removes.
func (r *PoolReconciler) stagingOps(ctx context.Context, f *v1alpha1.FluentPVC, np namespacePlan, claims map[string]*corev1.PersistentVolumeClaim, o poolObserved) []func() error {
	var ops []func() error
	holder := func(name string) *corev1.Pod {
		i := slices.IndexFunc(o.holders, func(h corev1.Pod) bool { return h.Namespace == np.namespace && h.Name == name })
		if i < 0 {
			return nil
		}
		return &o.holders[i]
	}
	// A PVC moved off a node without room for its holder: the old holder
	// goes first, in the same call, since the new one takes its name.
	moving := map[string]bool{}
	for _, st := range np.stage.Create {
		moving[objects.HolderName(st.Claim)] = true
	}
	remove := func(name string) error {
		old := holder(name)
		if old == nil {
			return nil
		}
		err := r.Delete(ctx, old, client.Preconditions{UID: &old.UID})
		if client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting holder %s/%s: %w", np.namespace, name, err)
		}
		if err == nil {
			holdersRemoved.WithLabelValues(f.Name, pool.HolderUnstaged).Inc()
		}
		if c := claims[objects.HolderOf(old)]; c != nil {
			return withdrawHolderRequest(ctx, r, old, c, r.clock.Now())
		}
		return nil
	}
	for _, st := range np.stage.Create {
		c := claims[st.Claim]
		if c == nil {
			continue
		}
		ops = append(ops, func() error {
			if slices.Contains(np.stage.Delete, objects.HolderName(st.Claim)) {
				if err := remove(objects.HolderName(st.Claim)); err != nil {
					return err
				}
			}
			// The request first, conditioned on the version the plan read: if
			// the PVC was checked out since, it fails and no holder is made.
			w, err := claim.RequestHolder(c, r.clock.Now())
			if err != nil {
				return nil // no longer warm in the cache either
			}
			if err := claim.Execute(ctx, r, w); err != nil {
				if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
					return nil // the PVC's event brings the next plan
				}
				return err
			}
			h := objects.HolderPod(f.Name, w.Object, st.Node, r.opts.BinderImage, r.opts.HolderPriorityClass)
			err = r.Create(ctx, h)
			if err == nil {
				return nil
			}
			// Judged before the request is withdrawn: the live PVC still
			// records it.
			seenCheckout := apierrors.IsForbidden(err) && !r.stillWarm(ctx, c, h)
			var werr error
			if notCreated(err) {
				// No holder carries the request: withdrawn, it keeps the PVC
				// from no checkout (and a holder of that name made earlier
				// stays the PVC's holder).
				werr = withdrawHolderRequest(ctx, r, h, w.Object, r.clock.Now())
			}
			switch {
			case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) || apierrors.IsAlreadyExists(err):
				return werr
			case seenCheckout:
				return werr // the mount webhook saw the checkout the cache had not
			}
			err = fmt.Errorf("creating the holder of %s/%s on node %s: %w", np.namespace, st.Claim, st.Node, err)
			if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
				return errors.Join(holderRejected{err}, werr)
			}
			return errors.Join(err, werr)
		})
	}
	for _, name := range np.stage.Delete {
		if moving[name] {
			continue // removed by the create above
		}
		ops = append(ops, func() error { return remove(name) })
	}
	return ops
}

// withdrawHolderRequest withdraws the holder request of warm PVC pvc (as
// read) that holder h carries, while it is younger than its TTL at now,
// once h is known not to stay: its create was refused, or it was removed.
// A request no holder carries keeps the PVC from checkouts until its TTL
// for nothing. A PVC written since it was read keeps its request.
func withdrawHolderRequest(ctx context.Context, c client.Writer, h *corev1.Pod, pvc *corev1.PersistentVolumeClaim, now time.Time) error {
	if !claim.CarriesHolderRequest(h, pvc, now) {
		return nil
	}
	w, err := claim.WithdrawHolderRequest(pvc)
	if err != nil {
		return nil // no longer warm: no request to withdraw
	}
	if err := claim.Execute(ctx, c, w); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
		return err
	}
	return nil
}

// notCreated says whether err, from a pod's create call, proves the pod
// was not stored: the API server refused the request itself (400, 403,
// 404, 409, 422, 429), or could not call an admission webhook, which it
// does before storing anything. Any other error (a 500 from storage, a
// 502 or 503 from a proxy, a timeout, no answer) proves nothing.
func notCreated(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	switch status.Status().Code {
	case http.StatusBadRequest, http.StatusForbidden, http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity, http.StatusTooManyRequests:
		return true
	case http.StatusInternalServerError:
		return strings.Contains(status.Status().Message, "failed calling webhook")
	}
	return false
}

// stillWarm reads c live after the API server refused its holder h: the
// mount webhook refuses the holder of a PVC checked out since the cache
// saw it, or one whose request another replica's has replaced, which is no
// rejection for a person to look into. A failed read counts as warm, so
// the refusal is reported.
func (r *PoolReconciler) stillWarm(ctx context.Context, c *corev1.PersistentVolumeClaim, h *corev1.Pod) bool {
	live := &corev1.PersistentVolumeClaim{}
	switch err := r.apiReader.Get(ctx, client.ObjectKeyFromObject(c), live); {
	case apierrors.IsNotFound(err):
		return false
	case err != nil:
		return true
	}
	return live.UID == c.UID && live.DeletionTimestamp == nil && claim.StateOf(live) == claim.Warm &&
		live.Annotations[v1alpha1.HolderRequestAnnotationKey] == h.Annotations[v1alpha1.HolderRequestAnnotationKey]
}
