package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/pool"
	"github.com/st-tech/fluent-pvc-operator/test/cluster"
	"github.com/st-tech/fluent-pvc-operator/webhook"
)

// FluentPVCs of the admission phase.
const (
	fpvcAdmission         = "bench-admission"          // warm pools reserving none, for the hit levels
	fpvcAdmissionReserved = "bench-admission-reserved" // warm pools left to the operator's --reserve-ahead, for the reserved levels
)

// checkoutReserved labels the levels whose hits are handed out from
// reservations ahead (the operator's --reserve-ahead, the chart's
// "share"): the operator counts them as hits.
const checkoutReserved = "reserved"

// checkoutNoop labels the control levels: plain pods through the no-op
// webhook (mode w), what any webhook costs the API server at the same
// concurrency.
const checkoutNoop = modeNoop

func admissionHitNamespaces(levels []int) []string {
	return admissionNamespaces("hit", levels)
}

// admissionNamespaces are the namespaces of kind's levels, one per level.
func admissionNamespaces(kind string, levels []int) []string {
	var out []string
	for _, c := range levels {
		out = append(out, fmt.Sprintf("bench-adm-%s-%d", kind, c))
	}
	return out
}

// metricResult is the operator's checkout result of kind's admissions.
func metricResult(kind string) string {
	if kind == checkoutReserved || kind == checkoutStaged {
		return webhook.CheckoutHit
	}
	return kind
}

// admissionLevel is the webhook's latency over the pods of one level:
// pods created c at a time, all hits or all misses.
type admissionLevel struct {
	Checkout    string `json:"checkout"` // hit or miss
	Concurrency int    `json:"concurrency"`
	Pods        int    `json:"pods"`
	// APIServer is apiserver_admission_webhook_admission_duration_seconds
	// of our webhook (buckets .005 .025 .1 .5 ...), interpolated.
	APIServer summary `json:"apiserver"`
	// APIServerWithin25ms is the exact share of calls ≤ 25 ms (a bucket
	// bound), APIServerOver25ms the number of calls above.
	APIServerWithin25ms float64 `json:"apiserverWithin25ms"`
	APIServerOver25ms   int     `json:"apiserverOver25ms"`
	// Reinvocations are the calls the webhook skipped as already
	// injected; the webhook is registered with reinvocationPolicy Never,
	// so a run counts none. APIServer would count them too.
	Reinvocations int `json:"reinvocations"`
	// PVCWrite is the API server's latency (apiserver_request_duration_seconds)
	// of the webhook's one write, PUT (hit) or POST (miss)
	// persistentvolumeclaims, and BindingCreate of the operator's POST
	// fluentpvcbindings that follows it; others' writes of the same kind in
	// the window count too.
	BindingCreate summary `json:"bindingCreate"`
	PVCWrite      summary `json:"pvcWrite"`
	// OperatorCPU and APIServerCPU are CPU milliseconds per pod
	// (process_cpu_seconds_total).
	OperatorCPU  float64 `json:"operatorCPUms"`
	APIServerCPU float64 `json:"apiserverCPUms"`
	// Webhook is fluentpvc_webhook_admission_duration_seconds{result=mutated}.
	Webhook summary `json:"webhook"`
	// CheckoutDur is fluentpvc_pool_checkout_duration_seconds{result}.
	CheckoutDur summary `json:"checkoutDuration"`
	// Client is the bench's pod create call, end to end.
	Client summary `json:"client"`
	// Hits and Misses are the checkouts the operator counted; StagedHits
	// those of the hits whose warm PVC a holder kept staged
	// (fluentpvc_pool_staged_hits_total{served="staged"}), counted for the
	// staged levels.
	Hits       int    `json:"hits"`
	Misses     int    `json:"misses"`
	StagedHits int    `json:"stagedHits,omitempty"`
	Note       string `json:"note,omitempty"`
	Error      string `json:"error,omitempty"`
}

// webhookFamily is the API server's histogram of its calls of each
// webhook, by the webhook's name.
const webhookFamily = "apiserver_admission_webhook_admission_duration_seconds"

// webhookCalls sets lvl's API server figures from the calls of webhook
// name between two scrapes of the API server; false when it exposes
// none.
func (lvl *admissionLevel) webhookCalls(before, after scrape, name string) bool {
	sel := map[string]string{"name": name}
	a, ok := after.histogram(webhookFamily, sel)
	if !ok {
		return false
	}
	b, _ := before.histogram(webhookFamily, sel)
	d := a.minus(b)
	lvl.APIServer = histSummary(d)
	lvl.APIServerWithin25ms = d.fractionAtMost(0.025)
	lvl.APIServerOver25ms = int(math.Round(d.count * (1 - lvl.APIServerWithin25ms)))
	return true
}

