package csidriver

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// nodeServer is the driver on one node: it formats a volume at its first
// stage and bind-mounts its directory at the staging and the target paths.
type nodeServer struct {
	csi.UnimplementedNodeServer
	d *Driver
}

func (s *nodeServer) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	o := s.d.opts
	return &csi.NodeGetInfoResponse{
		NodeId:             o.NodeID,
		MaxVolumesPerNode:  o.MaxVolumesPerNode,
		AccessibleTopology: &csi.Topology{Segments: map[string]string{o.TopologyKey: o.Zone}},
	}, nil
}

func (s *nodeServer) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return &csi.NodeGetCapabilitiesResponse{Capabilities: []*csi.NodeServiceCapability{{
		Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME}},
	}}}, nil
}

// attachedVolume returns an error unless the volume exists and is attached
// to this node.
func (s *nodeServer) attachedVolume(id string) error {
	v, ok, err := s.d.volumes.volume(id)
	switch {
	case err != nil:
		return err
	case !ok || v.Phase == phaseDeleting:
		return status.Errorf(codes.NotFound, "volume %s does not exist", id)
	}
	if a := v.Attachments[s.d.opts.NodeID]; a == nil || a.Phase != phaseAttached {
		return status.Errorf(codes.FailedPrecondition, "volume %s is not attached to node %s", id, s.d.opts.NodeID)
	}
	return nil
}

func (s *nodeServer) NodeStageVolume(ctx context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	id, staging := req.GetVolumeId(), req.GetStagingTargetPath()
	if id == "" || staging == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id and staging_target_path are required")
	}
	if req.GetVolumeCapability() == nil {
		return nil, status.Error(codes.InvalidArgument, "volume_capability is required")
	}
	if err := validateCapabilities([]*csi.VolumeCapability{req.GetVolumeCapability()}); err != nil {
		return nil, err
	}
	if err := s.attachedVolume(id); err != nil {
		return nil, err
	}
	s.d.log.Info("staging volume", "volume", id, "staging", staging, "at", s.at())
	defer s.d.formatting.lock(id)()
	if err := s.format(ctx, id); err != nil {
		return nil, err
	}
	if err := s.mount(id, staging, false); err != nil {
		return nil, err
	}
	s.d.log.Info("staged volume", "volume", id, "staging", staging, "at", s.at())
	return &csi.NodeStageVolumeResponse{}, nil
}

// at is the time of a log line that records when a stage or publish
// started or ended, with the nanoseconds that the log's own timestamp
// (RFC 3339, seconds) leaves out: test/bench times the kubelet's part of a
// pod's start-up from these lines.
func (s *nodeServer) at() string {
	return s.d.opts.Clock.Now().UTC().Format(time.RFC3339Nano)
}

// format "formats" a volume the first time it is staged anywhere: it waits
// FormatDelay and leaves the marker.
func (s *nodeServer) format(ctx context.Context, id string) error {
	marker := s.d.formattedPath(id)
	if _, err := os.Stat(marker); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return status.Error(codes.Internal, err.Error())
	}
	if err := s.d.wait(ctx, s.d.opts.Clock.Now().Add(s.d.opts.FormatDelay)); err != nil {
		return err
	}
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		return status.Errorf(codes.Internal, "formatting volume %s: %v", id, err)
	}
	s.d.log.Info("formatted volume", "volume", id, "node", s.d.opts.NodeID)
	return nil
}

// mount bind-mounts the volume's directory onto target unless a mount is
// there already.
func (s *nodeServer) mount(id, target string, readOnly bool) error {
	m := s.d.opts.Mounter
	if mounted, err := m.IsMountPoint(target); err != nil {
		return status.Error(codes.Internal, err.Error())
	} else if mounted {
		return nil
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	if err := m.BindMount(s.d.dataPath(id), target, readOnly); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	return nil
}

// unmount unmounts target if a mount is there.
func (s *nodeServer) unmount(target string) error {
	m := s.d.opts.Mounter
	if mounted, err := m.IsMountPoint(target); err != nil {
		return status.Error(codes.Internal, err.Error())
	} else if mounted {
		if err := m.Unmount(target); err != nil {
			return status.Error(codes.Internal, err.Error())
		}
	}
	return nil
}

func (s *nodeServer) NodeUnstageVolume(_ context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	id, staging := req.GetVolumeId(), req.GetStagingTargetPath()
	if id == "" || staging == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id and staging_target_path are required")
	}
	defer s.d.formatting.lock(id)()
	if err := s.unmount(staging); err != nil {
		return nil, err
	}
	return &csi.NodeUnstageVolumeResponse{}, nil
}

func (s *nodeServer) NodePublishVolume(_ context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	id, target, staging := req.GetVolumeId(), req.GetTargetPath(), req.GetStagingTargetPath()
	if id == "" || target == "" || staging == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id, target_path and staging_target_path are required")
	}
	if req.GetVolumeCapability() == nil {
		return nil, status.Error(codes.InvalidArgument, "volume_capability is required")
	}
	if err := validateCapabilities([]*csi.VolumeCapability{req.GetVolumeCapability()}); err != nil {
		return nil, err
	}
	if err := s.attachedVolume(id); err != nil {
		return nil, err
	}
	if staged, err := s.d.opts.Mounter.IsMountPoint(staging); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	} else if !staged {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is not staged at %s", id, staging)
	}
	if err := s.mount(id, target, req.GetReadonly()); err != nil {
		return nil, err
	}
	s.d.log.Info("published volume", "volume", id, "target", target, "at", s.at())
	return &csi.NodePublishVolumeResponse{}, nil
}

func (s *nodeServer) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	id, target := req.GetVolumeId(), req.GetTargetPath()
	if id == "" || target == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id and target_path are required")
	}
	if err := s.unmount(target); err != nil {
		return nil, err
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}
