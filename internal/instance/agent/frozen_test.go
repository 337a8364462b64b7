package agent_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/test/pgtest"
)

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
	processes := pgtest.ServerProcesses(t, primary.Instance, credentials.SuperuserPassword)
	thaw := pgtest.Freeze(t, processes)
	frozenAt := time.Now()
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
	// A main loop held by the apply took a minute before it was bounded; a bounded one reports in
	// about 6 s here alone, and took 12.8 s in the 18 image beside CI's OLM phase on 2 cores.
	if took := time.Since(frozenAt); took > agentapi.UnresponsiveAfter+15*time.Second {
		t.Errorf("reported unresponsive %s after the freeze, want within %s and a few ticks", took, agentapi.UnresponsiveAfter)
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
		if pgtest.Alive(pid) {
			t.Errorf("process %d of the fenced server still exists", pid)
		}
	}
	thaw()
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
}

// A freeze that meets new credential files to apply (the kubelet wrote a rotated Secret, or the
// first apply after a start failed) is reported all the same: the agent's main loop, which
// applies them, must not wait on the frozen server longer than a tick or two.
func TestFrozenPrimaryIsReportedWhileNewCredentialsWait(t *testing.T) {
	primary, _, _, _ := startPair(t)
	processes := pgtest.ServerProcesses(t, primary.Instance, credentials.SuperuserPassword)
	thaw := pgtest.Freeze(t, processes)
	defer thaw()
	frozenAt := time.Now()
	rotated := credentials
	rotated.AppPassword = "rotated while frozen"
	pgtest.SetCredentials(t, primary.Config, rotated)
	pgtest.Eventually(t, "the frozen primary reported unresponsive", func() error {
		s, err := status(primary)
		if err == nil && s.Unresponsive == "" {
			err = fmt.Errorf("%+v", s)
		}
		return err
	})
	// A main loop held by the apply took a minute before it was bounded; a bounded one reports in
	// about 6 s here alone, and took 12.8 s in the 18 image beside CI's OLM phase on 2 cores.
	if took := time.Since(frozenAt); took > agentapi.UnresponsiveAfter+15*time.Second {
		t.Errorf("reported unresponsive %s after the freeze, want within %s and a few ticks", took, agentapi.UnresponsiveAfter)
	}
}
