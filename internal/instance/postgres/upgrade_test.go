package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
	"github.com/pgpilot/pgpilot-operator/test/pgtest"
)

// The major upgrade on real servers: a primary and a hot standby of the older major run from
// binaries carried into this major's root (as the new image runs them), the check runs live
// against the standby, and the standby, promoted and stopped, is upgraded by pg_upgrade of this
// major. It runs in the newer majors' roots (make test-real-servers); on the oldest major there is
// nothing to upgrade from.

func skipOnOldestMajor(t *testing.T) {
	if major := pgtest.Major(t); major == pgtest.OldestMajor {
		t.Skipf("PostgreSQL %d is the oldest major: its upgrade tests run in the newer majors' roots (make test-real-servers)", major)
	}
}

// orderRows are the rows every upgrade must keep.
const orderRows = 200000

// oldMajorPair is a primary of the carried major with rows in an indexed table, and a hot
// standby streaming from it.
func oldMajorPair(t *testing.T, carried postgres.Carried) (primary, standby *postgres.Instance, admin *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	primary = carriedInstance(t, carried, "old-primary")
	if err := primary.InitDB(ctx, superuserPassword); err != nil {
		t.Fatal(err)
	}
	admin = startedAsSuperuser(t, primary)
	exec(t, admin, fmt.Sprintf("CREATE ROLE %s LOGIN REPLICATION PASSWORD 'repl'", agentapi.DefaultReplicationUser))
	exec(t, admin, `CREATE TABLE orders (id bigint PRIMARY KEY, customer int NOT NULL, note text);
		CREATE INDEX orders_customer ON orders (customer)`)
	exec(t, admin, "INSERT INTO orders SELECT g, g % 1000, md5(g::text) FROM generate_series(1, $1) g", orderRows)
	standby = carriedInstance(t, carried, "old-standby")
	conninfo := fmt.Sprintf("host=%s port=%d user=%s application_name=standby", pgtest.Loopback, primary.Port, agentapi.DefaultReplicationUser)
	if err := standby.Clone(ctx, conninfo, "repl", "standby"); err != nil {
		t.Fatal(err)
	}
	if err := standby.Start(); err != nil {
		t.Fatal(err)
	}
	return primary, standby, admin
}

// carriedInstance runs the carried binaries. pg_upgrade connects as the server's OS user over
// the socket, as the agent does in a pod, so the peer map lets that user in too.
func carriedInstance(t *testing.T, carried postgres.Carried, name string) *postgres.Instance {
	inst := pgtest.NewInstance(t, name)
	inst.BinDir, inst.Env = carried.BinDir(), carried.Env()
	inst.IdentMap += fmt.Sprintf("%s postgres %s\n", agentapi.LocalSuperuserMap, agentapi.Superuser)
	return inst
}

