package agent_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/agent"
	"github.com/pgpilot/pgpilot-operator/test/pgtest"
)

// A primary cut off from the API server keeps running while its standby streams; once the
// operator detaches the standby, the primary has no peer left and fences itself within the
// bound the operator waits for (PeersGoneWait, less its margin), counted from the detach's
// answer: that is what lets the operator grant its Lease without waiting for WAL receivers to
// time out.
func TestDetachingTheLastStandbyFencesAnIsolatedPrimary(t *testing.T) {
	primary, standby, _, leases := startPair(t)
	leases.Fail(true)
	time.Sleep(agentapi.LeaseFenceAfter + 2*time.Second)
	insertRows(t, primary, 0, 1) // still a primary: its standby vouches for it

	ctx := context.Background()
	detached, err := agentapi.HTTPClient{}.Detach(ctx, endpointOf(standby), "db-0")
	if err != nil || detached.DetachedFrom != "db-0" {
		t.Fatalf("detach: %+v, %v", detached, err)
	}
	answeredAt := time.Now()
	if s, err := status(standby); err != nil || s.Streaming || s.DetachedFrom != "db-0" {
		t.Fatalf("a detached standby reports %+v, %v", s, err)
	}
	awaitFenced(t, primary, "was not renewed")
	const margin = 2 * time.Second
	if took := time.Since(answeredAt); took > agentapi.PeersGoneWait-margin {
		t.Errorf("the primary fenced itself %s after its standby detached; the operator grants after %s", took, agentapi.PeersGoneWait)
	}
	if _, err := (agentapi.HTTPClient{}).Detach(ctx, endpointOf(primary), "db-1"); err == nil {
		t.Error("a fenced primary accepted a detach order")
	}
}

// A detached standby receives nothing until it is told to attach, or until its hold ends
// without a new order; a repeated order keeps the time it first stopped.
func TestDetachedStandbyStreamsAgainOnAttachOrAfterItsHold(t *testing.T) {
	// Each "still detached" check must come before the hold ends; inserts beside a loaded CI
	// took over 3 s (stop 51's CI failed with a 3-s hold). Only the last part waits it out.
	const hold = 10 * time.Second
	leases := pgtest.NewMemoryLeases("db-0")
	rw := pgtest.NewServiceProxy(t)
	primaryInstance := pgtest.NewInstance(t, "db-0")
	rw.SetTarget(primaryInstance.Port)
	primary := pgtest.StartAgent(t, agentConfig(t, "db-0", primaryInstance, rw.Port), primaryInstance, leases)
	standbyInstance := pgtest.NewInstance(t, "db-1")
	standby := pgtest.StartAgent(t, agentConfig(t, "db-1", standbyInstance, rw.Port), standbyInstance, leases,
		func(o *agent.Options) { o.DetachHold = hold })
	awaitRole(t, standby, agentapi.RoleReplica, 1)
	insertRows(t, primary, 0, 1)
	awaitRows(t, standby, 1)

	ctx, client := context.Background(), agentapi.HTTPClient{}
	first, err := client.Detach(ctx, endpointOf(standby), "db-0")
	if err != nil {
		t.Fatal(err)
	}
	insertRows(t, primary, 1, 10)
	time.Sleep(time.Second)
	again, err := client.Detach(ctx, endpointOf(standby), "db-0")
	if err != nil || again.DetachedMillis < first.DetachedMillis+900 {
		t.Fatalf("a repeated order answers %+v, %v; the first %+v", again, err, first)
	}
	expectRows(t, standby, 1)
	if err := client.Attach(ctx, endpointOf(standby)); err != nil {
		t.Fatal(err)
	}
	awaitRows(t, standby, 10)
	awaitRole(t, standby, agentapi.RoleReplica, 1)

	if _, err := client.Detach(ctx, endpointOf(standby), "db-0"); err != nil {
		t.Fatal(err)
	}
	insertRows(t, primary, 10, 20)
	expectRows(t, standby, 10)
	awaitRows(t, standby, 20) // the hold ran out
	if s, err := status(standby); err != nil || s.DetachedFrom != "" {
		t.Errorf("after its hold the standby reports %+v, %v", s, err)
	}
}

// expectRows checks that a's table t has want rows now.
func expectRows(t *testing.T, a *pgtest.RunningAgent, want int) {
	t.Helper()
	app := pgtest.Connect(t, a.Instance, "app", credentials.AppPassword, "app")
	var rows int
	if err := app.QueryRow(context.Background(), "SELECT count(*) FROM t").Scan(&rows); err != nil || rows != want {
		t.Fatal(fmt.Errorf("%s has %d rows (%v), want %d", a.Config.PodName, rows, err, want))
	}
}
