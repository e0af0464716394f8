package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/st-tech/fluent-pvc-operator/test/provisioner/hostpath"
)

// Names of the objects Up installs.
const (
	// DefaultName is the cluster's name unless Options.Name says otherwise.
	DefaultName = "fluent-pvc-operator"
	// StorageClassStandard is the default StorageClass, WaitForFirstConsumer
	// with reclaim policy Delete: the class of the operator's sample.
	StorageClassStandard = "standard"
	// StorageClassImmediate binds at once, in a round-robin zone.
	StorageClassImmediate = "standard-immediate"
	// ProvisionerName is the provisioner of both classes.
	ProvisionerName = hostpath.ProvisionerName
	// NodeTypeLabelKey is set to "kwok" on every node.
	NodeTypeLabelKey = "type"
)

// DefaultZones are the zones of the nodes unless Options.Zones says otherwise.
var DefaultZones = []string{"zone-a", "zone-b", "zone-c"}

// Options configure Up.
type Options struct {
	// Name of the cluster; DefaultName if empty. State lives in
	// <RepoRoot>/.kwok/<Name> (ours) and <RepoRoot>/.kwok/clusters/<Name>
	// (kwokctl's).
	Name string
	// RepoRoot is the repository; found from this source file if empty.
	RepoRoot string
	// Zones of the nodes; DefaultZones if empty.
	Zones []string
	// NodesPerZone; 2 if zero.
	NodesPerZone int
	// ProvisionerDelay is how long each volume takes to provision; 5s if zero.
	ProvisionerDelay time.Duration
	// ExtraStages are kwok Stage documents added to DefaultStages, for
	// example E2EStages().
	ExtraStages []string
	// Out receives progress lines; os.Stderr if nil, io.Discard to silence.
	Out io.Writer
	// Timeout bounds Up once the binaries are built; 3 minutes if zero.
	Timeout time.Duration
	// AuditPolicy, when set, is kube-apiserver's audit policy; the log is
	// then written to AuditLog().
	AuditPolicy []byte
	// RealNode adds a kubelet node (RealNodeName, in the first zone) with
	// containerd beside the fake ones, which kwok alone then manages and
	// which are then tainted (FakeNodeTaintKey); see RealNodeUnavailable
	// for what it needs.
	RealNode bool
	// TraceGC runs kube-apiserver with GODEBUG=gctrace=1: each of its
	// garbage collections writes a line to its log, which
	// Cluster.APIServerGCs reads.
	TraceGC bool
}

func (o Options) withDefaults() Options {
	if o.Name == "" {
		o.Name = DefaultName
	}
	if o.RepoRoot == "" {
		o.RepoRoot = RepoRoot()
	}
	if len(o.Zones) == 0 {
		o.Zones = DefaultZones
	}
	if o.NodesPerZone == 0 {
		o.NodesPerZone = 2
	}
	if o.ProvisionerDelay == 0 {
		o.ProvisionerDelay = 5 * time.Second
	}
	if o.Out == nil {
		o.Out = os.Stderr
	}
	if o.Timeout == 0 {
		o.Timeout = 3 * time.Minute
	}
	return o
}

// Cluster is a running kwok cluster.
type Cluster struct {
	// Name of the cluster.
	Name string
	// RepoRoot is the repository the binaries and manifests come from.
	RepoRoot string
	// Dir is <RepoRoot>/.kwok/<Name>: kubeconfig, logs, PID files, certs.
	Dir string
	// Kubeconfig is the admin kubeconfig, <Dir>/kubeconfig.
	Kubeconfig string
	// Config is the admin rest.Config, with QPS limits raised.
	Config *rest.Config
	// Clientset is a client of Config.
	Clientset kubernetes.Interface

	out         io.Writer
	provisioner *process
}

// RepoRoot is the repository's root directory, found from this source file
// or, in a binary built with -trimpath, as the nearest directory above the
// working directory that holds go.mod.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
		return root
	}
	dir, _ := os.Getwd()
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if d == filepath.Dir(d) {
			return dir
		}
	}
}

func (c *Cluster) bin(name string) string { return filepath.Join(c.RepoRoot, "bin", name) }

func (c *Cluster) workdir() string { return filepath.Join(c.RepoRoot, ".kwok") }

