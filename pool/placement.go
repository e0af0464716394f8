package pool

import (
	"encoding/json"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
)

// VolumeAffinity is the NodeAffinityAnnotationKey value of a warm PVC whose
// volume is pv: its required node affinity as JSON, or "" when the volume
// can be used on any node.
func VolumeAffinity(pv *corev1.PersistentVolume) string {
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil || len(pv.Spec.NodeAffinity.Required.NodeSelectorTerms) == 0 {
		return ""
	}
	b, err := json.Marshal(pv.Spec.NodeAffinity.Required)
	if err != nil {
		return "" // a NodeSelector always marshals
	}
	return string(b)
}

// WarmAffinity is what a warm PVC records of where its volume can be used,
// as a NodeAffinityAnnotationKey value; ok is false while nothing usable is
// recorded. A PVC recorded by an older version carries only the zones
// (ZonesAnnotationKey): a zone list stands for a selector on the zone
// label, and an empty one is not trusted, since it was also written for
// volumes pinned by other keys.
func WarmAffinity(c *corev1.PersistentVolumeClaim) (affinity string, ok bool) {
	if a, ok := c.Annotations[v1alpha1.NodeAffinityAnnotationKey]; ok {
		return a, true
	}
	zones := c.Annotations[v1alpha1.ZonesAnnotationKey]
	if zones == "" {
		return "", false
	}
	return VolumeAffinity(&corev1.PersistentVolume{Spec: corev1.PersistentVolumeSpec{NodeAffinity: &corev1.VolumeNodeAffinity{
		Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
			Key: ZoneLabelKey, Operator: corev1.NodeSelectorOpIn, Values: splitZones(zones),
		}}}}},
	}}}), true
}

// VolumeMatcher tells whether a volume's node affinity accepts a node, as
// the scheduler's volume binding does: on the node's labels only.
type VolumeMatcher struct {
	// terms are the selector's terms, each also as a selector of its own.
	terms   []corev1.NodeSelectorTerm
	matches []*nodeaffinity.NodeSelector
}

// Affinities remembers parsed volume affinities (NodeAffinityAnnotationKey
// values) for whoever owns it: the webhook's checkouts and the pool's
// reconciles each keep one. Parsing is most of a checkout's placement cost
// (BenchmarkPlacement), and the pool would otherwise parse every warm PVC's
// affinity on each reconcile. A pool's volumes share a few affinities (one
// per zone) or one per node. The map is emptied when it outgrows
// maxParsed, which only costs parsing again. A nil *Affinities parses each
// time.
type Affinities struct {
	mu sync.Mutex
	m  map[string]*VolumeMatcher
}

// NewAffinities is an empty Affinities.
func NewAffinities() *Affinities {
	return &Affinities{m: map[string]*VolumeMatcher{}}
}

const maxParsed = 10000

// Parse is ParseVolumeAffinity, remembered: equal values share one
// matcher, parsed once, which callers must not change.
func (a *Affinities) Parse(affinity string) (*VolumeMatcher, error) {
	if a == nil {
		return ParseVolumeAffinity(affinity)
	}
	a.mu.Lock()
	m, ok := a.m[affinity]
	a.mu.Unlock()
	if ok {
		return m, nil
	}
	m, err := ParseVolumeAffinity(affinity)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	if len(a.m) >= maxParsed {
		clear(a.m)
	}
	a.m[affinity] = m
	a.mu.Unlock()
	return m, nil
}

// ParseVolumeAffinity reads a NodeAffinityAnnotationKey value; "" accepts
// every node. It fails on a value that is not a valid node selector.
func ParseVolumeAffinity(affinity string) (*VolumeMatcher, error) {
	m := &VolumeMatcher{}
	if affinity == "" {
		return m, nil
	}
	var sel corev1.NodeSelector
	if err := json.Unmarshal([]byte(affinity), &sel); err != nil {
		return nil, err
	}
	for _, t := range sel.NodeSelectorTerms {
		ns, err := nodeaffinity.NewNodeSelector(&corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{t}})
		if err != nil {
			return nil, err
		}
		m.terms = append(m.terms, t)
		m.matches = append(m.matches, ns)
	}
	return m, nil
}

