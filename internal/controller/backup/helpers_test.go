package backup

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

var scheme = runtime.NewScheme()

// withTypes registers the built-in and pgpilot's types in the tests' scheme.
func withTypes(t *testing.T) {
	t.Helper()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := pgv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
}

// testCluster is cluster db in namespace ns with instances.
func testCluster(instances int32) *pgv1.PostgresCluster {
	c := &pgv1.PostgresCluster{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns"}}
	c.Spec.Instances = instances
	return c
}
