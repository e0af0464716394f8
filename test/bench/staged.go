package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/objects"
	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/pool"
	"github.com/st-tech/fluent-pvc-operator/test/cluster"
)

// The admission phase's staged levels: hits from staged pools, whose warm
// PVCs are on test/csidriver's storage that attaches
// (cluster.StorageClassCSI), started on the simulated cluster for them
// (cluster.StartCSI, as the chaos run does). The operator keeps each warm
// PVC attached to a kwok node by a holder pod (kwok runs holders without
// staging anything; the attach/detach controller and the external-attacher
// attach their volumes) and, where it reserves staged pools ahead, hands
// them out without a write; the webhook then pins the pod to the holder's
// node.

// fpvcAdmissionStaged is the FluentPVC of the staged levels, on
// cluster.StorageClassCSI, its reservations left to the operator's
// --reserve-ahead like fpvcAdmissionReserved's.
const fpvcAdmissionStaged = "bench-admission-staged"

// checkoutStaged labels the staged levels; the operator counts them as
// hits.
const checkoutStaged = "staged"

// stagedPoolMax bounds the pool of each staged level, and so its pods:
// every warm PVC of it takes a holder pod and an attachment, which the
// external-provisioner and external-attacher make at their default 5
// requests a second (3 levels of 40 took 92 s to stage, 41 s longer than
// the reserved levels' pool to fill; 30 fit in about that time).
const stagedPoolMax = 30

// kwokCSIOptions are the CSI driver's delays on the simulated tier. The
// attach is short: nothing there times a volume's way to a pod. The
// create is longer than a level takes: a warm PVC that refills a staged
// pool during its level gets a holder once Bound, and a holder pod is a
// call of the operator's webhook (which leaves it alone) that the API
// server's histogram would count among the level's.
var kwokCSIOptions = cluster.CSIOptions{CreateDelay: 10 * time.Second, AttachDelay: 200 * time.Millisecond}

// stagedAdmission is how the staged levels ran.
type stagedAdmission struct {
	// Skipped says why they did not run (no CSI storage on this run, or
	// no reservations ahead); the phase's other levels ran all the same.
	Skipped string `json:"skipped,omitempty"`
	// Pods is each level's pods and the size of its pool.
	Pods int `json:"pods,omitempty"`
	// StagePerNode is the operator's --stage-per-node on the simulated
	// tier (0: the default, pool.DefaultStagePerNode), raised so that the
	// levels' pools all stage at once (stagedLayout); ExtraNodes the kwok
	// nodes added for them, spread over the zones, and deleted after the
	// phase.
	StagePerNode int `json:"stagePerNode,omitempty"`
	ExtraNodes   int `json:"extraNodes,omitempty"`
	// Reserved says whether the operator reserved the staged pools ahead
	// (its stock reports them: fluentpvc_pool_reserved_claims); if not,
	// a staged hit writes its claim at admission, as a plain hit does.
	Reserved bool `json:"reserved"`
	// StagedSeconds is from the pools' creation to every warm PVC staged
	// (its holder Running, its volume attached to the holder's node) and,
	// if Reserved, reserved; ExtraWaitSeconds is what of it was left once
	// the reserved levels' pool, which filled beside them, was full.
	StagedSeconds    float64 `json:"stagedSeconds,omitempty"`
	ExtraWaitSeconds float64 `json:"extraWaitSeconds,omitempty"`
}

// stagedPoolSize is the pool, and the pods, of each staged level.
func stagedPoolSize(cfg config) int {
	return min(cfg.AdmissionPods, stagedPoolMax)
}

// kwokAttachLimit is how many volumes test/csidriver attaches to a node
// (its --max-volumes-per-node, left to its default by cluster.StartCSI).
// kwok nodes' CSINodes do not report it, so the operator does not cap its
// holders by it: a holder beyond it runs all the same (kwok does not wait
// for the attachment), and its volume's attachment fails.
const kwokAttachLimit = 16

// stagedNodesFirst numbers the kwok nodes added for the staged levels
// (cluster.NodeName), after the cluster's own and before the nodes
// phase's.
const stagedNodesFirst = 50