// UsableOnSomeNode says whether a volume of affinity (a
// NodeAffinityAnnotationKey value) can be used on one of nodes. It is
// true when nothing says otherwise: no node is known, or the affinity
// does not parse (a pod's checkout then leaves the volume alone).
func (a *Affinities) UsableOnSomeNode(affinity string, nodes []*corev1.Node) bool {
	if len(nodes) == 0 {
		return true
	}
	m, err := a.Parse(affinity)
	if err != nil || m.Any() {
		return true
	}
	return slices.ContainsFunc(nodes, m.Match)
}

// Any is true when the volume can be used on every node.
func (m *VolumeMatcher) Any() bool { return len(m.terms) == 0 }

// Match reports whether the volume can be used on node.
func (m *VolumeMatcher) Match(node *corev1.Node) bool {
	if m.Any() {
		return true
	}
	for i := range m.matches {
		if m.matchTerm(i, node) {
			return true
		}
	}
	return false
}

func (m *VolumeMatcher) matchTerm(i int, node *corev1.Node) bool {
	labelsOnly := &corev1.Node{}
	labelsOnly.Labels = node.Labels
	return m.matches[i].Match(labelsOnly)
}

// PodFitsNode reports whether pod can run on node as far as placement goes,
// by the scheduler's own rules: spec.nodeName, the nodeSelector and the
// required node affinity (matchExpressions and matchFields), NoSchedule and
// NoExecute taints against the pod's tolerations, and cordoned nodes. A pod
// that names its node bypasses the scheduler, so only the node's identity,
// its selector and affinity (which the kubelet checks) and NoExecute taints
// count for it. Resources, ports and inter-pod affinity are left to the
// scheduler: they change from moment to moment and rarely rule out a whole
// topology domain.
func PodFitsNode(pod *corev1.Pod, required nodeaffinity.RequiredNodeAffinity, node *corev1.Node) bool {
	if !node.DeletionTimestamp.IsZero() {
		return false
	}
	if pod.Spec.NodeName != "" && pod.Spec.NodeName != node.Name {
		return false
	}
	if ok, err := required.Match(node); err != nil || !ok {
		return false
	}
	effects := func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoExecute || (pod.Spec.NodeName == "" && t.Effect == corev1.TaintEffectNoSchedule)
	}
	if _, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, pod.Spec.Tolerations, effects, false); untolerated {
		return false
	}
	if node.Spec.Unschedulable && pod.Spec.NodeName == "" {
		cordon := &corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}
		if !corev1helpers.TolerationsTolerateTaint(klog.Background(), pod.Spec.Tolerations, cordon, false) {
			return false
		}
	}
	return true
}

// PinnedNodeNames are the only nodes pod can run on when it names them: its
// spec.nodeName, or the names every term of its required node affinity
// lists in a matchFields metadata.name In requirement (a DaemonSet's pods);
// ok is false when the pod does not pin itself so.
func PinnedNodeNames(pod *corev1.Pod) (names []string, ok bool) {
	if pod.Spec.NodeName != "" {
		return []string{pod.Spec.NodeName}, true
	}
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return nil, false
	}
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) == 0 {
		return nil, false
	}
	for _, t := range terms {
		i := slices.IndexFunc(t.MatchFields, func(r corev1.NodeSelectorRequirement) bool {
			return r.Key == "metadata.name" && r.Operator == corev1.NodeSelectorOpIn
		})
		if i < 0 {
			return nil, false
		}
		names = append(names, t.MatchFields[i].Values...)
	}
	slices.Sort(names)
	return slices.Compact(names), true
}

// Placement answers, for one pod, whether a volume with a given recorded
// node affinity (NodeAffinityAnnotationKey) can be used on some node the
// pod can run on. It reads the nodes once, when first needed, and
// remembers each answer, so that a checkout costs one pass over the nodes
// however many warm PVCs it looks at; nodes indexed by the label a volume
// is keyed on (a zone, a hostname) make each answer a lookup. One serves
// one admission.
type Placement struct {
	pod      *corev1.Pod
	required nodeaffinity.RequiredNodeAffinity
	// nodes lists the nodes to consider (the cache's; never modified).
	nodes func() ([]*corev1.Node, error)

	loaded bool
	err    error
	// noNodes is true when the pod does not pin itself and no node is
	// known at all (a cluster scaled to zero, or one without nodes yet):
	// placement cannot be judged, and any volume is as good as another.
	noNodes bool
	fits    []*corev1.Node
	// byLabel indexes fits by label key, then value, built per key on use.
	byLabel map[string]map[string][]*corev1.Node
	memo    map[string]bool
	// affinities parses the volumes' affinities.
	affinities *Affinities
	// fitNames are the names of fits, built on use.
	fitNames map[string]bool
}

