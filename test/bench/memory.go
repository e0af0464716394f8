package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

// memSample is the operator's memory after a restart and settle.
type memSample struct {
	LabelledPods   int `json:"labelledPods"`
	UnlabelledPods int `json:"unlabelledPods"`
	// VmHWM is the peak RSS since the restart, VmRSS the RSS now (bytes).
	VmHWM float64 `json:"vmHWM"`
	VmRSS float64 `json:"vmRSS"`
	// HeapInuse and HeapAlloc are go_memstats_heap_*_bytes.
	HeapInuse     float64 `json:"heapInuse"`
	HeapAlloc     float64 `json:"heapAlloc"`
	SettleSeconds float64 `json:"settleSeconds"`
}

type memoryResult struct {
	Samples []memSample `json:"samples"`
	// Drain is the operator's memory while it drained the claims of
	// DrainPods labelled pods in the namespace of the unlabelled ones,
	// after the second sample; nil when not measured.
	Drain *drainSample `json:"drain,omitempty"`
	// CreateSeconds is how long creating the unlabelled pods took, at
	// Concurrency concurrent creates.
	CreateSeconds float64 `json:"createSeconds"`
	Concurrency   int     `json:"concurrency"`
	Error         string  `json:"error,omitempty"`
}

// drainSample is the operator's memory while it drained claims in a
// namespace with many other pods, whose live lists it reads before each
// drain and each drained claim's deletion.
type drainSample struct {
	DrainPods     int `json:"drainPods"`
	NamespacePods int `json:"namespacePods"`
	// VmRSSBefore is the RSS before the pods' deletion; VmHWM the peak RSS
	// from then until their bindings were gone (bytes).
	VmRSSBefore float64 `json:"vmRSSBefore"`
	VmHWM       float64 `json:"vmHWM"`
	Seconds     float64 `json:"seconds"`
}

// ratio is the with-unlabelled over without sample of field f.
func (m memoryResult) ratio(f func(memSample) float64) float64 {
	if len(m.Samples) < 2 {
		return ratio(0, 0)
	}
	return ratio(f(m.Samples[1]), f(m.Samples[0]))
}

func (e *env) memoryPhase(ctx context.Context, res *results) error {
	if err := e.createFluentPVC(ctx, fpvcMiss, 0); err != nil { // made by start-up, unless -phases skips it
		return err
	}
	m, err := e.memory(ctx)
	if err != nil {
		m.Error = err.Error()
	}
	res.Memory = &m
	return err
}

func (e *env) memory(ctx context.Context) (memoryResult, error) {
	m := memoryResult{Concurrency: e.cfg.CreateConcurrency}
	labelledNS, bulkNS := "bench-mem-labelled", "bench-mem-unlabelled"
	for _, ns := range []string{labelledNS, bulkNS} {
		if err := e.createNamespace(ctx, ns); err != nil {
			return m, err
		}
	}
	labelled := make([]*corev1.Pod, e.cfg.LabelledPods)
	for i := range labelled {
		labelled[i] = unscheduled(fluentPod(labelledNS, fmt.Sprintf("labelled-%d", i), fpvcMiss))
	}
	if _, _, err := e.createPods(ctx, labelled, 50); err != nil {
		return m, err
	}
	s, err := e.restartAndMeasure(ctx)
	if err != nil {
		return m, err
	}
	s.LabelledPods = len(labelled)
	m.Samples = append(m.Samples, s)
	e.progress("memory with %d labelled pods: VmHWM %s VmRSS %s heap in use %s", s.LabelledPods, mib(s.VmHWM), mib(s.VmRSS), mib(s.HeapInuse))

	bulk := make([]*corev1.Pod, e.cfg.UnlabelledPods)
	for i := range bulk {
		bulk[i] = unscheduled(fixtures.MakePod(fmt.Sprintf("unlabelled-%d", i), bulkNS).Obj())
	}
	start := time.Now()
	if _, _, err := e.createPods(ctx, bulk, e.cfg.CreateConcurrency); err != nil {
		return m, err
	}
	m.CreateSeconds = time.Since(start).Seconds()
	e.progress("created %d unlabelled pods in %.1fs (%d concurrent creates)", len(bulk), m.CreateSeconds, e.cfg.CreateConcurrency)
	s, err = e.restartAndMeasure(ctx)
	if err != nil {
		return m, err
	}
	s.LabelledPods, s.UnlabelledPods = len(labelled), len(bulk)
	m.Samples = append(m.Samples, s)
	e.progress("memory with %d labelled and %d unlabelled pods: VmHWM %s VmRSS %s heap in use %s", s.LabelledPods, s.UnlabelledPods, mib(s.VmHWM), mib(s.VmRSS), mib(s.HeapInuse))
	d, drainErr := e.drainMemory(ctx, bulkNS, len(bulk))
	if drainErr == nil {
		m.Drain = &d
		e.progress("memory while draining %d claims among %d pods: peak RSS %s, RSS before %s", d.DrainPods, d.NamespacePods, mib(d.VmHWM), mib(d.VmRSSBefore))
	}
	// The phases after this one run on a cluster without its pods: their
	// deletion, 5,000 and more, is not left to run beside them, even when
	// the drains' measurement failed.
	start = time.Now()
	if err := errors.Join(drainErr, e.deleteNamespace(ctx, bulkNS, false), e.deleteNamespace(ctx, labelledNS, false)); err != nil {
		return m, err
	}
	if err := errors.Join(e.deleteNamespace(ctx, bulkNS, true), e.deleteNamespace(ctx, labelledNS, true)); err != nil {
		return m, err
	}
	e.progress("memory: namespaces deleted in %.1fs", time.Since(start).Seconds())
	return m, nil
}

