package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admission/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/st-tech/fluent-pvc-operator/apis/objects"
	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/checkout"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/pool"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
	"github.com/st-tech/fluent-pvc-operator/webhook"
)

var _ = Describe("Pod admission", func() {
	var (
		ctx  context.Context
		ns   string
		fpvc *v1alpha1.FluentPVC
	)

	// createFluentPVC creates f and waits until the manager's cache sees it.
	createFluentPVC := func(f *v1alpha1.FluentPVC) *v1alpha1.FluentPVC {
		Expect(k8sClient.Create(ctx, f)).To(Succeed())
		DeferCleanup(func() {
			Expect(client.IgnoreNotFound(k8sClient.Delete(context.Background(), f))).To(Succeed())
		})
		Eventually(func() error {
			return mgrClient.Get(ctx, client.ObjectKeyFromObject(f), &v1alpha1.FluentPVC{})
		}).Should(Succeed())
		return f
	}
	// deleteHeld deletes f, held by a finalizer of the test's until the
	// spec ends, so that it stays being deleted.
	deleteHeld := func(f *v1alpha1.FluentPVC) *v1alpha1.FluentPVC {
		const hold = "test.example.com/hold"
		controllerutil.AddFinalizer(f, hold)
		Expect(k8sClient.Update(ctx, f)).To(Succeed())
		Expect(k8sClient.Delete(ctx, f)).To(Succeed())
		DeferCleanup(func() {
			Eventually(func() error {
				got := &v1alpha1.FluentPVC{}
				if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(f), got); err != nil {
					return client.IgnoreNotFound(err)
				}
				controllerutil.RemoveFinalizer(got, hold)
				return k8sClient.Update(context.Background(), got)
			}).Should(Succeed())
		})
		return f
	}
	claims := func() []corev1.PersistentVolumeClaim {
		var l corev1.PersistentVolumeClaimList
		Expect(k8sClient.List(ctx, &l, client.InNamespace(ns))).To(Succeed())
		return l.Items
	}
	bindings := func() []v1alpha1.FluentPVCBinding {
		var l v1alpha1.FluentPVCBindingList
		Expect(k8sClient.List(ctx, &l, client.InNamespace(ns))).To(Succeed())
		return l.Items
	}

	BeforeEach(func() {
		ctx = context.Background()
		ns = newNamespace()
		fpvc = createFluentPVC(fixtures.MakeFluentPVC("sample-" + ns).Obj())
	})

	It("injects the claim, the sidecar, the mounts and envs, and leaves on the claim what its binding is made from", func() {
		pod := fixtures.MakePod("app", ns).FluentPVC(fpvc.Name).
			Container(corev1.Container{Name: "second", Image: "busybox"}).Obj()
		Expect(k8sClient.Create(ctx, pod)).To(Succeed())

		claimName := pod.Labels[v1alpha1.BindingNameLabelKey]
		Expect(claimName).To(HavePrefix(fpvc.Name[:min(40, len(fpvc.Name))]))
		Expect(pod.Spec.Volumes).To(ContainElement(corev1.Volume{
			Name:         "fluent-pvc",
			VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claimName}},
		}))
		Expect(pod.Spec.Volumes).To(ContainElement(HaveField("Name", "some-secret")))
		// A native sidecar (sidecarMode defaults to Native).
		Expect(pod.Spec.Containers).To(HaveLen(2))
		Expect(pod.Spec.InitContainers).To(HaveLen(1))
		Expect(pod.Spec.InitContainers[0].Name).To(Equal("sidecar"))
		Expect(pod.Spec.InitContainers[0].RestartPolicy).To(HaveValue(Equal(corev1.ContainerRestartPolicyAlways)))
		Expect(pod.Annotations).To(HaveKeyWithValue(v1alpha1.SidecarAnnotationKey, "sidecar"))
		for _, c := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
			Expect(c.VolumeMounts).To(ContainElements(
				corev1.VolumeMount{Name: "fluent-pvc", MountPath: "/mnt/fluent-pvc"},
				corev1.VolumeMount{Name: "some-secret", MountPath: "/path/to/secret"},
			), "container %s", c.Name)
			Expect(c.Env).To(ContainElement(corev1.EnvVar{Name: "FLUENT_PVC_MOUNT_DIR", Value: "/mnt/fluent-pvc"}), "container %s", c.Name)
		}
		Expect(pod.Finalizers).To(BeEmpty(), "no finalizer: the binding records the pod, and a claim whose pod went unrecorded is drained")

		var pvc corev1.PersistentVolumeClaim
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: claimName}, &pvc)).To(Succeed())
		Expect(pvc.Labels).To(HaveKeyWithValue(v1alpha1.BindingNameLabelKey, claimName))
		Expect(pvc.Labels).To(HaveKeyWithValue(v1alpha1.FluentPVCNameLabelKey, fpvc.Name))
		Expect(pvc.Finalizers).To(ContainElement(v1alpha1.PVCProtectionFinalizer))
		Expect(pvc.Spec.Resources.Requests).To(HaveKey(corev1.ResourceStorage))
		Expect(pvc.Annotations).To(HaveKeyWithValue(v1alpha1.CheckoutAnnotationKey, v1alpha1.CheckoutMiss))

		Expect(pvc.Annotations).To(HaveKey(v1alpha1.AdmittedAtAnnotationKey))
		Expect(pvc.Labels).To(HaveKeyWithValue(v1alpha1.ClaimRoleLabelKey, v1alpha1.ClaimRoleClaimed))
		// One write per pod: the operator makes the binding from the claim.
		Expect(bindings()).To(BeEmpty())
	})

	It("does not send a pod it admitted, which mounts only the claim it was handed, to the mount webhook; a copy without the opt-in label goes there", func() {
		before := webhookCalls(webhook.MountPath)
		pod := fixtures.MakePod("own", ns).FluentPVC(fpvc.Name).Obj()
		Expect(k8sClient.Create(ctx, pod)).To(Succeed())
		Expect(webhookCalls(webhook.MountPath)).To(Equal(before), "the pod webhook judged it")

		copied := fixtures.MakePod("copy", ns).Claim(pod.Labels[v1alpha1.BindingNameLabelKey]).Obj()
		Expect(k8sClient.Create(ctx, copied, client.DryRunAll)).To(Satisfy(apierrors.IsForbidden))
		Expect(webhookCalls(webhook.MountPath)).To(BeNumerically(">", before))
	})

	It("appends the sidecar to containers in Container mode, as fluent-pvc-operator did", func() {
		legacy := createFluentPVC(fixtures.MakeFluentPVC("legacy-" + ns).Mutate(func(f *v1alpha1.FluentPVC) {
			f.Spec.SidecarMode = v1alpha1.SidecarModeContainer
		}).Obj())
		pod := fixtures.MakePod("app", ns).FluentPVC(legacy.Name).Obj()
		pod.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: "busybox"}}
		Expect(k8sClient.Create(ctx, pod)).To(Succeed())
		Expect(pod.Spec.Containers).To(HaveLen(2))
		Expect(pod.Spec.Containers[1].Name).To(Equal("sidecar"))
		Expect(pod.Spec.Containers[1].RestartPolicy).To(BeNil())
		Expect(pod.Spec.InitContainers).To(HaveLen(1), "the pod's own init container only")
		Expect(pod.Annotations).To(HaveKeyWithValue(v1alpha1.SidecarAnnotationKey, "sidecar"))
	})

	It("leaves an unlabelled pod exactly as sent", func() {
		before := admissionCount()
		sent := fixtures.MakePod("plain", ns).Label("app", "plain").Env("A", "1").Volume("data").Mount("data", "/data").Obj()
		stored := sent.DeepCopy()
		Expect(k8sClient.Create(ctx, stored)).To(Succeed())

		Expect(stored.Labels).To(Equal(sent.Labels))
		Expect(stored.Finalizers).To(BeEmpty())
		Expect(stored.Spec.Volumes).To(HaveLen(1))
		Expect(stored.Spec.Containers).To(HaveLen(1))
		Expect(stored.Spec.Containers[0].Env).To(Equal(sent.Spec.Containers[0].Env))
		Expect(stored.Spec.Containers[0].VolumeMounts).To(Equal(sent.Spec.Containers[0].VolumeMounts))
		Expect(claims()).To(BeEmpty())
		Expect(admissionCount()).To(Equal(before), "the objectSelector keeps unlabelled pods away from the webhook")

		// Even if the webhook were called, it would change nothing.
		resp := mutator.Handle(ctx, createRequest(sent, false))
		Expect(resp.Allowed).To(BeTrue())
		Expect(resp.Patches).To(BeEmpty())
	})

	It("gives twenty pods created at once with generateName twenty distinct claims", func() {
		var wg sync.WaitGroup
		names := make(chan string, 20)
		for range 20 {
			wg.Go(func() {
				defer GinkgoRecover()
				pod := fixtures.MakePod("", ns).GenerateName("burst-").FluentPVC(fpvc.Name).Obj()
				Expect(k8sClient.Create(ctx, pod)).To(Succeed())
				names <- pod.Labels[v1alpha1.BindingNameLabelKey]
			})
		}
		wg.Wait()
		close(names)
		distinct := sets.New[string]()
		for n := range names {
			distinct.Insert(n)
		}
		Expect(distinct).To(HaveLen(20))
		Expect(claims()).To(HaveLen(20))
	})

	DescribeTable("denies bad input with a message naming the fix, and creates nothing",
		func(mk func(fpvcName string) *corev1.Pod, wantMessage []string) {
			pod := mk(fpvc.Name)
			pod.Namespace = ns
			err := k8sClient.Create(ctx, pod)
			Expect(err).To(HaveOccurred())
			Expect(apierrors.IsForbidden(err) || apierrors.IsBadRequest(err)).To(BeTrue(), "a denial, not a server error: %v", err)
			for _, m := range wantMessage {
				Expect(err.Error()).To(ContainSubstring(m))
			}
			Expect(claims()).To(BeEmpty())
			Expect(bindings()).To(BeEmpty())
		},
		Entry("the FluentPVC does not exist",
			func(string) *corev1.Pod { return fixtures.MakePod("p", "").FluentPVC("no-such-fluentpvc").Obj() },
			[]string{`FluentPVC "no-such-fluentpvc" does not exist`, "create it, or fix the pod's label " + v1alpha1.FluentPVCNameLabelKey}),
		Entry("the pod already has a volume named pvcVolumeName",
			func(f string) *corev1.Pod { return fixtures.MakePod("p", "").FluentPVC(f).Volume("fluent-pvc").Obj() },
			[]string{`spec.volumes[0].name: Invalid value: "fluent-pvc": clashes with the FluentPVC's pvcVolumeName; rename one of them`}),
		Entry("a container has the sidecar's name",
			func(f string) *corev1.Pod {
				return fixtures.MakePod("p", "").FluentPVC(f).Container(corev1.Container{Name: "sidecar", Image: "x"}).Obj()
			},
			[]string{`spec.containers[1].name: Invalid value: "sidecar": clashes with the FluentPVC's sidecarContainerTemplate.name`}),
		Entry("a volume clashes with a common volume",
			func(f string) *corev1.Pod { return fixtures.MakePod("p", "").FluentPVC(f).Volume("some-secret").Obj() },
			[]string{`spec.volumes[0].name: Invalid value: "some-secret": clashes with the FluentPVC's commonVolumes`}),
		Entry("a mount clashes with a common mount",
			func(f string) *corev1.Pod {
				return fixtures.MakePod("p", "").FluentPVC(f).Volume("mine").Mount("mine", "/path/to/secret").Obj()
			},
			[]string{`spec.containers[0].volumeMounts[0].mountPath: Invalid value: "/path/to/secret": clashes with the FluentPVC's commonVolumeMounts`}),
		Entry("a mount clashes with pvcVolumeMountPath",
			func(f string) *corev1.Pod {
				return fixtures.MakePod("p", "").FluentPVC(f).Volume("mine").Mount("mine", "/mnt/fluent-pvc").Obj()
			},
			[]string{`spec.containers[0].volumeMounts[0].mountPath: Invalid value: "/mnt/fluent-pvc": clashes with the FluentPVC's pvcVolumeMountPath`}),
	)

	It("denies pods of a FluentPVC that is being deleted", func() {
		deleting := deleteHeld(createFluentPVC(fixtures.MakeFluentPVC("deleting-" + ns).Obj()))
		Eventually(func(g Gomega) {
			f := &v1alpha1.FluentPVC{}
			g.Expect(mgrClient.Get(ctx, client.ObjectKeyFromObject(deleting), f)).To(Succeed())
			g.Expect(f.DeletionTimestamp).NotTo(BeNil())
		}).Should(Succeed())

		err := k8sClient.Create(ctx, fixtures.MakePod("p", ns).FluentPVC(deleting.Name).Obj())
		Expect(err).To(MatchError(ContainSubstring(`FluentPVC "` + deleting.Name + `" is being deleted and admits no new pods`)))
		Expect(claims()).To(BeEmpty())
		Expect(bindings()).To(BeEmpty())
	})

	It("denies a pod whose FluentPVC began deleting before its claim was written, though this replica's cache shows it alive", func() {
		deleting := deleteHeld(createFluentPVC(fixtures.MakeFluentPVC("racing-" + ns).Obj()))

		// The cache of a replica that has not seen the deletion yet.
		m := webhook.NewPodMutator(staleCache{mgrClient}, k8sClient, k8sClient, admission.NewDecoder(scheme), clock.RealClock{})
		resp := m.Handle(ctx, createRequest(fixtures.MakePod("late", ns).FluentPVC(deleting.Name).Obj(), false))
		Expect(resp.Allowed).To(BeFalse(), "%v", resp.Result)
		Expect(resp.Result.Message).To(ContainSubstring(`FluentPVC "` + deleting.Name + `" is being deleted and admits no new pods`))
		// The claim was written before the live read; it holds no data and
		// carries the orphan record the operator reclaims it by.
		Expect(claims()).To(ConsistOf(HaveField("ObjectMeta.Annotations", HaveKey(v1alpha1.AdmittedAtAnnotationKey))))
	})

	It("mutates a server-side dry run the same way and creates nothing", func() {
		pod := fixtures.MakePod("dry", ns).FluentPVC(fpvc.Name).Obj()
		Expect(k8sClient.Create(ctx, pod, client.DryRunAll)).To(Succeed())
		Expect(pod.Labels).To(HaveKey(v1alpha1.BindingNameLabelKey))
		Expect(pod.Spec.InitContainers).To(ContainElement(HaveField("Name", "sidecar")))
		Expect(pod.Spec.Volumes).To(ContainElement(HaveField("Name", "fluent-pvc")))
		Consistently(claims).Should(BeEmpty())
		Expect(bindings()).To(BeEmpty())
		Expect(apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{}))).To(BeTrue())
	})

	It("refuses its own output sent again, a copy of the admitted pod, and creates nothing", func() {
		pod := fixtures.MakePod("twice", ns).FluentPVC(fpvc.Name).Obj()
		resp := mutator.Handle(ctx, createRequest(pod, false))
		Expect(resp.Allowed).To(BeTrue())
		mutated := applyPatch(pod, resp)
		Expect(claims()).To(HaveLen(1))

		// The API server never calls the webhook twice for one pod
		// (reinvocationPolicy Never): the same output again is a copy.
		for _, dryRun := range []bool{false, true} {
			resp := mutator.Handle(ctx, createRequest(mutated, dryRun))
			Expect(resp.Allowed).To(BeFalse(), "dry run %v", dryRun)
			Expect(resp.Result.Message).To(ContainSubstring("copy of another pod"))
		}
		Expect(claims()).To(HaveLen(1))
	})

	It("admits each labelled pod in one call where a LimitRange defaults container resources", func() {
		Expect(k8sClient.Create(ctx, &corev1.LimitRange{
			ObjectMeta: metav1.ObjectMeta{Name: "defaults", Namespace: ns},
			Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{
				Type: corev1.LimitTypeContainer,
				// The sample's sidecar sets cpu and memory, not this.
				Default:        corev1.ResourceList{corev1.ResourceEphemeralStorage: resource.MustParse("1Gi")},
				DefaultRequest: corev1.ResourceList{corev1.ResourceEphemeralStorage: resource.MustParse("512Mi")},
			}}},
		})).To(Succeed())
		calls := func() float64 {
			m, err := fixtures.GatherMetrics(metrics.Registry)
			Expect(err).NotTo(HaveOccurred())
			return m.Counter("fluentpvc_webhook_admissions_total", nil)
		}
		before := calls()
		const pods = 3
		for i := range pods {
			pod := fixtures.MakePod(fmt.Sprint("limited-", i), ns).FluentPVC(fpvc.Name).Obj()
			Expect(k8sClient.Create(ctx, pod)).To(Succeed())
			Expect(pod.Labels).To(HaveKey(v1alpha1.BindingNameLabelKey))
			Expect(pod.Spec.InitContainers[0].Resources.Limits).To(HaveKey(corev1.ResourceEphemeralStorage), "the LimitRange defaulted the sidecar")
		}
		Expect(calls()-before).To(BeNumerically("==", pods), "calls of the pod webhook: a second call would refuse the pod on a replica that did not hand out its claim")
	})

	It("hands out a warm PVC with no live read, though the FluentPVC is being deleted unseen; a second pod with that claim is refused", func() {
		pooled := createFluentPVC(fixtures.MakeFluentPVC("pooled-" + ns).PoolSize(1).Obj())
		warm := claim.NewWarm(pooled, ns, pool.TemplateHash(&pooled.Spec.PVCSpecTemplate), "").Object
		warm.Annotations = map[string]string{v1alpha1.NodeAffinityAnnotationKey: ""} // its volume can be used on any node
		Expect(k8sClient.Create(ctx, warm)).To(Succeed())
		warm.Status.Phase = corev1.ClaimBound
		Expect(k8sClient.Status().Update(ctx, warm)).To(Succeed())
		Eventually(func(g Gomega) {
			got := &corev1.PersistentVolumeClaim{}
			g.Expect(mgrClient.Get(ctx, client.ObjectKeyFromObject(warm), got)).To(Succeed())
			g.Expect(got.Status.Phase).To(Equal(corev1.ClaimBound))
		}).Should(Succeed())
		deleteHeld(pooled)

		// A replica whose cache has not seen the deletion, counting its
		// live reads.
		live := &countingReader{Reader: k8sClient}
		m := webhook.NewPodMutator(staleCache{mgrClient}, live, k8sClient, admission.NewDecoder(scheme), clock.RealClock{})
		pod := fixtures.MakePod("hit", ns).FluentPVC(pooled.Name).Obj()
		resp := m.Handle(ctx, createRequest(pod, false))
		Expect(resp.Allowed).To(BeTrue(), "%v", resp.Result)
		mutated := applyPatch(pod, resp)
		Expect(mutated.Labels).To(HaveKeyWithValue(v1alpha1.BindingNameLabelKey, warm.Name))
		Expect(live.calls.Load()).To(BeZero(), "live reads on a hit's admission")
		// The warm PVC's update was conditioned on its resourceVersion, so
		// the operator, which lets a deleting FluentPVC go only once every
		// warm PVC is being deleted, sees it claimed and keeps the
		// FluentPVC until its drain.
		got := &corev1.PersistentVolumeClaim{}
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(warm), got)).To(Succeed())
		Expect(claim.Held(got)).To(BeTrue())

		resp = m.Handle(ctx, createRequest(mutated, false))
		Expect(resp.Allowed).To(BeFalse(), "a second pod with the claim, though no pod uses it yet")
		Expect(resp.Result.Message).To(ContainSubstring("handed to another pod's admission"))
	})

	It("hands out a reserved claim without a write, and refuses any other pod that carries it", func() {
		pooled := createFluentPVC(fixtures.MakeFluentPVC("reserved-" + ns).PoolSize(1).PoolNamespaces(ns).Obj())
		warm := claim.NewWarm(pooled, ns, pool.TemplateHash(&pooled.Spec.PVCSpecTemplate), "").Object
		warm.Annotations = map[string]string{v1alpha1.NodeAffinityAnnotationKey: ""}
		Expect(k8sClient.Create(ctx, warm)).To(Succeed())
		warm.Status.Phase = corev1.ClaimBound
		Expect(k8sClient.Status().Update(ctx, warm)).To(Succeed())

		m := webhook.NewPodMutator(mgrClient, k8sClient, k8sClient, admission.NewDecoder(scheme), clock.RealClock{})
		stock := checkout.NewStock("replica-a", ns, 1, m.Pool, clock.RealClock{})
		m.Pool.Stock = stock
		Eventually(func(g Gomega) {
			g.Expect(stock.Sync(ctx)).To(Succeed())
			g.Expect(stock.Len()).To(Equal(1))
		}).Should(Succeed())
		reserved := &corev1.PersistentVolumeClaim{}
		Eventually(func(g Gomega) {
			g.Expect(mgrClient.Get(ctx, client.ObjectKeyFromObject(warm), reserved)).To(Succeed())
			_, _, ok := claim.Reservation(reserved)
			g.Expect(ok).To(BeTrue())
		}).Should(Succeed())

		pod := fixtures.MakePod("hit", ns).FluentPVC(pooled.Name).Obj()
		resp := m.Handle(ctx, createRequest(pod, false))
		Expect(resp.Allowed).To(BeTrue(), "%v", resp.Result)
		mutated := applyPatch(pod, resp)
		Expect(mutated.Labels).To(HaveKeyWithValue(v1alpha1.BindingNameLabelKey, warm.Name))
		got := &corev1.PersistentVolumeClaim{}
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(warm), got)).To(Succeed())
		Expect(got.ResourceVersion).To(Equal(reserved.ResourceVersion), "the handout wrote the claim")
		Expect(stock.Len()).To(BeZero())

		other := webhook.NewPodMutator(mgrClient, k8sClient, k8sClient, admission.NewDecoder(scheme), clock.RealClock{})
		for name, r := range map[string]*webhook.PodMutator{"this replica, a second time": m, "another replica": other} {
			By(name)
			resp = r.Handle(ctx, createRequest(mutated, false))
			Expect(resp.Allowed).To(BeFalse())
			Expect(resp.Result.Message).To(ContainSubstring("reserved by webhook replica " + ns + "/replica-a-"))
		}
	})

	It("shares a pool's reservations among the replicas whose stock Leases are live", func() {
		pooled := createFluentPVC(fixtures.MakeFluentPVC("shared-" + ns).PoolSize(3).PoolNamespaces(ns).Obj())
		for range 3 {
			warm := claim.NewWarm(pooled, ns, pool.TemplateHash(&pooled.Spec.PVCSpecTemplate), "").Object
			warm.Annotations = map[string]string{v1alpha1.NodeAffinityAnnotationKey: ""}
			Expect(k8sClient.Create(ctx, warm)).To(Succeed())
			warm.Status.Phase = corev1.ClaimBound
			Expect(k8sClient.Status().Update(ctx, warm)).To(Succeed())
		}
		Eventually(func(g Gomega) {
			var l corev1.PersistentVolumeClaimList
			g.Expect(mgrClient.List(ctx, &l, client.InNamespace(ns), client.MatchingLabels{v1alpha1.FluentPVCNameLabelKey: pooled.Name})).To(Succeed())
			bound := 0
			for _, c := range l.Items {
				if c.Status.Phase == corev1.ClaimBound {
					bound++
				}
			}
			g.Expect(bound).To(Equal(3), "the cache sees the pool full")
		}).Should(Succeed())
		// Each stock keeps its Lease in ns, as the replicas of one
		// installation keep theirs in the operator's namespace.
		stock := func(name string) *checkout.Stock {
			s := checkout.NewStock(name, ns, pool.ReserveShare, checkout.NewCheckouter(mgrClient, k8sClient, k8sClient), clock.RealClock{})
			DeferCleanup(func() { Expect(s.Close(context.Background())).To(Succeed()) })
			return s
		}
		a, b := stock("replica-a"), stock("replica-b")
		// reserved counts the pool's claims by the replica whose Lease
		// holds them, "" for the warm PVCs no one reserved.
		reserved := func(g Gomega) map[string]int {
			var l corev1.PersistentVolumeClaimList
			g.Expect(k8sClient.List(ctx, &l, client.InNamespace(ns), client.MatchingLabels{v1alpha1.FluentPVCNameLabelKey: pooled.Name})).To(Succeed())
			out := map[string]int{}
			for i := range l.Items {
				by, _, _ := claim.Reservation(&l.Items[i])
				switch {
				case strings.HasPrefix(by, ns+"/replica-a-"):
					out["replica-a"]++
				case strings.HasPrefix(by, ns+"/replica-b-"):
					out["replica-b"]++
				default:
					out[by]++
				}
			}
			return out
		}
		sync := func(g Gomega) {
			g.Expect(a.Sync(ctx)).To(Succeed())
			g.Expect(b.Sync(ctx)).To(Succeed())
		}

		By("two live Leases: the first to look takes its share, the other what is left")
		Eventually(func(g Gomega) {
			sync(g)
			g.Expect(reserved(g)).To(Equal(map[string]int{"replica-a": 2, "replica-b": 1}))
			g.Expect([]int{a.Len(), b.Len()}).To(Equal([]int{2, 1}))
		}).Should(Succeed())

		By("a third replica's Lease: each gives back what it holds beyond a share of 1")
		now := metav1.NewMicroTime(time.Now())
		third := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "replica-c-x1", Labels: map[string]string{v1alpha1.StockLeaseLabelKey: "true"}},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("replica-c-x1"), LeaseDurationSeconds: ptr.To[int32](45), RenewTime: &now},
		}
		Expect(k8sClient.Create(ctx, third)).To(Succeed())
		Eventually(func(g Gomega) {
			sync(g)
			g.Expect(reserved(g)).To(Equal(map[string]int{"replica-a": 1, "replica-b": 1, "": 1}))
		}).Should(Succeed())

		By("the third's Lease over: the share is 2 again, and the one left is taken")
		over := metav1.NewMicroTime(time.Now().Add(-time.Minute))
		third.Spec.RenewTime = &over
		Expect(k8sClient.Update(ctx, third)).To(Succeed())
		Eventually(func(g Gomega) {
			sync(g)
			got := reserved(g)
			g.Expect(got).NotTo(HaveKey(""))
			g.Expect(got["replica-a"] + got["replica-b"]).To(Equal(3))
		}).Should(Succeed())
	})

	It("denies a pod created from a copy of another pod's manifest, which would share its claim", func() {
		// The copy carries the binding label and the claim volume, so it
		// looks already admitted.
		pod := fixtures.MakePod("original", ns).FluentPVC(fpvc.Name).Obj()
		Expect(k8sClient.Create(ctx, pod)).To(Succeed())
		claimName := pod.Labels[v1alpha1.BindingNameLabelKey]
		// The binding as the operator (not running in this suite) makes it
		// once it sees the pod.
		pvc := &corev1.PersistentVolumeClaim{}
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: claimName}, pvc)).To(Succeed())
		b := claim.Binding(pvc, fpvc.UID)
		b.Spec.Pod = v1alpha1.ObjectIdentity{Name: pod.Name, UID: pod.UID}
		Expect(k8sClient.Create(ctx, b)).To(Succeed())

		for name, mutate := range map[string]func(*corev1.Pod){
			"a copy under a new name":                 func(p *corev1.Pod) { p.Name = "copy" },
			"the same manifest after the pod is gone": func(*corev1.Pod) {},
		} {
			By(name)
			copied := pod.DeepCopy()
			copied.ResourceVersion, copied.UID, copied.CreationTimestamp = "", "", metav1.Time{}
			mutate(copied)
			if copied.Name == pod.Name {
				Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, pod, client.GracePeriodSeconds(0)))).To(Succeed())
				Eventually(func(g Gomega) {
					p := &corev1.Pod{}
					err := k8sClient.Get(ctx, client.ObjectKeyFromObject(pod), p)
					if err == nil && controllerutil.RemoveFinalizer(p, v1alpha1.PodProtectionFinalizer) {
						g.Expect(client.IgnoreNotFound(k8sClient.Update(ctx, p))).To(Succeed())
					}
					g.Expect(apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{}))).To(BeTrue())
				}).Should(Succeed())
			}
			err := k8sClient.Create(ctx, copied)
			Expect(err).To(MatchError(ContainSubstring("copy of another pod")), "%v", err)
			Expect(err).To(MatchError(ContainSubstring(claimName)))
		}
		Expect(claims()).To(HaveLen(1))
	})

	It("lets the operator's own drain and binder pods through unchanged when a namespace policy gives them the opt-in label", func() {
		held := claim.NewClaimed(fpvc, ns, claim.Name(fpvc.Name), "h", v1alpha1.CheckoutMiss, claim.NewCheckoutID(), "", fixtures.Epoch)
		Expect(claim.Execute(ctx, k8sClient, held)).To(Succeed())
		b := claim.Binding(held.Object, fpvc.UID)
		b.UID = "binding-uid" // the drain Job's controller; envtest runs no garbage collector
		job := objects.DrainJob(fpvc, b, 1)
		binder := pool.BinderJob(fpvc, fixtures.Returned(held.Object), "pause")
		for name, j := range map[string]*batchv1.Job{"a drain pod": job, "a binder pod": binder} {
			By(name)
			Expect(k8sClient.Create(ctx, j)).To(Succeed())
			pod := &corev1.Pod{ObjectMeta: *j.Spec.Template.ObjectMeta.DeepCopy(), Spec: j.Spec.Template.Spec}
			pod.Namespace, pod.Name = ns, "own"
			pod.Labels[v1alpha1.FluentPVCNameLabelKey] = fpvc.Name // the policy's
			By(name + " that only carries its labels is handled as any labelled pod")
			resp := mutator.Handle(ctx, createRequest(pod, true))
			Expect(resp.Result).To(Or(BeNil(), HaveField("Message", Not(ContainSubstring("the operator's own")))))

			By(name + " of the operator's Job")
			pod.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(j, batchv1.SchemeGroupVersion.WithKind("Job"))}
			resp = mutator.Handle(ctx, createRequest(pod, false))
			Expect(resp.Allowed).To(BeTrue(), "%s", resp.Result)
			Expect(resp.Result.Message).To(ContainSubstring("the operator's own"))
			Expect(resp.Patches).To(BeEmpty())
		}
		Expect(claims()).To(HaveLen(1), "no claim for the operator's own pods")
	})

	It("admits a pod whose FluentPVC was applied with it, before the cache has seen it", func() {
		m := webhook.NewPodMutator(unsyncedCache{mgrClient}, k8sClient, k8sClient, admission.NewDecoder(scheme), clock.RealClock{})
		resp := m.Handle(ctx, createRequest(fixtures.MakePod("early", ns).FluentPVC(fpvc.Name).Obj(), true))
		Expect(resp.Allowed).To(BeTrue(), "%v", resp.Result)
		Expect(resp.Patches).NotTo(BeEmpty())

		resp = m.Handle(ctx, createRequest(fixtures.MakePod("typo", ns).FluentPVC("no-such-"+fpvc.Name).Obj(), true))
		Expect(resp.Allowed).To(BeFalse())
		Expect(resp.Result.Message).To(ContainSubstring("does not exist"))
	})

	It("refuses pods of a Native FluentPVC where the cluster has no native sidecars, and admits those of a Container one", func() {
		m := webhook.NewPodMutator(mgrClient, k8sClient, k8sClient, admission.NewDecoder(scheme), clock.RealClock{})
		m.NativeSidecarsUnsupported = webhook.NativeSidecarSupport("v1.28.15")
		resp := m.Handle(ctx, createRequest(fixtures.MakePod("native", ns).FluentPVC(fpvc.Name).Obj(), true))
		Expect(resp.Allowed).To(BeFalse())
		Expect(resp.Result.Message).To(And(ContainSubstring("sidecarMode Native"), ContainSubstring("v1.28.15"), ContainSubstring("set its sidecarMode to Container")))

		legacy := createFluentPVC(fixtures.MakeFluentPVC("legacy-" + ns).Mutate(func(f *v1alpha1.FluentPVC) {
			f.Spec.SidecarMode = v1alpha1.SidecarModeContainer
		}).Obj())
		Eventually(func() error { return mgrClient.Get(ctx, client.ObjectKeyFromObject(legacy), &v1alpha1.FluentPVC{}) }).Should(Succeed())
		resp = m.Handle(ctx, createRequest(fixtures.MakePod("container", ns).FluentPVC(legacy.Name).Obj(), true))
		Expect(resp.Allowed).To(BeTrue(), "%v", resp.Result)
		Expect(claims()).To(BeEmpty(), "a dry run creates nothing")
	})

	It("works for a FluentPVC with a 60-character name", func() {
		long := createFluentPVC(fixtures.MakeFluentPVC(strings.Repeat("l", 60-len(ns)-1) + "-" + ns).Obj())
		Expect(long.Name).To(HaveLen(60))
		pod := fixtures.MakePod("long", ns).FluentPVC(long.Name).Obj()
		Expect(k8sClient.Create(ctx, pod)).To(Succeed())
		claimName := pod.Labels[v1alpha1.BindingNameLabelKey]
		Expect(len(claimName)).To(BeNumerically("<=", 63))
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: claimName}, &corev1.PersistentVolumeClaim{})).To(Succeed())
	})

	It("leaves an orphan record on the claim of a pod rejected after the webhook", func() {
		rejectLabel := "reject-" + ns
		policy, binding := fixtures.RejectPodsPolicy(ns, rejectLabel, "rejected by the test policy")
		Expect(k8sClient.Create(ctx, policy)).To(Succeed())
		Expect(k8sClient.Create(ctx, binding)).To(Succeed())
		DeferCleanup(func() {
			Expect(k8sClient.Delete(context.Background(), binding)).To(Succeed())
			Expect(k8sClient.Delete(context.Background(), policy)).To(Succeed())
		})

		rejected := func() *corev1.Pod {
			return fixtures.MakePod("rejected", ns).FluentPVC(fpvc.Name).Label(rejectLabel, "yes").Obj()
		}
		// The policy takes effect once the API server has loaded it; a dry
		// run shows when, without side effects.
		Eventually(func() error {
			return k8sClient.Create(ctx, rejected(), client.DryRunAll)
		}).Should(MatchError(ContainSubstring("rejected by the test policy")))

		Expect(k8sClient.Create(ctx, rejected())).To(MatchError(ContainSubstring("rejected by the test policy")))
		Expect(apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "rejected"}, &corev1.Pod{}))).To(BeTrue())

		pvcs := claims()
		Expect(pvcs).To(HaveLen(1))
		Expect(pvcs[0].Annotations).To(HaveKey(v1alpha1.AdmittedAtAnnotationKey))
		Expect(pvcs[0].Labels).To(HaveKeyWithValue(v1alpha1.ClaimRoleLabelKey, v1alpha1.ClaimRoleClaimed))
		Expect(pvcs[0].Labels).To(HaveKeyWithValue(v1alpha1.BindingNameLabelKey, pvcs[0].Name))
		Expect(pvcs[0].Finalizers).To(ContainElement(v1alpha1.PVCProtectionFinalizer), "kept until the operator reclaims it")
	})
})

