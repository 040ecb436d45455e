package deploy

import (
	"fmt"
	"maps"
	"net"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// binDir is where the image keeps Turnpike's binaries (Dockerfile).
const binDir = "/usr/local/bin/"

// How long Turnpike's processes take to stop, mirrored from the code
// (TestShutdownConstantsMirrorTheCode keeps them equal).
const (
	// serverShutdownGrace is internal/server's ShutdownGrace: an HTTP
	// server's graceful shutdown.
	serverShutdownGrace = 10 * time.Second
	// kafkaWriteTimeout is the WriteTimeout of internal/topic.StreamWriter:
	// the longest flush of the worker's writers.
	kafkaWriteTimeout = 10 * time.Second
	// pushgwCloseTime is pkg/pushgw's DefaultWriteTimeout of the close
	// frame plus its closeLinger for the peer's answer.
	pushgwCloseTime = 10*time.Second + time.Second
	// graceMargin is what a terminationGracePeriodSeconds keeps beyond
	// the stop time.
	graceMargin = 5 * time.Second
)

// topicSuffixes are the topic names under TURNPIKE_TOPIC_PREFIX, as
// internal/topic.NewNames makes them (TestTopicNamesMirrorInternalTopic).
func topicSuffixes() []string { return []string{"requests", "requests.dlq", "stream", "control"} }

// envVar is a container's environment variable; value is known when the
// manifests hold it (a literal, a ConfigMap, or a Secret not made by an
// ExternalSecret).
type envVar struct {
	value string
	known bool
}

// envOf resolves the environment of container c as Kubernetes does:
// envFrom sources in order, then env entries, later ones winning.
func (m *model) envOf(ns string, c corev1.Container) map[string]envVar {
	env := map[string]envVar{}
	for _, ef := range c.EnvFrom {
		if r := ef.ConfigMapRef; r != nil {
			keys, _ := m.configMapKeys(ns, r.Name)
			for k, v := range keys {
				env[ef.Prefix+k] = envVar{v, true}
			}
		}
		if r := ef.SecretRef; r != nil {
			keys, literal, _ := m.secretKeys(ns, r.Name)
			for k, v := range keys {
				env[ef.Prefix+k] = envVar{v, literal}
			}
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = envVar{e.Value, !strings.Contains(e.Value, "$(")}
		case e.ValueFrom.ConfigMapKeyRef != nil:
			r := e.ValueFrom.ConfigMapKeyRef
			keys, _ := m.configMapKeys(ns, r.Name)
			v, ok := keys[r.Key]
			env[e.Name] = envVar{v, ok}
		case e.ValueFrom.SecretKeyRef != nil:
			r := e.ValueFrom.SecretKeyRef
			keys, literal, _ := m.secretKeys(ns, r.Name)
			v, ok := keys[r.Key]
			env[e.Name] = envVar{v, ok && literal}
		default:
			env[e.Name] = envVar{}
		}
	}
	return env
}

// service is one Turnpike binary's container.
type service struct {
	pod pod
	c   corev1.Container
	env map[string]envVar
}

// turnpikeEnv lists what each binary needs in its environment: the
// settings these checks compare, and the ones without a usable default.
func turnpikeEnv(bin string) []string {
	shared := []string{"TURNPIKE_KAFKA_BROKERS", "TURNPIKE_TOPIC_PREFIX"}
	switch bin {
	case "ingest":
		return append(shared, "TURNPIKE_AUTH_SECRET", "TURNPIKE_MONGO_URI", "TURNPIKE_INGEST_ADDR")
	case "worker":
		return append(shared, "TURNPIKE_MONGO_URI", "TURNPIKE_WORKER_ADDR", "TURNPIKE_WORKER_GROUP", "TURNPIKE_DRAIN_TIMEOUT", "TURNPIKE_PARTITIONS")
	case "pushgw":
		return append(shared, "TURNPIKE_AUTH_SECRET", "TURNPIKE_PUSHGW_ADDR")
	case "turnpike":
		return append(shared, "TURNPIKE_PARTITIONS")
	}
	return nil
}

// checkTurnpike checks what makes these manifests run Turnpike: one
// Deployment per service and the topics Job, each with the settings it
// needs; brokers, topics and partitions that agree with the Kafka
// resources; the worker's autoscaler on its own consumer group and topic;
// grace periods that fit each service's drain; MongoDB's replica set and
// the URI that reaches it.
func (m *model) checkTurnpike(report reporter) {
	anchor := Object{}
	if nss := Of[*corev1.Namespace](m.objs); len(nss) > 0 {
		for _, o := range m.objs {
			if o.Value == nss[0] {
				anchor = o
			}
		}
	} else if len(m.objs) > 0 {
		anchor = m.objs[0]
	} else {
		return
	}
	svcs := map[string][]service{}
	for _, p := range m.pods {
		if p.spec == nil {
			continue
		}
		for _, c := range p.spec.Containers {
			if len(c.Command) > 0 && strings.HasPrefix(c.Command[0], binDir) {
				bin := path.Base(c.Command[0])
				svcs[bin] = append(svcs[bin], service{p, c, m.envOf(p.ns, c)})
			}
		}
	}
	for _, bin := range []string{"ingest", "worker", "pushgw", "turnpike"} {
		if len(svcs[bin]) != 1 {
			report(anchor, "want exactly one container running %s%s, have %d", binDir, bin, len(svcs[bin]))
		}
	}
	if t := svcs["turnpike"]; len(t) == 1 {
		words := append(slices.Clone(t[0].c.Command[1:]), t[0].c.Args...)
		if len(words) == 0 || words[0] != "topics" {
			report(t[0].pod.owner, "container %s: the CLI runs here as `turnpike topics`", t[0].c.Name)
		}
	}
	image := ""
	for _, bin := range slices.Sorted(maps.Keys(svcs)) {
		for _, s := range svcs[bin] {
			for _, name := range turnpikeEnv(bin) {
				if _, ok := s.env[name]; !ok {
					report(s.pod.owner, "container %s (%s) lacks %s", s.c.Name, bin, name)
				}
			}
			if image == "" {
				image = s.c.Image
			} else if s.c.Image != image {
				report(s.pod.owner, "container %s runs image %s, others %s: one image holds every binary", s.c.Name, s.c.Image, image)
			}
			if v := s.env["TURNPIKE_AUTH_SECRET"]; v.known && len(v.value) < 32 && !strings.HasPrefix(v.value, "CHANGE-ME") {
				report(s.pod.owner, "container %s: TURNPIKE_AUTH_SECRET is shorter than 32 bytes", s.c.Name)
			}
		}
	}
	// Settings every binary must agree on.
	for _, name := range []string{"TURNPIKE_KAFKA_BROKERS", "TURNPIKE_TOPIC_PREFIX", "TURNPIKE_PARTITIONS", "TURNPIKE_MONGO_URI"} {
		var first *service
		for _, bin := range []string{"ingest", "worker", "pushgw", "turnpike"} {
			for i, s := range svcs[bin] {
				v, ok := s.env[name]
				if !ok || !v.known {
					continue
				}
				if first == nil {
					first = &svcs[bin][i]
				} else if v.value != first.env[name].value {
					report(s.pod.owner, "container %s: %s differs from %s's", s.c.Name, name, first.c.Name)
				}
			}
		}
	}
	for _, bin := range []string{"ingest", "worker", "pushgw"} {
		addr := "TURNPIKE_" + strings.ToUpper(bin) + "_ADDR"
		for _, s := range svcs[bin] {
			v := s.env[addr]
			_, port, err := net.SplitHostPort(v.value)
			n, perr := strconv.Atoi(port)
			if !v.known || err != nil || perr != nil {
				report(s.pod.owner, "container %s: %s %q is not a known host:port", s.c.Name, addr, v.value)
				continue
			}
			if !slices.ContainsFunc(s.c.Ports, func(p corev1.ContainerPort) bool { return int(p.ContainerPort) == n }) {
				report(s.pod.owner, "container %s listens on %d (%s) but does not declare that port", s.c.Name, n, addr)
			}
		}
	}
	// The stream topic's count, as each binary that creates it reads it.
	var streamFirst *service
	for _, bin := range []string{"worker", "pushgw", "turnpike"} {
		for i, s := range svcs[bin] {
			v, known := streamPartitionsOf(s.env)
			if !known {
				continue
			}
			if streamFirst == nil {
				streamFirst = &svcs[bin][i]
			} else if w, _ := streamPartitionsOf(streamFirst.env); v != w {
				report(s.pod.owner, "container %s: the stream topic's partitions (TURNPIKE_STREAM_PARTITIONS, else TURNPIKE_PARTITIONS) %s differ from %s's %s", s.c.Name, v, streamFirst.c.Name, w)
			}
		}
	}
	m.checkGrace(svcs, report)
	worker := svcs["worker"]
	if len(worker) != 1 {
		return
	}
	env := worker[0].env
	partitions, err := strconv.Atoi(env["TURNPIKE_PARTITIONS"].value)
	if err != nil || partitions < 1 {
		report(worker[0].pod.owner, "TURNPIKE_PARTITIONS %q: want a positive integer", env["TURNPIKE_PARTITIONS"].value)
	}
	streamValue, _ := streamPartitionsOf(env)
	stream, err := strconv.Atoi(streamValue)
	if err != nil || stream < 1 {
		report(worker[0].pod.owner, "TURNPIKE_STREAM_PARTITIONS %q: want a positive integer", streamValue)
	}
	m.checkKafka(anchor, env, partitions, stream, report)
	m.checkWorkerScaling(worker[0], partitions, report)
	m.checkStreamSizing(svcs["pushgw"], stream, report)
	for _, bin := range []string{"ingest", "pushgw"} {
		for _, s := range svcs[bin] {
			found := false
			for _, h := range Of[*autoscalingv2.HorizontalPodAutoscaler](m.objs) {
				found = found || (h.Namespace == s.pod.ns && h.Spec.ScaleTargetRef.Kind == s.pod.owner.GVK.Kind && h.Spec.ScaleTargetRef.Name == s.pod.owner.Value.GetName())
			}
			if !found {
				report(s.pod.owner, "%s needs a HorizontalPodAutoscaler", bin)
			}
		}
	}
	m.checkMongo(env, report)
}

// checkGrace requires terminationGracePeriodSeconds to fit each service's
// stop: preStop, then the HTTP server's shutdown (ingest), closing every
// client (pushgw), or draining in-flight runs and flushing (worker).
func (m *model) checkGrace(svcs map[string][]service, report reporter) {
	for _, bin := range slices.Sorted(maps.Keys(svcs)) {
		for _, s := range svcs[bin] {
			var stop time.Duration
			switch bin {
			case "ingest":
				stop = serverShutdownGrace
			case "pushgw":
				stop = max(serverShutdownGrace, pushgwCloseTime)
			case "worker":
				d, err := time.ParseDuration(s.env["TURNPIKE_DRAIN_TIMEOUT"].value)
				if err != nil {
					report(s.pod.owner, "TURNPIKE_DRAIN_TIMEOUT %q: %v", s.env["TURNPIKE_DRAIN_TIMEOUT"].value, err)
				}
				stop = d + kafkaWriteTimeout
			default:
				continue
			}
			if l := s.c.Lifecycle; l != nil && l.PreStop != nil && l.PreStop.Sleep != nil {
				stop += time.Duration(l.PreStop.Sleep.Seconds) * time.Second
			}
			if bin != "worker" && (s.c.Lifecycle == nil || s.c.Lifecycle.PreStop == nil) {
				report(s.pod.owner, "container %s needs a preStop pause so that its Service stops routing to it before SIGTERM", s.c.Name)
			}
			g := s.pod.spec.TerminationGracePeriodSeconds
			if g != nil && time.Duration(*g)*time.Second < stop+graceMargin {
				report(s.pod.owner, "terminationGracePeriodSeconds %d: the %s needs %v to stop, plus %v margin", *g, bin, stop, graceMargin)
			}
		}
	}
}

// intValue reads a number from a custom resource's free-form config.
func intValue(v any) (int64, bool) {
	switch n := v.(type) {
	case int64:
		return n, true
	case float64:
		return int64(n), n == float64(int64(n))
	case string:
		i, err := strconv.ParseInt(n, 10, 64)
		return i, err == nil
	}
	return 0, false
}

// checkKafka compares the Strimzi resources with the services' settings.
func (m *model) checkKafka(anchor Object, env map[string]envVar, partitions, stream int, report reporter) {
	kafkas := Of[*Kafka](m.objs)
	if len(kafkas) != 1 {
		report(anchor, "want one Strimzi Kafka, have %d", len(kafkas))
		return
	}
	k := kafkas[0]
	ko, _ := m.find("Kafka", k.Namespace, k.Name)
	brokers, controllers := int64(0), int64(0)
	for _, p := range Of[*KafkaNodePool](m.objs) {
		if p.Labels["strimzi.io/cluster"] != k.Name {
			po, _ := m.find("KafkaNodePool", p.Namespace, p.Name)
			report(po, "label strimzi.io/cluster %q names no Kafka", p.Labels["strimzi.io/cluster"])
			continue
		}
		if p.HasRole("broker") {
			brokers += int64(p.Spec.Replicas)
		}
		if p.HasRole("controller") {
			controllers += int64(p.Spec.Replicas)
		}
	}
	if brokers < 1 || controllers < 1 || controllers%2 == 0 {
		report(ko, "%d brokers and %d controllers: want at least one broker and an odd number of controllers", brokers, controllers)
	}
	// The services bootstrap from a plain internal listener.
	var bootstrap []string
	for _, l := range k.Spec.Kafka.Listeners {
		if l.Type == "internal" && !l.TLS {
			for _, host := range []string{k.Name + "-kafka-bootstrap", k.Name + "-kafka-bootstrap." + k.Namespace + ".svc", k.Name + "-kafka-bootstrap." + k.Namespace + ".svc.cluster.local"} {
				bootstrap = append(bootstrap, net.JoinHostPort(host, strconv.Itoa(int(l.Port))))
			}
		}
	}
	for _, b := range strings.Split(env["TURNPIKE_KAFKA_BROKERS"].value, ",") {
		if b = strings.TrimSpace(b); !slices.Contains(bootstrap, b) {
			report(ko, "TURNPIKE_KAFKA_BROKERS names %q, not the bootstrap address of a plain internal listener (%s)", b, strings.Join(bootstrap, ", "))
		}
	}
	cfg := k.Spec.Kafka.Config
	rf, hasRF := intValue(cfg["default.replication.factor"])
	isr, hasISR := intValue(cfg["min.insync.replicas"])
	if hasRF && rf > brokers {
		report(ko, "default.replication.factor %d exceeds the %d brokers", rf, brokers)
	}
	if hasRF && hasISR && !sensibleISR(isr, rf) {
		report(ko, "min.insync.replicas %d with replication %d: want 1 <= min.insync.replicas < replication (or 1 of 1)", isr, rf)
	}
	for _, key := range []string{"offsets.topic.replication.factor", "transaction.state.log.replication.factor"} {
		if n, ok := intValue(cfg[key]); ok && n > brokers {
			report(ko, "%s %d exceeds the %d brokers", key, n, brokers)
		}
	}
	prefix := env["TURNPIKE_TOPIC_PREFIX"].value
	for _, suffix := range topicSuffixes() {
		name := prefix + suffix
		var found []*KafkaTopic
		for _, t := range Of[*KafkaTopic](m.objs) {
			if t.Topic() == name {
				found = append(found, t)
			}
		}
		if len(found) != 1 {
			report(ko, "want one KafkaTopic for topic %s, have %d", name, len(found))
			continue
		}
		t := found[0]
		to, _ := m.find("KafkaTopic", t.Namespace, t.Name)
		if t.Labels["strimzi.io/cluster"] != k.Name {
			report(to, "label strimzi.io/cluster %q, want %q: the topic operator would ignore it", t.Labels["strimzi.io/cluster"], k.Name)
		}
		switch {
		case suffix == "stream" && int(t.Spec.Partitions) != stream:
			report(to, "%d partitions, TURNPIKE_STREAM_PARTITIONS (else TURNPIKE_PARTITIONS) %d: keep them equal", t.Spec.Partitions, stream)
		case suffix != "stream" && int(t.Spec.Partitions) != partitions:
			report(to, "%d partitions, TURNPIKE_PARTITIONS %d: keep them equal", t.Spec.Partitions, partitions)
		}
		if int64(t.Spec.Replicas) > brokers {
			report(to, "replicas %d exceed the %d brokers", t.Spec.Replicas, brokers)
		}
		if n, ok := intValue(t.Spec.Config["min.insync.replicas"]); ok && !sensibleISR(n, int64(t.Spec.Replicas)) {
			report(to, "min.insync.replicas %d with %d replicas: want 1 <= min.insync.replicas < replicas (or 1 of 1)", n, t.Spec.Replicas)
		}
	}
}

// streamPartitionsOf is the stream topic's partition count a binary with
// env creates it with: TURNPIKE_STREAM_PARTITIONS when set and not 0, else
// TURNPIKE_PARTITIONS (topic.StreamPartitions); known when the manifests
// hold the value.
func streamPartitionsOf(env map[string]envVar) (string, bool) {
	if v, ok := env["TURNPIKE_STREAM_PARTITIONS"]; ok && v.value != "0" {
		return v.value, v.known
	}
	v, ok := env["TURNPIKE_PARTITIONS"]
	return v.value, ok && v.known
}

// shardsPerReplica is the fewest stream partitions a push gateway replica
// should have to itself at the HPA's maxReplicas: with s shards a replica
// its share varies by about sqrt(s), a quarter of the mean at 20
// (docs/pushgw.md "Sizing partitions").
const shardsPerReplica = 20

// checkStreamSizing requires the stream topic to have at least
// shardsPerReplica partitions per push gateway replica the HPA may run.
func (m *model) checkStreamSizing(pushgw []service, stream int, report reporter) {
	for _, s := range pushgw {
		for _, h := range Of[*autoscalingv2.HorizontalPodAutoscaler](m.objs) {
			if h.Namespace != s.pod.ns || h.Spec.ScaleTargetRef.Kind != s.pod.owner.GVK.Kind || h.Spec.ScaleTargetRef.Name != s.pod.owner.Value.GetName() {
				continue
			}
			if want := shardsPerReplica * int(h.Spec.MaxReplicas); stream < want {
				ho, _ := m.find("HorizontalPodAutoscaler", h.Namespace, h.Name)
				report(ho, "maxReplicas %d of %s needs at least %d stream partitions (%d x maxReplicas), have %d: raise the stream topic's partitions and TURNPIKE_STREAM_PARTITIONS",
					h.Spec.MaxReplicas, s.pod.owner.Value.GetName(), want, shardsPerReplica, stream)
			}
		}
	}
}

// sensibleISR reports whether acks=all writes survive one replica down
// without losing an acknowledged record (or there is one replica only).
func sensibleISR(isr, replicas int64) bool {
	if replicas == 1 {
		return isr == 1
	}
	return isr >= 1 && isr < replicas
}

// checkWorkerScaling checks the worker's ScaledObject: KEDA reads the lag
// of the worker's own group on the requests topic, from the same brokers,
// and never scales past the partition count.
func (m *model) checkWorkerScaling(w service, partitions int, report reporter) {
	var found []Object
	for _, o := range m.objs {
		if so, ok := o.Value.(*ScaledObject); ok && so.Namespace == w.pod.ns {
			if kind, name := so.Target(); kind == w.pod.owner.GVK.Kind && name == w.pod.owner.Value.GetName() {
				found = append(found, o)
			}
		}
	}
	if len(found) != 1 {
		report(w.pod.owner, "want one ScaledObject scaling the worker, have %d", len(found))
		return
	}
	o := found[0]
	so := o.Value.(*ScaledObject)
	if so.Spec.MaxReplicaCount == nil || int(*so.Spec.MaxReplicaCount) > partitions {
		report(o, "maxReplicaCount must be set and at most the %d partitions: a worker beyond them sits idle", partitions)
	}
	env := w.env
	want := map[string]string{
		"bootstrapServers":  env["TURNPIKE_KAFKA_BROKERS"].value,
		"consumerGroup":     env["TURNPIKE_WORKER_GROUP"].value,
		"topic":             env["TURNPIKE_TOPIC_PREFIX"].value + "requests",
		"offsetResetPolicy": "earliest",
	}
	kafka := 0
	for _, t := range so.Spec.Triggers {
		if t.Type != "kafka" {
			continue
		}
		kafka++
		for _, k := range slices.Sorted(maps.Keys(want)) {
			if t.Metadata[k] != want[k] {
				report(o, "kafka trigger %s %q, want %q", k, t.Metadata[k], want[k])
			}
		}
		n, err := strconv.Atoi(t.Metadata["lagThreshold"])
		if err != nil || n < 1 {
			report(o, "kafka trigger lagThreshold %q: want a positive integer", t.Metadata["lagThreshold"])
		}
		if v := env["TURNPIKE_MAX_INFLIGHT"]; v.known {
			if inflight, err := strconv.Atoi(v.value); err == nil && n > inflight {
				report(o, "kafka trigger lagThreshold %d exceeds TURNPIKE_MAX_INFLIGHT %d: workers would saturate before KEDA adds one", n, inflight)
			}
		}
		if t.Metadata["allowIdleConsumers"] == "true" {
			report(o, "kafka trigger allowIdleConsumers: workers beyond the partitions would sit idle")
		}
	}
	if kafka != 1 {
		report(o, "want one kafka trigger, have %d", kafka)
	}
}

// checkMongo checks the MongoDB StatefulSet, its init Job and the URI the
// services use, when the build runs MongoDB (it may be external).
func (m *model) checkMongo(env map[string]envVar, report reporter) {
	var sts *appsv1.StatefulSet
	var so Object
	replSet := ""
	for _, o := range m.objs {
		s, ok := o.Value.(*appsv1.StatefulSet)
		if !ok {
			continue
		}
		for _, c := range s.Spec.Template.Spec.Containers {
			words := strings.Fields(strings.Join(append(slices.Clone(c.Command), c.Args...), " "))
			if i := slices.Index(words, "mongod"); i >= 0 {
				sts, so = s, o
				if j := slices.Index(words, "--replSet"); j >= 0 && j+1 < len(words) {
					replSet = words[j+1]
				}
			}
		}
	}
	if sts == nil {
		return
	}
	if replSet == "" {
		report(so, "mongod runs without --replSet: Turnpike's store needs a replica set")
		return
	}
	replicas := int32(1)
	if sts.Spec.Replicas != nil {
		replicas = *sts.Spec.Replicas
	}
	if replicas%2 == 0 {
		report(so, "%d members: a replica set wants an odd number", replicas)
	}
	var initEnv map[string]envVar
	for _, o := range m.objs {
		j, ok := o.Value.(*batchv1.Job)
		if !ok {
			continue
		}
		for _, c := range j.Spec.Template.Spec.Containers {
			e := m.envOf(j.Namespace, c)
			if v, ok := e["MONGODB_MEMBERS"]; ok {
				initEnv = e
				if v.value != strconv.Itoa(int(replicas)) {
					report(o, "MONGODB_MEMBERS %q, but StatefulSet %s has %d replicas", v.value, sts.Name, replicas)
				}
			}
		}
	}
	if initEnv == nil {
		report(so, "no Job initiates the replica set (a container with MONGODB_MEMBERS)")
	}
	uri := env["TURNPIKE_MONGO_URI"]
	if !uri.known {
		return
	}
	u, err := url.Parse(uri.value)
	if err != nil || u.Scheme != "mongodb" {
		report(so, "TURNPIKE_MONGO_URI does not parse as a mongodb:// URL")
		return
	}
	var want, have []string
	for i := range replicas {
		want = append(want, fmt.Sprintf("%s-%d.%s:27017", sts.Name, i, sts.Spec.ServiceName))
	}
	for _, h := range strings.Split(u.Host, ",") {
		have = append(have, strings.TrimSuffix(strings.TrimSuffix(h, ".svc.cluster.local:27017"), ".svc:27017"))
	}
	slices.Sort(want)
	slices.Sort(have)
	if !slices.Equal(want, have) {
		report(so, "TURNPIKE_MONGO_URI lists hosts %v, want every member %v", have, want)
	}
	q := u.Query()
	if q.Get("replicaSet") != replSet {
		report(so, "TURNPIKE_MONGO_URI replicaSet %q, want %q", q.Get("replicaSet"), replSet)
	}
	if src := q.Get("authSource"); src != "admin" && (src != "" || strings.Trim(u.Path, "/") != "") {
		report(so, "TURNPIKE_MONGO_URI must authenticate against admin, where the init Job creates the user")
	}
	if initEnv == nil || u.User == nil {
		return
	}
	if v := initEnv["MONGO_APP_USERNAME"]; v.known && v.value != u.User.Username() {
		report(so, "TURNPIKE_MONGO_URI connects as %q, the init Job creates %q", u.User.Username(), v.value)
	}
	if v := initEnv["MONGO_APP_PASSWORD"]; v.known {
		if pw, _ := u.User.Password(); pw != v.value {
			report(so, "TURNPIKE_MONGO_URI's password is not the init Job's MONGO_APP_PASSWORD")
		}
	}
}
