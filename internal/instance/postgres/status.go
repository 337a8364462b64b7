package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
)

// QueryStatus reads the server's status over conn.
func QueryStatus(ctx context.Context, conn *pgx.Conn) (*agentapi.Status, error) {
	s := &agentapi.Status{}
	var inRecovery bool
	var current, receive, replay *string
	var versionNum int
	// A primary's timeline is its current WAL file's: the control file's checkpoint lags a
	// promotion until the next checkpoint.
	err := conn.QueryRow(ctx, `SELECT pg_is_in_recovery(),
		CASE WHEN pg_is_in_recovery() THEN (SELECT timeline_id FROM pg_control_checkpoint())
			ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int END,
		CASE WHEN pg_is_in_recovery() THEN NULL ELSE pg_current_wal_lsn()::text END,
		pg_last_wal_receive_lsn()::text,
		pg_last_wal_replay_lsn()::text,
		current_setting('server_version_num')::int`).Scan(&inRecovery, &s.Timeline, &current, &receive, &replay, &versionNum)
	if err != nil {
		return nil, fmt.Errorf("query role and positions: %w", err)
	}
	s.Role = agentapi.RolePrimary
	if inRecovery {
		s.Role = agentapi.RoleReplica
		// A standby's timeline is the one it replays, not its last checkpoint's.
		if err := conn.QueryRow(ctx, `SELECT COALESCE((SELECT received_tli FROM pg_stat_wal_receiver), $1)`,
			s.Timeline).Scan(&s.Timeline); err != nil {
			return nil, fmt.Errorf("query receiver timeline: %w", err)
		}
	}
	s.CurrentLSN, s.ReceiveLSN, s.ReplayLSN = deref(current), deref(receive), deref(replay)
	s.ServerVersion = FormatVersion(versionNum)
	if s.CollationMismatches, err = collationMismatches(ctx, conn); err != nil {
		return nil, err
	}

	rows, err := conn.Query(ctx, `SELECT name FROM pg_settings WHERE pending_restart ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("query pending restart: %w", err)
	}
	if s.PendingRestart, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return nil, fmt.Errorf("read pending restart: %w", err)
	}

	if inRecovery {
		err = conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_wal_receiver WHERE status = 'streaming')`).Scan(&s.Streaming)
		if err != nil {
			return nil, fmt.Errorf("query wal receiver: %w", err)
		}
		return s, nil
	}
	rows, err = conn.Query(ctx, `SELECT application_name, state, COALESCE(replay_lsn::text, ''),
		COALESCE(pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn), 0)::bigint,
		EXTRACT(epoch FROM replay_lag)::float8, sync_state
		FROM pg_stat_replication ORDER BY application_name`)
	if err != nil {
		return nil, fmt.Errorf("query replication: %w", err)
	}
	s.Replicas, err = pgx.CollectRows(rows, pgx.RowToStructByPos[agentapi.ReplicaStatus])
	if err != nil {
		return nil, fmt.Errorf("read replication: %w", err)
	}
	rows, err = conn.Query(ctx, `SELECT slot_name::text, active FROM pg_replication_slots
		WHERE slot_type = 'physical' ORDER BY slot_name`)
	if err != nil {
		return nil, fmt.Errorf("query slots: %w", err)
	}
	if s.Slots, err = pgx.CollectRows(rows, pgx.RowToStructByPos[agentapi.SlotStatus]); err != nil {
		return nil, fmt.Errorf("read slots: %w", err)
	}
	return s, nil
}

// DropInactiveSlots drops the named physical slots that no standby is using, and returns those
// it dropped. A slot in use belongs to a live standby and is never dropped.
func DropInactiveSlots(ctx context.Context, conn *pgx.Conn, names []string) ([]string, error) {
	rows, err := conn.Query(ctx, `SELECT name FROM (
		SELECT slot_name::text AS name, pg_drop_replication_slot(slot_name) FROM pg_replication_slots
		WHERE slot_type = 'physical' AND NOT active AND slot_name = ANY($1)) AS dropped`, names)
	if err != nil {
		return nil, fmt.Errorf("drop slots: %w", err)
	}
	dropped, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("drop slots: %w", err)
	}
	return dropped, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// EnsureSlots creates the named physical replication slots that do not exist yet.
func EnsureSlots(ctx context.Context, conn *pgx.Conn, names []string) error {
	_, err := conn.Exec(ctx, `SELECT pg_create_physical_replication_slot(name) FROM unnest($1::text[]) AS name
		WHERE name NOT IN (SELECT slot_name FROM pg_replication_slots)`, names)
	if err != nil {
		return fmt.Errorf("create slots: %w", err)
	}
	return nil
}

// StandbyReplies is, for every standby streaming from this primary, when it last replied by
// its own clock (pg_stat_replication.reply_time). The agent compares successive answers, not
// clocks: a value that changed is a reply that arrived since.
func StandbyReplies(ctx context.Context, conn *pgx.Conn) (map[string]string, error) {
	rows, err := conn.Query(ctx, `SELECT application_name, COALESCE(reply_time::text, '')
		FROM pg_stat_replication WHERE state = 'streaming'`)
	if err != nil {
		return nil, fmt.Errorf("query standby replies: %w", err)
	}
	replies := map[string]string{}
	var name, at string
	if _, err := pgx.ForEachRow(rows, []any{&name, &at}, func() error {
		replies[name] = at
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read standby replies: %w", err)
	}
	return replies, nil
}

// EnsureSynchronousStandbyNames sets synchronous_standby_names (ALTER SYSTEM, then a reload)
// when it differs; it reports whether it changed it.
func EnsureSynchronousStandbyNames(ctx context.Context, conn *pgx.Conn, value string) (bool, error) {
	var current string
	if err := conn.QueryRow(ctx, "SELECT current_setting('synchronous_standby_names')").Scan(&current); err != nil {
		return false, fmt.Errorf("read synchronous_standby_names: %w", err)
	}
	if current == value {
		return false, nil
	}
	return true, alterSystem(ctx, conn, "synchronous_standby_names", value)
}

// FormatVersion turns server_version_num (170012) into major.minor (17.12).
func FormatVersion(num int) string {
	return fmt.Sprintf("%d.%d", num/10000, num%10000)
}

// collationMismatches are the databases whose default collation's recorded version is not the
// one the C library or ICU gives now (a new image on another Debian release): indexes on text
// may sort differently from what is stored. A database without a recorded version (the C and
// POSIX locales have none) is never reported.
func collationMismatches(ctx context.Context, conn *pgx.Conn) ([]agentapi.CollationMismatch, error) {
	rows, err := conn.Query(ctx, `SELECT datname::text, datcollversion, actual FROM (
		SELECT datname, datcollversion, pg_database_collation_actual_version(oid) AS actual FROM pg_database) d
		WHERE datcollversion IS NOT NULL AND actual IS NOT NULL AND datcollversion <> actual ORDER BY datname`)
	if err != nil {
		return nil, fmt.Errorf("query collation versions: %w", err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowToStructByPos[agentapi.CollationMismatch])
	if err != nil {
		return nil, fmt.Errorf("read collation versions: %w", err)
	}
	return found, nil
}