// stagedLayout is where the staged levels' pools (one per level, all
// filled before the first level) stage at once, on a cluster of
// nodesPerZone kwok nodes in each of cluster.DefaultZones: each volume
// stays in the zone of the node its warm PVC was made for, and the zones'
// shares are not even (43 of 120 in one zone of three seen), so each zone
// is given room for a quarter more than an even share. Within the
// default --stage-per-node the layout is the cluster's (0, 0); beyond it,
// a node takes as many holders as volumes (kwokAttachLimit), and
// extraPerZone nodes are added to each zone if that is still short.
func stagedLayout(cfg config, nodesPerZone int) (stagePerNode, extraPerZone int) {
	zones := len(cluster.DefaultZones)
	perZone := (5*len(cfg.Levels)*stagedPoolSize(cfg) + 4*zones - 1) / (4 * zones)
	if perZone <= pool.DefaultStagePerNode*nodesPerZone {
		return 0, 0
	}
	need := (perZone + kwokAttachLimit - 1) / kwokAttachLimit
	return kwokAttachLimit, max(need-nodesPerZone, 0)
}

// kwokOperatorArgs are the operator's args on the simulated tier, of
// nodesPerZone nodes in each zone: cfg's, with --stage-per-node raised for
// the staged levels (stagedLayout) when the admission phase runs
// (csiOperatorArgs: unless they set it). Only staged pools read it, and
// the simulated tier's other pools are on the test provisioner, which
// does not attach.
func kwokOperatorArgs(cfg config, nodesPerZone int) []string {
	if n, _ := stagedLayout(cfg, nodesPerZone); n > 0 && slices.Contains(cfg.Phases, "admission") {
		return csiOperatorArgs(cfg.OperatorArgs, n)
	}
	return cfg.OperatorArgs
}

// stagePerNodeArg is the last --stage-per-node=N of args; 0 if none.
func stagePerNodeArg(args []string) int {
	n := 0
	for _, a := range args {
		if v, ok := strings.CutPrefix(strings.TrimLeft(a, "-"), "stage-per-node="); ok {
			_, _ = fmt.Sscan(v, &n)
		}
	}
	return n
}

// startStagedPools gives the cluster CSI storage (once) and creates the
// staged levels' namespaces and pools, to fill beside the reserved
// levels' pool. It returns the namespaces, or nil with st.Skipped set
// when the run has no CSI storage (bin/csi-provisioner or
// bin/csi-attacher missing: `make csi-bins`, which make bench runs where
// the machine can run the real node).
func (e *env) startStagedPools(ctx context.Context, st *stagedAdmission) ([]string, error) {
	if !e.kwokCSI {
		for _, bin := range []string{"csi-provisioner", "csi-attacher"} {
			// As StartCSI would find, before nodes are added for nothing.
			if _, err := os.Stat(filepath.Join(cluster.RepoRoot(), "bin", bin)); err != nil {
				st.Skipped = fmt.Sprintf("no CSI storage on this run: bin/%s is missing (make csi-bins)", bin)
				return nil, nil
			}
		}
		// Before the driver starts: it attaches only to the nodes it
		// knows then.
		if st.ExtraNodes > 0 {
			if err := e.kc.CreateNodes(ctx, cluster.NodeSet{Zones: cluster.DefaultZones, PerZone: st.ExtraNodes / len(cluster.DefaultZones), First: stagedNodesFirst}); err != nil {
				return nil, fmt.Errorf("adding nodes for the staged pools: %w", err)
			}
		}
		if err := e.kc.StartCSI(ctx, kwokCSIOptions); err != nil {
			st.Skipped = "no CSI storage on this run: " + err.Error()
			return nil, e.deleteStagedNodes(ctx, st)
		}
		e.kwokCSI = true
	}
	nss := admissionNamespaces(checkoutStaged, e.cfg.Levels)
	for _, ns := range nss {
		if err := e.createNamespace(ctx, ns); err != nil {
			return nil, err
		}
	}
	if err := e.createFluentPVC(ctx, fpvcAdmissionStaged, int32(st.Pods), nss...); err != nil {
		return nil, err
	}
	return nss, nil
}

// stagedCounts counts a staged pool's claims in one namespace: live, the
// pool's claims in pvcs (warm, or reserved ahead) that are Bound and not
// being deleted; staged, those of them whose holder in holders runs on a
// node (pool.HolderStaged) to which their volume is attached; reserved,
// those staged that are reserved ahead.
func stagedCounts(pvcs []corev1.PersistentVolumeClaim, holders []corev1.Pod, vas []storagev1.VolumeAttachment) (live, staged, reserved int) {
	holderNode := map[string]string{}
	for i := range holders {
		h := &holders[i]
		if c := objects.HolderOf(h); c != "" && pool.HolderStaged(h) {
			holderNode[c] = h.Spec.NodeName
		}
	}
	attached := map[[2]string]bool{}
	for _, va := range vas {
		if pv := va.Spec.Source.PersistentVolumeName; pv != nil && va.Status.Attached && va.DeletionTimestamp == nil {
			attached[[2]string{*pv, va.Spec.NodeName}] = true
		}
	}
	for i := range pvcs {
		c := &pvcs[i]
		if c.DeletionTimestamp != nil || c.Status.Phase != corev1.ClaimBound {
			continue
		}
		live++
		node, ok := holderNode[c.Name]
		if !ok || !attached[[2]string{c.Spec.VolumeName, node}] {
			continue
		}
		staged++
		if _, _, ok := claim.Reservation(c); ok {
			reserved++
		}
	}
	return live, staged, reserved
}

