package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/pool"
	"github.com/st-tech/fluent-pvc-operator/test/cluster"
	"github.com/st-tech/fluent-pvc-operator/webhook"
)

// The CSI tier: the real node with test/csidriver's storage
// (cluster.StartCSI), a cloud disk's delays, and the real kubelet staging
// and publishing through the driver's node plugin.

// csiOptions are the CSI driver's delays on the CSI tier.
var csiOptions = cluster.CSIOptions{CreateDelay: 5 * time.Second, AttachDelay: 8 * time.Second, FormatDelay: 2 * time.Second}

// csiModes are the start-up modes measured on the CSI tier.
var csiModes = []string{modePlain, modeEphemeral, modeMiss, modeHit, modeOwnClaim, modeUnstaged, modeMoved}

// Mode g's placement: its pool is staged on movedNode, a kwok node in the
// real node's zone (so that its volumes can attach to the real node too),
// while the real node is tainted movedTaintKey, which only g's pods
// tolerate; they must run on the real node.
const movedTaintKey = "bench.fluent-pvc-operator/no-holders"

var (
	movedNode  = cluster.NodeName(cluster.DefaultZones[0], 0)
	movedTaint = corev1.Taint{Key: movedTaintKey, Value: "g", Effect: corev1.TaintEffectNoSchedule}
	fakeTaint  = corev1.Taint{Key: cluster.FakeNodeTaintKey, Value: "fake", Effect: corev1.TaintEffectNoSchedule}
)

// movedPod is p that must run on the real node, by a label selector (not
// a matchFields term, so that the operator does not take it as pinned and
// hands it a PVC staged elsewhere), tolerating movedTaint.
func movedPod(p *corev1.Pod) *corev1.Pod {
	if p.Spec.NodeSelector == nil {
		p.Spec.NodeSelector = map[string]string{}
	}
	p.Spec.NodeSelector[corev1.LabelHostname] = cluster.RealNodeName
	p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: movedTaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
	return p
}

// csiDelays are the driver's delays, in seconds, as the results show them.
type csiDelays struct {
	Create float64 `json:"createSeconds"`
	Attach float64 `json:"attachSeconds"`
	Format float64 `json:"formatSeconds"`
}

func delaysOf(o cluster.CSIOptions) *csiDelays {
	return &csiDelays{Create: o.CreateDelay.Seconds(), Attach: o.AttachDelay.Seconds(), Format: o.FormatDelay.Seconds()}
}

