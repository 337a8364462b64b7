// Package builder turns a PostgresCluster into the objects it should own. Every function here is
// pure: no client, no clock, no randomness passed in implicitly, so each is table-tested alone.
package builder

import (
	"maps"
	"strconv"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// FieldOwner is the single server-side-apply field manager pgpilot writes with.
const FieldOwner = "pgpilot"

// Labels pgpilot puts on what it manages. ManagedByLabel scopes the manager's cache.
const (
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedByValue = "pgpilot"
	NameLabel      = "app.kubernetes.io/name"
	InstanceLabel  = "app.kubernetes.io/instance"
	ClusterLabel   = "postgres.pgpilot.io/cluster"
	RoleLabel      = "postgres.pgpilot.io/role"

	RolePrimary = "primary"
	RoleReplica = "replica"
)

// Names of the objects owned by one cluster.
func StatefulSetName(c *pgv1.PostgresCluster) string         { return c.Name }
func ConfigMapName(c *pgv1.PostgresCluster) string           { return c.Name + "-config" }
func PodDisruptionBudgetName(c *pgv1.PostgresCluster) string { return c.Name }
func HeadlessServiceName(c *pgv1.PostgresCluster) string     { return c.Name + "-instances" }
func ReadWriteServiceName(c *pgv1.PostgresCluster) string    { return c.Name + "-rw" }
func ReadOnlyServiceName(c *pgv1.PostgresCluster) string     { return c.Name + "-ro" }
func AnyServiceName(c *pgv1.PostgresCluster) string          { return c.Name + "-r" }
func SuperuserSecretName(c *pgv1.PostgresCluster) string     { return c.Name + "-superuser" }
func ReplicationSecretName(c *pgv1.PostgresCluster) string   { return c.Name + "-replication" }
func AgentSecretName(c *pgv1.PostgresCluster) string         { return c.Name + "-agent" }

// UsesUserAppSecret reports whether spec.bootstrap.initdb.secret names a Secret the user supplies.
// An empty reference (secret: {}, which the CRD accepts) counts as unset: pgpilot generates one.
func UsesUserAppSecret(c *pgv1.PostgresCluster) bool {
	ref := c.Spec.Bootstrap.InitDB.Secret
	return ref != nil && ref.Name != ""
}

// AppSecretName is the user's secret when spec.bootstrap.initdb.secret is set, else the generated one.
func AppSecretName(c *pgv1.PostgresCluster) string {
	if UsesUserAppSecret(c) {
		return c.Spec.Bootstrap.InitDB.Secret.Name
	}
	return c.Name + "-app"
}

// InstancePodName is the name the StatefulSet gives instance ordinal i.
func InstancePodName(c *pgv1.PostgresCluster, ordinal int) string {
	return StatefulSetName(c) + "-" + strconv.Itoa(ordinal)
}

// SelectorLabels select every instance pod of the cluster. They are immutable on the
// StatefulSet, so they never grow.
func SelectorLabels(c *pgv1.PostgresCluster) map[string]string {
	return map[string]string{ClusterLabel: c.Name}
}

// CommonLabels go on every object pgpilot owns for the cluster.
func CommonLabels(c *pgv1.PostgresCluster) map[string]string {
	labels := SelectorLabels(c)
	maps.Copy(labels, map[string]string{
		ManagedByLabel: ManagedByValue,
		NameLabel:      "postgresql",
		InstanceLabel:  c.Name,
	})
	return labels
}

// RoleSelector selects the cluster's instances that currently have role.
func RoleSelector(c *pgv1.PostgresCluster, role string) map[string]string {
	labels := SelectorLabels(c)
	labels[RoleLabel] = role
	return labels
}
