package postgres_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
	"github.com/pgpilot/pgpilot-operator/test/pgtest"
)

// pair is a primary and a standby streaming from it, real servers on loopback.
type pair struct {
	primary, standby *postgres.Instance
}

func startPair(t *testing.T) pair {
	t.Helper()
	ctx := context.Background()
	p := pair{primary: pgtest.NewInstance(t, "db-0"), standby: pgtest.NewInstance(t, "db-1")}
	if err := p.primary.InitDB(ctx, superuserPassword); err != nil {
		t.Fatal(err)
	}
	if err := p.primary.Start(); err != nil {
		t.Fatal(err)
	}
	admin := pgtest.Connect(t, p.primary, agentapi.Superuser, superuserPassword, "postgres")
	if err := postgres.EnsureRoles(ctx, admin, postgres.Roles{Superuser: agentapi.Superuser, SuperuserPassword: superuserPassword,
		ReplicationUser: agentapi.DefaultReplicationUser, ReplicationPassword: replicationPassword,
		AppOwner: "app", AppPassword: appPassword, AppDatabase: "app"}); err != nil {
		t.Fatal(err)
	}
	if err := p.standby.Clone(ctx, replicationConnInfo(p.primary, "db-1"), "", "db_1"); err != nil {
		t.Fatal(err)
	}
	if err := p.standby.Start(); err != nil {
		t.Fatal(err)
	}
	return p
}

func replicationConnInfo(primary *postgres.Instance, name string) string {
	return postgres.ConnInfo("host", "127.0.0.1", "port", strconv.Itoa(primary.Port), "user", agentapi.DefaultReplicationUser,
		"password", replicationPassword, "application_name", name)
}

