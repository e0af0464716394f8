package csidriver

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/utils/clock"
)

// The controller's view of the "cloud": its volumes, their zones and
// attachments. Slow operations are phases with an end time, not goroutines:
// a phase whose time has passed has completed (settle), so that an operation
// started before a restart completes after it, as a cloud's does while its
// driver is down, and the retried call only waits for the remainder.

// phase is where a volume or an attachment is in its life.
type phase string

const (
	phaseCreating  phase = "Creating"
	phaseReady     phase = "Ready"
	phaseDeleting  phase = "Deleting"
	phaseAttaching phase = "Attaching"
	phaseAttached  phase = "Attached"
	phaseDetaching phase = "Detaching"
)

// volume is one disk.
type volume struct {
	ID            string `json:"id"`
	Name          string `json:"name"`
	CapacityBytes int64  `json:"capacityBytes"`
	Zone          string `json:"zone"`
	Phase         phase  `json:"phase"`
	// Until is when Creating or Deleting ends.
	Until time.Time `json:"until,omitzero"`
	// Attachments are keyed by node ID.
	Attachments map[string]*attachment `json:"attachments,omitempty"`
}

// attachment is a volume's attachment to one node.
type attachment struct {
	ReadOnly bool `json:"readOnly,omitempty"`
	// Exclusive says the attachment is in a single-node access mode.
	Exclusive bool  `json:"exclusive,omitempty"`
	Phase     phase `json:"phase"`
	// Until is when Attaching or Detaching ends.
	Until time.Time `json:"until,omitzero"`
}

// state is what the state file holds.
type state struct {
	// Volumes are keyed by ID.
	Volumes map[string]*volume `json:"volumes"`
	// Deletes counts, per volume ID, the DeleteVolume calls and the
	// deletions they began, kept after the volume is gone (ReadDeletes).
	Deletes map[string]*Deletes `json:"deletes,omitempty"`
}

// Deletes is what DeleteVolume did to one volume.
type Deletes struct {
	// Calls counts the DeleteVolume calls. A caller may repeat the call
	// for a volume already gone, as the external-provisioner does when
	// the PV it deleted the volume for is still in its cache; the call is
	// idempotent.
	Calls int `json:"calls"`
	// Deletions counts the deletions begun: a volume deleted once has 1.
	Deletions int `json:"deletions"`
}

// ReadDeletes reads, from the state file under stateDir, what DeleteVolume
// did to each volume ID.
func ReadDeletes(stateDir string) (map[string]*Deletes, error) {
	st, _, err := readState(filepath.Join(stateDir, stateFile))
	return st.Deletes, err
}

// volumeID is the ID of the volume named name: the same name always gives
// the same ID, which keeps CreateVolume idempotent across restarts.
func volumeID(name string) string {
	sum := sha256.Sum256([]byte(name))
	return "vol-" + hex.EncodeToString(sum[:8])
}

func (s *state) byName(name string) *volume {
	v := s.Volumes[volumeID(name)]
	if v != nil && v.Name == name {
		return v
	}
	return nil
}

// attachedTo counts the attachments of node in any phase: a disk that is
// attaching or detaching takes a slot, as on a cloud.
func (s *state) attachedTo(node string) int64 {
	var n int64
	for _, v := range s.Volumes {
		if _, ok := v.Attachments[node]; ok {
			n++
		}
	}
	return n
}

// settle completes the phases whose time has passed. It returns the IDs of
// the volumes it removed.
func (s *state) settle(now time.Time) (removed []string) {
	for id, v := range s.Volumes {
		for node, a := range v.Attachments {
			if a.Until.After(now) {
				continue
			}
			switch a.Phase {
			case phaseAttaching:
				a.Phase, a.Until = phaseAttached, time.Time{}
			case phaseDetaching:
				delete(v.Attachments, node)
			}
		}
		if v.Until.After(now) {
			continue
		}
		switch v.Phase {
		case phaseCreating:
			v.Phase, v.Until = phaseReady, time.Time{}
		case phaseDeleting:
			delete(s.Volumes, id)
			removed = append(removed, id)
		}
	}
	return removed
}

func (v *volume) clone() volume {
	c := *v
	c.Attachments = make(map[string]*attachment, len(v.Attachments))
	for n, a := range v.Attachments {
		ac := *a
		c.Attachments[n] = &ac
	}
	return c
}

