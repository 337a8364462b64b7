package postgres_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"k8s.io/utils/ptr"

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
	inst := initialised(t)
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
		return tryLogin(inst, "127.0.0.1", user, password, replication)
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
	inst := initialised(t)
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

// The superuser logs in from the network only when spec.enableSuperuserAccess says so; in-pod
// clients (the pod's loopback) and streaming_replica, which replication and pg_rewind use, are
// not affected. A client bound to 127.0.0.2 is "the network" here: pgpilot's loopback rules
// name 127.0.0.1 and ::1 only.
func TestSuperuserNetworkAccess(t *testing.T) {
	ctx := context.Background()
	inst := initialised(t)
	cluster := pgtest.Cluster(nil)
	pgtest.WriteConfig(t, inst, cluster)
	admin := startedAsSuperuser(t, inst)
	if _, err := admin.Exec(ctx, fmt.Sprintf("CREATE ROLE %s LOGIN REPLICATION PASSWORD 'secret-repl'", agentapi.DefaultReplicationUser)); err != nil {
		t.Fatal(err)
	}
	connect := func(from, user, password string) error {
		return tryLogin(inst, from, user, password, "")
	}
	if err := connect("127.0.0.2", agentapi.Superuser, superuserPassword); err == nil {
		t.Error("the superuser logged in from the network without spec.enableSuperuserAccess")
	}
	if err := connect("127.0.0.1", agentapi.Superuser, superuserPassword); err != nil {
		t.Errorf("the superuser over the pod's loopback: %v", err)
	}
	if err := connect("127.0.0.2", agentapi.DefaultReplicationUser, "secret-repl"); err != nil {
		t.Errorf("streaming_replica from the network: %v", err)
	}

	cluster.Spec.EnableSuperuserAccess = ptr.To(true)
	pgtest.WriteConfig(t, inst, cluster)
	if err := inst.Reload(); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, "the superuser logs in from the network once allowed", func() error {
		return connect("127.0.0.2", agentapi.Superuser, superuserPassword)
	})
}

// tryLogin connects to inst's loopback port from the local address from, without TLS, as user
// (a replication connection when replication is set), and disconnects.
func tryLogin(inst *postgres.Instance, from, user, password, replication string) error {
	ctx := context.Background()
	config, err := pgconn.ParseConfig(fmt.Sprintf("host=127.0.0.1 port=%d dbname=postgres sslmode=disable", inst.Port))
	if err != nil {
		return err
	}
	config.User, config.Password = user, password
	if replication != "" {
		config.RuntimeParams["replication"] = replication
	}
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	config.DialFunc = dialer.DialContext
	conn, err := pgconn.ConnectConfig(ctx, config)
	if err == nil {
		_ = conn.Close(ctx)
	}
	return err
}
