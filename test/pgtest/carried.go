package pgtest

import (
	"context"
	"os"

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
		t.Fatalf("PGPILOT_PG_CARRIED is not set: the upgrade tests of PostgreSQL %d need an older major's carried binaries (make test-majors)", Major(t))
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
