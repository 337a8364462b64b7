// Package agentapi is the contract between the operator and its instance agents: the pod's
// environment (Config, written by the StatefulSet builder and read by the agent), the HTTP
// paths and wire types, and an HTTP client for the operator. Both sides import it and nothing
// of it is spelled anywhere else. It links no PostgreSQL driver and no Kubernetes client.
package agentapi

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// Defaults of the pod's environment. A variable left unset takes its default, so these are
// what a pod of an older operator, which did not set them, runs with.
const (
	DefaultPostgresPort    = 5432
	DefaultAgentPort       = 8000
	DefaultMetricsPort     = 9187
	DefaultReplicationUser = "streaming_replica"
)

// Superuser is the PostgreSQL superuser initdb creates.
const Superuser = "postgres"

// MonitorUser is the role the agent's metrics exporter reads statistics as: pg_monitor's
// privileges, no password (the agent's OS user logs in as it over the socket), no superuser.
const MonitorUser = "pgpilot_monitor"

// ReservedRole says whether name is a role pgpilot manages, or one PostgreSQL reserves (pg_*):
// the application's owner may not be one (its Secret would set that role's password).
func ReservedRole(name string) bool {
	return name == Superuser || name == DefaultReplicationUser || name == MonitorUser || strings.HasPrefix(name, "pg_")
}

// TLSDirVariable is the variable of Config.TLSDir; a pod that sets it serves its agent API
// over HTTPS (ServesTLS).
const TLSDirVariable = "PGPILOT_TLS_DIR"

// ServesTLS says, from a pod's environment (lookup of its container's variables), whether its
// agent serves HTTPS: pods of older operators serve plain HTTP.
func ServesTLS(lookup func(string) (string, bool)) bool {
	dir, ok := lookup(TLSDirVariable)
	return ok && dir != ""
}

// Files of the configuration directory (the keys of the cluster's ConfigMap).
const (
	PostgresqlConfFile = "postgresql.conf"
	HBAConfFile        = "pg_hba.conf"
)

// Config is what an instance pod's environment tells its agent.
type Config struct {
	// PodName is the instance: the pod's own name.
	PodName string
	// Namespace is the pod's namespace; ClusterName its cluster, whose primary Lease
	// (LeaseName) says whether this instance may be a primary.
	Namespace   string
	ClusterName string
	// InitialPrimary is the pod that runs initdb when the cluster is new (the Lease names it
	// and was never granted again); the others clone.
	InitialPrimary string
	// PrimaryHost is where standbys clone and stream from (the -rw Service).
	PrimaryHost string
	// DataDir is PGDATA.
	DataDir string
	// ConfigDir holds PostgresqlConfFile and HBAConfFile; the agent reloads PostgreSQL when
	// they change.
	ConfigDir string
	// SocketDir is PostgreSQL's Unix socket directory.
	SocketDir string
	// PostgresPort is the port every instance listens on.
	PostgresPort int
	// AgentPort serves the probes and the operator's API.
	AgentPort int
	// MetricsPort serves PostgreSQL's metrics for Prometheus (/metrics).
	MetricsPort int
	// AppDatabase is created on the primary, owned by Credentials.AppUser.
	AppDatabase string
	// ReplicationUser is the role standbys stream as.
	ReplicationUser string
	// BinDir holds the PostgreSQL server binaries; empty means look for them.
	BinDir string
	// CarriedDir holds an older major's server, carried from its image for a major upgrade
	// (agent carry): the instance runs it while its data directory is of that major.
	CarriedDir string
	// CredentialsDir holds the credentials, one file each (ReadCredentials): the Secrets,
	// projected by the kubelet, which keeps the files up to date when a Secret changes.
	CredentialsDir string
	// CustomQueriesDir holds the user's query files (spec.monitoring.customQueries), projected
	// by the kubelet and read again when they change; empty: none.
	CustomQueriesDir string
	// TLSDir holds the instance's certificates (TLSFiles), projected by the kubelet and
	// loaded again when they change. Set, PostgreSQL runs with ssl on and the agent API
	// serves HTTPS to the operator's client certificate only; empty (a pod of an older
	// operator): neither.
	TLSDir string
}

// EnvVar is one variable of the pod's environment: a literal Value, or the pod's own
// FieldPath for the kubelet to resolve.
type EnvVar struct {
	Name      string
	Value     string
	FieldPath string
}

// PostgresqlConfPath and HBAConfPath are the configuration files the operator renders.
func (c *Config) PostgresqlConfPath() string { return filepath.Join(c.ConfigDir, PostgresqlConfFile) }
func (c *Config) HBAConfPath() string        { return filepath.Join(c.ConfigDir, HBAConfFile) }

// ListenAddress is where the agent serves its API in the pod.
func (c *Config) ListenAddress() string { return ":" + strconv.Itoa(c.AgentPort) }