// KwokctlDir is kwokctl's state of the cluster: logs of the control plane
// in <KwokctlDir>/logs, PIDs in <KwokctlDir>/pids.
func (c *Cluster) KwokctlDir() string { return filepath.Join(c.workdir(), "clusters", c.Name) }

// AuditLog is kube-apiserver's audit log, written when Options.AuditPolicy
// was set.
func (c *Cluster) AuditLog() string { return filepath.Join(c.KwokctlDir(), "logs", "audit.log") }

// ProvisionerLog is the test provisioner's log file.
func (c *Cluster) ProvisionerLog() string { return filepath.Join(c.Dir, "provisioner.log") }

func (c *Cluster) progress(format string, args ...any) {
	fmt.Fprintf(c.out, ">> "+format+"\n", args...)
}

func newCluster(o Options) *Cluster {
	root, _ := filepath.Abs(o.RepoRoot)
	dir := filepath.Join(root, ".kwok", o.Name)
	return &Cluster{Name: o.Name, RepoRoot: root, Dir: dir, Kubeconfig: filepath.Join(dir, "kubeconfig"), out: o.Out}
}

// Up creates the cluster with kwokctl's binary runtime from the binaries in
// bin/ (building the missing ones with `make bins`), replacing a cluster of
// the same name: nodes in every zone, the StorageClasses, and the test
// provisioner in the background. It returns once the nodes are Ready and the
// default ServiceAccount exists. On error it tears down what it started.
func Up(ctx context.Context, opts Options) (*Cluster, error) {
	o := opts.withDefaults()
	c := newCluster(o)

	if c.exists() {
		c.progress("deleting the existing cluster %s", c.Name)
		if err := c.Down(); err != nil {
			return nil, err
		}
	}
	if err := c.ensureBinaries(ctx); err != nil {
		return nil, err
	}
	// Timed and bounded from here, so that a first run's compile (minutes
	// on a cold build cache) neither counts as the cluster's start-up nor
	// runs into its timeout.
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return nil, err
	}
	if err := c.up(ctx, o, start); err != nil {
		if downErr := c.Down(); downErr != nil {
			err = errors.Join(err, fmt.Errorf("tearing down after the failure: %w", downErr))
		}
		return nil, err
	}
	return c, nil
}

func (c *Cluster) up(ctx context.Context, o Options, start time.Time) error {
	c.progress("creating kwok cluster %s (binary runtime, state in %s)", c.Name, c.workdir())
	createStart := time.Now()
	configPath := filepath.Join(c.Dir, "kwokctl.yaml")
	stages := append(DefaultStages(), o.ExtraStages...)
	if err := os.WriteFile(configPath, []byte(kwokctlConfig(c.bin("kubectl"), stages, o.RealNode, o.TraceGC)), 0o644); err != nil {
		return err
	}
	var audit []string
	if len(o.AuditPolicy) > 0 {
		policy := filepath.Join(c.Dir, "audit-policy.yaml")
		if err := os.WriteFile(policy, o.AuditPolicy, 0o644); err != nil {
			return err
		}
		audit = []string{"--kube-audit-policy", policy}
	}
	if err := c.kwokctl(ctx, append([]string{"create", "cluster",
		"--name", c.Name,
		"--config", configPath,
		"--runtime", "binary",
		"--kube-apiserver-binary", c.bin("kube-apiserver"),
		"--kube-controller-manager-binary", c.bin("kube-controller-manager"),
		"--kube-scheduler-binary", c.bin("kube-scheduler"),
		"--etcd-binary", c.bin("etcd"),
		"--kwok-controller-binary", c.bin("kwok"),
		"--disable-qps-limits",
		"--kubeconfig", c.Kubeconfig,
	}, audit...)...); err != nil {
		return err
	}
	c.progress("control plane started (kwokctl create cluster took %s)", since(createStart))
	if err := c.connect(); err != nil {
		return err
	}
	if err := c.waitAPIServer(ctx); err != nil {
		return err
	}
	c.progress("creating %d nodes in zones %s", len(o.Zones)*o.NodesPerZone, strings.Join(o.Zones, ","))
	if err := c.CreateNodes(ctx, NodeSet{Zones: o.Zones, PerZone: o.NodesPerZone, Tainted: o.RealNode}); err != nil {
		return err
	}
	if err := c.createStorageClasses(ctx); err != nil {
		return err
	}
	c.progress("starting the test provisioner (delay %s, log %s)", o.ProvisionerDelay, c.ProvisionerLog())
	if err := c.startProvisioner(o.ProvisionerDelay); err != nil {
		return err
	}
	c.progress("waiting for nodes to be Ready and the default ServiceAccount")
	if err := c.waitReady(ctx); err != nil {
		return err
	}
	if o.RealNode {
		realStart := time.Now()
		if err := c.startRealNode(ctx, o.Zones[0]); err != nil {
			return fmt.Errorf("the real node: %w", err)
		}
		c.progress("real node %s is Ready (kubelet and containerd, state in %s) in %s", RealNodeName, c.realDir(), since(realStart))
	}
	c.progress("cluster %s is up: %s from kwokctl create to Ready nodes; export KUBECONFIG=%s", c.Name, since(start), c.Kubeconfig)
	return nil
}

