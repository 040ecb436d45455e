package deploy

import (
	"errors"
	"fmt"
	"slices"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The custom resources below are subsets of their operators' CRD schemas:
// only the fields these manifests use, with the CRDs' names and types.
// Decoding with unknown fields disallowed therefore rejects a misspelt or
// misplaced field, and also a real field that this file does not know yet:
// add it here (with the schema's name and type) before using it.
// Validate checks the schema's required fields and enumerations.

// Kafka is a subset of Strimzi's Kafka (kafka.strimzi.io/v1beta2), KRaft
// mode with node pools.
type Kafka struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              KafkaSpec `json:"spec"`
}

// KafkaSpec is Kafka.spec.
type KafkaSpec struct {
	Kafka          KafkaClusterSpec    `json:"kafka"`
	EntityOperator *EntityOperatorSpec `json:"entityOperator,omitempty"`
}

// KafkaClusterSpec is Kafka.spec.kafka.
type KafkaClusterSpec struct {
	Version         string                 `json:"version,omitempty"`
	MetadataVersion string                 `json:"metadataVersion,omitempty"`
	Listeners       []GenericKafkaListener `json:"listeners"`
	// Config is the brokers' configuration: string, number or boolean values.
	Config map[string]any `json:"config,omitempty"`
}

// GenericKafkaListener is one of Kafka.spec.kafka.listeners.
type GenericKafkaListener struct {
	Name               string                           `json:"name"`
	Port               int32                            `json:"port"`
	Type               string                           `json:"type"`
	TLS                bool                             `json:"tls"`
	NetworkPolicyPeers []networkingv1.NetworkPolicyPeer `json:"networkPolicyPeers,omitempty"`
}

// EntityOperatorSpec is Kafka.spec.entityOperator; an empty object enables
// an operator with its defaults.
type EntityOperatorSpec struct {
	TopicOperator *struct{} `json:"topicOperator,omitempty"`
	UserOperator  *struct{} `json:"userOperator,omitempty"`
}

// Validate checks required fields and enumerations.
func (k *Kafka) Validate() error {
	var errs []error
	if len(k.Spec.Kafka.Listeners) == 0 {
		errs = append(errs, errors.New("spec.kafka.listeners is required"))
	}
	names := map[string]bool{}
	for i, l := range k.Spec.Kafka.Listeners {
		if l.Name == "" || names[l.Name] {
			errs = append(errs, fmt.Errorf("spec.kafka.listeners[%d]: missing or repeated name %q", i, l.Name))
		}
		names[l.Name] = true
		if l.Port < 9092 || l.Port > 65535 {
			errs = append(errs, fmt.Errorf("spec.kafka.listeners[%d].port %d: must be 9092..65535", i, l.Port))
		}
		if !slices.Contains([]string{"internal", "route", "loadbalancer", "nodeport", "ingress", "cluster-ip"}, l.Type) {
			errs = append(errs, fmt.Errorf("spec.kafka.listeners[%d].type %q: unknown", i, l.Type))
		}
	}
	return errors.Join(errs...)
}

// KafkaNodePool is a subset of Strimzi's KafkaNodePool
// (kafka.strimzi.io/v1beta2).
type KafkaNodePool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              KafkaNodePoolSpec `json:"spec"`
}

// KafkaNodePoolSpec is KafkaNodePool.spec.
type KafkaNodePoolSpec struct {
	Replicas   int32                        `json:"replicas"`
	Roles      []string                     `json:"roles"`
	Storage    KafkaStorage                 `json:"storage"`
	Resources  *corev1.ResourceRequirements `json:"resources,omitempty"`
	JVMOptions *JVMOptions                  `json:"jvmOptions,omitempty"`
	Template   *KafkaNodePoolTemplate       `json:"template,omitempty"`
}

// KafkaStorage is the jbod, persistent-claim or ephemeral storage of a pool.
type KafkaStorage struct {
	Type    string        `json:"type"`
	Volumes []KafkaVolume `json:"volumes,omitempty"`
}

// KafkaVolume is one volume of jbod storage.
type KafkaVolume struct {
	ID            *int32 `json:"id,omitempty"`
	Type          string `json:"type"`
	Size          string `json:"size,omitempty"`
	Class         string `json:"class,omitempty"`
	DeleteClaim   bool   `json:"deleteClaim,omitempty"`
	KRaftMetadata string `json:"kraftMetadata,omitempty"`
}

// JVMOptions are the heap settings of the brokers.
type JVMOptions struct {
	Xms string `json:"-Xms,omitempty"`
	Xmx string `json:"-Xmx,omitempty"`
}

// KafkaNodePoolTemplate is KafkaNodePool.spec.template.
type KafkaNodePoolTemplate struct {
	Pod *PodTemplate `json:"pod,omitempty"`
}

// PodTemplate is Strimzi's pod template: scheduling only, here.
type PodTemplate struct {
	Affinity *corev1.Affinity `json:"affinity,omitempty"`
}

