package postgres_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
	"github.com/pgpilot/pgpilot-operator/test/pgtest"
)

// EnsureRoles gives the server SCRAM verifiers, never a password: with every statement logged
// (log_statement = all) the server's log holds none of the passwords, and each role logs in
// with its own (ASCII, and a password SASLprep changes: a non-breaking space is a space).
func TestEnsureRolesSendsVerifiersAndLogsNoPassword(t *testing.T) {
	ctx := context.Background()
	inst, admin, log := loggingEveryStatement(t)
	roles := postgres.Roles{Superuser: agentapi.Superuser, SuperuserPassword: "Super-Secret-4711",
		ReplicationUser: agentapi.DefaultReplicationUser, ReplicationPassword: "Repl-Secret-0815",
		AppOwner: "app", AppPassword: "caf\u00e9\u00a0Secret-42", AppDatabase: "app"}
	if err := postgres.EnsureRoles(ctx, admin, roles); err != nil {
		t.Fatal(err)
	}
	for user, password := range map[string]string{"postgres": roles.SuperuserPassword, "app": roles.AppPassword,
		"app ": "caf\u00e9 Secret-42"} {
		conn, err := postgres.Connect(ctx, inst.Port, strings.TrimSpace(user), password, "postgres")
		if err != nil {
			t.Errorf("%s with its password: %v", user, err)
			continue
		}
		_ = conn.Close(ctx)
	}
	expectNoPasswordLogged(t, inst, log, "Super-Secret-4711", "Repl-Secret-0815", "Secret-42")
}

// loggingEveryStatement is a started server that logs every statement, and its log.
func loggingEveryStatement(t *testing.T) (*postgres.Instance, *pgx.Conn, *strings.Builder) {
	t.Helper()
	inst := initialised(t)
	log := &strings.Builder{}
	inst.Output = log
	pgtest.WriteConfig(t, inst, pgtest.Cluster(map[string]string{"log_statement": "all", "log_min_error_statement": "debug5"}))
	return inst, startedAsSuperuser(t, inst), log
}

// expectNoPasswordLogged stops inst and looks for each password in its log.
func expectNoPasswordLogged(t *testing.T, inst *postgres.Instance, log *strings.Builder, passwords ...string) {
	t.Helper()
	if err := inst.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "statement:") {
		t.Fatalf("the server logged no statement: the test sees nothing\n%s", log.String())
	}
	for _, password := range passwords {
		if strings.Contains(log.String(), password) {
			t.Errorf("the server's log has the password %s", password)
		}
	}
}
