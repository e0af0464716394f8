package csidriver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"
)

// Nodes of the tests: the in-process node service runs as nodeA.
const (
	nodeA  = "node-a-0"
	nodeA1 = "node-a-1"
	nodeB  = "node-b-0"
	zoneA  = "zone-a"
	zoneB  = "zone-b"
	zoneC  = "zone-c"
)

// fakeMount is a bind mount the fakeMounter made.
type fakeMount struct {
	Source   string
	ReadOnly bool
}

// fakeMounter records mounts instead of making them.
type fakeMounter struct {
	mu     sync.Mutex
	mounts map[string]fakeMount
	// binds counts BindMount calls.
	binds int
}

func newFakeMounter() *fakeMounter { return &fakeMounter{mounts: map[string]fakeMount{}} }

func (f *fakeMounter) BindMount(source, target string, readOnly bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.mounts[target]; ok {
		return fmt.Errorf("%s is mounted already", target)
	}
	f.mounts[target] = fakeMount{Source: source, ReadOnly: readOnly}
	f.binds++
	return nil
}

func (f *fakeMounter) Unmount(target string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.mounts[target]; !ok {
		return fmt.Errorf("%s is not mounted", target)
	}
	delete(f.mounts, target)
	return nil
}

func (f *fakeMounter) IsMountPoint(path string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.mounts[path]
	return ok, nil
}

func (f *fakeMounter) snapshot() (map[string]fakeMount, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := make(map[string]fakeMount, len(f.mounts))
	for k, v := range f.mounts {
		m[k] = v
	}
	return m, f.binds
}

// env is a driver under test with its directories and clients.
type env struct {
	opts    Options
	driver  *Driver
	mounter *fakeMounter
	ctrl    csi.ControllerClient
	node    csi.NodeClient
	ident   csi.IdentityClient
}

// testOptions are a controller and a node service (nodeA) on one socket,
// with no delays, the fake mounter, and two more known nodes. Sockets sit
// in a short temporary dir: a test's TempDir can exceed a socket path's
// limit.
func testOptions(t *testing.T) Options {
	t.Helper()
	sockets, err := os.MkdirTemp("", "csid")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(sockets) })
	dir := t.TempDir()
	sock := filepath.Join(sockets, "csi.sock")
	return Options{
		ControllerSocket:  sock,
		NodeSocket:        sock,
		DataDir:           filepath.Join(dir, "data"),
		StateDir:          filepath.Join(dir, "state"),
		NodeID:            nodeA,
		Zone:              zoneA,
		Zones:             []string{zoneA, zoneB, zoneC},
		KnownNodes:        map[string]string{nodeA1: zoneA, nodeB: zoneB},
		MaxVolumesPerNode: 2,
		Mounter:           newFakeMounter(),
	}
}

// start starts a driver with opts and dials its sockets; the test stops it.
func start(t *testing.T, opts Options) *env {
	t.Helper()
	d, err := Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	e := &env{opts: d.opts, driver: d}
	e.mounter, _ = d.opts.Mounter.(*fakeMounter)
	if opts.ControllerSocket != "" {
		conn := dial(t, opts.ControllerSocket)
		e.ctrl, e.ident = csi.NewControllerClient(conn), csi.NewIdentityClient(conn)
	}
	if opts.NodeSocket != "" {
		conn := dial(t, opts.NodeSocket)
		e.node = csi.NewNodeClient(conn)
		if e.ident == nil {
			e.ident = csi.NewIdentityClient(conn)
		}
	}
	return e
}

// newEnv starts a driver with testOptions.
func newEnv(t *testing.T) *env {
	t.Helper()
	return start(t, testOptions(t))
}

// clockOptions are testOptions with a fake clock, which the test steps
// through the driver's delays.
func clockOptions(t *testing.T) (Options, *clocktesting.FakeClock) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Now())
	opts := testOptions(t)
	opts.Clock = clk
	return opts, clk
}

