package csidriver

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/testing/protocmp"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// TestRestart: a driver started on the state of a stopped one sees its
// volumes and attachments.
func TestRestart(t *testing.T) {
	opts := testOptions(t)
	// node-b-1 is in the volume's zone: only the attachment refuses it.
	opts.KnownNodes["node-b-1"] = zoneB
	first := start(t, opts)
	id := first.createVolume(t, "pvc-1", zoneB)
	first.publish(t, id, nodeB)
	first.driver.Stop()

	second := start(t, opts)
	cases := map[string]struct {
		req      *csi.ControllerPublishVolumeRequest
		wantCode codes.Code
	}{
		"the same node again": {
			req: &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: nodeB, VolumeCapability: mountCap},
		},
		"another node": {
			req:      &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "node-b-1", VolumeCapability: mountCap},
			wantCode: codes.FailedPrecondition,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := second.ctrl.ControllerPublishVolume(callCtx(t), tc.req)
			if d := codeDiff(tc.wantCode, err); d != "" {
				t.Error(d)
			}
		})
	}
}

// TestRestartMidAttach: an attach that a stopped driver started goes on
// while the driver is down; the retried publish waits only the rest.
func TestRestartMidAttach(t *testing.T) {
	opts, clk := clockOptions(t)
	opts.AttachDelay = time.Minute
	first := start(t, opts)
	id := first.createVolume(t, "pvc-1", zoneA)
	req := &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: nodeA, VolumeCapability: mountCap}
	publish := func(e *env) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := e.ctrl.ControllerPublishVolume(ctx, req)
			return err
		}
	}

	done := callBlocked(t, clk, "the publish", publish(first))
	first.driver.Stop()
	if d := codeDiff(codes.Unavailable, <-done); d != "" {
		t.Fatalf("the publish in flight at stop: %s", d)
	}
	clk.Step(40 * time.Second)

	second := start(t, opts)
	done = callBlocked(t, clk, "the retried publish", publish(second))
	clk.Step(20 * time.Second)
	if err := <-done; err != nil {
		t.Fatalf("the retried publish: %v", err)
	}
	if _, err := second.stage(t, id); err != nil {
		t.Errorf("stage after the attach: %v", err)
	}
}

// TestSeparateNodeProcess: a node service without the controller reads
// the controller's state file, and the controller knows its node from the
// record it writes.
func TestSeparateNodeProcess(t *testing.T) {
	ctrlOpts := testOptions(t)
	ctrlOpts.NodeSocket, ctrlOpts.KnownNodes = "", nil
	ctrl := start(t, ctrlOpts)

	nodeOpts := testOptions(t)
	nodeOpts.ControllerSocket = ""
	nodeOpts.NodeID = nodeB
	nodeOpts.Zone = zoneB
	nodeOpts.DataDir, nodeOpts.StateDir = ctrlOpts.DataDir, ctrlOpts.StateDir
	node := start(t, nodeOpts)

	id := ctrl.createVolume(t, "pvc-1", zoneB)
	_, err := node.stage(t, id)
	if d := codeDiff(codes.FailedPrecondition, err); d != "" {
		t.Fatalf("stage before the attach: %s", d)
	}
	ctrl.publish(t, id, nodeB)
	if _, err := node.stage(t, id); err != nil {
		t.Fatalf("stage after the attach: %v", err)
	}
}

func TestIdentity(t *testing.T) {
	opts := testOptions(t)
	opts.NodeSocket = filepath.Join(filepath.Dir(opts.ControllerSocket), "node.sock")
	e := start(t, opts)
	nodeIdent := csi.NewIdentityClient(dial(t, opts.NodeSocket))
	service := func(ts ...csi.PluginCapability_Service_Type) *csi.GetPluginCapabilitiesResponse {
		resp := &csi.GetPluginCapabilitiesResponse{}
		for _, ty := range ts {
			resp.Capabilities = append(resp.Capabilities, &csi.PluginCapability{
				Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: ty}},
			})
		}
		return resp
	}
	cases := map[string]struct {
		client   csi.IdentityClient
		wantCaps *csi.GetPluginCapabilitiesResponse
	}{
		"the controller socket": {
			client:   e.ident,
			wantCaps: service(csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS, csi.PluginCapability_Service_CONTROLLER_SERVICE),
		},
		"the node socket": {
			client:   nodeIdent,
			wantCaps: service(csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			info, err := tc.client.GetPluginInfo(callCtx(t), &csi.GetPluginInfoRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(&csi.GetPluginInfoResponse{Name: DefaultName, VendorVersion: VendorVersion}, info, protocmp.Transform()); diff != "" {
				t.Errorf("GetPluginInfo (-want +got):\n%s", diff)
			}
			caps, err := tc.client.GetPluginCapabilities(callCtx(t), &csi.GetPluginCapabilitiesRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantCaps, caps, protocmp.Transform()); diff != "" {
				t.Errorf("GetPluginCapabilities (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRegistration: the kubelet's plugin watcher finds the registration
// socket, learns the node socket from GetInfo, and the driver leaves no
// socket behind when it stops.
func TestRegistration(t *testing.T) {
	opts := testOptions(t)
	opts.RegistrationDir = filepath.Join(filepath.Dir(opts.ControllerSocket), "plugins_registry")
	regSocket := filepath.Join(opts.RegistrationDir, DefaultName+"-reg.sock")
	// A socket left by a driver that was killed.
	if err := os.MkdirAll(opts.RegistrationDir, 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", regSocket)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	_ = l.Close()

	e := start(t, opts)
	reg := registerapi.NewRegistrationClient(dial(t, regSocket))
	info, err := reg.GetInfo(callCtx(t), &registerapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: DefaultName, Endpoint: opts.NodeSocket, SupportedVersions: []string{"1.0.0"}}
	if diff := cmp.Diff(want, info, protocmp.Transform()); diff != "" {
		t.Errorf("GetInfo (-want +got):\n%s", diff)
	}
	if _, err := reg.NotifyRegistrationStatus(callCtx(t), &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Errorf("NotifyRegistrationStatus: %v", err)
	}

	e.driver.Stop()
	for _, s := range []string{regSocket, opts.NodeSocket} {
		if _, err := os.Lstat(s); !os.IsNotExist(err) {
			t.Errorf("socket %s is left after stop: %v", s, err)
		}
	}
}
