package exporter

import "fmt"

// builtinNames are the names of BuiltinQueries.
var builtinNames = func() map[string]bool {
	names := map[string]bool{}
	for _, q := range BuiltinQueries() {
		names[q.Name] = true
	}
	return names
}()

// BuiltinPrefix begins the names of pgpilot's own metrics; DatabaseLabel is the label of the
// database a series comes from.
const (
	BuiltinPrefix = "pgpilot"
	DatabaseLabel = "datname"
)

// IsBuiltin says whether name is one of BuiltinQueries.
func IsBuiltin(name string) bool { return builtinNames[name] }

// BuiltinQueries are pgpilot's metrics of every instance. Queries that only make sense on a
// primary or a standby return no rows (or NULL) on the other.
func BuiltinQueries() []Query {
	return []Query{
		{Name: "instance", Prefix: BuiltinPrefix, SQL: `SELECT
			NOT pg_is_in_recovery() AS is_primary,
			CASE WHEN pg_is_in_recovery()
				THEN COALESCE((SELECT received_tli FROM pg_stat_wal_receiver), (SELECT timeline_id FROM pg_control_checkpoint()))
				ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int END AS timeline,
			current_setting('max_connections')::int AS max_connections,
			(SELECT count(*) FROM pg_settings WHERE pending_restart) AS settings_pending_restart,
			EXTRACT(EPOCH FROM now() - pg_postmaster_start_time()) AS uptime_seconds,
			(SELECT COALESCE(max(EXTRACT(EPOCH FROM now() - xact_start)), 0) FROM pg_stat_activity
				WHERE xact_start IS NOT NULL AND backend_type = 'client backend') AS longest_transaction_seconds`,
			Columns: []Column{
				{"is_primary", Gauge, "1 when this instance is the primary (not in recovery), else 0."},
				{"timeline", Gauge, "The timeline this instance writes (a primary) or replays (a standby)."},
				{"max_connections", Gauge, "The max_connections setting."},
				{"settings_pending_restart", Gauge, "Settings changed in the configuration that take effect only after a restart."},
				{"uptime_seconds", Gauge, "Seconds since the postmaster started."},
				{"longest_transaction_seconds", Gauge, "Age of the oldest open transaction of a client, 0 when none is open."},
			}},
		{Name: "version", Prefix: BuiltinPrefix, SQL: `SELECT current_setting('server_version') AS version,
			current_setting('server_version_num')::int AS postgres_version_num`,
			Columns: []Column{
				{"version", Label, "PostgreSQL's version string."},
				{"postgres_version_num", Gauge, "PostgreSQL's version as server_version_num (150010 for 15.10)."},
			}},
		{Name: "replication", Prefix: "pgpilot_replication", SQL: `SELECT application_name,
			COALESCE(pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn), 0) AS lag_bytes,
			COALESCE(EXTRACT(EPOCH FROM replay_lag), 0) AS lag_seconds,
			(state = 'streaming') AS streaming
			FROM pg_stat_replication WHERE NOT pg_is_in_recovery()`,
			Columns: []Column{
				{"application_name", Label, "The standby (its instance name)."},
				{"lag_bytes", Gauge, "WAL bytes the primary wrote that the standby has not replayed yet."},
				{"lag_seconds", Gauge, "Time between a recent commit on the primary and its replay on the standby (0 when idle)."},
				{"streaming", Gauge, "1 when the standby streams, 0 while it catches up or starts."},
			}},
		{Name: "streaming_replicas", Prefix: BuiltinPrefix, SQL: `SELECT
			CASE WHEN pg_is_in_recovery() THEN NULL ELSE (SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming') END
				AS streaming_replicas,
			CASE WHEN pg_is_in_recovery() THEN EXISTS (SELECT 1 FROM pg_stat_wal_receiver WHERE status = 'streaming') END
				AS wal_receiver_up,
			CASE WHEN pg_is_in_recovery() THEN COALESCE(pg_wal_lsn_diff(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn()), 0) END
				AS replay_pending_bytes`,
			Columns: []Column{
				{"streaming_replicas", Gauge, "Standbys streaming from this primary (absent on a standby)."},
				{"wal_receiver_up", Gauge, "1 when this standby streams from the primary, else 0 (absent on a primary)."},
				{"replay_pending_bytes", Gauge, "WAL this standby received and has not replayed yet (absent on a primary)."},
			}},
		{Name: "replication_slots", Prefix: "pgpilot_replication_slot", SQL: `SELECT slot_name::text AS slot_name, active,
			COALESCE(pg_wal_lsn_diff(
				CASE WHEN pg_is_in_recovery() THEN pg_last_wal_receive_lsn() ELSE pg_current_wal_lsn() END, restart_lsn), 0)
				AS retained_bytes
			FROM pg_replication_slots`,
			Columns: []Column{
				{"slot_name", Label, "The replication slot."},
				{"active", Gauge, "1 when a consumer uses the slot, else 0."},
				{"retained_bytes", Gauge, "WAL the slot keeps in pg_wal for its consumer."},
			}},
		{Name: "archiver", Prefix: "pgpilot_archive", SQL: `SELECT archived_count AS archived_total, failed_count AS failed_total,
			EXTRACT(EPOCH FROM now() - last_archived_time) AS last_archived_age_seconds,
			(last_failed_time IS NOT NULL AND last_failed_time >= COALESCE(last_archived_time, '-infinity')) AS failing,
			current_setting('archive_mode') <> 'off' AS enabled
			FROM pg_stat_archiver`,
			Columns: []Column{
				{"archived_total", Counter, "WAL segments archived since the statistics were reset."},
				{"failed_total", Counter, "Failed attempts to archive a WAL segment."},
				{"last_archived_age_seconds", Gauge, "Seconds since the last WAL segment was archived (absent before the first)."},
				{"failing", Gauge, "1 when the last attempt to archive failed, else 0."},
				{"enabled", Gauge, "1 when archive_mode is on, else 0."},
			}},
		{Name: "wal", Prefix: "pgpilot_wal", SQL: `SELECT (SELECT COALESCE(sum(size), 0) FROM pg_ls_waldir()) AS directory_bytes`,
			Columns: []Column{{"directory_bytes", Gauge, "Bytes in pg_wal (grows while archiving fails or a slot holds WAL)."}}},
		{Name: "backends", Prefix: BuiltinPrefix, SQL: `SELECT s.state, count(a.pid) AS backends,
			count(a.pid) FILTER (WHERE a.wait_event_type = 'Lock') AS backends_waiting_on_locks
			FROM unnest(ARRAY['active', 'idle', 'idle in transaction', 'idle in transaction (aborted)',
				'fastpath function call', 'disabled']) AS s(state)
			LEFT JOIN pg_stat_activity a ON a.state = s.state AND a.backend_type = 'client backend'
			GROUP BY s.state`,
			Columns: []Column{
				{"state", Label, "The backends' state (pg_stat_activity.state)."},
				{"backends", Gauge, "Client backends in this state."},
				{"backends_waiting_on_locks", Gauge, "Client backends in this state waiting for a lock."},
			}},
		{Name: "databases", Prefix: "pgpilot_database", SQL: `SELECT d.datname::text AS datname,
			pg_database_size(d.oid) AS size_bytes, age(d.datfrozenxid) AS xid_age,
			s.xact_commit AS commits_total, s.xact_rollback AS rollbacks_total, s.deadlocks AS deadlocks_total,
			s.conflicts AS conflicts_total, s.temp_bytes AS temp_bytes_total
			FROM pg_database d JOIN pg_stat_database s ON s.datid = d.oid
			WHERE d.datallowconn AND NOT d.datistemplate`,
			Columns: []Column{
				{DatabaseLabel, Label, "The database."},
				{"size_bytes", Gauge, "Disk space the database uses."},
				{"xid_age", Gauge, "Transactions since the database's oldest unfrozen transaction ID (wraparound at 2^31)."},
				{"commits_total", Counter, "Transactions committed."},
				{"rollbacks_total", Counter, "Transactions rolled back."},
				{"deadlocks_total", Counter, "Deadlocks detected."},
				{"conflicts_total", Counter, "Queries cancelled by conflicts with recovery (on a standby)."},
				{"temp_bytes_total", Counter, "Bytes written to temporary files by queries."},
			}},
		{Name: "statements", Prefix: "pgpilot_statement", Guard: statementStatisticsLoaded, SQL: fmt.Sprintf(`SELECT
			s.queryid::text AS queryid, d.datname::text AS datname, r.rolname::text AS "user",
			left(regexp_replace(s.query, '\s+', ' ', 'g'), %d) AS query,
			s.calls AS calls_total, s.total_exec_time / 1000 AS seconds_total, s.rows AS rows_total,
			s.mean_exec_time / 1000 AS mean_seconds
			FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid JOIN pg_roles r ON r.oid = s.userid
			WHERE s.toplevel AND s.queryid IS NOT NULL AND s.userid <> current_user::regrole -- not the exporter's own
			ORDER BY s.total_exec_time DESC LIMIT %d`, TopStatementTextLength, TopStatements),
			Columns: []Column{
				{"queryid", Label, "The statement's pg_stat_statements query identifier."},
				{DatabaseLabel, Label, "The database it ran in."},
				{"user", Label, "The role that ran it."},
				{"query", Label, "The statement's normalized text (constants replaced by $n), shortened."},
				{"calls_total", Counter, "Times the statement ran, for the statements with the most execution time."},
				{"seconds_total", Counter, "Time spent running the statement."},
				{"rows_total", Counter, "Rows the statement returned or changed."},
				{"mean_seconds", Gauge, "Mean time of one run of the statement."},
			}},
		{Name: "checkpoints", Prefix: "pgpilot_checkpoints", MaxVersion: 169999, SQL: `SELECT
			checkpoints_timed AS timed_total, checkpoints_req AS requested_total,
			(checkpoint_write_time + checkpoint_sync_time) / 1000 AS seconds_total FROM pg_stat_bgwriter`,
			Columns: checkpointColumns},
		{Name: "checkpoints", Prefix: "pgpilot_checkpoints", MinVersion: 170000, SQL: `SELECT
			num_timed AS timed_total, num_requested AS requested_total,
			(write_time + sync_time) / 1000 AS seconds_total FROM pg_stat_checkpointer`,
			Columns: checkpointColumns},
	}
}

// TopStatements bounds the statements exported (pgpilot_statement_*): those with the most
// execution time since the statistics were reset, so that the series stay few whatever the
// workload. TopStatementTextLength bounds the query label.
const (
	TopStatements          = 10
	TopStatementTextLength = 80
)

// statementStatisticsLoaded: the server loads pg_stat_statements and its view is in the
// monitoring database (the primary's agent creates it there).
const statementStatisticsLoaded = `SELECT to_regclass('pg_stat_statements') IS NOT NULL
	AND 'pg_stat_statements' = ANY (string_to_array(replace(current_setting('shared_preload_libraries'), ' ', ''), ','))`

var checkpointColumns = []Column{
	{"timed_total", Counter, "Checkpoints started by checkpoint_timeout."},
	{"requested_total", Counter, "Checkpoints requested (WAL volume, a backup, a shutdown, CHECKPOINT)."},
	{"seconds_total", Counter, "Time checkpoints spent writing and syncing files."},
}
