// Package csidriver is a test-only CSI driver that behaves like a cloud
// disk: volumes live in a zone and take time to create and delete, a
// volume attaches to one node at a time and takes time to attach and
// detach, the first stage of a volume formats it, and a node takes a
// limited number of volumes. A volume is a directory under
// Options.DataDir of this machine, which the node service bind-mounts into
// pods.
//
// The controller keeps its view (volumes, zones, attachments) in
// <StateDir>/state.json, written after each change and read at start, so a
// driver restarted in the middle of an attach finishes it when the
// external-attacher retries. A node service in another process on the
// same machine reads that file to learn what is attached to its node; the
// controller learns of nodes from Options.KnownNodes and from the records
// that node services write under <StateDir>/nodes.
//
// The node service registers itself with the kubelet through the kubelet's
// plugin-registration API (Options.RegistrationDir), the part that
// node-driver-registrar plays beside a production driver.
package csidriver

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/utils/clock"
)

const (
	// DefaultName is the driver's name unless Options.Name says otherwise.
	DefaultName = "disk.csi.fluent-pvc-operator.test"
	// DefaultTopologyKey is the zone's topology key unless
	// Options.TopologyKey says otherwise.
	DefaultTopologyKey = "topology.disk.csi.fluent-pvc-operator.test/zone"
	// VendorVersion is GetPluginInfo's vendor_version.
	VendorVersion = "0.1.0"
	// DefaultCapacityBytes is the size of a volume whose request names none.
	DefaultCapacityBytes int64 = 1 << 30
	// stateFile is the controller's state under Options.StateDir.
	stateFile = "state.json"
	// maxSocketPath is the longest path a unix socket can bind to.
	maxSocketPath = 107
)

// Options configure a driver. At least one of ControllerSocket and
// NodeSocket is required; when both name one path, one gRPC server serves
// the identity, controller and node services there.
type Options struct {
	// Name is the driver's name; defaults to DefaultName.
	Name string
	// TopologyKey is the key of the zone in topology segments; defaults to
	// DefaultTopologyKey.
	TopologyKey string

	// ControllerSocket is the unix socket of the identity and controller
	// services; "" runs no controller.
	ControllerSocket string
	// NodeSocket is the unix socket of the identity and node services;
	// "" runs no node service.
	NodeSocket string
	// RegistrationDir is the kubelet's plugin-registration directory
	// (<kubelet root dir>/plugins_registry), where the node service serves
	// RegistrationSocket for the kubelet to find; "" registers nothing.
	RegistrationDir string
	// RegistrationSocket is the registration socket's file name in
	// RegistrationDir; defaults to <Name>-reg.sock. The kubelet finds it
	// by its directory, whatever its name: a short one leaves room under
	// the 107 bytes of a socket path for a deep kubelet root dir.
	RegistrationSocket string

	// DataDir holds the volumes' directories, <DataDir>/<volume ID>.
	// Controller and node service must agree on it. Required.
	DataDir string
	// StateDir holds the controller's state file and the node records.
	// Controller and node service must agree on it. Required.
	StateDir string

	// NodeID is the node service's node, as NodeGetInfo reports it.
	// Required with NodeSocket.
	NodeID string
	// Zone is the node's zone. Required with NodeSocket.
	Zone string
	// MaxVolumesPerNode is how many volumes a node takes, as NodeGetInfo
	// reports it and ControllerPublishVolume enforces it; 0 is no limit.
	MaxVolumesPerNode int64

	// Zones are the zones the controller creates volumes in; a volume
	// whose request has no accessibility requirements goes to the first.
	// Required with ControllerSocket.
	Zones []string
	// KnownNodes are nodes (ID to zone) that the controller attaches to
	// besides those whose node service has run: fake nodes without one.
	KnownNodes map[string]string

	// CreateDelay is how long CreateVolume and DeleteVolume take.
	CreateDelay time.Duration
	// AttachDelay is how long ControllerPublishVolume and
	// ControllerUnpublishVolume take.
	AttachDelay time.Duration
	// FormatDelay is how long the first NodeStageVolume of a volume takes.
	FormatDelay time.Duration

	// Mounter defaults to bind mounts on this machine.
	Mounter Mounter
	// Clock defaults to the real clock.
	Clock clock.WithTicker
}

