package postgres_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
	"github.com/pgpilot/pgpilot-operator/test/pgtest"
)

// A pass connects to a managed database only when a row was written in it since it was last
// read as declared: a schema's owner changed by hand is put back all the same, and so is a change
// hidden behind a reset of the database's statistics or a server that counts nothing.
func TestQuietDatabaseIsReadAgainOnlyOnceWrittenIn(t *testing.T) {
	ctx := context.Background()
	inst := initialised(t)
	admin := startedAsSuperuser(t, inst)
	exec(t, admin, "CREATE ROLE etl; CREATE ROLE intruder")
	var connections atomic.Int64 // the pass connects from several goroutines
	superuser := superuserConnector(inst)
	connect := func(ctx context.Context, database string) (*pgx.Conn, error) {
		connections.Add(1)
		return superuser(ctx, database)
	}
	request := agentapi.CatalogRequest{Databases: []agentapi.ManagedDatabase{{Name: "shop", Owner: "etl", ConnectionLimit: -1,
		Schemas: []agentapi.ManagedSchema{{Name: "sales", Owner: "etl"}}}}}
	quiet := postgres.QuietDatabases{}
	settled := map[string]bool{} // as the agent's: the declaration applied in the last pass
	pass := func() (agentapi.DatabaseResult, int) {
		connections.Store(0)
		results, statements, err := postgres.ReconcileDatabases(ctx, admin, connect, request, settled, quiet)
		if err != nil {
			t.Fatal(err)
		}
		return results[0], statements
	}
	if result, statements := pass(); result.State != agentapi.RoleApplied || statements != 4 {
		t.Fatalf("first pass: %+v, %d statements", result, statements)
	}
	settled["shop"] = true
	awaitQuiet := func(when string) {
		t.Helper()
		pgtest.EventuallyWithin(t, "a pass that connects to no database "+when, 20*time.Second, func() error {
			if result, _ := pass(); connections.Load() > 0 || result.State != agentapi.RoleApplied || len(result.Schemas) != 1 || result.Schemas[0].State != agentapi.RoleApplied {
				return fmt.Errorf("%d connections, %+v", connections.Load(), result)
			}
			return nil
		})
	}
	awaitQuiet("after the first")
	awaitRepaired := func(change string) {
		t.Helper()
		shop := pgtest.Connect(t, inst, "postgres", superuserPassword, "shop")
		exec(t, shop, change)
		_ = shop.Close(ctx)
		pgtest.EventuallyWithin(t, "the drift put back", 20*time.Second, func() error {
			if result, statements := pass(); statements != 1 || result.State != agentapi.RoleDrift || result.Schemas[0].State != agentapi.RoleDrift {
				return fmt.Errorf("%d statements, %+v", statements, result)
			}
			return nil
		})
		var owner string
		if err := pgtest.Connect(t, inst, "postgres", superuserPassword, "shop").QueryRow(ctx,
			"SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'sales'").Scan(&owner); err != nil || owner != "etl" {
			t.Fatalf("sales is owned by %q (%v), want etl", owner, err)
		}
		awaitQuiet("after the repair")
	}
	awaitRepaired("ALTER SCHEMA sales OWNER TO intruder")

	// The database's statistics reset by the session that made the change: put back all the same.
	awaitRepaired("ALTER SCHEMA sales OWNER TO intruder; SELECT pg_stat_reset()")

	// A server that counts nothing: every pass reads.
	exec(t, admin, "ALTER SYSTEM SET track_counts = off")
	exec(t, admin, "SELECT pg_reload_conf()")
	pgtest.EventuallyWithin(t, "track_counts off", 10*time.Second, func() error {
		var on string
		if err := admin.QueryRow(ctx, "SHOW track_counts").Scan(&on); err != nil || on != "off" {
			return fmt.Errorf("track_counts %q (%v)", on, err)
		}
		return nil
	})
	for range 2 {
		if pass(); connections.Load() != 1 {
			t.Fatalf("with track_counts off, a pass connected to %d databases, want 1", connections.Load())
		}
	}
}
