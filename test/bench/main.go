// Command bench measures what the warm pool buys on a simulated cluster
// (test/cluster: kwok nodes, a test provisioner that takes -delay per
// volume) with the operator running as a local process:
//
//   - start-up latency (create call to the first informer event with phase
//     Running) of N pods per mode, one at a time and as a burst: a plain pod,
//     a pod with a generic ephemeral volume, the operator with pool size 0
//     (misses) and with a warm pool (hits), and a pod with a Bound PVC of
//     its own and the hits' sidecar without the operator (the hits' floor);
//   - the webhook's admission latency at several concurrencies, hits and
//     misses, from the API server's and the operator's histograms;
//   - a burst of pods against a smaller pool: hits, misses, no shared claim,
//     and the time until the pool is warm again;
//   - the operator's API requests per pod lifecycle, by verb;
//   - the operator's memory with a few labelled pods, then with thousands
//     of unlabelled pods as well.
//
// Then, unless -real-node=false, the same start-up latency of plain pods,
// hits and their floor, -real-n pods each one at a time, on a second
// cluster with a real kubelet node that runs busybox containers with
// containerd (cluster.Options.RealNode); and the CSI tier: modes a-e,
// -csi-n pods each one at a time, on a third cluster with the real node
// and CSI storage that takes a cloud disk's time to create, attach and
// format a volume (cluster.StartCSI), where d's warm pool is staged (kept
// attached and staged on the node by holder pods), f is d without
// staging, and g a hit staged on a node the pod cannot run on; with where
// each pod's time went (create call, scheduling, detach, attach, stage
// and publish, container start).
// Where the host cannot run the real node, those tiers are skipped and the
// reason reported. -tiers picks tiers.
//
// It prints Markdown tables to stdout and writes them, a JSON file and a
// chart to -out. Goals are reported as PASS or MISS, never asserted; the
// exit status is non-zero only if a measurement could not be taken.
//
//	go run ./test/bench [-n 40] [-delay 5s] [-out test/bench/results]
//	go run ./test/bench -smoke   # a reduced run, outputs in a temp dir
//	go run ./test/bench -smoke -tiers csi   # the CSI tier alone
//
// Only one real node runs on a machine at a time: run it under
// `flock /tmp/fpvc-realnode.lock`, like the Makefile's other real-node runs.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/st-tech/fluent-pvc-operator/test/cluster"
)

// config are the bench's knobs; see flags.
type config struct {
	Name           string        `json:"name"`
	N              int           `json:"n"`
	BurstRounds    int           `json:"burstRounds"`
	Delay          time.Duration `json:"delay"`
	Smoke          bool          `json:"smoke"`
	Out            string        `json:"-"`
	Levels         []int         `json:"levels"`
	AdmissionPods  int           `json:"admissionPods"`
	BurstPods      int           `json:"burstPods"`
	BurstPool      int           `json:"burstPool"`
	LabelledPods   int           `json:"labelledPods"`
	UnlabelledPods int           `json:"unlabelledPods"`
	DrainPods      int           `json:"drainPods"`
	CostPods       int           `json:"costPods"`
	// IdleNamespaces and IdleWindow shape the idle phase (idle.go).
	IdleNamespaces    int           `json:"idleNamespaces"`
	IdleWindow        time.Duration `json:"idleWindow"`
	CreateConcurrency int           `json:"createConcurrency"`
	ParallelSlow      bool          `json:"parallelSlow"`
	SkipSlow          bool          `json:"skipSlow,omitempty"`
	Phases            []string      `json:"phases"`
	OperatorArgs      []string      `json:"operatorArgs,omitempty"`
	ReserveAhead      int           `json:"reserveAhead,omitempty"`
	RealNode          bool          `json:"realNode"`
	RealN             int           `json:"realN"`
	CSIN              int           `json:"csiN"`
	Tiers             []string      `json:"tiers"`
	ExtraNodes        int           `json:"extraNodes"`
	Timeout           time.Duration `json:"-"`
	Keep              bool          `json:"-"`
}

// allPhases are the bench's phases, in the order they run.
var allPhases = []string{"start-up", "cost", "idle", "burst", "admission", "memory", "nodes"}

// Tiers, in the order they run: the simulated cluster (every phase), the
// real node with the test provisioner's hostPath volumes (start-up of a, d
// and e), and the real node with CSI storage (start-up of a-e).
const (
	tierKwok     = "kwok"
	tierRealNode = "real-node"
	tierCSI      = "csi"
)

