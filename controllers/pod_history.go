package controllers

import (
	"context"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// historyWatchSeconds bounds the watch that replays a namespace's pod
// history. The API server sends a bookmark of its current resourceVersion
// 2 s before a watch's deadline, and the replayed events come before it.
const historyWatchSeconds = 4

// podHistory answers, from the API server's watch history, whether a pod
// was created with a claim.
type podHistory struct {
	watcher client.WithWatch
}

// noPodSince is true on proof that no pod that mounts claim was created,
// changed or deleted in namespace after resourceVersion since and up to
// resourceVersion listed (that of a live list that found none): a watch
// from since replays every such event before a bookmark at or past
// listed. Anything else is no proof, and why says so: no watcher, no
// since, a history the API server no longer keeps ("too old resource
// version"), a resourceVersion that is not a number (kube-apiserver's are
// etcd revisions, which are), or no bookmark before the watch ended.
func (h podHistory) noPodSince(ctx context.Context, namespace, claim, since, listed string) (proof bool, why string, err error) {
	if h.watcher == nil {
		return false, "no watch of pods", nil
	}
	if since == "" {
		return false, "the claim records no resourceVersion from before it was handed out", nil
	}
	until, err := strconv.ParseUint(listed, 10, 64)
	if err != nil {
		return false, fmt.Sprintf("resourceVersion %q is not a number", listed), nil
	}
	w, err := h.watcher.Watch(ctx, &corev1.PodList{}, client.InNamespace(namespace), &client.ListOptions{Raw: &metav1.ListOptions{
		ResourceVersion: since, AllowWatchBookmarks: true, TimeoutSeconds: ptr.To[int64](historyWatchSeconds),
	}})
	if err != nil {
		return false, fmt.Sprintf("watching pods from resourceVersion %s: %v", since, err), nil
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		switch ev.Type {
		case watch.Error:
			return false, fmt.Sprintf("the pods' history from resourceVersion %s: %v", since, ev.Object), nil
		case watch.Added, watch.Modified, watch.Deleted:
			if p, ok := ev.Object.(*corev1.Pod); ok && claimantPod(p, claim) {
				return false, fmt.Sprintf("pod %s (uid %s) was created with the claim", p.Name, p.UID), nil
			}
		}
		if p, ok := ev.Object.(*corev1.Pod); ok && atLeast(p.ResourceVersion, until) {
			return true, "", nil
		}
	}
	return false, "the watch of the pods' history ended before it reached the live list", ctx.Err()
}

// atLeast is true when resourceVersion rv is a number no lower than n.
func atLeast(rv string, n uint64) bool {
	v, err := strconv.ParseUint(rv, 10, 64)
	return err == nil && v >= n
}
