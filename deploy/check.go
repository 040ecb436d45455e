package deploy

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Options tunes Check.
type Options struct {
	// KnownEnv lists the TURNPIKE_* variables that the binaries read. When
	// set, a ConfigMap or Secret key or a container variable named
	// TURNPIKE_* but not listed is an error: a misspelt setting would
	// otherwise be ignored silently. Default: not checked.
	KnownEnv []string
}

// Check reports every inconsistency among objs, which must be everything
// that is applied together (one kustomize build): references that point
// nowhere, selectors that select nothing, ports that do not match, missing
// probes, resources or security settings, and Turnpike's own invariants
// (see checkTurnpike). The error joins one error per problem.
func Check(objs []Object, opts Options) error {
	m := newModel(objs)
	var errs []error
	report := func(o Object, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%v: %s", o, fmt.Sprintf(format, args...)))
	}
	m.checkNamespaces(report)
	m.checkWorkloads(report)
	m.checkServices(report)
	m.checkIngresses(report)
	m.checkDisruptionBudgets(report)
	m.checkAutoscalers(report)
	m.checkNetworkPolicies(report)
	if opts.KnownEnv != nil {
		m.checkKnownEnv(opts.KnownEnv, report)
	}
	m.checkTurnpike(report)
	return errors.Join(errs...)
}

// reporter records one problem of an object.
type reporter func(o Object, format string, args ...any)

// pod is the pod template of a workload, or a pod that an operator creates
// (spec nil) as far as selectors and ports go.
type pod struct {
	owner  Object
	ns     string
	labels labels.Set
	spec   *corev1.PodSpec
	ports  []corev1.ContainerPort
}

// model indexes one build's objects.
type model struct {
	objs []Object
	pods []pod
}

func newModel(objs []Object) *model {
	m := &model{objs: objs}
	for _, o := range objs {
		var tmpl *corev1.PodTemplateSpec
		switch v := o.Value.(type) {
		case *appsv1.Deployment:
			tmpl = &v.Spec.Template
		case *appsv1.StatefulSet:
			tmpl = &v.Spec.Template
		case *batchv1.Job:
			tmpl = &v.Spec.Template
		default:
			continue
		}
		p := pod{owner: o, ns: o.Value.GetNamespace(), labels: labels.Set(tmpl.Labels), spec: &tmpl.Spec}
		for _, c := range tmpl.Spec.Containers {
			p.ports = append(p.ports, c.Ports...)
		}
		m.pods = append(m.pods, p)
	}
	m.pods = append(m.pods, strimziPods(objs)...)
	return m
}

// strimziPods returns the pods that the Strimzi operator creates for each
// Kafka and its node pools, with the labels and ports Strimzi gives them
// (Strimzi's documentation, "Labels and annotations"; container ports are
// tcp-ctrlplane 9090, tcp-replication 9091 and tcp-<listener> per listener).
func strimziPods(objs []Object) []pod {
	var pods []pod
	for _, ko := range objs {
		k, ok := ko.Value.(*Kafka)
		if !ok {
			continue
		}
		for _, po := range objs {
			np, ok := po.Value.(*KafkaNodePool)
			if !ok || np.Namespace != k.Namespace || np.Labels["strimzi.io/cluster"] != k.Name {
				continue
			}
			p := pod{owner: po, ns: k.Namespace, labels: labels.Set{
				"strimzi.io/cluster":         k.Name,
				"strimzi.io/kind":            "Kafka",
				"strimzi.io/name":            k.Name + "-kafka",
				"strimzi.io/pool-name":       np.Name,
				"strimzi.io/broker-role":     strconv.FormatBool(np.HasRole("broker")),
				"strimzi.io/controller-role": strconv.FormatBool(np.HasRole("controller")),
			}}
			if np.HasRole("controller") {
				p.ports = append(p.ports, corev1.ContainerPort{Name: "tcp-ctrlplane", ContainerPort: 9090})
			}
			if np.HasRole("broker") {
				p.ports = append(p.ports, corev1.ContainerPort{Name: "tcp-replication", ContainerPort: 9091})
				for _, l := range k.Spec.Kafka.Listeners {
					p.ports = append(p.ports, corev1.ContainerPort{Name: "tcp-" + l.Name, ContainerPort: l.Port})
				}
			}
			pods = append(pods, p)
		}
		if k.Spec.EntityOperator != nil {
			pods = append(pods, pod{owner: ko, ns: k.Namespace, labels: labels.Set{
				"strimzi.io/cluster": k.Name,
				"strimzi.io/kind":    "Kafka",
				"strimzi.io/name":    k.Name + "-entity-operator",
			}})
		}
	}
	return pods
}

