package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/agent"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
	"github.com/pgpilot/pgpilot-operator/test/pgtest"
)

// The primary's agent takes the declared roles and databases at once and applies them in the
// background; its status names the report to read. A standby refuses them. A role changed by
// hand is put back by the agent's own drift pass and reported, and the pass after runs no
// statement; so does the first pass of the standby once promoted, given the same set, as after a
// failover.
func TestManagedCatalogAppliedInTheBackgroundDriftRepairedAndNotReappliedAfterFailover(t *testing.T) {
	leases := pgtest.NewMemoryLeases("db-0")
	primaryInst, standbyInst := pgtest.NewInstance(t, "db-0"), pgtest.NewInstance(t, "db-1")
	primary := pgtest.StartAgent(t, agentConfig(t, "db-0", primaryInst, primaryInst.Port), primaryInst, leases,
		func(o *agent.Options) { o.CatalogDriftInterval = 500 * time.Millisecond })
	standby := pgtest.StartAgent(t, agentConfig(t, "db-1", standbyInst, primaryInst.Port), standbyInst, leases)
	waitReady(t, primary)
	waitReady(t, standby)

	password := "reader-pw"
	req := agentapi.CatalogRequest{Fingerprint: "f1", Forbidden: []string{"app"}, Roles: []agentapi.ManagedRole{
		{Name: "reader", Login: true, Inherit: true, ConnectionLimit: -1, InRoles: []string{"pg_read_all_data"}, Password: &password},
	}, Databases: []agentapi.ManagedDatabase{{Name: "shop", Owner: "reader", ConnectionLimit: -1,
		Schemas: []agentapi.ManagedSchema{{Name: "sales", Owner: "reader"}}, Extensions: []agentapi.ManagedExtension{{Name: "hstore"}}}}}
	if code, body := putRoles(t, standby, req); code != http.StatusConflict {
		t.Fatalf("a standby answered %d %s, want 409", code, body)
	}
	if code, body := putRoles(t, primary, req); code != http.StatusAccepted {
		t.Fatalf("the primary answered %d %s, want 202", code, body)
	}
	report := waitRolesReport(t, primary, func(r *agentapi.CatalogReport) error {
		if r.Fingerprint != "f1" || r.Roles[0].State != agentapi.RoleApplied || len(r.Databases) != 1 || r.Databases[0].State != agentapi.RoleApplied {
			return fmt.Errorf("report %+v", r)
		}
		return nil
	})
	if report.Roles[0].Changed[0] != "created" {
		t.Errorf("first report %+v, want reader created", report)
	}
	login := func() error {
		conn, err := postgres.Connect(context.Background(), primaryInst.Port, "reader", password, "postgres")
		if err == nil {
			_ = conn.Close(context.Background())
		}
		return err
	}
	if err := login(); err != nil {
		t.Fatal(err)
	}

	admin := pgtest.Connect(t, primaryInst, agentapi.Superuser, credentials.SuperuserPassword, "postgres")
	if _, err := admin.Exec(context.Background(), "ALTER ROLE reader NOLOGIN"); err != nil {
		t.Fatal(err)
	}
	waitRolesReport(t, primary, func(r *agentapi.CatalogReport) error {
		if r.Roles[0].State != agentapi.RoleDrift || r.Roles[0].Changed[0] != "login" {
			return fmt.Errorf("report %+v, want reader's login put back", r)
		}
		return nil
	})
	if err := login(); err != nil {
		t.Fatalf("after the drift was repaired: %v", err)
	}
	noStatement := func(r *agentapi.CatalogReport) error {
		if r.Statements != 0 || r.Roles[0].State != agentapi.RoleApplied || len(r.Roles[0].Changed) != 0 ||
			r.Databases[0].State != agentapi.RoleApplied || len(r.Databases[0].Changed) != 0 {
			return fmt.Errorf("report %+v, want a pass of no statement", r)
		}
		return nil
	}
	waitRolesReport(t, primary, noStatement)

	// A failover: the standby, which replayed the catalog, is promoted and given the same set.
	standbySQL := pgtest.Connect(t, standbyInst, agentapi.Superuser, credentials.SuperuserPassword, "postgres")
	pgtest.Eventually(t, "the standby replayed the catalog", func() error {
		var found bool
		err := standbySQL.QueryRow(context.Background(), `SELECT EXISTS (SELECT FROM pg_database WHERE datname = 'shop')
			AND pg_last_wal_replay_lsn() >= $1::pg_lsn`, currentLSN(t, admin)).Scan(&found)
		if err == nil && !found {
			err = fmt.Errorf("not yet")
		}
		return err
	})
	leases.Grant("db-1")
	if _, err := (agentapi.HTTPClient{}).Promote(context.Background(), endpointOf(standby), nil); err != nil {
		t.Fatal(err)
	}
	if code, body := putRoles(t, standby, req); code != http.StatusAccepted {
		t.Fatalf("the promoted standby answered %d %s, want 202", code, body)
	}
	report = waitRolesReport(t, standby, noStatement)
	if report.Databases[0].Extensions[0].Version == "" {
		t.Errorf("report %+v, want hstore's version", report.Databases[0])
	}
}

func currentLSN(t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	var lsn string
	if err := conn.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	return lsn
}

