package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
)

// A mark is something the demo's informers saw of an object of the demo
// namespace, keyed "<what>/<name>", with an optional note (a container's
// termination message, a Job's name).
type mark struct {
	key, note string
}

// Keys of the marks.
func readyKey(pod string) string          { return "ready/" + pod }
func podGoneKey(pod string) string        { return "pod-gone/" + pod }
func drainJobKey(claim string) string     { return "drain-job/" + claim }
func drainSaidKey(claim string) string    { return "drain-said/" + claim }
func drainedKey(claim string) string      { return "drained/" + claim }
func claimGoneKey(claim string) string    { return "claim-gone/" + claim }
func claimDeletedKey(claim string) string { return "claim-deleted/" + claim }
func attachedKey(pv string) string        { return "attached/" + pv }

// marks is what obj shows in namespace ns; deleted says it was just
// deleted. A demo pod is ready when Running with its PodReady condition
// True, and gone once deleted; a drain Job (ComponentDrain) is seen for its
// claim, and drained when Complete; its pod's terminated container's
// message is what the drain said; a PVC is deleted when it has
// a deletionTimestamp, and gone once deleted; a PV is attached when a
// VolumeAttachment of it says so (they are cluster-scoped).
func marks(obj any, deleted bool, ns string) []mark {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	var out []mark
	switch o := obj.(type) {
	case *corev1.Pod:
		if o.Namespace != ns {
			return nil
		}
		drainOf := ""
		if o.Labels[v1alpha1.ComponentLabelKey] == v1alpha1.ComponentDrain {
			drainOf = o.Labels[v1alpha1.BindingNameLabelKey]
		}
		if drainOf == "" && o.Status.Phase == corev1.PodRunning && podReady(o) {
			out = append(out, mark{key: readyKey(o.Name)})
		}
		if drainOf == "" && deleted {
			out = append(out, mark{key: podGoneKey(o.Name)})
		}
		for _, s := range o.Status.ContainerStatuses {
			if t := s.State.Terminated; drainOf != "" && t != nil && t.Message != "" {
				out = append(out, mark{key: drainSaidKey(drainOf), note: t.Message})
			}
		}
	case *batchv1.Job:
		claim := o.Labels[v1alpha1.BindingNameLabelKey]
		if o.Namespace != ns || claim == "" || o.Labels[v1alpha1.ComponentLabelKey] != v1alpha1.ComponentDrain {
			return nil
		}
		out = append(out, mark{key: drainJobKey(claim), note: o.Name})
		for _, c := range o.Status.Conditions {
			if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
				out = append(out, mark{key: drainedKey(claim), note: o.Name})
			}
		}
	case *storagev1.VolumeAttachment:
		if pv := o.Spec.Source.PersistentVolumeName; pv != nil && o.Status.Attached && !deleted {
			out = append(out, mark{key: attachedKey(*pv), note: o.Spec.NodeName})
		}
	case *corev1.PersistentVolumeClaim:
		if o.Namespace != ns {
			return nil
		}
		if deleted || !o.DeletionTimestamp.IsZero() {
			out = append(out, mark{key: claimDeletedKey(o.Name)})
		}
		if deleted {
			out = append(out, mark{key: claimGoneKey(o.Name)})
		}
	}
	return out
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// timeline records when each mark was first seen, and its first note.
type timeline struct {
	ns    string
	mu    sync.Mutex
	at    map[string]time.Time
	notes map[string]string
	// changed is closed and replaced whenever a new mark is recorded.
	changed chan struct{}
}

func newTimeline(ns string) *timeline {
	return &timeline{ns: ns, at: map[string]time.Time{}, notes: map[string]string{}, changed: make(chan struct{})}
}

func (t *timeline) record(ms []mark) {
	if len(ms) == 0 {
		return
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	added := false
	for _, m := range ms {
		if _, seen := t.at[m.key]; !seen {
			t.at[m.key], t.notes[m.key] = now, m.note
			added = true
		}
	}
	if added {
		close(t.changed)
		t.changed = make(chan struct{})
	}
}

// handler feeds an informer's events to the timeline.
func (t *timeline) handler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { t.record(marks(obj, false, t.ns)) },
		UpdateFunc: func(_, obj any) { t.record(marks(obj, false, t.ns)) },
		DeleteFunc: func(obj any) { t.record(marks(obj, true, t.ns)) },
	}
}

// wait returns when key was first seen and its note, waiting for it.
func (t *timeline) wait(ctx context.Context, key string) (time.Time, string, error) {
	for {
		t.mu.Lock()
		at, ok := t.at[key]
		note, changed := t.notes[key], t.changed
		t.mu.Unlock()
		if ok {
			return at, note, nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, "", fmt.Errorf("waiting for %s: %w", key, ctx.Err())
		case <-changed:
		}
	}
}

// get is what was seen of key so far.
func (t *timeline) get(key string) (time.Time, string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	at, ok := t.at[key]
	return at, t.notes[key], ok
}
