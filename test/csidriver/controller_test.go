package csidriver

import (
	"os"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/testing/protocmp"
)

func TestCreateVolume(t *testing.T) {
	const gi = int64(1 << 30)
	req := func(name string, mutate ...func(*csi.CreateVolumeRequest)) *csi.CreateVolumeRequest {
		r := &csi.CreateVolumeRequest{Name: name, VolumeCapabilities: []*csi.VolumeCapability{mountCap}}
		for _, m := range mutate {
			m(r)
		}
		return r
	}
	inZones := func(requisite, preferred []string) func(*csi.CreateVolumeRequest) {
		return func(r *csi.CreateVolumeRequest) { r.AccessibilityRequirements = zoneReq(requisite, preferred) }
	}
	sized := func(required, limit int64) func(*csi.CreateVolumeRequest) {
		return func(r *csi.CreateVolumeRequest) {
			r.CapacityRange = &csi.CapacityRange{RequiredBytes: required, LimitBytes: limit}
		}
	}
	volume := func(name, zone string, bytes int64) *csi.Volume {
		return &csi.Volume{
			VolumeId:           volumeID(name),
			CapacityBytes:      bytes,
			AccessibleTopology: []*csi.Topology{{Segments: map[string]string{DefaultTopologyKey: zone}}},
		}
	}
	cases := map[string]struct {
		before   []*csi.CreateVolumeRequest
		req      *csi.CreateVolumeRequest
		want     *csi.Volume
		wantCode codes.Code
	}{
		"no requirements: the first zone, the default size": {
			req:  req("pvc-1"),
			want: volume("pvc-1", zoneA, DefaultCapacityBytes),
		},
		"the size the request asks": {
			req:  req("pvc-1", sized(5*gi, 0)),
			want: volume("pvc-1", zoneA, 5*gi),
		},
		"a limit below the default size": {
			req:  req("pvc-1", sized(0, gi/2)),
			want: volume("pvc-1", zoneA, gi/2),
		},
		"required above the limit": {
			req:      req("pvc-1", sized(2*gi, gi)),
			wantCode: codes.OutOfRange,
		},
		"the preferred zone among the requisite ones": {
			req:  req("pvc-1", inZones([]string{zoneA, zoneB, zoneC}, []string{zoneC, zoneA})),
			want: volume("pvc-1", zoneC, DefaultCapacityBytes),
		},
		"a preferred zone that is not requisite": {
			req:  req("pvc-1", inZones([]string{zoneB}, []string{zoneA})),
			want: volume("pvc-1", zoneB, DefaultCapacityBytes),
		},
		"only zones the cloud does not have": {
			req:      req("pvc-1", inZones([]string{"zone-z"}, nil)),
			wantCode: codes.ResourceExhausted,
		},
		"the same request again": {
			before: []*csi.CreateVolumeRequest{req("pvc-1", sized(2*gi, 0), inZones([]string{zoneB}, nil))},
			req:    req("pvc-1", sized(2*gi, 0), inZones([]string{zoneB}, nil)),
			want:   volume("pvc-1", zoneB, 2*gi),
		},
		"the same name with more capacity": {
			before:   []*csi.CreateVolumeRequest{req("pvc-1", sized(gi, 0))},
			req:      req("pvc-1", sized(2*gi, 0)),
			wantCode: codes.AlreadyExists,
		},
		"the same name in another zone": {
			before:   []*csi.CreateVolumeRequest{req("pvc-1", inZones([]string{zoneA}, nil))},
			req:      req("pvc-1", inZones([]string{zoneB}, nil)),
			wantCode: codes.AlreadyExists,
		},
		"no name": {
			req:      req(""),
			wantCode: codes.InvalidArgument,
		},
		"a block volume": {
			req: req("pvc-1", func(r *csi.CreateVolumeRequest) {
				r.VolumeCapabilities = []*csi.VolumeCapability{{
					AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
					AccessMode: mountCap.AccessMode,
				}}
			}),
			wantCode: codes.InvalidArgument,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			for _, r := range tc.before {
				if _, err := e.ctrl.CreateVolume(callCtx(t), r); err != nil {
					t.Fatal(err)
				}
			}
			resp, err := e.ctrl.CreateVolume(callCtx(t), tc.req)
			if d := codeDiff(tc.wantCode, err); d != "" {
				t.Fatal(d)
			}
			if diff := cmp.Diff(tc.want, resp.GetVolume(), protocmp.Transform()); diff != "" {
				t.Errorf("volume (-want +got):\n%s", diff)
			}
			if tc.want != nil {
				if _, err := os.Stat(e.driver.dataPath(tc.want.VolumeId)); err != nil {
					t.Errorf("the volume has no directory: %v", err)
				}
			}
		})
	}
}

