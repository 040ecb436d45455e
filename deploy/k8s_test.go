package deploy

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The kustomizations: the base and each overlay.
const (
	baseDir = "k8s/base"
	devDir  = "k8s/overlays/dev"
	prodDir = "k8s/overlays/prod"
)

// repoRoot is the root module's directory, seen from this package's.
const repoRoot = ".."

// knownEnv returns every TURNPIKE_* name that the root module's non-test
// code mentions as a string literal: the settings the binaries read.
var knownEnv = sync.OnceValues(func() ([]string, error) {
	re := regexp.MustCompile(`"(TURNPIKE_[A-Z0-9_]+)"`)
	seen := map[string]bool{}
	err := filepath.WalkDir(repoRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "deploy", "third_party", ".git", "data", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range re.FindAllSubmatch(src, -1) {
			seen[string(m[1])] = true
		}
		return nil
	})
	return slices.Sorted(func(yield func(string) bool) {
		for k := range seen {
			if !yield(k) {
				return
			}
		}
	}), err
})

func checkOptions(t *testing.T) Options {
	t.Helper()
	env, err := knownEnv()
	if err != nil {
		t.Fatalf("read the settings the binaries know: %v", err)
	}
	for _, name := range []string{"TURNPIKE_KAFKA_BROKERS", "TURNPIKE_DRAIN_TIMEOUT", "TURNPIKE_MAX_INFLIGHT"} {
		if !slices.Contains(env, name) {
			t.Fatalf("the source scan missed %s: %v", name, env)
		}
	}
	return Options{KnownEnv: env}
}

// builds caches each kustomize build's output; every test decodes its own
// objects from it, so tests can change them freely.
var builds sync.Map // dir → []byte

func buildYAML(t *testing.T, dir string) []byte {
	t.Helper()
	if y, ok := builds.Load(dir); ok {
		return y.([]byte)
	}
	y, err := BuildYAML(dir)
	if err != nil {
		t.Fatal(err)
	}
	builds.Store(dir, y)
	return y
}

