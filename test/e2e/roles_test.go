//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// rolesConverge bounds how long a change to spec.roles or a role Secret takes to hold on the
// primary: the role Secrets are read once a minute, the agent looks for drift once a minute, and
// the operator reads the report at its next reconcile (30 s).
const rolesConverge = 3 * time.Minute

// expectManagedRoles declares a group and a login role with its password Secret on cluster, and
// checks that the role logs in over TLS, that a new password in the Secret works without a
// restart, and that a change by hand is put back and announced.
func expectManagedRoles(ctx context.Context, cluster *pgv1.PostgresCluster, superuserSecret string) {
	restarts := restartCounts(ctx, cluster)
	login := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "reader-login", Namespace: cluster.Namespace},
		Type: corev1.SecretTypeBasicAuth, StringData: map[string]string{corev1.BasicAuthUsernameKey: "reader", corev1.BasicAuthPasswordKey: "first-password"}}
	Expect(k8s.Create(ctx, login)).To(Succeed())
	Expect(retryUpdate(ctx, cluster, func() {
		cluster.Spec.Roles = []pgv1.ManagedRoleSpec{{Name: "reporting", Comment: "read-only group"},
			{Name: "reader", Login: true, InRoles: []string{"reporting", "pg_read_all_data"}, PasswordSecret: &corev1.LocalObjectReference{Name: login.Name}}}
	})).To(Succeed())
	Eventually(func(g Gomega) {
		roles := getCluster(ctx, cluster).Status.Roles
		g.Expect(roles).To(HaveLen(2))
		for _, role := range roles {
			g.Expect(role.State).To(Equal(agentapi.RoleApplied), "%+v", role)
		}
	}).WithTimeout(rolesConverge).WithPolling(2 * time.Second).Should(Succeed())
	logs, ok := psql(ctx, cluster, "psql-reader", cluster.Name+"-rw", login.Name, "postgres",
		"SELECT ssl::text || ' ' || pg_has_role('reporting', 'member')::text FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
	Expect(ok).To(BeTrue(), "reader cannot log in:\n%s", logs)
	Expect(logs).To(ContainSubstring("true true"), "reader is not on TLS, or not a member of reporting")

	Expect(retryUpdate(ctx, login, func() { login.StringData = map[string]string{corev1.BasicAuthPasswordKey: "second-password"} })).To(Succeed())
	attempt := 0
	Eventually(func() bool {
		attempt++
		_, ok := psql(ctx, cluster, fmt.Sprintf("psql-reader-rotated-%d", attempt), cluster.Name+"-rw", login.Name, "postgres", "SELECT 1")
		return ok
	}).WithTimeout(rolesConverge).WithPolling(time.Second).Should(BeTrue(), "the rotated password does not let reader in")

	logs, ok = psql(ctx, cluster, "psql-drift", cluster.Name+"-rw", superuserSecret, "postgres", "ALTER ROLE reader NOLOGIN")
	Expect(ok).To(BeTrue(), "%s", logs)
	Eventually(func(g Gomega) {
		events := &corev1.EventList{}
		g.Expect(k8s.List(ctx, events, client.InNamespace(cluster.Namespace))).To(Succeed())
		var drift []string
		for _, event := range events.Items {
			if event.Reason == "RoleDrift" {
				drift = append(drift, event.Message)
			}
		}
		g.Expect(strings.Join(drift, "\n")).To(ContainSubstring("role reader was changed by hand and put back: [login]"))
	}).WithTimeout(rolesConverge).WithPolling(2 * time.Second).Should(Succeed())
	logs, ok = psql(ctx, cluster, "psql-reader-after-drift", cluster.Name+"-rw", login.Name, "postgres", "SELECT 1")
	Expect(ok).To(BeTrue(), "reader cannot log in after its login was put back:\n%s", logs)
	Expect(restartCounts(ctx, cluster)).To(Equal(restarts), "no instance may restart for managed roles")
}

