package postgres

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
)

// Roles are the logins of a cluster: the superuser's password, and the roles a new cluster
// gets besides it.
type Roles struct {
	Superuser, SuperuserPassword         string
	ReplicationUser, ReplicationPassword string
	AppOwner, AppPassword, AppDatabase   string
	// MonitorUser, when set, is a login role with pg_monitor's privileges and no password.
	MonitorUser string
}

// EnsureRoles creates the replication and application roles and the application database, and
// brings every role's password in line with the Secrets. Safe to run on every start of a
// primary and whenever a Secret changes.
func EnsureRoles(ctx context.Context, conn *pgx.Conn, r Roles) error {
	if r.AppOwner == r.Superuser || r.AppOwner == r.ReplicationUser || agentapi.ReservedRole(r.AppOwner) {
		return fmt.Errorf("the application owner %q is a role pgpilot manages or PostgreSQL reserves: no password or attribute changed", r.AppOwner)
	}
	for _, role := range []struct{ name, password, attributes string }{
		{r.Superuser, r.SuperuserPassword, "SUPERUSER LOGIN"},
		{r.ReplicationUser, r.ReplicationPassword, "LOGIN REPLICATION"},
		{r.AppOwner, r.AppPassword, "LOGIN"},
	} {
		var exists bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)`, role.name).Scan(&exists); err != nil {
			return fmt.Errorf("look up role %s: %w", role.name, err)
		}
		verb := "CREATE"
		if exists {
			verb = "ALTER"
		}
		// Identifiers cannot be bound parameters; quote them. The password goes as its SCRAM
		// verifier, never as itself, in a transaction that logs no statement (log_statement
		// = ddl would, and so would any error).
		verifier, err := ScramVerifier(role.password)
		if err != nil {
			return err
		}
		stmt := fmt.Sprintf("%s ROLE %s WITH %s PASSWORD %s", verb, pgx.Identifier{role.name}.Sanitize(),
			role.attributes, quoteLiteral(verifier))
		if err := execUnlogged(ctx, conn, stmt); err != nil {
			return fmt.Errorf("%s role %s: %w", verb, role.name, err)
		}
	}
	if err := ensureMonitorRole(ctx, conn, r.MonitorUser); err != nil {
		return err
	}
	replication := pgx.Identifier{r.ReplicationUser}.Sanitize()
	if _, err := conn.Exec(ctx, fmt.Sprintf("GRANT EXECUTE ON FUNCTION %s TO %s; GRANT pg_checkpoint TO %s",
		strings.Join(rewindFunctions, ", "), replication, replication)); err != nil {
		return fmt.Errorf("grant pg_rewind's functions to %s: %w", r.ReplicationUser, err)
	}
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, r.AppDatabase).Scan(&exists); err != nil {
		return fmt.Errorf("look up database %s: %w", r.AppDatabase, err)
	}
	if !exists {
		stmt := fmt.Sprintf("CREATE DATABASE %s OWNER %s", pgx.Identifier{r.AppDatabase}.Sanitize(), pgx.Identifier{r.AppOwner}.Sanitize())
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("create database %s: %w", r.AppDatabase, err)
		}
	}
	return ensureStatementStatistics(ctx, conn)
}

// ensureStatementStatistics creates pg_stat_statements in the database conn is to (postgres,
// where the exporter reads it) when the server loads its library: the view is per database,
// the statistics are the server's.
func ensureStatementStatistics(ctx context.Context, conn *pgx.Conn) error {
	_, err := conn.Exec(ctx, `DO $$ BEGIN
		IF 'pg_stat_statements' = ANY (string_to_array(replace(current_setting('shared_preload_libraries'), ' ', ''), ','))
			AND NOT EXISTS (SELECT FROM pg_extension WHERE extname = 'pg_stat_statements') THEN
			CREATE EXTENSION pg_stat_statements;
		END IF;
	END $$`)
	if err != nil {
		return fmt.Errorf("create extension pg_stat_statements: %w", err)
	}
	return nil
}

// rewindFunctions are what pg_rewind calls on its source server, granted to the replication
// user so that a rewind needs no superuser (PostgreSQL's documentation of pg_rewind lists them),
// with pg_checkpoint for the checkpoint the agent asks of the source first. Without
// pg_read_server_files, these read only inside the data and log directories.
var rewindFunctions = []string{
	"pg_catalog.pg_ls_dir(text, boolean, boolean)",
	"pg_catalog.pg_stat_file(text, boolean)",
	"pg_catalog.pg_read_binary_file(text)",
	"pg_catalog.pg_read_binary_file(text, bigint, bigint, boolean)",
}

// execUnlogged runs statements that may carry a secret, in one transaction where the server logs
// none of them: not by log_statement, log_min_duration_statement nor, should one fail,
// log_min_error_statement.
func execUnlogged(ctx context.Context, conn *pgx.Conn, statements ...string) error {
	return execInTransaction(ctx, conn, append([]string{"SET LOCAL log_statement = 'none'; SET LOCAL log_min_duration_statement = -1; " +
		"SET LOCAL log_min_error_statement = 'panic'"}, statements...))
}

// execInTransaction runs statements in one transaction: all of them or none.
func execInTransaction(ctx context.Context, conn *pgx.Conn, statements []string) error {
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for _, statement := range statements {
			if _, err := tx.Exec(ctx, statement); err != nil {
				return err
			}
		}
		return nil
	})
}

// ensureMonitorRole creates the metrics exporter's role: it logs in (over the socket, by peer
// authentication) and reads statistics through pg_monitor, and can do nothing else.
func ensureMonitorRole(ctx context.Context, conn *pgx.Conn, name string) error {
	if name == "" {
		return nil
	}
	role := pgx.Identifier{name}.Sanitize()
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)`, name).Scan(&exists); err != nil {
		return fmt.Errorf("look up role %s: %w", name, err)
	}
	if !exists {
		if _, err := conn.Exec(ctx, "CREATE ROLE "+role+" WITH LOGIN"); err != nil {
			return fmt.Errorf("create role %s: %w", name, err)
		}
	}
	if _, err := conn.Exec(ctx, "GRANT pg_monitor TO "+role); err != nil {
		return fmt.Errorf("grant pg_monitor to %s: %w", name, err)
	}
	return nil
}