func dial(t *testing.T, socket string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func callCtx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// code is an error's gRPC code; OK for nil.
func code(err error) codes.Code { return status.Code(err) }

// codeDiff describes how err's gRPC code differs from want, with err;
// it is "" when they agree.
func codeDiff(want codes.Code, err error) string {
	if diff := cmp.Diff(want, code(err)); diff != "" {
		return fmt.Sprintf("code (-want +got):\n%s\n%v", diff, err)
	}
	return ""
}

var mountCap = &csi.VolumeCapability{
	AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
	AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
}

func capWithMode(m csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: m},
	}
}

// zoneReq is an accessibility requirement on the zone key.
func zoneReq(requisite, preferred []string) *csi.TopologyRequirement {
	r := &csi.TopologyRequirement{}
	for _, z := range requisite {
		r.Requisite = append(r.Requisite, &csi.Topology{Segments: map[string]string{DefaultTopologyKey: z}})
	}
	for _, z := range preferred {
		r.Preferred = append(r.Preferred, &csi.Topology{Segments: map[string]string{DefaultTopologyKey: z}})
	}
	return r
}

// createVolume creates a volume named name in zone and returns its ID.
func (e *env) createVolume(t *testing.T, name, zone string) string {
	t.Helper()
	resp, err := e.ctrl.CreateVolume(callCtx(t), &csi.CreateVolumeRequest{
		Name:                      name,
		VolumeCapabilities:        []*csi.VolumeCapability{mountCap},
		AccessibilityRequirements: zoneReq([]string{zone}, nil),
	})
	if err != nil {
		t.Fatalf("creating volume %s: %v", name, err)
	}
	return resp.GetVolume().GetVolumeId()
}

func (e *env) publish(t *testing.T, id, node string) *csi.ControllerPublishVolumeResponse {
	t.Helper()
	resp, err := e.ctrl.ControllerPublishVolume(callCtx(t), &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: node, VolumeCapability: mountCap})
	if err != nil {
		t.Fatalf("publishing volume %s to %s: %v", id, node, err)
	}
	return resp
}

// volumeOf returns the ID of volume pvc-1 of zone-a, which it creates if
// create says so and then publishes to node attachTo unless it is "".
func (e *env) volumeOf(t *testing.T, create bool, attachTo string) string {
	t.Helper()
	id := volumeID("pvc-1")
	if create {
		e.createVolume(t, "pvc-1", zoneA)
	}
	if attachTo != "" {
		e.publish(t, id, attachTo)
	}
	return id
}

// attachedVolume returns the ID of volume pvc-1 of zone-a, created and
// published to nodeA, the node service's node.
func (e *env) attachedVolume(t *testing.T) string {
	t.Helper()
	return e.volumeOf(t, true, nodeA)
}

// stagingPath is a staging target path in a temporary dir of t.
func stagingPath(t *testing.T) string { return filepath.Join(t.TempDir(), "globalmount") }

func (e *env) stage(t *testing.T, id string) (string, error) {
	t.Helper()
	staging := stagingPath(t)
	_, err := e.node.NodeStageVolume(callCtx(t), &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: mountCap})
	return staging, err
}

// callBlocked runs call in the background, waits until it blocks on clk,
// and checks that it has not returned; the channel gives its error once it
// does.
func callBlocked(t *testing.T, clk *clocktesting.FakeClock, what string, call func(context.Context) error) <-chan error {
	t.Helper()
	ctx, done := callCtx(t), make(chan error, 1)
	go func() { done <- call(ctx) }()
	waitForWaiters(t, clk)
	select {
	case err := <-done:
		t.Fatalf("%s returned before its delay passed: %v", what, err)
	default:
	}
	return done
}

// waitForWaiters waits until a call blocks on the fake clock.
func waitForWaiters(t *testing.T, clk *clocktesting.FakeClock) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(callCtx(t), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return clk.HasWaiters(), nil
	}); err != nil {
		t.Fatal("no call waits on the clock")
	}
}