func exec(t *testing.T, conn *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func count(t *testing.T, conn *pgx.Conn) int {
	t.Helper()
	var n int
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM t").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitForRows waits until conn sees n rows in t (a standby replaying).
func waitForRows(t *testing.T, conn *pgx.Conn, n int) {
	t.Helper()
	pgtest.Eventually(t, "rows replicated", func() error {
		var got int
		err := conn.QueryRow(context.Background(), "SELECT count(*) FROM t").Scan(&got)
		if err == nil && got != n {
			err = strconv.ErrRange
		}
		return err
	})
}

// A planned switchover: the primary shuts down cleanly, the standby replays up to the
// shutdown checkpoint, is promoted, and the old primary follows it without a rewind. Every
// acknowledged commit survives.
func TestSwitchoverLosesNothingAndTheOldPrimaryFollows(t *testing.T) {
	ctx := context.Background()
	p := startPair(t)
	primary := pgtest.Connect(t, p.primary, agentapi.Superuser, superuserPassword, "postgres")
	exec(t, primary, "CREATE TABLE t (v int)")
	for i := range 200 {
		exec(t, primary, "INSERT INTO t VALUES ($1)", i) // each one acknowledged
	}
	// A switchover starts only while the target streams: a clean shutdown then hands it every
	// record up to the shutdown checkpoint.
	pgtest.Eventually(t, "standby streaming", func() error {
		var n int
		err := primary.QueryRow(ctx, "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'").Scan(&n)
		if err == nil && n != 1 {
			err = fmt.Errorf("%d standbys streaming", n)
		}
		return err
	})
	if err := p.primary.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	control, err := p.primary.ControlData(ctx)
	if err != nil || !control.CleanlyShutDown() {
		t.Fatalf("old primary %+v (%v), want a clean shutdown", control, err)
	}
	standby := pgtest.Connect(t, p.standby, agentapi.Superuser, superuserPassword, "postgres")
	pgtest.Eventually(t, "standby replayed the shutdown checkpoint", func() error {
		var caughtUp bool
		var replayed string
		err := standby.QueryRow(ctx, "SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn, pg_last_wal_replay_lsn()::text",
			control.CheckpointLSN).Scan(&caughtUp, &replayed)
		if err == nil && !caughtUp {
			err = fmt.Errorf("replayed %s, shutdown checkpoint at %s", replayed, control.CheckpointLSN)
		}
		return err
	})
	if err := p.standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	exec(t, standby, "SELECT pg_create_physical_replication_slot('db_0')")
	if got := count(t, standby); got != 200 {
		t.Fatalf("new primary has %d rows, want every acknowledged 200", got)
	}

	if err := p.primary.ConfigureStandby(replicationConnInfo(p.standby, "db-0"), "db_0"); err != nil {
		t.Fatal(err)
	}
	if err := p.primary.Start(); err != nil {
		t.Fatal(err)
	}
	exec(t, standby, "INSERT INTO t VALUES (200)")
	follower := pgtest.Connect(t, p.primary, agentapi.Superuser, superuserPassword, "postgres")
	waitForRows(t, follower, 201)
	status, err := postgres.QueryStatus(ctx, follower)
	if err != nil || status.Role != agentapi.RoleReplica || status.Timeline != 2 {
		t.Errorf("old primary %+v (%v), want a replica on timeline 2", status, err)
	}
}

// A failover that left the old primary ahead (it kept committing after the standby was
// promoted): pg_rewind takes it back to where the timelines parted, says where, and it
// follows the new primary. Its diverged commits are gone, and reported.
func TestRewindDivergedOldPrimary(t *testing.T) {
	ctx := context.Background()
	p := startPair(t)
	primary := pgtest.Connect(t, p.primary, agentapi.Superuser, superuserPassword, "postgres")
	exec(t, primary, "CREATE TABLE t (v int)")
	exec(t, primary, "INSERT INTO t SELECT generate_series(1, 10)")
	standby := pgtest.Connect(t, p.standby, agentapi.Superuser, superuserPassword, "postgres")
	waitForRows(t, standby, 10)

	if err := p.standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	exec(t, primary, "INSERT INTO t SELECT generate_series(100, 104)") // only the old primary has these
	exec(t, standby, "INSERT INTO t VALUES (11)")
	if err := p.primary.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	before, err := p.primary.ControlData(ctx)
	if err != nil {
		t.Fatal(err)
	}

	// The password apart, as the agent gives it: pg_rewind takes it from its environment.
	rewind, err := p.primary.Rewind(ctx, postgres.ConnInfo("host", "127.0.0.1", "port", strconv.Itoa(p.standby.Port),
		"user", agentapi.Superuser, "dbname", "postgres"), superuserPassword)
	if err != nil {
		t.Fatal(err)
	}
	if rewind.DivergedAt == "" || rewind.NoRewindNeeded {
		t.Fatalf("rewind %+v, want the divergence point", rewind)
	}
	var inOrder bool
	if err := standby.QueryRow(ctx, "SELECT $1::pg_lsn <= $2::pg_lsn", rewind.DivergedAt, before.CheckpointLSN).Scan(&inOrder); err != nil || !inOrder {
		t.Errorf("lost range %s..%s is not a range (%v)", rewind.DivergedAt, before.CheckpointLSN, err)
	}
	t.Logf("the old primary's WAL from %s to %s was only on it", rewind.DivergedAt, before.CheckpointLSN)

	exec(t, standby, "SELECT pg_create_physical_replication_slot('db_0')")
	if err := p.primary.ConfigureStandby(replicationConnInfo(p.standby, "db-0"), "db_0"); err != nil {
		t.Fatal(err)
	}
	if err := p.primary.Start(); err != nil {
		t.Fatal(err)
	}
	follower := pgtest.Connect(t, p.primary, agentapi.Superuser, superuserPassword, "postgres")
	waitForRows(t, follower, 11)
	var diverged int
	if err := follower.QueryRow(ctx, "SELECT count(*) FROM t WHERE v >= 100").Scan(&diverged); err != nil || diverged != 0 {
		t.Errorf("%d diverged rows on the rewound server (%v), want 0", diverged, err)
	}
}
