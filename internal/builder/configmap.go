package builder

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/utils/ptr"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
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
	// Failover reads these (docs/high-availability.md): a standby replies every second even when
	// idle, so that a primary cut off from the API server sees its peers, and both ends notice a
	// broken replication connection within 10 s instead of a minute.
	"wal_receiver_status_interval": "1s",
	"wal_receiver_timeout":         "10s",
	"wal_sender_timeout":           "10s",
	// A standby that lost its primary (a switchover, a failover) tries the new one every second
	// instead of every 5 s: with synchronous commits required, writes wait for that reconnect.
	"wal_retrieve_retry_interval": "1s",
	// The agent turns ssl on with the cluster's certificates (agent.NewInstance); clients and
	// standbys speak TLS 1.3, which every supported libpq does.
	"ssl_min_protocol_version": "TLSv1.3",
}

// PostgresqlConf renders the complete postgresql.conf of every instance: pgpilot's managed
// settings, then defaults merged with spec.postgresql.parameters, sorted so the output is stable.
// PostgreSQL compares setting names case-insensitively and the last line wins, so names are
// merged case-insensitively: a user's Max_Wal_Senders replaces the default max_wal_senders
// instead of being overridden by it.
func PostgresqlConf(c *pgv1.PostgresCluster) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Managed by pgpilot. Change spec.postgresql of PostgresCluster %s instead.\n", c.Name)
	for _, kv := range append(managedParameters(c), archiveParameters(c)...) {
		fmt.Fprintf(&b, "%s = %s\n", kv[0], kv[1])
	}
	params := map[string][2]string{}
	for k, v := range defaultParameters {
		params[k] = [2]string{k, v}
	}
	// Sorted, so that of two spellings of one name the same one wins on every render.
	for _, k := range slices.Sorted(maps.Keys(c.Spec.PostgreSQL.Parameters)) {
		if v := string(c.Spec.PostgreSQL.Parameters[k]); writableParameter(k, v) {
			params[strings.ToLower(k)] = [2]string{k, v}
		}
	}

	for _, lower := range slices.Sorted(maps.Keys(params)) {
		kv := params[lower]
		fmt.Fprintf(&b, "%s = %s\n", kv[0], quote(kv[1]))
	}
	return b.String()
}

// WithStatementStatistics is the cluster as the configuration builder should see it when pgpilot
// loads pg_stat_statements: shared_preload_libraries with it first, then the libraries the user
// names (under whichever spelling of the setting wins, as PostgresqlConf merges them).
func WithStatementStatistics(c *pgv1.PostgresCluster) *pgv1.PostgresCluster {
	out := c.DeepCopy()
	libraries := ""
	for _, k := range slices.Sorted(maps.Keys(out.Spec.PostgreSQL.Parameters)) {
		if strings.EqualFold(k, preloadSetting) {
			libraries = string(out.Spec.PostgreSQL.Parameters[k])
			delete(out.Spec.PostgreSQL.Parameters, k)
		}
	}
	merged := []string{StatementStatisticsLibrary}
	for _, library := range strings.Split(libraries, ",") {
		if library = strings.TrimSpace(library); library != "" && library != StatementStatisticsLibrary {
			merged = append(merged, library)
		}
	}
	if out.Spec.PostgreSQL.Parameters == nil {
		out.Spec.PostgreSQL.Parameters = map[string]pgv1.ParameterValue{}
	}
	out.Spec.PostgreSQL.Parameters[preloadSetting] = pgv1.ParameterValue(strings.Join(merged, ","))
	return out
}

// LoadsStatementStatistics says whether a postgresql.conf PostgresqlConf rendered loads
// pg_stat_statements.
func LoadsStatementStatistics(conf string) bool {
	for _, line := range strings.Split(conf, "\n") {
		name, value, ok := strings.Cut(line, " = ")
		if !ok || !strings.EqualFold(name, preloadSetting) {
			continue
		}
		for _, library := range strings.Split(strings.Trim(value, "'"), ",") {
			if strings.TrimSpace(library) == StatementStatisticsLibrary {
				return true
			}
		}
	}
	return false
}