func (e *env) admissionLevel(ctx context.Context, kind string, c int, ns, fpvc string) (admissionLevel, error) {
	return e.admissionLevelOf(ctx, kind, c, e.cfg.AdmissionPods, ns, fpvc, nil)
}

// admissionLevelOf is admissionLevel of n pods, each changed by mutate (if
// not nil) before it is created.
func (e *env) admissionLevelOf(ctx context.Context, kind string, c, n int, ns, fpvc string, mutate func(*corev1.Pod, int)) (admissionLevel, error) {
	lvl := admissionLevel{Checkout: kind, Concurrency: c, Pods: n}
	apiBefore, err := scrapeAPIServer(ctx, e.kc.Clientset)
	if err != nil {
		return lvl, err
	}
	opBefore, err := e.operatorScrape(ctx)
	if err != nil {
		return lvl, err
	}
	pods := make([]*corev1.Pod, lvl.Pods)
	for i := range pods {
		pods[i] = unscheduled(fluentPod(ns, fmt.Sprintf("adm-%s-%d-%d", kind, c, i), fpvc))
		if mutate != nil {
			mutate(pods[i], i)
		}
	}
	durs, _, err := e.createPods(ctx, pods, c)
	if err != nil {
		return lvl, err
	}
	apiAfter, err := scrapeAPIServer(ctx, e.kc.Clientset)
	if err != nil {
		return lvl, err
	}
	opAfter, err := e.operatorScrape(ctx)
	if err != nil {
		return lvl, err
	}
	lvl.Client = summarize(durs)
	if !lvl.webhookCalls(apiBefore, apiAfter, webhookName) {
		return lvl, fmt.Errorf("the API server exposes no %s", webhookFamily)
	}
	const reqFamily = "apiserver_request_duration_seconds"
	writeLatency := func(verb, resource string) summary {
		sel := map[string]string{"verb": verb, "resource": resource}
		a, _ := apiAfter.histogram(reqFamily, sel)
		b, _ := apiBefore.histogram(reqFamily, sel)
		return histSummary(a.minus(b))
	}
	lvl.BindingCreate = writeLatency("POST", "fluentpvcbindings")
	pvcVerb := "POST"
	if metricResult(kind) == webhook.CheckoutHit {
		pvcVerb = "PUT"
	}
	lvl.PVCWrite = writeLatency(pvcVerb, "persistentvolumeclaims")
	const cpu = "process_cpu_seconds_total"
	lvl.OperatorCPU = 1000 * (opAfter.sum(cpu, nil) - opBefore.sum(cpu, nil)) / float64(lvl.Pods)
	lvl.APIServerCPU = 1000 * (apiAfter.sum(cpu, nil) - apiBefore.sum(cpu, nil)) / float64(lvl.Pods)
	const admissions = "fluentpvc_webhook_admissions_total"
	lvl.Reinvocations = int(math.Round(opAfter.sum(admissions, map[string]string{"result": "skipped"}) - opBefore.sum(admissions, map[string]string{"result": "skipped"})))
	const whFamily = "fluentpvc_webhook_admission_duration_seconds"
	wa, ok2 := opAfter.histogram(whFamily, map[string]string{"result": "mutated"})
	wb, _ := opBefore.histogram(whFamily, map[string]string{"result": "mutated"})
	const coFamily = "fluentpvc_pool_checkout_duration_seconds"
	ca, ok3 := opAfter.histogram(coFamily, map[string]string{"result": metricResult(kind)})
	cb, _ := opBefore.histogram(coFamily, map[string]string{"result": metricResult(kind)})
	if !ok2 || !ok3 {
		return lvl, fmt.Errorf("the operator exposes no %s or %s", whFamily, coFamily)
	}
	lvl.Webhook = histSummary(wa.minus(wb))
	lvl.CheckoutDur = histSummary(ca.minus(cb))
	const total = "fluentpvc_pool_checkouts_total"
	lvl.Hits = int(math.Round(opAfter.sum(total, map[string]string{"result": webhook.CheckoutHit}) - opBefore.sum(total, map[string]string{"result": webhook.CheckoutHit})))
	lvl.Misses = int(math.Round(opAfter.sum(total, map[string]string{"result": webhook.CheckoutMiss}) - opBefore.sum(total, map[string]string{"result": webhook.CheckoutMiss})))
	if kind == checkoutStaged {
		const stagedHits = "fluentpvc_pool_staged_hits_total"
		sel := map[string]string{"fluentpvc": fpvc, "served": webhook.HitStaged}
		lvl.StagedHits = int(math.Round(opAfter.sum(stagedHits, sel) - opBefore.sum(stagedHits, sel)))
	}
	var errs []error
	if lvl.APIServer.N != lvl.Pods+lvl.Reinvocations {
		errs = append(errs, fmt.Errorf("the API server counted %d calls of our webhook for %d pods and %d reinvocations", lvl.APIServer.N, lvl.Pods, lvl.Reinvocations))
	}
	if want := map[string]int{"hit": lvl.Hits, "miss": lvl.Misses}[metricResult(kind)]; want != lvl.Pods {
		// Measured all the same: a fact about the checkouts, not a failure.
		lvl.Note = fmt.Sprintf("%d of %d admissions were %ss (hits %d, misses %d)", want, lvl.Pods, metricResult(kind), lvl.Hits, lvl.Misses)
	} else if kind == checkoutStaged && lvl.StagedHits != lvl.Pods {
		lvl.Note = fmt.Sprintf("%d of %d hits were staged (their warm PVC had a holder)", lvl.StagedHits, lvl.Pods)
	}
	return lvl, errors.Join(errs...)
}

