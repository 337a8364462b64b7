package postgres_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
	"github.com/pgpilot/pgpilot-operator/test/pgtest"
)

// A PostgresCluster's pg_hba entries reach the roles its author owns and no other: with
// "trust" for every address, the superuser, the replication and the monitoring roles still need
// their credentials and the replication protocol stays pgpilot's, while an application role
// logs in as the entry says.
func TestUserHBAEntriesCannotReachPgpilotsRoles(t *testing.T) {
	ctx := context.Background()
	inst := initialised(t, "primary")
	cluster := pgtest.Cluster(nil)
	cluster.Spec.PostgreSQL.PgHBA = []string{"host all all 0.0.0.0/0 trust", "host replication all 0.0.0.0/0 trust"}
	pgtest.WriteConfig(t, inst, cluster)
	admin := startedAsSuperuser(t, inst)
	for _, statement := range []string{
		"CREATE ROLE app LOGIN",
		fmt.Sprintf("CREATE ROLE %s LOGIN REPLICATION PASSWORD 'secret-repl'", agentapi.DefaultReplicationUser),
		fmt.Sprintf("CREATE ROLE %s LOGIN", agentapi.MonitorUser),
	} {
		if _, err := admin.Exec(ctx, statement); err != nil {
			t.Fatal(err)
		}
	}
	connect := func(user, password, replication string) error {
		config, err := pgconn.ParseConfig(fmt.Sprintf("host=127.0.0.1 port=%d dbname=postgres sslmode=disable", inst.Port))
		if err != nil {
			return err
		}
		config.User, config.Password = user, password
		if replication != "" {
			config.RuntimeParams["replication"] = replication
		}
		conn, err := pgconn.ConnectConfig(ctx, config)
		if err == nil {
			_ = conn.Close(ctx)
		}
		return err
	}
	for _, login := range []struct{ user, replication string }{
		{agentapi.Superuser, ""},
		{agentapi.DefaultReplicationUser, ""},
		{agentapi.MonitorUser, ""},
		{agentapi.Superuser, "database"},
		{agentapi.DefaultReplicationUser, "database"},
	} {
		if err := connect(login.user, "wrong", login.replication); err == nil {
			t.Errorf("%s (replication %q) logged in with a wrong password through the user's trust entry", login.user, login.replication)
		}
	}
	if err := connect("app", "", ""); err != nil {
		t.Errorf("the user's own trust entry does not let its application role in: %v", err)
	}
	if err := connect(agentapi.Superuser, superuserPassword, ""); err != nil {
		t.Errorf("the superuser with its password: %v", err)
	}
}

// The application's owner cannot be a role pgpilot manages, whatever reached the agent: its
// Secret's password would become that role's.
func TestEnsureRolesRefusesAReservedApplicationOwner(t *testing.T) {
	ctx := context.Background()
	inst := initialised(t, "primary")
	admin := startedAsSuperuser(t, inst)
	for _, owner := range []string{agentapi.Superuser, agentapi.DefaultReplicationUser, agentapi.MonitorUser, "pg_monitor"} {
		err := postgres.EnsureRoles(ctx, admin, postgres.Roles{Superuser: agentapi.Superuser, SuperuserPassword: superuserPassword,
			ReplicationUser: agentapi.DefaultReplicationUser, ReplicationPassword: replicationPassword,
			AppOwner: owner, AppPassword: "now-i-am-superuser", AppDatabase: "app"})
		if err == nil {
			t.Errorf("EnsureRoles took %s as the application's owner", owner)
		}
	}
	if err := pgtest.Connect(t, inst, "postgres", superuserPassword, "postgres").Close(ctx); err != nil {
		t.Fatal(err)
	}
}