// waitCSINode waits until the real node's kubelet has registered the CSI
// driver's node plugin: until then the provisioner cannot place a volume
// on it. slots is how many volumes of the driver the node takes (its
// CSINode's allocatable count; 0: no limit).
func waitCSINode(ctx context.Context, kc *cluster.Cluster) (slots int, err error) {
	err = wait.PollUntilContextTimeout(ctx, poll, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := kc.Clientset.StorageV1().CSINodes().Get(ctx, cluster.RealNodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, d := range n.Spec.Drivers {
			if d.Name == cluster.CSIDriverName {
				if d.Allocatable != nil && d.Allocatable.Count != nil {
					slots = int(*d.Allocatable.Count)
				}
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return 0, fmt.Errorf("waiting for the kubelet of %s to register the CSI node plugin (see %s): %w", cluster.RealNodeName, kc.CSINodeLog(), err)
	}
	return slots, nil
}

// waitQuiet waits until the only VolumeAttachments left are attached ones
// of warm PVCs' volumes, which their holders keep attached on purpose: the
// detaches and attaches of a run are done before the next starts.
func (e *env) waitQuiet(ctx context.Context) error {
	left := 0
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, drainTimeout, true, func(ctx context.Context) (bool, error) {
		pvcs, err := e.pooled(ctx)
		if err != nil {
			return false, err
		}
		var vas storagev1.VolumeAttachmentList
		if err := e.cache.List(ctx, &vas); err != nil {
			return false, err
		}
		left = busyAttachments(vas.Items, pvcs)
		return left == 0, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the volumes to detach (%d VolumeAttachments left that no holder keeps): %w", left, err)
	}
	return nil
}

// waitHoldersLeft waits until no holder pod is being deleted: the holder
// the last staged hit sent away has left its node, its sandbox, network
// and volume torn down (the kubelet deletes a pod once they are). Before
// each of d's pods, outside its time, so that no teardown left by the
// last pod runs into the next one's start, which a's pods do not have.
func (e *env) waitHoldersLeft(ctx context.Context) error {
	leaving := 0
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, drainTimeout, true, func(ctx context.Context) (bool, error) {
		var pods corev1.PodList
		if err := e.cl.List(ctx, &pods, client.MatchingLabels{v1alpha1.ComponentLabelKey: v1alpha1.ComponentHolder}); err != nil {
			return false, err
		}
		leaving = 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				leaving++
			}
		}
		return leaving == 0, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %d holders to leave: %w", leaving, err)
	}
	return nil
}

// busyAttachments counts the VolumeAttachments that are being made or
// deleted, or whose volume is not a warm PVC's of warm.
func busyAttachments(vas []storagev1.VolumeAttachment, warm []corev1.PersistentVolumeClaim) int {
	kept := map[string]bool{}
	for _, c := range warm {
		if c.DeletionTimestamp == nil && c.Spec.VolumeName != "" {
			kept[c.Spec.VolumeName] = true
		}
	}
	busy := 0
	for _, va := range vas {
		pv := va.Spec.Source.PersistentVolumeName
		if va.DeletionTimestamp != nil || !va.Status.Attached || pv == nil || !kept[*pv] {
			busy++
		}
	}
	return busy
}

// pooled are the PVCs of the warm pools that opts select, from the cache:
// warm, or reserved ahead of their pods by the operator.
func (e *env) pooled(ctx context.Context, opts ...client.ListOption) ([]corev1.PersistentVolumeClaim, error) {
	var pvcs corev1.PersistentVolumeClaimList
	if err := e.cache.List(ctx, &pvcs, opts...); err != nil {
		return nil, err
	}
	return slices.DeleteFunc(pvcs.Items, func(c corev1.PersistentVolumeClaim) bool {
		_, _, reserved := claim.Reservation(&c)
		return !reserved && claim.StateOf(&c) != claim.Warm
	}), nil
}

// waitPoolStaged waits until FluentPVC name's pool in ns has want warm PVCs,
// all staged (its status.pool[].staged) and their volumes attached to node.
// The operator plans the pool again by itself when a node, an attachment or
// a holder changes, so the bench only waits.
func (e *env) waitPoolStaged(ctx context.Context, name, ns string, want int, node string) error {
	var state string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, drainTimeout, true, func(ctx context.Context) (bool, error) {
		var f v1alpha1.FluentPVC
		if err := e.cache.Get(ctx, client.ObjectKey{Name: name}, &f); err != nil {
			// Not yet in the bench's cache, just created.
			return false, client.IgnoreNotFound(err)
		}
		pvcs, err := e.pooled(ctx, client.InNamespace(ns))
		if err != nil {
			return false, err
		}
		var vas storagev1.VolumeAttachmentList
		if err := e.cache.List(ctx, &vas); err != nil {
			return false, err
		}
		staged := int32(0)
		for _, p := range f.Status.Pool {
			if p.Namespace == ns {
				staged = p.Staged
			}
		}
		warm, attached := attachedTo(vas.Items, pvcs, node)
		state = fmt.Sprintf("%d staged, %d of %d warm PVCs attached to %s, %d VolumeAttachments", staged, attached, warm, node, len(vas.Items))
		return int(staged) == want && warm == want && attached == want, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the pool of FluentPVC %s in %s to be staged on %s (%s): %w", name, ns, node, state, err)
	}
	return nil
}

// attachedTo counts the PVCs of pvcs not being deleted, and those of them
// whose volume is attached to node.
func attachedTo(vas []storagev1.VolumeAttachment, pvcs []corev1.PersistentVolumeClaim, node string) (live, attached int) {
	on := map[string]bool{}
	for _, va := range vas {
		if pv := va.Spec.Source.PersistentVolumeName; pv != nil && va.Spec.NodeName == node && va.Status.Attached && va.DeletionTimestamp == nil {
			on[*pv] = true
		}
	}
	for _, c := range pvcs {
		if c.DeletionTimestamp != nil {
			continue
		}
		live++
		if c.Spec.VolumeName != "" && on[c.Spec.VolumeName] {
			attached++
		}
	}
	return live, attached
}

// setTaint adds taint t to node name (present) or removes it.
func (e *env) setTaint(ctx context.Context, name string, t corev1.Taint, present bool) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var n corev1.Node
		if err := e.cl.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
			return err
		}
		i := slices.IndexFunc(n.Spec.Taints, func(x corev1.Taint) bool { return x.Key == t.Key && x.Effect == t.Effect })
		switch {
		case present && i < 0:
			n.Spec.Taints = append(n.Spec.Taints, t)
		case !present && i >= 0:
			n.Spec.Taints = slices.Delete(n.Spec.Taints, i, i+1)
		default:
			return nil
		}
		return e.cl.Update(ctx, &n)
	})
	if err != nil {
		return fmt.Errorf("setting taint %s=%s:%s on node %s to %v: %w", t.Key, t.Value, t.Effect, name, present, err)
	}
	return nil
}