// find returns the object of kind and name in namespace ns.
func (m *model) find(kind, ns, name string) (Object, bool) {
	for _, o := range m.objs {
		if o.GVK.Kind == kind && o.Value.GetNamespace() == ns && o.Value.GetName() == name {
			return o, true
		}
	}
	return Object{}, false
}

// podsMatching returns the pods of namespace ns that sel selects.
func (m *model) podsMatching(ns string, sel labels.Selector) []pod {
	var out []pod
	for _, p := range m.pods {
		if p.ns == ns && sel.Matches(p.labels) {
			out = append(out, p)
		}
	}
	return out
}

// selector converts a label selector; nil selects nothing.
func selector(s *metav1.LabelSelector) (labels.Selector, error) {
	return metav1.LabelSelectorAsSelector(s)
}

// configMapKeys returns the keys of ConfigMap name, and whether it exists.
func (m *model) configMapKeys(ns, name string) (map[string]string, bool) {
	o, ok := m.find("ConfigMap", ns, name)
	if !ok {
		return nil, false
	}
	cm := o.Value.(*corev1.ConfigMap)
	keys := maps.Clone(cm.Data)
	if keys == nil {
		keys = map[string]string{}
	}
	for k := range cm.BinaryData {
		keys[k] = ""
	}
	return keys, true
}

// secretKeys returns the keys of Secret name, with their values where the
// manifests hold them (not for a Secret an ExternalSecret makes), and
// whether the Secret exists.
func (m *model) secretKeys(ns, name string) (keys map[string]string, literal, ok bool) {
	if o, ok := m.find("Secret", ns, name); ok {
		s := o.Value.(*corev1.Secret)
		keys = map[string]string{}
		for k, v := range s.Data {
			keys[k] = string(v)
		}
		for k, v := range s.StringData {
			keys[k] = v
		}
		return keys, true, true
	}
	for _, es := range Of[*ExternalSecret](m.objs) {
		if es.Namespace == ns && es.SecretName() == name {
			keys = map[string]string{}
			for _, d := range es.Spec.Data {
				keys[d.SecretKey] = ""
			}
			return keys, false, true
		}
	}
	return nil, false, false
}

func (m *model) checkNamespaces(report reporter) {
	nss := Of[*corev1.Namespace](m.objs)
	if len(nss) != 1 {
		if len(m.objs) > 0 {
			report(m.objs[0], "the build must hold exactly one Namespace, has %d", len(nss))
		}
		return
	}
	for _, o := range m.objs {
		if o.GVK.Kind != "Namespace" && o.Value.GetNamespace() != nss[0].Name {
			report(o, "namespace %q, want the build's Namespace %q", o.Value.GetNamespace(), nss[0].Name)
		}
	}
}

// checkWorkloads checks every pod template: selectors, references,
// probes, resources, security, scheduling.
func (m *model) checkWorkloads(report reporter) {
	for _, p := range m.pods {
		if p.spec == nil {
			continue
		}
		o := p.owner
		var sel *metav1.LabelSelector
		long := false // serves, as opposed to runs to completion
		switch v := o.Value.(type) {
		case *appsv1.Deployment:
			sel, long = v.Spec.Selector, true
		case *appsv1.StatefulSet:
			sel, long = v.Spec.Selector, true
			m.checkStatefulSet(o, v, report)
		}
		if sel != nil {
			s, err := selector(sel)
			switch {
			case err != nil:
				report(o, "selector: %v", err)
			case s.Empty():
				report(o, "empty selector")
			case !s.Matches(p.labels):
				report(o, "selector %v does not match its pod template's labels %v", s, p.labels)
			}
		}
		m.checkPodSpec(p, long, report)
	}
}

func (m *model) checkStatefulSet(o Object, s *appsv1.StatefulSet, report reporter) {
	so, ok := m.find("Service", o.Value.GetNamespace(), s.Spec.ServiceName)
	if !ok {
		report(o, "serviceName %q: no such Service", s.Spec.ServiceName)
		return
	}
	svc := so.Value.(*corev1.Service)
	if svc.Spec.ClusterIP != corev1.ClusterIPNone {
		report(o, "serviceName %q: the Service must be headless (clusterIP: None)", s.Spec.ServiceName)
	}
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(s.Spec.Template.Labels)) || len(svc.Spec.Selector) == 0 {
		report(o, "serviceName %q: the Service does not select its pods", s.Spec.ServiceName)
	}
}

