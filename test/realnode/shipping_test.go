package realnode

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
	"github.com/st-tech/fluent-pvc-operator/test/images"
)

const (
	claimVolume = "fluent-pvc"
	claimMount  = "/mnt/fluent-pvc"
	// A sidecar that, until it is told to stop, appends numbered lines
	// "<pod> <n>" to the claim's buffer and then the same line to the
	// host's record of what it wrote. TERM only sets a flag (a shell runs
	// a trap between any two commands), so both files always end with the
	// same line.
	writerScript = `stop=
trap 'stop=1' TERM
mkdir -p /e2e/written
me=$(hostname)
# A restarted sidecar goes on from the claim's last line.
i=$(cat ` + claimMount + `/buffer 2>/dev/null | wc -l)
while [ -z "$stop" ]; do
  i=$((i+1))
  echo "$me $i" >> ` + claimMount + `/buffer
  echo "$me $i" >> /e2e/written/$me
  sleep 0.1 & wait $!
done`
	// A drain Job that waits DRAIN_DELAY seconds, then ships the claim's
	// buffer to shipped/<its pod> on the host, atomically (a rename).
	drainScript = `set -e
sleep "${DRAIN_DELAY:-0}"
mkdir -p /e2e/shipped
out=/e2e/shipped/$(hostname)
if [ ! -f ` + claimMount + `/buffer ]; then echo "nothing to ship"; exit 0; fi
cp ` + claimMount + `/buffer "$out.tmp"
mv "$out.tmp" "$out"
echo "shipped $(wc -l < "$out") lines"`
)

// shippingFluentPVC is the README's FluentPVC with real containers: the
// writer sidecar, a drain Job that ships after drainDelay seconds and is
// not retried within itself, the host directory at /e2e, and a pool of
// poolSize warm PVCs in ns, on the suite's storageClass.
func shippingFluentPVC(name, ns string, poolSize int32, drainDelay int) *fixtures.FluentPVCWrapper {
	drain := images.BusyboxContainer("drain", drainScript)
	drain.Env = []corev1.EnvVar{{Name: "DRAIN_DELAY", Value: fmt.Sprint(drainDelay)}}
	return fixtures.MakeFluentPVC(name).PoolSize(poolSize).StorageClass(storageClass).
		RealContainers(claimMount, images.BusyboxContainer("writer", writerScript), drain).
		Mutate(func(f *v1alpha1.FluentPVC) {
			f.Spec.Pool.Namespaces = []string{ns}
			f.Spec.PVCVolumeName = claimVolume
			f.Spec.CommonVolumes = []corev1.Volume{{Name: "e2e", VolumeSource: corev1.VolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: specDir(ns), Type: ptr.To(corev1.HostPathDirectoryOrCreate)},
			}}}
			f.Spec.CommonVolumeMounts = []corev1.VolumeMount{{Name: "e2e", MountPath: "/e2e"}}
		})
}

// readLines reads a file of the host directory, one element per line; a
// missing file has none.
func readLines(path string) []string {
	GinkgoHelper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	Expect(err).NotTo(HaveOccurred())
	defer func() { _ = f.Close() }()
	var lines []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		lines = append(lines, s.Text())
	}
	Expect(s.Err()).NotTo(HaveOccurred())
	return lines
}

// specDir is the host directory the pods of namespace ns mount at /e2e.
func specDir(ns string) string { return filepath.Join(hostDir, ns) }

// written is what pod's sidecar wrote to its claim.
func written(ns, pod string) []string {
	return readLines(filepath.Join(specDir(ns), "written", pod))
}

// writing waits until pod's sidecar has written at least n lines.
func writing(ns, pod string, n int) {
	GinkgoHelper()
	Eventually(func() int { return len(written(ns, pod)) }).Should(BeNumerically(">=", n), "lines written by %s", pod)
}

// shipped is what the drain Jobs of namespace ns shipped: one file per
// Job pod that got to ship.
func shipped(ns string) (files int, lines []string) {
	GinkgoHelper()
	entries, err := os.ReadDir(filepath.Join(specDir(ns), "shipped"))
	if os.IsNotExist(err) {
		return 0, nil
	}
	Expect(err).NotTo(HaveOccurred())
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".tmp") {
			files++
			lines = append(lines, readLines(filepath.Join(specDir(ns), "shipped", e.Name()))...)
		}
	}
	return files, lines
}

// expectShippedOnce checks that the lines the pods wrote were shipped,
// each exactly once, in shipments files.
func expectShippedOnce(ns string, pods []string, shipments int) {
	GinkgoHelper()
	var want []string
	for _, p := range pods {
		w := written(ns, p)
		Expect(w).NotTo(BeEmpty(), "pod %s wrote nothing", p)
		want = append(want, w...)
	}
	files, got := shipped(ns)
	Expect(files).To(Equal(shipments), "files shipped")
	slices.Sort(want)
	slices.Sort(got)
	Expect(duplicates(got)).To(BeEmpty(), "lines shipped twice")
	Expect(got).To(HaveLen(len(want)), "lines shipped = lines written")
	Expect(got).To(Equal(want))
	GinkgoWriter.Printf("%d lines written by %d pods, shipped once each in %d files\n", len(want), len(pods), files)
}

func duplicates(sorted []string) []string {
	var d []string
	for i := 1; i < len(sorted); i++ {
		if sorted[i] == sorted[i-1] {
			d = append(d, sorted[i])
		}
	}
	return d
}
