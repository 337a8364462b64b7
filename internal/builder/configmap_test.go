package builder

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// confLines returns the non-comment lines of a rendered configuration file.
func confLines(conf string) []string {
	var lines []string
	for _, line := range strings.Split(strings.TrimSuffix(conf, "\n"), "\n") {
		if !strings.HasPrefix(line, "#") {
			lines = append(lines, line)
		}
	}
	return lines
}

// Every setting the file fixes is one the CRD rejects, so a user's value can never silently
// override it (user parameters are written after the managed ones).
func TestManagedSettingsAreRejectedByTheCRD(t *testing.T) {
	for _, kv := range managedParameters(newCluster()) {
		if !slices.Contains(pgv1.ManagedParameters, kv[0]) {
			t.Errorf("%s is set by pgpilot but not in pgv1.ManagedParameters", kv[0])
		}
	}
}

func TestPostgresqlConf(t *testing.T) {
	tests := []struct {
		name         string
		parameters   map[string]pgv1.ParameterValue
		wantLines    []string
		notWantLines []string
	}{
		{
			name:       "managed settings are always present",
			parameters: nil,
			wantLines: []string{
				"listen_addresses = '*'",
				"wal_level = replica",
				"hot_standby = on",
				"cluster_name = 'db'",
				"max_wal_senders = '10'",
			},
			// The agent says where the files, the socket and the port are (agent.NewInstance).
			notWantLines: []string{"port = 5432", "data_directory = '/var/lib/postgresql/data/pgdata'"},
		},
		{
			name:         "user parameter overrides a default",
			parameters:   map[string]pgv1.ParameterValue{"max_wal_senders": "20"},
			wantLines:    []string{"max_wal_senders = '20'"},
			notWantLines: []string{"max_wal_senders = '10'"},
		},
		{
			name:       "user parameter is added",
			parameters: map[string]pgv1.ParameterValue{"shared_buffers": "256MB"},
			wantLines:  []string{"shared_buffers = '256MB'", "max_wal_senders = '10'"},
		},
		{
			name:       "single quotes are escaped by doubling",
			parameters: map[string]pgv1.ParameterValue{"search_path": `"$user", 'public'`},
			wantLines:  []string{`search_path = '"$user", ''public'''`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conf := PostgresqlConf(newCluster(func(c *pgv1.PostgresCluster) { c.Spec.PostgreSQL.Parameters = tt.parameters }))
			lines := confLines(conf)
			for _, want := range tt.wantLines {
				if !slices.Contains(lines, want) {
					t.Errorf("missing line %q in:\n%s", want, conf)
				}
			}
			for _, notWant := range tt.notWantLines {
				if slices.Contains(lines, notWant) {
					t.Errorf("unexpected line %q in:\n%s", notWant, conf)
				}
			}
		})
	}
}

func TestPostgresqlConfIsDeterministicAndSorted(t *testing.T) {
	params := map[string]pgv1.ParameterValue{
		"work_mem": "8MB", "shared_buffers": "256MB", "max_connections": "200",
		"effective_cache_size": "1GB", "autovacuum": "on", "log_min_duration_statement": "500",
	}
	c := newCluster(func(c *pgv1.PostgresCluster) { c.Spec.PostgreSQL.Parameters = params })
	first := PostgresqlConf(c)
	for i := range 20 {
		if got := PostgresqlConf(c); got != first {
			t.Fatalf("render %d differs from the first:\n%s\nvs\n%s", i, got, first)
		}
	}

	// After the managed settings come the defaults and user parameters, sorted by name.
	lines := confLines(first)
	managed := len(managedParameters(newCluster()))
	if len(lines) != managed+len(defaultParameters)+len(params) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), managed+len(defaultParameters)+len(params), first)
	}
	var keys []string
	for _, line := range lines[managed:] {
		keys = append(keys, strings.SplitN(line, " = ", 2)[0])
	}
	if !slices.IsSorted(keys) {
		t.Errorf("parameters are not sorted: %v", keys)
	}
	if !strings.HasPrefix(first, "# Managed by pgpilot.") {
		t.Errorf("missing header comment:\n%s", first)
	}
}

