package deploy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

func TestDecodeIsAsStrictAsTheAPIServer(t *testing.T) {
	t.Parallel()
	const deployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: ingest
spec:
  selector:
    matchLabels: {app: ingest}
  template:
    metadata:
      labels: {app: ingest}
    spec:
      containers:
        - name: ingest
          image: turnpike
`
	tests := []struct {
		name string
		doc  string
		want string // "" decodes
	}{
		{"A valid Deployment decodes.", deployment, ""},
		{"An unknown field is refused.", strings.Replace(deployment, "  selector:", "  replica: 2\n  selector:", 1), `unknown field "spec.replica"`},
		{"A field name in the wrong case is refused.", strings.Replace(deployment, "  selector:", "  Replicas: 2\n  selector:", 1), `unknown field "spec.Replicas"`},
		{"A duplicate key is refused.", strings.Replace(deployment, "  selector:", "  replicas: 2\n  replicas: 3\n  selector:", 1), `key "replicas" already set in map`},
		{"A value of the wrong type is refused.", strings.Replace(deployment, "  selector:", "  replicas: two\n  selector:", 1), "cannot unmarshal string into Go struct field"},
		{"A field in the wrong place is refused.", strings.Replace(deployment, "          image: turnpike", "          image: turnpike\n          terminationGracePeriodSeconds: 30", 1), `unknown field "spec.template.spec.containers[0].terminationGracePeriodSeconds"`},
		{"A kind these manifests do not use is refused.", "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n", `apiVersion "v1" kind "Pod": not a kind these manifests may use`},
		{"An old API version is refused.", "apiVersion: policy/v1beta1\nkind: PodDisruptionBudget\nmetadata: {name: p}\n", "not a kind these manifests may use"},
		{"An object without a name is refused.", "apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n", "ConfigMap without metadata.name"},
		{"A KafkaTopic with a misspelt field is refused.", "apiVersion: kafka.strimzi.io/v1beta2\nkind: KafkaTopic\nmetadata: {name: t}\nspec: {partition: 12, replicas: 3}\n", `unknown field "spec.partition"`},
		{"A KafkaTopic without partitions fails the schema's bound.", "apiVersion: kafka.strimzi.io/v1beta2\nkind: KafkaTopic\nmetadata: {name: t}\nspec: {replicas: 3}\n", "spec.partitions 0: want at least 1"},
		{"A Kafka field outside the known subset is refused until it is added.", "apiVersion: kafka.strimzi.io/v1beta2\nkind: Kafka\nmetadata: {name: k}\nspec:\n  kafka:\n    replicas: 3\n    listeners: [{name: plain, port: 9092, type: internal, tls: false}]\n", `unknown field "spec.kafka.replicas"`},
		{"A Kafka listener of an unknown type is refused.", "apiVersion: kafka.strimzi.io/v1beta2\nkind: Kafka\nmetadata: {name: k}\nspec:\n  kafka:\n    listeners: [{name: plain, port: 9092, type: clusterip, tls: false}]\n", `listeners[0].type "clusterip": unknown`},
		{"A node pool role that does not exist is refused.", "apiVersion: kafka.strimzi.io/v1beta2\nkind: KafkaNodePool\nmetadata: {name: p}\nspec:\n  replicas: 3\n  roles: [brokers]\n  storage: {type: ephemeral}\n", `spec.roles: "brokers" is neither controller nor broker`},
		{"A jbod volume without an id is refused.", "apiVersion: kafka.strimzi.io/v1beta2\nkind: KafkaNodePool\nmetadata: {name: p}\nspec:\n  replicas: 3\n  roles: [broker]\n  storage: {type: jbod, volumes: [{type: persistent-claim, size: 1Gi}]}\n", "spec.storage.volumes[0].id is required in jbod"},
		{"KEDA trigger metadata must be strings.", "apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata: {name: w}\nspec:\n  scaleTargetRef: {name: worker}\n  triggers:\n    - type: kafka\n      metadata: {allowIdleConsumers: false}\n", "cannot unmarshal bool into Go struct field"},
		{"A misspelt kafka scaler setting is refused.", "apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata: {name: w}\nspec:\n  scaleTargetRef: {name: worker}\n  triggers:\n    - type: kafka\n      metadata: {lagThreshhold: \"10\"}\n", "metadata.lagThreshhold: not a kafka scaler setting"},
		{"An ExternalSecret with an unknown store kind is refused.", "apiVersion: external-secrets.io/v1\nkind: ExternalSecret\nmetadata: {name: s}\nspec:\n  secretStoreRef: {name: x, kind: Vault}\n", `spec.secretStoreRef.kind "Vault": unknown`},
		{"A patch directive is not a field of a resource.", "$patch: delete\napiVersion: v1\nkind: Secret\nmetadata: {name: s}\n", `unknown field "$patch"`},
		{"Empty documents and comments are skipped.", "# nothing\n---\n---\n" + deployment, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			objs, err := Decode("test.yaml", []byte(tt.doc))
			if tt.want == "" {
				if err != nil || len(objs) != 1 {
					t.Fatalf("Decode: %d objects, %v; want one", len(objs), err)
				}
				if d, ok := objs[0].Value.(*appsv1.Deployment); !ok || d.Spec.Template.Spec.Containers[0].Image != "turnpike" {
					t.Errorf("decoded %#v", objs[0].Value)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Decode error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestDecodePatchAcceptsKustomizeDirectivesOnly(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		doc  string
		want string
	}{
		{"A delete directive is accepted.", "$patch: delete\napiVersion: v1\nkind: Secret\nmetadata: {name: s}\n", ""},
		{"A deletion sharing its file with another patch is refused: kubectl v1.32 panics on it.", "$patch: delete\napiVersion: v1\nkind: Secret\nmetadata: {name: s}\n---\n$patch: delete\napiVersion: v1\nkind: Secret\nmetadata: {name: t}\n", "give each deletion a patch file of its own"},
		{"A partial object is accepted.", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n  template:\n    spec:\n      containers: [{name: c, resources: {limits: {memory: 1Gi}}}]\n", ""},
		{"A directive kustomize does not know is refused.", "$patch: remove\napiVersion: v1\nkind: Secret\nmetadata: {name: s}\n", `$patch "remove": want delete, replace or merge`},
		{"A misspelt field in a patch is refused.", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n  template:\n    spec:\n      containers: [{name: c, resource: {}}]\n", `unknown field "spec.template.spec.containers[0].resource"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := DecodePatch("patch.yaml", []byte(tt.doc))
			if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("DecodePatch error %v, want %q", err, tt.want)
			}
		})
	}
}

func TestDecodeTreeRejectsStrayAndMalformedFiles(t *testing.T) {
	t.Parallel()
	write := func(t *testing.T, dir, name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n"
	tests := []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"A file no kustomization lists is reported.", map[string]string{
			"kustomization.yaml": "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [a.yaml]\n",
			"a.yaml":             cm, "stray.yaml": cm,
		}, "stray.yaml: no kustomization lists it"},
		{"A misspelt kustomization field is reported.", map[string]string{
			"kustomization.yaml": "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresource: [a.yaml]\n",
			"a.yaml":             cm,
		}, `unknown field "resource"`},
		{"A broken resource is reported with its file.", map[string]string{
			"kustomization.yaml": "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [a.yaml]\n",
			"a.yaml":             cm + "dta: {}\n",
		}, `a.yaml#1: ConfigMap: unknown field "dta"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			for name, content := range tt.files {
				write(t, dir, name, content)
			}
			_, err := DecodeTree(dir)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("DecodeTree error %v, want one containing %q", err, tt.want)
			}
		})
	}
}
