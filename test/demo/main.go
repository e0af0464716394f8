// Command demo shows fluent-pvc-operator on a local simulated cluster: it
// starts the cluster (test/cluster) and the operator, creates a FluentPVC
// with a warm pool of 3 on a StorageClass that takes 5 s to provision a
// volume, then starts 5 labelled pods at once and prints, for each, its
// claim, whether the claim came from the pool, and how long the pod took to
// be Running. The cluster keeps running for exploring with kubectl until
// `make demo-down`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"sync"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/test/cluster"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

const namespace = "demo"

func main() {
	name := flag.String("name", "demo", "cluster name")
	delay := flag.Duration("delay", 5*time.Second, "time the test provisioner takes per volume, like a cloud disk")
	poolSize := flag.Int("pool", 3, "warm PVCs in the pool")
	pods := flag.Int("pods", 5, "labelled pods to start at once")
	flag.Parse()
	cluster.SetCommandLogger(os.Stderr)
	if err := run(*name, *delay, int32(*poolSize), *pods); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(name string, delay time.Duration, poolSize int32, n int) error {
	// Up and RunOperator bound their own waits, but not the first build of
	// the binaries, which takes minutes on a cold build cache.
	kc, err := cluster.Up(context.Background(), cluster.Options{Name: name, ProvisionerDelay: delay})
	if err != nil {
		return err
	}
	op, err := cluster.RunOperator(context.Background(), kc, cluster.OperatorOptions{})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	informers, err := cache.New(kc.Config, cache.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	running := newRunningTracker()
	podInformer, err := informers.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return err
	}
	if _, err := podInformer.AddEventHandler(running.handler()); err != nil {
		return err
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
	fpvc := fixtures.MakeFluentPVC("demo").PoolSize(poolSize).Mutate(func(f *v1alpha1.FluentPVC) {
		f.Spec.Pool.Namespaces = []string{namespace}
	}).Obj()
	if err := c.Create(ctx, fpvc); err != nil {
		return err
	}
	fmt.Printf(">> FluentPVC demo: pool of %d on StorageClass standard (WaitForFirstConsumer, %s per volume); waiting until warm\n", poolSize, delay)
	warmStart := time.Now()
	for {
		f := &v1alpha1.FluentPVC{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(fpvc), f); err != nil {
			return err
		}
		if f.Status.Warm >= poolSize {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the pool did not fill: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	fmt.Printf(">> pool warm %s after the FluentPVC was created\n", time.Since(warmStart).Round(100*time.Millisecond))

	fmt.Printf(">> starting %d labelled pods at once\n", n)
	type result struct {
		pod, claim string
		created    time.Time
	}
	results := make([]result, n)
	var wg sync.WaitGroup
	var createErr error
	var mu sync.Mutex
	for i := range n {
		wg.Go(func() {
			pod := fixtures.MakePod(fmt.Sprintf("app-%d", i), namespace).FluentPVC(fpvc.Name).Obj()
			created := time.Now()
			if err := c.Create(ctx, pod); err != nil {
				mu.Lock()
				createErr = err
				mu.Unlock()
				return
			}
			results[i] = result{pod: pod.Name, claim: pod.Labels[v1alpha1.BindingNameLabelKey], created: created}
		})
	}
	wg.Wait()
	if createErr != nil {
		return createErr
	}

	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Println("\nTIME TO RUNNING is from the pod's create call to the first Running status the demo's informer saw.")
	fmt.Fprintln(w, "\nPOD\tPVC\tFROM\tTIME TO RUNNING")
	sort.Slice(results, func(i, j int) bool { return results[i].pod < results[j].pod })
	for i := range results {
		r := &results[i]
		at, err := running.wait(ctx, r.pod)
		if err != nil {
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
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", r.pod, r.claim, from, at.Sub(r.created).Round(10*time.Millisecond))
	}
	_ = w.Flush()

	fmt.Printf("\nFrom the FluentPVC's creation to the last pod Running: %s. The cluster and the operator keep running:\n", time.Since(start).Round(100*time.Millisecond))
	fmt.Printf("  export KUBECONFIG=%s\n", kc.Kubeconfig)
	fmt.Printf("  bin/kubectl get fluentpvc,fluentpvcbinding,pvc,pods -A\n")
	fmt.Printf("  operator log: %s\n", op.LogPath)
	fmt.Printf("Stop everything with: make demo-down\n")
	return nil
}

// runningTracker records when each pod of the demo namespace is first seen
// Running by the informer.
type runningTracker struct {
	mu   sync.Mutex
	at   map[string]time.Time
	wake chan struct{}
}

func newRunningTracker() *runningTracker {
	return &runningTracker{at: map[string]time.Time{}, wake: make(chan struct{}, 1)}
}

func (t *runningTracker) handler() toolscache.ResourceEventHandler {
	see := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.Namespace != namespace || p.Status.Phase != corev1.PodRunning {
			return
		}
		t.mu.Lock()
		if _, seen := t.at[p.Name]; !seen {
			t.at[p.Name] = time.Now()
		}
		t.mu.Unlock()
		select {
		case t.wake <- struct{}{}:
		default:
		}
	}
	return toolscache.ResourceEventHandlerFuncs{AddFunc: see, UpdateFunc: func(_, obj any) { see(obj) }}
}

func (t *runningTracker) wait(ctx context.Context, pod string) (time.Time, error) {
	for {
		t.mu.Lock()
		at, ok := t.at[pod]
		t.mu.Unlock()
		if ok {
			return at, nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("pod %s is not Running: %w", pod, ctx.Err())
		case <-t.wake:
		case <-time.After(time.Second):
		}
	}
}