func build(t *testing.T, dir string) []Object {
	t.Helper()
	objs, err := Decode(dir, buildYAML(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// get returns the object of type T named name.
func get[T metav1.Object](t *testing.T, objs []Object, name string) T {
	t.Helper()
	for _, v := range Of[T](objs) {
		if v.GetName() == name {
			return v
		}
	}
	var zero T
	t.Fatalf("no %T %q in the build", zero, name)
	return zero
}

func TestEveryManifestFileDecodesStrictly(t *testing.T) {
	t.Parallel()
	objs, err := DecodeTree("k8s")
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GVK.Kind]++
	}
	want := map[string]int{
		"Deployment": 3, "Service": 4, "PodDisruptionBudget": 4, "HorizontalPodAutoscaler": 2, "ScaledObject": 1,
		"ConfigMap": 1, "Secret": 2, "Job": 2, "StatefulSet": 1, "Kafka": 1, "KafkaNodePool": 1, "KafkaTopic": 4,
		"ExternalSecret": 2, "Namespace": 1, "ServiceAccount": 1, "Ingress": 2,
	}
	for k, n := range want {
		if kinds[k] != n {
			t.Errorf("%d %s resources, want %d", kinds[k], k, n)
		}
	}
	if kinds["NetworkPolicy"] < 5 {
		t.Errorf("%d NetworkPolicies: want default deny and the allowances", kinds["NetworkPolicy"])
	}
}

func TestEachBuildPassesTheChecks(t *testing.T) {
	t.Parallel()
	for _, dir := range []string{baseDir, devDir, prodDir} {
		t.Run(dir, func(t *testing.T) {
			t.Parallel()
			if err := Check(build(t, dir), checkOptions(t)); err != nil {
				t.Errorf("kustomize build %s:\n%v", dir, err)
			}
		})
	}
}

// TestBuildIsSafeForConcurrentUse runs every build twice at once. Under
// -race it fails if BuildYAML lets kustomize's unlocked schema loading run
// in two goroutines (CI failed on that, from the parallel tests above).
func TestBuildIsSafeForConcurrentUse(t *testing.T) {
	t.Parallel()
	dirs := []string{baseDir, devDir, prodDir, baseDir, devDir, prodDir}
	out := make([][]byte, len(dirs))
	errs := make([]error, len(dirs))
	var wg sync.WaitGroup
	for i, dir := range dirs {
		wg.Go(func() { out[i], errs[i] = BuildYAML(dir) })
	}
	wg.Wait()
	for i := range dirs {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if j := i % 3; !bytes.Equal(out[i], out[j]) {
			t.Errorf("two concurrent builds of %s differ", dirs[i])
		}
	}
}

// image returns the image of the Turnpike containers.
func images(objs []Object) []string {
	var out []string
	for _, p := range newModel(objs).pods {
		if p.spec == nil {
			continue
		}
		for _, c := range append(slices.Clone(p.spec.InitContainers), p.spec.Containers...) {
			out = append(out, c.Image)
		}
	}
	return out
}

func TestTheBaseShipsOnlyPlaceholderSecrets(t *testing.T) {
	t.Parallel()
	objs := build(t, baseDir)
	secrets := Of[*corev1.Secret](objs)
	if len(secrets) != 2 {
		t.Fatalf("%d Secrets, want turnpike and mongodb", len(secrets))
	}
	for _, s := range secrets {
		for k, v := range s.StringData {
			if k == "MONGO_INITDB_ROOT_USERNAME" || k == "MONGO_APP_USERNAME" {
				continue
			}
			if !strings.Contains(v, "CHANGE-ME") {
				t.Errorf("Secret %s key %s is not a CHANGE-ME placeholder", s.Name, k)
			}
		}
	}
	// The placeholder auth secret must be refused by the services (< 32 bytes).
	if v := get[*corev1.Secret](t, objs, "turnpike").StringData["TURNPIKE_AUTH_SECRET"]; len(v) >= 32 {
		t.Errorf("the placeholder auth secret %q is long enough to be accepted", v)
	}
	// The base's worker may scale to exactly the partition ceiling.
	so := get[*ScaledObject](t, objs, "worker")
	if p := get[*corev1.ConfigMap](t, objs, "turnpike").Data["TURNPIKE_PARTITIONS"]; so.Spec.MaxReplicaCount == nil || p != "12" || *so.Spec.MaxReplicaCount != 12 {
		t.Errorf("worker maxReplicaCount %v, TURNPIKE_PARTITIONS %s: want both 12", so.Spec.MaxReplicaCount, p)
	}
}

func TestTheDevOverlayRunsOneOfEverything(t *testing.T) {
	t.Parallel()
	objs := build(t, devDir)
	if ns := Of[*corev1.Namespace](objs); len(ns) != 1 || ns[0].Name != "turnpike-dev" {
		t.Errorf("namespace %v, want turnpike-dev", ns)
	}
	for _, h := range Of[*autoscalingv2.HorizontalPodAutoscaler](objs) {
		if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas != 1 || h.Spec.MaxReplicas != 1 {
			t.Errorf("HPA %s: %v..%d replicas, want 1", h.Name, h.Spec.MinReplicas, h.Spec.MaxReplicas)
		}
	}
	if so := get[*ScaledObject](t, objs, "worker"); *so.Spec.MinReplicaCount != 1 || *so.Spec.MaxReplicaCount != 1 {
		t.Errorf("worker ScaledObject %d..%d, want 1", *so.Spec.MinReplicaCount, *so.Spec.MaxReplicaCount)
	}
	if np := get[*KafkaNodePool](t, objs, "dual-role"); np.Spec.Replicas != 1 {
		t.Errorf("%d Kafka nodes, want 1", np.Spec.Replicas)
	}
	if s := get[*appsv1.StatefulSet](t, objs, "mongodb"); *s.Spec.Replicas != 1 {
		t.Errorf("%d MongoDB members, want 1", *s.Spec.Replicas)
	}
	// Working credentials, so that apply -k is all a developer does.
	for _, s := range Of[*corev1.Secret](objs) {
		for k, v := range s.Data {
			if strings.Contains(string(v), "CHANGE-ME") {
				t.Errorf("Secret %s key %s is still a placeholder", s.Name, k)
			}
		}
	}
	for _, img := range images(objs) {
		if strings.HasPrefix(img, "ghcr.io/turnpike-dev/turnpike") && img != "ghcr.io/turnpike-dev/turnpike:dev" {
			t.Errorf("image %s, want the dev tag", img)
		}
	}
	base := get[*appsv1.Deployment](t, build(t, baseDir), "worker").Spec.Template.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory]
	if dev := get[*appsv1.Deployment](t, objs, "worker").Spec.Template.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory]; dev.Cmp(base) >= 0 {
		t.Errorf("dev worker memory limit %s, want below the base's %s", dev.String(), base.String())
	}
}