func (m *model) checkPodSpec(p pod, long bool, report reporter) {
	o, spec := p.owner, p.spec
	ns := p.ns
	if spec.ServiceAccountName != "" && spec.ServiceAccountName != "default" {
		if _, ok := m.find("ServiceAccount", ns, spec.ServiceAccountName); !ok {
			report(o, "serviceAccountName %q: no such ServiceAccount", spec.ServiceAccountName)
		}
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		report(o, "automountServiceAccountToken must be false: Turnpike's pods never call the API")
	}
	psc := spec.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	volumes := map[string]bool{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = true
		m.checkVolume(o, ns, v, report)
	}
	if s, ok := o.Value.(*appsv1.StatefulSet); ok {
		for _, t := range s.Spec.VolumeClaimTemplates {
			volumes[t.Name] = true
		}
	}
	all := append(slices.Clone(spec.InitContainers), spec.Containers...)
	for i, c := range all {
		init := i < len(spec.InitContainers)
		m.checkContainer(o, ns, psc, c, volumes, report)
		if long && !init {
			checkProbes(o, c, report)
		}
	}
	if long {
		if spec.TerminationGracePeriodSeconds == nil {
			report(o, "terminationGracePeriodSeconds must be set to fit the drain")
		}
		checkAntiAffinity(o, spec, p.labels, report)
		if len(m.budgetsFor(p)) == 0 {
			report(o, "no PodDisruptionBudget selects its pods")
		}
	}
	if a := podAnnotations(o); a["prometheus.io/scrape"] == "true" {
		n, err := strconv.Atoi(a["prometheus.io/port"])
		if err != nil || !slices.ContainsFunc(p.ports, func(cp corev1.ContainerPort) bool { return int(cp.ContainerPort) == n }) {
			report(o, "prometheus.io/port %q is not a container port", a["prometheus.io/port"])
		}
	}
}

// podAnnotations returns the annotations of a workload's pod template.
func podAnnotations(o Object) map[string]string {
	switch v := o.Value.(type) {
	case *appsv1.Deployment:
		return v.Spec.Template.Annotations
	case *appsv1.StatefulSet:
		return v.Spec.Template.Annotations
	case *batchv1.Job:
		return v.Spec.Template.Annotations
	}
	return nil
}

func (m *model) checkVolume(o Object, ns string, v corev1.Volume, report reporter) {
	switch {
	case v.Secret != nil:
		keys, _, ok := m.secretKeys(ns, v.Secret.SecretName)
		if !ok {
			if v.Secret.Optional == nil || !*v.Secret.Optional {
				report(o, "volume %s: no Secret %q", v.Name, v.Secret.SecretName)
			}
			return
		}
		for _, it := range v.Secret.Items {
			if _, ok := keys[it.Key]; !ok {
				report(o, "volume %s: Secret %q has no key %q", v.Name, v.Secret.SecretName, it.Key)
			}
		}
	case v.ConfigMap != nil:
		keys, ok := m.configMapKeys(ns, v.ConfigMap.Name)
		if !ok {
			if v.ConfigMap.Optional == nil || !*v.ConfigMap.Optional {
				report(o, "volume %s: no ConfigMap %q", v.Name, v.ConfigMap.Name)
			}
			return
		}
		for _, it := range v.ConfigMap.Items {
			if _, ok := keys[it.Key]; !ok {
				report(o, "volume %s: ConfigMap %q has no key %q", v.Name, v.ConfigMap.Name, it.Key)
			}
		}
	}
}

