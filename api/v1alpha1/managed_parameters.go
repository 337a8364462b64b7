package v1alpha1

// ManagedParameters are the PostgreSQL settings pgpilot sets itself: the operator's
// postgresql.conf (replication, addresses, password hashing), the instance agent (where the
// data, the files, the socket, the port and the log are), or recovery, which failover and restores
// drive. spec.postgresql.parameters may not set them. The CRD rejects each with one
// XValidation rule on PostgreSQLSpec.Parameters, and the other spellings of each (PostgreSQL
// names are case-insensitive) with one rule on PostgreSQLSpec; a test checks that the generated
// CRD has exactly these rules, and the builder's and agent's tests that they set nothing else.
var ManagedParameters = []string{
	"listen_addresses",
	"port",
	"unix_socket_directories",
	"data_directory",
	"config_file",
	"hba_file",
	"ident_file",
	"external_pid_file",
	"wal_level",
	"hot_standby",
	"wal_log_hints",
	"password_encryption",
	"primary_conninfo",
	"primary_slot_name",
	"restore_command",
	"recovery_target_timeline",
	"cluster_name",
	"synchronous_standby_names",
	"archive_mode",
	"archive_command",
	// The agent reads PostgreSQL's JSON log from named pipes (postgres.Instance.CollectLogs).
	"logging_collector",
	"log_destination",
	"log_directory",
	"log_filename",
	"log_rotation_age",
	"log_rotation_size",
	// The agent turns TLS on with the cluster's certificates (Config.TLSDir).
	"ssl",
	"ssl_cert_file",
	"ssl_key_file",
	"ssl_ca_file",
}

// ManagedParameterMessage is what the API server says when spec.postgresql.parameters sets
// a managed parameter.
func ManagedParameterMessage(name string) string {
	return "postgresql.parameters." + name + " is managed by pgpilot and cannot be set"
}