func TestMajorUpgradeCheckFindsEachProblemOnTheLiveStandby(t *testing.T) {
	skipOnOldestMajor(t)
	ctx := context.Background()
	carried := pgtest.Carried(t)
	_, standby, admin := oldMajorPair(t, carried)
	// An extension made of SQL alone that the new major's installation lacks: pg_upgrade's own
	// check does not see it.
	control := filepath.Join(carried.Dir, "usr/share/postgresql", fmt.Sprint(carried.Major), "extension", "pgpilot_only_old")
	writeFile(t, control+".control", "default_version = '1.0'\nrelocatable = true\n")
	writeFile(t, control+"--1.0.sql", "CREATE FUNCTION pgpilot_only_old() RETURNS int LANGUAGE sql AS 'SELECT 1';\n")
	// A view on a column PostgreSQL 17 removed: pg_upgrade's check passes it, its restore fails.
	exec(t, admin, `CREATE TABLE uses_regproc (f regproc); CREATE EXTENSION pgpilot_only_old;
		CREATE VIEW checkpoint_counts AS SELECT checkpoints_timed FROM pg_stat_bgwriter`)
	pgtest.WaitReplayed(t, admin, standby, superuserPassword)

	upgrade := &postgres.MajorUpgrade{Old: standby, NewBinDir: pgtest.BinDir(t), Mode: postgres.UpgradeLink}
	connect := func(ctx context.Context, database string) (*pgx.Conn, error) {
		return postgres.ConnectLocal(ctx, standby.SocketDir, standby.Port, agentapi.Superuser, database)
	}
	// The whole report at once, every kind of problem in it.
	all, err := upgrade.CheckAll(ctx, connect)
	if err != nil {
		t.Fatal(err)
	}
	report := strings.Join(all, "\n")
	for _, want := range []string{"public.uses_regproc.f", "extension pgpilot_only_old in postgres is not in the new image", "database postgres does not restore"} {
		if !strings.Contains(report, want) {
			t.Fatalf("CheckAll() = %q, want %q in it", all, want)
		}
	}
	t.Logf("CheckAll found: %q", all)

	var failed *postgres.UpgradeCheckFailed
	if err := upgrade.Check(ctx); !errors.As(err, &failed) {
		t.Fatalf("Check() = %v, want the reg* column named", err)
	}
	if problems := strings.Join(failed.Problems, "\n"); !strings.Contains(problems, "reg*") || !strings.Contains(problems, "public.uses_regproc.f") {
		t.Fatalf("problems %q do not name the reg* column", problems)
	}
	missing, err := upgrade.MissingExtensions(ctx, connect)
	if err != nil || len(missing) != 1 || missing[0] != "pgpilot_only_old in postgres" {
		t.Fatalf("MissingExtensions() = %q, %v; want pgpilot_only_old in postgres", missing, err)
	}
	exec(t, admin, `DROP TABLE uses_regproc; DROP EXTENSION pgpilot_only_old`)
	pgtest.WaitReplayed(t, admin, standby, superuserPassword)
	if err := upgrade.Check(ctx); err != nil {
		t.Fatalf("Check() without the reg* column = %v; the view is past what it sees", err)
	}
	if err := upgrade.Rehearse(ctx, connect); !errors.As(err, &failed) {
		t.Fatalf("Rehearse() = %v, want the view's restore failure", err)
	}
	if problems := strings.Join(failed.Problems, "\n"); !strings.Contains(problems, "database postgres does not restore") || !strings.Contains(problems, "checkpoints_timed") {
		t.Fatalf("problems %q do not name the view's column", problems)
	}
	t.Logf("the rehearsal found: %s", failed.Problems)

	exec(t, admin, `DROP VIEW checkpoint_counts`)
	pgtest.WaitReplayed(t, admin, standby, superuserPassword)
	if err := upgrade.Rehearse(ctx, connect); err != nil {
		t.Fatalf("Rehearse() after the fixes = %v", err)
	}
	for _, mode := range []postgres.UpgradeMode{postgres.UpgradeLink, postgres.UpgradeCopy} {
		upgrade.Mode = mode
		if all, err := upgrade.CheckAll(ctx, connect); err != nil || len(all) != 0 {
			t.Fatalf("CheckAll() in %s mode after the fixes = %q, %v", mode, all, err)
		}
	}
	if missing, err := upgrade.MissingExtensions(ctx, connect); err != nil || len(missing) != 0 {
		t.Fatalf("MissingExtensions() after the fixes = %q, %v", missing, err)
	}
	if !standby.Running() || !standby.IsStandby() {
		t.Fatal("the checks stopped or changed the live standby")
	}
}

