package csidriver

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// controllerServer is the "cloud": it creates, deletes, attaches and
// detaches volumes, each after its delay, through the store.
type controllerServer struct {
	csi.UnimplementedControllerServer
	d *Driver
}

func (s *controllerServer) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	resp := &csi.ControllerGetCapabilitiesResponse{}
	for _, c := range []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
	} {
		resp.Capabilities = append(resp.Capabilities, &csi.ControllerServiceCapability{
			Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: c}},
		})
	}
	return resp, nil
}

func (s *controllerServer) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name is required")
	}
	if err := validateCapabilities(req.GetVolumeCapabilities()); err != nil {
		return nil, err
	}
	if req.GetVolumeContentSource() != nil {
		return nil, status.Error(codes.InvalidArgument, "volume content sources are not supported")
	}
	size, err := capacity(req.GetCapacityRange())
	if err != nil {
		return nil, err
	}
	requisite := zonesOf(req.GetAccessibilityRequirements().GetRequisite(), s.d.opts.TopologyKey)
	zone, err := chooseZone(req.GetAccessibilityRequirements(), s.d.opts.TopologyKey, s.d.opts.Zones)
	if err != nil {
		return nil, err
	}

	var v volume
	err = s.d.store.update(func(st *state, now time.Time) error {
		if old := st.byName(req.GetName()); old != nil {
			switch {
			case old.Phase == phaseDeleting:
				return status.Errorf(codes.Aborted, "volume %s is being deleted", old.ID)
			case !fitsCapacity(old.CapacityBytes, req.GetCapacityRange()):
				return status.Errorf(codes.AlreadyExists, "volume %s exists with %d bytes", old.ID, old.CapacityBytes)
			case len(requisite) > 0 && !slices.Contains(requisite, old.Zone):
				return status.Errorf(codes.AlreadyExists, "volume %s exists in zone %s", old.ID, old.Zone)
			}
			v = old.clone()
			return nil
		}
		nv := &volume{
			ID:            volumeID(req.GetName()),
			Name:          req.GetName(),
			CapacityBytes: size,
			Zone:          zone,
			Phase:         phaseCreating,
			Until:         now.Add(s.d.opts.CreateDelay),
		}
		// World-writable, whatever the umask: pods that run as any user
		// write to it, as to a fresh filesystem with fsGroup applied.
		dir := s.d.dataPath(nv.ID)
		if err := os.MkdirAll(dir, 0o777); err != nil {
			return status.Errorf(codes.Internal, "creating the directory of volume %s: %v", nv.ID, err)
		}
		if err := os.Chmod(dir, 0o777); err != nil {
			return status.Errorf(codes.Internal, "creating the directory of volume %s: %v", nv.ID, err)
		}
		st.Volumes[nv.ID] = nv
		v = nv.clone()
		s.d.log.Info("creating volume", "volume", nv.ID, "name", nv.Name, "zone", zone, "bytes", size, "until", nv.Until)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if v.Phase == phaseCreating {
		if err := s.d.wait(ctx, v.Until); err != nil {
			return nil, err
		}
		if v, err = s.settledVolume(v.ID, phaseReady); err != nil {
			return nil, err
		}
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{
		VolumeId:           v.ID,
		CapacityBytes:      v.CapacityBytes,
		AccessibleTopology: []*csi.Topology{{Segments: map[string]string{s.d.opts.TopologyKey: v.Zone}}},
	}}, nil
}

// settledVolume returns the volume after a wait, which must have brought it
// to want.
func (s *controllerServer) settledVolume(id string, want phase) (volume, error) {
	v, ok, err := s.d.store.volume(id)
	if err != nil {
		return v, err
	}
	if !ok || v.Phase != want {
		return v, status.Errorf(codes.Aborted, "volume %s changed while the call waited", id)
	}
	return v, nil
}

func (s *controllerServer) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	var until time.Time
	var found bool
	err := s.d.store.update(func(st *state, now time.Time) error {
		if st.Deletes == nil {
			st.Deletes = map[string]*Deletes{}
		}
		if st.Deletes[id] == nil {
			st.Deletes[id] = &Deletes{}
		}
		st.Deletes[id].Calls++
		v := st.Volumes[id]
		if v == nil {
			return nil
		}
		found = true
		switch v.Phase {
		case phaseCreating:
			return status.Errorf(codes.Aborted, "volume %s is being created", id)
		case phaseReady:
			if len(v.Attachments) > 0 {
				return status.Errorf(codes.FailedPrecondition, "volume %s is attached to %v", id, slices.Sorted(maps.Keys(v.Attachments)))
			}
			v.Phase, v.Until = phaseDeleting, now.Add(s.d.opts.CreateDelay)
			st.Deletes[id].Deletions++
			s.d.log.Info("deleting volume", "volume", id, "until", v.Until)
		}
		until = v.Until
		return nil
	})
	if err != nil || !found {
		return &csi.DeleteVolumeResponse{}, err
	}
	if err := s.d.wait(ctx, until); err != nil {
		return nil, err
	}
	if _, ok, err := s.d.store.volume(id); err != nil {
		return nil, err
	} else if ok {
		return nil, status.Errorf(codes.Aborted, "volume %s changed while the call waited", id)
	}
	return &csi.DeleteVolumeResponse{}, nil
}