// stageElsewhere taints the real node with movedTaint and lifts
// movedNode's fakeTaint, so that new warm PVCs are made for movedNode and
// staged there. restore undoes it (the real node's taint last, so that no
// pod meanwhile finds both nodes open); it may be called more than once.
func (e *env) stageElsewhere(ctx context.Context) (restore func() error, err error) {
	done := false
	restore = func() error {
		if done {
			return nil
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := e.setTaint(ctx, movedNode, fakeTaint, true); err != nil {
			return err
		}
		if err := e.setTaint(ctx, cluster.RealNodeName, movedTaint, false); err != nil {
			return err
		}
		done = true
		return nil
	}
	if err := e.setTaint(ctx, cluster.RealNodeName, movedTaint, true); err != nil {
		return restore, err
	}
	return restore, e.setTaint(ctx, movedNode, fakeTaint, false)
}

// setPoolSize sets FluentPVC name's spec.pool.size.
func (e *env) setPoolSize(ctx context.Context, name string, size int32) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var f v1alpha1.FluentPVC
		if err := e.cl.Get(ctx, client.ObjectKey{Name: name}, &f); err != nil {
			return err
		}
		f.Spec.Pool.Size = size
		return e.cl.Update(ctx, &f)
	})
}

// dropPools deletes the FluentPVCs of d and f (if not yet gone) and waits
// until their warm PVCs are gone and their volumes detached.
func (e *env) dropPools(ctx context.Context) error {
	for _, f := range []string{fpvcHit, fpvcUnstaged} {
		if err := e.deleteFluentPVC(ctx, f); err != nil {
			return err
		}
	}
	if err := e.waitNoPVCs(ctx, startupNamespace(modeHit, false), startupNamespace(modeUnstaged, false)); err != nil {
		return err
	}
	return e.waitQuiet(ctx)
}

// measureMoved runs mode g, after every other mode: the pools of d and f
// are gone (dropPools), so that no other volume is attached, staged or
// held meanwhile; the
// real node is tainted and movedNode opened (stageElsewhere), so that g's
// pool of n is made for movedNode and staged there; then n pods that must
// run on the real node (movedPod) each take a PVC staged on movedNode:
// its holder leaves, the volume detaches from movedNode and attaches to
// the real node. Before each pod the pool is staged on movedNode again,
// so that each finds what the first found. Then the pool shrinks to 0,
// the taints are restored, and the pods are deleted and their claims
// drained, on the real node as in the other modes.
func (e *env) measureMoved(ctx context.Context, n int) (run startupRun, err error) {
	run = startupRun{Mode: modeMoved}
	ns := startupNamespace(modeMoved, false)
	before := e.readHolderCounts(ctx)
	if err := e.dropPools(ctx); err != nil {
		return run, err
	}
	restore, err := e.stageElsewhere(ctx)
	defer func() { err = errors.Join(err, restore()) }()
	if err != nil {
		return run, err
	}
	start := time.Now()
	if err := e.createFluentPVC(ctx, fpvcMoved, int32(n), ns); err != nil {
		return run, err
	}
	staged := func(ctx context.Context) error { return e.waitPoolStaged(ctx, fpvcMoved, ns, n, movedNode) }
	if err := staged(ctx); err != nil {
		return run, err
	}
	e.progress("pool of mode g staged on %s in %.1fs", movedNode, time.Since(start).Seconds())
	if err := e.settle(ctx); err != nil {
		return run, err
	}
	run, err = e.measureStartupEach(ctx, modeMoved, false, n, staged)
	if err != nil {
		return run, err
	}
	if err := e.setPoolSize(ctx, fpvcMoved, 0); err != nil {
		return run, fmt.Errorf("shrinking the pool of FluentPVC %s: %w", fpvcMoved, err)
	}
	if err := restore(); err != nil {
		return run, err
	}
	if err := e.cleanupStartup(ctx, ns, modeMoved, n); err != nil {
		return run, err
	}
	// Read before the FluentPVC goes: the operator removes its series then.
	run.addCounts(before, e.readHolderCounts(ctx))
	if err := e.deleteFluentPVC(ctx, fpvcMoved); err != nil {
		return run, err
	}
	return run, e.waitQuiet(ctx)
}