// createRequest is the admission request the API server would send to create pod.
func createRequest(pod *corev1.Pod, dryRun bool) admission.Request {
	raw, err := json.Marshal(pod)
	Expect(err).NotTo(HaveOccurred())
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID:       "test",
		Operation: admissionv1.Create,
		Namespace: pod.Namespace,
		Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
		Object:    runtime.RawExtension{Raw: raw},
		DryRun:    ptr.To(dryRun),
	}}
}

// countingReader counts the reads made through it.
type countingReader struct {
	client.Reader
	calls atomic.Int32
}

func (r *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	r.calls.Add(1)
	return r.Reader.Get(ctx, key, obj, opts...)
}

func (r *countingReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	r.calls.Add(1)
	return r.Reader.List(ctx, list, opts...)
}

// unsyncedCache is a cache that has not seen any FluentPVC yet.
type unsyncedCache struct{ client.Reader }

func (c unsyncedCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*v1alpha1.FluentPVC); ok {
		return apierrors.NewNotFound(v1alpha1.GroupVersion.WithResource("fluentpvcs").GroupResource(), key.Name)
	}
	return c.Reader.Get(ctx, key, obj, opts...)
}

// staleCache is a cache that has not seen any FluentPVC's deletion yet.
type staleCache struct{ client.Reader }

