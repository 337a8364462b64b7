package agent_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
	"github.com/pgpilot/pgpilot-operator/test/pgtest"
)

func endpointOf(a *pgtest.RunningAgent) agentapi.Endpoint {
	return agentapi.Endpoint{Address: strings.TrimPrefix(a.URL, "http://"), Token: token}
}

// startPair runs db-0 (primary) and db-1 (its standby, streaming through the rw proxy) over one
// Lease naming db-0.
func startPair(t *testing.T) (primary, standby *pgtest.RunningAgent, rw *pgtest.ServiceProxy, leases *pgtest.MemoryLeases) {
	leases, rw, instances := agentsBehindRW(t, "db-0", "db-1")
	return instances["db-0"], instances["db-1"], rw, leases
}

// agentsBehindRW runs an agent for each pod over one Lease naming the first, the primary,
// behind a proxy that plays the -rw Service (the others clone and stream through it), and
// waits until the others stream.
func agentsBehindRW(t *testing.T, pods ...string) (*pgtest.MemoryLeases, *pgtest.ServiceProxy, map[string]*pgtest.RunningAgent) {
	t.Helper()
	leases := pgtest.NewMemoryLeases(pods[0])
	rw := pgtest.NewServiceProxy(t)
	instances := map[string]*pgtest.RunningAgent{}
	for i, pod := range pods {
		inst := pgtest.NewInstance(t, pod)
		if i == 0 {
			rw.SetTarget(inst.Port)
		}
		instances[pod] = pgtest.StartAgent(t, agentConfig(t, pod, inst, rw.Port), inst, leases)
	}
	for _, pod := range pods[1:] {
		pgtest.EventuallyWithin(t, pod+" streams", pgtest.BringUpWait, func() error {
			s, err := status(instances[pod])
			if err == nil && !s.Streaming {
				err = fmt.Errorf("%s %+v", pod, s)
			}
			return err
		})
	}
	return leases, rw, instances
}

func insertRows(t *testing.T, a *pgtest.RunningAgent, from, to int) {
	t.Helper()
	app := pgtest.Connect(t, a.Instance, "app", credentials.AppPassword, "app")
	for i := from; i < to; i++ {
		if _, err := app.Exec(context.Background(), fmt.Sprintf("CREATE TABLE IF NOT EXISTS t (v int); INSERT INTO t VALUES (%d)", i)); err != nil {
			t.Fatal(err)
		}
	}
}

// awaitRows waits until a's table t has want rows.
func awaitRows(t *testing.T, a *pgtest.RunningAgent, want int) {
	t.Helper()
	app := pgtest.Connect(t, a.Instance, "app", credentials.AppPassword, "app")
	pgtest.Eventually(t, fmt.Sprintf("%s has %d rows", a.Config.PodName, want), func() error {
		var rows int
		if err := app.QueryRow(context.Background(), "SELECT count(*) FROM t").Scan(&rows); err != nil || rows != want {
			return fmt.Errorf("%d rows (%v)", rows, err)
		}
		return nil
	})
}

func awaitFenced(t *testing.T, a *pgtest.RunningAgent, reason string) {
	t.Helper()
	pgtest.Eventually(t, a.Config.PodName+" fenced: "+reason, func() error {
		s, err := status(a)
		switch {
		case err != nil:
			return err
		case !s.Fenced || !strings.Contains(s.FencedReason, reason):
			return fmt.Errorf("%+v", s)
		case a.Instance.Running():
			return fmt.Errorf("fenced but postgres runs")
		}
		return nil
	})
}

func awaitRole(t *testing.T, a *pgtest.RunningAgent, role string, timeline int64) {
	t.Helper()
	pgtest.Eventually(t, fmt.Sprintf("%s a %s on timeline %d", a.Config.PodName, role, timeline), func() error {
		s, err := status(a)
		if err == nil && (s.Role != role || s.Timeline != timeline || (role == agentapi.RoleReplica && !s.Streaming)) {
			err = fmt.Errorf("%+v", s)
		}
		return err
	})
}