// holderCounts are the operator's counters of hits and holders by how a
// volume met its pod and why a holder left, each by FluentPVC.
type holderCounts struct {
	hits, removed map[string]map[string]float64
}

// readHolderCounts scrapes holderCounts; nil if not read (or off the CSI
// tier, where nothing is staged).
func (e *env) readHolderCounts(ctx context.Context) *holderCounts {
	if !e.csi {
		return nil
	}
	s, err := e.operatorScrape(ctx)
	if err != nil {
		e.progress("reading the operator's staged hits: %v", err)
		return nil
	}
	return &holderCounts{
		hits:    byFluentPVC(s, "fluentpvc_pool_staged_hits_total", "served"),
		removed: byFluentPVC(s, "fluentpvc_pool_holders_removed_total", "reason"),
	}
}

// byFluentPVC sums the counter family name by its fluentpvc label, then by
// label by.
func byFluentPVC(s scrape, name, by string) map[string]map[string]float64 {
	out := map[string]map[string]float64{}
	for _, m := range s[name].GetMetric() {
		fpvc := label(m, "fluentpvc")
		if out[fpvc] == nil {
			out[fpvc] = map[string]float64{}
		}
		out[fpvc][label(m, by)] += m.GetCounter().GetValue()
	}
	return out
}

// addCounts sets run's StagedHits and HoldersRemoved to what its FluentPVC
// counted from before to after; it leaves them nil if either was not read
// or the mode has no FluentPVC.
func (run *startupRun) addCounts(before, after *holderCounts) {
	fpvc := poolOf(run.Mode)
	if before == nil || after == nil || fpvc == "" {
		return
	}
	// delta is a[fpvc]-b[fpvc], by label value: those of always, then
	// any other that changed.
	delta := func(b, a map[string]map[string]float64, always ...string) map[string]int {
		out := map[string]int{}
		for _, k := range always {
			out[k] = 0
		}
		for k, v := range a[fpvc] {
			if d := int(math.Round(v - b[fpvc][k])); d != 0 {
				out[k] = d
			}
		}
		return out
	}
	// The webhook counts hits staged or not at admission; where a staged
	// one went, the holder's removal tells (served or moved).
	hits := delta(before.hits, after.hits, webhook.HitUnstaged)
	run.HoldersRemoved = delta(before.removed, after.removed)
	run.StagedHits = map[string]int{
		pool.HolderServed:   run.HoldersRemoved[pool.HolderServed],
		pool.HolderMoved:    run.HoldersRemoved[pool.HolderMoved],
		webhook.HitUnstaged: hits[webhook.HitUnstaged],
	}
}

// Messages of the node plugin's log lines that time its stages and
// publishes (test/csidriver/node.go), each with the volume ID, the target
// (publish) and the time in nanoseconds ("at").
const (
	msgStaging   = "staging volume"
	msgStaged    = "staged volume"
	msgPublished = "published volume"
)

// nodeEvent is one such line.
type nodeEvent struct {
	Msg    string
	Volume string
	Target string
	At     time.Time
}

// parseNodeLog reads the node plugin's stage and publish lines from its
// log (zap's console encoding: time, level, message and the values as a
// JSON object, tab-separated), skipping every other line.
func parseNodeLog(r io.Reader) ([]nodeEvent, error) {
	var out []nodeEvent
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		for _, msg := range []string{msgStaging, msgStaged, msgPublished} {
			i := strings.Index(line, "\t"+msg+"\t")
			if i < 0 {
				continue
			}
			rest := line[i+len(msg)+2:]
			j := strings.IndexByte(rest, '{')
			if j < 0 {
				break
			}
			var v struct {
				Volume string `json:"volume"`
				Target string `json:"target"`
				At     string `json:"at"`
			}
			if err := json.Unmarshal([]byte(rest[j:]), &v); err != nil {
				break
			}
			at, err := time.Parse(time.RFC3339Nano, v.At)
			if err != nil {
				break
			}
			out = append(out, nodeEvent{Msg: msg, Volume: v.Volume, Target: v.Target, At: at})
			break
		}
	}
	return out, sc.Err()
}

// readNodeLog is parseNodeLog of the file at path.
func readNodeLog(path string) ([]nodeEvent, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseNodeLog(f)
}