// volumeSource is how the node service learns whether a volume exists and
// is attached to its node.
type volumeSource interface {
	// volume returns the settled volume with the ID, or false. Its errors
	// are gRPC statuses.
	volume(id string) (volume, bool, error)
}

// store holds the state of an in-process controller and persists it to
// the state file after each change.
type store struct {
	clock   clock.PassiveClock
	path    string
	dataDir string

	mu      sync.Mutex
	st      state
	written []byte
}

// newStore loads the state file at path; a missing file is an empty state.
func newStore(path, dataDir string, clk clock.PassiveClock) (*store, error) {
	st, raw, err := readState(path)
	if err != nil {
		return nil, err
	}
	return &store{clock: clk, path: path, dataDir: dataDir, st: st, written: raw}, nil
}

func readState(path string) (state, []byte, error) {
	st := state{Volumes: map[string]*volume{}}
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return st, nil, nil
	}
	if err != nil {
		return st, nil, err
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return st, nil, fmt.Errorf("reading the state file %s: %w", path, err)
	}
	if st.Volumes == nil {
		st.Volumes = map[string]*volume{}
	}
	return st, raw, nil
}

// update settles the state, runs fn on it, and persists the result when it
// changed. fn's error, a gRPC status, is returned as it is; the state is
// persisted even then, since settling may have changed it.
func (s *store) update(fn func(st *state, now time.Time) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	removed := s.st.settle(now)
	var rmErr error
	for _, id := range removed {
		if err := os.RemoveAll(filepath.Join(s.dataDir, id)); err != nil && rmErr == nil {
			rmErr = status.Errorf(codes.Internal, "removing the directory of volume %s: %v", id, err)
		}
	}
	fnErr := fn(&s.st, now)
	if err := s.persist(); err != nil {
		return status.Errorf(codes.Internal, "writing the state file: %v", err)
	}
	if fnErr != nil {
		return fnErr
	}
	return rmErr
}

func (s *store) volume(id string) (volume, bool, error) {
	var v volume
	var ok bool
	err := s.update(func(st *state, _ time.Time) error {
		if p := st.Volumes[id]; p != nil {
			v, ok = p.clone(), true
		}
		return nil
	})
	return v, ok, err
}

// persist writes the state file through a rename, so that a reader (a
// node service in another process) never sees half a file.
func (s *store) persist() error {
	raw, err := json.MarshalIndent(s.st, "", "  ")
	if err != nil {
		return err
	}
	if bytes.Equal(raw, s.written) {
		return nil
	}
	tmp := s.path + ".tmp"
	if err := os.WriteFile(tmp, raw, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, s.path); err != nil {
		return err
	}
	s.written = raw
	return nil
}

// fileView reads the state file of a controller in another process on the
// same machine.
type fileView struct {
	clock clock.PassiveClock
	path  string
}

func (f fileView) volume(id string) (volume, bool, error) {
	st, _, err := readState(f.path)
	if err != nil {
		return volume{}, false, status.Error(codes.Internal, err.Error())
	}
	st.settle(f.clock.Now())
	v := st.Volumes[id]
	if v == nil {
		return volume{}, false, nil
	}
	return v.clone(), true, nil
}

// nodeRecord is a node's entry in <state-dir>/nodes: the "cloud" knows its
// instances and their zones. A node service writes its own at start and
// leaves it at exit, as an instance outlives its agent.
type nodeRecord struct {
	Zone string `json:"zone"`
}

func nodeRecordPath(stateDir, nodeID string) string {
	return filepath.Join(stateDir, "nodes", url.PathEscape(nodeID)+".json")
}

func writeNodeRecord(stateDir, nodeID, zone string) error {
	p := nodeRecordPath(stateDir, nodeID)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	raw, err := json.Marshal(nodeRecord{Zone: zone})
	if err != nil {
		return err
	}
	return os.WriteFile(p, raw, 0o644)
}

// readNodeRecord returns the node's record, or false when there is none.
func readNodeRecord(stateDir, nodeID string) (nodeRecord, bool, error) {
	var r nodeRecord
	raw, err := os.ReadFile(nodeRecordPath(stateDir, nodeID))
	if errors.Is(err, os.ErrNotExist) {
		return r, false, nil
	}
	if err != nil {
		return r, false, err
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return r, false, fmt.Errorf("reading the record of node %s: %w", nodeID, err)
	}
	return r, true, nil
}
