package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/test/cluster"
)

// The CSI tier: the real node with test/csidriver's storage
// (cluster.StartCSI), a cloud disk's delays, and the real kubelet staging
// and publishing through the driver's node plugin.

// csiOptions are the CSI driver's delays on the CSI tier.
var csiOptions = cluster.CSIOptions{CreateDelay: 5 * time.Second, AttachDelay: 8 * time.Second, FormatDelay: 2 * time.Second}

// csiModes are the start-up modes measured on the CSI tier.
var csiModes = []string{modePlain, modeEphemeral, modeMiss, modeHit, modeOwnClaim}

// csiDelays are the driver's delays, in seconds, as the results show them.
type csiDelays struct {
	Create float64 `json:"createSeconds"`
	Attach float64 `json:"attachSeconds"`
	Format float64 `json:"formatSeconds"`
}

func delaysOf(o cluster.CSIOptions) *csiDelays {
	return &csiDelays{Create: o.CreateDelay.Seconds(), Attach: o.AttachDelay.Seconds(), Format: o.FormatDelay.Seconds()}
}

// csiNodeLog is the node plugin's log file in the cluster's directory
// (cluster.StartCSI).
func csiNodeLog(kc *cluster.Cluster) string { return filepath.Join(kc.Dir, "csi-node.log") }