func since(t time.Time) time.Duration { return time.Since(t).Round(10 * time.Millisecond) }

// Named is the cluster of opts, running or not, without a connection: its
// Down removes whatever is left of it.
func Named(opts Options) *Cluster { return newCluster(opts.withDefaults()) }

// Open returns the running cluster that Up created, possibly in another
// process (as the CLI's down and operator commands do).
func Open(opts Options) (*Cluster, error) {
	o := opts.withDefaults()
	c := newCluster(o)
	if _, err := os.Stat(c.Kubeconfig); err != nil {
		return nil, fmt.Errorf("cluster %s is not up (no %s): %w", c.Name, c.Kubeconfig, err)
	}
	if err := c.connect(); err != nil {
		return nil, err
	}
	c.provisioner = processFromPIDFile(c.provisionerPIDFile(), c.bin("test-provisioner"))
	return c, nil
}

func (c *Cluster) exists() bool {
	for _, p := range []string{c.Dir, c.KwokctlDir()} {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	return false
}

func (c *Cluster) ensureBinaries(ctx context.Context) error {
	var missing []string
	for _, name := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok", "kwokctl"} {
		if _, err := os.Stat(c.bin(name)); err != nil {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		start := time.Now()
		c.progress("building missing binaries with make bins: %s", strings.Join(missing, " "))
		cmd := exec.CommandContext(ctx, "make", "-C", c.RepoRoot, "bins")
		cmd.Stdout, cmd.Stderr = c.out, c.out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("make bins: %w", err)
		}
		c.progress("control-plane binaries built in %s", since(start))
	}
	start := time.Now()
	built, err := ensureBuilt(ctx, c.RepoRoot, c.bin("test-provisioner"), "./test/provisioner",
		filepath.Join(c.RepoRoot, "test", "provisioner"), filepath.Join(c.RepoRoot, "go.mod"), filepath.Join(c.RepoRoot, "go.sum"))
	if built {
		c.progress("built bin/test-provisioner in %s", since(start))
	}
	return err
}

// kwokctl runs bin/kwokctl with the cluster's workdir; its output goes to
// <Dir>/kwokctl.log and into the error.
func (c *Cluster) kwokctl(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, c.bin("kwokctl"), args...)
	cmd.Env = append(os.Environ(),
		"KWOK_WORKDIR="+c.workdir(),
		// kwokctl looks kubectl up on PATH before it falls back to
		// kubectlBinary (which it would download).
		"PATH="+filepath.Join(c.RepoRoot, "bin")+string(os.PathListSeparator)+os.Getenv("PATH"),
	)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if f, ferr := os.OpenFile(filepath.Join(c.Dir, "kwokctl.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); ferr == nil {
		fmt.Fprintf(f, "$ kwokctl %s\n%s\n", strings.Join(args, " "), out.Bytes())
		f.Close()
	}
	if err != nil {
		return fmt.Errorf("kwokctl %s: %w\n%s", strings.Join(args[:2], " "), err, out.Bytes())
	}
	return nil
}

func (c *Cluster) connect() error {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return fmt.Errorf("loading %s: %w", c.Kubeconfig, err)
	}
	cfg.QPS, cfg.Burst = 500, 1000
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	c.Config, c.Clientset = cfg, cs
	return nil
}

const poll = 100 * time.Millisecond