// checkContainer checks one container's references, resources and
// security settings (the "restricted" Pod Security Standard and more).
func (m *model) checkContainer(o Object, ns string, psc *corev1.PodSecurityContext, c corev1.Container, volumes map[string]bool, report reporter) {
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			continue
		}
		if r := e.ValueFrom.ConfigMapKeyRef; r != nil && (r.Optional == nil || !*r.Optional) {
			keys, ok := m.configMapKeys(ns, r.Name)
			if !ok {
				report(o, "container %s env %s: no ConfigMap %q", c.Name, e.Name, r.Name)
			} else if _, ok := keys[r.Key]; !ok {
				report(o, "container %s env %s: ConfigMap %q has no key %q", c.Name, e.Name, r.Name, r.Key)
			}
		}
		if r := e.ValueFrom.SecretKeyRef; r != nil && (r.Optional == nil || !*r.Optional) {
			keys, _, ok := m.secretKeys(ns, r.Name)
			if !ok {
				report(o, "container %s env %s: no Secret %q", c.Name, e.Name, r.Name)
			} else if _, ok := keys[r.Key]; !ok {
				report(o, "container %s env %s: Secret %q has no key %q", c.Name, e.Name, r.Name, r.Key)
			}
		}
	}
	for _, ef := range c.EnvFrom {
		if r := ef.ConfigMapRef; r != nil && (r.Optional == nil || !*r.Optional) {
			if _, ok := m.configMapKeys(ns, r.Name); !ok {
				report(o, "container %s envFrom: no ConfigMap %q", c.Name, r.Name)
			}
		}
		if r := ef.SecretRef; r != nil && (r.Optional == nil || !*r.Optional) {
			if _, _, ok := m.secretKeys(ns, r.Name); !ok {
				report(o, "container %s envFrom: no Secret %q", c.Name, r.Name)
			}
		}
	}
	for _, vm := range c.VolumeMounts {
		if !volumes[vm.Name] {
			report(o, "container %s mounts volume %q, which the pod does not declare", c.Name, vm.Name)
		}
	}
	if c.Image == "" {
		report(o, "container %s has no image", c.Name)
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := c.Resources.Requests[r]; !ok {
			report(o, "container %s has no %s request", c.Name, r)
		}
		if _, ok := c.Resources.Limits[r]; !ok {
			report(o, "container %s has no %s limit", c.Name, r)
		}
		req, lim := c.Resources.Requests[r], c.Resources.Limits[r]
		if !req.IsZero() && !lim.IsZero() && req.Cmp(lim) > 0 {
			report(o, "container %s: %s request %s exceeds its limit %s", c.Name, r, req.String(), lim.String())
		}
	}
	sc := c.SecurityContext
	if sc == nil {
		sc = &corev1.SecurityContext{}
	}
	isTrue := func(b *bool) bool { return b != nil && *b }
	if !isTrue(sc.RunAsNonRoot) && !isTrue(psc.RunAsNonRoot) {
		report(o, "container %s: runAsNonRoot must be true", c.Name)
	}
	if (sc.RunAsUser != nil && *sc.RunAsUser == 0) || (sc.RunAsUser == nil && psc.RunAsUser != nil && *psc.RunAsUser == 0) {
		report(o, "container %s runs as uid 0", c.Name)
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		report(o, "container %s: allowPrivilegeEscalation must be false", c.Name)
	}
	if !isTrue(sc.ReadOnlyRootFilesystem) {
		report(o, "container %s: readOnlyRootFilesystem must be true", c.Name)
	}
	if isTrue(sc.Privileged) {
		report(o, "container %s is privileged", c.Name)
	}
	if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		report(o, "container %s must drop ALL capabilities", c.Name)
	} else if len(sc.Capabilities.Add) > 0 {
		report(o, "container %s adds capabilities %v", c.Name, sc.Capabilities.Add)
	}
	seccomp := sc.SeccompProfile
	if seccomp == nil {
		seccomp = psc.SeccompProfile
	}
	if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
		report(o, "container %s: seccompProfile must be RuntimeDefault", c.Name)
	}
}

// checkProbes requires readiness and liveness probes whose ports the
// container declares.
func checkProbes(o Object, c corev1.Container, report reporter) {
	probes := []struct {
		name string
		p    *corev1.Probe
	}{{"readinessProbe", c.ReadinessProbe}, {"livenessProbe", c.LivenessProbe}, {"startupProbe", c.StartupProbe}}
	for i, pr := range probes {
		if pr.p == nil {
			if i < 2 {
				report(o, "container %s has no %s", c.Name, pr.name)
			}
			continue
		}
		var port *intstr.IntOrString
		switch h := pr.p.ProbeHandler; {
		case h.HTTPGet != nil:
			port = &h.HTTPGet.Port
		case h.TCPSocket != nil:
			port = &h.TCPSocket.Port
		case h.GRPC != nil:
			port = &intstr.IntOrString{IntVal: h.GRPC.Port}
		case h.Exec != nil:
			continue
		default:
			report(o, "container %s %s has no handler", c.Name, pr.name)
			continue
		}
		if !hasPort(c.Ports, *port) {
			report(o, "container %s %s: port %s is not one of its ports", c.Name, pr.name, port.String())
		}
	}
}

