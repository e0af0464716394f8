package main

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The idle phase's pools: idlePools FluentPVCs, each with a pool of
// idleSize warm PVCs in each of config.IdleNamespaces namespaces, which
// the operator reserves ahead of their pods as the chart's --reserve-ahead
// asks. Nothing else runs while it counts the operator's writes for
// config.IdleWindow.
const (
	idlePools = 10
	idleSize  = 2
)

// idleResult is what the operator writes while its pools wait for pods.
type idleResult struct {
	Pools      int   `json:"pools"`
	Namespaces int   `json:"namespaces"`
	Size       int32 `json:"size"`
	// Seconds is the window's length.
	Seconds float64 `json:"seconds"`
	// PerMinute is rest_client_requests_total's delta over the window by
	// method, per minute; WritesPerMinute sums its writeVerbs.
	PerMinute       map[string]float64 `json:"perMinute"`
	WritesPerMinute float64            `json:"writesPerMinute"`
	Error           string             `json:"error,omitempty"`
}

func (e *env) idlePhase(ctx context.Context, res *results) error {
	r, err := e.idle(ctx)
	if err != nil {
		r.Error = err.Error()
	}
	e.progress("idle: %.1f writes per minute %v, %d pools x %d namespaces of %d", r.WritesPerMinute, r.PerMinute, r.Pools, r.Namespaces, r.Size)
	res.Idle = &r
	return err
}

func (e *env) idle(ctx context.Context) (idleResult, error) {
	r := idleResult{Pools: idlePools, Namespaces: e.cfg.IdleNamespaces, Size: idleSize}
	nss := make([]string, e.cfg.IdleNamespaces)
	for i := range nss {
		nss[i] = fmt.Sprintf("bench-idle-%d", i)
		if err := e.createNamespace(ctx, nss[i]); err != nil {
			return r, err
		}
	}
	names := make([]string, idlePools)
	for i := range names {
		names[i] = fmt.Sprintf("bench-idle-%d", i)
		if err := e.createFluentPVC(ctx, names[i], idleSize, nss...); err != nil {
			return r, err
		}
	}
	measure := func() error {
		for _, name := range names {
			if err := e.waitPoolWarm(ctx, name, idleSize, nss...); err != nil {
				return err
			}
		}
		if err := e.settle(ctx); err != nil {
			return err
		}
		before, err := e.operatorScrape(ctx)
		if err != nil {
			return err
		}
		start := time.Now()
		// The window is wall time on purpose: what is measured is a rate.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(e.cfg.IdleWindow):
		}
		after, err := e.operatorScrape(ctx)
		if err != nil {
			return err
		}
		r.Seconds = time.Since(start).Seconds()
		b, a := before.requestsByMethod(), after.requestsByMethod()
		if len(a) == 0 {
			return errors.New("the operator exposes no rest_client_requests_total")
		}
		r.PerMinute = map[string]float64{}
		for method, v := range a {
			if d := v - b[method]; d > 0 {
				r.PerMinute[method] = d / (r.Seconds / 60)
			}
		}
		for _, v := range writeVerbs {
			r.WritesPerMinute += r.PerMinute[v]
		}
		return nil
	}
	errs := []error{measure()}
	for _, name := range names {
		errs = append(errs, e.deleteFluentPVC(ctx, name))
	}
	for i, ns := range nss {
		errs = append(errs, e.deleteNamespace(ctx, ns, i == len(nss)-1))
	}
	return r, errors.Join(errs...)
}
