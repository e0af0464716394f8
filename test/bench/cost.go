package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/st-tech/fluent-pvc-operator/webhook"
)

const fpvcCost = "bench-cost"

func costNamespace(kind string) string { return "bench-cost-" + kind }

// costResult is the operator's API requests per pod over whole lifecycles
// (admission, Running, deleted, drained, and for hits the pool refilled).
type costResult struct {
	Checkout string `json:"checkout"`
	Pods     int    `json:"pods"`
	// PerPod is rest_client_requests_total's delta by method, per pod.
	PerPod map[string]float64 `json:"perPod"`
	// Writes is POST+PUT+PATCH+DELETE per pod.
	Writes float64 `json:"writes"`
	// ByResource is the same requests by verb and resource, from
	// kube-apiserver's audit log (auditPolicy).
	ByResource *auditTally `json:"byResource,omitempty"`
	Seconds    float64     `json:"seconds"`
	Note       string      `json:"note,omitempty"`
	Error      string      `json:"error,omitempty"`
}

var writeVerbs = []string{"POST", "PUT", "PATCH", "DELETE"}

func (e *env) costPhase(ctx context.Context, res *results) error {
	if err := e.createFluentPVC(ctx, fpvcMiss, 0); err != nil { // made by start-up, unless -phases skips it
		return err
	}
	var errs []error
	for _, kind := range []string{webhook.CheckoutMiss, webhook.CheckoutHit} {
		c, err := e.cost(ctx, kind)
		if err != nil {
			c.Error = err.Error()
			errs = append(errs, fmt.Errorf("cost of a %s: %w", kind, err))
		}
		e.progress("cost per %s: %.2f writes per pod %v %s", kind, c.Writes, c.PerPod, c.Error)
		if c.Note != "" {
			res.Notes = append(res.Notes, fmt.Sprintf("cost of a %s: %s", kind, c.Note))
		}
		res.Cost = append(res.Cost, c)
	}
	return errors.Join(errs...)
}

func (e *env) cost(ctx context.Context, kind string) (costResult, error) {
	k := e.cfg.CostPods
	c := costResult{Checkout: kind, Pods: k}
	ns := costNamespace(kind)
	if err := e.createNamespace(ctx, ns); err != nil {
		return c, err
	}
	fpvc := fpvcMiss
	if kind == webhook.CheckoutHit {
		fpvc = fpvcCost
		if err := e.createFluentPVC(ctx, fpvc, int32(k), ns); err != nil {
			return c, err
		}
		if err := e.waitPoolWarm(ctx, fpvc, int32(k), ns); err != nil {
			return c, err
		}
	}
	if err := e.settle(ctx); err != nil {
		return c, err
	}
	from := time.Now() // of the audit log's window
	before, err := e.operatorScrape(ctx)
	if err != nil {
		return c, err
	}
	start := time.Now()
	pods := make([]*corev1.Pod, k)
	for i := range pods {
		pods[i] = fluentPod(ns, fmt.Sprintf("cost-%d", i), fpvc)
	}
	// One at a time, so that every checkout of the hit phase finds a
	// warm PVC (concurrent ones can miss; see the start-up bursts).
	if _, _, err := e.createPods(ctx, pods, 1); err != nil {
		return c, err
	}
	waitCtx, cancel := context.WithTimeout(ctx, podTimeout)
	defer cancel()
	for _, p := range pods {
		if _, _, err := e.running.await(waitCtx, p); err != nil {
			return c, err
		}
	}
	if err := e.deletePodsAndDrain(ctx, ns); err != nil {
		return c, err
	}
	if kind == webhook.CheckoutHit {
		if err := e.waitPoolWarm(ctx, fpvc, int32(k), ns); err != nil {
			return c, err
		}
	}
	if err := e.settle(ctx); err != nil {
		return c, err
	}
	after, err := e.operatorScrape(ctx)
	if err != nil {
		return c, err
	}
	to := time.Now()
	c.Seconds = time.Since(start).Seconds()
	b, a := before.requestsByMethod(), after.requestsByMethod()
	c.PerPod = map[string]float64{}
	for method, v := range a {
		if d := v - b[method]; d > 0 {
			c.PerPod[method] = d / float64(k)
		}
	}
	for _, v := range writeVerbs {
		c.Writes += c.PerPod[v]
	}
	const total = "fluentpvc_pool_checkouts_total"
	got := int(math.Round(after.sum(total, map[string]string{"result": kind}) - before.sum(total, map[string]string{"result": kind})))
	var errs []error
	var notes []string
	if got != k {
		// Measured all the same: a fact about the checkouts.
		notes = append(notes, fmt.Sprintf("%d of %d checkouts were %ss", got, k, kind))
	}
	names := make([]string, k)
	for i, p := range pods {
		names[i] = p.Name
	}
	if t, err := e.auditTally(auditQuery{From: from, To: to, Pods: k, Namespace: ns, Admitted: names}); err != nil {
		errs = append(errs, fmt.Errorf("reading the audit log: %w", err))
	} else {
		c.ByResource = &t
		// The policy leaves out writes the operator is not known to make;
		// and a request that never reached the API server is counted by
		// the operator only.
		if d := t.WriteTotal() + sumValues(t.ElsewhereWrites) - c.Writes; math.Abs(d) >= 0.05 {
			notes = append(notes, fmt.Sprintf("the audit log has %.2f writes per pod (%.2f elsewhere), rest_client_requests_total %.2f", t.WriteTotal(), sumValues(t.ElsewhereWrites), c.Writes))
		}
		if t.Elsewhere > 0 {
			// rest_client_requests_total counts them; the tally does not.
			notes = append(notes, fmt.Sprintf("%.2f requests per pod were about objects outside namespace %s, other pods' work (%.2f writes: %v), not counted", t.Elsewhere, ns, sumValues(t.ElsewhereWrites), t.ElsewhereWrites))
		}
	}
	c.Note = strings.Join(notes, "; ")
	if len(a) == 0 {
		errs = append(errs, errors.New("the operator exposes no rest_client_requests_total"))
	}
	if kind == webhook.CheckoutHit {
		errs = append(errs, e.deleteFluentPVC(ctx, fpvc))
	}
	errs = append(errs, e.deleteNamespace(ctx, ns, true))
	return c, errors.Join(errs...)
}

// auditTally tallies the operator's requests of q from the cluster's audit
// log (cluster.Options.AuditPolicy, auditPolicy).
func (e *env) auditTally(q auditQuery) (auditTally, error) {
	r, closeLog, err := openAuditLog(e.kc.AuditLog())
	if err != nil {
		return auditTally{}, err
	}
	defer closeLog()
	return tallyAudit(r, q)
}
