package e2e

import (
	"fmt"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/pool"
	"github.com/st-tech/fluent-pvc-operator/test/cluster"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
	"github.com/st-tech/fluent-pvc-operator/test/provisioner/hostpath"
)

var _ = Describe("Checkout by the pod's scheduling constraints and the volume's topology", func() {
	var ns string

	BeforeEach(func() { ns = fixtures.NewNamespace(ctx, k8s, "topo", namespaceCleanup) })

	// keyedClass is a WaitForFirstConsumer class of the test provisioner
	// whose PVs are keyed by node label key.
	keyedClass := func(key string) string {
		sc := &storagev1.StorageClass{
			ObjectMeta:        metav1.ObjectMeta{Name: "topo-" + ns},
			Provisioner:       cluster.ProvisionerName,
			VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
			ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimDelete),
			Parameters:        map[string]string{hostpath.TopologyKeyParameter: key},
		}
		Expect(k8s.Create(ctx, sc)).To(Succeed())
		DeferCleanup(func() { Expect(k8s.Delete(ctx, sc)).To(Succeed()) })
		return sc.Name
	}
	pooled := func(name, class string, size int32) *v1alpha1.FluentPVC {
		return fixtures.CreateFluentPVC(ctx, k8s, e2eFluentPVC(name+"-"+ns).PoolSize(size).Mutate(func(f *v1alpha1.FluentPVC) {
			f.Spec.Pool.Namespaces = []string{ns}
			if class != "" {
				f.Spec.PVCSpecTemplate.StorageClassName = &class
			}
		}).Obj(), fluentPVCCleanup)
	}
	warm := func(g Gomega) []corev1.PersistentVolumeClaim {
		var l corev1.PersistentVolumeClaimList
		g.Expect(k8s.List(ctx, &l, client.InNamespace(ns), client.MatchingLabels{v1alpha1.ClaimRoleLabelKey: v1alpha1.ClaimRoleWarm})).To(Succeed())
		var out []corev1.PersistentVolumeClaim
		for _, c := range l.Items {
			if c.DeletionTimestamp.IsZero() && c.Status.Phase == corev1.ClaimBound && c.Annotations[v1alpha1.NodeAffinityAnnotationKey] != "" {
				out = append(out, c)
			}
		}
		return out
	}
	full := func(n int) {
		EventuallyWithOffset(1, func(g Gomega) { g.Expect(warm(g)).To(HaveLen(n)) }).WithTimeout(longTimeout).Should(Succeed())
	}
	// volumeValue is the value the claim's PV requires of node label key.
	volumeValue := func(g Gomega, claim, key string) string {
		c := fixtures.GetPVC(ctx, g, k8s, ns, claim)
		g.Expect(c.Spec.VolumeName).NotTo(BeEmpty(), "claim %s is bound", claim)
		pv := &corev1.PersistentVolume{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: c.Spec.VolumeName}, pv)).To(Succeed())
		g.Expect(pv.Spec.NodeAffinity).NotTo(BeNil())
		for _, t := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
			for _, r := range t.MatchExpressions {
				if r.Key == key && len(r.Values) == 1 {
					return r.Values[0]
				}
			}
		}
		g.Expect(pv.Spec.NodeAffinity).To(BeNil(), "PV %s is keyed by %s", pv.Name, key)
		return ""
	}
	nodeLabel := func(g Gomega, node, key string) string {
		n := &corev1.Node{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: node}, n)).To(Succeed())
		return n.Labels[key]
	}
	// usableClaims checks that the pods labelled app=app are n, Running,
	// each on a node its claim's volume accepts (by label key), and returns
	// them.
	usableClaims := func(g Gomega, app string, n int, key string) []corev1.Pod {
		pods := podsOf(g, ns, app)
		g.Expect(pods).To(HaveLen(n))
		for _, p := range pods {
			g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning), "pod %s", p.Name)
			g.Expect(volumeValue(g, p.Labels[v1alpha1.BindingNameLabelKey], key)).To(Equal(nodeLabel(g, p.Spec.NodeName, key)), "pod %s", p.Name)
		}
		return pods
	}
	runningWithUsableClaims := func(app string, n int, key string) []corev1.Pod {
		var pods []corev1.Pod
		EventuallyWithOffset(1, func(g Gomega) { pods = usableClaims(g, app, n, key) }).WithTimeout(longTimeout).Should(Succeed())
		return pods
	}
	// noVolumeWaits checks the scheduler's events: no pod of the namespace
	// was held back because of where its volume is. (A conflict writing the
	// claim in the scheduler's PreBind is retried at once and is not one.)
	noVolumeWaits := func() {
		events, err := kc.Clientset.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		ExpectWithOffset(1, err).NotTo(HaveOccurred())
		volumeReasons := []string{"volume node affinity conflict", "didn't find available persistent volumes", "unbound immediate persistentvolumeclaims", "node(s) didn't match persistentvolume"}
		for _, e := range events.Items {
			if e.Reason != "FailedScheduling" {
				continue
			}
			msg := strings.ToLower(e.Note)
			for _, r := range volumeReasons {
				ExpectWithOffset(1, msg).NotTo(ContainSubstring(r), "pod %s waited for its volume", e.Regarding.Name)
			}
		}
	}
	checkouts := func(pods []corev1.Pod) map[string]int {
		out := map[string]int{}
		for _, p := range pods {
			out[fixtures.GetPVC(ctx, Default, k8s, ns, p.Labels[v1alpha1.BindingNameLabelKey]).Annotations[v1alpha1.CheckoutAnnotationKey]]++
		}
		return out
	}

	It("gives every pod of a DaemonSet a node-local claim it can use, and then keeps the pool on the DaemonSet's nodes", func() {
		// The DaemonSet comes with the pool, before any warm PVC is Bound:
		// its first round misses, and the pool has to learn where it runs.
		fpvc := pooled("ds", keyedClass(corev1.LabelHostname), 6)
		labels := map[string]string{"app": "ds", v1alpha1.FluentPVCNameLabelKey: fpvc.Name}
		ds := &appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ds"},
			Spec: appsv1.DaemonSetSpec{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "ds"}},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec:       fixtures.MakePod("", ns).Obj().Spec,
				},
			},
		}
		Expect(k8s.Create(ctx, ds)).To(Succeed())
		first := runningWithUsableClaims("ds", 6, corev1.LabelHostname)
		nodes := sets.New[string]()
		for _, p := range first {
			nodes.Insert(p.Spec.NodeName)
		}
		Expect(nodes).To(HaveLen(6), "one pod per node")
		GinkgoWriter.Printf("first round: %v\n", checkouts(first))
		full(6)

		// The pool follows the DaemonSet: a warm PVC on each of its nodes.
		Eventually(func(g Gomega) {
			on := sets.New[string]()
			for _, c := range warm(g) {
				on.Insert(c.Annotations[v1alpha1.SelectedNodeAnnotationKey])
			}
			g.Expect(sets.List(on)).To(Equal(sets.List(nodes)))
		}).WithTimeout(longTimeout).Should(Succeed())

		// A rollout replaces every pod; each takes the warm PVC on its node.
		Eventually(func() error {
			d := &appsv1.DaemonSet{}
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(ds), d); err != nil {
				return err
			}
			d.Spec.Template.Annotations = map[string]string{"rollout": "2"}
			return k8s.Update(ctx, d)
		}).Should(Succeed())
		var second []corev1.Pod
		Eventually(func(g Gomega) {
			second = usableClaims(g, "ds", 6, corev1.LabelHostname)
			for _, p := range second {
				g.Expect(p.Annotations).To(HaveKeyWithValue("rollout", "2"))
			}
		}).WithTimeout(longTimeout).Should(Succeed())
		Expect(checkouts(second)).To(Equal(map[string]int{v1alpha1.CheckoutHit: 6}), "every pod of the second round is a hit")
		noVolumeWaits()

		Expect(k8s.Delete(ctx, ds)).To(Succeed())
		for _, p := range append(first, second...) {
			fixtures.Drained(ctx, k8s, ns, p.Labels[v1alpha1.BindingNameLabelKey], longTimeout)
		}
	})

	It("places pods with GKE-style zone keys (topology.gke.io/zone) on nodes their warm claims can reach", func() {
		fpvc := pooled("gke", keyedClass(cluster.GKEZoneLabelKey), 3)
		full(3)
		deploy := deployment(ns, "gke", fpvc.Name, 6, nil)
		Expect(k8s.Create(ctx, deploy)).To(Succeed())
		pods := runningWithUsableClaims("gke", 6, cluster.GKEZoneLabelKey)
		Expect(checkouts(pods)).To(HaveKeyWithValue(v1alpha1.CheckoutHit, BeNumerically(">=", 1)))
		noVolumeWaits()
		Expect(k8s.Delete(ctx, deploy)).To(Succeed())
		for _, p := range pods {
			fixtures.Drained(ctx, k8s, ns, p.Labels[v1alpha1.BindingNameLabelKey], longTimeout)
		}
	})

	It("gives a pod pinned to a node pool of one zone a claim of that zone, or a miss, never one of another zone", func() {
		// The suite's default class: PVs keyed by topology.kubernetes.io/zone.
		fpvc := pooled("nodepool", "", 6)
		full(6)
		Eventually(func(g Gomega) {
			zones := sets.New[string]()
			for _, c := range warm(g) {
				zones.Insert(c.Annotations[v1alpha1.ZonesAnnotationKey])
			}
			g.Expect(zones).To(HaveLen(3), "warm PVCs in every zone")
		}).Should(Succeed())
		var claims []string
		for i := range 4 {
			name := fmt.Sprintf("logging-%d", i)
			pod := fixtures.MakePod(name, ns).FluentPVC(fpvc.Name).Label("app", "logging").
				NodeSelector(cluster.NodePoolLabelKey, cluster.NodePoolLogging).Obj()
			Expect(k8s.Create(ctx, pod)).To(Succeed())
			claims = append(claims, fixtures.ClaimOf(pod))
		}
		pods := runningWithUsableClaims("logging", 4, pool.ZoneLabelKey)
		for _, p := range pods {
			Eventually(func(g Gomega) string {
				return volumeValue(g, p.Labels[v1alpha1.BindingNameLabelKey], pool.ZoneLabelKey)
			}).Should(Equal(cluster.LoggingPoolZone), "pod %s", p.Name)
		}
		GinkgoWriter.Printf("node-pool pods: %v\n", checkouts(pods))
		Expect(checkouts(pods)).To(HaveKeyWithValue(v1alpha1.CheckoutHit, BeNumerically(">=", 2)), "both warm PVCs of zone-b are used")
		noVolumeWaits()
		for _, p := range pods {
			Expect(k8s.Delete(ctx, &p)).To(Succeed())
		}
		for _, c := range claims {
			fixtures.Drained(ctx, k8s, ns, c, longTimeout)
		}
	})
})
