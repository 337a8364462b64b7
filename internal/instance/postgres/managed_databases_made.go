package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// madeDatabasesTable records the databases pgpilot made, by OID, in the postgres database: only
// those does it drop, or give another owner. It lives with the data (replicated, carried by
// pg_upgrade), not in the agent's memory, so that a new primary knows them too.
//
// CREATE DATABASE takes no transaction, so the record cannot be written with it: a primary
// stopped between the two would leave a database pgpilot made that no one knows it made, kept
// for ever against its reclaimPolicy. The name is written first to databasesBeingMadeTable: a
// database that exists under a name there was made by an agent stopped before its record, and
// the next pass, on this primary or the next, records it.
const (
	madeDatabasesTable      = "pgpilot.databases"
	databasesBeingMadeTable = "pgpilot.databases_being_made"
)

// readMadeDatabases marks the existing databases pgpilot made, and those it made but did not
// record.
func readMadeDatabases(ctx context.Context, conn *pgx.Conn, existing map[string]*existingDatabase) error {
	if len(existing) == 0 {
		return nil
	}
	var made, beingMade bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL",
		madeDatabasesTable, databasesBeingMadeTable).Scan(&made, &beingMade); err != nil || !made {
		return err
	}
	query := `SELECT d.datname::text, true FROM ` + madeDatabasesTable + ` m JOIN pg_database d ON d.oid = m.oid`
	if beingMade { // an agent of an earlier release made the record without it
		query = `SELECT d.datname::text, m.oid IS NOT NULL FROM pg_database d LEFT JOIN ` + madeDatabasesTable + ` m ON m.oid = d.oid
			WHERE m.oid IS NOT NULL OR d.datname IN (SELECT name FROM ` + databasesBeingMadeTable + `)`
	}
	rows, err := conn.Query(ctx, query)
	if err != nil {
		return fmt.Errorf("read the databases pgpilot made: %w", err)
	}
	var name string
	var recorded bool
	_, err = pgx.ForEachRow(rows, []any{&name, &recorded}, func() error {
		if db := existing[name]; db != nil {
			db.Made, db.Unrecorded = true, !recorded
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read the databases pgpilot made: %w", err)
	}
	return nil
}

// ensureMadeDatabasesTable makes pgpilot's record of the databases it made before any is, and
// forgets the names of databases an agent stopped before making: it runs before the pass's
// databases are made, when no name there is of a database being made.
func ensureMadeDatabasesTable(ctx context.Context, conn *pgx.Conn) error {
	_, err := conn.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS pgpilot;
		REVOKE ALL ON SCHEMA pgpilot FROM PUBLIC;
		CREATE TABLE IF NOT EXISTS `+madeDatabasesTable+` (oid oid PRIMARY KEY, name name NOT NULL);
		CREATE TABLE IF NOT EXISTS `+databasesBeingMadeTable+` (name name PRIMARY KEY);
		DELETE FROM `+databasesBeingMadeTable+` b WHERE NOT EXISTS (SELECT FROM pg_database d WHERE d.datname = b.name)`)
	if err != nil {
		return fmt.Errorf("make the record of the databases pgpilot made: %w", err)
	}
	return nil
}

// makeDatabase runs create, the CREATE DATABASE of name, between the name's note in
// databasesBeingMadeTable and the database's record (three statements).
func makeDatabase(ctx context.Context, conn *pgx.Conn, name, create string) error {
	if _, err := conn.Exec(ctx, `INSERT INTO `+databasesBeingMadeTable+` VALUES (`+quoteLiteral(name)+`) ON CONFLICT DO NOTHING`); err != nil {
		return fmt.Errorf("note database %s as being made: %w", name, err)
	}
	if err := execOne(ctx, conn, create); err != nil {
		// Made by someone else in the meantime, or not at all: not pgpilot's.
		_, _ = conn.Exec(ctx, `DELETE FROM `+databasesBeingMadeTable+` WHERE name = `+quoteLiteral(name))
		return err
	}
	return recordMadeDatabase(ctx, conn, name)
}

// recordMadeDatabase adds the database pgpilot made to its record, in one transaction with the
// removal of its name from those being made, and forgets databases dropped since.
func recordMadeDatabase(ctx context.Context, conn *pgx.Conn, name string) error {
	_, err := conn.Exec(ctx, `DELETE FROM `+madeDatabasesTable+` m WHERE NOT EXISTS (SELECT FROM pg_database d WHERE d.oid = m.oid);
		INSERT INTO `+madeDatabasesTable+` SELECT oid, datname FROM pg_database WHERE datname = `+quoteLiteral(name)+`
			ON CONFLICT DO NOTHING;
		DELETE FROM `+databasesBeingMadeTable+` WHERE name = `+quoteLiteral(name))
	if err != nil {
		return fmt.Errorf("record database %s as made by pgpilot: %w", name, err)
	}
	return nil
}
