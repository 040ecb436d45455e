package deploy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Object is one decoded manifest document.
type Object struct {
	// Source says where it came from: a file or build and the document's
	// position in it.
	Source string
	GVK    schema.GroupVersionKind
	// Value is a pointer to the typed object: *appsv1.Deployment,
	// *corev1.Secret, *Kafka, ...
	Value metav1.Object
	// Directive is a patch's kustomize directive ($patch: delete, replace
	// or merge), "" when it has none.
	Directive string
}

// String names the object for messages: "Deployment ingest (file.yaml#1)".
func (o Object) String() string {
	return fmt.Sprintf("%s %s (%s)", o.GVK.Kind, o.Value.GetName(), o.Source)
}

// newTyped returns a new typed value for every kind these manifests may
// use, keyed by "apiVersion kind".
func newTyped(apiVersion, kind string) (metav1.Object, bool) {
	switch apiVersion + " " + kind {
	case "v1 Namespace":
		return &corev1.Namespace{}, true
	case "v1 ServiceAccount":
		return &corev1.ServiceAccount{}, true
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}, true
	case "v1 Secret":
		return &corev1.Secret{}, true
	case "v1 Service":
		return &corev1.Service{}, true
	case "apps/v1 Deployment":
		return &appsv1.Deployment{}, true
	case "apps/v1 StatefulSet":
		return &appsv1.StatefulSet{}, true
	case "batch/v1 Job":
		return &batchv1.Job{}, true
	case "policy/v1 PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, true
	case "autoscaling/v2 HorizontalPodAutoscaler":
		return &autoscalingv2.HorizontalPodAutoscaler{}, true
	case "networking.k8s.io/v1 NetworkPolicy":
		return &networkingv1.NetworkPolicy{}, true
	case "networking.k8s.io/v1 Ingress":
		return &networkingv1.Ingress{}, true
	case "kafka.strimzi.io/v1beta2 Kafka":
		return &Kafka{}, true
	case "kafka.strimzi.io/v1beta2 KafkaNodePool":
		return &KafkaNodePool{}, true
	case "kafka.strimzi.io/v1beta2 KafkaTopic":
		return &KafkaTopic{}, true
	case "keda.sh/v1alpha1 ScaledObject":
		return &ScaledObject{}, true
	case "external-secrets.io/v1 ExternalSecret":
		return &ExternalSecret{}, true
	case "monitoring.coreos.com/v1 PrometheusRule":
		return &PrometheusRule{}, true
	}
	return nil, false
}

// validator is implemented by the custom resources, which check what their
// CRD's OpenAPI schema would.
type validator interface{ Validate() error }

// Decode splits data into YAML documents and decodes each strictly into its
// typed value: a duplicate key, an unknown field (names are case-sensitive)
// or a value of the wrong type is an error, as is an unknown kind. Empty
// documents are skipped. source names data in messages.
func Decode(source string, data []byte) ([]Object, error) {
	return decode(source, data, false)
}

// DecodePatch is Decode for the strategic-merge patches of an overlay: a
// patch is a partial object, and may carry kustomize's top-level directive
// `$patch: delete` (or replace, merge), which is removed before decoding.
func DecodePatch(source string, data []byte) ([]Object, error) {
	return decode(source, data, true)
}

func decode(source string, data []byte, patch bool) ([]Object, error) {
	docs, err := splitDocuments(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	var objs []Object
	var errs []error
	for i, doc := range docs {
		src := fmt.Sprintf("%s#%d", source, i+1)
		o, ok, err := decodeDocument(doc, patch)
		o.Source = src
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", src, err))
		case ok:
			objs = append(objs, o)
		}
	}
	if patch && len(objs) > 1 {
		for _, o := range objs {
			if o.Directive == "delete" {
				// The PatchTransformer of kustomize v5.5.0 (kubectl v1.32)
				// dereferences the deleted object while it applies the
				// file's next document, and panics.
				errs = append(errs, fmt.Errorf("%s: $patch: delete in a file of %d patches: kubectl v1.32's kustomize (v5.5.0) panics on it; give each deletion a patch file of its own", o.Source, len(objs)))
			}
		}
	}
	return objs, errors.Join(errs...)
}

func splitDocuments(data []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("split yaml: %w", err)
		}
		docs = append(docs, doc)
	}
}

// decodeDocument decodes one document; ok is false for an empty one.
func decodeDocument(doc []byte, patch bool) (o Object, ok bool, err error) {
	j, err := yamlToJSON(doc)
	if err != nil {
		return Object{}, false, err
	}
	if s := string(bytes.TrimSpace(j)); s == "null" || s == "" {
		return Object{}, false, nil
	}
	var directive string
	if patch {
		if j, directive, err = removePatchDirective(j); err != nil {
			return Object{}, false, err
		}
	}
	var tm metav1.TypeMeta
	if err := json.Unmarshal(j, &tm); err != nil {
		return Object{}, false, fmt.Errorf("not an object: %w", err)
	}
	v, known := newTyped(tm.APIVersion, tm.Kind)
	if !known {
		return Object{}, false, fmt.Errorf("apiVersion %q kind %q: not a kind these manifests may use", tm.APIVersion, tm.Kind)
	}
	if err := unmarshalStrict(j, v); err != nil {
		return Object{}, false, fmt.Errorf("%s: %w", tm.Kind, err)
	}
	if val, ok := v.(validator); ok && !patch {
		if err := val.Validate(); err != nil {
			return Object{}, false, fmt.Errorf("%s %s: %w", tm.Kind, v.GetName(), err)
		}
	}
	if v.GetName() == "" {
		return Object{}, false, fmt.Errorf("%s without metadata.name", tm.Kind)
	}
	return Object{GVK: schema.FromAPIVersionAndKind(tm.APIVersion, tm.Kind), Value: v, Directive: directive}, true, nil
}

// unmarshalStrict decodes JSON as the API server's strict field validation
// does: case-sensitive names, no unknown and no duplicate fields.
func unmarshalStrict(j []byte, v any) error {
	strict, err := sigsjson.UnmarshalStrict(j, v, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// Of returns the objects of type T, in order.
func Of[T metav1.Object](objs []Object) []T {
	var out []T
	for _, o := range objs {
		if v, ok := o.Value.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

// removePatchDirective removes a top-level "$patch" of delete, replace or
// merge from the JSON object j.
func removePatchDirective(j []byte) ([]byte, string, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(j, &m); err != nil {
		return nil, "", fmt.Errorf("not an object: %w", err)
	}
	raw, ok := m["$patch"]
	if !ok {
		return j, "", nil
	}
	var d string
	if err := json.Unmarshal(raw, &d); err != nil || (d != "delete" && d != "replace" && d != "merge") {
		return nil, "", fmt.Errorf("$patch %s: want delete, replace or merge", raw)
	}
	delete(m, "$patch")
	j, err := json.Marshal(m)
	return j, d, err
}

// yamlToJSON converts one YAML document to JSON, rejecting duplicate keys.
func yamlToJSON(doc []byte) ([]byte, error) {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return nil, fmt.Errorf("yaml: %w", err)
	}
	return j, nil
}