// hasPort reports whether ports has port, by name or number.
func hasPort(ports []corev1.ContainerPort, port intstr.IntOrString) bool {
	return slices.ContainsFunc(ports, func(cp corev1.ContainerPort) bool {
		if port.Type == intstr.String {
			return cp.Name == port.StrVal
		}
		return cp.ContainerPort == port.IntVal
	})
}

// checkAntiAffinity requires a preferred pod anti-affinity by hostname
// whose selector matches the pod's own labels.
func checkAntiAffinity(o Object, spec *corev1.PodSpec, own labels.Set, report reporter) {
	if spec.Affinity != nil && spec.Affinity.PodAntiAffinity != nil {
		for _, t := range spec.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
			s, err := selector(t.PodAffinityTerm.LabelSelector)
			if err == nil && t.PodAffinityTerm.TopologyKey == "kubernetes.io/hostname" && !s.Empty() && s.Matches(own) {
				return
			}
		}
	}
	report(o, "no preferred pod anti-affinity by kubernetes.io/hostname that selects its own pods")
}

// budgetsFor returns the PodDisruptionBudgets selecting p.
func (m *model) budgetsFor(p pod) []Object {
	var out []Object
	for _, o := range m.objs {
		b, ok := o.Value.(*policyv1.PodDisruptionBudget)
		if !ok || b.Namespace != p.ns {
			continue
		}
		if s, err := selector(b.Spec.Selector); err == nil && !s.Empty() && s.Matches(p.labels) {
			out = append(out, o)
		}
	}
	return out
}

func (m *model) checkServices(report reporter) {
	for _, o := range m.objs {
		svc, ok := o.Value.(*corev1.Service)
		if !ok {
			continue
		}
		if len(svc.Spec.Selector) == 0 {
			report(o, "no selector")
			continue
		}
		pods := m.podsMatching(svc.Namespace, labels.SelectorFromSet(svc.Spec.Selector))
		if len(pods) == 0 {
			report(o, "selector %v matches no pod", svc.Spec.Selector)
			continue
		}
		for _, sp := range svc.Spec.Ports {
			target := sp.TargetPort
			if target.Type == intstr.Int && target.IntVal == 0 {
				target = intstr.FromInt32(sp.Port)
			}
			for _, p := range pods {
				if !hasPort(p.ports, target) {
					report(o, "port %s: targetPort %s is not a port of %v", sp.Name, target.String(), p.owner)
				}
			}
		}
	}
}

// checkIngresses reports an Ingress backend that names no Service of the
// build, or a port the Service does not have.
func (m *model) checkIngresses(report reporter) {
	for _, o := range m.objs {
		ing, ok := o.Value.(*networkingv1.Ingress)
		if !ok {
			continue
		}
		var backends []*networkingv1.IngressBackend
		if ing.Spec.DefaultBackend != nil {
			backends = append(backends, ing.Spec.DefaultBackend)
		}
		for _, r := range ing.Spec.Rules {
			if r.HTTP == nil {
				continue
			}
			for i := range r.HTTP.Paths {
				backends = append(backends, &r.HTTP.Paths[i].Backend)
			}
		}
		for _, b := range backends {
			if b.Service == nil {
				report(o, "a backend without a Service")
				continue
			}
			so, found := m.find("Service", ing.Namespace, b.Service.Name)
			if !found {
				report(o, "backend: no Service %q", b.Service.Name)
				continue
			}
			svc := so.Value.(*corev1.Service)
			if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool {
				return (b.Service.Port.Name != "" && p.Name == b.Service.Port.Name) || (b.Service.Port.Name == "" && p.Port == b.Service.Port.Number)
			}) {
				report(o, "backend: Service %q has no port %s", b.Service.Name, cmp.Or(b.Service.Port.Name, strconv.Itoa(int(b.Service.Port.Number))))
			}
		}
	}
}

