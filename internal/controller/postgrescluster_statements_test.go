package controller

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
)

// A new cluster loads pg_stat_statements; one running without it (an earlier release's) is not
// restarted to load it; one whose configuration loads it keeps it, status or no status.
func TestLoadsStatementStatistics(t *testing.T) {
	running := &appsv1.StatefulSet{}
	for _, c := range []struct {
		name    string
		sts     *appsv1.StatefulSet
		primary string
		conf    string
		want    bool
	}{
		{name: "a new cluster", want: true},
		{name: "a cluster of an earlier release", sts: running, primary: "db-0", conf: "max_connections = '100'\n"},
		{name: "its StatefulSet deleted: still no restart", primary: "db-0", conf: "max_connections = '100'\n"},
		{name: "its configuration loads it", sts: running, primary: "db-0", conf: "shared_preload_libraries = 'pgaudit, pg_stat_statements'\n", want: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			cluster := testCluster(3)
			cluster.Status.CurrentPrimary = c.primary
			var objects []client.Object
			if c.conf != "" {
				objects = append(objects, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: pgbuilder.ConfigMapName(cluster), Namespace: cluster.Namespace},
					Data: map[string]string{agentapi.PostgresqlConfFile: c.conf}})
			}
			r := &PostgresClusterReconciler{Client: cachedDatabases(t, objects...)}
			s := newScope(cluster)
			got, err := r.loadsStatementStatistics(context.Background(), s, c.sts)
			if err != nil || got != c.want || s.cluster.Status.StatementStatistics != c.want {
				t.Errorf("loads = %v (%v), status %v; want %v", got, err, s.cluster.Status.StatementStatistics, c.want)
			}
		})
	}
}