var allTiers = []string{tierKwok, tierRealNode, tierCSI}

// runs is whether the run includes tier: it is among cfg.Tiers, and a
// real-node tier not disabled by -real-node=false.
func (c config) runs(tier string) bool {
	return slices.Contains(c.Tiers, tier) && (tier == tierKwok || c.RealNode)
}

// smokeDefaults replace the defaults of the flags not set under -smoke.
// The timeout bounds a run that takes 7 to 8 minutes on two slow cores,
// with room to spare: it catches a hang, not a slow machine.
var smokeDefaults = map[string]string{
	"name":            "bench-smoke",
	"delay":           "2s",
	"n":               "3",
	"burst-rounds":    "1",
	"levels":          "1,5",
	"admission-pods":  "10",
	"burst-pods":      "10",
	"burst-pool":      "5",
	"labelled":        "20",
	"unlabelled":      "200",
	"drain-pods":      "3",
	"cost-pods":       "3",
	"idle-namespaces": "2",
	"idle-window":     "10s",
	"real-n":          "3",
	"csi-n":           "1",
	"extra-nodes":     "100",
	"timeout":         "15m",
}

func parseFlags(args []string) (config, error) {
	var c config
	var levels, phases, tiers, opArgs string
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.StringVar(&c.Name, "name", "bench", "name of the simulated cluster (state in .kwok/<name>)")
	fs.IntVar(&c.N, "n", 40, "pods per start-up mode and run")
	fs.DurationVar(&c.Delay, "delay", 5*time.Second, "the test provisioner's delay per volume (L)")
	fs.BoolVar(&c.Smoke, "smoke", false, "a reduced run (about 8 minutes) that writes to a temp dir unless -out is set")
	fs.StringVar(&c.Out, "out", "", "directory of the results (default test/bench/results, or a temp dir with -smoke)")
	fs.StringVar(&levels, "levels", "1,10,50", "concurrency levels of the admission latency")
	fs.IntVar(&c.AdmissionPods, "admission-pods", 100, "pods per admission level (and the hit pool's size)")
	fs.IntVar(&c.BurstPods, "burst-pods", 200, "pods of the burst against a smaller pool")
	fs.IntVar(&c.BurstPool, "burst-pool", 50, "pool size of that burst")
	fs.IntVar(&c.LabelledPods, "labelled", 200, "labelled pods in the memory measurements")
	fs.IntVar(&c.UnlabelledPods, "unlabelled", 5000, "unlabelled pods added for the second memory measurement")
	fs.IntVar(&c.DrainPods, "drain-pods", 20, "labelled pods added to the unlabelled pods' namespace and deleted, to measure the operator's memory while it drains their claims")
	fs.IntVar(&c.CostPods, "cost-pods", 10, "pods per cost measurement (hit and miss)")
	fs.IntVar(&c.IdleNamespaces, "idle-namespaces", 20, "namespaces of each of the idle phase's pools")
	fs.DurationVar(&c.IdleWindow, "idle-window", 5*time.Minute, "how long the idle phase counts the operator's requests")
	fs.IntVar(&c.CreateConcurrency, "create-concurrency", 200, "concurrent creates of the unlabelled pods")
	fs.IntVar(&c.BurstRounds, "burst-rounds", 5, "start-up: rounds of bursts of a, w, d and e, interleaved; each burst run pools its rounds' pods")
	fs.BoolVar(&c.ParallelSlow, "parallel-slow", true, "run sequential b and c side by side (each still one pod at a time)")
	fs.BoolVar(&c.SkipSlow, "skip-slow", false, "start-up: run only a, w, d and e on the simulated tier, not b and c (which wait ~L per pod); for quick measurements, not for results files")
	fs.StringVar(&phases, "phases", strings.Join(allPhases, ","), "phases to run, a subset of "+strings.Join(allPhases, ","))
	fs.StringVar(&opArgs, "operator-args", "", "extra flags of the operator, space-separated, after the chart's defaults that differ from the binary's ("+strings.Join(cluster.ChartArgs, " ")+"), which they may override (e.g. --pprof-bind-address=127.0.0.1:6060, --reserve-ahead=0)")
	fs.IntVar(&c.ReserveAhead, "reserve-ahead", 0, "spec.pool.reserveAhead of the warm pools of mode d and of the cost phase on the simulated tier; 0 leaves it unset, and the operator's --reserve-ahead (the chart's \"share\": the whole pool, for one replica) decides")
	fs.BoolVar(&c.RealNode, "real-node", true, "also run the real-node tier (a kubelet with containerd) after the kwok one; skipped, saying why, where this machine cannot run it")
	fs.IntVar(&c.RealN, "real-n", 20, "pods per start-up mode on the real node (one at a time)")
	fs.IntVar(&c.CSIN, "csi-n", 6, "pods per start-up mode on the CSI tier (one at a time; most wait for a volume's attach and format), and the size of its warm pools")
	fs.StringVar(&tiers, "tiers", strings.Join(allTiers, ","), "tiers to run, a subset of "+strings.Join(allTiers, ",")+"; -real-node=false drops the last two")
	fs.IntVar(&c.ExtraNodes, "extra-nodes", 1000, "fake nodes added for the nodes phase's second checkout level")
	fs.DurationVar(&c.Timeout, "timeout", 45*time.Minute, "bound on the whole run")
	fs.BoolVar(&c.Keep, "keep", false, "leave the cluster up at the end")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.Smoke {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for name, v := range smokeDefaults {
			if !set[name] {
				if err := fs.Set(name, v); err != nil {
					return c, err
				}
			}
		}
	}
	for _, f := range strings.Split(levels, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return c, fmt.Errorf("-levels: bad level %q", f)
		}
		c.Levels = append(c.Levels, n)
	}
	for _, p := range strings.Split(phases, ",") {
		p = strings.TrimSpace(p)
		if !slices.Contains(allPhases, p) {
			return c, fmt.Errorf("-phases: unknown phase %q, want some of %s", p, strings.Join(allPhases, ","))
		}
		c.Phases = append(c.Phases, p)
	}
	for _, t := range strings.Split(tiers, ",") {
		t = strings.TrimSpace(t)
		if !slices.Contains(allTiers, t) {
			return c, fmt.Errorf("-tiers: unknown tier %q, want some of %s", t, strings.Join(allTiers, ","))
		}
		c.Tiers = append(c.Tiers, t)
	}
	c.OperatorArgs = append(slices.Clone(cluster.ChartArgs), strings.Fields(opArgs)...)
	if c.ReserveAhead < 0 || c.ReserveAhead > 1000 {
		return c, errors.New("-reserve-ahead must be from 0 to 1000")
	}
	if c.N < 1 || c.BurstRounds < 1 || c.AdmissionPods < 1 || c.BurstPods < 1 || c.BurstPool < 1 || c.CostPods < 1 || c.IdleNamespaces < 1 || c.IdleWindow <= 0 || c.LabelledPods < 1 || c.DrainPods < 1 || c.RealN < 1 || c.CSIN < 1 {
		return c, errors.New("counts must be positive")
	}
	return c, nil
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// run runs the kwok tier and then, unless -real-node=false, the real-node
// and CSI tiers (those of cfg.Tiers), reports them, and brings every
// cluster down. It returns an error if
// a measurement could not be taken; missed goals are only reported.
func run(ctx context.Context, cfg config, stdout, progress io.Writer) (err error) {
	// The bench's informers log through controller-runtime; keep them quiet.
	ctrllog.SetLogger(logr.Discard())
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	started := time.Now()
	if cfg.Out == "" {
		if cfg.Smoke || len(cfg.Phases) < len(allPhases) || !cfg.RealNode || len(cfg.Tiers) < len(allTiers) {
			// Only full runs replace the results the README shows.
			if cfg.Out, err = os.MkdirTemp("", "fluent-pvc-bench-"); err != nil {
				return err
			}
		} else {
			cfg.Out = filepath.Join(cluster.RepoRoot(), "test", "bench", "results")
		}
	}
	res := &results{Config: cfg, Date: started.UTC().Format(time.RFC3339), Machine: describeMachine()}
	var errs []error
	if cfg.runs(tierKwok) {
		if err := runKwok(ctx, cfg, res, progress); err != nil {
			errs = append(errs, unjoin(err)...)
		}
	}
	for _, tier := range []struct {
		name, label string
		run         func(context.Context, config, *results, io.Writer) error
	}{{tierRealNode, "real node", runRealNode}, {tierCSI, "CSI", runCSI}} {
		if !cfg.runs(tier.name) {
			continue
		}
		if ctx.Err() != nil {
			errs = append(errs, fmt.Errorf("%s: tier skipped: %w", tier.label, ctx.Err()))
			continue
		}
		start := time.Now()
		if err := tier.run(ctx, cfg, res, progress); err != nil {
			for _, err := range unjoin(err) {
				errs = append(errs, fmt.Errorf("%s: %w", tier.label, err))
			}
		}
		res.PhaseSeconds = append(res.PhaseSeconds, phaseTime{tier.label, time.Since(start).Seconds()})
	}
	for _, err := range errs {
		res.Errors = append(res.Errors, err.Error())
	}
	res.WallSeconds = time.Since(started).Seconds()
	res.StartupRatios = res.Startup.ratios(kwokRatioPairs)
	if rn := res.RealNode; rn != nil {
		rn.StartupRatios = rn.Startup.ratios(realRatioPairs)
	}
	if c := res.CSI; c != nil {
		c.StartupRatios = c.Startup.ratios(csiRatioPairs)
	}
	res.evaluateGoals()
	md := res.markdown("startup-latest.svg")
	fmt.Fprint(stdout, md)
	paths, werr := res.write(cfg.Out, started)
	if werr != nil {
		errs = append(errs, werr)
	} else {
		fmt.Fprintf(stdout, "\nResults: %s\n", strings.Join(paths, " "))
	}
	return errors.Join(errs...)
}