func TestTheProdOverlayPinsScalesAndTakesSecretsFromOutside(t *testing.T) {
	t.Parallel()
	objs := build(t, prodDir)
	if ns := Of[*corev1.Namespace](objs); len(ns) != 1 || ns[0].Name != "turnpike" {
		t.Errorf("namespace %v, want turnpike", ns)
	}
	if s := Of[*corev1.Secret](objs); len(s) != 0 {
		t.Errorf("%d Secrets in the build: prod takes them from the secret manager", len(s))
	}
	var made []string
	for _, es := range Of[*ExternalSecret](objs) {
		made = append(made, es.SecretName())
	}
	if slices.Sort(made); !slices.Equal(made, []string{"mongodb", "turnpike"}) {
		t.Errorf("ExternalSecrets make %v, want mongodb and turnpike", made)
	}
	for _, img := range images(objs) {
		name, tag, ok := strings.Cut(img[strings.LastIndex(img, "/")+1:], ":")
		if !strings.Contains(img, "@sha256:") && (!ok || tag == "" || tag == "latest") {
			t.Errorf("image %s (%s) is not pinned to a tag or digest", img, name)
		}
	}
	for _, h := range Of[*autoscalingv2.HorizontalPodAutoscaler](objs) {
		if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 3 {
			t.Errorf("HPA %s: minReplicas %v, want at least 3", h.Name, h.Spec.MinReplicas)
		}
	}
	so := get[*ScaledObject](t, objs, "worker")
	if *so.Spec.MinReplicaCount < 3 || *so.Spec.MaxReplicaCount != get[*KafkaTopic](t, objs, "turnpike-requests").Spec.Partitions {
		t.Errorf("worker ScaledObject %d..%d: want at least 3, up to the partitions", *so.Spec.MinReplicaCount, *so.Spec.MaxReplicaCount)
	}
	// The stream topic is sized for the push gateway's replicas
	// (docs/pushgw.md "Sizing partitions"), the others for the workers.
	hpa := get[*autoscalingv2.HorizontalPodAutoscaler](t, objs, "pushgw")
	stream := get[*KafkaTopic](t, objs, "turnpike-stream").Spec.Partitions
	if hpa.Spec.MaxReplicas < 8 || stream < 20*hpa.Spec.MaxReplicas || stream != 160 {
		t.Errorf("pushgw maxReplicas %d, stream partitions %d: want 8 or more, and 160 >= 20 x maxReplicas", hpa.Spec.MaxReplicas, stream)
	}
	if p := get[*corev1.ConfigMap](t, objs, "turnpike").Data["TURNPIKE_STREAM_PARTITIONS"]; p != "160" {
		t.Errorf("TURNPIKE_STREAM_PARTITIONS %q, want 160 like the stream topic", p)
	}
	if k := get[*Kafka](t, objs, "turnpike"); k.Spec.Kafka.Version == "" {
		t.Error("the Kafka version is not pinned")
	}
	if np := get[*KafkaNodePool](t, objs, "dual-role"); np.Spec.Replicas != 3 {
		t.Errorf("%d Kafka nodes, want 3", np.Spec.Replicas)
	}
	for _, b := range Of[*policyv1.PodDisruptionBudget](objs) {
		if b.Spec.MaxUnavailable == nil || b.Spec.MaxUnavailable.IntValue() != 1 {
			t.Errorf("PDB %s lets more than one pod go at once", b.Name)
		}
	}
	base := build(t, baseDir)
	for _, name := range []string{"ingest", "worker", "pushgw"} {
		b := get[*appsv1.Deployment](t, base, name).Spec.Template.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]
		p := get[*appsv1.Deployment](t, objs, name).Spec.Template.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]
		if p.Cmp(b) <= 0 {
			t.Errorf("prod %s requests %s CPU, no more than the base's %s", name, p.String(), b.String())
		}
	}
}