func (o *Options) defaultAndValidate() error {
	if o.Name == "" {
		o.Name = DefaultName
	}
	if o.TopologyKey == "" {
		o.TopologyKey = DefaultTopologyKey
	}
	if o.Mounter == nil {
		o.Mounter = bindMounter{}
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	var errs []error
	if o.ControllerSocket == "" && o.NodeSocket == "" {
		errs = append(errs, errors.New("neither a controller nor a node socket"))
	}
	if o.DataDir == "" || o.StateDir == "" {
		errs = append(errs, errors.New("a data dir and a state dir are required"))
	}
	if o.ControllerSocket != "" && len(o.Zones) == 0 {
		errs = append(errs, errors.New("the controller needs at least one zone"))
	}
	if o.NodeSocket != "" && (o.NodeID == "" || o.Zone == "") {
		errs = append(errs, errors.New("the node service needs a node ID and a zone"))
	}
	if o.RegistrationDir != "" && o.NodeSocket == "" {
		errs = append(errs, errors.New("registration with the kubelet needs a node socket"))
	}
	for _, p := range []string{o.ControllerSocket, o.NodeSocket, o.registrationSocket()} {
		if len(p) > maxSocketPath {
			errs = append(errs, fmt.Errorf("socket path %s is longer than %d bytes", p, maxSocketPath))
		}
	}
	return errors.Join(errs...)
}

func (o *Options) registrationSocket() string {
	if o.RegistrationDir == "" {
		return ""
	}
	name := o.RegistrationSocket
	if name == "" {
		name = o.Name + "-reg.sock"
	}
	return filepath.Join(o.RegistrationDir, name)
}

// MaxSocketPath is the longest path a unix socket can bind to.
const MaxSocketPath = maxSocketPath

// Driver is a running driver.
type Driver struct {
	opts Options
	log  logr.Logger
	// store is the in-process controller's state; nil without a controller.
	store *store
	// volumes is what the node service reads: store, or the state file.
	volumes volumeSource
	// stopping aborts the delays of calls in flight at Stop.
	stopping chan struct{}
	// formatting serializes the stages of one volume.
	formatting keyedMutex

	servers []*grpc.Server
	sockets []string
	serveWG sync.WaitGroup
	failed  chan error
	stopped sync.Once
}

// Run starts a driver, serves until ctx is done or a server fails, and
// stops it. It returns nil after ctx is done.
func Run(ctx context.Context, opts Options) error {
	d, err := Start(ctx, opts)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		d.Stop()
		return nil
	case err := <-d.failed:
		d.Stop()
		return err
	}
}

// Start removes stale sockets, loads the state, and serves the services
// that opts enable; its sockets accept calls when it returns. It takes its
// logger from ctx. Stop it with Stop.
func Start(ctx context.Context, opts Options) (*Driver, error) {
	if err := opts.defaultAndValidate(); err != nil {
		return nil, fmt.Errorf("csidriver options: %w", err)
	}
	for _, dir := range []string{opts.DataDir, opts.StateDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
	}
	d := &Driver{
		opts:     opts,
		log:      logr.FromContextOrDiscard(ctx).WithValues("driver", opts.Name),
		stopping: make(chan struct{}),
		failed:   make(chan error, 3),
	}
	statePath := filepath.Join(opts.StateDir, stateFile)
	d.volumes = fileView{clock: opts.Clock, path: statePath}
	if opts.ControllerSocket != "" {
		s, err := newStore(statePath, opts.DataDir, opts.Clock)
		if err != nil {
			return nil, err
		}
		d.store, d.volumes = s, s
	}
	if opts.NodeSocket != "" {
		if err := writeNodeRecord(opts.StateDir, opts.NodeID, opts.Zone); err != nil {
			return nil, fmt.Errorf("recording node %s: %w", opts.NodeID, err)
		}
	}

	if err := d.startServers(); err != nil {
		d.Stop()
		return nil, err
	}
	d.log.Info("serving", "controller", opts.ControllerSocket, "node", opts.NodeSocket, "registration", opts.registrationSocket())
	return d, nil
}

