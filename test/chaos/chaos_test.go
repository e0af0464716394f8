package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/test/chaos/oracle"
	"github.com/st-tech/fluent-pvc-operator/test/cluster"
)

// TestChaos runs the fault-injection suite in the mode CHAOS names
// ("reduced" or "full"); it is skipped without CHAOS.
func TestChaos(t *testing.T) {
	name := os.Getenv("CHAOS")
	if name == "" {
		t.Skip("set CHAOS=reduced or CHAOS=full (make chaos) to run the fault-injection suite")
	}
	m, err := modeNamed(name)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	start := time.Now()
	logPath := filepath.Join(cluster.RepoRoot(), ".kwok", "chaos-driver.log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cluster.SetCommandLogger(logFile)

	kc, err := cluster.Up(ctx, cluster.Options{
		Name: "chaos", ProvisionerDelay: 500 * time.Millisecond, AuditPolicy: oracle.Policy,
		ExtraStages: append(cluster.E2EStages(), flakyFailStage, flakySucceedStage), Out: logFile,
	})
	if err != nil {
		t.Fatalf("cluster: %v (log %s)", err, logPath)
	}
	t.Cleanup(func() {
		if os.Getenv("CHAOS_KEEP_CLUSTER") == "" {
			if err := kc.Down(); err != nil {
				t.Errorf("tearing the cluster down: %v", err)
			}
		}
	})

	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	c, err := client.New(kc.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	user, err := userClient(kc.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}

	proxy, err := newAPIProxy(kc, filepath.Join(kc.Dir, "apiproxy"), faultRates{
		Reset: 0.005, Throttle: 0.01, Fail: 0.01, Lost: 0.005, Delay: 0.05, MaxDelay: time.Second, WatchCut: 0.2,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	if err := kc.InstallCRDs(ctx); err != nil {
		t.Fatal(err)
	}
	// CSI storage that attaches, for the staged FluentPVC's claims.
	if err := kc.StartCSI(ctx, cluster.CSIOptions{CreateDelay: 500 * time.Millisecond, AttachDelay: time.Second}); err != nil {
		t.Fatalf("CSI storage: %v (log %s)", err, logPath)
	}
	// A replica told to stop keeps serving for a moment first, as the
	// chart's does (5 s there).
	reps, err := startReplicas(ctx, kc, 2, proxy.Kubeconfig, m.PerRequestLB, []string{
		"--orphan-grace-period=10s", "--allow-short-orphan-grace-period", "--drain-backoff-base=1s",
		"--shutdown-drain=2s",
	})
	if err != nil {
		t.Fatalf("replicas: %v (log %s)", err, logPath)
	}
	t.Cleanup(func() {
		if err := reps.Stop(); err != nil {
			t.Errorf("stopping the replicas: %v", err)
		}
	})

	d := newDriver(m, c, user, kc, logFile)
	for _, o := range []client.Object{nodeLocalClass(), fluentPVC(), localFluentPVC(), stagedFluentPVC()} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	for range m.Namespaces {
		d.addNamespace(ctx)
	}
	d.logf("load starts: %s mode, %s", m.Name, m.Load)
	loadStart := time.Now()

	// The load and the faults.
	proxy.enabled.Store(true)
	loadCtx, stopLoad := context.WithTimeout(ctx, m.Load)
	var wg sync.WaitGroup
	tick(loadCtx, &wg, m.BarePodEvery, d.createBarePod)
	tick(loadCtx, &wg, 500*time.Millisecond, d.reapBarePods)
	every(loadCtx, &wg, m.ScaleEvery, d.scale)
	every(loadCtx, &wg, m.KillEvery, func(ctx context.Context) { reps.killOne(ctx, d) })
	tick(loadCtx, &wg, 2*time.Second, func(ctx context.Context) { reps.revive(ctx, d) })
	every(loadCtx, &wg, m.NamespaceEvery, d.deleteNamespace)
	every(loadCtx, &wg, m.FluentPVCEvery, d.changeFluentPVC)
	every(loadCtx, &wg, m.StripEvery, d.stripBinding)
	every(loadCtx, &wg, m.UnlabelEvery, d.removeLabel)
	every(loadCtx, &wg, m.CopyEvery, d.copyPod)
	every(loadCtx, &wg, m.DebugCopyEvery, d.debugCopy)
	every(loadCtx, &wg, m.ClaimDeleteEvery, d.deleteClaim)
	every(loadCtx, &wg, m.BindingRefusalEvery, d.refuseBindings)
	every(loadCtx, &wg, m.BindingQuotaEvery, d.bindingQuota)
	every(loadCtx, &wg, m.DrainRefusalEvery, d.refuseDrainPods)
	every(loadCtx, &wg, m.NodeEvery, d.deleteNode)
	every(loadCtx, &wg, m.StagedNodeEvery, d.deleteStagedNode)
	every(loadCtx, &wg, m.HolderKillEvery, d.killHolder)
	every(loadCtx, &wg, m.RecreateEvery, d.recreatePod)
	every(loadCtx, &wg, m.LeavePoolEvery, d.leavePool)
	<-loadCtx.Done()
	wg.Wait()
	stopLoad()
	proxy.enabled.Store(false)
	loadEnd := time.Now()
	d.logf("load stopped; settling")
	d.waitLater()

	// Settle: both replicas up, every load pod gone, and then every claim
	// drained or released.
	reps.revive(ctx, d)
	settled := settle(ctx, t, d, c, m.Settle)
	settleEnd := time.Now()

	final, err := dumpState(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	events, err := readAuditLogs(kc.AuditLog())
	if err != nil {
		t.Fatal(err)
	}
	report := oracle.Check(events, final, oracle.Options{
		StuckAfter: 2 * time.Minute, Users: []string{chaosUser}, Operator: operatorUser, Lease: leaderElectionNamespace + "/" + leaderElectionID,
	})

	res := results{
		Mode: m.Name, PerRequestLB: m.PerRequestLB, Start: start, Setup: loadStart.Sub(start), Load: loadEnd.Sub(loadStart), Settle: settleEnd.Sub(loadEnd), Settled: settled,
		Tally: &d.t, Faults: proxy.Counts(), FailedDrains: failedDrains(events), Report: report,
	}
	out := filepath.Join(cluster.RepoRoot(), "test", "chaos", "results", m.Name+".md")
	if m.Name == full.Name {
		out = filepath.Join(cluster.RepoRoot(), "test", "chaos", "results", "latest.md")
	}
	if err := os.WriteFile(out, []byte(res.Markdown()), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("results in %s; driver log %s", out, logPath)
	for _, v := range report.Violations {
		t.Errorf("%s %s: %s", v.Invariant, v.Object, v.Detail)
	}
	if report.Stats.PodsCreated < m.MinPods {
		t.Errorf("only %d labelled pods were created; a %s run needs %d", report.Stats.PodsCreated, m.Name, m.MinPods)
	}
	if n := d.t.CopiesAdmitted.Load(); n > 0 {
		t.Errorf("%d pods created from a copied manifest were admitted", n)
	}
	if n := len(report.Refused); n > 0 {
		t.Errorf("%d labelled pods created without a claim were refused by the pod webhook (audit IDs %v)", n, report.Refused)
	}
	if !settled {
		t.Errorf("the system did not settle within %s", m.Settle)
	}
}

// settle scales the load to zero, asks for no more reservations ahead
// (the live replicas give theirs back; a killed replica's end and are
// reclaimed), deletes every pod left in the load namespaces and waits, up
// to timeout, until no pod, binding, claimed PVC or terminating load
// namespace is left. The holders of warm PVCs stay with them (the oracle
// checks that no other is left).
func settle(ctx context.Context, t *testing.T, d *driver, c client.Client, timeout time.Duration) bool {
	var fpvcs v1alpha1.FluentPVCList
	if err := c.List(ctx, &fpvcs); err != nil {
		t.Fatal(err)
	}
	for i := range fpvcs.Items {
		d.fail("asking for no reservations", c.Patch(ctx, &fpvcs.Items[i], client.RawPatch(types.MergePatchType, []byte(`{"spec":{"pool":{"reserveAhead":0}}}`))))
	}
	var deps appsv1.DeploymentList
	if err := c.List(ctx, &deps); err != nil {
		t.Fatal(err)
	}
	for i := range deps.Items {
		if strings.HasPrefix(deps.Items[i].Namespace, "chaos-") {
			d.fail("scaling down", c.Patch(ctx, &deps.Items[i], client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":0}}`))))
		}
	}
	var left string
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		var pods corev1.PodList
		var bindings v1alpha1.FluentPVCBindingList
		var pvcs corev1.PersistentVolumeClaimList
		var nss corev1.NamespaceList
		for _, l := range []client.ObjectList{&pods, &bindings, &pvcs, &nss} {
			if err := c.List(ctx, l); err != nil {
				return false, nil
			}
		}
		var n int
		for i := range pods.Items {
			if p := &pods.Items[i]; strings.HasPrefix(p.Namespace, "chaos-") && p.Labels[v1alpha1.ComponentLabelKey] != v1alpha1.ComponentHolder {
				n++
				if p.DeletionTimestamp.IsZero() && p.Labels[v1alpha1.ComponentLabelKey] == "" {
					d.fail("deleting a load pod", client.IgnoreNotFound(c.Delete(ctx, p)))
				}
			}
		}
		var claimed, terminating int
		for _, p := range pvcs.Items {
			if p.Labels[v1alpha1.ClaimRoleLabelKey] == v1alpha1.ClaimRoleClaimed {
				claimed++
			}
		}
		for _, ns := range nss.Items {
			if strings.HasPrefix(ns.Name, "chaos-") && !ns.DeletionTimestamp.IsZero() {
				terminating++
			}
		}
		left = fmt.Sprintf("%d pods, %d bindings, %d claimed PVCs, %d terminating namespaces", n, len(bindings.Items), claimed, terminating)
		return n+len(bindings.Items)+claimed+terminating == 0, nil
	})
	d.logf("settle: %s left (%v)", left, err)
	return err == nil
}

// dumpState reads the final state the oracle checks.
func dumpState(ctx context.Context, c client.Client) (oracle.State, error) {
	var s oracle.State
	var pods corev1.PodList
	var pvcs corev1.PersistentVolumeClaimList
	var jobs batchv1.JobList
	var bindings v1alpha1.FluentPVCBindingList
	for _, l := range []client.ObjectList{&pods, &pvcs, &jobs, &bindings} {
		if err := c.List(ctx, l); err != nil {
			return s, err
		}
	}
	s.Pods, s.PVCs, s.Jobs, s.Bindings, s.At = pods.Items, pvcs.Items, jobs.Items, bindings.Items, time.Now()
	return s, nil
}

// readAuditLogs reads the audit log at path and the backups kube-apiserver
// rotated out of it (at 100 MB, its default), oldest first: <name>-<time>
// beside it, whose times sort as their names do.
func readAuditLogs(path string) ([]oracle.Event, error) {
	ext := filepath.Ext(path)
	backups, err := filepath.Glob(strings.TrimSuffix(path, ext) + "-*" + ext)
	if err != nil {
		return nil, err
	}
	sort.Strings(backups)
	var events []oracle.Event
	for _, p := range append(backups, path) {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		e, err := oracle.ReadAudit(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		events = append(events, e...)
	}
	return events, nil
}

// failedDrains counts the drain Jobs that failed, from the audit log.
func failedDrains(events []oracle.Event) int {
	failed := map[string]bool{}
	for _, e := range events {
		if e.ObjectRef == nil || e.ObjectRef.Resource != "jobs" || e.ObjectRef.Subresource != "status" || len(e.ResponseObject) == 0 {
			continue
		}
		var j batchv1.Job
		if json.Unmarshal(e.ResponseObject, &j) != nil || j.Labels[v1alpha1.ComponentLabelKey] != v1alpha1.ComponentDrain {
			continue
		}
		for _, cond := range j.Status.Conditions {
			if cond.Type == batchv1.JobFailed && cond.Status == corev1.ConditionTrue {
				failed[j.Namespace+"/"+j.Name] = true
			}
		}
	}
	return len(failed)
}

// results is what a run writes to test/chaos/results.
type results struct {
	Mode                string
	PerRequestLB        bool
	Start               time.Time
	Setup, Load, Settle time.Duration
	Settled             bool
	Tally               *tally
	Faults              faultCounts
	FailedDrains        int
	Report              oracle.Report
}

func (r results) Markdown() string {
	var b bytes.Buffer
	t := r.Tally
	fmt.Fprintf(&b, "# Chaos run (%s)\n\n", r.Mode)
	fmt.Fprintf(&b, "Started %s; cluster and replicas up in %s, load and faults for %s, then settled in %s (settled: %v). Written by `CHAOS=%s go test ./test/chaos -run TestChaos`.\n\n",
		r.Start.UTC().Format(time.RFC3339), r.Setup.Round(time.Second), r.Load.Round(time.Second), r.Settle.Round(time.Second), r.Settled, r.Mode)
	fmt.Fprintf(&b, "| What | Count |\n|---|---|\n")
	row := func(k string, v any) { fmt.Fprintf(&b, "| %s | %v |\n", k, v) }
	row("labelled pods created (audit log)", r.Report.Stats.PodsCreated)
	row("bare pods created by the driver (the rest from Deployments)", t.BarePods.Load())
	row("bare pods with node-local claims", t.LocalPods.Load())
	row("bare pods with staged claims (CSI storage that attaches)", t.StagedPods.Load())
	row("pods whose sidecar failed", t.SidecarFailPods.Load())
	row("Deployment scalings", t.Scales.Load())
	row("replica SIGKILLs (each restarted)", t.ReplicaKills.Load())
	row("replica rollouts (SIGTERM, restarted)", t.ReplicaRollouts.Load())
	row("webhook balancer", balancerName(r.PerRequestLB))
	row("replica exits on their own (restarted)", t.ReplicaExits.Load())
	row("API requests through the fault proxy", r.Faults.Requests)
	row("API faults: connections reset", r.Faults.Resets)
	row("API faults: 429 answers", r.Faults.Throttled)
	row("API faults: 500 answers", r.Faults.Failed)
	row("API faults: writes made whose answer was lost (500; half with Retry-After, which client-go retries)", r.Faults.Lost)
	row("API faults: delayed requests (up to 1 s)", r.Faults.Delayed)
	row("API faults: watches cut", r.Faults.WatchesCut)
	row("drain Jobs failed", r.FailedDrains)
	row("drains succeeded (audit log)", r.Report.Stats.DrainsSucceeded)
	row("namespaces deleted with pods running", t.NamespacesDeleted.Load())
	row("pool-size changes", t.PoolChanges.Load())
	row("claim-template changes", t.TemplateChanges.Load())
	row("bindings stripped of finalizers and deleted", t.BindingsStripped.Load())
	row("opt-in labels removed from running pods", t.LabelsRemoved.Load())
	row("copied manifests denied", t.CopiesDenied.Load())
	row("same-name re-creations and generateName copies of running pods denied", t.RecreationsDenied.Load())
	row("copied manifests and re-creations admitted", t.CopiesAdmitted.Load())
	row("namespaces left out of the main pool for a window (spec.pool.namespaces)", t.NamespacesLeft.Load())
	row("load namespaces have a LimitRange with container defaults", "yes")
	row("unlabelled copies (kubectl debug --copy-to) denied", t.DebugCopiesDenied.Load())
	row("unlabelled copies admitted (deleted after 3-6 s)", t.DebugCopiesAdmitted.Load())
	row("unlabelled pods created that mount a claim (audit log)", r.Report.Stats.UnlabelledClaimPods)
	row("users' deletions of held claims denied", t.ClaimDeletesDenied.Load())
	row("users' deletions of held claims admitted (a third are tried with the claim webhook unreachable)", t.ClaimDeletesAdmitted.Load())
	row("deleted claims whose binding reported DrainBlocked ClaimDeleting", t.ClaimDeletingReported.Load())
	row("deleted claims given up (pvc-protection removed by the user)", t.ClaimsGivenUp.Load())
	row("windows of refused binding writes (ValidatingAdmissionPolicy)", t.BindingRefusals.Load())
	row("unrecorded pods deleted and stripped of pod-protection", t.PodFinalizersStripped.Load())
	row("windows of a zero quota on bindings", t.BindingQuotas.Load())
	row("windows of refused drain Job pods (ValidatingAdmissionPolicy)", t.DrainPodRefusals.Load())
	row("nodes with node-local claims deleted (made again 30-60 s later)", t.NodesDeleted.Load())
	row("nodes with holders deleted (made again 30-60 s later, with their CSINode)", t.StagedNodesDeleted.Load())
	row("holders killed (deleted, as by a preemption)", t.HoldersKilled.Load())
	row("unexpected driver errors", t.Errors.Load())
	fmt.Fprintf(&b, "\n## Invariants\n\n")
	for _, inv := range oracle.Invariants {
		fmt.Fprintf(&b, "- %s %s: %d violations\n", inv.ID, inv.Title, r.Report.Count(inv.ID))
	}
	fmt.Fprintf(&b, "\n## Oracle report\n\n")
	for _, l := range r.Report.Markdown() {
		b.WriteString(l + "\n")
	}
	return b.String()
}
