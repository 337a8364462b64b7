//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// A pass over cutDatabases Databases of cutSchemas schemas each lasts seconds: every database
// and schema is a transaction of its own, committed on a synchronous standby, and the agent
// makes 4 databases at a time, so the fifth is made only once one of the first four has all
// its schemas.
const (
	cutDatabases = 6
	cutSchemas   = 64 // a Database's most
)

// expectCatalogCompletedAfterAFailover declares cutDatabases Databases and, once the primary has
// made some of them but not all, kills its postmaster under the write checker (underFault, as
// name): the new primary completes what the old one left half done — every database, recorded
// as pgpilot's, every schema owned as declared, each Database Applied — and, asked to, drops
// them all.
func expectCatalogCompletedAfterAFailover(ctx context.Context, cluster *pgv1.PostgresCluster, name string) {
	databases := make([]*pgv1.Database, cutDatabases)
	for i := range databases {
		db := &pgv1.Database{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bulk-%d", i), Namespace: cluster.Namespace},
			Spec: pgv1.DatabaseSpec{Cluster: corev1.LocalObjectReference{Name: cluster.Name}, Name: fmt.Sprintf("bulk_%d", i),
				Owner: "app", ReclaimPolicy: pgv1.ReclaimDelete}}
		for s := range cutSchemas {
			db.Spec.Schemas = append(db.Spec.Schemas, pgv1.DatabaseSchemaSpec{Name: fmt.Sprintf("s%02d", s)})
		}
		databases[i] = db
	}
	var checker *writeChecker
	underFault(ctx, cluster, name, rtoCrash, func(old *corev1.Pod) {
		for _, db := range databases {
			Expect(k8s.Create(ctx, db)).To(Succeed())
		}
		made := waitForPassUnderWay(ctx, cluster)
		checker.faultBegan(time.Now())
		killPostmaster(old)
		AddReportEntry(name+": made when the primary was killed", made)
	}, func(w *writeChecker) { checker = w })

	Eventually(func(g Gomega) {
		for _, db := range databases {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(db), db)).To(Succeed())
			g.Expect(db.Status.State).To(Equal(agentapi.RoleApplied), "%s: %s", db.Name, db.Status.Message)
			g.Expect(db.Status.Schemas).To(HaveLen(cutSchemas), db.Name)
		}
	}).WithTimeout(rolesConverge).WithPolling(2 * time.Second).Should(Succeed())
	Expect(superuserQuery(ctx, cluster, "postgres", `SELECT count(*)::text FROM pgpilot.databases m JOIN pg_database d ON d.oid = m.oid
		WHERE d.datname LIKE 'bulk\_%'`)).To(Equal(fmt.Sprint(cutDatabases)), "databases recorded as made by pgpilot")
	for _, db := range databases {
		Expect(superuserQuery(ctx, cluster, db.Spec.Name, `SELECT count(*) FILTER (WHERE pg_get_userbyid(nspowner) = 'app') || '/' || count(*)
			FROM pg_namespace WHERE nspname ~ '^s[0-9]+$'`)).To(Equal(fmt.Sprintf("%d/%d", cutSchemas, cutSchemas)),
			"schemas owned by app / schemas, in %s", db.Spec.Name)
	}

	for _, db := range databases {
		Expect(k8s.Delete(ctx, db)).To(Succeed())
	}
	Eventually(func(g Gomega) {
		for _, db := range databases {
			g.Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(db), &pgv1.Database{}))).To(BeTrue(), "%s stays", db.Name)
		}
	}).WithTimeout(rolesConverge).WithPolling(2 * time.Second).Should(Succeed())
	Expect(superuserQuery(ctx, cluster, "postgres", `SELECT count(*)::text FROM pg_database WHERE datname LIKE 'bulk\_%'`)).To(Equal("0"))
}

// waitForPassUnderWay waits until the primary has made some of the declared databases, not all,
// and says how many it had made.
func waitForPassUnderWay(ctx context.Context, cluster *pgv1.PostgresCluster) string {
	conn := connectSuperuser(ctx, cluster)
	defer func() { _ = conn.Close(context.Background()) }()
	made := 0
	Eventually(func(g Gomega) {
		g.Expect(conn.QueryRow(ctx, `SELECT count(*) FROM pg_database WHERE datname LIKE 'bulk\_%'`).Scan(&made)).To(Succeed())
		g.Expect(made).To(BeNumerically(">", 0))
	}).WithTimeout(operatorReacts).WithPolling(20 * time.Millisecond).Should(Succeed())
	Expect(made).To(BeNumerically("<", cutDatabases),
		"the pass had made every database before the fault: it cut nothing (more schemas, or a closer watch)")
	return fmt.Sprintf("%d of %d databases", made, cutDatabases)
}