// Validate checks required fields and enumerations.
func (p *KafkaNodePool) Validate() error {
	var errs []error
	if p.Spec.Replicas < 0 {
		errs = append(errs, fmt.Errorf("spec.replicas %d < 0", p.Spec.Replicas))
	}
	if len(p.Spec.Roles) == 0 {
		errs = append(errs, errors.New("spec.roles is required"))
	}
	for _, r := range p.Spec.Roles {
		if r != "controller" && r != "broker" {
			errs = append(errs, fmt.Errorf("spec.roles: %q is neither controller nor broker", r))
		}
	}
	switch p.Spec.Storage.Type {
	case "jbod":
		if len(p.Spec.Storage.Volumes) == 0 {
			errs = append(errs, errors.New("spec.storage: jbod needs volumes"))
		}
		for i, v := range p.Spec.Storage.Volumes {
			if v.ID == nil {
				errs = append(errs, fmt.Errorf("spec.storage.volumes[%d].id is required in jbod", i))
			}
			if v.Type != "persistent-claim" && v.Type != "ephemeral" {
				errs = append(errs, fmt.Errorf("spec.storage.volumes[%d].type %q: unknown", i, v.Type))
			}
			if v.Type == "persistent-claim" && v.Size == "" {
				errs = append(errs, fmt.Errorf("spec.storage.volumes[%d].size is required", i))
			}
			if v.KRaftMetadata != "" && v.KRaftMetadata != "shared" {
				errs = append(errs, fmt.Errorf("spec.storage.volumes[%d].kraftMetadata %q: only shared", i, v.KRaftMetadata))
			}
		}
	case "persistent-claim", "ephemeral":
	default:
		errs = append(errs, fmt.Errorf("spec.storage.type %q: unknown", p.Spec.Storage.Type))
	}
	return errors.Join(errs...)
}

// HasRole reports whether the pool's nodes have role.
func (p *KafkaNodePool) HasRole(role string) bool { return slices.Contains(p.Spec.Roles, role) }

// KafkaTopic is a subset of Strimzi's KafkaTopic (kafka.strimzi.io/v1beta2).
type KafkaTopic struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              KafkaTopicSpec `json:"spec"`
}

// KafkaTopicSpec is KafkaTopic.spec.
type KafkaTopicSpec struct {
	// TopicName defaults to metadata.name.
	TopicName  string         `json:"topicName,omitempty"`
	Partitions int32          `json:"partitions,omitempty"`
	Replicas   int32          `json:"replicas,omitempty"`
	Config     map[string]any `json:"config,omitempty"`
}

// Topic returns the Kafka topic's name.
func (t *KafkaTopic) Topic() string {
	if t.Spec.TopicName != "" {
		return t.Spec.TopicName
	}
	return t.Name
}

// Validate checks the schema's bounds.
func (t *KafkaTopic) Validate() error {
	var errs []error
	if t.Spec.Partitions < 1 {
		errs = append(errs, fmt.Errorf("spec.partitions %d: want at least 1", t.Spec.Partitions))
	}
	if t.Spec.Replicas < 1 || t.Spec.Replicas > 32767 {
		errs = append(errs, fmt.Errorf("spec.replicas %d: want 1..32767", t.Spec.Replicas))
	}
	return errors.Join(errs...)
}

// ScaledObject is a subset of KEDA's ScaledObject (keda.sh/v1alpha1).
type ScaledObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              ScaledObjectSpec `json:"spec"`
}

// ScaledObjectSpec is ScaledObject.spec.
type ScaledObjectSpec struct {
	ScaleTargetRef  ScaleTarget     `json:"scaleTargetRef"`
	PollingInterval *int32          `json:"pollingInterval,omitempty"`
	CooldownPeriod  *int32          `json:"cooldownPeriod,omitempty"`
	MinReplicaCount *int32          `json:"minReplicaCount,omitempty"`
	MaxReplicaCount *int32          `json:"maxReplicaCount,omitempty"`
	Fallback        *ScaledFallback `json:"fallback,omitempty"`
	Advanced        *AdvancedConfig `json:"advanced,omitempty"`
	Triggers        []ScaleTriggers `json:"triggers"`
}

