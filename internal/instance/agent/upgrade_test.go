package agent_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
	"github.com/pgpilot/pgpilot-operator/test/pgtest"
)

// upgradeRows are the rows every major upgrade of the agents keeps.
const upgradeRows = 100000

// upgradePair is a primary and a streaming standby bootstrapped by agents of the carried old
// major, then run by agents of this image's major over the same data (the pods rolled onto the
// new image carrying the old server). The primary has stopped cleanly (Demote), the standby
// replayed all of it and holds the Lease: what the operator does before it asks for the upgrade.
func upgradePair(t *testing.T, carried postgres.Carried, onOldPrimary string) (standby *pgtest.RunningAgent, standbyInst *postgres.Instance) {
	t.Helper()
	ctx := context.Background()
	leases := pgtest.NewMemoryLeases("db-0")
	primaryInst, standbyInst := pgtest.NewInstance(t, "db-0"), pgtest.NewInstance(t, "db-1")
	// pg_upgrade and vacuumdb run as the server's OS user, which in a pod is the agent's own.
	for _, inst := range []*postgres.Instance{primaryInst, standbyInst} {
		inst.IdentMap += fmt.Sprintf("%s postgres %s\n", agentapi.LocalSuperuserMap, agentapi.Superuser)
	}
	start := func(inst *postgres.Instance, pod string, tune func(*agentapi.Config)) *pgtest.RunningAgent {
		cfg := agentConfig(t, pod, inst, primaryInst.Port)
		tune(&cfg)
		r := pgtest.StartAgent(t, cfg, inst, leases)
		waitReady(t, r)
		return r
	}
	oldImage := func(inst *postgres.Instance) func(*agentapi.Config) {
		inst.BinDir, inst.Env = carried.BinDir(), carried.Env()
		return func(cfg *agentapi.Config) { cfg.BinDir = carried.BinDir() }
	}
	// pg_upgrade takes longer than a Lease may go unrenewed, as it does on a large database or a
	// busy node: the server it upgraded must not be fenced when it starts.
	newBinDir := slowPgUpgrade(t, pgtest.BinDir(t), agentapi.LeaseFenceAfter+2*time.Second)
	newImage := func(inst *postgres.Instance) func(*agentapi.Config) {
		inst.BinDir, inst.Env = pgtest.BinDir(t), nil
		return func(cfg *agentapi.Config) { cfg.BinDir, cfg.CarriedDir = newBinDir, carried.Dir }
	}
	primary := start(primaryInst, "db-0", oldImage(primaryInst))
	standby = start(standbyInst, "db-1", oldImage(standbyInst))
	app := pgtest.Connect(t, primaryInst, agentapi.Superuser, credentials.SuperuserPassword, "app")
	for _, sql := range []string{"CREATE TABLE orders (id bigint PRIMARY KEY, note text)",
		fmt.Sprintf("INSERT INTO orders SELECT g, md5(g::text) FROM generate_series(1, %d) g", upgradeRows), onOldPrimary} {
		if _, err := app.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	pgtest.WaitReplayed(t, app, standbyInst, credentials.SuperuserPassword)
	_ = app.Close(ctx)
	for _, r := range []*pgtest.RunningAgent{standby, primary} {
		if err := r.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	// The primary's agent let its Lease go as it stopped; the operator grants it again.
	leases.Grant("db-0")
	primary = start(primaryInst, "db-0", newImage(primaryInst))
	standby = start(standbyInst, "db-1", newImage(standbyInst))
	if primaryInst.BinDir != carried.BinDir() || standbyInst.BinDir != carried.BinDir() {
		t.Fatalf("the new image's agents run %s and %s, want the carried server", primaryInst.BinDir, standbyInst.BinDir)
	}

	client := agentapi.HTTPClient{}
	demoted, err := client.Demote(ctx, endpoint(primary))
	if err != nil || !demoted.Clean {
		t.Fatalf("demote = %+v, %v", demoted, err)
	}
	// The old primary's shutdown checkpoint replayed: the standby has all of it.
	pgtest.WaitReplayedTo(t, standbyInst, demoted.ShutdownLSN, credentials.SuperuserPassword)
	leases.Grant("db-1")
	return standby, standbyInst
}

// slowPgUpgrade is a directory of binDir's programs in which pg_upgrade starts after delay.
func slowPgUpgrade(t *testing.T, binDir string, delay time.Duration) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pgpilot-slow-bin-") // t.TempDir's parent is closed to the server's user
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	entries, err := os.ReadDir(binDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, entry := range entries {
		if entry.Name() != "pg_upgrade" {
			if err := os.Symlink(filepath.Join(binDir, entry.Name()), filepath.Join(dir, entry.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	script := fmt.Sprintf("#!/bin/sh\nsleep %d\nexec %q \"$@\"\n", int(delay.Seconds()), filepath.Join(binDir, "pg_upgrade"))
	if err := os.WriteFile(filepath.Join(dir, "pg_upgrade"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	// The server's OS user runs them.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func endpoint(r *pgtest.RunningAgent) agentapi.Endpoint {
	return agentapi.Endpoint{Address: strings.TrimPrefix(r.URL, "http://"), Token: token}
}

// upgradeEnded starts the standby's upgrade and waits until it stops.
func upgradeEnded(t *testing.T, standby *pgtest.RunningAgent) *agentapi.MajorUpgradeResult {
	t.Helper()
	client := agentapi.HTTPClient{}
	if _, err := client.StartMajorUpgrade(context.Background(), endpoint(standby), agentapi.MajorUpgradeRequest{Mode: "link", Slots: []string{"db_0"}}); err != nil {
		t.Fatal(err)
	}
	var result *agentapi.MajorUpgradeResult
	pgtest.Eventually(t, "the major upgrade ended", func() error {
		var err error
		if result, err = client.MajorUpgrade(context.Background(), endpoint(standby)); err != nil || result == nil || result.StoppedAt == "" {
			return fmt.Errorf("%+v (%v)", result, err)
		}
		return nil
	})
	t.Logf("major upgrade: %+v", result)
	return result
}

// orders counts the rows on inst, and the server's major.
func orders(t *testing.T, inst *postgres.Instance) (rows, major int) {
	t.Helper()
	conn := pgtest.Connect(t, inst, agentapi.Superuser, credentials.SuperuserPassword, "app")
	defer func() { _ = conn.Close(context.Background()) }()
	if err := conn.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM orders),
		current_setting('server_version_num')::int / 10000`).Scan(&rows, &major); err != nil {
		t.Fatal(err)
	}
	return rows, major
}

func TestMajorUpgradeTurnsTheStandbyIntoTheNewMajorsPrimary(t *testing.T) {
	carried := carriedOrSkip(t)
	standby, standbyInst := upgradePair(t, carried, "CREATE EXTENSION pg_stat_statements")
	result := upgradeEnded(t, standby)
	if result.Step != agentapi.UpgradeStepDone || result.Error != "" || result.From != carried.Major || result.To != pgtest.Major(t) || result.PgUpgradeMillis <= 0 {
		t.Fatalf("the upgrade ended %+v, want Done from %d to %d", result, carried.Major, pgtest.Major(t))
	}
	if len(result.ExtensionsUpdated) != 1 || !strings.HasPrefix(result.ExtensionsUpdated[0], "pg_stat_statements in app") {
		t.Fatalf("extensions updated: %q, want pg_stat_statements in app", result.ExtensionsUpdated)
	}
	if rows, major := orders(t, standbyInst); rows != upgradeRows || major != pgtest.Major(t) {
		t.Fatalf("the new primary has %d rows on PostgreSQL %d, want %d on %d", rows, major, upgradeRows, pgtest.Major(t))
	}
	s, err := status(standby)
	if err != nil || s.Role != agentapi.RolePrimary || s.Fenced {
		t.Fatalf("the upgraded instance is %+v (%v), want the primary, unfenced", s, err)
	}
	// The promotion before pg_upgrade changed no relation: the others may join by links.
	if !result.FollowKit || result.FollowKitError != "" {
		t.Fatalf("no follow kit: %s", result.FollowKitError)
	}
	t.Logf("pg_upgrade ran %d ms", result.PgUpgradeMillis)
}

// An upgrade that fails before its point of no return (here the restore of a view on a column
// the new major removed, which a check would have caught) puts the old major back, promoted:
// the cluster goes on as after a switchover, every row there, writes accepted.
func TestMajorUpgradeFailingBeforeThePointOfNoReturnLeavesTheOldMajorPrimary(t *testing.T) {
	carried := carriedOrSkip(t)
	standby, standbyInst := upgradePair(t, carried, "CREATE VIEW checkpoint_counts AS SELECT checkpoints_timed FROM pg_stat_bgwriter")
	result := upgradeEnded(t, standby)
	if result.Step != agentapi.UpgradeStepReverted || !strings.Contains(result.Error, "point of no return") {
		t.Fatalf("the upgrade ended %+v, want Reverted", result)
	}
	if result.FollowKit {
		t.Fatal("a reverted upgrade offers a follow kit")
	}
	if rows, major := orders(t, standbyInst); rows != upgradeRows || major != carried.Major {
		t.Fatalf("after the revert: %d rows on PostgreSQL %d, want %d on %d", rows, major, upgradeRows, carried.Major)
	}
	conn := pgtest.Connect(t, standbyInst, agentapi.Superuser, credentials.SuperuserPassword, "app")
	if _, err := conn.Exec(context.Background(), "INSERT INTO orders VALUES (0, 'after the revert')"); err != nil {
		t.Fatalf("the reverted primary refuses writes: %v", err)
	}
	// The others stream from it through their slots, as from any promoted standby.
	var slots int
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'db_0'").Scan(&slots); err != nil || slots != 1 {
		t.Fatalf("the reverted primary has %d slots named db_0 (%v), want the old primary's", slots, err)
	}
	if _, err := (agentapi.HTTPClient{}).StartMajorUpgrade(context.Background(), endpoint(standby), agentapi.MajorUpgradeRequest{Mode: "link"}); !errors.Is(err, agentapi.ErrWrongRole) {
		t.Fatalf("a second upgrade of the reverted primary: %v, want ErrWrongRole (it is no standby)", err)
	}
}

// carriedOrSkip is the older major's server for the upgrade tests, which run in the newer
// majors' roots: on the oldest major there is nothing to upgrade from.
func carriedOrSkip(t *testing.T) postgres.Carried {
	t.Helper()
	if pgtest.Major(t) == pgtest.OldestMajor {
		t.Skipf("PostgreSQL %d is the oldest major: its upgrade tests run in the newer majors' roots (make test-real-servers)", pgtest.Major(t))
	}
	return pgtest.Carried(t)
}