// firstEvent is the earliest event of msg at or after since for which
// match holds.
func firstEvent(events []nodeEvent, msg string, since time.Time, match func(nodeEvent) bool) (time.Time, bool) {
	var best time.Time
	for _, ev := range events {
		if ev.Msg != msg || ev.At.Before(since) || !match(ev) {
			continue
		}
		if best.IsZero() || ev.At.Before(best) {
			best = ev.At
		}
	}
	return best, !best.IsZero()
}

// podClaim is the claim of the pod's first PVC volume, or of its generic
// ephemeral volume (<pod>-<volume>); "" without either.
func podClaim(p *corev1.Pod) string {
	for _, v := range p.Spec.Volumes {
		switch {
		case v.PersistentVolumeClaim != nil:
			return v.PersistentVolumeClaim.ClaimName
		case v.Ephemeral != nil:
			return p.Name + "-" + v.Name
		}
	}
	return ""
}

// volumeSteps are the times of one pod's steps from its create call to
// Running on the CSI tier. The volume's steps are zero for a pod without
// one, and for a step that was not seen.
type volumeSteps struct {
	created, returned, bound time.Time
	// claim is whether the pod has a claim. prestaged is whether its
	// volume was attached to the pod's node (and staged there by its
	// holder) at the pod's create call, elsewhere whether it was
	// attached to another node then.
	claim, prestaged, elsewhere bool
	// detached is the bench's informer's sight of the deletion of that
	// other node's VolumeAttachment.
	detached time.Time
	// attachSeen and attached are the bench's informer's first sight of
	// the volume's VolumeAttachment to the pod's node, made after the
	// create call, and of it attached.
	attachSeen, attached time.Time
	// stageStart, staged and published are from the node plugin's log.
	stageStart, staged, published time.Time
	running                       time.Time
}

// volumeSteps finds pod timing t's volume steps: its claim's PV and
// VolumeAttachments, and the node plugin's stage and publish of the volume.
func (e *env) volumeSteps(ctx context.Context, t podTiming, events []nodeEvent) (volumeSteps, error) {
	s := volumeSteps{created: t.created, returned: t.returned, bound: t.bound, running: t.running}
	claim := podClaim(t.pod)
	if claim == "" {
		return s, nil
	}
	s.claim = true
	var pod corev1.Pod
	if err := e.cache.Get(ctx, client.ObjectKeyFromObject(t.pod), &pod); err != nil {
		return s, fmt.Errorf("reading pod %s/%s: %w", t.pod.Namespace, t.pod.Name, err)
	}
	node := pod.Spec.NodeName
	var pvc corev1.PersistentVolumeClaim
	if err := e.cl.Get(ctx, client.ObjectKey{Namespace: t.pod.Namespace, Name: claim}, &pvc); err != nil {
		return s, fmt.Errorf("reading the claim %s/%s of pod %s: %w", t.pod.Namespace, claim, t.pod.Name, err)
	}
	var pv corev1.PersistentVolume
	if err := e.cl.Get(ctx, client.ObjectKey{Name: pvc.Spec.VolumeName}, &pv); err != nil {
		return s, fmt.Errorf("reading the volume %q of claim %s/%s: %w", pvc.Spec.VolumeName, pvc.Namespace, pvc.Name, err)
	}
	if pv.Spec.CSI == nil {
		return s, fmt.Errorf("volume %s of claim %s/%s is not a CSI volume", pv.Name, pvc.Namespace, pvc.Name)
	}
	handle := pv.Spec.CSI.VolumeHandle
	_, s.prestaged = e.attachments.attachedAt(pv.Name, node, true, t.created)
	if a, ok := e.attachments.attachedAt(pv.Name, node, false, t.created); ok {
		s.elsewhere, s.detached = true, a.Deleted
	}
	if a, ok := e.attachments.first(pv.Name, node, t.created); ok {
		s.attachSeen, s.attached = a.Seen, a.Attached
	}
	ofVolume := func(ev nodeEvent) bool { return ev.Volume == handle }
	s.stageStart, _ = firstEvent(events, msgStaging, t.created, ofVolume)
	if !s.stageStart.IsZero() {
		s.staged, _ = firstEvent(events, msgStaged, s.stageStart, ofVolume)
	}
	// The kubelet publishes under the pod's directory, named by its UID.
	uid := string(t.pod.UID)
	s.published, _ = firstEvent(events, msgPublished, t.created, func(ev nodeEvent) bool {
		return ev.Volume == handle && uid != "" && strings.Contains(ev.Target, uid)
	})
	return s, nil
}