// docs/pushgw.md "Routing by shard": in every build the edge sends the push
// gateway's WebSocket and event-stream paths, and only those, to the pushgw
// Service, hashed consistently on the ?shard= hint, with idle timeouts
// longer than the gateway's heartbeats and no response buffering; ingest's
// traffic is not hashed.
func TestTheEdgeRoutesEachPushConnectionByItsShard(t *testing.T) {
	t.Parallel()
	const ann = "nginx.ingress.kubernetes.io/"
	for _, dir := range []string{baseDir, devDir, prodDir} {
		t.Run(dir, func(t *testing.T) {
			t.Parallel()
			objs := build(t, dir)
			push := get[*networkingv1.Ingress](t, objs, "pushgw")
			if got := push.Annotations[ann+"upstream-hash-by"]; got != "$arg_shard" {
				t.Errorf("pushgw Ingress hashes by %q, want $arg_shard", got)
			}
			for _, k := range []string{"proxy-read-timeout", "proxy-send-timeout"} {
				// Longer than the WebSocket ping (25 s) and the event
				// streams' heartbeat (15 s), with room to spare.
				if s, err := strconv.Atoi(push.Annotations[ann+k]); err != nil || s < 300 {
					t.Errorf("pushgw Ingress %s %q, want at least 300 s", k, push.Annotations[ann+k])
				}
			}
			if got := push.Annotations[ann+"proxy-buffering"]; got != "off" {
				t.Errorf("pushgw Ingress proxy-buffering %q, want off", got)
			}
			// Every request path of the gateway reaches pushgw; ingest's do not.
			route := func(path string) (ingress, service string) {
				best := -1
				for _, ing := range Of[*networkingv1.Ingress](objs) {
					for _, p := range ing.Spec.Rules[0].HTTP.Paths {
						var match bool
						switch *p.PathType {
						case networkingv1.PathTypeExact:
							match = path == p.Path
						case networkingv1.PathTypePrefix:
							match = strings.HasPrefix(path, p.Path)
						default:
							match = regexp.MustCompile("^" + p.Path).MatchString(path)
						}
						if match && len(p.Path) > best {
							best, ingress, service = len(p.Path), ing.Name, p.Backend.Service.Name
						}
					}
				}
				return ingress, service
			}
			for path, want := range map[string]string{
				"/v1/stream":                     "pushgw",
				"/v1/conversations/c-1/events":   "pushgw",
				"/v1/conversations/c-1/messages": "ingest",
				"/v1/conversations/c-1/turns":    "ingest",
				"/v1/conversations":              "ingest",
				"/v1/dev/token":                  "ingest",
			} {
				if ing, svc := route(path); svc != want || ing != want {
					t.Errorf("%s goes to Service %q by Ingress %q, want %s", path, svc, ing, want)
				}
			}
			if k := get[*networkingv1.Ingress](t, objs, "ingest").Annotations[ann+"upstream-hash-by"]; k != "" {
				t.Errorf("ingest Ingress hashes by %q: any replica serves any request", k)
			}
		})
	}
}

// container returns the first container of the workload named name.
func container(t *testing.T, objs []Object, name string) *corev1.Container {
	t.Helper()
	for _, o := range objs {
		if o.Value.GetName() != name {
			continue
		}
		switch v := o.Value.(type) {
		case *appsv1.Deployment:
			return &v.Spec.Template.Spec.Containers[0]
		case *appsv1.StatefulSet:
			return &v.Spec.Template.Spec.Containers[0]
		case *batchv1.Job:
			return &v.Spec.Template.Spec.Containers[0]
		}
	}
	t.Fatalf("no workload %q", name)
	return nil
}

// remove returns objs without the object of kind and name.
func remove(objs []Object, kind, name string) []Object {
	return slices.DeleteFunc(objs, func(o Object) bool { return o.GVK.Kind == kind && o.Value.GetName() == name })
}

