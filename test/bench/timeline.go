package main

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
)

// selectedNodeAnnotationKey is set on a WaitForFirstConsumer claim once a
// node is chosen for it; the provisioner starts then.
const selectedNodeAnnotationKey = "volume.kubernetes.io/selected-node"

// pvcTimes are the first times the bench's informer saw a PVC created, with
// a selected node, Bound, and with its zones recorded by the operator.
type pvcTimes struct {
	Namespace              string
	Warm                   bool // created as a warm PVC
	Seen, Selected, Bound  time.Time
	ZonesRecorded, Deleted time.Time
}

// pvcTimeline records pvcTimes of every PVC from informer events.
type pvcTimeline struct {
	mu  sync.Mutex
	pvc map[types.UID]*pvcTimes
}

func newPVCTimeline() *pvcTimeline { return &pvcTimeline{pvc: map[types.UID]*pvcTimes{}} }

func (t *pvcTimeline) observe(obj any, deleted bool) {
	now := time.Now()
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	c, ok := obj.(*corev1.PersistentVolumeClaim)
	if !ok {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.pvc[c.UID]
	if p == nil {
		p = &pvcTimes{Namespace: c.Namespace, Seen: now, Warm: c.Labels[v1alpha1.ClaimRoleLabelKey] == v1alpha1.ClaimRoleWarm}
		t.pvc[c.UID] = p
	}
	first := func(at *time.Time, cond bool) {
		if cond && at.IsZero() {
			*at = now
		}
	}
	first(&p.Selected, c.Annotations[selectedNodeAnnotationKey] != "")
	first(&p.Bound, c.Status.Phase == corev1.ClaimBound)
	_, zones := c.Annotations[v1alpha1.ZonesAnnotationKey]
	first(&p.ZonesRecorded, zones)
	first(&p.Deleted, deleted || c.DeletionTimestamp != nil)
}

func (t *pvcTimeline) handler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { t.observe(obj, false) },
		UpdateFunc: func(_, obj any) { t.observe(obj, false) },
		DeleteFunc: func(obj any) { t.observe(obj, true) },
	}
}

// warmSince are the warm PVCs of ns first seen at or after since.
func (t *pvcTimeline) warmSince(ns string, since time.Time) []pvcTimes {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []pvcTimes
	for _, p := range t.pvc {
		if p.Namespace == ns && p.Warm && !p.Seen.Before(since) {
			out = append(out, *p)
		}
	}
	return out
}

// refillBreakdown is where a refill's time goes, over the warm PVCs created
// for it: p50 and max of each step.
type refillBreakdown struct {
	PVCs int `json:"pvcs"`
	// Created is from the burst's start to the PVC's creation.
	Created summary `json:"created"`
	// ToSelected is from creation to a selected node (WaitForFirstConsumer
	// classes only); ToBound from creation to Bound; ToZones from Bound to
	// the operator recording the PVC's zones (from then it is a candidate).
	ToSelected summary `json:"toSelected"`
	ToBound    summary `json:"toBound"`
	ToZones    summary `json:"toZones"`
}

func breakdown(pvcs []pvcTimes, start time.Time) refillBreakdown {
	var created, selected, bound, zones []time.Duration
	for _, p := range pvcs {
		created = append(created, p.Seen.Sub(start))
		if !p.Selected.IsZero() {
			selected = append(selected, p.Selected.Sub(p.Seen))
		}
		if !p.Bound.IsZero() {
			bound = append(bound, p.Bound.Sub(p.Seen))
			if !p.ZonesRecorded.IsZero() {
				zones = append(zones, max(0, p.ZonesRecorded.Sub(p.Bound)))
			}
		}
	}
	return refillBreakdown{PVCs: len(pvcs), Created: summarize(created), ToSelected: summarize(selected), ToBound: summarize(bound), ToZones: summarize(zones)}
}

// attachTimes are the first times the bench's informer saw a
// VolumeAttachment, saw it attached, and saw it deleted.
type attachTimes struct {
	PV, Node                string
	Seen, Attached, Deleted time.Time
}

// attachTimeline records attachTimes of every VolumeAttachment from
// informer events (the CSI tier's). A volume attached again after a
// detach has a new VolumeAttachment: they are told apart by UID.
type attachTimeline struct {
	mu sync.Mutex
	va map[types.UID]*attachTimes
}

func newAttachTimeline() *attachTimeline { return &attachTimeline{va: map[types.UID]*attachTimes{}} }

func (t *attachTimeline) observe(obj any, deleted bool) {
	now := time.Now()
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	a, ok := obj.(*storagev1.VolumeAttachment)
	if !ok || a.Spec.Source.PersistentVolumeName == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.va[a.UID]
	if p == nil {
		p = &attachTimes{PV: *a.Spec.Source.PersistentVolumeName, Node: a.Spec.NodeName, Seen: now}
		t.va[a.UID] = p
	}
	if a.Status.Attached && p.Attached.IsZero() {
		p.Attached = now
	}
	if deleted && p.Deleted.IsZero() {
		p.Deleted = now
	}
}

func (t *attachTimeline) handler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { t.observe(obj, false) },
		UpdateFunc: func(_, obj any) { t.observe(obj, false) },
		DeleteFunc: func(obj any) { t.observe(obj, true) },
	}
}

// first is the earliest VolumeAttachment of PV pv to node first seen at
// or after since.
func (t *attachTimeline) first(pv, node string, since time.Time) (attachTimes, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var best *attachTimes
	for _, a := range t.va {
		if a.PV == pv && a.Node == node && !a.Seen.Before(since) && (best == nil || a.Seen.Before(best.Seen)) {
			best = a
		}
	}
	if best == nil {
		return attachTimes{}, false
	}
	return *best, true
}

// attachedAt is the VolumeAttachment of PV pv that was attached, and not
// yet deleted, at time at, on node if onNode, else on another node.
func (t *attachTimeline) attachedAt(pv, node string, onNode bool, at time.Time) (attachTimes, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, a := range t.va {
		if a.PV == pv && (a.Node == node) == onNode && !a.Attached.IsZero() && !a.Attached.After(at) && (a.Deleted.IsZero() || a.Deleted.After(at)) {
			return *a, true
		}
	}
	return attachTimes{}, false
}
