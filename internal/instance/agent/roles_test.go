package agent_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

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

// What the operator falls back on when a switchover's target missed the end of the old
// primary's WAL (its WAL receiver was cut while the primary was fenced, so nothing could serve
// that WAL to it): the other standby and the demoted primary itself report having replayed all
// of it, the demoted primary can be promoted back, and the standby that fell behind follows it
// onto the new timeline with every row.
func TestDemotedPrimaryCanBePromotedBackWhenTheTargetMissedItsLastWAL(t *testing.T) {
	leases := pgtest.NewMemoryLeases("db-0")
	ctx := context.Background()
	rw := pgtest.NewServiceProxy(t)
	instances := map[string]*pgtest.RunningAgent{}
	for _, pod := range []string{"db-0", "db-1", "db-2"} {
		inst := pgtest.NewInstance(t, pod)
		if pod == "db-0" {
			rw.SetTarget(inst.Port)
		}
		instances[pod] = pgtest.StartAgent(t, agentConfig(t, pod, inst, rw.Port), inst, leases)
	}
	client := agentapi.HTTPClient{}
	endpoint := func(pod string) agentapi.Endpoint {
		return agentapi.Endpoint{Address: strings.TrimPrefix(instances[pod].URL, "http://"), Token: token}
	}
	for _, pod := range []string{"db-1", "db-2"} {
		pgtest.Eventually(t, pod+" streams", func() error {
			s, err := client.Status(ctx, endpoint(pod))
			if err == nil && !s.Streaming {
				err = fmt.Errorf("%s %+v", pod, s)
			}
			return err
		})
	}
	primarySQL := pgtest.Connect(t, instances["db-0"].Instance, agentapi.Superuser, credentials.SuperuserPassword, "postgres")
	standbySQL := map[string]*pgx.Conn{}
	for _, pod := range []string{"db-1", "db-2"} {
		standbySQL[pod] = pgtest.Connect(t, instances[pod].Instance, agentapi.Superuser, credentials.SuperuserPassword, "postgres")
	}
	exec := func(sql string) {
		t.Helper()
		if _, err := primarySQL.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	exec("CREATE TABLE t AS SELECT generate_series(1, 100) AS v")

	rw.SetTarget(0)
	exec("SELECT pg_terminate_backend(pid) FROM pg_stat_replication WHERE application_name = 'db-1'")
	exec("INSERT INTO t SELECT generate_series(101, 110)")
	demoted, err := client.Demote(ctx, endpoint("db-0"))
	if err != nil || !demoted.Clean {
		t.Fatalf("demote: %+v, %v", demoted, err)
	}
	replayedAll := func(pod string) (bool, error) {
		s, err := client.Status(ctx, endpoint(pod))
		if err != nil {
			return false, err
		}
		var past bool
		err = standbySQL["db-2"].QueryRow(ctx, "SELECT $1::pg_lsn >= $2::pg_lsn", s.ReplayLSN, demoted.ShutdownLSN).Scan(&past)
		return past, err
	}
	for _, pod := range []string{"db-0", "db-2"} {
		pgtest.Eventually(t, pod+" reports the old primary's WAL replayed up to "+demoted.ShutdownLSN, func() error {
			if past, err := replayedAll(pod); err != nil || !past {
				return fmt.Errorf("not yet (%v)", err)
			}
			return nil
		})
	}
	if past, err := replayedAll("db-1"); err != nil || past {
		t.Fatalf("db-1, cut off before the last rows, reports them replayed (%v): the test set nothing up", err)
	}

	promoted, err := client.Promote(ctx, endpoint("db-0"), []string{agentapi.SlotName("db-1"), agentapi.SlotName("db-2")})
	if err != nil || promoted.Timeline != 2 {
		t.Fatalf("promote the old primary back: %+v, %v", promoted, err)
	}
	rw.SetTarget(instances["db-0"].Instance.Port)
	app := pgtest.Connect(t, instances["db-0"].Instance, agentapi.Superuser, credentials.SuperuserPassword, "postgres")
	if _, err := app.Exec(ctx, "INSERT INTO t VALUES (111)"); err != nil {
		t.Fatal(err)
	}
	for _, pod := range []string{"db-1", "db-2"} {
		pgtest.Eventually(t, pod+" follows on timeline 2 with all 111 rows", func() error {
			s, err := client.Status(ctx, endpoint(pod))
			if err != nil {
				return err
			}
			if s.Role != agentapi.RoleReplica || !s.Streaming || s.Timeline != 2 {
				return fmt.Errorf("%s %+v", pod, s)
			}
			var rows int
			if err := standbySQL[pod].QueryRow(ctx, "SELECT count(*) FROM t").Scan(&rows); err != nil || rows != 111 {
				return fmt.Errorf("%s has %d rows (%v)", pod, rows, err)
			}
			return nil
		})
	}
}