// volumeSplit is where the time of a run's pods went on the CSI tier,
// after the create call and scheduling (startupRun's CreateCall and
// ToScheduled): a summary of each step over the pods that had it.
type volumeSplit struct {
	// Prestaged counts the pods whose volume was attached to their node,
	// and staged there by its holder, at their create call (staged hits
	// served); Elsewhere those whose volume was attached to another node
	// then (moved).
	Prestaged int `json:"prestaged"`
	Elsewhere int `json:"elsewhere"`
	// Detach is, for a volume attached to another node, from the pod
	// bound to a node to that VolumeAttachment's deletion: the holder's
	// exit and ControllerUnpublishVolume (the AttachDelay again).
	Detach summary `json:"detach"`
	// ToAttach is from the pod bound to a node to its volume's
	// VolumeAttachment to that node (kube-controller-manager's
	// attach/detach controller; for a volume attached elsewhere, after
	// its detach).
	ToAttach summary `json:"toAttach"`
	// Attach is from the VolumeAttachment to status.attached (the
	// external-attacher's ControllerPublishVolume, the AttachDelay).
	Attach summary `json:"attach"`
	// ToStage is from attached to the node plugin's NodeStageVolume
	// (the attachment in the node's status, seen by the kubelet).
	ToStage summary `json:"toStage"`
	// Stage is NodeStageVolume: the first stage of a volume formats it
	// (the FormatDelay), then mounts it at the staging path.
	Stage summary `json:"stage"`
	// Publish is from staged to NodePublishVolume's return.
	Publish summary `json:"publish"`
	// StagePublish is from attached to published: ToStage, Stage and
	// Publish together.
	StagePublish summary `json:"stagePublish"`
	// ToPublish is from bound to published: all of the volume's time on
	// the node; for a prestaged volume, the publish alone.
	ToPublish summary `json:"toPublish"`
	// ContainerStart is from published (without a volume: from bound) to
	// the first event with the pod Running: the sandbox and containers.
	ContainerStart summary `json:"containerStart"`
}

// splitOf summarizes the steps of a run's pods. A step is left out for a
// pod where either end was not seen; a negative step (the informer saw
// its start after the node plugin logged its end) counts as 0.
func splitOf(steps []volumeSteps) volumeSplit {
	var sp volumeSplit
	var detach, toAttach, attach, toStage, stage, publish, stagePublish, toPublish, start []time.Duration
	add := func(to *[]time.Duration, from, until time.Time) {
		if !from.IsZero() && !until.IsZero() {
			*to = append(*to, max(0, until.Sub(from)))
		}
	}
	for _, s := range steps {
		if !s.claim {
			add(&start, s.bound, s.running)
			continue
		}
		if s.prestaged {
			sp.Prestaged++
		}
		if s.elsewhere {
			sp.Elsewhere++
			add(&detach, s.bound, s.detached)
		}
		add(&toAttach, s.bound, s.attachSeen)
		add(&attach, s.attachSeen, s.attached)
		add(&toStage, s.attached, s.stageStart)
		add(&stage, s.stageStart, s.staged)
		add(&publish, s.staged, s.published)
		add(&stagePublish, s.attached, s.published)
		add(&toPublish, s.bound, s.published)
		add(&start, s.published, s.running)
	}
	sp.Detach, sp.ToAttach, sp.Attach, sp.ToStage, sp.Stage = summarize(detach), summarize(toAttach), summarize(attach), summarize(toStage), summarize(stage)
	sp.Publish, sp.StagePublish, sp.ToPublish, sp.ContainerStart = summarize(publish), summarize(stagePublish), summarize(toPublish), summarize(start)
	return sp
}

// split is the volume split of a run's pod timings, from the bench's
// VolumeAttachment informer and the node plugin's log.
func (e *env) split(ctx context.Context, timings []podTiming) (*volumeSplit, error) {
	events, err := readNodeLog(e.kc.CSINodeLog())
	if err != nil {
		return nil, fmt.Errorf("reading the node plugin's log: %w", err)
	}
	var steps []volumeSteps
	var errs []error
	for _, t := range timings {
		s, err := e.volumeSteps(ctx, t, events)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		steps = append(steps, s)
	}
	sp := splitOf(steps)
	return &sp, errors.Join(errs...)
}

func (d *csiDelays) text() string {
	if d == nil {
		return "delays not recorded"
	}
	return fmt.Sprintf("create %gs, attach %gs, format %gs", d.Create, d.Attach, d.Format)
}