// expectManagedDatabases declares a Database owned by the managed group role, with a schema and
// a trusted extension, and one the image does not ship: the database is made, the extension
// works for its owner's members, the missing one is reported and the rest applied; deleting the
// object with reclaimPolicy delete drops the database, and the object goes only after.
func expectManagedDatabases(ctx context.Context, cluster *pgv1.PostgresCluster, superuserSecret string) {
	db := &pgv1.Database{ObjectMeta: metav1.ObjectMeta{Name: "reports", Namespace: cluster.Namespace},
		Spec: pgv1.DatabaseSpec{Cluster: corev1.LocalObjectReference{Name: cluster.Name}, Name: "reports", Owner: "reporting",
			ReclaimPolicy: pgv1.ReclaimDelete,
			Schemas:       []pgv1.DatabaseSchemaSpec{{Name: "marts"}},
			Extensions:    []pgv1.DatabaseExtensionSpec{{Name: "pg_trgm", Schema: "marts"}, {Name: "postgis"}}}}
	team := namespaceDatabaseEditor(ctx, cluster.Namespace)
	Expect(team.Create(ctx, db)).To(Succeed(), "a user with rights on Databases in the namespace only")
	Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(db), db)).To(Succeed())
		g.Expect(db.Status.State).To(Equal(agentapi.RoleError), "%+v", db.Status)
		g.Expect(db.Status.Message).To(ContainSubstring("does not ship extension postgis"))
		g.Expect(db.Status.Schemas).To(ConsistOf(HaveField("State", agentapi.RoleApplied)))
		g.Expect(db.Status.Extensions).To(ContainElement(And(HaveField("Name", "pg_trgm"), HaveField("State", agentapi.RoleApplied))))
	}).WithTimeout(rolesConverge).WithPolling(2 * time.Second).Should(Succeed())
	Expect(db.Finalizers).To(ContainElement(pgv1.DatabaseDropFinalizer))
	logs, ok := psql(ctx, cluster, "psql-reports", cluster.Name+"-rw", superuserSecret, "reports",
		"SET ROLE reporting; CREATE TABLE marts.words AS SELECT 'postgres' AS w; SELECT round(marts.similarity(w, 'postgre')::numeric, 1) FROM marts.words")
	Expect(ok).To(BeTrue(), "%s", logs)
	Expect(logs).To(ContainSubstring("0.7"), "pg_trgm in marts does not answer for the database's owner")

	Expect(team.Delete(ctx, db)).To(Succeed())
	Eventually(func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(db), &pgv1.Database{}))
	}).WithTimeout(rolesConverge).WithPolling(2*time.Second).Should(BeTrue(), "the Database stays after its deletion")
	logs, ok = psql(ctx, cluster, "psql-reports-gone", cluster.Name+"-rw", superuserSecret, "postgres",
		"SELECT count(*) FROM pg_database WHERE datname = 'reports'")
	Expect(ok).To(BeTrue(), "%s", logs)
	Expect(strings.TrimSpace(logs)).To(HaveSuffix("0"), "the database reports is still there")
}

// namespaceDatabaseEditor is a client of a user who may create, read and delete Databases in
// namespace, and nothing else anywhere: a team owning its databases.
func namespaceDatabaseEditor(ctx context.Context, namespace string) client.Client {
	const user = "team-member"
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "database-editor", Namespace: namespace},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{pgv1.GroupVersion.Group}, Resources: []string{"databases"},
			Verbs: []string{"create", "get", "list", "watch", "delete"}}}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "database-editor", Namespace: namespace},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}
	Expect(k8s.Create(ctx, role)).To(Succeed())
	Expect(k8s.Create(ctx, binding)).To(Succeed())
	config := rest.CopyConfig(restConfig)
	config.Impersonate = rest.ImpersonationConfig{UserName: user}
	team, err := client.New(config, client.Options{Scheme: k8s.Scheme()})
	Expect(err).NotTo(HaveOccurred())
	return team
}
