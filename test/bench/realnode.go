package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/st-tech/fluent-pvc-operator/pool"
	"github.com/st-tech/fluent-pvc-operator/test/cluster"
)

// The real-node tier: a cluster with a kubelet node (cluster.RealNodeName)
// that runs real busybox containers with containerd, beside kwok's nodes,
// which are tainted, so that the measured pods run on the real node.
const (
	// realMountPath is where the real sidecar writes (the sample's
	// pvcVolumeMountPath).
	realMountPath = "/mnt/fluent-pvc"
	// realSidecarScript appends a line a second to the claim until TERM.
	realSidecarScript = `trap 'exit 0' TERM; while true; do date >> ` + realMountPath + `/x; sleep 1 & wait $!; done`
	// realDrainScript is the finalizer Job: it reads the buffer and exits.
	realDrainScript = `wc -l ` + realMountPath + `/x 2>/dev/null || echo empty`
)

// realModes are the start-up modes measured on the real node.
var realModes = []string{modePlain, modeHit, modeOwnClaim}

// realNodeResult is what a tier on the real node measured, or why it did
// not run.
type realNodeResult struct {
	Skipped string `json:"skipped,omitempty"`
	N       int    `json:"n"`
	// StorageClass is the class of the tier's claims.
	StorageClass string `json:"storageClass,omitempty"`
	// CSI are the CSI driver's delays on the CSI tier.
	CSI              *csiDelays `json:"csi,omitempty"`
	ClusterUpSeconds float64    `json:"clusterUpSeconds"`
	PoolFillSeconds  float64    `json:"poolFillSeconds"`
	// PoolStagedSeconds is from the pools' creation until d's is staged
	// (CSI tier).
	PoolStagedSeconds float64        `json:"poolStagedSeconds,omitempty"`
	Startup           startupRuns    `json:"startup"`
	StartupRatios     []startupRatio `json:"startupRatios"`
	WallSeconds       float64        `json:"wallSeconds"`
	// AttachSlots is how many of the CSI driver's volumes the real node
	// takes (its CSINode's allocatable count), on the CSI tier.
	AttachSlots int `json:"attachSlots,omitempty"`
}

// runRealNode runs the real-node tier into res.RealNode: its own cluster
// and operator, then modes a, d and e, N each, one pod at a time, on
// StorageClass standard (the test provisioner's hostPath volumes).
func runRealNode(ctx context.Context, cfg config, res *results, progress io.Writer) error {
	r := &realNodeResult{N: cfg.RealN, StorageClass: cluster.StorageClassStandard}
	res.RealNode = r
	return runRealTier(ctx, cfg, r, &env{cfg: cfg, out: progress, real: true}, "-real", realModes)
}

// runCSI runs the CSI tier into res.CSI: its own cluster with the real node
// and CSI storage (csiOptions), and its own operator, then modes a-g, N
// each, one pod at a time (b beside c with -parallel-slow), on
// StorageClassCSI.
func runCSI(ctx context.Context, cfg config, res *results, progress io.Writer) error {
	r := &realNodeResult{N: cfg.CSIN, StorageClass: cluster.StorageClassCSI, CSI: delaysOf(csiOptions)}
	res.CSI = r
	cfg.OperatorArgs = csiOperatorArgs(cfg.OperatorArgs, cfg.CSIN)
	return runRealTier(ctx, cfg, r, &env{cfg: cfg, out: progress, real: true, csi: true}, "-csi", csiModes)
}

// csiOperatorArgs are the operator's args on the CSI tier: args, and
// --stage-per-node=n where the default would not stage all n warm PVCs of
// a pool on one node (modes d and g), unless args set it.
func csiOperatorArgs(args []string, n int) []string {
	if n <= pool.DefaultStagePerNode || slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(strings.TrimLeft(a, "-"), "stage-per-node") }) {
		return args
	}
	return append(slices.Clone(args), fmt.Sprintf("--stage-per-node=%d", n))
}

