package agent_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/pgpilot/pgpilot-operator/internal/instance/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/pgtest"
)

// A planned switchover through the agents' API, as the operator will run it: demote the
// primary (clean shutdown, restarted as a standby of the -rw Service), wait for the target to
// replay past the shutdown checkpoint, promote it, move the Service. No acknowledged commit is
// lost, and the old primary follows the new one on the next timeline.
func TestSwitchoverThroughTheAgents(t *testing.T) {
	leases := pgtest.NewMemoryLeases("db-0")
	ctx := context.Background()
	rw := pgtest.NewServiceProxy(t)
	instances := map[string]*pgtest.RunningAgent{}
	for _, pod := range []string{"db-0", "db-1"} {
		inst := pgtest.NewInstance(t, pod)
		if pod == "db-0" {
			rw.SetTarget(inst.Port)
		}
		instances[pod] = pgtest.StartAgent(t, agentConfig(t, pod, inst, rw.Port), inst, leases)
	}
	oldPrimary, target := instances["db-0"], instances["db-1"]
	client := agentapi.HTTPClient{}
	endpoint := func(a *pgtest.RunningAgent) agentapi.Endpoint {
		return agentapi.Endpoint{Address: strings.TrimPrefix(a.URL, "http://"), Token: token}
	}
	pgtest.Eventually(t, "db-1 streams", func() error {
		s, err := client.Status(ctx, endpoint(target))
		if err == nil && !s.Streaming {
			err = fmt.Errorf("db-1 %+v", s)
		}
		return err
	})
	app := pgtest.Connect(t, oldPrimary.Instance, "app", credentials.AppPassword, "app")
	for i := range 100 {
		if _, err := app.Exec(ctx, fmt.Sprintf("CREATE TABLE IF NOT EXISTS t (v int); INSERT INTO t VALUES (%d)", i)); err != nil {
			t.Fatal(err)
		}
	}

	rw.SetTarget(0) // fenced: the Service has no endpoint while the roles change
	demoted, err := client.Demote(ctx, endpoint(oldPrimary))
	if err != nil || !demoted.Clean {
		t.Fatalf("demote: %+v, %v", demoted, err)
	}
	targetSQL := pgtest.Connect(t, target.Instance, agentapi.Superuser, credentials.SuperuserPassword, "postgres")
	pgtest.Eventually(t, "db-1 replayed past the old primary's shutdown", func() error {
		var caughtUp bool
		err := targetSQL.QueryRow(ctx, "SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn", demoted.ShutdownLSN).Scan(&caughtUp)
		if err == nil && !caughtUp {
			err = fmt.Errorf("behind %s", demoted.ShutdownLSN)
		}
		return err
	})
	if _, err := client.Promote(ctx, endpoint(target), nil); err == nil {
		t.Fatal("promoted without the primary lease")
	}
	leases.Grant("db-1")
	promoted, err := client.Promote(ctx, endpoint(target), []string{agentapi.SlotName("db-0")})
	if err != nil || promoted.Timeline != 2 {
		t.Fatalf("promote: %+v, %v", promoted, err)
	}
	rw.SetTarget(target.Instance.Port)

	newApp := pgtest.Connect(t, target.Instance, "app", credentials.AppPassword, "app")
	var rows int
	if err := newApp.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&rows); err != nil || rows != 100 {
		t.Fatalf("new primary has %d rows (%v), want every acknowledged 100", rows, err)
	}
	if _, err := newApp.Exec(ctx, "INSERT INTO t VALUES (100)"); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, "the old primary follows on timeline 2 and has the new row", func() error {
		s, err := client.Status(ctx, endpoint(oldPrimary))
		if err != nil {
			return err
		}
		if s.Role != agentapi.RoleReplica || !s.Streaming || s.Timeline != 2 {
			return fmt.Errorf("db-0 %+v", s)
		}
		follower := pgtest.Connect(t, oldPrimary.Instance, "app", credentials.AppPassword, "app")
		if err := follower.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&rows); err != nil || rows != 101 {
			return fmt.Errorf("old primary has %d rows (%v), want 101", rows, err)
		}
		return nil
	})
	if _, err := client.Demote(ctx, endpoint(oldPrimary)); err == nil {
		t.Error("a standby accepted a demotion")
	}
}