const preloadSetting = "shared_preload_libraries"

// StatementStatisticsLibrary is the library, and extension, of statement statistics.
const StatementStatisticsLibrary = "pg_stat_statements"

// parameterName is what PostgreSQL's configuration file lexer reads as a setting name (an
// identifier, or extension.identifier), restricted to ASCII like the CRD's rule.
var parameterName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)

// fileDirectives look like settings but make PostgreSQL read other files.
var fileDirectives = []string{"include", "include_dir", "include_if_exists"}

// writableParameter says whether a user parameter can be written as exactly the one setting
// the user asked for. The CRD rejects every parameter this refuses; this check keeps the
// file safe for objects stored before those rules, or written around the API server.
func writableParameter(name, value string) bool {
	lower := strings.ToLower(name)
	return parameterName.MatchString(name) &&
		!slices.Contains(fileDirectives, lower) &&
		// Case-insensitively, as PostgreSQL compares names: WAL_LEVEL would override wal_level.
		!slices.Contains(pgv1.ManagedParameters, lower) &&
		!slices.Contains(pgv1.ForbiddenParameters, lower) &&
		(lower != "shared_preload_libraries" || pgv1.AllowedPreloadLibraries(value)) &&
		// PostgreSQL keeps values as C strings: no escape survives a NUL.
		!strings.ContainsRune(value, 0)
}

// PgHBAConf renders pg_hba.conf: the agent's own login first, then pgpilot's rules for its own
// roles and for replication, then the user's lines (first match wins), then pgpilot's rules
// for everyone else. The user's lines come after every rule for a role pgpilot manages, so none
// can let anyone in as the superuser, the replication or the monitoring role, or open the
// replication protocol (a "host all all 0.0.0.0/0 trust" reaches only the application's roles).
// With TLS required, remote connections must use TLS and the replication user logs in by its
// client certificate; before (while an instance still runs an agent without certificates),
// passwords over TLS or plain TCP are accepted as they were.
func PgHBAConf(c *pgv1.PostgresCluster, tls agentapi.TLSPolicy) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Managed by pgpilot. Change spec.postgresql.pgHBA of PostgresCluster %s instead.\n", c.Name)
	// The agent logs in as the superuser over the pod's socket without a password, so that it
	// can always set the passwords the Secrets hold (the agent writes the ident map).
	fmt.Fprintf(&b, "local all %s peer map=%s\n", agentapi.Superuser, agentapi.LocalSuperuserMap)
	fmt.Fprintf(&b, "local all %s peer map=%s\n", agentapi.MonitorUser, agentapi.LocalSuperuserMap)
	for _, rule := range reservedRules(tls, ptr.Deref(c.Spec.EnableSuperuserAccess, false)) {
		b.WriteString(rule + "\n")
	}
	for _, line := range c.Spec.PostgreSQL.PgHBA {
		b.WriteString(hbaLine(line) + "\n")
	}
	b.WriteString("local all all peer\n")
	b.WriteString("host all all 127.0.0.1/32 scram-sha-256\n")
	b.WriteString("host all all ::1/128 scram-sha-256\n")
	if tls.Required {
		b.WriteString("hostssl all all all scram-sha-256\n")
		return b.String()
	}
	b.WriteString("host all all all scram-sha-256\n")
	return b.String()
}