// ConfigHash identifies a configuration: the SHA-256 of postgresql.conf and pg_hba.conf. An
// agent reports the one its server last loaded, which the operator compares with its ConfigMap's
// to tell an instance that has not seen a change yet from one that applied it.
func ConfigHash(postgresqlConf, hbaConf []byte) string {
	h := sha256.New()
	for _, data := range [][]byte{postgresqlConf, hbaConf} {
		h.Write(data)
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// MetricsListenAddress is where the agent serves its metrics in the pod.
func (c *Config) MetricsListenAddress() string { return ":" + strconv.Itoa(c.MetricsPort) }

// variable is one environment variable and the Config field it carries; the writer and the
// reader walk the same table, so a name or a default exists once.
type variable struct {
	name string
	// fallback is the value when unset; required variables have none.
	fallback string
	required bool
	// field is the Config field as text.
	field func(*Config) field
	// fieldPath: written as a reference to the pod's own metadata.
	fieldPath string
}

var variables = []variable{
	{name: "PGDATA", required: true, field: text(func(c *Config) *string { return &c.DataDir })},
	{name: "PGPILOT_POD_NAME", required: true, fieldPath: "metadata.name", field: text(func(c *Config) *string { return &c.PodName })},
	{name: "PGPILOT_NAMESPACE", required: true, fieldPath: "metadata.namespace", field: text(func(c *Config) *string { return &c.Namespace })},
	{name: "PGPILOT_CLUSTER", required: true, field: text(func(c *Config) *string { return &c.ClusterName })},
	{name: "PGPILOT_INITIAL_PRIMARY", required: true, field: text(func(c *Config) *string { return &c.InitialPrimary })},
	{name: "PGPILOT_PRIMARY_HOST", required: true, field: text(func(c *Config) *string { return &c.PrimaryHost })},
	{name: "PGPILOT_CONFIG_DIR", required: true, field: text(func(c *Config) *string { return &c.ConfigDir })},
	{name: "PGPILOT_SOCKET_DIR", required: true, field: text(func(c *Config) *string { return &c.SocketDir })},
	{name: "PGPILOT_APP_DATABASE", required: true, field: text(func(c *Config) *string { return &c.AppDatabase })},
	{name: "PGPILOT_CREDENTIALS_DIR", required: true, field: text(func(c *Config) *string { return &c.CredentialsDir })},
	{name: "PGPILOT_PORT", fallback: strconv.Itoa(DefaultPostgresPort), field: number(func(c *Config) *int { return &c.PostgresPort })},
	{name: "PGPILOT_AGENT_PORT", fallback: strconv.Itoa(DefaultAgentPort), field: number(func(c *Config) *int { return &c.AgentPort })},
	{name: "PGPILOT_METRICS_PORT", fallback: strconv.Itoa(DefaultMetricsPort), field: number(func(c *Config) *int { return &c.MetricsPort })},
	{name: "PGPILOT_REPLICATION_USER", fallback: DefaultReplicationUser, field: text(func(c *Config) *string { return &c.ReplicationUser })},
	{name: "PGPILOT_PG_BINDIR", field: text(func(c *Config) *string { return &c.BinDir })},
	{name: "PGPILOT_CARRIED_DIR", field: text(func(c *Config) *string { return &c.CarriedDir })},
	{name: "PGPILOT_CUSTOM_QUERIES_DIR", field: text(func(c *Config) *string { return &c.CustomQueriesDir })},
	{name: TLSDirVariable, field: text(func(c *Config) *string { return &c.TLSDir })},
}

// field reads and writes one Config field as the text of an environment variable.
type field struct {
	get  func() string
	set  func(string) error
	zero func() bool
}

func text(at func(*Config) *string) func(*Config) field {
	return func(c *Config) field {
		p := at(c)
		return field{
			get:  func() string { return *p },
			set:  func(v string) error { *p = v; return nil },
			zero: func() bool { return *p == "" },
		}
	}
}

func number(at func(*Config) *int) func(*Config) field {
	return func(c *Config) field {
		p := at(c)
		return field{
			get:  func() string { return strconv.Itoa(*p) },
			set:  func(v string) (err error) { *p, err = strconv.Atoi(v); return err },
			zero: func() bool { return *p == 0 },
		}
	}
}

// Environment is the pod's environment for c: the pod name from the pod itself, and every
// other setting that differs from its default as a value. Defaults are left out so that a pod
// template stays the same when a setting is not used.
func (c Config) Environment() []EnvVar {
	c = c.WithDefaults()
	var env []EnvVar
	for _, v := range variables {
		switch value := v.field(&c).get(); {
		case v.fieldPath != "":
			env = append(env, EnvVar{Name: v.name, FieldPath: v.fieldPath})
		case v.required || value != v.fallback:
			env = append(env, EnvVar{Name: v.name, Value: value})
		}
	}
	return env
}

// FromEnvironment reads a Config; lookup is os.LookupEnv in the agent. Every missing
// required variable is named in the error.
func FromEnvironment(lookup func(string) (string, bool)) (Config, error) {
	var c Config
	var missing, invalid []string
	for _, v := range variables {
		value, ok := lookup(v.name)
		if !ok || value == "" {
			if v.required {
				missing = append(missing, v.name)
				continue
			}
			value = v.fallback
		}
		if value == "" {
			continue
		}
		if err := v.field(&c).set(value); err != nil {
			invalid = append(invalid, fmt.Sprintf("%s: %v", v.name, err))
		}
	}
	var problems []string
	if len(missing) > 0 {
		problems = append(problems, "missing environment: "+strings.Join(missing, ", "))
	}
	problems = append(problems, invalid...)
	if len(problems) > 0 {
		return Config{}, fmt.Errorf("agent environment: %s", strings.Join(problems, "; "))
	}
	return c, nil
}

// WithDefaults fills what a writer left at its zero value, as FromEnvironment would.
func (c Config) WithDefaults() Config {
	for _, v := range variables {
		if f := v.field(&c); v.fallback != "" && f.zero() {
			_ = f.set(v.fallback) // the fallbacks are constants of the right type
		}
	}
	return c
}