// waitCSINode waits until the real node's kubelet has registered the CSI
// driver's node plugin: until then the provisioner cannot place a volume
// on it.
func waitCSINode(ctx context.Context, kc *cluster.Cluster) error {
	err := wait.PollUntilContextTimeout(ctx, poll, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := kc.Clientset.StorageV1().CSINodes().Get(ctx, cluster.RealNodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, d := range n.Spec.Drivers {
			if d.Name == cluster.CSIDriverName {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the kubelet of %s to register the CSI node plugin (see %s): %w", cluster.RealNodeName, csiNodeLog(kc), err)
	}
	return nil
}

// waitNoAttachments waits until no VolumeAttachment is left: the detaches
// of a run are done before the next starts.
func (e *env) waitNoAttachments(ctx context.Context) error {
	left := 0
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, drainTimeout, true, func(ctx context.Context) (bool, error) {
		var vas storagev1.VolumeAttachmentList
		if err := e.cache.List(ctx, &vas); err != nil {
			return false, err
		}
		left = len(vas.Items)
		return left == 0, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the volumes to detach (%d VolumeAttachments left): %w", left, err)
	}
	return nil
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
	// attachSeen and attached are the bench's informer's first sight of
	// the volume's VolumeAttachment and of it attached.
	attachSeen, attached time.Time
	// stageStart, staged and published are from the node plugin's log.
	stageStart, staged, published time.Time
	running                       time.Time
}

// hasVolume is whether the steps include a volume's.
func (s volumeSteps) hasVolume() bool { return !s.attachSeen.IsZero() }

// volumeSteps finds pod timing t's volume steps: its claim's PV and
// VolumeAttachment, and the node plugin's stage and publish of the volume.
func (e *env) volumeSteps(ctx context.Context, t podTiming, events []nodeEvent) (volumeSteps, error) {
	s := volumeSteps{created: t.created, returned: t.returned, bound: t.bound, running: t.running}
	claim := podClaim(t.pod)
	if claim == "" {
		return s, nil
	}
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
	if a, ok := e.attachments.first(pv.Name, t.created); ok {
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
	// ToAttach is from the pod bound to a node to its volume's
	// VolumeAttachment (kube-controller-manager's attach/detach
	// controller).
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
	// ContainerStart is from published (without a volume: from bound) to
	// the first event with the pod Running: the sandbox and containers.
	ContainerStart summary `json:"containerStart"`
}

// splitOf summarizes the steps of a run's pods. A step is left out for a
// pod where either end was not seen; a negative step (the informer saw
// its start after the node plugin logged its end) counts as 0.
func splitOf(steps []volumeSteps) volumeSplit {
	var toAttach, attach, toStage, stage, publish, stagePublish, start []time.Duration
	add := func(to *[]time.Duration, from, until time.Time) {
		if !from.IsZero() && !until.IsZero() {
			*to = append(*to, max(0, until.Sub(from)))
		}
	}
	for _, s := range steps {
		if !s.hasVolume() {
			add(&start, s.bound, s.running)
			continue
		}
		add(&toAttach, s.bound, s.attachSeen)
		add(&attach, s.attachSeen, s.attached)
		add(&toStage, s.attached, s.stageStart)
		add(&stage, s.stageStart, s.staged)
		add(&publish, s.staged, s.published)
		add(&stagePublish, s.attached, s.published)
		add(&start, s.published, s.running)
	}
	return volumeSplit{
		ToAttach: summarize(toAttach), Attach: summarize(attach), ToStage: summarize(toStage), Stage: summarize(stage),
		Publish: summarize(publish), StagePublish: summarize(stagePublish), ContainerStart: summarize(start),
	}
}

// split is the volume split of a run's pod timings, from the bench's
// VolumeAttachment informer and the node plugin's log.
func (e *env) split(ctx context.Context, timings []podTiming) (*volumeSplit, error) {
	events, err := readNodeLog(csiNodeLog(e.kc))
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
	w("Every claim is on StorageClass `%s` (WaitForFirstConsumer): b's generic ephemeral one, c's made at admission, d's warm pool and e's own. d's warm PVCs and e's claims are created and Bound before the runs, but not attached: a volume is attached to a node once a pod that uses it is scheduled there. ", cluster.StorageClassCSI)
	w("%d pods per mode, one at a time; a, d and e each alone", c.N)
	if r.Config.ParallelSlow {
		w(", then b beside c (each still one pod at a time)")
	}
	w("; between runs the pods are deleted, the claims drained and every volume detached. d's pool (%d warm PVCs, filled in %.1fs) and e's %d Bound PVCs are ready before the runs.\n\n", c.N, c.PoolFillSeconds, c.N)

	w("| ratio | CSI p50 | CSI p99 | real node, hostPath, p50 |\n|---|---|---|---|\n")
	var hostPath startupRuns
	if r.RealNode != nil {
		hostPath = r.RealNode.Startup
	}
	for _, pair := range csiRatioPairs {
		w("| %s/%s | %s | %s | %s |\n", pair[0], pair[1],
			times(c.Startup.ratio(pair[0], pair[1], false, p50)), times(c.Startup.ratio(pair[0], pair[1], false, p99)),
			times(hostPath.ratio(pair[0], pair[1], false, p50)))
	}
	runs := append(startupRuns(nil), c.Startup...)
	sort.SliceStable(runs, func(i, j int) bool { return runs[i].Mode < runs[j].Mode })
	w("\n| mode | | pods | p50 | p90 | p99 | max | wall | hits / misses |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range runs {
		if s.Error != "" {
			w("| %s | %s | | error: %s | | | | | |\n", s.Mode, modeNames[s.Mode], s.Error)
			continue
		}
		checkouts := ""
		if s.Mode == modeMiss || s.Mode == modeHit {
			checkouts = fmt.Sprintf("%d / %d", s.Hits, s.Misses)
		}
		w("| %s | %s | %d | %s | %s | %s | %s | %.1fs | %s |\n", s.Mode, modeNames[s.Mode], s.Stats.N,
			dur(s.Stats.P50), dur(s.Stats.P90), dur(s.Stats.P99), dur(s.Stats.Max), s.Wall, checkouts)
	}
	w("\nWhere the time goes, p50 of each step over the run's pods: the create call (admission included); scheduling, from the call's return to the first event with the pod bound to a node (for b and c also provisioning: the claim's volume is created once the scheduler has picked the node); to the VolumeAttachment, from bound to the bench's informer's first sight of it; attach, from there to its `status.attached` (ControllerPublishVolume); to stage, from attached to the node plugin's NodeStageVolume (the attach/detach controller reports the attachment in the node's status, where the kubelet waits for it); stage, NodeStageVolume (the format at a volume's first stage, then a bind mount); publish, from staged to NodePublishVolume's return; stage + publish, from attached to published; container start, from published (for a, from bound) to the first event with the pod Running. ")
	w("Stage and publish are timed by the node plugin's log lines (`%s`, `%s`, `%s`, with nanosecond times; the kubelet publishes under the pod's UID), the rest by the bench's informers on pods and VolumeAttachments.\n\n", msgStaging, msgStaged, msgPublished)
	w("| mode | start-up | create call | scheduling | to VolumeAttachment | attach | to stage | stage | publish | stage + publish | container start |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range runs {
		if s.Error != "" && s.Stats.N == 0 {
			continue
		}
		sp := s.Split
		if sp == nil {
			sp = &volumeSplit{}
			*sp = splitOf(nil)
		}
		w("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", s.Mode, dur(s.Stats.P50), dur(s.CreateCall.P50), dur(s.ToScheduled.P50),
			dur(sp.ToAttach.P50), dur(sp.Attach.P50), dur(sp.ToStage.P50), dur(sp.Stage.P50), dur(sp.Publish.P50), dur(sp.StagePublish.P50), dur(sp.ContainerStart.P50))
	}
	for _, s := range runs {
		if s.SplitError != "" {
			w("\nMode %s's split is short: %s\n", s.Mode, strings.ReplaceAll(s.SplitError, "\n", " "))
		}
	}
}
