package apply

import (
	"encoding/json"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	"github.com/pgpilot/pgpilot-operator/internal/builder"
)

// fromJSON decodes a JSON document the way UpToDate sees objects: maps, slices, float64s.
func fromJSON(t *testing.T, doc string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(doc), &v); err != nil {
		t.Fatalf("decode %s: %v", doc, err)
	}
	return v
}

func TestIsSubset(t *testing.T) {
	tests := []struct {
		name string
		want string
		have string
		ok   bool
	}{
		{name: "equal maps", want: `{"a":"x","b":1}`, have: `{"a":"x","b":1}`, ok: true},
		{name: "extra keys in have are ignored", want: `{"a":"x"}`, have: `{"a":"x","defaulted":true}`, ok: true},
		{name: "empty want matches anything", want: `{}`, have: `{"a":1}`, ok: true},
		{name: "missing key", want: `{"a":"x","b":"y"}`, have: `{"a":"x"}`, ok: false},
		{name: "different scalar value", want: `{"a":"x"}`, have: `{"a":"z"}`, ok: false},
		{name: "nested maps with defaults", want: `{"spec":{"replicas":3}}`, have: `{"spec":{"replicas":3,"revisionHistoryLimit":10}}`, ok: true},
		{name: "nested map value differs", want: `{"spec":{"replicas":3}}`, have: `{"spec":{"replicas":1}}`, ok: false},
		{name: "map where have has a scalar", want: `{"spec":{"replicas":3}}`, have: `{"spec":"x"}`, ok: false},
		{name: "map where have is null", want: `{"spec":{}}`, have: `{"spec":null}`, ok: false},
		{name: "lists of equal length and elements", want: `{"l":[1,"a",true]}`, have: `{"l":[1,"a",true]}`, ok: true},
		{name: "list elements are subsets", want: `{"l":[{"name":"a"}]}`, have: `{"l":[{"name":"a","default":1}]}`, ok: true},
		{name: "list longer in have", want: `{"l":[1]}`, have: `{"l":[1,2]}`, ok: false},
		{name: "list shorter in have", want: `{"l":[1,2]}`, have: `{"l":[1]}`, ok: false},
		{name: "list element mismatch", want: `{"l":[1,2]}`, have: `{"l":[1,3]}`, ok: false},
		{name: "list order matters", want: `{"l":[1,2]}`, have: `{"l":[2,1]}`, ok: false},
		{name: "list where have has a map", want: `{"l":[1]}`, have: `{"l":{"0":1}}`, ok: false},
		{name: "numbers equal as float64", want: `5432`, have: `5432.0`, ok: true},
		{name: "numbers differ", want: `5432`, have: `5433`, ok: false},
		{name: "number vs string", want: `1`, have: `"1"`, ok: false},
		{name: "equal strings", want: `"a"`, have: `"a"`, ok: true},
		{name: "booleans differ", want: `false`, have: `true`, ok: false},
		{name: "null matches null", want: `null`, have: `null`, ok: true},
		{name: "null vs value", want: `null`, have: `0`, ok: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := IsSubset(fromJSON(t, tt.want), fromJSON(t, tt.have)); got != tt.ok {
				t.Errorf("IsSubset(%s, %s) = %v, want %v", tt.want, tt.have, got, tt.ok)
			}
		})
	}
}

func desiredConfigMap() *corev1ac.ConfigMapApplyConfiguration {
	return corev1ac.ConfigMap("cm", "ns").
		WithLabels(map[string]string{"app": "db"}).
		WithData(map[string]string{"key": "value"})
}

func hashOf(t *testing.T, desired any) string {
	t.Helper()
	hash, err := Hash(desired)
	if err != nil {
		t.Fatalf("Hash: %v", err)
	}
	return hash
}