// reservesFrom says whether the operator's stock reserves from FluentPVC
// name's pool: its fluentpvc_pool_reserved_claims has a series for it
// (made at the stock's first sync that counts the pool, every second,
// even at 0).
func reservesFrom(s scrape, name string) bool {
	for _, m := range s["fluentpvc_pool_reserved_claims"].GetMetric() {
		if label(m, "fluentpvc") == name {
			return true
		}
	}
	return false
}

// waitStaged waits until the staged pool of size in each namespace of nss
// is full and staged (stagedCounts), and, if the operator reserves from
// it, reserved. It tells whether the operator does once the pool is
// staged: its stock has synced many times by then.
func (e *env) waitStaged(ctx context.Context, size int, nss []string, st *stagedAdmission) error {
	var state string
	reserves, asked := false, false
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, drainTimeout, true, func(ctx context.Context) (bool, error) {
		// Live: the bench's cache holds neither holders nor
		// VolumeAttachments on this tier. A failed read is tried again.
		var vas storagev1.VolumeAttachmentList
		if err := e.cl.List(ctx, &vas); err != nil {
			state = err.Error()
			return false, nil
		}
		var parts []string
		done := true
		for _, ns := range nss {
			pvcs, err := e.pooled(ctx, client.InNamespace(ns), client.MatchingLabels{v1alpha1.FluentPVCNameLabelKey: fpvcAdmissionStaged})
			if err != nil {
				return false, err
			}
			var holders corev1.PodList
			if err := e.cl.List(ctx, &holders, client.InNamespace(ns), client.MatchingLabels{
				v1alpha1.ComponentLabelKey: v1alpha1.ComponentHolder, v1alpha1.FluentPVCNameLabelKey: fpvcAdmissionStaged,
			}); err != nil {
				state = err.Error()
				return false, nil
			}
			live, staged, reserved := stagedCounts(pvcs, holders.Items, vas.Items)
			parts = append(parts, fmt.Sprintf("%s: %d Bound, %d staged, %d reserved", ns, live, staged, reserved))
			done = done && live >= size && staged >= size && (!reserves || reserved >= size)
		}
		state = strings.Join(parts, "; ")
		if !done || asked {
			return done, nil
		}
		s, err := e.operatorScrape(ctx)
		if err != nil {
			return false, nil
		}
		asked, reserves = true, reservesFrom(s, fpvcAdmissionStaged)
		return !reserves, nil
	})
	st.Reserved = reserves
	if err != nil {
		return fmt.Errorf("waiting for the staged pools of FluentPVC %s (%s): %w", fpvcAdmissionStaged, state, err)
	}
	return nil
}

// waitDetached waits until no VolumeAttachment is left once the staged
// pools' namespaces are gone: their detaches are not the next phase's
// load, and the nodes added for them carry none when they go. The
// volumes' deletion is not waited for: the driver takes its create delay
// for each and the external-provisioner deletes them at 5 requests a
// second (165 volumes took a minute), into the memory phase, which
// measures the operator's memory, not latencies.
func (e *env) waitDetached(ctx context.Context) error {
	left := 0
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, drainTimeout, true, func(ctx context.Context) (bool, error) {
		var vas storagev1.VolumeAttachmentList
		if err := e.cl.List(ctx, &vas); err != nil {
			return false, nil
		}
		left = len(vas.Items)
		return left == 0, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the staged pools' volumes to detach (%d VolumeAttachments left): %w", left, err)
	}
	return nil
}