func (d *Driver) startServers() error {
	o := d.opts
	if o.ControllerSocket != "" {
		srv := d.newServer()
		csi.RegisterIdentityServer(srv, &identityServer{d: d, controller: true})
		csi.RegisterControllerServer(srv, &controllerServer{d: d})
		if o.NodeSocket == o.ControllerSocket {
			csi.RegisterNodeServer(srv, &nodeServer{d: d})
		}
		if err := d.serve(srv, o.ControllerSocket); err != nil {
			return err
		}
	}
	if o.NodeSocket != "" && o.NodeSocket != o.ControllerSocket {
		srv := d.newServer()
		csi.RegisterIdentityServer(srv, &identityServer{d: d})
		csi.RegisterNodeServer(srv, &nodeServer{d: d})
		if err := d.serve(srv, o.NodeSocket); err != nil {
			return err
		}
	}
	// The registration socket comes last: the kubelet calls the node
	// socket as soon as it sees it.
	if reg := o.registrationSocket(); reg != "" {
		srv := grpc.NewServer()
		registerapi.RegisterRegistrationServer(srv, &registrationServer{d: d})
		if err := d.serve(srv, reg); err != nil {
			return err
		}
	}
	return nil
}

// newServer logs every failed call, and every call at V(4).
func (d *Driver) newServer() *grpc.Server {
	return grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		if err != nil {
			d.log.Info("call failed", "method", info.FullMethod, "request", req, "error", err)
		} else {
			d.log.V(4).Info("call", "method", info.FullMethod, "request", req, "response", resp)
		}
		return resp, err
	}))
}

func (d *Driver) serve(srv *grpc.Server, socket string) error {
	if err := removeSocket(socket); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(socket), 0o755); err != nil {
		return err
	}
	l, err := net.Listen("unix", socket)
	if err != nil {
		return err
	}
	d.servers = append(d.servers, srv)
	d.sockets = append(d.sockets, socket)
	d.serveWG.Go(func() {
		if err := srv.Serve(l); err != nil {
			d.failed <- fmt.Errorf("serving %s: %w", socket, err)
		}
	})
	return nil
}

// removeSocket removes a socket left by a driver that did not exit
// gracefully. It refuses to remove anything but a socket.
func removeSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("%s exists and is not a socket", path)
	}
	return os.Remove(path)
}

// Stop aborts the delays of calls in flight, stops the servers, last
// started first, and removes their sockets. It keeps the state file, the
// node record, the volumes' directories and the mounts of published
// volumes, as a production driver keeps them across restarts.
func (d *Driver) Stop() {
	d.stopped.Do(func() {
		close(d.stopping)
		for i := len(d.servers) - 1; i >= 0; i-- {
			stopServer(d.servers[i], 10*time.Second)
			if err := removeSocket(d.sockets[i]); err != nil {
				d.log.Error(err, "removing a socket")
			}
		}
		d.serveWG.Wait()
		d.log.Info("stopped")
	})
}

func stopServer(srv *grpc.Server, timeout time.Duration) {
	done := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(timeout):
		srv.Stop()
		<-done
	}
}

// wait blocks until the time until, returning a gRPC error when the call
// is cancelled or the driver stops first.
func (d *Driver) wait(ctx context.Context, until time.Time) error {
	dur := until.Sub(d.opts.Clock.Now())
	if dur <= 0 {
		return nil
	}
	t := d.opts.Clock.NewTimer(dur)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	case <-d.stopping:
		return status.Error(codes.Unavailable, "the driver is stopping")
	}
}

// keyedMutex is a mutex per key.
type keyedMutex struct {
	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

func (k *keyedMutex) lock(key string) func() {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*sync.Mutex{}
	}
	l := k.locks[key]
	if l == nil {
		l = &sync.Mutex{}
		k.locks[key] = l
	}
	k.mu.Unlock()
	l.Lock()
	return l.Unlock
}