func (c staleCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	err := c.Reader.Get(ctx, key, obj, opts...)
	if f, ok := obj.(*v1alpha1.FluentPVC); ok && err == nil {
		f.DeletionTimestamp = nil
	}
	return err
}

// applyPatch is pod as the webhook's response patches it.
func applyPatch(pod *corev1.Pod, resp admission.Response) *corev1.Pod {
	raw, err := json.Marshal(pod)
	Expect(err).NotTo(HaveOccurred())
	ops, err := json.Marshal(resp.Patches)
	Expect(err).NotTo(HaveOccurred())
	p, err := jsonpatch.DecodePatch(ops)
	Expect(err).NotTo(HaveOccurred())
	patched, err := p.Apply(raw)
	Expect(err).NotTo(HaveOccurred())
	out := &corev1.Pod{}
	Expect(json.Unmarshal(patched, out)).To(Succeed())
	return out
}

// counter is the sum of the series of counter name, in this process's
// controller-runtime registry, whose labels include labels.
func counter(name string, labels map[string]string) float64 {
	m, err := fixtures.GatherMetrics(metrics.Registry)
	Expect(err).NotTo(HaveOccurred())
	return m.Counter(name, labels)
}

// webhookCalls is the number of requests the webhook server has served on
// path (controller-runtime's own counter).
func webhookCalls(path string) float64 {
	return counter("controller_runtime_webhook_requests_total", map[string]string{"webhook": path})
}

// admissionCount is the number of admissions the webhook has handled.
func admissionCount() float64 {
	return counter("fluentpvc_webhook_admissions_total", nil)
}