// admissionPhase measures the webhook at each concurrency level, misses
// first (pool size 0, nothing in the background), then hits, each level
// from its own full pool as large as the level. Pods stay Pending
// unscheduled.
func (e *env) admissionPhase(ctx context.Context, res *results) error {
	if err := e.createFluentPVC(ctx, fpvcMiss, 0); err != nil { // made by start-up, unless -phases skips it
		return err
	}
	var errs []error
	record := func(l admissionLevel, err error) {
		if err != nil {
			l.Error = err.Error()
			errs = append(errs, fmt.Errorf("admission %s c=%d: %w", l.Checkout, l.Concurrency, err))
		}
		e.progress("admission %-4s c=%-3d apiserver p50 %s p99 %s, webhook p50 %s p99 %s, client p50 %s p99 %s %s",
			l.Checkout, l.Concurrency, ms(l.APIServer.P50), ms(l.APIServer.P99), ms(l.Webhook.P50), ms(l.Webhook.P99), ms(l.Client.P50), ms(l.Client.P99), l.Error)
		if l.Note != "" {
			res.Notes = append(res.Notes, fmt.Sprintf("admission %s c=%d: %s", l.Checkout, l.Concurrency, l.Note))
		}
		res.Admission = append(res.Admission, l)
	}
	missNS := "bench-adm-miss"
	if err := e.createNamespace(ctx, missNS); err != nil {
		return err
	}
	for _, c := range e.cfg.Levels {
		if err := e.settle(ctx); err != nil {
			return errors.Join(append(errs, err)...)
		}
		record(e.admissionLevel(ctx, webhook.CheckoutMiss, c, missNS, fpvcMiss))
		if err := e.waitBindings(ctx, missNS); err != nil {
			return errors.Join(append(errs, err)...)
		}
	}
	// One pool per level, all filled ahead (prefillPools); a level's pool
	// leaves the FluentPVC once used, so that it does not refill during the
	// next level. The reserved levels' pools are reserved ahead by the
	// operator's default (each full once all its warm PVCs are), when it
	// reserves whole pools, and so are the staged levels' where it
	// reserves staged pools too.
	kinds := []struct{ kind, fpvc string }{{webhook.CheckoutHit, fpvcAdmission}}
	var nodes corev1.NodeList
	if err := e.cl.List(ctx, &nodes); err != nil {
		return err
	}
	_, extra := stagedLayout(e.cfg, len(nodes.Items)/len(cluster.DefaultZones))
	st := &stagedAdmission{Pods: stagedPoolSize(e.cfg), StagePerNode: stagePerNodeArg(e.cfg.OperatorArgs), ExtraNodes: extra * len(cluster.DefaultZones)}
	res.AdmissionStaged = st
	if t := operatorReserve(e.cfg.OperatorArgs); t == pool.ReserveShare || t >= e.cfg.AdmissionPods {
		kinds = append(kinds, struct{ kind, fpvc string }{checkoutReserved, fpvcAdmissionReserved})
	} else {
		st.Skipped = "the operator reserves no whole pools (--reserve-ahead), so there are no reserved levels for them to stand beside"
	}
	var fpvcs []string
	var poolNSs, stagedNSs []string
	for _, k := range kinds {
		nss := admissionNamespaces(k.kind, e.cfg.Levels)
		poolNSs = append(poolNSs, nss...)
		fpvcs = append(fpvcs, k.fpvc)
		var stagedStart time.Time
		if k.kind == checkoutReserved {
			// The staged pools fill beside the reserved levels' pool, so
			// that their fill adds to the phase only what it takes
			// longer, and before the reserved levels, so that it is not
			// their load.
			stagedStart = time.Now()
			var err error
			if stagedNSs, err = e.startStagedPools(ctx, st); err != nil {
				return errors.Join(append(errs, err)...)
			}
			if stagedNSs != nil {
				poolNSs = append(poolNSs, stagedNSs...)
				fpvcs = append(fpvcs, fpvcAdmissionStaged)
			}
		}
		if err := e.fillHitPool(ctx, k.fpvc, nss); err != nil {
			return errors.Join(append(errs, err)...)
		}
		if k.kind == checkoutReserved && stagedNSs != nil {
			full := time.Now()
			if err := e.waitStaged(ctx, st.Pods, stagedNSs, st); err != nil {
				errs = append(errs, fmt.Errorf("admission %s: %w", checkoutStaged, err))
				e.progress("admission %s: %v", checkoutStaged, err)
				stagedNSs = nil // cleaned up with the others, not measured
			} else {
				st.StagedSeconds, st.ExtraWaitSeconds = time.Since(stagedStart).Seconds(), time.Since(full).Seconds()
				e.progress("staged pools of %d in %d namespaces staged in %.1fs, %.1fs after the reserved levels' pool was full; reserved ahead: %v",
					st.Pods, len(e.cfg.Levels), st.StagedSeconds, st.ExtraWaitSeconds, st.Reserved)
			}
		}
		if err := e.hitLevels(ctx, k.kind, k.fpvc, nss, record); err != nil {
			return errors.Join(append(errs, err)...)
		}
	}
	if st.Skipped != "" {
		res.Notes = append(res.Notes, "admission "+checkoutStaged+": skipped: "+st.Skipped)
		e.progress("admission %s skipped: %s", checkoutStaged, st.Skipped)
	}
	// The control's namespace is cleaned up with the others whatever
	// its levels gave.
	noopNS := "bench-adm-" + checkoutNoop
	poolNSs = append(poolNSs, noopNS)
	if err := e.noopLevels(ctx, noopNS, record); err != nil {
		errs = append(errs, fmt.Errorf("admission %s: %w", checkoutNoop, err))
	}
	// The staged levels last: the holders of the claims they hand out
	// stay for pool.HolderPatience, since their pods are never scheduled,
	// and then leave, which the reserved levels and the control are spared.
	if stagedNSs != nil {
		start := time.Now()
		if err := e.stagedLevels(ctx, stagedNSs, st, record); err != nil {
			errs = append(errs, fmt.Errorf("admission %s: %w", checkoutStaged, err))
		}
		e.progress("admission %s levels took %.1fs", checkoutStaged, time.Since(start).Seconds())
	}
	// Deleting the namespaces releases the claims without draining them.
	start := time.Now()
	for _, f := range fpvcs {
		if err := e.cl.Delete(ctx, fluentPVCRef(f)); err != nil {
			errs = append(errs, err)
		}
	}
	for _, ns := range append([]string{missNS}, poolNSs...) {
		if err := e.deleteNamespace(ctx, ns, false); err != nil {
			return errors.Join(append(errs, err)...)
		}
	}
	for _, ns := range append([]string{missNS}, poolNSs...) {
		if err := e.deleteNamespace(ctx, ns, true); err != nil {
			return errors.Join(append(errs, err)...)
		}
	}
	for _, f := range fpvcs {
		if err := e.deleteFluentPVC(ctx, f); err != nil {
			return errors.Join(append(errs, err)...)
		}
	}
	if e.kwokCSI {
		if err := e.waitDetached(ctx); err != nil {
			return errors.Join(append(errs, err)...)
		}
		if err := e.deleteStagedNodes(ctx, st); err != nil {
			return errors.Join(append(errs, err)...)
		}
	}
	e.progress("admission namespaces deleted in %.1fs", time.Since(start).Seconds())
	return errors.Join(errs...)
}

