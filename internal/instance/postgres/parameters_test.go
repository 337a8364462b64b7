package postgres_test

import (
	"context"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	"github.com/pgpilot/pgpilot-operator/test/pgtest"
)

// harmlessParameters match the pattern below but run nothing and load nothing.
var harmlessParameters = []string{
	"search_path",                            // schemas, not files
	"ssl_library",                            // read-only: the TLS library the server was built with
	"jit",                                    // switches JIT on or off; jit_provider chooses the code
	"ssl_passphrase_command_supports_reload", // how the command above is run, not a command
	"log_replication_commands",               // logs replication commands, runs none
}

// Every setting of the real server (each supported major: the host's, and the images' under
// hack/test-in-image.sh) whose name says it runs a command, loads a library or sets a code path
// is one a PostgresCluster editor cannot set: managed, forbidden, or shared_preload_libraries
// with its allowlist. A new major adding such a setting fails here until it is classified.
func TestEverySettingThatRunsCommandsOrLoadsCodeIsRestricted(t *testing.T) {
	ctx := context.Background()
	inst := initialised(t)
	admin := startedAsSuperuser(t, inst)
	rows, err := admin.Query(ctx, `SELECT name FROM pg_settings
		WHERE name ~ '(command|librar|provider|_path$)' ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < 8 {
		t.Fatalf("only %v match: the pattern no longer finds the settings it is for", names)
	}
	for _, name := range names {
		switch {
		case slices.Contains(pgv1.ManagedParameters, name), slices.Contains(pgv1.ForbiddenParameters, name),
			name == "shared_preload_libraries", slices.Contains(harmlessParameters, name):
		default:
			t.Errorf("PostgreSQL %d's %s runs a command or loads code and a PostgresCluster may set it: add it to pgv1.ForbiddenParameters (or to harmlessParameters, saying why)",
				pgtest.Major(t), name)
		}
	}
	// And the forbidden list names settings this major has or a later one will (no typos).
	for _, name := range pgv1.ForbiddenParameters {
		if !slices.Contains(names, name) && pgtest.Major(t) >= 18 {
			t.Errorf("pgv1.ForbiddenParameters names %s, which PostgreSQL %d does not have", name, pgtest.Major(t))
		}
	}
}
