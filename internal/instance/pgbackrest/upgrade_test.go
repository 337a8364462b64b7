package pgbackrest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
	"github.com/pgpilot/pgpilot-operator/test/pgtest"
)

// upgradeRows fill a table bigger than the new catalogs, so that what a delta restore copies
// is told apart from what it keeps.
const upgradeRows = 1000000

// After a --link major upgrade the relation files keep their names and contents, so a replica of
// the old major is rebuilt from the first backup of the new one by a delta restore that copies
// only what differs (the new catalogs), not the data. Real servers of the carried old major,
// pg_upgrade of this major, pgBackRest and the S3 server; in the newer majors' roots.
func TestMajorUpgradeRebuildsAReplicaByDeltaRestore(t *testing.T) {
	if pgtest.Major(t) == pgtest.OldestMajor {
		t.Skipf("PostgreSQL %d is the oldest major: its upgrade tests run in the newer majors' roots (make test-real-servers)", pgtest.Major(t))
	}
	ctx := context.Background()
	carried := pgtest.Carried(t)
	s3 := pgtest.StartS3(t)

	primary := pgtest.NewInstance(t, "old-primary")
	runner := configure(t, s3, primary)
	primary.BinDir, primary.Env = carried.BinDir(), append(primary.Env, carried.Env()...)
	if err := primary.InitDB(ctx, superuserPassword); err != nil {
		t.Fatal(err)
	}
	primary.Settings["archive_mode"] = "on"
	primary.Settings["archive_command"] = runner.ArchiveCommand()
	if err := primary.Start(); err != nil {
		t.Fatal(err)
	}
	admin := pgtest.Connect(t, primary, agentapi.Superuser, superuserPassword, "postgres")
	if err := runner.StanzaCreate(ctx); err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		fmt.Sprintf("CREATE ROLE %s LOGIN REPLICATION PASSWORD 'repl'", agentapi.DefaultReplicationUser),
		"CREATE TABLE orders (id bigint PRIMARY KEY, note text)",
		fmt.Sprintf("INSERT INTO orders SELECT g, md5(g::text) FROM generate_series(1, %d) g", upgradeRows),
	} {
		if _, err := admin.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}

	replica := pgtest.NewInstance(t, "old-replica")
	replicaRunner := configure(t, s3, replica)
	replica.BinDir, replica.Env = carried.BinDir(), append(replica.Env, carried.Env()...)
	conninfo := fmt.Sprintf("host=%s port=%d user=%s application_name=replica", pgtest.Loopback, primary.Port, agentapi.DefaultReplicationUser)
	if err := replica.Clone(ctx, conninfo, "repl", "replica"); err != nil {
		t.Fatal(err)
	}
	if err := replica.Start(); err != nil {
		t.Fatal(err)
	}
	pgtest.WaitReplayed(t, admin, replica, superuserPassword)
	_ = admin.Close(ctx)
	// Writes stop cleanly; the replica has everything; both stop.
	if err := primary.Stop(time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := replica.Stop(time.Minute); err != nil {
		t.Fatal(err)
	}

	upgrade := &postgres.MajorUpgrade{Old: primary, NewBinDir: pgtest.BinDir(t), Mode: postgres.UpgradeLink}
	for _, step := range []func(context.Context) error{upgrade.Prepare, upgrade.Run} {
		if err := step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := upgrade.Commit(); err != nil {
		t.Fatal(err)
	}
	primary.BinDir, primary.Env = pgtest.BinDir(t), runner.Environment()
	if err := primary.Start(); err != nil {
		t.Fatal(err)
	}
	if err := upgrade.Finish(); err != nil {
		t.Fatal(err)
	}
	_ = pgtest.Connect(t, primary, agentapi.Superuser, superuserPassword, "postgres")
	if err := runner.StanzaUpgrade(ctx); err != nil {
		t.Fatal(err)
	}
	if err := runner.Backup(ctx, "full"); err != nil {
		t.Fatal(err)
	}

	// The replica's directory is still the old major's: the delta restore turns it into the
	// new major's standby.
	started := time.Now()
	report, err := replicaRunner.RestoreStandbyDelta(ctx, "", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("delta restore of the replica: %d MiB copied, %d MiB kept, in %s", report.Copied>>20, report.Kept>>20, time.Since(started).Round(time.Millisecond))
	if report.Kept < 2*report.Copied {
		t.Fatalf("the delta restore copied %d bytes and kept %d: the relation files were not kept", report.Copied, report.Kept)
	}
	replica.BinDir, replica.Env = pgtest.BinDir(t), replicaRunner.Environment()
	// The replication password in a file beside the data directory, as the agent keeps it.
	if err := replica.WriteReplicationPassfile(agentapi.DefaultReplicationUser, "repl"); err != nil {
		t.Fatal(err)
	}
	if err := replica.ConfigureStandby(conninfo+" passfile="+replica.ReplicationPassfile(), ""); err != nil {
		t.Fatal(err)
	}
	if err := replica.Start(); err != nil {
		t.Fatal(err)
	}
	conn := pgtest.Connect(t, replica, agentapi.Superuser, superuserPassword, "postgres")
	pgtest.Eventually(t, "the rebuilt replica streams from the upgraded primary with every row", func() error {
		var rows int
		var streaming bool
		err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM orders),
			EXISTS (SELECT FROM pg_stat_wal_receiver WHERE status = 'streaming')`).Scan(&rows, &streaming)
		switch {
		case err != nil:
			return err
		case rows != upgradeRows || !streaming:
			return fmt.Errorf("%d rows, streaming %v", rows, streaming)
		}
		return nil
	})
	var major int
	if err := conn.QueryRow(ctx, "SELECT current_setting('server_version_num')::int / 10000").Scan(&major); err != nil || major != pgtest.Major(t) {
		t.Fatalf("the rebuilt replica runs %d (%v), want %d", major, err, pgtest.Major(t))
	}
}