func TestPgHBAConf(t *testing.T) {
	// First, so that no user line can lock the agent out of setting passwords or reading
	// statistics.
	agentLogins := []string{"local all postgres peer map=pgpilot", "local all pgpilot_monitor peer map=pgpilot"}
	// Then pgpilot's own roles and replication, which no user line may precede.
	reserved := []string{
		"hostssl replication streaming_replica all cert",
		"host replication all all reject",
		"host all postgres,streaming_replica 127.0.0.1/32 scram-sha-256",
		"host all postgres,streaming_replica ::1/128 scram-sha-256",
		"hostssl all streaming_replica all scram-sha-256",
		"host all postgres,streaming_replica,pgpilot_monitor all reject",
	}
	// spec.enableSuperuserAccess: the superuser's password from the network too.
	reservedRemoteSuperuser := slices.Clone(reserved)
	reservedRemoteSuperuser[4] = "hostssl all postgres,streaming_replica all scram-sha-256"
	reservedTransition := []string{
		"host replication streaming_replica all scram-sha-256",
		"host replication all all reject",
		"host all postgres,streaming_replica 127.0.0.1/32 scram-sha-256",
		"host all postgres,streaming_replica ::1/128 scram-sha-256",
		"host all streaming_replica all scram-sha-256",
		"host all postgres,streaming_replica,pgpilot_monitor all reject",
	}
	local := []string{
		"local all all peer",
		"host all all 127.0.0.1/32 scram-sha-256",
		"host all all ::1/128 scram-sha-256",
	}
	// Remote connections over TLS only.
	tlsRules := slices.Concat(local, []string{"hostssl all all all scram-sha-256"})
	// While an instance runs an agent without certificates: passwords, with or without TLS.
	transitionRules := slices.Concat(local, []string{"host all all all scram-sha-256"})
	required := agentapi.TLSPolicy{Required: true}
	tests := []struct {
		name      string
		pgHBA     []string
		tls       agentapi.TLSPolicy
		superuser *bool
		want      []string
	}{
		{name: "no user lines", tls: required, want: slices.Concat(agentLogins, reserved, tlsRules)},
		{
			name:  "user lines come after pgpilot's own roles, trimmed and in order",
			pgHBA: []string{"  hostssl app app 10.0.0.0/8 scram-sha-256 ", "host all all 192.168.0.0/16 reject"},
			tls:   required,
			want: slices.Concat(agentLogins, reserved, []string{
				"hostssl app app 10.0.0.0/8 scram-sha-256",
				"host all all 192.168.0.0/16 reject",
			}, tlsRules),
		},
		{name: "TLS not yet required", want: slices.Concat(agentLogins, reservedTransition, transitionRules)},
		{name: "superuser access from the network", tls: required, superuser: ptr.To(true),
			want: slices.Concat(agentLogins, reservedRemoteSuperuser, tlsRules)},
		{name: "superuser access explicitly off", tls: required, superuser: ptr.To(false),
			want: slices.Concat(agentLogins, reserved, tlsRules)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conf := PgHBAConf(newCluster(func(c *pgv1.PostgresCluster) {
				c.Spec.PostgreSQL.PgHBA, c.Spec.EnableSuperuserAccess = tt.pgHBA, tt.superuser
			}), tt.tls)
			if diff := cmp.Diff(tt.want, confLines(conf)); diff != "" {
				t.Errorf("pg_hba.conf lines (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBuildConfigMap(t *testing.T) {
	c := newCluster()
	cm := toTyped[corev1.ConfigMap](t, BuildConfigMap(c, agentapi.TLSPolicy{Required: true}))

	if cm.Name != "db-config" || cm.Namespace != "ns" {
		t.Errorf("name = %s/%s, want ns/db-config", cm.Namespace, cm.Name)
	}
	want := map[string]string{"postgresql.conf": PostgresqlConf(c), "pg_hba.conf": PgHBAConf(c, agentapi.TLSPolicy{Required: true}),
		"tls.json": `{"required":true}`}
	if diff := cmp.Diff(want, cm.Data); diff != "" {
		t.Errorf("data (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantCommonLabels(), cm.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]metav1.OwnerReference{wantOwnerReference()}, cm.OwnerReferences); diff != "" {
		t.Errorf("owner references (-want +got):\n%s", diff)
	}
}

// With statement statistics pg_stat_statements comes first, beside the user's libraries, under
// whichever spelling of the setting wins; a conf that loads it says so.
func TestWithStatementStatistics(t *testing.T) {
	for _, c := range []struct {
		name       string
		parameters map[string]pgv1.ParameterValue
		want       string
	}{
		{name: "no libraries of the user's", want: "shared_preload_libraries = 'pg_stat_statements'\n"},
		{name: "the user's libraries", parameters: map[string]pgv1.ParameterValue{"Shared_Preload_Libraries": "pgaudit, pg_stat_statements,auto_explain"},
			want: "shared_preload_libraries = 'pg_stat_statements,pgaudit,auto_explain'\n"},
		{name: "two spellings: the one PostgresqlConf keeps", parameters: map[string]pgv1.ParameterValue{"SHARED_PRELOAD_LIBRARIES": "auto_explain", "shared_preload_libraries": "pgaudit"},
			want: "shared_preload_libraries = 'pg_stat_statements,pgaudit'\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cluster := &pgv1.PostgresCluster{}
			cluster.Spec.PostgreSQL.Parameters = c.parameters
			before := PostgresqlConf(cluster)
			conf := PostgresqlConf(WithStatementStatistics(cluster))
			if !strings.Contains(conf, c.want) || strings.Count(strings.ToLower(conf), "shared_preload_libraries") != 1 {
				t.Errorf("conf lacks %q, or has the setting twice:\n%s", c.want, conf)
			}
			if !LoadsStatementStatistics(conf) || LoadsStatementStatistics(before) != strings.Contains(before, "pg_stat_statements") {
				t.Errorf("LoadsStatementStatistics is wrong of\n%s\nor of\n%s", conf, before)
			}
			if len(cluster.Spec.PostgreSQL.Parameters) != len(c.parameters) {
				t.Error("the cluster itself was changed")
			}
		})
	}
}