func putRoles(t *testing.T, r *pgtest.RunningAgent, req agentapi.CatalogRequest) (int, string) {
	t.Helper()
	body, _ := json.Marshal(req)
	httpReq, _ := http.NewRequest(http.MethodPut, r.URL+agentapi.PathCatalog, bytes.NewReader(body))
	httpReq.Header.Set("Authorization", "Bearer "+token)
	code, answer, err := do(httpReq)
	if err != nil {
		t.Fatal(err)
	}
	return code, answer
}

// waitRolesReport waits for the report the agent's status names to satisfy check.
func waitRolesReport(t *testing.T, r *pgtest.RunningAgent, check func(*agentapi.CatalogReport) error) *agentapi.CatalogReport {
	t.Helper()
	var report agentapi.CatalogReport
	pgtest.Eventually(t, "the roles report", func() error {
		s, err := status(r)
		if err != nil || s.Catalog == nil || s.Catalog.Report == "" {
			return fmt.Errorf("status %+v (%v): no report", s, err)
		}
		code, body, err := get(r.URL+agentapi.PathCatalog, token)
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("%d %s (%v)", code, body, err)
		}
		report = agentapi.CatalogReport{}
		if err := json.Unmarshal([]byte(body), &report); err != nil {
			return err
		}
		if report.ID() != s.Catalog.Report && report.Generation < 1 {
			return fmt.Errorf("report %s, status names %s", report.ID(), s.Catalog.Report)
		}
		return check(&report)
	})
	return &report
}

// A primary killed while it applies a catalog leaves it part done; the standby promoted in its
// place and given the same set completes it: every schema there, each owned as declared, and a
// report with every item applied. Each item is one transaction (CREATE DATABASE one statement):
// nothing half-made survives the kill.
func TestManagedCatalogHalfAppliedByAKilledPrimaryIsCompletedByTheNext(t *testing.T) {
	ctx := context.Background()
	primary, standby, rw, leases := startPair(t)
	const schemas = 150
	req := agentapi.CatalogRequest{Fingerprint: "half", Roles: []agentapi.ManagedRole{
		{Name: "owner_a", Inherit: true, ConnectionLimit: -1}, {Name: "owner_b", Inherit: true, ConnectionLimit: -1}}}
	for _, db := range []string{"one", "two"} {
		d := agentapi.ManagedDatabase{Name: db, Owner: "owner_a", ConnectionLimit: -1}
		for i := range schemas {
			d.Schemas = append(d.Schemas, agentapi.ManagedSchema{Name: fmt.Sprintf("s%d", i), Owner: []string{"owner_a", "owner_b"}[i%2]})
		}
		req.Databases = append(req.Databases, d)
	}
	if code, body := putRoles(t, primary, req); code != http.StatusAccepted {
		t.Fatalf("the primary answered %d %s, want 202", code, body)
	}
	time.Sleep(300 * time.Millisecond) // into the pass
	killPostmaster(t, primary.Instance)
	made := schemasOf(t, standby.Instance)
	t.Logf("the standby had replayed %d of %d schemas of database one when its primary was killed", made, schemas)

	rw.SetTarget(0)
	leases.Grant("db-1")
	if _, err := (agentapi.HTTPClient{}).Promote(ctx, endpointOf(standby), nil); err != nil {
		t.Fatal(err)
	}
	rw.SetTarget(standby.Instance.Port)
	if code, body := putRoles(t, standby, req); code != http.StatusAccepted {
		t.Fatalf("the new primary answered %d %s, want 202", code, body)
	}
	waitRolesReport(t, standby, func(r *agentapi.CatalogReport) error {
		if r.Fingerprint != "half" || len(r.Databases) != 2 {
			return fmt.Errorf("report %+v", r)
		}
		for _, db := range r.Databases {
			if db.State != agentapi.RoleApplied || len(db.Schemas) != schemas {
				return fmt.Errorf("database %s: %s %s", db.Name, db.State, db.Message)
			}
		}
		return nil
	})
	one := pgtest.Connect(t, standby.Instance, agentapi.Superuser, credentials.SuperuserPassword, "one")
	var wrong int
	if err := one.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname ~ '^s[0-9]+$'
		AND pg_get_userbyid(nspowner) <> CASE WHEN substr(nspname, 2)::int % 2 = 0 THEN 'owner_a' ELSE 'owner_b' END`).Scan(&wrong); err != nil {
		t.Fatal(err)
	}
	if got := schemasOf(t, standby.Instance); got != schemas || wrong != 0 {
		t.Errorf("database one has %d schemas (%d owned otherwise than declared), want %d", got, wrong, schemas)
	}
}

// schemasOf counts database one's declared schemas on inst, 0 without the database.
func schemasOf(t *testing.T, inst *postgres.Instance) int {
	t.Helper()
	conn, err := postgres.Connect(context.Background(), inst.Port, agentapi.Superuser, credentials.SuperuserPassword, "one")
	if err != nil {
		return 0 // not made yet
	}
	defer func() { _ = conn.Close(context.Background()) }()
	var n int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_namespace WHERE nspname ~ '^s[0-9]+$'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// killPostmaster kills inst's server at once, as the kernel's OOM killer would.
func killPostmaster(t *testing.T, inst *postgres.Instance) {
	t.Helper()
	pidFile, err := os.ReadFile(filepath.Join(inst.DataDir, "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.SplitN(string(pidFile), "\n", 2)[0])
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
}
