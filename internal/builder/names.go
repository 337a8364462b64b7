// Package builder turns a PostgresCluster into the objects it should own. Every function here is
// pure: no client, no clock, no randomness passed in implicitly, so each is table-tested alone.
package builder

import (
	"maps"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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

// IsInstancePod tells whether pod is one of c's StatefulSet's pods, and so may be sent the
// agents' token: named as the StatefulSet names its pods, and controlled by it — or by nothing,
// for the moment between pgpilot replacing the StatefulSet (its pods orphaned, kept running)
// and the new one adopting them. Labels alone are not enough: whoever may label a pod could
// make it look like an instance.
func IsInstancePod(c *pgv1.PostgresCluster, pod *corev1.Pod) bool {
	ordinal, ok := strings.CutPrefix(pod.Name, StatefulSetName(c)+"-")
	if !ok || ordinal == "" || strings.Trim(ordinal, "0123456789") != "" {
		return false
	}
	owner := metav1.GetControllerOf(pod)
	return owner == nil || (owner.Kind == "StatefulSet" && owner.Name == StatefulSetName(c) &&
		strings.HasPrefix(owner.APIVersion, "apps/"))
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