// runKwok brings the kwok cluster and the operator up, runs every phase
// into res, and brings the cluster down.
func runKwok(ctx context.Context, cfg config, res *results, progress io.Writer) (err error) {
	started := time.Now()
	e := &env{cfg: cfg, out: progress}
	// The start-up phase reads kube-apiserver's garbage collections.
	opts := cluster.Options{Name: cfg.Name, ProvisionerDelay: cfg.Delay, Out: progress, TraceGC: true}
	if slices.Contains(cfg.Phases, "cost") {
		// The cost phase reads the operator's requests from the audit log.
		opts.AuditPolicy = []byte(auditPolicy)
	}
	kc, err := cluster.Up(ctx, opts)
	if err != nil {
		return fmt.Errorf("bringing the cluster up: %w", err)
	}
	e.kc = kc
	defer func() {
		if cfg.Keep {
			e.progress("keeping cluster %s: export KUBECONFIG=%s", kc.Name, kc.Kubeconfig)
			return
		}
		err = errors.Join(err, kc.Down())
	}()
	res.ClusterUpSeconds = time.Since(started).Seconds()
	nodes, err := kc.Clientset.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing the nodes: %w", err)
	}
	e.cfg.OperatorArgs = kwokOperatorArgs(cfg, len(nodes.Items)/len(cluster.DefaultZones))
	op, err := cluster.RunOperator(ctx, kc, cluster.OperatorOptions{Args: e.cfg.OperatorArgs})
	if err != nil {
		return fmt.Errorf("starting the operator: %w", err)
	}
	e.op = op
	informerCtx, stopInformers := context.WithCancel(ctx)
	defer stopInformers()
	if err := e.startInformers(informerCtx); err != nil {
		return err
	}

	phases := []struct {
		name string
		run  func(context.Context, *results) error
	}{
		{"start-up", e.startupPhase},
		{"cost", e.costPhase},
		{"idle", e.idlePhase},
		{"burst", e.burstPhase},
		{"admission", e.admissionPhase},
		{"memory", e.memoryPhase},
		// Last: its extra nodes would change the other phases' cluster.
		{"nodes", e.nodesPhase},
	}
	var errs []error
	for _, p := range phases {
		if !slices.Contains(cfg.Phases, p.name) {
			continue
		}
		if ctx.Err() != nil {
			errs = append(errs, fmt.Errorf("phase %s skipped: %w", p.name, ctx.Err()))
			continue
		}
		start := time.Now()
		e.progress("phase %s", p.name)
		if err := p.run(ctx, res); err != nil {
			errs = append(errs, fmt.Errorf("phase %s: %w", p.name, err))
			e.progress("phase %s failed: %v", p.name, err)
		}
		res.PhaseSeconds = append(res.PhaseSeconds, phaseTime{p.name, time.Since(start).Seconds()})
	}
	return errors.Join(errs...)
}

// unjoin is the errors that errors.Join joined into err, or err alone.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