// quoteLiteral renders a SQL string literal (standard_conforming_strings is on since 9.1).
func quoteLiteral(s string) string {
	out := []byte{'\''}
	for i := 0; i < len(s); i++ {
		if s[i] == '\'' {
			out = append(out, '\'')
		}
		out = append(out, s[i])
	}
	return string(append(out, '\''))
}

// localDefaults are the connection defaults of the agent's environment, parsed once: parsing
// reads the environment and the home directory's files, over a quarter of what a connection to each
// managed database costs the agent on every pass.
var localDefaults = sync.OnceValues(func() (*pgx.ConnConfig, error) { return pgx.ParseConfig("") })

// ConnectLocal opens a connection to the local server as user over its Unix socket, which
// pg_hba.conf lets the agent's own OS user in without a password (peer, through the ident
// map): the agent stays able to set passwords whatever the Secrets say.
func ConnectLocal(ctx context.Context, socketDir string, port int, user, database string) (*pgx.Conn, error) {
	base, err := localDefaults()
	if err != nil {
		return nil, err
	}
	cfg := base.Copy()
	cfg.Host, cfg.Port, cfg.User, cfg.Database = socketDir, uint16(port), user, database
	cfg.ConnectTimeout = 5 * time.Second
	return pgx.ConnectConfig(ctx, cfg)
}

// Connect opens a connection to the local server as user over TCP loopback with a password,
// the way pg_hba.conf lets in-pod clients other than the server's own OS user in.
func Connect(ctx context.Context, port int, user, password, database string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig("")
	if err != nil {
		return nil, err
	}
	cfg.Host, cfg.Port, cfg.User, cfg.Password, cfg.Database = "127.0.0.1", uint16(port), user, password, database
	cfg.ConnectTimeout = 5 * time.Second
	return pgx.ConnectConfig(ctx, cfg)
}

