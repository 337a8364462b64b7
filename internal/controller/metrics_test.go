package controller

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

func TestClusterPhasesCountsTheCachedClusters(t *testing.T) {
	withTypes(t)
	var objects []client.Object
	for i, phase := range []pgv1.Phase{pgv1.PhaseReady, pgv1.PhaseReady, pgv1.PhaseFailingOver} {
		objects = append(objects, &pgv1.PostgresCluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: string(rune('a' + i))},
			Status:     pgv1.PostgresClusterStatus{Phase: phase},
		})
	}
	reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objects...).Build()
	want := `
# HELP pgpilot_clusters PostgresClusters the operator manages, by phase.
# TYPE pgpilot_clusters gauge
pgpilot_clusters{phase="FailingOver"} 1
pgpilot_clusters{phase="Ready"} 2
`
	if err := testutil.CollectAndCompare(ClusterPhases{Reader: reader}, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}
