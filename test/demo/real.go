package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/test/csidriver"
)

// What the real node runs (FluentPVCWrapper.RealContainers): busybox from
// bin/images.tar, never pulled.
const (
	claimMount = "/mnt/fluent-pvc"
	claimLog   = "app.log"
	// sidecarName is the injected sidecar's container.
	sidecarName = "sidecar"
	// The sidecar appends a timestamped line to the claim twice a second.
	sidecarScript = `trap 'exit 0' TERM
i=0
while :; do
  i=$((i+1))
  echo "$(date -u +%H:%M:%S) $(hostname) line $i" >> ` + claimMount + `/` + claimLog + `
  sleep 0.5 & wait $!
done`
	// The drain Job reads what the sidecar left on the claim and says, in
	// its log and its termination message, how many lines it drained.
	drainScript = `f=` + claimMount + `/` + claimLog + `
n=$(( $(cat $f 2>/dev/null | wc -l) ))
echo "drained $n lines" | tee /dev/termination-log
tail -n 1 $f 2>/dev/null`
)

// showWrites waits until r's sidecar has written a few lines and prints
// them, read from the claim's volume on the host.
func showWrites(ctx context.Context, c client.Client, csiData string, r podResult) error {
	path, err := logOnHost(ctx, c, csiData, r.claim)
	if err != nil {
		return err
	}
	const want = 4
	var lines []string
	for len(lines) < want {
		lines = readLines(path)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s's sidecar wrote %d lines to %s: %w", r.pod, len(lines), path, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	fmt.Printf("\n>> %s's sidecar writes to its claim %s; the last lines of %s (the volume %s, on this machine):\n", r.pod, r.claim, claimMount+"/"+claimLog, path)
	for _, l := range lines[len(lines)-want+1:] {
		fmt.Printf("     %s\n", l)
	}
	return nil
}

// logOnHost is the path, on the host, of the sidecar's file on claim's
// volume: a hostPath PV of the test provisioner, or a volume of the CSI
// driver, whose data lies under csiData.
func logOnHost(ctx context.Context, c client.Client, csiData, claim string) (string, error) {
	pvc := &corev1.PersistentVolumeClaim{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: claim}, pvc); err != nil {
		return "", err
	}
	pv := &corev1.PersistentVolume{}
	if err := c.Get(ctx, client.ObjectKey{Name: pvc.Spec.VolumeName}, pv); err != nil {
		return "", err
	}
	switch {
	case pv.Spec.HostPath != nil:
		return filepath.Join(pv.Spec.HostPath.Path, claimLog), nil
	case pv.Spec.CSI != nil:
		return filepath.Join(csidriver.VolumeData(csiData, pv.Spec.CSI.VolumeHandle), claimLog), nil
	}
	return "", fmt.Errorf("PV %s is neither a hostPath nor a CSI volume", pv.Name)
}

// readLines is the lines of the file at path; none when it is missing.
func readLines(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer func() { _ = f.Close() }()
	var lines []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		lines = append(lines, s.Text())
	}
	return lines
}

// drainAll deletes the pods at once and prints, for each, how many lines
// its claim's file held once the pod was gone (read on the host),
// what its drain Job said it drained, and when, from the delete call, the
// Job completed, the operator deleted the claim, and the claim was gone.
func drainAll(ctx context.Context, c client.Client, csiData string, seen *timeline, results []podResult) error {
	paths := make([]string, len(results))
	for i, r := range results {
		p, err := logOnHost(ctx, c, csiData, r.claim)
		if err != nil {
			return err
		}
		paths[i] = p
	}
	fmt.Printf("\n>> deleting the %d pods at once; the operator drains each claim with a Job, then deletes the claim\n", len(results))
	deleted := make([]time.Time, len(results))
	for i, r := range results {
		pod := &corev1.Pod{}
		pod.Namespace, pod.Name = namespace, r.pod
		deleted[i] = time.Now()
		if err := c.Delete(ctx, pod); err != nil {
			return err
		}
	}
	// A pod's containers have stopped once it is gone; its claim is
	// deleted only after its drain Job, which starts after that, succeeds.
	left := make([]int, len(results))
	var wg sync.WaitGroup
	errs := make([]error, len(results))
	for i, r := range results {
		wg.Go(func() {
			if _, _, errs[i] = seen.wait(ctx, podGoneKey(r.pod)); errs[i] == nil {
				left[i] = len(readLines(paths[i]))
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Println("\nLINES LEFT is what the sidecar left in the claim's file, counted by the demo on this machine once the pod was gone.")
	fmt.Println("DRAIN JOB SAID is the drain container's termination message, as the kubelet reported it.")
	fmt.Println("JOB COMPLETE, PVC DELETED and PVC GONE are from the pod's delete call to the demo's informers seeing the drain Job Complete,")
	fmt.Println("the operator's delete call on the PVC (its deletionTimestamp), and the PVC removed from the API once its finalizers were cleared.")
	fmt.Fprintln(w, "\nPOD\tPVC\tLINES LEFT\tDRAIN JOB\tDRAIN JOB SAID\tJOB COMPLETE\tPVC DELETED\tPVC GONE")
	for i, r := range results {
		done, job, err := seen.wait(ctx, drainedKey(r.claim))
		if err != nil {
			return err
		}
		_, drainSaid, err := seen.wait(ctx, drainSaidKey(r.claim))
		if err != nil {
			return err
		}
		gone, _, err := seen.wait(ctx, claimGoneKey(r.claim))
		if err != nil {
			return err
		}
		deleting, _, _ := seen.get(claimDeletedKey(r.claim))
		since := func(t time.Time) time.Duration { return t.Sub(deleted[i]).Round(10 * time.Millisecond) }
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", r.pod, r.claim, left[i], job, strings.TrimRight(drainSaid, "\r\n"),
			since(done), since(deleting), since(gone))
	}
	return w.Flush()
}
