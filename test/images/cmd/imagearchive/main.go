// Command imagearchive writes the real-node tier's images (the operator's,
// busybox and pause; see package images) into one docker-archive tarball
// for `ctr -n k8s.io images import`.
//
//	go run ./test/images/cmd/imagearchive -manager bin/manager-linux -busybox /bin/busybox -o .kwok/images.tar
package main

import (
	"flag"
	"fmt"
	"os"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/st-tech/fluent-pvc-operator/test/images"
)

func main() {
	manager := flag.String("manager", "", "the manager binary, static (CGO_ENABLED=0) for linux")
	busybox := flag.String("busybox", "/bin/busybox", "a static busybox (Debian's busybox-static)")
	out := flag.String("o", "images.tar", "the archive to write")
	flag.Parse()
	if err := run(*manager, *busybox, *out); err != nil {
		fmt.Fprintln(os.Stderr, "imagearchive:", err)
		os.Exit(1)
	}
}

func run(manager, busybox, out string) error {
	if manager == "" {
		return fmt.Errorf("-manager is required")
	}
	op, err := images.Operator(manager)
	if err != nil {
		return err
	}
	bb, err := images.Busybox(busybox)
	if err != nil {
		return err
	}
	pause, err := images.Pause(busybox)
	if err != nil {
		return err
	}
	all := map[string]v1.Image{images.OperatorRef: op, images.BusyboxRef: bb, images.PauseRef: pause, images.UpstreamPauseRef: pause}
	if err := images.WriteArchive(out, all); err != nil {
		return err
	}
	for ref, img := range all {
		d, err := img.Digest()
		if err != nil {
			return err
		}
		fmt.Printf("%s %s\n", ref, d)
	}
	return nil
}
