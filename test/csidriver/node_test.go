package csidriver

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/testing/protocmp"
)

func TestNodeStageVolume(t *testing.T) {
	cases := map[string]struct {
		create   bool
		attachTo string
		wantCode codes.Code
	}{
		"a volume attached to this node": {
			create:   true,
			attachTo: nodeA,
		},
		"a volume attached to no node": {
			create:   true,
			wantCode: codes.FailedPrecondition,
		},
		"a volume attached to another node": {
			create:   true,
			attachTo: nodeA1,
			wantCode: codes.FailedPrecondition,
		},
		"an unknown volume": {
			wantCode: codes.NotFound,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			id := e.volumeOf(t, tc.create, tc.attachTo)
			staging, err := e.stage(t, id)
			if d := codeDiff(tc.wantCode, err); d != "" {
				t.Fatal(d)
			}
			want := map[string]fakeMount{}
			if err == nil {
				want[staging] = fakeMount{Source: e.driver.dataPath(id)}
			}
			got, _ := e.mounter.snapshot()
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("mounts (-want +got):\n%s", diff)
			}
			_, statErr := os.Stat(e.driver.formattedPath(id))
			if formatted := statErr == nil; formatted != (err == nil) {
				t.Errorf("formatted: %v, want %v", formatted, err == nil)
			}
		})
	}
}

// TestNodeStageVolumeFormatsOnce: the first stage of a volume takes
// FormatDelay, a later one (after an unstage, or on another node) does not.
func TestNodeStageVolumeFormatsOnce(t *testing.T) {
	opts, clk := clockOptions(t)
	opts.FormatDelay = time.Minute
	e := start(t, opts)
	id := e.attachedVolume(t)

	staging := stagingPath(t)
	stageReq := &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: mountCap}
	done := callBlocked(t, clk, "the first stage", func(ctx context.Context) error {
		_, err := e.node.NodeStageVolume(ctx, stageReq)
		return err
	})
	clk.Step(time.Minute)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(e.driver.formattedPath(id)); err != nil {
		t.Fatalf("no format marker: %v", err)
	}
	if _, err := e.node.NodeUnstageVolume(callCtx(t), &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
		t.Fatal(err)
	}
	// The clock stands still: a second format would block until the
	// call's deadline.
	c, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := e.node.NodeStageVolume(c, stageReq); err != nil {
		t.Fatalf("the second stage: %v", err)
	}
}

func TestNodePublishVolume(t *testing.T) {
	type op int
	const (
		stage op = iota
		unstage
		publish
		publishReadOnly
		unpublish
	)
	type step struct {
		op       op
		wantCode codes.Code
	}
	cases := map[string]struct {
		steps      []step
		wantTarget *fakeMount
		wantStaged bool
		wantBinds  int
	}{
		"publish a staged volume": {
			steps:      []step{{op: stage}, {op: publish}},
			wantTarget: &fakeMount{},
			wantStaged: true,
			wantBinds:  2,
		},
		"publish read-only": {
			steps:      []step{{op: stage}, {op: publishReadOnly}},
			wantTarget: &fakeMount{ReadOnly: true},
			wantStaged: true,
			wantBinds:  2,
		},
		"publish twice": {
			steps:      []step{{op: stage}, {op: publish}, {op: publish}},
			wantTarget: &fakeMount{},
			wantStaged: true,
			wantBinds:  2,
		},
		"publish an unstaged volume": {
			steps: []step{{op: publish, wantCode: codes.FailedPrecondition}},
		},
		"unpublish": {
			steps:      []step{{op: stage}, {op: publish}, {op: unpublish}},
			wantStaged: true,
			wantBinds:  2,
		},
		"unpublish twice": {
			steps:      []step{{op: stage}, {op: publish}, {op: unpublish}, {op: unpublish}},
			wantStaged: true,
			wantBinds:  2,
		},
		"unpublish and unstage": {
			steps:     []step{{op: stage}, {op: publish}, {op: unpublish}, {op: unstage}, {op: unstage}},
			wantBinds: 2,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			id := e.attachedVolume(t)
			dir := t.TempDir()
			staging, target := filepath.Join(dir, "globalmount"), filepath.Join(dir, "pod", "mount")
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				t.Fatal(err)
			}
			for i, s := range tc.steps {
				var err error
				switch s.op {
				case stage:
					_, err = e.node.NodeStageVolume(callCtx(t), &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: mountCap})
				case unstage:
					_, err = e.node.NodeUnstageVolume(callCtx(t), &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging})
				case publish, publishReadOnly:
					_, err = e.node.NodePublishVolume(callCtx(t), &csi.NodePublishVolumeRequest{
						VolumeId: id, StagingTargetPath: staging, TargetPath: target, VolumeCapability: mountCap, Readonly: s.op == publishReadOnly,
					})
				case unpublish:
					_, err = e.node.NodeUnpublishVolume(callCtx(t), &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target})
				}
				if d := codeDiff(s.wantCode, err); d != "" {
					t.Fatalf("step %d: %s", i, d)
				}
			}
			mounts, binds := e.mounter.snapshot()
			want := map[string]fakeMount{}
			if tc.wantStaged {
				want[staging] = fakeMount{Source: e.driver.dataPath(id)}
			}
			if tc.wantTarget != nil {
				want[target] = fakeMount{Source: e.driver.dataPath(id), ReadOnly: tc.wantTarget.ReadOnly}
			}
			if diff := cmp.Diff(want, mounts); diff != "" {
				t.Errorf("mounts (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantBinds, binds); diff != "" {
				t.Errorf("bind mounts made (-want +got):\n%s", diff)
			}
			_, statErr := os.Stat(target)
			if exists := statErr == nil; exists != (tc.wantTarget != nil) {
				t.Errorf("target path exists: %v, want %v", exists, tc.wantTarget != nil)
			}
		})
	}
}

func TestNodeGetInfo(t *testing.T) {
	e := newEnv(t)
	got, err := e.node.NodeGetInfo(callCtx(t), &csi.NodeGetInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := &csi.NodeGetInfoResponse{
		NodeId:             nodeA,
		MaxVolumesPerNode:  2,
		AccessibleTopology: &csi.Topology{Segments: map[string]string{DefaultTopologyKey: zoneA}},
	}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("NodeGetInfo (-want +got):\n%s", diff)
	}
}
