package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
	"github.com/pgpilot/pgpilot-operator/test/pgtest"
)

// A second standby of the old major joins the upgraded primary through its follow kit: its own
// relation files linked, only the new catalogs and control files copied, and it streams from
// the new primary what was written after the upgrade.
func TestMajorUpgradeFollowKitJoinsAStandbyWithoutCopyingItsRelations(t *testing.T) {
	skipOnOldestMajor(t)
	ctx := context.Background()
	carried := pgtest.Carried(t)
	primary, standby, admin := oldMajorPair(t, carried)
	follower := carriedInstance(t, carried, "old-follower")
	conninfo := fmt.Sprintf("host=%s port=%d user=%s application_name=follower", pgtest.Loopback, primary.Port, agentapi.DefaultReplicationUser)
	if err := follower.Clone(ctx, conninfo, "repl", "follower"); err != nil {
		t.Fatal(err)
	}
	if err := follower.Start(); err != nil {
		t.Fatal(err)
	}
	exec(t, admin, "VACUUM orders") // its visibility and free space maps
	pgtest.WaitReplayed(t, admin, follower, superuserPassword)
	pgtest.WaitReplayed(t, admin, standby, superuserPassword)
	relation := relationPath(t, admin, "orders")
	index := relationPath(t, admin, "orders_customer")
	if err := primary.Stop(time.Minute); err != nil {
		t.Fatal(err)
	}
	fromLSN := replayLSN(t, standby)
	pgtest.WaitReplayedTo(t, follower, fromLSN, superuserPassword)
	upgrade := promoteStopAndUpgrade(t, standby)
	from, until, err := upgrade.NoDataChangedSincePromotion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if from != fromLSN {
		t.Fatalf("the promoted timeline began at %s, want where the standby's replay ended, %s", from, fromLSN)
	}
	if err := upgrade.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	if err := upgrade.Run(ctx); err != nil {
		t.Fatal(err)
	}
	manifest, err := upgrade.MakeFollowKit(ctx, carried.Major, pgtest.Major(t), fromLSN, until)
	if err != nil {
		t.Fatal(err)
	}
	if err := upgrade.Commit(); err != nil {
		t.Fatal(err)
	}
	upgraded := standby
	upgraded.BinDir, upgraded.Env = pgtest.BinDir(t), nil
	conn := countOrders(t, upgraded)
	exec(t, conn, "INSERT INTO orders SELECT g, -1, 'after' FROM generate_series($1::bigint + 1, $1::bigint + 1000) g", orderRows)
	exec(t, conn, "CREATE TABLE after_upgrade AS SELECT 1 AS one")

	followerReplay := replayLSN(t, follower)
	if err := follower.Stop(time.Minute); err != nil {
		t.Fatal(err)
	}
	// As on a former primary, which extends its map forks without WAL (a visibility map a page
	// longer), and on a standby without a free space map: the kit links what the standby has.
	if !linkedIn(manifest, relation+"_vm") || !linkedIn(manifest, relation+"_fsm") {
		t.Fatalf("the kit links no map fork of %s: %+v", relation, manifest.Files)
	}
	grown, dropped := filepath.Join(follower.DataDir, relation+"_vm"), filepath.Join(follower.DataDir, relation+"_fsm")
	appendZeros(t, grown, 8192)
	droppedSize := fileSize(t, dropped)
	if err := os.Remove(dropped); err != nil {
		t.Fatal(err)
	}
	reader, writer := io.Pipe()
	go func() { writer.CloseWithError(postgres.WriteFollowKit(writer, upgrade.FollowKitDir())) }()
	copied, kept, err := follower.JoinByFollowKit(reader, followerReplay)
	if err != nil {
		t.Fatal(err)
	}
	kitCopied, kitLinked := manifest.Copied()
	kitLinked += 8192 - droppedSize
	t.Logf("follow kit of %d files: %d MiB copied, %d MiB kept (relations linked)", len(manifest.Files), copied>>20, kept>>20)
	if copied != kitCopied || kept != kitLinked {
		t.Fatalf("joined %d copied / %d kept, the manifest says %d / %d", copied, kept, kitCopied, kitLinked)
	}
	for _, path := range []string{relation, index} {
		if !linkedIn(manifest, path) {
			t.Fatalf("%s is not linked in the kit: %+v", path, manifest.Files)
		}
	}
	follower.BinDir, follower.Env = pgtest.BinDir(t), nil
	conninfo = fmt.Sprintf("host=%s port=%d user=%s password=repl application_name=follower", pgtest.Loopback, upgraded.Port, agentapi.DefaultReplicationUser)
	if err := follower.ConfigureStandby(conninfo, ""); err != nil {
		t.Fatal(err)
	}
	if err := follower.Start(); err != nil {
		t.Fatal(err)
	}
	pgtest.WaitReplayed(t, conn, follower, superuserPassword)
	reader2 := pgtest.Connect(t, follower, agentapi.Superuser, superuserPassword, "postgres")
	var total, after int
	if err := reader2.QueryRow(ctx, "SELECT count(*), count(*) FILTER (WHERE customer = -1) FROM orders").Scan(&total, &after); err != nil {
		t.Fatal(err)
	}
	if total != orderRows+1000 || after != 1000 {
		t.Fatalf("the joined standby has %d orders, %d after the upgrade; want %d and 1000", total, after, orderRows+1000)
	}
	// Its relations are its own files, read through the new major's server.
	if err := reader2.QueryRow(ctx, "SELECT count(*) FROM orders WHERE customer = 7").Scan(&total); err != nil || total != orderRows/1000 {
		t.Fatalf("orders of customer 7 by index = %d (%v), want %d", total, err, orderRows/1000)
	}
}

