package postgres

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// pg_upgrade --check compares catalogs; it does not restore them. A schema the new major cannot
// restore (a view on a column the new major removed, a column option the old minor release
// writes and the new major rejects) fails pg_upgrade half-way, inside the downtime. The
// rehearsal restores the old cluster's schema as pg_upgrade will, ahead of time.

const (
	// bootstrapSuperuser is the role initdb makes, as which pg_upgrade and its tools connect.
	bootstrapSuperuser = "postgres"
	// maintenanceDatabase and templateDatabase are in every cluster.
	maintenanceDatabase = "postgres"
	templateDatabase    = "template1"
)

// Rehearse dumps the running old cluster's schema with the new major's pg_dump --binary-upgrade
// and restores it into the prepared new cluster started in binary upgrade mode, as pg_upgrade
// does, then makes the new cluster afresh. What fails to restore comes back as
// *UpgradeCheckFailed, one problem per database with the server's error. connect opens a
// superuser connection to one of the old cluster's databases.
func (u *MajorUpgrade) Rehearse(ctx context.Context, connect Connector) error {
	databases, err := restoredDatabases(ctx, connect)
	if err != nil {
		return err
	}
	// A rehearsal killed mid-way left its server.
	if err := stopDetachedServers(u.NextDataDir()); err != nil {
		return err
	}
	if err := u.Prepare(ctx); err != nil {
		return err
	}
	scratch := u.newInstance(u.NextDataDir())
	work := u.NextDataDir() + ".rehearsal"
	if err := os.MkdirAll(work, 0o700); err != nil {
		return err
	}
	if err := u.Old.chown(work); err != nil {
		return err
	}
	_, err = scratch.output(ctx, "pg_ctl", "start", "--wait", "--pgdata="+scratch.DataDir,
		"--log="+filepath.Join(work, "server.log"),
		"--options=-b -p "+strconv.Itoa(u.newPort())+" -k "+u.Old.SocketDir+" -c listen_addresses= -c fsync=off -c jit=off -c autovacuum=off")
	if err != nil {
		return fmt.Errorf("start the new major in binary upgrade mode: %w", err)
	}
	problems, err := u.restoreSchemas(ctx, scratch, work, databases)
	_, stopErr := scratch.output(context.WithoutCancel(ctx), "pg_ctl", "stop", "--wait", "--mode=immediate", "--pgdata="+scratch.DataDir)
	// pg_upgrade wants an empty new cluster: the one the rehearsal filled goes.
	if err := errors.Join(err, stopErr, os.RemoveAll(work), os.RemoveAll(scratch.DataDir)); err != nil {
		return fmt.Errorf("rehearse the schema restore: %w", err)
	}
	if err := u.Prepare(ctx); err != nil {
		return err
	}
	if len(problems) > 0 {
		return &UpgradeCheckFailed{Problems: problems}
	}
	return nil
}

// Connector opens a superuser connection to one database of a cluster.
type Connector func(ctx context.Context, database string) (*pgx.Conn, error)

// restoredDatabases are the databases pg_upgrade carries over: all but template0, template1
// first. One that allows no connections is left out: pg_upgrade's check reports it.
func restoredDatabases(ctx context.Context, connect Connector) ([]string, error) {
	conn, err := connect(ctx, maintenanceDatabase)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close(ctx) }()
	rows, err := conn.Query(ctx, `SELECT datname FROM pg_database WHERE datname <> 'template0' AND datallowconn
		ORDER BY datname <> 'template1', datname`)
	if err != nil {
		return nil, fmt.Errorf("list databases: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// eachDatabase calls visit with a connection to each of the restoredDatabases in turn.
func eachDatabase(ctx context.Context, connect Connector, visit func(conn *pgx.Conn, database string) error) error {
	databases, err := restoredDatabases(ctx, connect)
	if err != nil {
		return err
	}
	for _, database := range databases {
		conn, err := connect(ctx, database)
		if err != nil {
			return fmt.Errorf("connect to %s: %w", database, err)
		}
		err = visit(conn, database)
		_ = conn.Close(ctx)
		if err != nil {
			return err
		}
	}
	return nil
}

// restoreSchemas restores the roles, then each database's schema with pg_upgrade's options
// (template1 and postgres exist in a new cluster already: they are replaced). A database that
// fails is a problem; the others are still tried, so the report is whole.
func (u *MajorUpgrade) restoreSchemas(ctx context.Context, scratch *Instance, work string, databases []string) ([]string, error) {
	old := []string{"--host=" + u.Old.SocketDir, "--port=" + strconv.Itoa(u.Old.Port), "--username=" + bootstrapSuperuser}
	target := []string{"--host=" + u.Old.SocketDir, "--port=" + strconv.Itoa(u.newPort()), "--username=" + bootstrapSuperuser}
	major, err := scratch.BinariesMajor(ctx)
	if err != nil {
		return nil, err
	}
	globals := filepath.Join(work, "globals.sql")
	if _, err := scratch.output(ctx, "pg_dumpall", append(old, "--globals-only", "--binary-upgrade",
		"--quote-all-identifiers", "--no-sync", "--file="+globals)...); err != nil {
		return nil, fmt.Errorf("dump the roles: %w", err)
	}
	if out, err := scratch.output(ctx, "psql", append(target, "--no-psqlrc", "--quiet", "--set=ON_ERROR_STOP=1",
		"--dbname="+templateDatabase, "--file="+globals)...); err != nil {
		return []string{fmt.Sprintf("the roles do not restore on PostgreSQL %d: %s", major, restoreErrors(out))}, nil
	}
	var problems []string
	for _, database := range databases {
		dump := filepath.Join(work, "schema.dump")
		if _, err := scratch.output(ctx, "pg_dump", append(old, "--schema-only", "--binary-upgrade", "--quote-all-identifiers",
			"--no-sync", "--format=custom", "--file="+dump, "--dbname="+database)...); err != nil {
			return nil, fmt.Errorf("dump the schema of %s: %w", database, err)
		}
		connectTo := templateDatabase
		if database == templateDatabase {
			connectTo = maintenanceDatabase
		}
		args := append(slices.Clone(target), "--exit-on-error", "--create", "--dbname="+connectTo)
		if database == templateDatabase || database == maintenanceDatabase {
			args = append(args, "--clean")
		}
		if out, err := scratch.output(ctx, "pg_restore", append(args, dump)...); err != nil {
			problems = append(problems, fmt.Sprintf("database %s does not restore on PostgreSQL %d: %s", database, major, restoreErrors(out)))
		}
	}
	return problems, nil
}

// restoreErrors are the server's errors in a restore's output, with the statement that failed,
// on one line.
func restoreErrors(out []byte) string {
	var found []string
	for _, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		_, message, isError := strings.Cut(line, "ERROR:")
		statement, isStatement := strings.CutPrefix(line, "Command was: ")
		switch {
		case isError:
			found = append(found, "ERROR: "+strings.TrimSpace(message))
		case isStatement:
			found = append(found, "in "+truncate(statement, 160))
		}
	}
	if len(found) == 0 {
		return lastLine(out)
	}
	return strings.Join(found, " ")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