func TestChecksCatchBrokenManifests(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		break_ func(t *testing.T, objs []Object) []Object
		want   string
	}{
		{"A Service whose selector matches no pod is reported.", func(t *testing.T, objs []Object) []Object {
			get[*corev1.Service](t, objs, "ingest").Spec.Selector["app.kubernetes.io/name"] = "ingets"
			return objs
		}, "Service ingest (k8s/base#N): selector map[app.kubernetes.io/name:ingets app.kubernetes.io/part-of:turnpike] matches no pod"},
		{"A Service targetPort that no container declares is reported.", func(t *testing.T, objs []Object) []Object {
			get[*corev1.Service](t, objs, "pushgw").Spec.Ports[0].TargetPort = intstr.FromString("ws")
			return objs
		}, "port http: targetPort ws is not a port of Deployment pushgw"},
		{"A probe on a port the container does not declare is reported.", func(t *testing.T, objs []Object) []Object {
			container(t, objs, "worker").ReadinessProbe.HTTPGet.Port = intstr.FromInt32(8080)
			return objs
		}, "container worker readinessProbe: port 8080 is not one of its ports"},
		{"A Deployment without a liveness probe is reported.", func(t *testing.T, objs []Object) []Object {
			container(t, objs, "ingest").LivenessProbe = nil
			return objs
		}, "container ingest has no livenessProbe"},
		{"An env reference to a Secret key that does not exist is reported.", func(t *testing.T, objs []Object) []Object {
			container(t, objs, "ingest").Env[0].ValueFrom.SecretKeyRef.Key = "TURNPIKE_AUTH_SECRT"
			return objs
		}, `container ingest env TURNPIKE_AUTH_SECRET: Secret "turnpike" has no key "TURNPIKE_AUTH_SECRT"`},
		{"An envFrom of a ConfigMap that does not exist is reported.", func(t *testing.T, objs []Object) []Object {
			container(t, objs, "topics").EnvFrom[0].ConfigMapRef.Name = "turnpike-config"
			return objs
		}, `container topics envFrom: no ConfigMap "turnpike-config"`},
		{"A Secret volume naming a missing key is reported.", func(t *testing.T, objs []Object) []Object {
			get[*appsv1.StatefulSet](t, objs, "mongodb").Spec.Template.Spec.Volumes[0].Secret.Items[0].Key = "keyFile"
			return objs
		}, `volume secret: Secret "mongodb" has no key "keyFile"`},
		{"A PodDisruptionBudget that selects nothing is reported.", func(t *testing.T, objs []Object) []Object {
			get[*policyv1.PodDisruptionBudget](t, objs, "worker").Spec.Selector.MatchLabels["app.kubernetes.io/name"] = "workers"
			return objs
		}, "PodDisruptionBudget worker (k8s/base#N): selector app.kubernetes.io/name=workers,app.kubernetes.io/part-of=turnpike matches no pod"},
		{"A Deployment that no PodDisruptionBudget covers is reported.", func(t *testing.T, objs []Object) []Object {
			return remove(objs, "PodDisruptionBudget", "pushgw")
		}, "Deployment pushgw (k8s/base#N): no PodDisruptionBudget selects its pods"},
		{"An HPA whose target does not exist is reported.", func(t *testing.T, objs []Object) []Object {
			get[*autoscalingv2.HorizontalPodAutoscaler](t, objs, "pushgw").Spec.ScaleTargetRef.Name = "push-gateway"
			return objs
		}, `scale target Deployment "push-gateway" does not exist`},
		{"A Deployment that sets replicas under an autoscaler is reported.", func(t *testing.T, objs []Object) []Object {
			n := int32(3)
			get[*appsv1.Deployment](t, objs, "ingest").Spec.Replicas = &n
			return objs
		}, `scale target Deployment "ingest" sets spec.replicas`},
		{"Two autoscalers on one Deployment are reported.", func(t *testing.T, objs []Object) []Object {
			get[*autoscalingv2.HorizontalPodAutoscaler](t, objs, "pushgw").Spec.ScaleTargetRef.Name = "worker"
			return objs
		}, "Deployment/turnpike/worker has 2 autoscalers"},
		{"An HPA on CPU over a container without a CPU request is reported.", func(t *testing.T, objs []Object) []Object {
			delete(container(t, objs, "ingest").Resources.Requests, corev1.ResourceCPU)
			return objs
		}, "cpu utilization needs a cpu request on container ingest"},
		{"A ScaledObject reading another consumer group is reported.", func(t *testing.T, objs []Object) []Object {
			get[*ScaledObject](t, objs, "worker").Spec.Triggers[0].Metadata["consumerGroup"] = "workers"
			return objs
		}, `kafka trigger consumerGroup "workers", want "turnpike-worker"`},
		{"A worker allowed to scale past the partitions is reported.", func(t *testing.T, objs []Object) []Object {
			n := int32(24)
			get[*ScaledObject](t, objs, "worker").Spec.MaxReplicaCount = &n
			return objs
		}, "maxReplicaCount must be set and at most the 12 partitions"},
		{"A lag threshold above what a worker may hold is reported.", func(t *testing.T, objs []Object) []Object {
			get[*ScaledObject](t, objs, "worker").Spec.Triggers[0].Metadata["lagThreshold"] = "5000"
			return objs
		}, "lagThreshold 5000 exceeds TURNPIKE_MAX_INFLIGHT 1024"},
		{"A NetworkPolicy that selects no pod is reported.", func(t *testing.T, objs []Object) []Object {
			get[*networkingv1.NetworkPolicy](t, objs, "mongodb").Spec.PodSelector.MatchLabels["app.kubernetes.io/name"] = "mongo"
			return objs
		}, "NetworkPolicy mongodb (k8s/base#N): podSelector app.kubernetes.io/name=mongo,app.kubernetes.io/part-of=turnpike matches no pod"},
		{"A NetworkPolicy egress port the peers do not serve is reported.", func(t *testing.T, objs []Object) []Object {
			p := intstr.FromInt32(9093)
			get[*networkingv1.NetworkPolicy](t, objs, "kafka-clients").Spec.Egress[0].Ports[0].Port = &p
			return objs
		}, "egress[0]: port 9093 is not a port of KafkaNodePool dual-role"},
		{"A NetworkPolicy ingress on a port name the pods lack is reported.", func(t *testing.T, objs []Object) []Object {
			p := intstr.FromString("metrics")
			get[*networkingv1.NetworkPolicy](t, objs, "metrics-scrape").Spec.Ingress[0].Ports[0].Port = &p
			return objs
		}, "ingress[0]: port metrics is not a port of Deployment ingest"},
		{"A Kafka listener peer that selects no pod is reported.", func(t *testing.T, objs []Object) []Object {
			get[*Kafka](t, objs, "turnpike").Spec.Kafka.Listeners[0].NetworkPolicyPeers[0].PodSelector.MatchLabels["turnpike-kafka-client"] = "yes"
			return objs
		}, "listener plain networkPolicyPeers peer 0: podSelector turnpike-kafka-client=yes matches no pod"},
		{"A container that may escalate privileges is reported.", func(t *testing.T, objs []Object) []Object {
			yes := true
			container(t, objs, "pushgw").SecurityContext.AllowPrivilegeEscalation = &yes
			return objs
		}, "container pushgw: allowPrivilegeEscalation must be false"},
		{"A writable root filesystem is reported.", func(t *testing.T, objs []Object) []Object {
			container(t, objs, "mongodb").SecurityContext.ReadOnlyRootFilesystem = nil
			return objs
		}, "container mongod: readOnlyRootFilesystem must be true"},
		{"Capabilities that are not all dropped are reported.", func(t *testing.T, objs []Object) []Object {
			container(t, objs, "worker").SecurityContext.Capabilities.Drop = []corev1.Capability{"NET_RAW"}
			return objs
		}, "container worker must drop ALL capabilities"},
		{"A pod without the RuntimeDefault seccomp profile is reported.", func(t *testing.T, objs []Object) []Object {
			get[*batchv1.Job](t, objs, "topics").Spec.Template.Spec.SecurityContext.SeccompProfile = nil
			return objs
		}, "container topics: seccompProfile must be RuntimeDefault"},
		{"A container without a memory limit is reported.", func(t *testing.T, objs []Object) []Object {
			delete(container(t, objs, "worker").Resources.Limits, corev1.ResourceMemory)
			return objs
		}, "container worker has no memory limit"},
		{"A request above its limit is reported.", func(t *testing.T, objs []Object) []Object {
			container(t, objs, "ingest").Resources.Requests[corev1.ResourceMemory] = resource.MustParse("1Gi")
			return objs
		}, "container ingest: memory request 1Gi exceeds its limit 512Mi"},
		{"A Deployment without anti-affinity is reported.", func(t *testing.T, objs []Object) []Object {
			get[*appsv1.Deployment](t, objs, "pushgw").Spec.Template.Spec.Affinity = nil
			return objs
		}, "no preferred pod anti-affinity by kubernetes.io/hostname"},
		{"Anti-affinity that selects other pods is reported.", func(t *testing.T, objs []Object) []Object {
			a := get[*appsv1.Deployment](t, objs, "ingest").Spec.Template.Spec.Affinity.PodAntiAffinity
			a.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.LabelSelector.MatchLabels["app.kubernetes.io/name"] = "worker"
			return objs
		}, "Deployment ingest (k8s/base#N): no preferred pod anti-affinity by kubernetes.io/hostname that selects its own pods"},
		{"A mounted service-account token is reported.", func(t *testing.T, objs []Object) []Object {
			get[*appsv1.Deployment](t, objs, "worker").Spec.Template.Spec.AutomountServiceAccountToken = nil
			return objs
		}, "automountServiceAccountToken must be false"},
		{"A Prometheus port annotation that is no container port is reported.", func(t *testing.T, objs []Object) []Object {
			get[*appsv1.Deployment](t, objs, "worker").Spec.Template.Annotations["prometheus.io/port"] = "9090"
			return objs
		}, `prometheus.io/port "9090" is not a container port`},
		{"A StatefulSet whose Service is not headless is reported.", func(t *testing.T, objs []Object) []Object {
			get[*corev1.Service](t, objs, "mongodb").Spec.ClusterIP = ""
			return objs
		}, `serviceName "mongodb": the Service must be headless`},
		{"An object outside the build's namespace is reported.", func(t *testing.T, objs []Object) []Object {
			get[*corev1.ConfigMap](t, objs, "turnpike").Namespace = "default"
			return objs
		}, `namespace "default", want the build's Namespace "turnpike"`},
		{"A misspelt TURNPIKE_ setting is reported.", func(t *testing.T, objs []Object) []Object {
			get[*corev1.ConfigMap](t, objs, "turnpike").Data["TURNPIKE_DRAIN_TIMOUT"] = "30s"
			return objs
		}, "key: TURNPIKE_DRAIN_TIMOUT is not a setting any Turnpike binary reads"},
		{"A service that lacks a setting it needs is reported.", func(t *testing.T, objs []Object) []Object {
			c := container(t, objs, "pushgw")
			c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "TURNPIKE_AUTH_SECRET" })
			return objs
		}, "container pushgw (pushgw) lacks TURNPIKE_AUTH_SECRET"},
		{"A container port unlike the service's listen address is reported.", func(t *testing.T, objs []Object) []Object {
			get[*corev1.ConfigMap](t, objs, "turnpike").Data["TURNPIKE_INGEST_ADDR"] = ":9000"
			return objs
		}, "container ingest listens on 9000 (TURNPIKE_INGEST_ADDR) but does not declare that port"},
		{"A second image is reported: one image holds every binary.", func(t *testing.T, objs []Object) []Object {
			container(t, objs, "worker").Image = "ghcr.io/turnpike-dev/worker:latest"
			return objs
		}, "one image holds every binary"},
		{"A topics Job that does not run `turnpike topics` is reported.", func(t *testing.T, objs []Object) []Object {
			container(t, objs, "topics").Command = []string{"/usr/local/bin/turnpike", "send"}
			return objs
		}, "the CLI runs here as `turnpike topics`"},
		{"A KafkaTopic with another partition count than TURNPIKE_PARTITIONS is reported.", func(t *testing.T, objs []Object) []Object {
			get[*KafkaTopic](t, objs, "turnpike-requests").Spec.Partitions = 24
			return objs
		}, "24 partitions, TURNPIKE_PARTITIONS 12"},
		{"A stream KafkaTopic with another partition count than TURNPIKE_STREAM_PARTITIONS is reported.", func(t *testing.T, objs []Object) []Object {
			get[*KafkaTopic](t, objs, "turnpike-stream").Spec.Partitions = 240
			return objs
		}, "KafkaTopic turnpike-stream (k8s/base#N): 240 partitions, TURNPIKE_STREAM_PARTITIONS (else TURNPIKE_PARTITIONS) 120: keep them equal"},
		{"A stream topic below 20 x the push gateway's maxReplicas is reported.", func(t *testing.T, objs []Object) []Object {
			get[*KafkaTopic](t, objs, "turnpike-stream").Spec.Partitions = 119
			get[*corev1.ConfigMap](t, objs, "turnpike").Data["TURNPIKE_STREAM_PARTITIONS"] = "119"
			return objs
		}, "HorizontalPodAutoscaler pushgw (k8s/base#N): maxReplicas 6 of pushgw needs at least 120 stream partitions (20 x maxReplicas), have 119"},
		{"Without TURNPIKE_STREAM_PARTITIONS the stream topic is held to TURNPIKE_PARTITIONS.", func(t *testing.T, objs []Object) []Object {
			delete(get[*corev1.ConfigMap](t, objs, "turnpike").Data, "TURNPIKE_STREAM_PARTITIONS")
			return objs
		}, "120 partitions, TURNPIKE_STREAM_PARTITIONS (else TURNPIKE_PARTITIONS) 12: keep them equal"},
		{"Services that would create the stream topic with different counts are reported.", func(t *testing.T, objs []Object) []Object {
			c := container(t, objs, "pushgw")
			c.Env = append(c.Env, corev1.EnvVar{Name: "TURNPIKE_STREAM_PARTITIONS", Value: "240"})
			return objs
		}, "the stream topic's partitions (TURNPIKE_STREAM_PARTITIONS, else TURNPIKE_PARTITIONS) 240 differ from worker's 120"},
		{"A missing KafkaTopic is reported.", func(t *testing.T, objs []Object) []Object {
			return remove(objs, "KafkaTopic", "turnpike-control")
		}, "want one KafkaTopic for topic turnpike.control, have 0"},
		{"A KafkaTopic of another cluster is reported.", func(t *testing.T, objs []Object) []Object {
			get[*KafkaTopic](t, objs, "turnpike-requests").Labels["strimzi.io/cluster"] = "kafka"
			return objs
		}, `label strimzi.io/cluster "kafka", want "turnpike"`},
		{"Topics under another prefix than the services' are reported.", func(t *testing.T, objs []Object) []Object {
			get[*corev1.ConfigMap](t, objs, "turnpike").Data["TURNPIKE_TOPIC_PREFIX"] = "tp."
			return objs
		}, "want one KafkaTopic for topic tp.requests, have 0"},
		{"min.insync.replicas equal to the replicas is reported.", func(t *testing.T, objs []Object) []Object {
			get[*KafkaTopic](t, objs, "turnpike-requests").Spec.Config["min.insync.replicas"] = int64(3)
			return objs
		}, "min.insync.replicas 3 with 3 replicas"},
		{"More topic replicas than brokers are reported.", func(t *testing.T, objs []Object) []Object {
			get[*KafkaNodePool](t, objs, "dual-role").Spec.Replicas = 1
			return objs
		}, "replicas 3 exceed the 1 brokers"},
		{"An even number of KRaft controllers is reported.", func(t *testing.T, objs []Object) []Object {
			get[*KafkaNodePool](t, objs, "dual-role").Spec.Replicas = 4
			return objs
		}, "4 brokers and 4 controllers"},
		{"Brokers that are not the Kafka bootstrap address are reported.", func(t *testing.T, objs []Object) []Object {
			get[*corev1.ConfigMap](t, objs, "turnpike").Data["TURNPIKE_KAFKA_BROKERS"] = "kafka:9092"
			return objs
		}, `TURNPIKE_KAFKA_BROKERS names "kafka:9092", not the bootstrap address`},
		{"A worker grace period shorter than its drain is reported.", func(t *testing.T, objs []Object) []Object {
			get[*corev1.ConfigMap](t, objs, "turnpike").Data["TURNPIKE_DRAIN_TIMEOUT"] = "2m"
			return objs
		}, "terminationGracePeriodSeconds 60: the worker needs 2m10s to stop"},
		{"A push gateway without a preStop pause is reported.", func(t *testing.T, objs []Object) []Object {
			container(t, objs, "pushgw").Lifecycle = nil
			return objs
		}, "container pushgw needs a preStop pause"},
		{"A push gateway grace period too short to close its clients is reported.", func(t *testing.T, objs []Object) []Object {
			g := int64(15)
			get[*appsv1.Deployment](t, objs, "pushgw").Spec.Template.Spec.TerminationGracePeriodSeconds = &g
			return objs
		}, "terminationGracePeriodSeconds 15: the pushgw needs 16s to stop"},
		{"A Mongo URI missing a member is reported.", func(t *testing.T, objs []Object) []Object {
			s := get[*corev1.Secret](t, objs, "turnpike")
			s.StringData["TURNPIKE_MONGO_URI"] = "mongodb://turnpike:CHANGE-ME@mongodb-0.mongodb:27017,mongodb-1.mongodb:27017/?replicaSet=rs0&authSource=admin"
			return objs
		}, "TURNPIKE_MONGO_URI lists hosts [mongodb-0.mongodb:27017 mongodb-1.mongodb:27017], want every member"},
		{"A Mongo URI naming another replica set is reported.", func(t *testing.T, objs []Object) []Object {
			s := get[*corev1.Secret](t, objs, "turnpike")
			s.StringData["TURNPIKE_MONGO_URI"] = strings.Replace(s.StringData["TURNPIKE_MONGO_URI"], "rs0", "rs1", 1)
			return objs
		}, `TURNPIKE_MONGO_URI replicaSet "rs1", want "rs0"`},
		{"A Mongo URI with another password than the init Job's is reported.", func(t *testing.T, objs []Object) []Object {
			get[*corev1.Secret](t, objs, "mongodb").StringData["MONGO_APP_PASSWORD"] = "CHANGE-ME-TOO"
			return objs
		}, "TURNPIKE_MONGO_URI's password is not the init Job's MONGO_APP_PASSWORD"},
		{"MONGODB_MEMBERS unequal to the StatefulSet's replicas is reported.", func(t *testing.T, objs []Object) []Object {
			n := int32(5)
			get[*appsv1.StatefulSet](t, objs, "mongodb").Spec.Replicas = &n
			return objs
		}, `MONGODB_MEMBERS "3", but StatefulSet mongodb has 5 replicas`},
		{"An auth secret shorter than 32 bytes is reported.", func(t *testing.T, objs []Object) []Object {
			get[*corev1.Secret](t, objs, "turnpike").StringData["TURNPIKE_AUTH_SECRET"] = "short-secret"
			return objs
		}, "TURNPIKE_AUTH_SECRET is shorter than 32 bytes"},
		{"An Ingress backend on a port its Service lacks is reported.", func(t *testing.T, objs []Object) []Object {
			get[*networkingv1.Ingress](t, objs, "pushgw").Spec.Rules[0].HTTP.Paths[1].Backend.Service.Port.Name = "ws"
			return objs
		}, `backend: Service "pushgw" has no port ws`},
		{"An Ingress backend naming no Service is reported.", func(t *testing.T, objs []Object) []Object {
			get[*networkingv1.Ingress](t, objs, "ingest").Spec.Rules[0].HTTP.Paths[0].Backend.Service.Name = "api"
			return objs
		}, `backend: no Service "api"`},
		{"A missing ingest HPA is reported.", func(t *testing.T, objs []Object) []Object {
			return remove(objs, "HorizontalPodAutoscaler", "ingest")
		}, "ingest needs a HorizontalPodAutoscaler"},
	}
	opts := checkOptions(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			objs := build(t, baseDir)
			if err := Check(objs, opts); err != nil {
				t.Fatalf("the base fails before the change: %v", err)
			}
			err := Check(tt.break_(t, objs), opts)
			if err == nil {
				t.Fatalf("Check passed; want an error containing %q", tt.want)
			}
			// "#N" in want stands for any document number.
			want := regexp.MustCompile(strings.ReplaceAll(regexp.QuoteMeta(tt.want), "#N", `#\d+`))
			if !want.MatchString(err.Error()) {
				t.Errorf("Check reported:\n%v\nwant an error containing %q", err, tt.want)
			}
		})
	}
}