func (c *Cluster) waitAPIServer(ctx context.Context) error {
	var lastErr error
	err := wait.PollUntilContextCancel(ctx, poll, true, func(ctx context.Context) (bool, error) {
		_, lastErr = c.Clientset.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return lastErr == nil, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the API server: %w (last: %v)", err, lastErr)
	}
	return nil
}

// NodeName is the name of the i-th node of a zone.
func NodeName(zone string, i int) string {
	return fmt.Sprintf("kwok-%s-%d", zone, i)
}

// Labels of the fake nodes besides the well-known ones: a GKE-style zone
// key (the same zone as topology.kubernetes.io/zone) and a node pool, for
// checkouts keyed by other topology labels.
const (
	// GKEZoneLabelKey is the GCE PD CSI driver's zone key.
	GKEZoneLabelKey = "topology.gke.io/zone"
	// NodePoolLabelKey names a node's pool: NodePoolLogging on the nodes of
	// LoggingPoolZone, NodePoolDefault on the others.
	NodePoolLabelKey = "cloud.google.com/gke-nodepool"
	NodePoolDefault  = "default"
	NodePoolLogging  = "logging"
	// LoggingPoolZone is the one zone whose nodes are in NodePoolLogging.
	LoggingPoolZone = "zone-b"
)

// NodeSet is a group of fake nodes to create: perZone nodes in each zone,
// numbered from First (NodeName), tainted with FakeNodeTaintKey when Tainted.
type NodeSet struct {
	Zones   []string
	PerZone int
	First   int
	Tainted bool
}

// CreateNodes creates the fake nodes of s that do not exist yet.
func (c *Cluster) CreateNodes(ctx context.Context, s NodeSet) error {
	var taints []corev1.Taint
	if s.Tainted {
		taints = []corev1.Taint{{Key: FakeNodeTaintKey, Value: "fake", Effect: corev1.TaintEffectNoSchedule}}
	}
	for _, zone := range s.Zones {
		nodePool := NodePoolDefault
		if zone == LoggingPoolZone {
			nodePool = NodePoolLogging
		}
		for i := s.First; i < s.First+s.PerZone; i++ {
			name := NodeName(zone, i)
			// Fake nodes cost nothing, so they are large enough that
			// capacity never limits a benchmark: 200 pods of the README
			// sample (1 CPU and 1Gi per container) fill 32-CPU nodes.
			resources := corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse("1000"),
				corev1.ResourceMemory: resource.MustParse("4Ti"),
				corev1.ResourcePods:   resource.MustParse("1000"),
			}
			node := &corev1.Node{
				ObjectMeta: metav1.ObjectMeta{
					Name: name,
					Labels: map[string]string{
						corev1.LabelTopologyZone:   zone,
						GKEZoneLabelKey:            zone,
						NodePoolLabelKey:           nodePool,
						corev1.LabelHostname:       name,
						corev1.LabelOSStable:       "linux",
						corev1.LabelArchStable:     "amd64",
						NodeTypeLabelKey:           "kwok",
						"node.kubernetes.io/role":  "worker",
						"kubernetes.io/role":       "agent",
						corev1.LabelTopologyRegion: "region-1",
					},
					// kwokctl's kwok-controller manages all nodes; the
					// annotation keeps them managed under --manage-all-nodes=false.
					Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
				},
				Spec:   corev1.NodeSpec{Taints: taints},
				Status: corev1.NodeStatus{Allocatable: resources, Capacity: resources},
			}
			if _, err := c.Clientset.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("creating node %s: %w", name, err)
			}
		}
	}
	return nil
}

func (c *Cluster) createStorageClasses(ctx context.Context) error {
	classes := []*storagev1.StorageClass{{
		ObjectMeta: metav1.ObjectMeta{
			Name:        StorageClassStandard,
			Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"},
		},
		Provisioner:       ProvisionerName,
		ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimDelete),
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
	}, {
		ObjectMeta:        metav1.ObjectMeta{Name: StorageClassImmediate},
		Provisioner:       ProvisionerName,
		ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimDelete),
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate),
	}}
	for _, sc := range classes {
		if _, err := c.Clientset.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating StorageClass %s: %w", sc.Name, err)
		}
	}
	return nil
}

func (c *Cluster) provisionerPIDFile() string { return filepath.Join(c.Dir, "provisioner.pid") }

