package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/st-tech/fluent-pvc-operator/pool"
	"github.com/st-tech/fluent-pvc-operator/test/cluster"
	"github.com/st-tech/fluent-pvc-operator/webhook"
)

// The nodes phase: checkout latency on the base cluster and again with
// ExtraNodes fake nodes added, same pods, same concurrency, side by side.
const (
	fpvcNodes       = "bench-nodes"
	nodesBaseNS     = "bench-nodes-base"
	nodesManyNS     = "bench-nodes-many"
	nodesPinnedZone = "zone-b"
	// nodesConcurrency is the concurrency of both levels.
	nodesConcurrency = 10
)

// nodesResult compares checkouts on the base cluster with checkouts after
// adding ExtraNodes nodes.
type nodesResult struct {
	BaseNodes  int            `json:"baseNodes"`
	ExtraNodes int            `json:"extraNodes"`
	Base       admissionLevel `json:"base"`
	Many       admissionLevel `json:"many"`
	// AddSeconds is how long the extra nodes took to be created and Ready,
	// QuietSeconds how long after that the nodes' writes took to ebb
	// (waitNodesQuiet).
	AddSeconds   float64 `json:"addSeconds"`
	QuietSeconds float64 `json:"quietSeconds"`
	// AddReconciles and AddOperatorCPU are the FluentPVC reconciles the
	// operator made, and the CPU seconds it used, from the first node's
	// creation to the end of that wait: what a scale-up costs it.
	AddReconciles  float64 `json:"addReconciles"`
	AddOperatorCPU float64 `json:"addOperatorCPUSeconds"`
}

// quietNodeWrites is the most writes of nodes (creates, updates,
// patches and applies, status included) per second that waitNodesQuiet
// calls quiet.
const quietNodeWrites = 10

// waitNodesQuiet waits until the writes of nodes at the API server have
// stayed below quietNodeWrites a second for two seconds in a row, and
// says how long that took. Nodes turn Ready while the control plane and
// kwok still label, taint and patch the newest ones; the checkout with
// many nodes is measured after that, not beside it. A scrape that fails
// counts as a second that is not quiet.
func (e *env) waitNodesQuiet(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	writes := func() (float64, time.Time, error) {
		s, err := scrapeAPIServer(ctx, e.kc.Clientset)
		if err != nil {
			return 0, time.Time{}, err
		}
		n := 0.0
		for _, verb := range []string{"POST", "PUT", "PATCH", "APPLY"} {
			n += s.sum("apiserver_request_total", map[string]string{"verb": verb, "resource": "nodes"})
		}
		return n, time.Now(), nil
	}
	last, lastAt, _ := writes() // a failed scrape leaves lastAt zero: the next one starts afresh
	calm, rate := 0, 0.0
	err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, false, func(ctx context.Context) (bool, error) {
		n, at, err := writes()
		if err != nil {
			calm, lastAt = 0, time.Time{}
			return false, nil
		}
		if lastAt.IsZero() {
			last, lastAt = n, at
			return false, nil
		}
		rate, last, lastAt = (n-last)/at.Sub(lastAt).Seconds(), n, at
		if rate < quietNodeWrites {
			calm++
		} else {
			calm = 0
		}
		return calm >= 2, nil
	})
	if err != nil {
		return time.Since(start), fmt.Errorf("waiting for the writes of nodes to ebb (%.0f a second at the last scrape): %w", rate, err)
	}
	d := time.Since(start)
	e.progress("writes of nodes below %d a second after %.1fs more", quietNodeWrites, d.Seconds())
	return d, nil
}

// nodesPod is the i-th pod of a nodes level: every other one is pinned to
// one zone by a nodeSelector, so that the checkout must work out where it
// can run and skip the other zones' warm PVCs.
func nodesPod(p *corev1.Pod, i int) {
	if i%2 == 1 {
		p.Spec.NodeSelector = map[string]string{pool.ZoneLabelKey: nodesPinnedZone}
	}
}

