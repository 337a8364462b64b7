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

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	"github.com/pgpilot/pgpilot-operator/internal/builder"
)

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
		{name: "ConfigMap", desired: builder.BuildConfigMap(c, agentapi.TLSPolicy{}), live: &corev1.ConfigMap{}},
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