func (c *Cluster) startProvisioner(delay time.Duration) error {
	p, err := startBackground(c.bin("test-provisioner"),
		[]string{"--kubeconfig", c.Kubeconfig, "--delay", delay.String()},
		c.ProvisionerLog(), c.provisionerPIDFile())
	if err != nil {
		return err
	}
	c.provisioner = p
	return nil
}

func (c *Cluster) waitReady(ctx context.Context) error {
	var state string
	err := wait.PollUntilContextCancel(ctx, poll, true, func(ctx context.Context) (bool, error) {
		if c.provisioner != nil && !c.provisioner.alive() {
			return false, fmt.Errorf("the test provisioner exited; see %s", c.ProvisionerLog())
		}
		nodes, err := c.Clientset.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			state = err.Error()
			return false, nil
		}
		ready := 0
		for _, n := range nodes.Items {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		if ready == 0 || ready < len(nodes.Items) {
			state = fmt.Sprintf("%d of %d nodes Ready", ready, len(nodes.Items))
			return false, nil
		}
		if _, err := c.Clientset.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{}); err != nil {
			state = "no default ServiceAccount: " + err.Error()
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the cluster to be ready: %w (%s)", err, state)
	}
	return nil
}

// PIDs are the processes of the cluster: the control plane's (from
// kwokctl's PID files), the provisioner's, the CSI storage's and the
// operator's. Down ends them
// all; tests use PIDs to check that.
func (c *Cluster) PIDs() map[string]int {
	pids := map[string]int{}
	files, _ := filepath.Glob(filepath.Join(c.KwokctlDir(), "pids", "*.pid"))
	operators, _ := filepath.Glob(filepath.Join(c.Dir, "operator*.pid"))
	files = append(append(files, c.provisionerPIDFile()), operators...)
	for _, name := range csiProcesses {
		files = append(files, filepath.Join(c.Dir, name+".pid"))
	}
	for _, f := range files {
		if p := processFromPIDFile(f, ""); p != nil {
			pids[strings.TrimSuffix(filepath.Base(f), ".pid")] = p.pid
		}
	}
	return pids
}

// Down stops the operators (any RunOperator started), the CSI storage
// (StartCSI) and the provisioner by their PIDs, deletes the cluster with kwokctl, and removes its state
// (<Dir> and kwokctl's directory). It is safe to call more than once.
func (c *Cluster) Down() error {
	start := time.Now()
	c.progress("deleting cluster %s", c.Name)
	var errs []error
	operators, _ := filepath.Glob(filepath.Join(c.Dir, "operator*.pid"))
	for _, f := range operators {
		if p := processFromPIDFile(f, c.bin("manager")); p != nil {
			errs = append(errs, p.stop(operatorStopTimeout))
		}
	}
	errs = append(errs, c.stopCSI()...)
	errs = append(errs, c.downRealNode())
	p := c.provisioner
	if p == nil {
		p = processFromPIDFile(c.provisionerPIDFile(), c.bin("test-provisioner"))
	}
	if p != nil {
		errs = append(errs, p.stop(10*time.Second))
	}
	if _, err := os.Stat(c.KwokctlDir()); err == nil {
		if err := os.MkdirAll(c.Dir, 0o755); err != nil {
			errs = append(errs, err)
		}
		// kwokctl delete signals the control plane and returns without
		// waiting, so Down waits for the PIDs it read before.
		var controlPlane []*process
		files, _ := filepath.Glob(filepath.Join(c.KwokctlDir(), "pids", "*.pid"))
		for _, f := range files {
			if p := processFromPIDFile(f, ""); p != nil {
				p.path = strings.TrimSuffix(filepath.Base(f), ".pid")
				controlPlane = append(controlPlane, p)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		errs = append(errs, c.kwokctl(ctx, "delete", "cluster", "--name", c.Name, "--kubeconfig", c.Kubeconfig))
		cancel()
		for _, p := range controlPlane {
			errs = append(errs, p.stop(30*time.Second))
		}
	}
	errs = append(errs, os.RemoveAll(c.Dir))
	_ = os.Remove(filepath.Join(c.workdir(), "clusters")) // kwokctl leaves it empty
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("deleting cluster %s: %w", c.Name, err)
	}
	c.progress("deleted cluster %s in %s", c.Name, since(start))
	return nil
}