// The promoted instance wrote data after the old primary's end: its relations may differ from
// the standbys', and no kit is made.
func TestMajorUpgradeFollowKitIsRefusedWhenThePromotedInstanceChangedData(t *testing.T) {
	skipOnOldestMajor(t)
	ctx := context.Background()
	primary, standby, _ := oldMajorPair(t, pgtest.Carried(t))
	if err := primary.Stop(time.Minute); err != nil {
		t.Fatal(err)
	}
	replayLSN(t, standby) // it accepts connections: a promotion can be asked
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	conn := pgtest.Connect(t, standby, agentapi.Superuser, superuserPassword, "postgres")
	exec(t, conn, "UPDATE orders SET note = 'changed' WHERE id = 1")
	if err := standby.Stop(time.Minute); err != nil {
		t.Fatal(err)
	}
	upgrade := &postgres.MajorUpgrade{Old: standby, NewBinDir: pgtest.BinDir(t), Mode: postgres.UpgradeLink}
	if _, _, err := upgrade.NoDataChangedSincePromotion(ctx); err == nil || !strings.Contains(err.Error(), "Heap") {
		t.Fatalf("NoDataChangedSincePromotion() = %v, want the Heap records named", err)
	}
}

// promoteStopAndUpgrade promotes the stopped primary's standby and stops it cleanly, as the
// agent does before pg_upgrade.
func promoteStopAndUpgrade(t *testing.T, standby *postgres.Instance) *postgres.MajorUpgrade {
	t.Helper()
	if err := standby.Promote(context.Background()); err != nil {
		t.Fatal(err)
	}
	// As an archiving primary's shutdown does: the shutdown checkpoint lands in the next segment.
	conn := pgtest.Connect(t, standby, agentapi.Superuser, superuserPassword, "postgres")
	exec(t, conn, "SELECT pg_switch_wal()")
	_ = conn.Close(context.Background())
	if err := standby.Stop(time.Minute); err != nil {
		t.Fatal(err)
	}
	return &postgres.MajorUpgrade{Old: standby, NewBinDir: pgtest.BinDir(t), Mode: postgres.UpgradeLink}
}

func replayLSN(t *testing.T, standby *postgres.Instance) string {
	t.Helper()
	conn := pgtest.Connect(t, standby, agentapi.Superuser, superuserPassword, "postgres")
	defer func() { _ = conn.Close(context.Background()) }()
	var lsn string
	if err := conn.QueryRow(context.Background(), "SELECT pg_last_wal_replay_lsn()::text").Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	return lsn
}

func appendZeros(t *testing.T, path string, n int) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err == nil {
		_, err = f.Write(make([]byte, n))
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		t.Fatal(err)
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Size()
}

func linkedIn(m postgres.FollowKitManifest, path string) bool {
	for _, f := range m.Files {
		if f.Path == path {
			return f.Linked
		}
	}
	return false
}
