package main

import (
	"context"
	"errors"
	"fmt"
	"io"
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

// realNodeResult is what the real-node tier measured, or why it did not run.
type realNodeResult struct {
	Skipped          string         `json:"skipped,omitempty"`
	N                int            `json:"n"`
	ClusterUpSeconds float64        `json:"clusterUpSeconds"`
	PoolFillSeconds  float64        `json:"poolFillSeconds"`
	Startup          startupRuns    `json:"startup"`
	StartupRatios    []startupRatio `json:"startupRatios"`
	WallSeconds      float64        `json:"wallSeconds"`
}

// runRealNode runs the real-node tier into res.RealNode: its own cluster
// and operator, then modes a, d and e, N each, one pod at a time.
func runRealNode(ctx context.Context, cfg config, res *results, progress io.Writer) (err error) {
	r := &realNodeResult{N: cfg.RealN}
	res.RealNode = r
	started := time.Now()
	defer func() { r.WallSeconds = time.Since(started).Seconds() }()
	e := &env{cfg: cfg, out: progress, real: true}
	if why := cluster.RealNodeUnavailable(cluster.RepoRoot()); why != "" {
		r.Skipped = why
		e.progress("tier skipped: %s", why)
		return nil
	}
	kc, err := cluster.Up(ctx, cluster.Options{Name: cfg.Name + "-real", ProvisionerDelay: cfg.Delay, RealNode: true, Out: progress})
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
	r.ClusterUpSeconds = time.Since(started).Seconds()
	if e.op, err = cluster.RunOperator(ctx, kc, cluster.OperatorOptions{Args: cfg.OperatorArgs}); err != nil {
		return fmt.Errorf("starting the operator: %w", err)
	}
	informerCtx, stopInformers := context.WithCancel(ctx)
	defer stopInformers()
	if err := e.startInformers(informerCtx); err != nil {
		return err
	}
	return e.realStartup(ctx, r)
}

// realStartup fills mode d's pool and prepares mode e's claims, then runs
// a, d and e one after another, each alone on a quiet node.
func (e *env) realStartup(ctx context.Context, r *realNodeResult) error {
	n := r.N
	for _, mode := range realModes {
		if err := e.createNamespace(ctx, startupNamespace(mode, false)); err != nil {
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
	for _, mode := range realModes {
		run, err := e.measureStartup(ctx, mode, false, n)
		if err != nil {
			run.Error = err.Error()
			errs = append(errs, fmt.Errorf("mode %s: %w", mode, err))
		}
		e.progress("mode %s %-10s p50 %s p90 %s p99 %s (wall %.1fs) %s", run.Mode, run.kind(), secs(run.Stats.P50), secs(run.Stats.P90), secs(run.Stats.P99), run.Wall, run.Error)
		r.Startup = append(r.Startup, run)
		if err := e.cleanupStartup(ctx, startupNamespace(mode, false), mode, n); err != nil {
			return errors.Join(append(errs, err)...)
		}
	}
	return errors.Join(errs...)
}