// runRealTier brings up a cluster with the real node (named cfg.Name plus
// suffix; with CSI storage if e.csi) and the operator, measures modes into
// r, and brings the cluster down. Where this machine cannot run the real
// node, it records why in r.Skipped and returns nil.
func runRealTier(ctx context.Context, cfg config, r *realNodeResult, e *env, suffix string, modes []string) (err error) {
	started := time.Now()
	defer func() { r.WallSeconds = time.Since(started).Seconds() }()
	if why := cluster.RealNodeUnavailable(cluster.RepoRoot()); why != "" {
		r.Skipped = why
		e.progress("tier skipped: %s", why)
		return nil
	}
	kc, err := cluster.Up(ctx, cluster.Options{Name: cfg.Name + suffix, ProvisionerDelay: cfg.Delay, RealNode: true, Out: e.out})
	if err != nil {
		return fmt.Errorf("bringing the real-node cluster up: %w", err)
	}
	e.kc = kc
	defer func() {
		if cfg.Keep {
			e.progress("keeping cluster %s: export KUBECONFIG=%s", kc.Name, kc.Kubeconfig)
			return
		}
		err = errors.Join(err, kc.Down())
	}()
	if e.csi {
		err := kc.StartCSI(ctx, csiOptions)
		if errors.Is(err, cluster.ErrCSISocketPathTooLong) {
			r.Skipped = err.Error()
			e.progress("tier skipped: %s", err)
			return nil
		}
		if err != nil {
			return fmt.Errorf("starting the CSI driver: %w", err)
		}
		if r.AttachSlots, err = waitCSINode(ctx, kc); err != nil {
			return err
		}
	}
	r.ClusterUpSeconds = time.Since(started).Seconds()
	if e.op, err = cluster.RunOperator(ctx, kc, cluster.OperatorOptions{Args: cfg.OperatorArgs}); err != nil {
		return fmt.Errorf("starting the operator: %w", err)
	}
	informerCtx, stopInformers := context.WithCancel(ctx)
	defer stopInformers()
	if err := e.startInformers(informerCtx); err != nil {
		return err
	}
	return e.realStartup(ctx, r, modes)
}