func (m *model) checkDisruptionBudgets(report reporter) {
	for _, o := range m.objs {
		b, ok := o.Value.(*policyv1.PodDisruptionBudget)
		if !ok {
			continue
		}
		s, err := selector(b.Spec.Selector)
		if err != nil || s.Empty() {
			report(o, "needs a non-empty selector (%v)", err)
			continue
		}
		if len(m.podsMatching(b.Namespace, s)) == 0 {
			report(o, "selector %v matches no pod", s)
		}
		if (b.Spec.MinAvailable == nil) == (b.Spec.MaxUnavailable == nil) {
			report(o, "set exactly one of minAvailable and maxUnavailable")
		}
	}
	for _, p := range m.pods {
		if bs := m.budgetsFor(p); len(bs) > 1 {
			report(p.owner, "selected by %d PodDisruptionBudgets: the eviction API refuses such pods", len(bs))
		}
	}
}

// checkAutoscalers checks HPAs and ScaledObjects: the target exists, has
// one autoscaler only, leaves replicas to it, and requests what the HPA
// measures.
func (m *model) checkAutoscalers(report reporter) {
	owners := map[string][]Object{} // "Kind/ns/name" of the target → autoscalers
	target := func(o Object, kind, name string) *corev1.PodSpec {
		key := kind + "/" + o.Value.GetNamespace() + "/" + name
		owners[key] = append(owners[key], o)
		t, ok := m.find(kind, o.Value.GetNamespace(), name)
		if !ok {
			report(o, "scale target %s %q does not exist", kind, name)
			return nil
		}
		var replicas *int32
		var spec *corev1.PodSpec
		switch v := t.Value.(type) {
		case *appsv1.Deployment:
			replicas, spec = v.Spec.Replicas, &v.Spec.Template.Spec
		case *appsv1.StatefulSet:
			replicas, spec = v.Spec.Replicas, &v.Spec.Template.Spec
		default:
			report(o, "scale target %s %q is not a Deployment or StatefulSet", kind, name)
			return nil
		}
		if replicas != nil {
			report(o, "scale target %s %q sets spec.replicas: every apply would fight the autoscaler", kind, name)
		}
		return spec
	}
	for _, o := range m.objs {
		switch v := o.Value.(type) {
		case *autoscalingv2.HorizontalPodAutoscaler:
			r := v.Spec.ScaleTargetRef
			if r.APIVersion != "apps/v1" {
				report(o, "scaleTargetRef.apiVersion %q, want apps/v1", r.APIVersion)
			}
			spec := target(o, r.Kind, r.Name)
			lo := int32(1)
			if v.Spec.MinReplicas != nil {
				lo = *v.Spec.MinReplicas
			}
			if lo < 1 || lo > v.Spec.MaxReplicas {
				report(o, "minReplicas %d, maxReplicas %d: want 1 <= min <= max", lo, v.Spec.MaxReplicas)
			}
			if len(v.Spec.Metrics) == 0 {
				report(o, "no metrics")
			}
			for _, mt := range v.Spec.Metrics {
				if mt.Type != autoscalingv2.ResourceMetricSourceType || mt.Resource == nil || spec == nil {
					continue
				}
				if mt.Resource.Target.Type != autoscalingv2.UtilizationMetricType {
					continue
				}
				for _, c := range spec.Containers {
					if _, ok := c.Resources.Requests[mt.Resource.Name]; !ok {
						report(o, "%s utilization needs a %s request on container %s", mt.Resource.Name, mt.Resource.Name, c.Name)
					}
				}
			}
		case *ScaledObject:
			kind, name := v.Target()
			if a := v.Spec.ScaleTargetRef.APIVersion; a != "" && a != "apps/v1" {
				report(o, "scaleTargetRef.apiVersion %q, want apps/v1", a)
			}
			target(o, kind, name)
			lo, hi := int32(0), int32(100) // KEDA's defaults
			if v.Spec.MinReplicaCount != nil {
				lo = *v.Spec.MinReplicaCount
			}
			if v.Spec.MaxReplicaCount != nil {
				hi = *v.Spec.MaxReplicaCount
			}
			if lo < 0 || hi < 1 || lo > hi {
				report(o, "minReplicaCount %d, maxReplicaCount %d: want 0 <= min <= max, max >= 1", lo, hi)
			}
			if f := v.Spec.Fallback; f != nil && (f.Replicas < lo || f.Replicas > hi || f.FailureThreshold < 1) {
				report(o, "fallback %d replicas after %d failures: want min <= replicas <= max, failures >= 1", f.Replicas, f.FailureThreshold)
			}
		}
	}
	for _, key := range slices.Sorted(maps.Keys(owners)) {
		if as := owners[key]; len(as) > 1 {
			report(as[1], "%s has %d autoscalers: they would fight", key, len(as))
		}
	}
}