// nodesPhase measures hits at nodesConcurrency with the cluster's own
// nodes, then adds ExtraNodes fake nodes (spread over the zones) and
// measures again. Both pools are filled ahead, twice the pods each, so
// that the pinned half finds warm PVCs of its zone.
func (e *env) nodesPhase(ctx context.Context, res *results) error {
	pods := e.cfg.AdmissionPods
	size := int32(2 * pods)
	for _, ns := range []string{nodesBaseNS, nodesManyNS} {
		if err := e.createNamespace(ctx, ns); err != nil {
			return err
		}
	}
	if err := e.createFluentPVC(ctx, fpvcNodes, size, nodesBaseNS, nodesManyNS); err != nil {
		return err
	}
	if err := e.waitPoolWarm(ctx, fpvcNodes, size, nodesBaseNS, nodesManyNS); err != nil {
		return err
	}
	var nodes corev1.NodeList
	if err := e.cl.List(ctx, &nodes); err != nil {
		return err
	}
	r := &nodesResult{BaseNodes: len(nodes.Items), ExtraNodes: e.cfg.ExtraNodes}
	res.Nodes = r
	var errs []error
	measure := func(ns string, nodes int) admissionLevel {
		if err := e.settle(ctx); err != nil {
			errs = append(errs, err)
		}
		l, err := e.admissionLevelOf(ctx, webhook.CheckoutHit, nodesConcurrency, e.cfg.AdmissionPods, ns, fpvcNodes, nodesPod)
		if err != nil {
			l.Error = err.Error()
			errs = append(errs, fmt.Errorf("nodes %s: %w", ns, err))
		}
		if l.Note != "" {
			res.Notes = append(res.Notes, fmt.Sprintf("nodes %s: %s", ns, l.Note))
		}
		e.progress("nodes %s (%d nodes): checkout p50 %s p99 %s, webhook p50 %s p99 %s, client p50 %s p99 %s",
			ns, nodes, ms(l.CheckoutDur.P50), ms(l.CheckoutDur.P99), ms(l.Webhook.P50), ms(l.Webhook.P99), ms(l.Client.P50), ms(l.Client.P99))
		return l
	}
	r.Base = measure(nodesBaseNS, r.BaseNodes)
	if err := e.dropPoolNamespace(ctx, fpvcNodes, nodesBaseNS); err != nil {
		return errors.Join(append(errs, err)...)
	}

	addBefore, scrapeErr := e.operatorScrape(ctx)
	start := time.Now()
	perZone := (e.cfg.ExtraNodes + len(cluster.DefaultZones) - 1) / len(cluster.DefaultZones)
	// Numbered after the cluster's own nodes (NodesPerZone 2).
	extra := cluster.NodeSet{Zones: cluster.DefaultZones, PerZone: perZone, First: 100}
	if err := e.kc.CreateNodes(ctx, extra); err != nil {
		return errors.Join(append(errs, err)...)
	}
	want := r.BaseNodes + perZone*len(cluster.DefaultZones)
	r.ExtraNodes = want - r.BaseNodes
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		var l corev1.NodeList
		if err := e.cl.List(ctx, &l); err != nil {
			return false, nil
		}
		ready := 0
		for _, n := range l.Items {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return ready >= want, nil
	}); err != nil {
		return errors.Join(append(errs, fmt.Errorf("waiting for %d Ready nodes: %w", want, err))...)
	}
	r.AddSeconds = time.Since(start).Seconds()
	e.progress("%d nodes Ready after %.1fs", want, r.AddSeconds)
	quiet, err := e.waitNodesQuiet(ctx)
	if err != nil {
		// Measured all the same, and said so.
		res.Notes = append(res.Notes, fmt.Sprintf("nodes: the level with %d nodes ran before the writes of nodes ebbed: %v", want, err))
	}
	r.QuietSeconds = quiet.Seconds()
	if addAfter, err := e.operatorScrape(ctx); err == nil && scrapeErr == nil {
		reconciles := func(s scrape) float64 {
			return s.sum("controller_runtime_reconcile_total", map[string]string{"controller": "fluentpvc"})
		}
		r.AddReconciles = reconciles(addAfter) - reconciles(addBefore)
		r.AddOperatorCPU = addAfter.sum("process_cpu_seconds_total", nil) - addBefore.sum("process_cpu_seconds_total", nil)
		e.progress("while the nodes were added: %.0f FluentPVC reconciles, %.2fs of the operator's CPU", r.AddReconciles, r.AddOperatorCPU)
	}
	r.Many = measure(nodesManyNS, want)

	// The extra nodes go, and with them the phase's pools and pods.
	for _, zone := range extra.Zones {
		for i := extra.First; i < extra.First+extra.PerZone; i++ {
			if err := e.kc.Clientset.CoreV1().Nodes().Delete(ctx, cluster.NodeName(zone, i), metav1.DeleteOptions{}); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := e.cl.Delete(ctx, fluentPVCRef(fpvcNodes)); err != nil {
		errs = append(errs, err)
	}
	for _, ns := range []string{nodesBaseNS, nodesManyNS} {
		if err := e.deleteNamespace(ctx, ns, true); err != nil {
			errs = append(errs, err)
		}
	}
	if err := e.deleteFluentPVC(ctx, fpvcNodes); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// ratio is many/base of pick, NaN when either is missing.
func (r *nodesResult) ratio(pick func(admissionLevel) float64) float64 {
	if r == nil || r.Base.Error != "" || r.Many.Error != "" {
		return math.NaN()
	}
	return pick(r.Many) / pick(r.Base)
}
