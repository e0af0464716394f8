package hostpath

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func makeClass(name string, mode storagev1.VolumeBindingMode, mutate ...func(*storagev1.StorageClass)) *storagev1.StorageClass {
	c := &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: name},
		Provisioner:       ProvisionerName,
		ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimDelete),
		VolumeBindingMode: ptr.To(mode),
	}
	for _, m := range mutate {
		m(c)
	}
	return c
}

func allowZones(zones ...string) func(*storagev1.StorageClass) {
	return func(c *storagev1.StorageClass) {
		c.AllowedTopologies = append(c.AllowedTopologies, corev1.TopologySelectorTerm{
			MatchLabelExpressions: []corev1.TopologySelectorLabelRequirement{{Key: ZoneLabelKey, Values: zones}},
		})
	}
}

func makeClaim(mutate ...func(*corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
	c := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "ns", UID: "1234", Annotations: map[string]string{}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To("standard"),
			Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			},
		},
	}
	for _, m := range mutate {
		m(c)
	}
	return c
}

func annotate(k, v string) func(*corev1.PersistentVolumeClaim) {
	return func(c *corev1.PersistentVolumeClaim) { c.Annotations[k] = v }
}

func TestDecideClaim(t *testing.T) {
	wffc := makeClass("standard", storagev1.VolumeBindingWaitForFirstConsumer)
	immediate := makeClass("standard-immediate", storagev1.VolumeBindingImmediate)
	handedOver := annotate(StorageProvisionerAnnotationKey, ProvisionerName)
	selected := annotate(SelectedNodeAnnotationKey, "node-a-0")
	cases := map[string]struct {
		pvc   *corev1.PersistentVolumeClaim
		class *storagev1.StorageClass
		want  ClaimDecision
	}{
		"wffc claim with node and hand-off":                 {pvc: makeClaim(handedOver, selected), class: wffc, want: ClaimProvision},
		"wffc claim before the scheduler picks a node":      {pvc: makeClaim(handedOver), class: wffc, want: ClaimWait},
		"wffc claim before the PV controller hands it over": {pvc: makeClaim(selected), class: wffc, want: ClaimWait},
		"hand-off through the beta annotation": {
			pvc: makeClaim(annotate(BetaStorageProvisionerAnnotationKey, ProvisionerName), selected), class: wffc, want: ClaimProvision,
		},
		"hand-off to another provisioner": {
			pvc: makeClaim(annotate(StorageProvisionerAnnotationKey, "other"), selected), class: wffc, want: ClaimWait,
		},
		"immediate claim needs no node": {pvc: makeClaim(handedOver), class: immediate, want: ClaimProvision},
		"class of another provisioner": {
			pvc: makeClaim(handedOver, selected), class: makeClass("x", storagev1.VolumeBindingImmediate, func(c *storagev1.StorageClass) { c.Provisioner = "other" }), want: ClaimIgnore,
		},
		"no or unknown class": {pvc: makeClaim(handedOver, selected), class: nil, want: ClaimIgnore},
		"already bound": {
			pvc: makeClaim(handedOver, selected, func(c *corev1.PersistentVolumeClaim) { c.Spec.VolumeName = "pv" }), class: wffc, want: ClaimIgnore,
		},
		"being deleted": {
			pvc: makeClaim(handedOver, selected, func(c *corev1.PersistentVolumeClaim) { c.DeletionTimestamp = &metav1.Time{} }), class: wffc, want: ClaimIgnore,
		},
		"with a selector": {
			pvc: makeClaim(handedOver, selected, func(c *corev1.PersistentVolumeClaim) { c.Spec.Selector = &metav1.LabelSelector{} }), class: wffc, want: ClaimIgnore,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := DecideClaim(tc.pvc, tc.class); got != tc.want {
				t.Errorf("DecideClaim() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestChooseZone(t *testing.T) {
	cluster := []string{"zone-c", "zone-a", "zone-b", "zone-a", ""}
	cases := map[string]struct {
		class        *storagev1.StorageClass
		nodeZone     string
		clusterZones []string
		next         int
		want         string
		wantErr      bool
	}{
		"wffc takes the selected node's zone": {
			class: makeClass("s", storagev1.VolumeBindingWaitForFirstConsumer), nodeZone: "zone-b", clusterZones: cluster, next: 0, want: "zone-b",
		},
		"wffc ignores the round-robin position": {
			class: makeClass("s", storagev1.VolumeBindingWaitForFirstConsumer), nodeZone: "zone-c", clusterZones: cluster, next: 1, want: "zone-c",
		},
		"wffc on a node without zone": {
			class: makeClass("s", storagev1.VolumeBindingWaitForFirstConsumer), clusterZones: cluster, wantErr: true,
		},
		"immediate, first of sorted unique zones": {
			class: makeClass("i", storagev1.VolumeBindingImmediate), clusterZones: cluster, next: 0, want: "zone-a",
		},
		"immediate, round-robin": {
			class: makeClass("i", storagev1.VolumeBindingImmediate), clusterZones: cluster, next: 4, want: "zone-b",
		},
		"immediate, allowed topologies narrow the zones": {
			class: makeClass("i", storagev1.VolumeBindingImmediate, allowZones("zone-c", "zone-x")), clusterZones: cluster, next: 1, want: "zone-c",
		},
		"immediate, allowed topology terms add up": {
			class: makeClass("i", storagev1.VolumeBindingImmediate, allowZones("zone-b"), allowZones("zone-c")), clusterZones: cluster, next: 1, want: "zone-c",
		},
		"immediate, allowed zones when there are no nodes": {
			class: makeClass("i", storagev1.VolumeBindingImmediate, allowZones("zone-x")), next: 7, want: "zone-x",
		},
		"immediate, no allowed zone in the cluster": {
			class: makeClass("i", storagev1.VolumeBindingImmediate, allowZones("zone-x")), clusterZones: cluster, wantErr: true,
		},
		"immediate, no zones at all": {
			class: makeClass("i", storagev1.VolumeBindingImmediate), wantErr: true,
		},
		"keyed by hostname: allowed zones do not narrow hostnames": {
			class: makeClass("i", storagev1.VolumeBindingImmediate, allowZones("zone-x"), keyedBy(corev1.LabelHostname)), clusterZones: []string{"n2", "n1"}, next: 1, want: "n2",
		},
		"nil binding mode means Immediate": {
			class: makeClass("i", storagev1.VolumeBindingImmediate, func(c *storagev1.StorageClass) { c.VolumeBindingMode = nil }), nodeZone: "zone-c", clusterZones: cluster, next: 1, want: "zone-b",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ChooseZone(tc.class, tc.nodeZone, tc.clusterZones, tc.next)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ChooseZone() error = %v, wantErr %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("ChooseZone() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestConstructPV(t *testing.T) {
	keyAffinity := func(key, value string) *corev1.VolumeNodeAffinity {
		return &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: corev1.NodeSelectorOpIn, Values: []string{value}}},
		}}}}
	}
	zoneAffinity := func(zone string) *corev1.VolumeNodeAffinity { return keyAffinity(ZoneLabelKey, zone) }
	wantPV := func(mutate ...func(*corev1.PersistentVolume)) *corev1.PersistentVolume {
		pv := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: "pvc-1234", Annotations: map[string]string{ProvisionedByAnnotationKey: ProvisionerName}},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:    corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{
					Path: HostPathRoot + "/pvc-1234", Type: ptr.To(corev1.HostPathDirectoryOrCreate),
				}},
				ClaimRef: &corev1.ObjectReference{
					Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: "ns", Name: "data", UID: "1234",
				},
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
				StorageClassName:              "standard",
				NodeAffinity:                  zoneAffinity("zone-a"),
			},
		}
		for _, m := range mutate {
			m(pv)
		}
		return pv
	}
	cases := map[string]struct {
		pvc   *corev1.PersistentVolumeClaim
		class *storagev1.StorageClass
		zone  string
		want  *corev1.PersistentVolume
	}{
		"wffc claim": {
			pvc: makeClaim(), class: makeClass("standard", storagev1.VolumeBindingWaitForFirstConsumer), zone: "zone-a", want: wantPV(),
		},
		"retain policy, mount options, block mode, other zone": {
			pvc: makeClaim(func(c *corev1.PersistentVolumeClaim) {
				c.Spec.VolumeMode = ptr.To(corev1.PersistentVolumeBlock)
				c.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOncePod}
				c.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("20Gi")
			}),
			class: makeClass("standard", storagev1.VolumeBindingImmediate, func(c *storagev1.StorageClass) {
				c.ReclaimPolicy = ptr.To(corev1.PersistentVolumeReclaimRetain)
				c.MountOptions = []string{"noatime"}
			}),
			zone: "zone-c",
			want: wantPV(func(pv *corev1.PersistentVolume) {
				pv.Spec.VolumeMode = ptr.To(corev1.PersistentVolumeBlock)
				pv.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOncePod}
				pv.Spec.Capacity[corev1.ResourceStorage] = resource.MustParse("20Gi")
				pv.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimRetain
				pv.Spec.MountOptions = []string{"noatime"}
				pv.Spec.NodeAffinity = zoneAffinity("zone-c")
			}),
		},
		"keyed by the GKE zone label": {
			pvc: makeClaim(), class: makeClass("standard", storagev1.VolumeBindingWaitForFirstConsumer, keyedBy("topology.gke.io/zone")), zone: "zone-b",
			want: wantPV(func(pv *corev1.PersistentVolume) {
				pv.Spec.NodeAffinity = keyAffinity("topology.gke.io/zone", "zone-b")
			}),
		},
		"node-local, keyed by hostname": {
			pvc: makeClaim(), class: makeClass("standard", storagev1.VolumeBindingWaitForFirstConsumer, keyedBy(corev1.LabelHostname)), zone: "kwok-zone-a-1",
			want: wantPV(func(pv *corev1.PersistentVolume) {
				pv.Spec.NodeAffinity = keyAffinity(corev1.LabelHostname, "kwok-zone-a-1")
			}),
		},
		"class without reclaim policy defaults to Delete": {
			pvc:   makeClaim(),
			class: makeClass("standard", storagev1.VolumeBindingWaitForFirstConsumer, func(c *storagev1.StorageClass) { c.ReclaimPolicy = nil }),
			zone:  "zone-a",
			want:  wantPV(),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, ConstructPV(tc.pvc, tc.class, tc.zone)); diff != "" {
				t.Errorf("ConstructPV() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestShouldDelete(t *testing.T) {
	pv := func(mutate func(*corev1.PersistentVolume)) *corev1.PersistentVolume {
		p := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: "pvc-1", Annotations: map[string]string{ProvisionedByAnnotationKey: ProvisionerName}},
			Spec:       corev1.PersistentVolumeSpec{PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete},
			Status:     corev1.PersistentVolumeStatus{Phase: corev1.VolumeReleased},
		}
		mutate(p)
		return p
	}
	cases := map[string]struct {
		pv   *corev1.PersistentVolume
		want bool
	}{
		"released, Delete, ours": {pv: pv(func(*corev1.PersistentVolume) {}), want: true},
		"bound":                  {pv: pv(func(p *corev1.PersistentVolume) { p.Status.Phase = corev1.VolumeBound }), want: false},
		"retain": {pv: pv(func(p *corev1.PersistentVolume) {
			p.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimRetain
		}), want: false},
		"another provisioner's":     {pv: pv(func(p *corev1.PersistentVolume) { p.Annotations[ProvisionedByAnnotationKey] = "other" }), want: false},
		"already being deleted":     {pv: pv(func(p *corev1.PersistentVolume) { p.DeletionTimestamp = &metav1.Time{} }), want: false},
		"not annotated (static PV)": {pv: pv(func(p *corev1.PersistentVolume) { p.Annotations = nil }), want: false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := ShouldDelete(tc.pv); got != tc.want {
				t.Errorf("ShouldDelete() = %v, want %v", got, tc.want)
			}
		})
	}
}

// keyedBy sets the class's TopologyKeyParameter.
func keyedBy(key string) func(*storagev1.StorageClass) {
	return func(c *storagev1.StorageClass) {
		c.Parameters = map[string]string{TopologyKeyParameter: key}
	}
}