// csiMarkdown renders the CSI tier: its ratios, its runs, and where each
// mode's time went.
func (r *results) csiMarkdown(w func(string, ...any)) {
	c := r.CSI
	if c == nil {
		return
	}
	w("\n## Start-up latency on a real node with CSI storage\n\n")
	if c.Skipped != "" {
		w("Skipped: %s.\n", c.Skipped)
		return
	}
	d := c.CSI
	if d == nil {
		d = &csiDelays{}
	}
	w("A cluster of its own, brought up after the others are down: the real node as in the tier above, with test/csidriver's storage (`cluster.StartCSI`): the driver's controller behind the kubernetes-csi external-provisioner and external-attacher, a CSIDriver that requires attachment (kube-controller-manager's attach/detach controller makes a VolumeAttachment per volume and node), and the driver's node plugin, registered with the real node's kubelet, which stages and publishes volumes through it. ")
	w("Like a cloud disk, a volume takes %gs to create (and to delete), %gs to attach (and to detach), and %gs to format at its first stage. ", d.Create, d.Attach, d.Format)
	w("Every claim is on StorageClass `%s` (WaitForFirstConsumer): b's generic ephemeral one, c's made at admission, the warm pools of d, f and g, and e's own.\n\n", cluster.StorageClassCSI)
	w("d's pool is staged (`spec.pool.staging` Auto, the default, which stages where the CSIDriver requires attachment): each warm PVC has a holder pod on the real node that keeps its volume attached and staged (formatted and mounted) there, so that a hit finds it ready; the webhook hands a pod a PVC staged on a node it can run on and prefers that node. ")
	w("f is d's control, the same pool with staging Disabled: its warm PVCs, like e's claims, are Bound but not attached, since a volume is attached once a pod that uses it is scheduled. ")
	w("g is a hit that the staged node cannot take. It runs last, once d's and f's pools are gone: the real node is tainted `%s` and kwok node %s, in the same zone, loses its taint, so that g's pool is made for and staged on %s; g's pods must run on the real node (a nodeSelector on its hostname, tolerating that taint), so each takes a PVC staged on %s, whose holder leaves; the volume detaches (%gs) and attaches to the real node (%gs). Before each of g's pods the pool is staged on %s again. kwok's node stages nothing, so the volume's first stage on the real node formats it (%gs), which a real node would have done at the holder's stage: g's figures include it. The taints are restored before g's pods are deleted.\n\n",
		movedTaintKey, movedNode, movedNode, movedNode, d.Attach, d.Attach, movedNode, d.Format)
	w("%d pods per mode, one at a time; a, d, e and f each alone, then, once d's and f's pools are gone, b", c.N)
	if r.Config.ParallelSlow {
		w(" beside c (each still one pod at a time)")
	} else {
		w(" and c")
	}
	w(", then g. A holder leaves its node once the pod it served is bound there, and its teardown may outlast that pod's start: before each of d's pods, outside its time, the bench waits until the last one's holder has left (its sandbox, network and volume torn down), so that no teardown left by the last pod runs into the next one's start.")
	if c.AttachSlots > 0 && 2*c.N > c.AttachSlots-c.N {
		w(" d's holders keep %d volumes attached to the real node, which takes %d of the driver's, and the scheduler does not preempt a holder for an attach slot (\"Preemption is not helpful\"): with them, the node has room for %d more volumes, and b beside c need %d.", c.N, c.AttachSlots, c.AttachSlots-c.N, 2*c.N)
	}
	w(" Between runs")
	w(" the pods are deleted and their claims drained, and every volume is detached but the warm PVCs', which their holders keep attached; after d's run its pool is refilled and staged again. d's pool (%d warm PVCs, filled in %.1fs and staged on %s %.1fs after its creation), f's pool and e's %d Bound PVCs are ready before the runs.\n\n",
		c.N, c.PoolFillSeconds, cluster.RealNodeName, c.PoolStagedSeconds, c.N)

	w("| ratio | | CSI p50 | CSI p99 | real node, hostPath, p50 |\n|---|---|---|---|---|\n")
	var hostPath startupRuns
	if r.RealNode != nil {
		hostPath = r.RealNode.Startup
	}
	for _, row := range csiRatioRows {
		w("| %s/%s | %s | %s | %s | %s |\n", row.Num, row.Den, row.What,
			times(c.Startup.ratio(row.Num, row.Den, false, p50)), times(c.Startup.ratio(row.Num, row.Den, false, p99)),
			times(hostPath.ratio(row.Num, row.Den, false, p50)))
	}
	runs := append(startupRuns(nil), c.Startup...)
	sort.SliceStable(runs, func(i, j int) bool { return runs[i].Mode < runs[j].Mode })
	w("\nserved / moved / unstaged: the operator's `fluentpvc_pool_staged_hits_total` of the mode's FluentPVC over its run and clean-up (unstaged: the webhook counts a hit on a PVC without a holder) and `fluentpvc_pool_holders_removed_total` (served, moved: the holder reconciler counts where a staged hit's pod went as the holder leaves); holders removed: `fluentpvc_pool_holders_removed_total`, by reason.\n\n")
	w("| mode | | pods | p50 | p90 | p99 | max | wall | hits / misses | served / moved / unstaged | holders removed |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range runs {
		if s.Error != "" {
			w("| %s | %s | | error: %s | | | | | | | |\n", s.Mode, modeNames[s.Mode], s.Error)
			continue
		}
		checkouts, staged, removed := "", "", ""
		if poolOf(s.Mode) != "" {
			checkouts = fmt.Sprintf("%d / %d", s.Hits, s.Misses)
		}
		if h := s.StagedHits; h != nil {
			staged = fmt.Sprintf("%d / %d / %d", h[pool.HolderServed], h[pool.HolderMoved], h[webhook.HitUnstaged])
			removed = countsText(s.HoldersRemoved)
		}
		w("| %s | %s | %d | %s | %s | %s | %s | %.1fs | %s | %s | %s |\n", s.Mode, modeNames[s.Mode], s.Stats.N,
			dur(s.Stats.P50), dur(s.Stats.P90), dur(s.Stats.P99), dur(s.Stats.Max), s.Wall, checkouts, staged, removed)
	}
	w("\nWhere the time goes, p50 of each step over the run's pods: the create call (admission included); scheduling, from the call's return to the first event with the pod bound to a node (for b and c also provisioning: the claim's volume is created once the scheduler has picked the node); detach elsewhere, for a volume attached to another node at the create call (g), from bound to that VolumeAttachment's deletion (the holder's exit, then ControllerUnpublishVolume); to the VolumeAttachment, from bound to the bench's informer's first sight of one to the pod's node (for g after the detach); attach, from there to its `status.attached` (ControllerPublishVolume); to stage, from attached to the node plugin's NodeStageVolume (the attach/detach controller reports the attachment in the node's status, where the kubelet waits for it); stage, NodeStageVolume (the format at a volume's first stage, then a bind mount); publish, from staged to NodePublishVolume's return; stage + publish, from attached to published; bound to published, all of the volume's time on the node; container start, from published (for a, from bound) to the first event with the pod Running. ")
	w("A staged hit (d) has no attach or stage of its own: its volume was attached and staged before its create call, so only the publish is left. Stage and publish are timed by the node plugin's log lines (`%s`, `%s`, `%s`, with nanosecond times; the kubelet publishes under the pod's UID), the rest by the bench's informers on pods and VolumeAttachments. The last column counts the pods whose volume was, at their create call, attached to the node they ran on (staged) or to another node (elsewhere).\n\n", msgStaging, msgStaged, msgPublished)
	w("| mode | start-up | create call | scheduling | detach elsewhere | to VolumeAttachment | attach | to stage | stage | publish | stage + publish | bound to published | container start | volume at the create call |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range runs {
		if s.Error != "" {
			continue
		}
		sp := s.Split
		if sp == nil {
			sp = &volumeSplit{}
			*sp = splitOf(nil)
		}
		at := ""
		if sp.Prestaged > 0 || sp.Elsewhere > 0 {
			at = fmt.Sprintf("%d staged, %d elsewhere", sp.Prestaged, sp.Elsewhere)
		}
		w("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", s.Mode, dur(s.Stats.P50), dur(s.CreateCall.P50), dur(s.ToScheduled.P50),
			dur(sp.Detach.P50), dur(sp.ToAttach.P50), dur(sp.Attach.P50), dur(sp.ToStage.P50), dur(sp.Stage.P50), dur(sp.Publish.P50), dur(sp.StagePublish.P50),
			dur(sp.ToPublish.P50), dur(sp.ContainerStart.P50), at)
	}
	for _, s := range runs {
		if s.SplitError != "" {
			w("\nMode %s's split is short: %s\n", s.Mode, strings.ReplaceAll(s.SplitError, "\n", " "))
		}
	}
}

// countsText is counts as "key n, ...", sorted by key; "none" if all are 0.
func countsText(counts map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		if counts[k] != 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, counts[k]))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