// NewPlacement is a Placement for pod over the nodes that nodes lists; a
// nil pod runs anywhere, which answers whether any node can use a volume.
func NewPlacement(pod *corev1.Pod, nodes func() ([]*corev1.Node, error), affinities *Affinities) *Placement {
	p := &Placement{pod: pod, nodes: nodes, affinities: affinities, memo: map[string]bool{}, byLabel: map[string]map[string][]*corev1.Node{}}
	if pod != nil {
		p.required = nodeaffinity.GetRequiredNodeAffinity(pod)
	}
	return p
}

// Usable reports whether a volume recorded with affinity can be used on a
// node the pod can run on. A volume usable anywhere is, without reading
// nodes (if the pod fits no node, it waits whatever its volume); so is any
// volume when no node is known at all. It is false when the nodes cannot be read or the affinity cannot be parsed:
// the pod then gets a new claim, which the scheduler places.
func (p *Placement) Usable(affinity string) bool {
	if affinity == "" {
		return true
	}
	if v, ok := p.memo[affinity]; ok {
		return v
	}
	v := p.usable(affinity)
	p.memo[affinity] = v
	return v
}

// FitsNode reports whether the pod can run on node name, as far as
// placement goes (PodFitsNode). False when the nodes cannot be read.
func (p *Placement) FitsNode(name string) bool {
	if !p.load() {
		return false
	}
	if p.fitNames == nil {
		p.fitNames = make(map[string]bool, len(p.fits))
		for _, n := range p.fits {
			p.fitNames[n.Name] = true
		}
	}
	return p.fitNames[name]
}

// Err is the error of reading the nodes, if any.
func (p *Placement) Err() error { return p.err }

func (p *Placement) usable(affinity string) bool {
	m, err := p.affinities.Parse(affinity)
	if err != nil {
		return false
	}
	if !p.load() {
		return false
	}
	if p.noNodes {
		return true
	}
	for i, term := range m.terms {
		for _, n := range p.nodesFor(term) {
			if m.matchTerm(i, n) {
				return true
			}
		}
	}
	return false
}

func (p *Placement) load() bool {
	if p.loaded {
		return p.err == nil
	}
	p.loaded = true
	nodes, err := p.nodes()
	if err != nil {
		p.err = err
		return false
	}
	if len(nodes) == 0 {
		p.noNodes = true
		if p.pod != nil {
			_, pinned := PinnedNodeNames(p.pod)
			p.noNodes = !pinned
		}
	}
	for _, n := range nodes {
		if p.pod == nil {
			if n.DeletionTimestamp.IsZero() {
				p.fits = append(p.fits, n)
			}
		} else if PodFitsNode(p.pod, p.required, n) {
			p.fits = append(p.fits, n)
		}
	}
	return true
}

// nodesFor narrows the nodes the pod fits to those that can match term:
// through the index on the first key the term requires values of, else
// all of them.
func (p *Placement) nodesFor(term corev1.NodeSelectorTerm) []*corev1.Node {
	i := slices.IndexFunc(term.MatchExpressions, func(r corev1.NodeSelectorRequirement) bool {
		return r.Operator == corev1.NodeSelectorOpIn
	})
	if i < 0 {
		return p.fits
	}
	r := term.MatchExpressions[i]
	idx, ok := p.byLabel[r.Key]
	if !ok {
		idx = map[string][]*corev1.Node{}
		for _, n := range p.fits {
			if v, has := n.Labels[r.Key]; has {
				idx[v] = append(idx[v], n)
			}
		}
		p.byLabel[r.Key] = idx
	}
	if len(r.Values) == 1 {
		return idx[r.Values[0]]
	}
	var out []*corev1.Node
	for _, v := range r.Values {
		out = append(out, idx[v]...)
	}
	return out
}