// reservedRules are the network rules of the roles pgpilot manages and of the replication
// protocol, which no user line may precede: each role logs in as pgpilot's later rules would let
// it (a password, over the pod's loopback without TLS as every in-pod client; the replication
// user's certificate), and nothing else does. The superuser logs in from the network only when
// superuserRemote (spec.enableSuperuserAccess, resolved by the operator).
func reservedRules(tls agentapi.TLSPolicy, superuserRemote bool) []string {
	network, replicationAuth := "host", "scram-sha-256"
	if tls.Required {
		network, replicationAuth = "hostssl", "cert"
	}
	roles := agentapi.Superuser + "," + agentapi.DefaultReplicationUser
	remote := roles
	if !superuserRemote {
		remote = agentapi.DefaultReplicationUser
	}
	return []string{
		fmt.Sprintf("%s replication %s all %s", network, agentapi.DefaultReplicationUser, replicationAuth),
		"host replication all all reject",
		fmt.Sprintf("host all %s 127.0.0.1/32 scram-sha-256", roles),
		fmt.Sprintf("host all %s ::1/128 scram-sha-256", roles),
		fmt.Sprintf("%s all %s all scram-sha-256", network, remote),
		fmt.Sprintf("host all %s,%s all reject", roles, agentapi.MonitorUser),
	}
}

// hbaLine keeps a user's entry to one pg_hba.conf record, which the CRD already requires.
// pg_hba.conf has no escapes: a line break would start a second record, a NUL would end the
// one PostgreSQL reads and a trailing backslash would continue it onto pgpilot's first rule
// (PostgreSQL 16 and later). Breaks and NULs become blanks, so an entry that hid a second
// record becomes one invalid record that PostgreSQL refuses, rather than two it accepts.
func hbaLine(entry string) string {
	entry = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == 0 {
			return ' '
		}
		return r
	}, entry)
	for {
		trimmed := strings.TrimRight(strings.TrimSpace(entry), `\`)
		if trimmed == entry {
			return entry
		}
		entry = trimmed
	}
}

// BuildConfigMap holds the instances' configuration files.
func BuildConfigMap(c *pgv1.PostgresCluster, tls agentapi.TLSPolicy) *corev1ac.ConfigMapApplyConfiguration {
	policy, _ := json.Marshal(tls) // one boolean
	data := map[string]string{
		agentapi.PostgresqlConfFile: PostgresqlConf(c),
		agentapi.HBAConfFile:        PgHBAConf(c, tls),
		agentapi.TLSPolicyFile:      string(policy),
	}
	if sync := SynchronousConfig(c); sync != nil {
		encoded, _ := json.Marshal(sync) // strings and numbers only
		data[agentapi.SynchronousFile] = string(encoded)
	}
	if backup := BackupConfig(c); backup != nil {
		encoded, _ := json.Marshal(backup) // strings, numbers and booleans only
		data[agentapi.BackupConfigFile] = string(encoded)
	}
	return corev1ac.ConfigMap(ConfigMapName(c), c.Namespace).
		WithLabels(CommonLabels(c)).
		WithOwnerReferences(ownerReference(c)).
		WithData(data)
}

// SynchronousConfig is what the primary's agent sets synchronous_standby_names from; nil for
// asynchronous replication.
func SynchronousConfig(c *pgv1.PostgresCluster) *agentapi.SynchronousConfig {
	sync := c.Spec.PostgreSQL.Synchronous
	if sync == nil {
		return nil
	}
	config := &agentapi.SynchronousConfig{
		Method:     cmp.Or(sync.Method, pgv1.SynchronousAny),
		Number:     int(max(sync.Number, 1)),
		Durability: cmp.Or(sync.DataDurability, pgv1.DurabilityRequired),
	}
	for i := range int(c.Spec.Instances) {
		config.Instances = append(config.Instances, InstancePodName(c, i))
	}
	return config
}

// quoteEscapes are the characters a postgresql.conf string literal cannot hold as they are.
// Inside quotes a backslash escapes the next character, so a value's own backslash must be
// doubled, or a trailing one would escape the closing quote. Strings cannot span lines, but
// the lexer reads \n and \r escapes.
var quoteEscapes = strings.NewReplacer(`\`, `\\`, `'`, `''`, "\n", `\n`, "\r", `\r`)

// quote renders a postgresql.conf string literal; every setting type accepts the quoted form.
func quote(v string) string {
	return "'" + quoteEscapes.Replace(v) + "'"
}