// realStartup fills the warm pools (on the CSI tier d's staged on the real
// node) and prepares mode e's claims, then runs the modes one pod at a
// time: on the real node's tier taking turns (measureTurns); on the CSI
// tier one after another, each alone, except b and c (if among modes),
// which run side by side with cfg.ParallelSlow once the pools of d and f
// are gone, and g, which runs last (measureMoved).
func (e *env) realStartup(ctx context.Context, r *realNodeResult, modes []string) error {
	n := r.N
	for _, mode := range modes {
		if err := e.createNamespace(ctx, startupNamespace(mode, false)); err != nil {
			return err
		}
	}
	if slices.Contains(modes, modeMiss) {
		if err := e.createFluentPVC(ctx, fpvcMiss, 0); err != nil {
			return err
		}
	}
	pooled := []string{modeHit}
	if slices.Contains(modes, modeUnstaged) {
		pooled = append(pooled, modeUnstaged)
	}
	hitNS, ownNS := startupNamespace(modeHit, false), startupNamespace(modeOwnClaim, false)
	e.progress("filling the warm pools of modes %v (%d each)", pooled, n)
	fillStart := time.Now()
	for _, mode := range pooled {
		if err := e.createFluentPVC(ctx, poolOf(mode), int32(n), startupNamespace(mode, false)); err != nil {
			return err
		}
	}
	for _, mode := range pooled {
		if err := e.waitPoolWarm(ctx, poolOf(mode), int32(n), startupNamespace(mode, false)); err != nil {
			return err
		}
	}
	r.PoolFillSeconds = time.Since(fillStart).Seconds()
	e.progress("pools full in %.1fs", r.PoolFillSeconds)
	if e.csi {
		if err := e.waitPoolStaged(ctx, fpvcHit, hitNS, n, cluster.RealNodeName); err != nil {
			return err
		}
		r.PoolStagedSeconds = time.Since(fillStart).Seconds()
		e.progress("pool of mode d staged on %s in %.1fs", cluster.RealNodeName, r.PoolStagedSeconds)
	}
	if err := e.prepareOwnClaims(ctx, ownNS, n); err != nil {
		return err
	}
	if err := e.settle(ctx); err != nil {
		return err
	}
	var errs []error
	record := func(run startupRun, err error) {
		if err != nil {
			run.Error = err.Error()
			errs = append(errs, fmt.Errorf("mode %s: %w", run.Mode, err))
		}
		e.progress("mode %s %-10s p50 %s p90 %s p99 %s (wall %.1fs) %s", run.Mode, run.kind(), secs(run.Stats.P50), secs(run.Stats.P90), secs(run.Stats.P99), run.Wall, run.Error)
		if sp := run.Split; sp != nil {
			e.progress("mode %s p50s: create call %s, scheduling %s, detach elsewhere %s, to VolumeAttachment %s, attach %s, stage + publish %s (to stage %s, stage %s, publish %s), bound to published %s, container start %s; %d staged, %d elsewhere at the create call",
				run.Mode, secs(run.CreateCall.P50), secs(run.ToScheduled.P50), secs(sp.Detach.P50), secs(sp.ToAttach.P50), secs(sp.Attach.P50), secs(sp.StagePublish.P50),
				secs(sp.ToStage.P50), secs(sp.Stage.P50), secs(sp.Publish.P50), secs(sp.ToPublish.P50), secs(sp.ContainerStart.P50), sp.Prestaged, sp.Elsewhere)
		}
		if run.StagedHits != nil {
			e.progress("mode %s staged hits %v, holders removed %v", run.Mode, run.StagedHits, run.HoldersRemoved)
		}
		r.Startup = append(r.Startup, run)
	}
	// cleanup cleans up after the runs of modes; on the CSI tier it also
	// waits until the only volumes attached are warm PVCs' that their
	// holders keep, so that the next run starts on a quiet node without
	// a detach or attach in its background.
	cleanup := func(modes ...string) error {
		for _, mode := range modes {
			if err := e.cleanupStartup(ctx, startupNamespace(mode, false), mode, n); err != nil {
				return err
			}
		}
		if !e.csi {
			return nil
		}
		start := time.Now()
		if err := e.waitQuiet(ctx); err != nil {
			return err
		}
		e.progress("volumes detached in %.1fs", time.Since(start).Seconds())
		return nil
	}
	// sideBySide runs modes side by side, each one pod at a time.
	sideBySide := func(modes []string) ([]startupRun, []error) {
		runs := make([]startupRun, len(modes))
		runErrs := make([]error, len(modes))
		var wg sync.WaitGroup
		for i, mode := range modes {
			var before func(context.Context) error
			if e.csi && mode == modeHit {
				before = e.waitHoldersLeft
			}
			wg.Go(func() { runs[i], runErrs[i] = e.measureStartupEach(ctx, mode, false, n, before) })
		}
		wg.Wait()
		return runs, runErrs
	}
	// measureWith runs modes with run (sideBySide, or measureTurns),
	// cleans up after them, and records them with the operator's counts
	// over the runs and the clean-up.
	measureWith := func(run func([]string) ([]startupRun, []error), modes ...string) error {
		before := e.readHolderCounts(ctx)
		runs, runErrs := run(modes)
		err := cleanup(modes...)
		after := e.readHolderCounts(ctx)
		for i := range modes {
			runs[i].addCounts(before, after)
			record(runs[i], runErrs[i])
		}
		return err
	}
	measure := func(modes ...string) error { return measureWith(sideBySide, modes...) }
	var slow, quick []string
	for _, mode := range modes {
		switch mode {
		case modeEphemeral, modeMiss:
			slow = append(slow, mode)
		case modeMoved:
		default:
			quick = append(quick, mode)
		}
	}
	if e.csi {
		// Each alone: d's pods wait for the last one's holder to leave.
		for _, mode := range quick {
			if err := measure(mode); err != nil {
				return errors.Join(append(errs, err)...)
			}
		}
	} else if err := measureWith(func(modes []string) ([]startupRun, []error) { return e.measureTurns(ctx, modes, n) }, quick...); err != nil {
		return errors.Join(append(errs, err)...)
	}
	if e.csi {
		// d's holders keep n volumes attached to the real node, and the
		// scheduler does not preempt holders for attach slots (the
		// driver's 16 on the node): b beside c need 2n more.
		if err := e.dropPools(ctx); err != nil {
			return errors.Join(append(errs, err)...)
		}
	}
	if e.cfg.ParallelSlow && len(slow) > 1 {
		if err := measure(slow...); err != nil {
			return errors.Join(append(errs, err)...)
		}
	} else {
		for _, mode := range slow {
			if err := measure(mode); err != nil {
				return errors.Join(append(errs, err)...)
			}
		}
	}
	if slices.Contains(modes, modeMoved) {
		run, err := e.measureMoved(ctx, n)
		if err != nil && run.Stats.N > 0 {
			// Measured; what failed came after.
			errs = append(errs, fmt.Errorf("mode %s, after its run: %w", modeMoved, err))
			err = nil
		}
		record(run, err)
	}
	return errors.Join(errs...)
}
