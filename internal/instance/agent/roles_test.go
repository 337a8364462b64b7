package agent_test

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/test/pgtest"
)

// A planned switchover through the agents' API, as the operator will run it: demote the
// primary (clean shutdown, restarted as a standby of the -rw Service), wait for the target to
// replay past the shutdown checkpoint, promote it, move the Service. No acknowledged commit is
// lost, and the old primary follows the new one on the next timeline.
func TestSwitchoverThroughTheAgents(t *testing.T) {
	ctx := context.Background()
	oldPrimary, target, rw, leases := startPair(t)
	client := agentapi.HTTPClient{}
	insertRows(t, oldPrimary, 0, 100)

	rw.SetTarget(0) // fenced: the Service has no endpoint while the roles change
	demoted, err := client.Demote(ctx, endpointOf(oldPrimary))
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
	if _, err := client.Promote(ctx, endpointOf(target), nil); err == nil {
		t.Fatal("promoted without the primary lease")
	}
	leases.Grant("db-1")
	promoted, err := client.Promote(ctx, endpointOf(target), []string{agentapi.SlotName("db-0")})
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
		s, err := client.Status(ctx, endpointOf(oldPrimary))
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
	if _, err := client.Demote(ctx, endpointOf(oldPrimary)); err == nil {
		t.Error("a standby accepted a demotion")
	}
}

// What the operator falls back on when a switchover's target missed the end of the old
// primary's WAL (its WAL receiver was cut while the primary was fenced, so nothing could serve
// that WAL to it): the other standby and the demoted primary itself report having replayed all
// of it, the demoted primary can be promoted back, and the standby that fell behind follows it
// onto the new timeline with every row.
func TestDemotedPrimaryCanBePromotedBackWhenTheTargetMissedItsLastWAL(t *testing.T) {
	ctx := context.Background()
	_, rw, instances := agentsBehindRW(t, "db-0", "db-1", "db-2")
	oldPrimary := instances["db-0"]
	client := agentapi.HTTPClient{}
	insertRows(t, oldPrimary, 0, 100)

	rw.SetTarget(0)
	primarySQL := pgtest.Connect(t, oldPrimary.Instance, agentapi.Superuser, credentials.SuperuserPassword, "postgres")
	if _, err := primarySQL.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_replication WHERE application_name = 'db-1'"); err != nil {
		t.Fatal(err)
	}
	insertRows(t, oldPrimary, 100, 110)
	demoted, err := client.Demote(ctx, endpointOf(oldPrimary))
	if err != nil || !demoted.Clean {
		t.Fatalf("demote: %+v, %v", demoted, err)
	}
	lsnSQL := pgtest.Connect(t, instances["db-2"].Instance, agentapi.Superuser, credentials.SuperuserPassword, "postgres")
	replayedAll := func(pod string) (bool, error) {
		s, err := client.Status(ctx, endpointOf(instances[pod]))
		if err != nil {
			return false, err
		}
		var past bool
		err = lsnSQL.QueryRow(ctx, "SELECT $1::pg_lsn >= $2::pg_lsn", s.ReplayLSN, demoted.ShutdownLSN).Scan(&past)
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

	promoted, err := client.Promote(ctx, endpointOf(oldPrimary), []string{agentapi.SlotName("db-1"), agentapi.SlotName("db-2")})
	if err != nil || promoted.Timeline != 2 {
		t.Fatalf("promote the old primary back: %+v, %v", promoted, err)
	}
	rw.SetTarget(oldPrimary.Instance.Port)
	insertRows(t, oldPrimary, 110, 111)
	for _, pod := range []string{"db-1", "db-2"} {
		awaitRole(t, instances[pod], agentapi.RoleReplica, 2)
		awaitRows(t, instances[pod], 111)
	}
}

// A demotion ordered while the agent still starts (its API answers before the server has its
// roles) waits for the start: refused as in progress, or run after it. It used to stop the
// server under the start, and the agent ended (18's major upgrade test in a CI rehearsal).
func TestDemotionDuringTheStartWaitsForIt(t *testing.T) {
	ctx := context.Background()
	primary, _, _, leases := startPair(t)
	if err := primary.Stop(); err != nil {
		t.Fatal(err)
	}
	leases.Grant("db-0") // the stopped agent let its Lease go; the operator grants it again
	restarted := pgtest.StartAgent(t, primary.Config, primary.Instance, leases)
	client := agentapi.HTTPClient{}
	var first error
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		_, first = client.Demote(ctx, endpointOf(restarted))
		if !errors.Is(first, syscall.ECONNREFUSED) || time.Now().After(deadline) {
			break
		}
	}
	t.Logf("the first demotion answered %v", first)
	pgtest.EventuallyWithin(t, "the restarted agent ready", 30*time.Second, func() error {
		if err := restarted.Probe(agentapi.PathReadiness); err != nil {
			return err
		}
		demoted, err := client.Demote(ctx, endpointOf(restarted))
		if err != nil && !errors.Is(err, agentapi.ErrWrongRole) {
			return err
		}
		if err == nil && !demoted.Clean {
			return fmt.Errorf("demoted %+v", demoted)
		}
		return nil
	})
	pgtest.EventuallyWithin(t, "the demoted instance a replica", 30*time.Second, func() error {
		if s, err := status(restarted); err != nil || s.Role != agentapi.RoleReplica {
			return fmt.Errorf("%+v, %v", s, err)
		}
		return nil
	})
}