// EnsurePrimaryConnInfo points a standby's WAL receiver at the primary with conninfo, when it
// differs in how it authenticates or encrypts: a primary that came to require TLS, or a client
// certificate, would fail the next connection, and a connection string of an earlier release
// still holds the replication password, which now lives in the passfile. ALTER SYSTEM works on
// a standby, and a reload restarts only the WAL receiver. It reports whether it changed anything.
func EnsurePrimaryConnInfo(ctx context.Context, conn *pgx.Conn, conninfo string) (bool, error) {
	var current string
	if err := conn.QueryRow(ctx, `SELECT setting FROM pg_settings WHERE name = 'primary_conninfo'`).Scan(&current); err != nil {
		return false, fmt.Errorf("read primary_conninfo: %w", err)
	}
	if !connInfoDiffers(current, conninfo) {
		return false, nil
	}
	return true, alterSystem(ctx, conn, "primary_conninfo", conninfo)
}

// connInfoDiffers: the standby's current primary_conninfo (pgpilot's, or pg_basebackup's, or
// an earlier release's) authenticates or encrypts otherwise than desired, or holds a password.
func connInfoDiffers(current, desired string) bool {
	for _, keyword := range []string{"sslmode", "sslcert", "sslkey", "sslrootcert", "passfile"} {
		if connInfoValue(current, keyword) != connInfoValue(desired, keyword) {
			return true
		}
	}
	return connInfoPassword(current) != connInfoPassword(desired)
}

// connInfoValue is a keyword's value in a connection string, quoted (ConnInfo) or not
// (pg_basebackup); sslmode defaults to libpq's prefer.
func connInfoValue(conninfo, keyword string) string {
	m := regexp.MustCompile(`(?:^|\s)` + keyword + `\s*=\s*(?:'((?:[^'\\]|\\.)*)'|(\S+))`).FindStringSubmatch(conninfo)
	switch {
	case m == nil && keyword == "sslmode":
		return "prefer"
	case m == nil:
		return ""
	case m[2] != "":
		return m[2]
	}
	return strings.NewReplacer(`\'`, `'`, `\\`, `\`).Replace(m[1])
}

// certificateFiles are the keywords pgconn would open files for.
var certificateFiles = regexp.MustCompile(`(?:^|\s)ssl(?:cert|key|rootcert)\s*=\s*'[^']*'`)

// connInfoPassword is the password keyword's value; pgconn reads it without opening files.
func connInfoPassword(conninfo string) string {
	settings, err := pgconn.ParseConfig(certificateFiles.ReplaceAllString(conninfo, ""))
	if err != nil {
		return ""
	}
	return settings.Password
}

// alterSystem sets a server setting in postgresql.auto.conf and reloads the configuration;
// name is one of pgpilot's own constants, value any string.
func alterSystem(ctx context.Context, conn *pgx.Conn, name, value string) error {
	if _, err := conn.Exec(ctx, "ALTER SYSTEM SET "+name+" = "+quoteLiteral(value)); err != nil {
		return fmt.Errorf("set %s: %w", name, err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	return nil
}

// ConnInfo renders a libpq connection string from keyword/value pairs, each value quoted so
// that one with spaces, quotes or backslashes (a password) stays one value.
func ConnInfo(pairs ...string) string {
	var parts []string
	for i := 0; i+1 < len(pairs); i += 2 {
		value := strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(pairs[i+1])
		parts = append(parts, pairs[i]+"='"+value+"'")
	}
	return strings.Join(parts, " ")
}

// recoverySettings are what a restore writes into postgresql.auto.conf to reach its target, and
// what the backup brought there from the source cluster's agent: its synchronous standbys, which
// are not the restored cluster's (its first commit would wait for them for ever).
var recoverySettings = []string{"restore_command", "recovery_target", "recovery_target_time", "recovery_target_lsn",
	"recovery_target_xid", "recovery_target_name", "recovery_target_inclusive", "recovery_target_action",
	"recovery_target_timeline", "synchronous_standby_names"}

// ResetRecoverySettings removes a finished recovery's settings from postgresql.auto.conf:
// pg_basebackup copies that file, and a standby cloned with a recovery target would stop
// replaying there.
func ResetRecoverySettings(ctx context.Context, conn *pgx.Conn) error {
	for _, name := range recoverySettings {
		if _, err := conn.Exec(ctx, "ALTER SYSTEM RESET "+name); err != nil {
			return fmt.Errorf("reset %s: %w", name, err)
		}
	}
	return nil
}