func (s *controllerServer) ControllerPublishVolume(ctx context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	id, node := req.GetVolumeId(), req.GetNodeId()
	if id == "" || node == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id and node_id are required")
	}
	if req.GetVolumeCapability() == nil {
		return nil, status.Error(codes.InvalidArgument, "volume_capability is required")
	}
	if err := validateCapabilities([]*csi.VolumeCapability{req.GetVolumeCapability()}); err != nil {
		return nil, err
	}
	nodeZone, err := s.nodeZone(node)
	if err != nil {
		return nil, err
	}
	exclusive := singleNode(req.GetVolumeCapability().GetAccessMode().GetMode())

	var until time.Time
	err = s.d.store.update(func(st *state, now time.Time) error {
		v := st.Volumes[id]
		switch {
		case v == nil || v.Phase == phaseDeleting:
			return status.Errorf(codes.NotFound, "volume %s does not exist", id)
		case v.Phase == phaseCreating:
			return status.Errorf(codes.Aborted, "volume %s is being created", id)
		case v.Zone != nodeZone:
			return status.Errorf(codes.FailedPrecondition, "volume %s in zone %s cannot attach to node %s in zone %s", id, v.Zone, node, nodeZone)
		}
		if a := v.Attachments[node]; a != nil {
			switch {
			case a.Phase == phaseDetaching:
				return status.Errorf(codes.Aborted, "volume %s is detaching from node %s", id, node)
			case a.ReadOnly != req.GetReadonly() || a.Exclusive != exclusive:
				return status.Errorf(codes.AlreadyExists, "volume %s is attached to node %s with another capability", id, node)
			}
			until = a.Until
			return nil
		}
		for other, a := range v.Attachments {
			// A single-node disk still attached elsewhere, even while it
			// detaches, is the cloud's "already in use" error.
			if exclusive || a.Exclusive {
				return status.Errorf(codes.FailedPrecondition, "volume %s is %s to node %s", id, a.Phase, other)
			}
		}
		if limit := s.d.opts.MaxVolumesPerNode; limit > 0 && st.attachedTo(node) >= limit {
			return status.Errorf(codes.ResourceExhausted, "node %s has its maximum of %d volumes", node, limit)
		}
		if v.Attachments == nil {
			v.Attachments = map[string]*attachment{}
		}
		a := &attachment{ReadOnly: req.GetReadonly(), Exclusive: exclusive, Phase: phaseAttaching, Until: now.Add(s.d.opts.AttachDelay)}
		v.Attachments[node] = a
		until = a.Until
		s.d.log.Info("attaching volume", "volume", id, "node", node, "until", until)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := s.d.wait(ctx, until); err != nil {
		return nil, err
	}
	v, err := s.settledVolume(id, phaseReady)
	if err != nil {
		return nil, err
	}
	if a := v.Attachments[node]; a == nil || a.Phase != phaseAttached {
		return nil, status.Errorf(codes.Aborted, "the attachment of volume %s to node %s changed while the call waited", id, node)
	}
	return &csi.ControllerPublishVolumeResponse{PublishContext: publishContext(id)}, nil
}

// publishContext is the same for every publish of a volume, which keeps a
// repeated publish idempotent.
func publishContext(id string) map[string]string {
	return map[string]string{"devicePath": "/dev/disk/by-id/" + id}
}

func (s *controllerServer) ControllerUnpublishVolume(ctx context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	id, node := req.GetVolumeId(), req.GetNodeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	var until time.Time
	var nodes []string
	err := s.d.store.update(func(st *state, now time.Time) error {
		v := st.Volumes[id]
		if v == nil {
			return nil
		}
		// No node_id means every node.
		for n, a := range v.Attachments {
			if node != "" && n != node {
				continue
			}
			nodes = append(nodes, n)
			if a.Phase != phaseDetaching {
				a.Phase, a.Until = phaseDetaching, now.Add(s.d.opts.AttachDelay)
				s.d.log.Info("detaching volume", "volume", id, "node", n, "until", a.Until)
			}
			if a.Until.After(until) {
				until = a.Until
			}
		}
		return nil
	})
	if err != nil || len(nodes) == 0 {
		return &csi.ControllerUnpublishVolumeResponse{}, err
	}
	if err := s.d.wait(ctx, until); err != nil {
		return nil, err
	}
	v, ok, err := s.d.store.volume(id)
	if err != nil {
		return nil, err
	}
	for _, n := range nodes {
		if _, attached := v.Attachments[n]; ok && attached {
			return nil, status.Errorf(codes.Aborted, "the attachment of volume %s to node %s changed while the call waited", id, n)
		}
	}
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}

func (s *controllerServer) ValidateVolumeCapabilities(_ context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume_capabilities are required")
	}
	if _, ok, err := s.d.store.volume(req.GetVolumeId()); err != nil {
		return nil, err
	} else if !ok {
		return nil, status.Errorf(codes.NotFound, "volume %s does not exist", req.GetVolumeId())
	}
	if err := validateCapabilities(req.GetVolumeCapabilities()); err != nil {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: status.Convert(err).Message()}, nil
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      req.GetVolumeContext(),
		VolumeCapabilities: req.GetVolumeCapabilities(),
		Parameters:         req.GetParameters(),
	}}, nil
}