// waitBindings waits until every labelled pod in ns (holders aside) has
// its FluentPVCBinding, so that a level's bindings are not the next
// level's load.
func (e *env) waitBindings(ctx context.Context, ns string) error {
	start := time.Now()
	var pods, bindings int
	var listErr error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		// Live, since the bench's cache holds only measured pods; a failed
		// list is tried again at the next poll.
		var pl corev1.PodList
		if listErr = e.cl.List(ctx, &pl, client.InNamespace(ns), client.HasLabels{v1alpha1.FluentPVCNameLabelKey}); listErr != nil {
			return false, nil
		}
		var bl v1alpha1.FluentPVCBindingList
		if listErr = e.cl.List(ctx, &bl, client.InNamespace(ns)); listErr != nil {
			return false, nil
		}
		pods = 0
		for _, p := range pl.Items {
			if p.Labels[v1alpha1.ComponentLabelKey] != v1alpha1.ComponentHolder {
				pods++
			}
		}
		bindings = len(bl.Items)
		return bindings >= pods, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the bindings of %s (%d pods, %d bindings; last list error: %v): %w", ns, pods, bindings, listErr, err)
	}
	e.progress("bindings of %s made %.1fs after its level", ns, time.Since(start).Seconds())
	return nil
}

func ms(s float64) string {
	if math.IsNaN(s) {
		return "n/a"
	}
	return fmt.Sprintf("%.1fms", s*1000)
}