func TestDeleteVolume(t *testing.T) {
	cases := map[string]struct {
		create   bool
		attachTo string
		wantCode codes.Code
		wantDir  bool
		// wantDeletions is how many deletions the two calls began.
		wantDeletions int
	}{
		"an unknown volume": {},
		"a detached volume": {create: true, wantDeletions: 1},
		"an attached volume": {
			create:   true,
			attachTo: nodeA,
			wantCode: codes.FailedPrecondition,
			wantDir:  true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			id := e.volumeOf(t, tc.create, tc.attachTo)
			_, err := e.ctrl.DeleteVolume(callCtx(t), &csi.DeleteVolumeRequest{VolumeId: id})
			if d := codeDiff(tc.wantCode, err); d != "" {
				t.Fatal(d)
			}
			_, statErr := os.Stat(e.driver.dataPath(id))
			if gotDir := statErr == nil; gotDir != tc.wantDir {
				t.Errorf("the volume's directory exists: %v, want %v", gotDir, tc.wantDir)
			}
			// A repeated call is idempotent and begins no second deletion.
			_, err = e.ctrl.DeleteVolume(callCtx(t), &csi.DeleteVolumeRequest{VolumeId: id})
			if d := codeDiff(tc.wantCode, err); d != "" {
				t.Fatalf("repeated call: %s", d)
			}
			deletes, err := ReadDeletes(e.driver.opts.StateDir)
			if err != nil {
				t.Fatal(err)
			}
			if got := deletes[id]; got == nil || got.Calls != 2 || got.Deletions != tc.wantDeletions {
				t.Errorf("deletes of the volume = %+v, want 2 calls and %d deletions", got, tc.wantDeletions)
			}
			// Deleted is deleted: a publish does not find it.
			if tc.create && tc.wantCode == codes.OK {
				_, err := e.ctrl.ControllerPublishVolume(callCtx(t), &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: nodeA, VolumeCapability: mountCap})
				if d := codeDiff(codes.NotFound, err); d != "" {
					t.Errorf("publish after delete: %s", d)
				}
			}
		})
	}
}

// publication is a ControllerPublishVolume of the volume named vol.
type publication struct {
	vol      string
	node     string
	mode     csi.VolumeCapability_AccessMode_Mode
	readOnly bool
}

func (p publication) request() *csi.ControllerPublishVolumeRequest {
	mode := p.mode
	if mode == csi.VolumeCapability_AccessMode_UNKNOWN {
		mode = csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	}
	return &csi.ControllerPublishVolumeRequest{VolumeId: volumeID(p.vol), NodeId: p.node, VolumeCapability: capWithMode(mode), Readonly: p.readOnly}
}