func TestMajorUpgradeLinksThePromotedStandbyAndRevertsBeforeThePointOfNoReturn(t *testing.T) {
	skipOnOldestMajor(t)
	ctx := context.Background()
	carried := pgtest.Carried(t)
	primary, standby, admin := oldMajorPair(t, carried)
	// An extension whose version the new major's installation raised.
	exec(t, admin, "CREATE EXTENSION pg_stat_statements")
	pgtest.WaitReplayed(t, admin, standby, superuserPassword)
	relation := relationPath(t, admin, "orders")
	// A clean stop of the primary, a promotion of the standby that received everything, and
	// its clean stop: the state pg_upgrade accepts (a standby shut down in recovery it refuses).
	if err := primary.Stop(time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	if err := standby.Stop(time.Minute); err != nil {
		t.Fatal(err)
	}
	upgrade := &postgres.MajorUpgrade{Old: standby, NewBinDir: pgtest.BinDir(t), Mode: postgres.UpgradeLink}
	if err := upgrade.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	if err := upgrade.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if state, err := upgrade.State(); err != nil || state.Step != postgres.UpgradeSwapped || state.From != carried.Major {
		t.Fatalf("State() = %+v, %v; want swapped from %d", state, err, carried.Major)
	}

	// Before the point of no return the old cluster comes back whole.
	if err := upgrade.Revert(); err != nil {
		t.Fatal(err)
	}
	countOrders(t, standby)
	if err := standby.Stop(time.Minute); err != nil {
		t.Fatal(err)
	}

	if err := upgrade.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	if err := upgrade.Run(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("pg_upgrade --link of PostgreSQL %d to %d: %s", carried.Major, pgtest.Major(t), time.Since(started).Round(time.Millisecond))
	if err := upgrade.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := upgrade.Revert(); err == nil {
		t.Fatal("Revert() after the point of no return succeeded")
	}
	upgraded := standby
	upgraded.BinDir, upgraded.Env = pgtest.BinDir(t), nil
	conn := countOrders(t, upgraded)
	var version int
	if err := conn.QueryRow(ctx, "SELECT current_setting('server_version_num')::int / 10000").Scan(&version); err != nil || version != pgtest.Major(t) {
		t.Fatalf("server major = %d (%v), want %d", version, err, pgtest.Major(t))
	}
	// Linked, not copied: the relation file is the old cluster's very inode.
	if got := relationPath(t, conn, "orders"); got != relation {
		t.Fatalf("orders is at %s after the upgrade, %s before: relfilenodes are kept from 15 on", got, relation)
	}
	if inode(t, filepath.Join(upgraded.DataDir, relation)) != inode(t, filepath.Join(upgrade.PreviousDataDir(), relation)) {
		t.Fatal("the relation file was copied, not linked")
	}
	if err := upgrade.Finish(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(upgrade.PreviousDataDir()); !os.IsNotExist(err) {
		t.Fatalf("the previous data directory is still there after a link upgrade finished: %v", err)
	}
	countOrders(t, upgraded)

	connect := func(ctx context.Context, database string) (*pgx.Conn, error) {
		return postgres.ConnectLocal(ctx, upgraded.SocketDir, upgraded.Port, agentapi.Superuser, database)
	}
	updated, err := postgres.UpdateExtensions(ctx, connect)
	if err != nil || len(updated) != 1 || !strings.HasPrefix(updated[0], "pg_stat_statements in postgres to ") {
		t.Fatalf("UpdateExtensions() = %q, %v; want pg_stat_statements updated", updated, err)
	}
	if again, err := postgres.UpdateExtensions(ctx, connect); err != nil || len(again) != 0 {
		t.Fatalf("UpdateExtensions() again = %q, %v; want nothing left", again, err)
	}
	if err := upgraded.RebuildStatistics(ctx); err != nil {
		t.Fatal(err)
	}
	var columns int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stats WHERE tablename = 'orders'").Scan(&columns); err != nil || columns != 3 {
		t.Fatalf("statistics of orders' columns = %d (%v), want 3", columns, err)
	}
	t.Logf("after the upgrade: %s", updated)
}

func countOrders(t *testing.T, inst *postgres.Instance) *pgx.Conn {
	t.Helper()
	if !inst.Running() {
		if err := inst.Start(); err != nil {
			t.Fatal(err)
		}
	}
	conn := pgtest.Connect(t, inst, agentapi.Superuser, superuserPassword, "postgres")
	var got int
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM orders WHERE customer >= 0").Scan(&got); err != nil || got != orderRows {
		t.Fatalf("orders = %d (%v), want %d", got, err, orderRows)
	}
	return conn
}

func relationPath(t *testing.T, conn *pgx.Conn, table string) string {
	t.Helper()
	var path string
	if err := conn.QueryRow(context.Background(), "SELECT pg_relation_filepath($1)", table).Scan(&path); err != nil {
		t.Fatal(err)
	}
	return path
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Sys().(*syscall.Stat_t).Ino
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(path) })
}