// fillHitPool makes FluentPVC fpvc's pools of e.cfg.AdmissionPods in
// namespaces nss (unless made ahead) and waits until they are full.
func (e *env) fillHitPool(ctx context.Context, fpvc string, nss []string) error {
	size := int32(e.cfg.AdmissionPods)
	for _, ns := range nss {
		if err := e.createNamespace(ctx, ns); err != nil {
			return err
		}
	}
	if err := e.createFluentPVC(ctx, fpvc, size, nss...); err != nil {
		return err
	}
	return e.waitPoolWarm(ctx, fpvc, size, nss...)
}

// hitLevels runs kind's levels (hits, or hits from reservations), each in
// its namespace of nss from its own full pool of FluentPVC fpvc
// (fillHitPool).
func (e *env) hitLevels(ctx context.Context, kind, fpvc string, nss []string, record func(admissionLevel, error)) error {
	for i, c := range e.cfg.Levels {
		if err := e.settle(ctx); err != nil {
			return err
		}
		record(e.admissionLevel(ctx, kind, c, nss[i], fpvc))
		if err := e.dropPoolNamespace(ctx, fpvc, nss[i]); err != nil {
			return err
		}
		if err := e.waitBindings(ctx, nss[i]); err != nil {
			return err
		}
	}
	return nil
}

// noopLevels runs the control levels in namespace ns: at each
// concurrency, as many plain pods through the no-op webhook as a level
// of hits has, read from the same API server histogram (the no-op
// webhook's series), so that a hit's share of calls within 25 ms is
// compared with that of a webhook that makes no API call, in the same
// run.
func (e *env) noopLevels(ctx context.Context, ns string, record func(admissionLevel, error)) error {
	if err := e.createNamespace(ctx, ns); err != nil {
		return err
	}
	stop, err := e.startNoopWebhook(ctx)
	if err != nil {
		return err
	}
	for _, c := range e.cfg.Levels {
		if err := e.settle(ctx); err != nil {
			return errors.Join(err, stop())
		}
		record(e.noopLevel(ctx, c, ns))
	}
	return stop()
}

// noopLevel is one control level: e.cfg.AdmissionPods plain pods through
// the no-op webhook, created c at a time, left unscheduled.
func (e *env) noopLevel(ctx context.Context, c int, ns string) (admissionLevel, error) {
	lvl := admissionLevel{Checkout: checkoutNoop, Concurrency: c, Pods: e.cfg.AdmissionPods}
	before, err := scrapeAPIServer(ctx, e.kc.Clientset)
	if err != nil {
		return lvl, err
	}
	pods := make([]*corev1.Pod, lvl.Pods)
	for i := range pods {
		pods[i] = unscheduled(noopPod(plainPod(ns, fmt.Sprintf("adm-%s-%d-%d", checkoutNoop, c, i))))
	}
	durs, _, err := e.createPods(ctx, pods, c)
	if err != nil {
		return lvl, err
	}
	after, err := scrapeAPIServer(ctx, e.kc.Clientset)
	if err != nil {
		return lvl, err
	}
	lvl.Client = summarize(durs)
	if !lvl.webhookCalls(before, after, noopWebhookName) {
		return lvl, fmt.Errorf("the API server exposes no %s of the no-op webhook", webhookFamily)
	}
	const cpu = "process_cpu_seconds_total"
	lvl.APIServerCPU = 1000 * (after.sum(cpu, nil) - before.sum(cpu, nil)) / float64(lvl.Pods)
	if lvl.APIServer.N != lvl.Pods {
		return lvl, fmt.Errorf("the API server counted %d calls of the no-op webhook for %d pods", lvl.APIServer.N, lvl.Pods)
	}
	return lvl, nil
}
