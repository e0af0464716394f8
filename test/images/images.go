// Package images builds the container images the real-node tier loads
// into containerd, without Docker or a registry, with go-containerregistry:
// the operator's image from its static binary (the same user, entrypoint,
// working directory and labels as the Dockerfile's final stage), a busybox
// image for test workloads, and a pause image. WriteArchive writes them as
// one docker-archive tarball for `ctr -n k8s.io images import`.
package images

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Local image references; pods that use them set imagePullPolicy: Never.
const (
	OperatorRef = "fluent-pvc-operator.local/manager:dev"
	BusyboxRef  = "fluent-pvc-operator.local/busybox:dev"
	PauseRef    = "fluent-pvc-operator.local/pause:dev"
	// UpstreamPauseRef is the pause image the operator runs its binder and
	// holder pods with unless told otherwise (--binder-image). The
	// archive carries the local pause image under this name too, so that
	// the real node, which reaches no registry, runs them as a cluster
	// that pulls it would.
	UpstreamPauseRef = "registry.k8s.io/pause:3.10"
)

// Operator's image metadata, which the Dockerfile's final stage must match
// (see TestDockerfileAgrees).
const (
	OperatorUser    = "65532:65532"
	OperatorBinary  = "/manager"
	OperatorWorkDir = "/"
)

// OperatorLabels are the OCI labels of the operator's image.
var OperatorLabels = map[string]string{
	"org.opencontainers.image.title":       "fluent-pvc-operator",
	"org.opencontainers.image.description": "Per-pod PersistentVolumeClaims from a warm pool, drained before deletion",
	"org.opencontainers.image.source":      "https://github.com/st-tech/fluent-pvc-operator",
}

// file is one entry of an image layer.
type file struct {
	name    string
	mode    int64
	content []byte
	link    string // a symlink's target when set
}

// layer is a single uncompressed layer holding files, with fixed times so
// that the same inputs give the same digest.
func layer(files []file) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, ModTime: epoch, Uid: 0, Gid: 0, Format: tar.FormatPAX}
		switch {
		case f.link != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, f.link
		case f.mode&0o40000 != 0 || f.name[len(f.name)-1] == '/':
			h.Typeflag, h.Mode = tar.TypeDir, f.mode&0o7777
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.content))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.content); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
}

// image is a one-layer linux/amd64 image of files with config cfg.
func image(files []file, cfg v1.Config) (v1.Image, error) {
	l, err := layer(files)
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		return nil, err
	}
	return withConfig(img, func(cf *v1.ConfigFile) {
		cf.OS, cf.Architecture, cf.Config = "linux", "amd64", cfg
		cf.Created = v1.Time{Time: time.Unix(0, 0)}
	})
}

// withConfig is img with its config file changed by change.
func withConfig(img v1.Image, change func(*v1.ConfigFile)) (v1.Image, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	change(cf)
	return mutate.ConfigFile(img, cf)
}

// Operator is the operator's image: the static manager binary at
// OperatorBinary, run as OperatorUser, like the Dockerfile's final stage
// (whose distroless base adds only CA certificates and passwd entries the
// manager does not read).
func Operator(managerBinary string) (v1.Image, error) {
	bin, err := os.ReadFile(managerBinary)
	if err != nil {
		return nil, fmt.Errorf("reading the manager binary: %w", err)
	}
	return image([]file{
		{name: "tmp/", mode: 0o41777},
		{name: "manager", mode: 0o755, content: bin},
	}, v1.Config{
		User: OperatorUser, Entrypoint: []string{OperatorBinary}, WorkingDir: OperatorWorkDir, Labels: OperatorLabels,
		Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
	})
}

// busyboxApplets are the commands the test workloads run, linked to busybox.
var busyboxApplets = []string{"sh", "sleep", "cat", "echo", "ls", "mkdir", "rm", "wc", "sort", "uniq", "tail", "head", "true", "false", "date", "seq", "test", "grep", "cp", "mv", "sync"}

// Busybox is a busybox image from a static busybox binary (Debian's
// busybox-static), with /bin/sh and the usual applets as symlinks.
func Busybox(busyboxBinary string) (v1.Image, error) {
	bin, err := os.ReadFile(busyboxBinary)
	if err != nil {
		return nil, fmt.Errorf("reading busybox: %w", err)
	}
	files := []file{{name: "bin/", mode: 0o40755}, {name: "tmp/", mode: 0o41777}, {name: "bin/busybox", mode: 0o755, content: bin}}
	for _, a := range busyboxApplets {
		files = append(files, file{name: "bin/" + a, mode: 0o777, link: "busybox"})
	}
	return image(files, v1.Config{
		Entrypoint: []string{"/bin/sh"}, WorkingDir: "/",
		Env: []string{"PATH=/bin"},
	})
}

// Pause is a sandbox image for containerd's sandbox_image: busybox that
// sleeps forever.
func Pause(busyboxBinary string) (v1.Image, error) {
	img, err := Busybox(busyboxBinary)
	if err != nil {
		return nil, err
	}
	return withConfig(img, func(cf *v1.ConfigFile) { cf.Config.Entrypoint = []string{"/bin/sleep", "2147483647"} })
}

// WriteArchive writes images, by reference, into one docker-archive
// tarball at path, which `ctr -n k8s.io images import` loads. The file is
// replaced at once (a rename), so a cluster that imports it meanwhile
// reads the old or the new archive, never half of one.
func WriteArchive(path string, images map[string]v1.Image) error {
	refs := map[name.Reference]v1.Image{}
	for ref, img := range images {
		tag, err := name.NewTag(ref)
		if err != nil {
			return fmt.Errorf("image reference %q: %w", ref, err)
		}
		refs[tag] = img
	}
	tmp := fmt.Sprintf("%s.tmp-%d", path, os.Getpid())
	if err := tarball.MultiRefWriteToFile(tmp, refs); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}
