// Command demo shows fluent-pvc-operator on a local cluster (test/cluster):
// it starts the cluster and the operator, creates a FluentPVC with a warm
// pool of 3 on a StorageClass that takes 5 s to provision a volume, then
// starts 5 labelled pods at once and prints, for each, its node, its claim,
// whether the claim came from the pool, and how long the pod took to be
// Ready.
//
// Where the machine can run test/cluster's real node (root, bin/kubelet,
// bin/images.tar, containerd: make real-node-bins images), the pods run
// there as real busybox containers on storage like a cloud disk's: the CSI
// driver of test/csidriver behind the real external-provisioner and
// external-attacher (make csi-bins), which takes 5 s to create a volume,
// 8 s to attach it and 2 s to format it on its first stage. The pool
// stages its warm PVCs there (holder pods keep them attached and
// formatted), so the demo waits until they are, then also prints when each
// pod's volume was attached: a hit saves the create, the attach and the
// format; a miss pays them all. The sidecar appends lines to the
// claim, and after the demo deletes the pods, the real drain Jobs count
// them before the operator deletes the claims. Elsewhere, or with
// DEMO_TIER=kwok, every node and pod is simulated by kwok, and the demo
// says why in one line.
//
// The cluster keeps running for exploring with kubectl until
// `make demo-down`.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"text/tabwriter"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/test/cluster"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
	"github.com/st-tech/fluent-pvc-operator/test/images"
)

const namespace = "demo"

type options struct {
	name                     string
	tier                     string
	delay                    time.Duration
	attachDelay, formatDelay time.Duration
	poolSize                 int32
	pods                     int
}