// ScaleTarget names the scaled workload; kind defaults to Deployment.
type ScaleTarget struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`
	Name       string `json:"name"`
}

// ScaledFallback is the replica count held while the trigger fails.
type ScaledFallback struct {
	FailureThreshold int32 `json:"failureThreshold"`
	Replicas         int32 `json:"replicas"`
}

// AdvancedConfig is ScaledObject.spec.advanced.
type AdvancedConfig struct {
	HorizontalPodAutoscalerConfig *HorizontalPodAutoscalerConfig `json:"horizontalPodAutoscalerConfig,omitempty"`
	RestoreToOriginalReplicaCount bool                           `json:"restoreToOriginalReplicaCount,omitempty"`
}

// HorizontalPodAutoscalerConfig shapes the HPA that KEDA creates.
type HorizontalPodAutoscalerConfig struct {
	Name     string                                         `json:"name,omitempty"`
	Behavior *autoscalingv2.HorizontalPodAutoscalerBehavior `json:"behavior,omitempty"`
}

// ScaleTriggers is one trigger; its metadata values are strings.
type ScaleTriggers struct {
	Type     string            `json:"type"`
	Name     string            `json:"name,omitempty"`
	Metadata map[string]string `json:"metadata"`
}

// isKafkaTriggerKey reports whether k is a metadata key of KEDA's kafka
// scaler.
func isKafkaTriggerKey(k string) bool {
	switch k {
	case "bootstrapServers", "consumerGroup", "topic", "lagThreshold", "activationLagThreshold",
		"offsetResetPolicy", "allowIdleConsumers", "scaleToZeroOnInvalidOffset", "excludePersistentLag",
		"limitToPartitionsWithLag", "ensureEvenDistributionOfPartitions", "version", "partitionLimitation",
		"sasl", "tls", "unsafeSsl":
		return true
	}
	return false
}

// Validate checks required fields, and the kafka trigger's metadata keys.
func (s *ScaledObject) Validate() error {
	var errs []error
	if s.Spec.ScaleTargetRef.Name == "" {
		errs = append(errs, errors.New("spec.scaleTargetRef.name is required"))
	}
	if len(s.Spec.Triggers) == 0 {
		errs = append(errs, errors.New("spec.triggers is required"))
	}
	for i, t := range s.Spec.Triggers {
		if t.Type == "" {
			errs = append(errs, fmt.Errorf("spec.triggers[%d].type is required", i))
		}
		if t.Type != "kafka" {
			continue
		}
		for k := range t.Metadata {
			if !isKafkaTriggerKey(k) {
				errs = append(errs, fmt.Errorf("spec.triggers[%d].metadata.%s: not a kafka scaler setting", i, k))
			}
		}
	}
	return errors.Join(errs...)
}

// Target returns the scale target's kind (default Deployment) and name.
func (s *ScaledObject) Target() (kind, name string) {
	kind = s.Spec.ScaleTargetRef.Kind
	if kind == "" {
		kind = "Deployment"
	}
	return kind, s.Spec.ScaleTargetRef.Name
}

// ExternalSecret is a subset of the External Secrets Operator's
// ExternalSecret (external-secrets.io/v1): it makes Secret target.name (or
// metadata.name) with one key per data item.
type ExternalSecret struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              ExternalSecretSpec `json:"spec"`
}

// ExternalSecretSpec is ExternalSecret.spec.
type ExternalSecretSpec struct {
	RefreshInterval string               `json:"refreshInterval,omitempty"`
	SecretStoreRef  SecretStoreRef       `json:"secretStoreRef"`
	Target          ExternalSecretTarget `json:"target,omitempty"`
	Data            []ExternalSecretData `json:"data,omitempty"`
}

// SecretStoreRef names the (Cluster)SecretStore.
type SecretStoreRef struct {
	Name string `json:"name"`
	Kind string `json:"kind,omitempty"`
}

// ExternalSecretTarget is the Secret to create.
type ExternalSecretTarget struct {
	Name           string `json:"name,omitempty"`
	CreationPolicy string `json:"creationPolicy,omitempty"`
}

// ExternalSecretData maps one remote value to one key of the Secret.
type ExternalSecretData struct {
	SecretKey string                  `json:"secretKey"`
	RemoteRef ExternalSecretRemoteRef `json:"remoteRef"`
}

// ExternalSecretRemoteRef locates a value in the secret manager.
type ExternalSecretRemoteRef struct {
	Key      string `json:"key"`
	Property string `json:"property,omitempty"`
	Version  string `json:"version,omitempty"`
}

// SecretName returns the name of the Secret it creates.
func (e *ExternalSecret) SecretName() string {
	if e.Spec.Target.Name != "" {
		return e.Spec.Target.Name
	}
	return e.Name
}

// Validate checks required fields and enumerations.
func (e *ExternalSecret) Validate() error {
	var errs []error
	if e.Spec.SecretStoreRef.Name == "" {
		errs = append(errs, errors.New("spec.secretStoreRef.name is required"))
	}
	if k := e.Spec.SecretStoreRef.Kind; k != "" && k != "SecretStore" && k != "ClusterSecretStore" {
		errs = append(errs, fmt.Errorf("spec.secretStoreRef.kind %q: unknown", k))
	}
	if p := e.Spec.Target.CreationPolicy; p != "" && !slices.Contains([]string{"Owner", "Orphan", "Merge", "None"}, p) {
		errs = append(errs, fmt.Errorf("spec.target.creationPolicy %q: unknown", p))
	}
	for i, d := range e.Spec.Data {
		if d.SecretKey == "" || d.RemoteRef.Key == "" {
			errs = append(errs, fmt.Errorf("spec.data[%d]: secretKey and remoteRef.key are required", i))
		}
	}
	return errors.Join(errs...)
}
