package builder

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// revisionHashLength is the longest hash the StatefulSet controller appends to the
// StatefulSet's name in its pods' controller-revision-hash label (a uint32, safe-encoded).
const revisionHashLength = 10

// derivedNames are the names and label values Kubernetes derives from a cluster's name, each
// with the validation Kubernetes applies to it. A new child kind belongs here.
func derivedNames(c *pgv1.PostgresCluster) map[string]func(string) []string {
	names := map[string]func(string) []string{
		StatefulSetName(c):         validation.IsDNS1123Subdomain,
		ConfigMapName(c):           validation.IsDNS1123Subdomain,
		PodDisruptionBudgetName(c): validation.IsDNS1123Subdomain,
		SuperuserSecretName(c):     validation.IsDNS1123Subdomain,
		ReplicationSecretName(c):   validation.IsDNS1123Subdomain,
		AgentSecretName(c):         validation.IsDNS1123Subdomain,
		AppSecretName(c):           validation.IsDNS1123Subdomain,
		HeadlessServiceName(c):     validation.IsDNS1035Label,
		ReadWriteServiceName(c):    validation.IsDNS1035Label,
		ReadOnlyServiceName(c):     validation.IsDNS1035Label,
		AnyServiceName(c):          validation.IsDNS1035Label,
		// The StatefulSet's pods' controller-revision-hash label.
		StatefulSetName(c) + "-" + strings.Repeat("z", revisionHashLength): validation.IsValidLabelValue,
	}
	for _, value := range CommonLabels(c) {
		names[value] = validation.IsValidLabelValue
	}
	for ordinal := range 9 { // spec.instances is at most 9
		pod := InstancePodName(c, ordinal)
		names[pod] = validation.IsDNS1123Label // the pod's hostname, and its pod-name label
		names[fmt.Sprintf("%s-%s-%d", DataVolumeName, StatefulSetName(c), ordinal)] = validation.IsDNS1123Subdomain
	}
	return names
}

func TestEveryDerivedNameIsValidAtTheLongestClusterName(t *testing.T) {
	c := newCluster(func(c *pgv1.PostgresCluster) {
		c.Name = "a" + strings.Repeat("b9-", 20)[:pgv1.MaxClusterNameLength-2] + "z"
	})
	if len(c.Name) != pgv1.MaxClusterNameLength {
		t.Fatalf("test name has %d characters", len(c.Name))
	}
	for name, validate := range derivedNames(c) {
		if errs := validate(name); len(errs) > 0 {
			t.Errorf("%q: %s", name, strings.Join(errs, "; "))
		}
	}
}

// The limit is as high as it can be: one character more breaks a derived name.
func TestOneCharacterMoreBreaksADerivedName(t *testing.T) {
	c := newCluster(func(c *pgv1.PostgresCluster) { c.Name = strings.Repeat("a", pgv1.MaxClusterNameLength+1) })
	for name, validate := range derivedNames(c) {
		if len(validate(name)) > 0 {
			return
		}
	}
	t.Errorf("every name derived from %d characters is valid: MaxClusterNameLength could be higher", len(c.Name))
}

func TestIsInstancePod(t *testing.T) {
	c := &pgv1.PostgresCluster{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns"}}
	controlledBy := func(apiVersion, kind, name string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: name, Controller: ptr.To(true)}}
	}
	for _, tc := range []struct {
		name   string
		pod    string
		owners []metav1.OwnerReference
		want   bool
	}{
		{"the StatefulSet's pod", "db-0", controlledBy("apps/v1", "StatefulSet", "db"), true},
		{"orphaned while the StatefulSet is replaced", "db-12", nil, true},
		{"another cluster's pod, whose name starts the same", "db-1-0", controlledBy("apps/v1", "StatefulSet", "db-1"), false},
		{"labelled like an instance, named otherwise", "decoy", nil, false},
		{"named like an instance, controlled by something else", "db-3", controlledBy("batch/v1", "Job", "db"), false},
		{"controlled by another StatefulSet", "db-0", controlledBy("apps/v1", "StatefulSet", "other"), false},
		{"no ordinal", "db-", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: tc.pod, Namespace: "ns", OwnerReferences: tc.owners}}
			if got := IsInstancePod(c, pod); got != tc.want {
				t.Errorf("IsInstancePod(%s) = %v, want %v", tc.pod, got, tc.want)
			}
		})
	}
}
