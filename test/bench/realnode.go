package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

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
	CSI              *csiDelays     `json:"csi,omitempty"`
	ClusterUpSeconds float64        `json:"clusterUpSeconds"`
	PoolFillSeconds  float64        `json:"poolFillSeconds"`
	Startup          startupRuns    `json:"startup"`
	StartupRatios    []startupRatio `json:"startupRatios"`
	WallSeconds      float64        `json:"wallSeconds"`
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
// and CSI storage (csiOptions), and its own operator, then modes a-e, N
// each, one pod at a time (b beside c with -parallel-slow), on
// StorageClassCSI.
func runCSI(ctx context.Context, cfg config, res *results, progress io.Writer) error {
	r := &realNodeResult{N: cfg.CSIN, StorageClass: cluster.StorageClassCSI, CSI: delaysOf(csiOptions)}
	res.CSI = r
	return runRealTier(ctx, cfg, r, &env{cfg: cfg, out: progress, real: true, csi: true}, "-csi", csiModes)
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
		if err := waitCSINode(ctx, kc); err != nil {
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

// realStartup fills mode d's pool and prepares mode e's claims, then runs
// a, d and e one after another, each alone on a quiet node, then b and c
// (if among modes), side by side with cfg.ParallelSlow, each one pod at a
// time.
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
	hitNS, ownNS := startupNamespace(modeHit, false), startupNamespace(modeOwnClaim, false)
	e.progress("filling the warm pool of mode d (%d)", n)
	fillStart := time.Now()
	if err := e.createFluentPVC(ctx, fpvcHit, int32(n), hitNS); err != nil {
		return err
	}
	if err := e.waitPoolWarm(ctx, fpvcHit, int32(n), hitNS); err != nil {
		return err
	}
	r.PoolFillSeconds = time.Since(fillStart).Seconds()
	e.progress("pool full in %.1fs", r.PoolFillSeconds)
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
			e.progress("mode %s p50s: create call %s, scheduling %s, to VolumeAttachment %s, attach %s, stage + publish %s (to stage %s, stage %s, publish %s), container start %s",
				run.Mode, secs(run.CreateCall.P50), secs(run.ToScheduled.P50), secs(sp.ToAttach.P50), secs(sp.Attach.P50), secs(sp.StagePublish.P50),
				secs(sp.ToStage.P50), secs(sp.Stage.P50), secs(sp.Publish.P50), secs(sp.ContainerStart.P50))
		}
		r.Startup = append(r.Startup, run)
	}
	// cleanup cleans up after the runs of modes; on the CSI tier it also
	// waits until every volume is detached, so that the next run starts
	// on a quiet node without a detach in its background.
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
		if err := e.waitNoAttachments(ctx); err != nil {
			return err
		}
		e.progress("volumes detached in %.1fs", time.Since(start).Seconds())
		return nil
	}
	var slow []string
	for _, mode := range modes {
		if mode == modeEphemeral || mode == modeMiss {
			slow = append(slow, mode)
			continue
		}
		record(e.measureStartup(ctx, mode, false, n))
		if err := cleanup(mode); err != nil {
			return errors.Join(append(errs, err)...)
		}
	}
	if e.cfg.ParallelSlow && len(slow) > 1 {
		runs := make([]startupRun, len(slow))
		runErrs := make([]error, len(slow))
		var wg sync.WaitGroup
		for i, mode := range slow {
			wg.Go(func() { runs[i], runErrs[i] = e.measureStartup(ctx, mode, false, n) })
		}
		wg.Wait()
		for i := range slow {
			record(runs[i], runErrs[i])
		}
		if err := cleanup(slow...); err != nil {
			return errors.Join(append(errs, err)...)
		}
		return errors.Join(errs...)
	}
	for _, mode := range slow {
		record(e.measureStartup(ctx, mode, false, n))
		if err := cleanup(mode); err != nil {
			return errors.Join(append(errs, err)...)
		}
	}
	return errors.Join(errs...)
}