// The operator's failover through the agents: the primary fenced on order stays down (across
// a restart of its agent) until the Lease goes to the standby, which is promoted; the old
// primary then rejoins it as a standby on its own.
func TestFencedPrimaryWaitsForTheLeaseThenRejoins(t *testing.T) {
	ctx := context.Background()
	primary, standby, rw, leases := startPair(t)
	insertRows(t, primary, 0, 50)
	// Replication here is asynchronous: rows the standby has not received when the primary is
	// fenced are rewound away (a loaded machine showed it). Failover loses none only with
	// synchronous replication, which the e2e specs check; this test is about the fence.
	awaitRows(t, standby, 50)
	client := agentapi.HTTPClient{}
	if _, err := client.Fence(ctx, endpointOf(standby)); err == nil {
		t.Error("a standby was fenced")
	}
	rw.SetTarget(0)
	fenced, err := client.Fence(ctx, endpointOf(primary))
	if err != nil || !fenced.Fenced {
		t.Fatalf("fence: %+v, %v", fenced, err)
	}
	awaitFenced(t, primary, "fenced by the operator")

	// A container restart keeps the fence: the Lease still names db-0, but was not granted again.
	if err := primary.Stop(); err != nil {
		t.Fatalf("agent of the fenced primary: %v", err)
	}
	primary = pgtest.StartAgent(t, primary.Config, primary.Instance, leases)
	awaitFenced(t, primary, "fenced by the operator")

	// A marker left empty (a process killed while writing it, as a deleted pod's agent once
	// was: its container then crash-looped on it) still holds the instance down, and the
	// agent starts, to rejoin once the Lease moves.
	if err := primary.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(filepath.Dir(primary.Instance.DataDir), "pgpilot-fence.json"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	primary = pgtest.StartAgent(t, primary.Config, primary.Instance, leases)
	awaitFenced(t, primary, "unreadable")

	leases.Grant("db-1")
	if _, err := client.Promote(ctx, endpointOf(standby), []string{agentapi.SlotName("db-0")}); err != nil {
		t.Fatal(err)
	}
	rw.SetTarget(standby.Instance.Port)
	insertRows(t, standby, 50, 60)
	awaitRole(t, primary, agentapi.RoleReplica, 2)
	awaitRows(t, primary, 60)
	rejoined, _ := status(primary)
	if rejoined.Rejoined == nil || rejoined.Rejoined.Method != agentapi.RejoinRewind {
		t.Fatalf("rejoin not reported: %+v", rejoined)
	}
	// A restart right after the rejoin does not lose its record: the operator may not have
	// read it yet.
	if err := primary.Stop(); err != nil {
		t.Fatal(err)
	}
	primary = pgtest.StartAgent(t, primary.Config, primary.Instance, leases)
	awaitRole(t, primary, agentapi.RoleReplica, 2)
	if s, _ := status(primary); s.Rejoined == nil || *s.Rejoined != *rejoined.Rejoined {
		t.Errorf("after a restart the agent reports rejoin %+v, want %+v", s.Rejoined, rejoined.Rejoined)
	}
}

// An API-server outage alone, two minutes of it, does not stop a primary whose standby still
// replies: it accepts writes throughout. Once the standby is gone too, the primary fences
// itself, and starts again only when the Lease is granted to it again.
func TestIsolatedPrimaryFencesItselfOnlyWithoutPeers(t *testing.T) {
	const outage = 2 * time.Minute
	primary, standby, _, leases := startPair(t)
	leases.Fail(true)
	for started := time.Now(); time.Since(started) < outage; time.Sleep(10 * time.Second) {
		insertRows(t, primary, 0, 1) // still a primary: its standby vouches for it
		if s, err := status(primary); err != nil || s.Fenced || s.Role != agentapi.RolePrimary {
			t.Fatalf("%s into the API-server outage the primary reports %+v, %v", time.Since(started).Round(time.Second), s, err)
		}
	}
	if err := standby.Stop(); err != nil {
		t.Fatal(err)
	}
	cutOff := time.Now()
	awaitFenced(t, primary, "was not renewed")
	if took := time.Since(cutOff); took > agentapi.PeerWindow+3*time.Second {
		t.Errorf("fenced %s after its last peer left, want within %s", took, agentapi.PeerWindow)
	}
	leases.Fail(false)
	time.Sleep(3 * time.Second)
	awaitFenced(t, primary, "was not renewed") // the Lease is back but was not granted again
	leases.Grant("db-0")
	awaitRole(t, primary, agentapi.RolePrimary, 1)
	insertRows(t, primary, 1, 2)
}

// A primary whose postmaster dies is not restarted behind the operator's back: it is fenced
// until the Lease is granted again.
func TestCrashedPrimaryIsFencedNotRestarted(t *testing.T) {
	leases := pgtest.NewMemoryLeases("db-0")
	inst := pgtest.NewInstance(t, "db-0")
	primary := pgtest.StartAgent(t, agentConfig(t, "db-0", inst, inst.Port), inst, leases)
	awaitRole(t, primary, agentapi.RolePrimary, 1)
	pgtest.Eventually(t, "the app role exists", func() error {
		conn, err := postgres.Connect(context.Background(), inst.Port, "app", credentials.AppPassword, "app")
		if err == nil {
			_ = conn.Close(context.Background())
		}
		return err
	})
	killPostmaster(t, inst)
	awaitFenced(t, primary, "postgres exited")
	time.Sleep(2 * time.Second)
	awaitFenced(t, primary, "postgres exited")
	leases.Grant("db-0")
	awaitRole(t, primary, agentapi.RolePrimary, 1)
	insertRows(t, primary, 0, 2)
}
