package builder

import (
	"encoding/json"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// newCluster is a valid three-instance cluster "ns/db"; mutators adjust it per test case.
func newCluster(mutators ...func(*pgv1.PostgresCluster)) *pgv1.PostgresCluster {
	c := &pgv1.PostgresCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns", UID: "uid-1"},
		Spec: pgv1.PostgresClusterSpec{
			Instances: 3,
			Storage:   pgv1.StorageSpec{Size: resource.MustParse("1Gi")},
			Bootstrap: pgv1.BootstrapSpec{InitDB: pgv1.InitDBSpec{Database: "app", Owner: "app"}},
		},
	}
	for _, mutate := range mutators {
		mutate(c)
	}
	return c
}

// wantOwnerReference is the controller reference every owned object must carry for newCluster.
func wantOwnerReference() metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion:         "postgres.pgpilot.io/v1alpha1",
		Kind:               "PostgresCluster",
		Name:               "db",
		UID:                "uid-1",
		Controller:         ptr.To(true),
		BlockOwnerDeletion: ptr.To(true),
	}
}

// wantCommonLabels are the labels every owned object of newCluster carries.
func wantCommonLabels() map[string]string {
	return map[string]string{
		"postgres.pgpilot.io/cluster":  "db",
		"app.kubernetes.io/managed-by": "pgpilot",
		"app.kubernetes.io/name":       "postgresql",
		"app.kubernetes.io/instance":   "db",
	}
}

// toTyped converts an apply configuration into its typed API object through their shared JSON
// shape, which makes assertions on deeply nested fields readable.
func toTyped[T any](t *testing.T, applyConfig any) T {
	t.Helper()
	var out T
	data, err := json.Marshal(applyConfig)
	if err != nil {
		t.Fatalf("marshal apply configuration: %v", err)
	}
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatalf("unmarshal into %T: %v", out, err)
	}
	return out
}