// deleteStagedNodes deletes the nodes added for the staged levels (their
// CSINodes go with them) and waits until they are gone, once the staged
// pools are.
func (e *env) deleteStagedNodes(ctx context.Context, st *stagedAdmission) error {
	var names []string
	for _, zone := range cluster.DefaultZones {
		for i := range st.ExtraNodes / len(cluster.DefaultZones) {
			names = append(names, cluster.NodeName(zone, stagedNodesFirst+i))
		}
	}
	for _, name := range names {
		if err := e.kc.Clientset.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting node %s: %w", name, err)
		}
	}
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, name := range names {
			if err := e.cl.Get(ctx, client.ObjectKey{Name: name}, &corev1.Node{}); !apierrors.IsNotFound(err) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the staged levels' %d nodes to go: %w", len(names), err)
	}
	return nil
}

// stagedLevels runs the staged levels, each in its namespace of nss from
// its pool, staged (and reserved) before the first; st.Pods pods each.
func (e *env) stagedLevels(ctx context.Context, nss []string, st *stagedAdmission, record func(admissionLevel, error)) error {
	var errs []error
	for i, c := range e.cfg.Levels {
		if err := e.settle(ctx); err != nil {
			return errors.Join(append(errs, err)...)
		}
		record(e.admissionLevelOf(ctx, checkoutStaged, c, st.Pods, nss[i], fpvcAdmissionStaged, nil))
		if err := e.dropPoolNamespace(ctx, fpvcAdmissionStaged, nss[i]); err != nil {
			return errors.Join(append(errs, err)...)
		}
		if err := e.waitBindings(ctx, nss[i]); err != nil {
			return errors.Join(append(errs, err)...)
		}
	}
	return errors.Join(errs...)
}

// stagedMarkdown describes the staged levels in the admission section, or
// why they did not run.
func (r *results) stagedMarkdown(w func(string, ...any)) {
	st := r.AdmissionStaged
	if st == nil {
		return
	}
	if st.Skipped != "" {
		w("Staged hits (`%s`): skipped: %s.\n\n", checkoutStaged, st.Skipped)
		return
	}
	if !slices.ContainsFunc(r.Admission, func(l admissionLevel) bool { return l.Checkout == checkoutStaged }) {
		w("Staged hits (`%s`): not measured; see the errors.\n\n", checkoutStaged)
		return
	}
	fewer := ""
	if st.Pods < r.Config.AdmissionPods {
		fewer = fmt.Sprintf(" (fewer than the others' %d: every warm PVC of a staged pool takes a holder pod and an attachment)", r.Config.AdmissionPods)
	}
	w("Staged hits (`%s`): %d pods per level%s, each level from a full pool of %d of its own on StorageClass `%s`: test/csidriver's storage, started on this cluster for them (`cluster.StartCSI`; a volume takes %s to create, longer than a level, so that no warm PVC refilling the pool gets a holder, whose pod would be a call of the webhook, during the level; %s to attach), whose CSIDriver requires attachment. ",
		checkoutStaged, st.Pods, fewer, st.Pods, cluster.StorageClassCSI, kwokCSIOptions.CreateDelay, kwokCSIOptions.AttachDelay)
	perNode := fmt.Sprintf("`--stage-per-node=%d`, as many as test/csidriver attaches to a node, which kwok nodes do not report, so that the levels' %d warm PVCs all stage at once", st.StagePerNode, st.Pods*len(r.Config.Levels))
	if st.ExtraNodes > 0 {
		perNode += fmt.Sprintf(", on %d kwok nodes added to the zones for them and deleted after the phase", st.ExtraNodes)
	}
	if st.StagePerNode == 0 {
		perNode = fmt.Sprintf("the default `--stage-per-node` (%d)", pool.DefaultStagePerNode)
	}
	w("The operator keeps each warm PVC's volume attached to a kwok node by a holder pod (%s; kwok runs holders and stages nothing), ", perNode)
	if st.Reserved {
		w("and reserved the pools ahead (its stock counts them in `fluentpvc_pool_reserved_claims`): a staged hit is handed out without an API write, and the pod is pinned to its holder's node. ")
	} else {
		w("but did not reserve them ahead (its stock leaves staged pools to their holders): a staged hit writes its claim at admission (PUT), as a plain hit does, and the pod is pinned to its holder's node. ")
	}
	w("The pools filled beside the reserved levels' pool and were staged%s %.1fs after their creation, %.1fs after that pool was full. ", map[bool]string{true: " and reserved", false: ""}[st.Reserved], st.StagedSeconds, st.ExtraWaitSeconds)
	w("The staged levels run last, after the control: the holders of the claims they hand out stay for %s (their pods are never scheduled) and then leave. The hits / misses column counts the staged hits (`fluentpvc_pool_staged_hits_total{served=\"staged\"}`) in brackets.\n\n", pool.HolderPatience)
}