func TestControllerPublishVolume(t *testing.T) {
	const readerOnly = csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
	cases := map[string]struct {
		// volumes are created in zone-a.
		volumes     []string
		published   []publication
		unpublished []publication
		req         publication
		wantCode    codes.Code
	}{
		"a detached volume": {
			volumes: []string{"pvc-1"},
			req:     publication{vol: "pvc-1", node: nodeA},
		},
		"again to the same node": {
			volumes:   []string{"pvc-1"},
			published: []publication{{vol: "pvc-1", node: nodeA}},
			req:       publication{vol: "pvc-1", node: nodeA},
		},
		"to the same node with another read-only flag": {
			volumes:   []string{"pvc-1"},
			published: []publication{{vol: "pvc-1", node: nodeA}},
			req:       publication{vol: "pvc-1", node: nodeA, readOnly: true},
			wantCode:  codes.AlreadyExists,
		},
		"to a second node while attached to the first": {
			volumes:   []string{"pvc-1"},
			published: []publication{{vol: "pvc-1", node: nodeA}},
			req:       publication{vol: "pvc-1", node: nodeA1},
			wantCode:  codes.FailedPrecondition,
		},
		"to a second node after the first detached it": {
			volumes:     []string{"pvc-1"},
			published:   []publication{{vol: "pvc-1", node: nodeA}},
			unpublished: []publication{{vol: "pvc-1", node: nodeA}},
			req:         publication{vol: "pvc-1", node: nodeA1},
		},
		"to a second node, both multi-node readers": {
			volumes:   []string{"pvc-1"},
			published: []publication{{vol: "pvc-1", node: nodeA, mode: readerOnly, readOnly: true}},
			req:       publication{vol: "pvc-1", node: nodeA1, mode: readerOnly, readOnly: true},
		},
		"to a node in another zone": {
			volumes:  []string{"pvc-1"},
			req:      publication{vol: "pvc-1", node: nodeB},
			wantCode: codes.FailedPrecondition,
		},
		"to a node at its attach limit": {
			volumes:   []string{"pvc-1", "pvc-2", "pvc-3"},
			published: []publication{{vol: "pvc-1", node: nodeA}, {vol: "pvc-2", node: nodeA}},
			req:       publication{vol: "pvc-3", node: nodeA},
			wantCode:  codes.ResourceExhausted,
		},
		"to a node below its attach limit": {
			volumes:   []string{"pvc-1", "pvc-2"},
			published: []publication{{vol: "pvc-1", node: nodeA}},
			req:       publication{vol: "pvc-2", node: nodeA},
		},
		"an unknown volume": {
			req:      publication{vol: "pvc-1", node: nodeA},
			wantCode: codes.NotFound,
		},
		"to an unknown node": {
			volumes:  []string{"pvc-1"},
			req:      publication{vol: "pvc-1", node: "node-x"},
			wantCode: codes.NotFound,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			for _, v := range tc.volumes {
				e.createVolume(t, v, zoneA)
			}
			for _, p := range tc.published {
				if _, err := e.ctrl.ControllerPublishVolume(callCtx(t), p.request()); err != nil {
					t.Fatal(err)
				}
			}
			for _, p := range tc.unpublished {
				if _, err := e.ctrl.ControllerUnpublishVolume(callCtx(t), &csi.ControllerUnpublishVolumeRequest{VolumeId: volumeID(p.vol), NodeId: p.node}); err != nil {
					t.Fatal(err)
				}
			}
			resp, err := e.ctrl.ControllerPublishVolume(callCtx(t), tc.req.request())
			if d := codeDiff(tc.wantCode, err); d != "" {
				t.Fatal(d)
			}
			if err == nil {
				if diff := cmp.Diff(publishContext(volumeID(tc.req.vol)), resp.GetPublishContext()); diff != "" {
					t.Errorf("publish context (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestControllerUnpublishVolume(t *testing.T) {
	cases := map[string]struct {
		create   bool
		attachTo string
		req      *csi.ControllerUnpublishVolumeRequest
	}{
		"an unknown volume": {
			req: &csi.ControllerUnpublishVolumeRequest{VolumeId: volumeID("pvc-1"), NodeId: nodeA},
		},
		"a volume that is not attached": {
			create: true,
			req:    &csi.ControllerUnpublishVolumeRequest{VolumeId: volumeID("pvc-1"), NodeId: nodeA},
		},
		"a volume attached to another node": {
			create:   true,
			attachTo: nodeA1,
			req:      &csi.ControllerUnpublishVolumeRequest{VolumeId: volumeID("pvc-1"), NodeId: nodeA},
		},
		"an attached volume": {
			create:   true,
			attachTo: nodeA,
			req:      &csi.ControllerUnpublishVolumeRequest{VolumeId: volumeID("pvc-1"), NodeId: nodeA},
		},
		"from every node": {
			create:   true,
			attachTo: nodeA,
			req:      &csi.ControllerUnpublishVolumeRequest{VolumeId: volumeID("pvc-1")},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			id := e.volumeOf(t, tc.create, tc.attachTo)
			if _, err := e.ctrl.ControllerUnpublishVolume(callCtx(t), tc.req); err != nil {
				t.Fatal(err)
			}
			// The node service no longer sees the volume on nodeA.
			_, err := e.stage(t, id)
			wantCode := codes.FailedPrecondition
			if !tc.create {
				wantCode = codes.NotFound
			}
			if d := codeDiff(wantCode, err); d != "" {
				t.Errorf("stage after unpublish: %s", d)
			}
		})
	}
}
