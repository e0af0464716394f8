package images

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// finalStage is what the Dockerfile's last stage says about the image.
type finalStage struct {
	User, WorkDir string
	Entrypoint    []string
	Labels        map[string]string
	Copied        []string // COPY destinations
}

// parseFinalStage reads the instructions after the Dockerfile's last FROM.
func parseFinalStage(t *testing.T, path string) finalStage {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var s finalStage
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		inst, rest, _ := strings.Cut(line, " ")
		rest = strings.TrimSpace(rest)
		switch strings.ToUpper(inst) {
		case "FROM":
			s = finalStage{Labels: map[string]string{}}
		case "USER":
			s.User = rest
		case "WORKDIR":
			s.WorkDir = rest
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(rest), &s.Entrypoint); err != nil {
				t.Fatalf("ENTRYPOINT must be in exec form: %v", err)
			}
		case "LABEL":
			for rest != "" {
				kv, more, _ := strings.Cut(rest, "\" ")
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					t.Fatalf("LABEL %q: want key=\"value\" pairs", rest)
				}
				s.Labels[k] = strings.Trim(v, "\"")
				rest = strings.TrimSpace(more)
			}
		case "COPY":
			fields := strings.Fields(rest)
			s.Copied = append(s.Copied, fields[len(fields)-1])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestDockerfileAgrees checks that the image built here and the Dockerfile's
// agree on what matters to a cluster: the user (non-root), the entrypoint,
// where the binary is, the working directory and the labels.
func TestDockerfileAgrees(t *testing.T) {
	df := parseFinalStage(t, filepath.Join("..", "..", "Dockerfile"))
	bin := filepath.Join(t.TempDir(), "manager")
	if err := os.WriteFile(bin, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	img, err := Operator(bin)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	got := finalStage{User: cf.Config.User, WorkDir: cf.Config.WorkingDir, Entrypoint: cf.Config.Entrypoint, Labels: cf.Config.Labels, Copied: []string{OperatorBinary}}
	if diff := cmp.Diff(df, got); diff != "" {
		t.Errorf("Dockerfile (-) and the built image (+) disagree:\n%s", diff)
	}
	uid, _, _ := strings.Cut(cf.Config.User, ":")
	if uid == "" || uid == "0" || uid == "root" {
		t.Errorf("the image runs as %q; want a numeric non-root user", cf.Config.User)
	}
	if !slices.Equal(cf.Config.Entrypoint, []string{OperatorBinary}) {
		t.Errorf("entrypoint %v, want [%s]", cf.Config.Entrypoint, OperatorBinary)
	}
}

// TestArchive builds every image from stand-in binaries and writes them to
// one archive, which must name each reference.
func TestArchive(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.WriteFile(bin, []byte("stand-in"), 0o755); err != nil {
		t.Fatal(err)
	}
	op, err := Operator(bin)
	if err != nil {
		t.Fatal(err)
	}
	bb, err := Busybox(bin)
	if err != nil {
		t.Fatal(err)
	}
	pause, err := Pause(bin)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "images.tar")
	if err := WriteArchive(out, map[string]v1.Image{OperatorRef: op, BusyboxRef: bb, PauseRef: pause}); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{OperatorRef, BusyboxRef, PauseRef} {
		if !strings.Contains(string(raw), ref) {
			t.Errorf("the archive's manifest does not name %s", ref)
		}
	}
	// The same inputs give the same image.
	again, err := Busybox(bin)
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := bb.Digest()
	d2, _ := again.Digest()
	if d1 != d2 {
		t.Errorf("busybox digests differ between two builds: %s, %s", d1, d2)
	}
}