func main() {
	var o options
	var poolSize int
	flag.StringVar(&o.name, "name", "demo", "cluster name")
	flag.StringVar(&o.tier, "tier", os.Getenv("DEMO_TIER"), "auto (the real node where the machine can run it), real or kwok; default DEMO_TIER, else auto")
	flag.DurationVar(&o.delay, "delay", 5*time.Second, "time the storage takes to create a volume, like a cloud disk")
	flag.DurationVar(&o.attachDelay, "attach-delay", 8*time.Second, "time the CSI driver of the real node's cluster takes to attach (and detach) a volume")
	flag.DurationVar(&o.formatDelay, "format-delay", 2*time.Second, "time the CSI driver of the real node's cluster takes to format a volume on its first stage")
	flag.IntVar(&poolSize, "pool", 3, "warm PVCs in the pool")
	flag.IntVar(&o.pods, "pods", 5, "labelled pods to start at once")
	flag.Parse()
	o.poolSize = int32(poolSize)
	cluster.SetCommandLogger(os.Stderr)
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// realNodeBusy says why the real node cannot start while another cluster's
// real node runs on the host (its bridge exists), or "". A real node
// left by an earlier demo of the same name does not count: Up replaces it.
func realNodeBusy(name string) string {
	const bridge = "fpvc0" // test/cluster's realBridge
	if _, err := net.InterfaceByName(bridge); err != nil {
		return ""
	}
	if _, err := os.Stat(filepath.Join(cluster.Named(cluster.Options{Name: name}).Dir, "realnode")); err == nil {
		return ""
	}
	return "another cluster's real node runs on this machine (bridge " + bridge + "); bring that cluster down first"
}

func run(o options) error {
	unavailable := ""
	if o.tier != string(tierKwok) {
		if unavailable = cluster.RealNodeUnavailable(cluster.RepoRoot()); unavailable == "" {
			unavailable = realNodeBusy(o.name)
		}
	}
	t, reason, err := chooseTier(o.tier, unavailable)
	if err != nil {
		return err
	}
	if t == tierReal {
		fmt.Printf(">> real node: the demo's pods and Jobs run as real busybox containers on %s (kubelet and containerd on this machine), beside kwok's simulated nodes\n", cluster.RealNodeName)
	} else {
		fmt.Printf(">> %s\n", reason)
	}

	// Up and RunOperator bound their own waits, but not the first build of
	// the binaries, which takes minutes on a cold build cache.
	kc, err := cluster.Up(context.Background(), cluster.Options{Name: o.name, ProvisionerDelay: o.delay, RealNode: t == tierReal})
	if err != nil {
		return err
	}
	class := fmt.Sprintf("StorageClass %s (WaitForFirstConsumer, %s per volume)", cluster.StorageClassStandard, o.delay)
	csiData := ""
	if t == tierReal {
		switch err := kc.StartCSI(context.Background(), cluster.CSIOptions{CreateDelay: o.delay, AttachDelay: o.attachDelay, FormatDelay: o.formatDelay}); {
		case errors.Is(err, cluster.ErrCSISocketPathTooLong):
			fmt.Printf(">> the CSI driver cannot register with the kubelet here (%v): the storage is the hostPath test provisioner's\n", err)
		case err != nil:
			return err
		default:
			csiData = kc.CSIDataDir()
			class = fmt.Sprintf("StorageClass %s (CSI, WaitForFirstConsumer: %s to create a volume, %s to attach it, %s to format it)",
				cluster.StorageClassCSI, o.delay, o.attachDelay, o.formatDelay)
		}
	}
	// The operator as the chart installs it.
	op, err := cluster.RunOperator(context.Background(), kc, cluster.OperatorOptions{Args: cluster.ChartArgs})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()

	scheme := runtime.NewScheme()
	if err := fixtures.AddToScheme(scheme); err != nil {
		return err
	}
	informers, err := cache.New(kc.Config, cache.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	seen := newTimeline(namespace)
	for _, obj := range []client.Object{&corev1.Pod{}, &batchv1.Job{}, &corev1.PersistentVolumeClaim{}, &storagev1.VolumeAttachment{}} {
		inf, err := informers.GetInformer(ctx, obj)
		if err != nil {
			return err
		}
		if _, err := inf.AddEventHandler(seen.handler()); err != nil {
			return err
		}
	}
	go func() { _ = informers.Start(ctx) }()
	if !informers.WaitForCacheSync(ctx) {
		return fmt.Errorf("informers did not sync")
	}
	c, err := client.New(kc.Config, client.Options{Scheme: scheme, Cache: &client.CacheOptions{Reader: informers}})
	if err != nil {
		return err
	}

	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); client.IgnoreAlreadyExists(err) != nil {
		return err
	}
	fpvc := fixtures.MakeFluentPVC("demo").PoolSize(o.poolSize).Mutate(func(f *v1alpha1.FluentPVC) {
		f.Spec.Pool.Namespaces = []string{namespace}
	})
	if t == tierReal {
		fpvc = fpvc.RealContainers(claimMount, images.BusyboxContainer(sidecarName, sidecarScript), images.BusyboxContainer("drain", drainScript))
	}
	if csiData != "" {
		fpvc = fpvc.StorageClass(cluster.StorageClassCSI)
	}
	if err := c.Create(ctx, fpvc.Obj()); err != nil {
		return err
	}
	fmt.Printf(">> FluentPVC demo: pool of %d on %s; waiting until warm\n", o.poolSize, class)
	if t == tierReal {
		fmt.Printf(">> its sidecar appends a timestamped line to the pod's claim every 0.5 s; its drain Job counts the claim's lines\n")
	}
	warmStart := time.Now()
	for {
		f := &v1alpha1.FluentPVC{}
		if err := c.Get(ctx, client.ObjectKey{Name: fpvc.Name}, f); err != nil {
			return err
		}
		staged := int32(0)
		for _, p := range f.Status.Pool {
			staged += p.Staged
		}
		if f.Status.Warm >= o.poolSize && (csiData == "" || staged >= o.poolSize) {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the pool did not fill: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	what := "warm"
	if csiData != "" {
		what = "warm and staged (attached and formatted on the node by holder pods)"
	}
	fmt.Printf(">> pool %s %s after the FluentPVC was created\n", what, time.Since(warmStart).Round(100*time.Millisecond))

	fmt.Printf(">> starting %d labelled pods at once\n", o.pods)
	results := make([]podResult, o.pods)
	var wg sync.WaitGroup
	var createErr error
	var mu sync.Mutex
	for i := range o.pods {
		wg.Go(func() {
			pod := fixtures.MakePod(fmt.Sprintf("app-%d", i), namespace).FluentPVC(fpvc.Name).Obj()
			if t == tierReal {
				pod.Spec.Containers = []corev1.Container{images.IdleApp()}
			}
			created := time.Now()
			if err := c.Create(ctx, pod); err != nil {
				mu.Lock()
				createErr = err
				mu.Unlock()
				return
			}
			results[i] = podResult{pod: pod.Name, claim: pod.Labels[v1alpha1.BindingNameLabelKey], created: created}
		})
	}
	wg.Wait()
	if createErr != nil {
		return createErr
	}

	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Println("\nTIME TO READY is from the pod's create call to the demo's informer seeing it Running with its Ready condition True.")
	header := "\nPOD\tNODE\tPVC\tPVC PHASE\tFROM\tTIME TO READY"
	if csiData != "" {
		fmt.Println("ATTACHED is from the pod's create call to its volume's VolumeAttachment saying attached (\"before\": a staged hit, attached ahead of the pod); staging (with the first stage's format) and publishing follow.")
		header += "\tATTACHED"
	}
	fmt.Fprintln(w, header)
	sort.Slice(results, func(i, j int) bool { return results[i].pod < results[j].pod })
	for i := range results {
		r := &results[i]
		at, _, err := seen.wait(ctx, readyKey(r.pod))
		if err != nil {
			return err
		}
		pod := &corev1.Pod{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: r.pod}, pod); err != nil {
			return err
		}
		pvc := &corev1.PersistentVolumeClaim{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: r.claim}, pvc); err != nil {
			return err
		}
		from := "created (miss)"
		if pvc.Annotations[v1alpha1.CheckoutAnnotationKey] == v1alpha1.CheckoutHit {
			from = "pool (hit)"
		}
		row := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s", r.pod, pod.Spec.NodeName, r.claim, pvc.Status.Phase, from, at.Sub(r.created).Round(10*time.Millisecond))
		if csiData != "" {
			attached, _, err := seen.wait(ctx, attachedKey(pvc.Spec.VolumeName))
			if err != nil {
				return err
			}
			if d := attached.Sub(r.created); d < 0 {
				row += "\tbefore"
			} else {
				row += "\t" + d.Round(10*time.Millisecond).String()
			}
		}
		fmt.Fprintln(w, row)
	}
	_ = w.Flush()
	if csiData != "" {
		fmt.Printf("\nA hit on a staged PVC skips the volume's creation (%s), its attach (%s) and its first stage's format (%s); a miss pays them all.\n",
			o.delay, o.attachDelay, o.formatDelay)
	}
	fmt.Printf("\nFrom the FluentPVC's creation to the last pod Ready: %s.\n", time.Since(start).Round(100*time.Millisecond))

	if t == tierReal {
		if err := showWrites(ctx, c, csiData, results[0]); err != nil {
			return err
		}
		if err := drainAll(ctx, c, csiData, seen, results); err != nil {
			return err
		}
	}

	if err := showMetrics(ctx, op.MetricsURL(), fpvc.Name); err != nil {
		return err
	}

	fmt.Printf("\nThe cluster and the operator keep running:\n")
	fmt.Printf("  export KUBECONFIG=%s\n", kc.Kubeconfig)
	fmt.Printf("  bin/kubectl get fluentpvc,fluentpvcbinding,pvc,pods -A\n")
	fmt.Printf("  operator log: %s\n", op.LogPath)
	if o.name == "demo" {
		fmt.Printf("Stop everything with: make demo-down\n")
	} else {
		fmt.Printf("Stop everything with: go run ./test/cluster/cmd/kwokcluster -name %s down\n", o.name)
	}
	return nil
}

// podResult is one of the demo's pods.
type podResult struct {
	pod, claim string
	created    time.Time
}

// showMetrics prints what the operator's own metrics, at url, say of the
// demo's checkouts: hits and misses of FluentPVC fpvc, and the checkout's
// latency by the histogram's buckets; then how to see them on the
// dashboard.
func showMetrics(ctx context.Context, url, fpvc string) error {
	m, err := fixtures.ScrapeMetrics(ctx, url)
	if err != nil {
		return err
	}
	hits := m.Counter("fluentpvc_pool_checkouts_total", map[string]string{"fluentpvc": fpvc, "result": "hit"})
	misses := m.Counter("fluentpvc_pool_checkouts_total", map[string]string{"fluentpvc": fpvc, "result": "miss"})
	fmt.Printf("\nThe operator's metrics (%s):\n", url)
	if total := hits + misses; total > 0 {
		fmt.Printf("  fluentpvc_pool_checkouts_total: %.0f hits, %.0f misses: hit ratio %.0f%%\n", hits, misses, 100*hits/total)
	}
	for _, result := range []string{"hit", "miss"} {
		labels := map[string]string{"result": result}
		p50 := m.HistogramQuantile("fluentpvc_pool_checkout_duration_seconds", labels, 0.5)
		p99 := m.HistogramQuantile("fluentpvc_pool_checkout_duration_seconds", labels, 0.99)
		if !math.IsNaN(p50) {
			fmt.Printf("  fluentpvc_pool_checkout_duration_seconds, %s: p50 <= %s, p99 <= %s (the histogram's buckets)\n", result, seconds(p50), seconds(p99))
		}
	}
	fmt.Printf("On a dashboard: scrape %s with Prometheus, load its rules from config/prometheus-rules/fluent-pvc-operator.rules.yaml,\n", url)
	fmt.Printf("and import docs/grafana-dashboard.json into Grafana: docs/monitoring.md says how.\n")
	return nil
}

// seconds prints a bucket bound d (seconds) in milliseconds.
func seconds(d float64) string {
	if math.IsInf(d, 1) {
		return "+Inf"
	}
	return (time.Duration(d * float64(time.Second))).String()
}