// checkNetworkPolicies requires that every policy and every in-namespace
// peer selects some pod, and that named or numbered ports exist on the
// pods they apply to.
func (m *model) checkNetworkPolicies(report reporter) {
	for _, o := range m.objs {
		np, ok := o.Value.(*networkingv1.NetworkPolicy)
		if !ok {
			continue
		}
		ns := np.Namespace
		s, err := selector(&np.Spec.PodSelector)
		if err != nil {
			report(o, "podSelector: %v", err)
			continue
		}
		selected := m.podsMatching(ns, s)
		if len(selected) == 0 {
			report(o, "podSelector %v matches no pod", s)
		}
		if len(np.Spec.PolicyTypes) == 0 {
			report(o, "policyTypes must be explicit")
		}
		for i, r := range np.Spec.Ingress {
			m.checkPeers(o, fmt.Sprintf("ingress[%d]", i), ns, r.From, report)
			checkPolicyPorts(o, fmt.Sprintf("ingress[%d]", i), r.Ports, selected, report)
		}
		for i, r := range np.Spec.Egress {
			peers := m.checkPeers(o, fmt.Sprintf("egress[%d]", i), ns, r.To, report)
			if len(peers) > 0 {
				checkPolicyPorts(o, fmt.Sprintf("egress[%d]", i), r.Ports, peers, report)
			}
		}
	}
	for _, o := range m.objs {
		if k, ok := o.Value.(*Kafka); ok {
			for _, l := range k.Spec.Kafka.Listeners {
				m.checkPeers(o, "listener "+l.Name+" networkPolicyPeers", k.Namespace, l.NetworkPolicyPeers, report)
			}
		}
	}
}

// checkPeers checks the in-namespace pod selectors among peers and returns
// the pods they select (none when every peer is elsewhere).
func (m *model) checkPeers(o Object, where, ns string, peers []networkingv1.NetworkPolicyPeer, report reporter) []pod {
	var out []pod
	for j, peer := range peers {
		if peer.PodSelector == nil || peer.NamespaceSelector != nil || peer.IPBlock != nil {
			continue
		}
		s, err := selector(peer.PodSelector)
		if err != nil {
			report(o, "%s peer %d: %v", where, j, err)
			continue
		}
		ps := m.podsMatching(ns, s)
		if len(ps) == 0 {
			report(o, "%s peer %d: podSelector %v matches no pod", where, j, s)
		}
		out = append(out, ps...)
	}
	return out
}

// checkPolicyPorts requires each port of a rule on every pod it applies to.
func checkPolicyPorts(o Object, where string, ports []networkingv1.NetworkPolicyPort, pods []pod, report reporter) {
	for _, pp := range ports {
		if pp.Port == nil || pp.EndPort != nil {
			continue
		}
		for _, p := range pods {
			if !hasPort(p.ports, *pp.Port) {
				report(o, "%s: port %s is not a port of %v", where, pp.Port.String(), p.owner)
			}
		}
	}
}

// checkKnownEnv rejects TURNPIKE_* names that no binary reads.
func (m *model) checkKnownEnv(known []string, report reporter) {
	check := func(o Object, where, name string) {
		if strings.HasPrefix(name, "TURNPIKE_") && !slices.Contains(known, name) {
			report(o, "%s: %s is not a setting any Turnpike binary reads", where, name)
		}
	}
	for _, o := range m.objs {
		switch v := o.Value.(type) {
		case *corev1.ConfigMap:
			for k := range v.Data {
				check(o, "key", k)
			}
		case *corev1.Secret:
			for k := range v.Data {
				check(o, "key", k)
			}
			for k := range v.StringData {
				check(o, "key", k)
			}
		case *ExternalSecret:
			for _, d := range v.Spec.Data {
				check(o, "secretKey", d.SecretKey)
			}
		}
	}
	for _, p := range m.pods {
		if p.spec == nil {
			continue
		}
		for _, c := range append(slices.Clone(p.spec.InitContainers), p.spec.Containers...) {
			for _, e := range c.Env {
				check(p.owner, "container "+c.Name+" env", e.Name)
			}
		}
	}
}
