package pgtest

import (
	"context"
	"errors"
	"os"

	"github.com/jackc/pgx/v5"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
)

// OldestMajor is the oldest major pgpilot runs: there is nothing to upgrade from below it.
const OldestMajor = 15

// Carried is an older major's server binaries, carried into the root the tests run in as a major
// upgrade carries them (`agent carry` in the old image, postgres.Carried.Link in the new):
// PGPILOT_PG_CARRIED names the folder (hack/test-in-image.sh fills it from the host's
// PostgreSQL 15). The suite of a newer major without it fails: an upgrade test must not pass by
// not running.
func Carried(t TB) postgres.Carried {
	t.Helper()
	dir := os.Getenv("PGPILOT_PG_CARRIED")
	if dir == "" {
		t.Fatalf("PGPILOT_PG_CARRIED is not set: the upgrade tests of PostgreSQL %d need an older major's carried binaries (make test-real-servers)", Major(t))
	}
	carried, found, err := postgres.FindCarried(dir)
	if err != nil || !found {
		t.Fatalf("PGPILOT_PG_CARRIED=%s holds no carried server (%v)", dir, err)
	}
	if err := carried.Link(context.Background()); err != nil {
		t.Fatal(err)
	}
	return carried
}

// WaitReplayed waits until standby replayed everything primary wrote so far; it connects to the
// standby as the superuser with password.
func WaitReplayed(t TB, primary *pgx.Conn, standby *postgres.Instance, password string) {
	t.Helper()
	var lsn string
	if err := primary.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	WaitReplayedTo(t, standby, lsn, password)
}

// WaitReplayedTo waits until standby replayed WAL up to lsn.
func WaitReplayedTo(t TB, standby *postgres.Instance, lsn, password string) {
	t.Helper()
	conn := Connect(t, standby, agentapi.Superuser, password, "postgres")
	defer func() { _ = conn.Close(context.Background()) }()
	Eventually(t, "standby replayed "+lsn, func() error {
		var caught bool
		if err := conn.QueryRow(context.Background(), "SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn", lsn).Scan(&caught); err != nil {
			return err
		}
		if !caught {
			return errors.New("behind")
		}
		return nil
	})
}
