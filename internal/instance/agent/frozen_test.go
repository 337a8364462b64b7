package agent_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgpilot/pgpilot-operator/internal/instance/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/pgtest"
)

// serverProcesses are the postmaster (from postmaster.pid) and every backend and auxiliary
// process PostgreSQL lists, as a superuser sees them.
func serverProcesses(t *testing.T, a *pgtest.RunningAgent) []int {
	t.Helper()
	pidFile, err := os.ReadFile(filepath.Join(a.Instance.DataDir, "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	postmaster, _ := strconv.Atoi(strings.SplitN(string(pidFile), "\n", 2)[0])
	admin := pgtest.Connect(t, a.Instance, agentapi.Superuser, credentials.SuperuserPassword, "postgres")
	rows, err := admin.Query(context.Background(), "SELECT pid FROM pg_stat_activity WHERE pid <> pg_backend_pid()")
	if err != nil {
		t.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		t.Fatal(err)
	}
	out := []int{postmaster}
	for _, pid := range pids {
		out = append(out, int(pid))
	}
	return out
}

// alive: the process exists and is not a zombie.
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

// A frozen primary (every PostgreSQL process stopped, its agent alive and renewing the Lease)
// is reported unresponsive within UnresponsiveAfter and a bit, fenced on the operator's order by
// killing every process of the server, and a commit it had received but not acknowledged is
// never acknowledged: the client gets an error, and the promoted standby does not have the row.
// When the processes are let go afterwards (the freeze ends), none runs.
func TestFrozenPrimaryIsReportedAndKilledByTheFence(t *testing.T) {
	ctx := context.Background()
	primary, standby, rw, leases := startPair(t)
	insertRows(t, primary, 0, 10)
	awaitRows(t, standby, 10)

	app := pgtest.Connect(t, primary.Instance, "app", credentials.AppPassword, "app")
	tx, err := app.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO t VALUES (-1)"); err != nil {
		t.Fatal(err)
	}
	processes := serverProcesses(t, primary)
	for _, pid := range processes {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatalf("freeze %d: %v", pid, err)
		}
	}
	frozenAt := time.Now()
	defer func() { // a failed test leaves nothing stopped behind
		for _, pid := range processes {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}()
	committed := make(chan error, 1)
	go func() { committed <- tx.Commit(ctx) }()

	var report *agentapi.Status
	pgtest.Eventually(t, "the frozen primary reported unresponsive", func() error {
		s, err := status(primary)
		if err == nil && s.Unresponsive == "" {
			err = fmt.Errorf("%+v", s)
		}
		report = s
		return err
	})
	if took := time.Since(frozenAt); took > agentapi.UnresponsiveAfter+5*time.Second {
		t.Errorf("reported unresponsive %s after the freeze, want within %s and a tick or two", took, agentapi.UnresponsiveAfter)
	}
	if report.Role != agentapi.RolePrimary {
		t.Errorf("unresponsive report %+v: role %q, want primary", report, report.Role)
	}
	select {
	case err := <-committed:
		t.Fatalf("a frozen server answered the commit: %v", err)
	default:
	}

	rw.SetTarget(0)
	fenced, err := agentapi.HTTPClient{}.Fence(ctx, endpointOf(primary))
	if err != nil || !fenced.Fenced {
		t.Fatalf("fence of the frozen primary: %+v, %v", fenced, err)
	}
	for _, pid := range processes {
		if alive(pid) {
			t.Errorf("process %d of the fenced server still exists", pid)
		}
		_ = syscall.Kill(pid, syscall.SIGCONT) // the freeze ends
	}
	select {
	case err := <-committed:
		if err == nil {
			t.Fatal("the commit sent to the frozen primary was acknowledged after the fence")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the client waiting on the frozen primary's commit got no answer after the fence")
	}
	awaitFenced(t, primary, "fenced by the operator")

	leases.Grant("db-1")
	if _, err := (agentapi.HTTPClient{}).Promote(ctx, endpointOf(standby), []string{agentapi.SlotName("db-0")}); err != nil {
		t.Fatal(err)
	}
	rw.SetTarget(standby.Instance.Port)
	awaitRows(t, standby, 10)
	var unacknowledged int
	promoted := pgtest.Connect(t, standby.Instance, "app", credentials.AppPassword, "app")
	if err := promoted.QueryRow(ctx, "SELECT count(*) FROM t WHERE v = -1").Scan(&unacknowledged); err != nil || unacknowledged != 0 {
		t.Errorf("the unacknowledged row on the new primary: %d (%v)", unacknowledged, err)
	}
	awaitRole(t, primary, agentapi.RoleReplica, 2)
	if errors.Is(err, context.Canceled) {
		t.Log(err)
	}
}
