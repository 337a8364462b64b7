package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
	"github.com/pgpilot/pgpilot-operator/test/pgtest"
)

// initialised is a new instance with a cluster in its data directory, not started (a test may
// write its own configuration first).
func initialised(t testing.TB) *postgres.Instance {
	t.Helper()
	inst := pgtest.NewInstance(t, "primary")
	if err := inst.InitDB(context.Background(), superuserPassword); err != nil {
		t.Fatal(err)
	}
	return inst
}

// superuserConnector connects to inst's databases as the superuser, over TCP.
func superuserConnector(inst *postgres.Instance) postgres.Connector {
	return func(ctx context.Context, database string) (*pgx.Conn, error) {
		return postgres.Connect(ctx, inst.Port, "postgres", superuserPassword, database)
	}
}

// startedAsSuperuser starts inst and connects to it as the superuser.
func startedAsSuperuser(t *testing.T, inst *postgres.Instance) *pgx.Conn {
	t.Helper()
	if err := inst.Start(); err != nil {
		t.Fatal(err)
	}
	return pgtest.Connect(t, inst, "postgres", superuserPassword, "postgres")
}