// An upgrade killed at any point before its point of no return leaves the old cluster whole for
// the next agent (Recover, then the carried server picked again by the data directory's major);
// one killed after it goes forward.
func TestMajorUpgradeKilledMidwayIsRecoveredByTheNextAgent(t *testing.T) {
	skipOnOldestMajor(t)
	ctx := context.Background()
	carried := pgtest.Carried(t)
	primary, old, admin := oldMajorPair(t, carried)
	pgtest.WaitReplayed(t, admin, old, superuserPassword)
	if err := primary.Stop(time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := old.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	if err := old.Stop(time.Minute); err != nil {
		t.Fatal(err)
	}
	killWhenExists := map[string]string{
		"killed while checking the clusters":      filepath.Join(old.DataDir+".next", "pg_upgrade_output.d"),
		"killed while the old server runs for it": filepath.Join(old.DataDir, "postmaster.pid"),
		"killed while the new server runs for it": filepath.Join(old.DataDir+".next", "postmaster.pid"),
		"killed while linking":                    filepath.Join(old.DataDir, "global", "pg_control.old"),
	}
	for _, name := range slices.Sorted(maps.Keys(killWhenExists)) {
		t.Run(name, func(t *testing.T) {
			upgrade := &postgres.MajorUpgrade{Old: old, NewBinDir: pgtest.BinDir(t), Mode: postgres.UpgradeLink}
			if err := upgrade.Prepare(ctx); err != nil {
				t.Fatal(err)
			}
			if err := runKilledWhen(ctx, upgrade, killWhenExists[name]); err == nil {
				t.Fatal("pg_upgrade finished before it was killed")
			}
			restartedAgent(t, old, carried, postgres.UpgradeRunning)
			// pg_ctl detaches the servers pg_upgrade starts: none may outlive it.
			for _, port := range []int{old.Port, old.Port + 1} {
				if socket := filepath.Join(old.SocketDir, fmt.Sprintf(".s.PGSQL.%d", port)); fileExists(socket) {
					t.Fatalf("a server pg_upgrade started still listens on %s", socket)
				}
			}
			countOrders(t, old)
			if err := old.Stop(time.Minute); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Run("killed between the swap's two renames", func(t *testing.T) {
		upgrade := upgradedLinked(t, old)
		// The state the swap leaves after its first rename: no data directory at all.
		if err := os.Rename(old.DataDir, upgrade.NextDataDir()); err != nil {
			t.Fatal(err)
		}
		restartedAgent(t, old, carried, postgres.UpgradeSwapped)
		countOrders(t, old)
		if err := old.Stop(time.Minute); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("killed after the point of no return", func(t *testing.T) {
		upgrade := upgradedLinked(t, old)
		if err := upgrade.Commit(); err != nil {
			t.Fatal(err)
		}
		restartedAgent(t, old, carried, postgres.UpgradeCommitted)
		if old.BinDir != pgtest.BinDir(t) {
			t.Fatalf("the agent runs %s after the point of no return, want the image's server", old.BinDir)
		}
		countOrders(t, old)
		if _, err := os.Stat(upgrade.PreviousDataDir()); !os.IsNotExist(err) {
			t.Fatalf("the previous data directory is still there: %v", err)
		}
	})
}

// runKilledWhen runs the upgrade and kills pg_upgrade as soon as path exists.
func runKilledWhen(ctx context.Context, upgrade *postgres.MajorUpgrade, path string) error {
	ctx, kill := context.WithCancel(ctx)
	defer kill()
	go func() {
		for ctx.Err() == nil {
			if _, err := os.Stat(path); err == nil {
				kill()
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	return upgrade.Run(ctx)
}

// restartedAgent does what an agent starting over the data directory does before the server's
// first start: recover the upgrade (which must have been at step want), then pick the server of
// the data directory's major.
func restartedAgent(t *testing.T, inst *postgres.Instance, carried postgres.Carried, want postgres.UpgradeStep) {
	t.Helper()
	inst.BinDir, inst.Env = pgtest.BinDir(t), nil
	upgrade := &postgres.MajorUpgrade{Old: inst, NewBinDir: pgtest.BinDir(t)}
	if step, err := upgrade.Recover(); err != nil || step != want {
		t.Fatalf("Recover() = %q, %v; want %q", step, err, want)
	}
	if _, err := inst.UseCarried(context.Background(), carried); err != nil {
		t.Fatal(err)
	}
	if err := inst.CheckMajor(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// upgradedLinked runs a link upgrade of old, stopped, to the step Swapped.
func upgradedLinked(t *testing.T, old *postgres.Instance) *postgres.MajorUpgrade {
	t.Helper()
	upgrade := &postgres.MajorUpgrade{Old: old, NewBinDir: pgtest.BinDir(t), Mode: postgres.UpgradeLink}
	if err := upgrade.Prepare(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := upgrade.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	return upgrade
}
