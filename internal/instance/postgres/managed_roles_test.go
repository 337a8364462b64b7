package postgres_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
)

// Declared roles are created with their memberships, log in with their Secret's password, and
// a second pass runs no statement; a change by hand is put back and reported as drift; a role
// without its Secret keeps its password; a role the server refuses to drop is reported while the
// others are applied; no password reaches the server's log.
func TestReconcileRolesCreatesRepairsAndKeepsPasswords(t *testing.T) {
	ctx := context.Background()
	inst, admin, log := loggingEveryStatement(t)
	exec(t, admin, "CREATE ROLE boss SUPERUSER")
	readerPassword, writerPassword := "Reader-Secret-1", "Writer-Secret-2"
	request := agentapi.CatalogRequest{Forbidden: []string{"app"}, Roles: []agentapi.ManagedRole{
		{Name: "reporting", Inherit: true, ConnectionLimit: -1, Comment: "read-only group"},
		{Name: "reader", Login: true, Inherit: true, ConnectionLimit: 3, InRoles: []string{"reporting", "pg_read_all_data"}, Password: &readerPassword},
		{Name: "writer", Login: true, Inherit: true, ConnectionLimit: -1, Password: &writerPassword},
		{Name: "escalator", Login: true, InRoles: []string{"boss"}},
	}}
	results := reconcileRoles(t, admin, request, nil, 6)
	expectStates(t, results, map[string]string{"reporting": agentapi.RoleApplied, "reader": agentapi.RoleApplied,
		"writer": agentapi.RoleApplied, "escalator": agentapi.RoleError})
	loginAs(t, inst, "reader", readerPassword, true)
	var members int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_auth_members WHERE member = 'reader'::regrole`).Scan(&members); err != nil || members != 2 {
		t.Fatalf("reader is a member of %d roles (%v), want 2", members, err)
	}
	settled := map[string]bool{"reporting": true, "reader": true, "writer": true}
	reconcileRoles(t, admin, request, settled, 0)

	// By hand: reader becomes a replication role with a new password and loses a membership.
	exec(t, admin, "ALTER ROLE reader REPLICATION PASSWORD 'by-hand'; REVOKE reporting FROM reader")
	results = reconcileRoles(t, admin, request, settled, 2)
	expectStates(t, results, map[string]string{"reader": agentapi.RoleDrift, "writer": agentapi.RoleApplied})
	if got := strings.Join(results[1].Changed, ","); got != "replication,password,member of reporting" {
		t.Errorf("drift changed %q", got)
	}
	loginAs(t, inst, "reader", readerPassword, true)

	// writer's Secret is gone: its password stays. reporting owns a table and cannot be dropped.
	exec(t, admin, "CREATE TABLE owned (id int); ALTER TABLE owned OWNER TO reporting")
	request.Roles[2].Password = nil
	request.Roles[0].Absent = true
	request.Roles[1].InRoles = []string{"pg_read_all_data"}
	results = reconcileRoles(t, admin, request, map[string]bool{"writer": true}, 2)
	expectStates(t, results, map[string]string{"reporting": agentapi.RoleError, "reader": agentapi.RoleApplied, "writer": agentapi.RoleApplied})
	if !strings.Contains(results[0].Message, "depend") {
		t.Errorf("reporting: %q, want the server's reason it cannot be dropped", results[0].Message)
	}
	loginAs(t, inst, "writer", writerPassword, true)

	expectNoPasswordLogged(t, inst, log, readerPassword, writerPassword)
}

func reconcileRoles(t *testing.T, conn *pgx.Conn, request agentapi.CatalogRequest, settled map[string]bool, wantStatements int) []agentapi.RoleResult {
	t.Helper()
	results, statements, err := postgres.ReconcileRoles(context.Background(), conn, request, settled)
	if err != nil {
		t.Fatal(err)
	}
	if statements != wantStatements {
		t.Errorf("%d statements, want %d: %+v", statements, wantStatements, results)
	}
	return results
}

func expectStates(t *testing.T, results []agentapi.RoleResult, want map[string]string) {
	t.Helper()
	for _, r := range results {
		if state, ok := want[r.Name]; ok && r.State != state {
			t.Errorf("%s: %s (%q, %v), want %s", r.Name, r.State, r.Message, r.Changed, state)
		}
	}
}

func loginAs(t *testing.T, inst *postgres.Instance, user, password string, want bool) {
	t.Helper()
	conn, err := postgres.Connect(context.Background(), inst.Port, user, password, "postgres")
	if (err == nil) != want {
		t.Errorf("%s logs in with its password: %v", user, err)
	}
	if err == nil {
		_ = conn.Close(context.Background())
	}
}
