package builder

import (
	"fmt"
	"slices"
	"strings"

	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	"github.com/pgpilot/pgpilot-operator/internal/instance/agentapi"
)

// Paths inside an instance pod.
const (
	ConfigMountPath = "/etc/pgpilot"
	DataMountPath   = "/var/lib/postgresql/data"
	PGDataPath      = DataMountPath + "/pgdata"
)

// managedParameters are the settings the cluster's file fixes: replication needs them, and
// the Services reach every address. Each is one of pgv1.ManagedParameters, which the CRD
// rejects in spec.postgresql. Where the files, the socket and the port are is the agent's to
// say (agent.NewInstance), not the file's.
func managedParameters(c *pgv1.PostgresCluster) [][2]string {
	return [][2]string{
		{"listen_addresses", quote("*")},
		{"cluster_name", quote(c.Name)},
		{"wal_level", "replica"},
		{"hot_standby", "on"},
		{"wal_log_hints", "on"},
		{"password_encryption", "scram-sha-256"},
	}
}

// defaultParameters are pgpilot's defaults that the user may override.
var defaultParameters = map[string]string{
	"max_wal_senders":       "10",
	"max_replication_slots": "10",
	"wal_keep_size":         "512MB",
	"logging_collector":     "off",
	"log_destination":       "stderr",
}

// PostgresqlConf renders the complete postgresql.conf of every instance: pgpilot's managed
// settings, then defaults merged with spec.postgresql.parameters, sorted so the output is stable.
func PostgresqlConf(c *pgv1.PostgresCluster) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Managed by pgpilot. Change spec.postgresql of PostgresCluster %s instead.\n", c.Name)
	for _, kv := range managedParameters(c) {
		fmt.Fprintf(&b, "%s = %s\n", kv[0], kv[1])
	}
	params := map[string]string{}
	for k, v := range defaultParameters {
		params[k] = v
	}
	for k, v := range c.Spec.PostgreSQL.Parameters {
		params[k] = v
	}
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s = %s\n", k, quote(params[k]))
	}
	return b.String()
}

// PgHBAConf renders pg_hba.conf: the user's lines first (first match wins), then pgpilot's.
func PgHBAConf(c *pgv1.PostgresCluster) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Managed by pgpilot. Change spec.postgresql.pgHBA of PostgresCluster %s instead.\n", c.Name)
	for _, line := range c.Spec.PostgreSQL.PgHBA {
		b.WriteString(strings.TrimSpace(line) + "\n")
	}
	b.WriteString("local all all peer\n")
	b.WriteString("host all all 127.0.0.1/32 scram-sha-256\n")
	b.WriteString("host all all ::1/128 scram-sha-256\n")
	fmt.Fprintf(&b, "host replication %s all scram-sha-256\n", agentapi.DefaultReplicationUser)
	b.WriteString("host all all all scram-sha-256\n")
	return b.String()
}

// BuildConfigMap holds the instances' configuration files.
func BuildConfigMap(c *pgv1.PostgresCluster) *corev1ac.ConfigMapApplyConfiguration {
	return corev1ac.ConfigMap(ConfigMapName(c), c.Namespace).
		WithLabels(CommonLabels(c)).
		WithOwnerReferences(ownerReference(c)).
		WithData(map[string]string{
			agentapi.PostgresqlConfFile: PostgresqlConf(c),
			agentapi.HBAConfFile:        PgHBAConf(c),
		})
}

// quote renders a postgresql.conf string literal; every setting type accepts the quoted form.
func quote(v string) string {
	return "'" + strings.ReplaceAll(v, "'", "''") + "'"
}