// drainMemory adds -drain-pods labelled pods to namespace ns, which holds
// others already, waits for their bindings, resets the operator's peak
// RSS (clear_refs), deletes the pods and waits until their claims are
// drained and their bindings gone: the peak then is what the drains cost,
// with the live lists of ns they read.
func (e *env) drainMemory(ctx context.Context, ns string, others int) (drainSample, error) {
	n := e.cfg.DrainPods
	d := drainSample{DrainPods: n, NamespacePods: others + n}
	pods := make([]*corev1.Pod, n)
	for i := range pods {
		pods[i] = unscheduled(fluentPod(ns, fmt.Sprintf("drained-%d", i), fpvcMiss))
	}
	if _, _, err := e.createPods(ctx, pods, n); err != nil {
		return d, err
	}
	if err := e.waitBindings(ctx, ns); err != nil {
		return d, err
	}
	if err := e.settle(ctx); err != nil {
		return d, err
	}
	pid := e.op.PID()
	status, err := procStatus(pid)
	if err != nil {
		return d, err
	}
	d.VmRSSBefore = status["VmRSS"]
	// 5 resets the peak RSS to the RSS now (proc(5)).
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		return d, fmt.Errorf("resetting the operator's peak RSS: %w", err)
	}
	start := time.Now()
	for _, p := range pods {
		if err := e.cl.Delete(ctx, p); err != nil {
			return d, fmt.Errorf("deleting pod %s: %w", p.Name, err)
		}
	}
	left := -1
	var listErr error
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		var bl v1alpha1.FluentPVCBindingList
		if listErr = e.cl.List(ctx, &bl, client.InNamespace(ns)); listErr != nil {
			return false, nil // tried again at the next poll
		}
		left = len(bl.Items)
		return left == 0, nil
	}); err != nil {
		return d, fmt.Errorf("waiting for the bindings of the %d deleted pods in %s to go (%d left, last list error %v): %w", n, ns, left, listErr, err)
	}
	d.Seconds = time.Since(start).Seconds()
	if status, err = procStatus(pid); err != nil {
		return d, err
	}
	d.VmHWM = status["VmHWM"]
	return d, nil
}

// memorySettle is how long the operator runs after its workqueues emptied
// before its memory is read.
const memorySettle = 3 * time.Second

func (e *env) restartAndMeasure(ctx context.Context) (memSample, error) {
	var s memSample
	start := time.Now()
	if err := e.op.Restart(ctx); err != nil {
		return s, fmt.Errorf("restarting the operator: %w", err)
	}
	if err := e.settle(ctx); err != nil {
		return s, err
	}
	select {
	case <-time.After(memorySettle):
	case <-ctx.Done():
		return s, ctx.Err()
	}
	s.SettleSeconds = time.Since(start).Seconds()
	status, err := procStatus(e.op.PID())
	if err != nil {
		return s, err
	}
	s.VmHWM, s.VmRSS = status["VmHWM"], status["VmRSS"]
	sc, err := e.operatorScrape(ctx)
	if err != nil {
		return s, err
	}
	s.HeapInuse = sc.sum("go_memstats_heap_inuse_bytes", nil)
	s.HeapAlloc = sc.sum("go_memstats_heap_alloc_bytes", nil)
	if s.VmHWM == 0 || s.HeapInuse == 0 {
		return s, fmt.Errorf("no memory figures for the operator (PID %d)", e.op.PID())
	}
	return s, nil
}

// procStatus reads the kB fields of /proc/<pid>/status, in bytes.
func procStatus(pid int) (map[string]float64, error) {
	if pid == 0 {
		return nil, errors.New("the operator is not running")
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(v)
		if len(fields) == 2 && fields[1] == "kB" {
			if n, err := strconv.ParseFloat(fields[0], 64); err == nil {
				out[k] = n * 1024
			}
		}
	}
	return out, sc.Err()
}

func mib(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }
