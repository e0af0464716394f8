package csidriver

import (
	"context"
	"errors"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/types/known/wrapperspb"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// identityServer serves the identity service beside the controller or the
// node service.
type identityServer struct {
	csi.UnimplementedIdentityServer
	d *Driver
	// controller says whether the controller service is on the same socket.
	controller bool
}

func (s *identityServer) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: s.d.opts.Name, VendorVersion: VendorVersion}, nil
}

func (s *identityServer) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	caps := []csi.PluginCapability_Service_Type{csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS}
	if s.controller {
		caps = append(caps, csi.PluginCapability_Service_CONTROLLER_SERVICE)
	}
	resp := &csi.GetPluginCapabilitiesResponse{}
	for _, c := range caps {
		resp.Capabilities = append(resp.Capabilities, &csi.PluginCapability{
			Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: c}},
		})
	}
	return resp, nil
}

func (s *identityServer) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}

// registrationServer answers the kubelet's plugin watcher, which finds
// <RegistrationDir>/<Name>-reg.sock, asks GetInfo, connects to the node
// socket (NodeGetInfo), and reports the outcome.
type registrationServer struct {
	registerapi.UnimplementedRegistrationServer
	d *Driver
}

func (s *registrationServer) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              s.d.opts.Name,
		Endpoint:          s.d.opts.NodeSocket,
		SupportedVersions: []string{"1.0.0"},
	}, nil
}

func (s *registrationServer) NotifyRegistrationStatus(_ context.Context, st *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if st.PluginRegistered {
		s.d.log.Info("registered with the kubelet", "node", s.d.opts.NodeID)
	} else {
		s.d.log.Error(errors.New(st.Error), "the kubelet refused the registration", "node", s.d.opts.NodeID)
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}