// nodeZone is the zone of a node the controller knows: from
// Options.KnownNodes, or from the record its node service wrote.
func (s *controllerServer) nodeZone(node string) (string, error) {
	if z, ok := s.d.opts.KnownNodes[node]; ok {
		return z, nil
	}
	r, ok, err := readNodeRecord(s.d.opts.StateDir, node)
	if err != nil {
		return "", status.Error(codes.Internal, err.Error())
	}
	if !ok {
		return "", status.Errorf(codes.NotFound, "node %s does not exist", node)
	}
	return r.Zone, nil
}

// dataPath is the directory that holds a volume's data, which the node
// service bind-mounts.
func (d *Driver) dataPath(id string) string { return VolumeData(d.opts.DataDir, id) }

// VolumeData is the directory that holds the data of volume id, under a
// driver's data directory: what a pod writes to the volume lands there.
func VolumeData(dataDir, id string) string {
	return filepath.Join(dataDir, id, "data")
}

// formattedPath is the marker of a formatted volume, beside its data so
// that pods do not see it.
func (d *Driver) formattedPath(id string) string {
	return filepath.Join(d.opts.DataDir, id, "formatted")
}

// validateCapabilities accepts mounted volumes in any access mode.
func validateCapabilities(caps []*csi.VolumeCapability) error {
	if len(caps) == 0 {
		return status.Error(codes.InvalidArgument, "volume_capabilities are required")
	}
	for _, c := range caps {
		switch {
		case c.GetAccessMode() == nil || c.GetAccessMode().GetMode() == csi.VolumeCapability_AccessMode_UNKNOWN:
			return status.Error(codes.InvalidArgument, "a volume capability has no access mode")
		case c.GetBlock() != nil:
			return status.Error(codes.InvalidArgument, "block volumes are not supported")
		case c.GetMount() == nil:
			return status.Error(codes.InvalidArgument, "a volume capability has no access type")
		}
	}
	return nil
}

// singleNode says whether a volume in the mode attaches to one node at a
// time.
func singleNode(m csi.VolumeCapability_AccessMode_Mode) bool {
	switch m {
	case csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:
		return true
	}
	return false
}

// capacity is the size of a new volume: the required bytes, else the
// smaller of the limit and DefaultCapacityBytes.
func capacity(r *csi.CapacityRange) (int64, error) {
	req, lim := r.GetRequiredBytes(), r.GetLimitBytes()
	switch {
	case req < 0 || lim < 0:
		return 0, status.Error(codes.InvalidArgument, "capacity_range is negative")
	case lim > 0 && req > lim:
		return 0, status.Errorf(codes.OutOfRange, "required_bytes %d exceed limit_bytes %d", req, lim)
	case req > 0:
		return req, nil
	case lim > 0 && lim < DefaultCapacityBytes:
		return lim, nil
	}
	return DefaultCapacityBytes, nil
}

func fitsCapacity(size int64, r *csi.CapacityRange) bool {
	return size >= r.GetRequiredBytes() && (r.GetLimitBytes() == 0 || size <= r.GetLimitBytes())
}

// zonesOf lists the zones of the segments in order, skipping segments
// without the key.
func zonesOf(ts []*csi.Topology, key string) []string {
	var zones []string
	for _, t := range ts {
		if z, ok := t.GetSegments()[key]; ok && !slices.Contains(zones, z) {
			zones = append(zones, z)
		}
	}
	return zones
}

// chooseZone picks a new volume's zone among zones: the first preferred
// zone that the requisite zones allow, else the first allowed zone. No
// allowed zone is the spec's ResourceExhausted.
func chooseZone(r *csi.TopologyRequirement, key string, zones []string) (string, error) {
	allowed := zones
	if requisite := zonesOf(r.GetRequisite(), key); len(requisite) > 0 {
		allowed = nil
		for _, z := range requisite {
			if slices.Contains(zones, z) {
				allowed = append(allowed, z)
			}
		}
	}
	for _, z := range zonesOf(r.GetPreferred(), key) {
		if slices.Contains(allowed, z) {
			return z, nil
		}
	}
	if len(allowed) == 0 {
		return "", status.Errorf(codes.ResourceExhausted, "no zone of %v is allowed by the accessibility requirements", zones)
	}
	return allowed[0], nil
}
