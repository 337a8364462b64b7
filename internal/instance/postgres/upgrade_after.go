package postgres

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
)

// After the new server started: what pg_upgrade leaves to do, while the cluster already takes
// writes.

// UpdateExtensions updates every extension of every database whose installed version is older
// than the new image's default (ALTER EXTENSION … UPDATE), and returns them as "name in database
// to version".
func UpdateExtensions(ctx context.Context, connect Connector) ([]string, error) {
	var updated []string
	err := eachDatabase(ctx, connect, func(conn *pgx.Conn, database string) error {
		rows, err := conn.Query(ctx, `SELECT e.extname, a.default_version FROM pg_extension e
			JOIN pg_available_extensions a ON a.name = e.extname
			WHERE a.default_version IS DISTINCT FROM e.extversion ORDER BY e.extname`)
		if err != nil {
			return fmt.Errorf("list the extensions of %s: %w", database, err)
		}
		type outdated struct{ name, version string }
		stale, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (outdated, error) {
			var o outdated
			return o, row.Scan(&o.name, &o.version)
		})
		if err != nil {
			return err
		}
		for _, e := range stale {
			if _, err := conn.Exec(ctx, "ALTER EXTENSION "+pgx.Identifier{e.name}.Sanitize()+" UPDATE"); err != nil {
				return fmt.Errorf("update extension %s in %s: %w", e.name, database, err)
			}
			updated = append(updated, fmt.Sprintf("%s in %s to %s", e.name, database, e.version))
		}
		return nil
	})
	return updated, err
}

// RebuildStatistics gives the planner statistics again: pg_upgrade carries none before 18, and
// from 18 on it carries all but the extended ones. vacuumdb analyzes in stages, coarse ones
// first, so plans are sane again soon; from 18 on only what is missing.
func (i *Instance) RebuildStatistics(ctx context.Context) error {
	major, err := i.BinariesMajor(ctx)
	if err != nil {
		return err
	}
	args := []string{"--host=" + i.SocketDir, "--port=" + strconv.Itoa(i.Port), "--username=" + bootstrapSuperuser,
		"--all", "--analyze-in-stages"}
	if major >= 18 {
		args = append(args, "--missing-stats-only")
	}
	if _, err := i.output(ctx, "vacuumdb", args...); err != nil {
		return fmt.Errorf("rebuild statistics: %w", err)
	}
	return nil
}