func TestUpToDate(t *testing.T) {
	hash := hashOf(t, desiredConfigMap())
	// live is the ConfigMap as a cache returns it: no TypeMeta, server-set metadata, our annotation.
	live := func(mutate func(*corev1.ConfigMap)) *corev1.ConfigMap {
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{
				Name: "cm", Namespace: "ns", UID: "uid-9", ResourceVersion: "42",
				Labels:      map[string]string{"app": "db", "added-by-someone": "x"},
				Annotations: map[string]string{HashAnnotation: hash},
			},
			Data: map[string]string{"key": "value"},
		}
		if mutate != nil {
			mutate(cm)
		}
		return cm
	}
	tests := []struct {
		name string
		live *corev1.ConfigMap
		want bool
	}{
		{name: "matching hash and subset, no TypeMeta", live: live(nil), want: true},
		{name: "with TypeMeta", live: live(func(cm *corev1.ConfigMap) {
			cm.TypeMeta = metav1.TypeMeta{Kind: "ConfigMap", APIVersion: "v1"}
		}), want: true},
		{name: "hash annotation mismatch", live: live(func(cm *corev1.ConfigMap) {
			cm.Annotations[HashAnnotation] = "0123"
		}), want: false},
		{name: "hash annotation missing", live: live(func(cm *corev1.ConfigMap) { cm.Annotations = nil }), want: false},
		{name: "data value changed by someone", live: live(func(cm *corev1.ConfigMap) { cm.Data["key"] = "edited" }), want: false},
		{name: "label removed by someone", live: live(func(cm *corev1.ConfigMap) { delete(cm.Labels, "app") }), want: false},
		{name: "extra data key is ignored", live: live(func(cm *corev1.ConfigMap) { cm.Data["other"] = "x" }), want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := UpToDate(desiredConfigMap(), tt.live, hash)
			if err != nil {
				t.Fatalf("UpToDate: %v", err)
			}
			if got != tt.want {
				t.Errorf("UpToDate = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestHash(t *testing.T) {
	base := hashOf(t, desiredConfigMap())
	if len(base) != 24 {
		t.Errorf("hash %q has %d characters, want 24", base, len(base))
	}
	tests := []struct {
		name     string
		desired  *corev1ac.ConfigMapApplyConfiguration
		wantSame bool
	}{
		{name: "equal input", desired: desiredConfigMap(), wantSame: true},
		{name: "data value differs", desired: desiredConfigMap().WithData(map[string]string{"key": "other"})},
		{name: "extra label", desired: desiredConfigMap().WithLabels(map[string]string{"tier": "db"})},
		{name: "field removed", desired: corev1ac.ConfigMap("cm", "ns").WithLabels(map[string]string{"app": "db"})},
		{name: "namespace differs", desired: corev1ac.ConfigMap("cm", "other").
			WithLabels(map[string]string{"app": "db"}).WithData(map[string]string{"key": "value"})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if same := hashOf(t, tt.desired) == base; same != tt.wantSame {
				t.Errorf("hash equal to base = %v, want %v", same, tt.wantSame)
			}
		})
	}
}

// roundTrip stores desired in a typed object the way the API server and cache would: the
// typed form drops whatever it cannot represent, such as empty omitempty strings.
func roundTrip(t *testing.T, desired any, hash string, live client.Object) client.Object {
	t.Helper()
	data, err := json.Marshal(desired)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	if err := json.Unmarshal(data, live); err != nil {
		t.Fatalf("unmarshal into %T: %v", live, err)
	}
	live.SetAnnotations(map[string]string{HashAnnotation: hash})
	return live
}

// Every object the builders produce must be up to date once stored unchanged; otherwise pgpilot
// would re-apply it on every reconcile of an idle cluster.
func TestBuiltObjectsAreUpToDateAfterTypedRoundTrip(t *testing.T) {
	c := &pgv1.PostgresCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns", UID: "uid-1"},
		Spec: pgv1.PostgresClusterSpec{
			Instances: 3,
			Storage:   pgv1.StorageSpec{Size: resource.MustParse("1Gi"), ReclaimPolicy: pgv1.PVCReclaimRetain},
			Bootstrap: pgv1.BootstrapSpec{InitDB: pgv1.InitDBSpec{Database: "app", Owner: "app"}},
		},
	}
	sts, err := builder.BuildStatefulSet(c, builder.Images{Postgres: "postgres:17", Agent: "pgpilot-operator:test"})
	if err != nil {
		t.Fatalf("BuildStatefulSet: %v", err)
	}
	services := builder.BuildServices(c)
	tests := []struct {
		name    string
		desired any
		live    client.Object
	}{
		{name: "ConfigMap", desired: builder.BuildConfigMap(c), live: &corev1.ConfigMap{}},
		{name: "StatefulSet", desired: sts, live: &appsv1.StatefulSet{}},
		{name: "PodDisruptionBudget", desired: builder.BuildPodDisruptionBudget(c), live: &policyv1.PodDisruptionBudget{}},
		{name: "headless Service", desired: services[0], live: &corev1.Service{}},
		{name: "read-write Service", desired: services[1], live: &corev1.Service{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hash := hashOf(t, tt.desired)
			live := roundTrip(t, tt.desired, hash, tt.live)
			upToDate, err := UpToDate(tt.desired, live, hash)
			if err != nil {
				t.Fatalf("UpToDate: %v", err)
			}
			if !upToDate {
				t.Errorf("%s stored unchanged is not up to date", tt.name)
			}
		})
	}
}
