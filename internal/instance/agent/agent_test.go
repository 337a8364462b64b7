package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	"github.com/pgpilot/pgpilot-operator/internal/instance/agent"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
	"github.com/pgpilot/pgpilot-operator/test/pgtest"
)

const token = "agent-token-for-tests"

var credentials = agentapi.Credentials{SuperuserPassword: "super", ReplicationPassword: "repl",
	AppUser: "app", AppPassword: "app-pass", AgentToken: token}

func agentConfig(t *testing.T, pod string, inst *postgres.Instance, primaryPort int) agentapi.Config {
	return pgtest.AgentConfig(t, inst, pod, "db-0", primaryPort, credentials)
}

func get(url, bearer string) (int, string, error)  { return call(http.MethodGet, url, bearer) }
func post(url, bearer string) (int, string, error) { return call(http.MethodPost, url, bearer) }

func call(method, url, bearer string) (int, string, error) {
	req, _ := http.NewRequest(method, url, nil)
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	return do(req)
}

func do(req *http.Request) (int, string, error) {
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), nil
}

// waitReady waits until the agent's readiness probe answers 200.
func waitReady(t *testing.T, r *pgtest.RunningAgent) {
	t.Helper()
	pgtest.EventuallyWithin(t, "agent ready at "+r.URL, pgtest.BringUpWait, func() error {
		if code, body, err := get(r.URL+agentapi.PathReadiness, ""); err != nil || code != http.StatusOK {
			return fmt.Errorf("%d %s (%v)", code, body, err)
		}
		return nil
	})
}

func status(r *pgtest.RunningAgent) (*agentapi.Status, error) {
	code, body, err := get(r.URL+agentapi.PathStatus, token)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("status %d: %s", code, body)
	}
	s := &agentapi.Status{}
	return s, json.Unmarshal([]byte(body), s)
}

func TestAgentsBootstrapReplicateReloadAndReport(t *testing.T) {
	leases := pgtest.NewMemoryLeases("db-0")
	ctx := context.Background()
	primaryInst, standbyInst := pgtest.NewInstance(t, "db-0"), pgtest.NewInstance(t, "db-1")
	// Both start at once: the standby keeps retrying its clone until the primary is up and
	// has created the replication role.
	primary := pgtest.StartAgent(t, agentConfig(t, "db-0", primaryInst, primaryInst.Port), primaryInst, leases)
	standby := pgtest.StartAgent(t, agentConfig(t, "db-1", standbyInst, primaryInst.Port), standbyInst, leases)

	for _, r := range []*pgtest.RunningAgent{primary, standby} {
		waitReady(t, r)
	}

	for _, c := range []struct{ name, bearer string }{{"no token", ""}, {"wrong token", "nope"}} {
		if code, _, err := get(primary.URL+agentapi.PathStatus, c.bearer); err != nil || code != http.StatusUnauthorized {
			t.Errorf("status with %s = %d (%v), want 401", c.name, code, err)
		}
	}

	app := pgtest.Connect(t, primaryInst, "app", credentials.AppPassword, "app")
	if _, err := app.Exec(ctx, "CREATE TABLE t (v int); INSERT INTO t VALUES (42)"); err != nil {
		t.Fatal(err)
	}
	standbyApp := pgtest.Connect(t, standbyInst, "app", credentials.AppPassword, "app")
	pgtest.Eventually(t, "row on the standby", func() error {
		var v int
		return standbyApp.QueryRow(ctx, "SELECT v FROM t").Scan(&v)
	})
	pgtest.Eventually(t, "roles and replication reported over the API", func() error {
		p, err := status(primary)
		if err != nil {
			return err
		}
		s, err := status(standby)
		if err != nil {
			return err
		}
		if p.Role != agentapi.RolePrimary || s.Role != agentapi.RoleReplica || !s.Streaming {
			return fmt.Errorf("primary %+v standby %+v", p, s)
		}
		if len(p.Replicas) != 1 || p.Replicas[0].ApplicationName != "db-1" || p.Replicas[0].LagBytes != 0 {
			return fmt.Errorf("primary sees %+v", p.Replicas)
		}
		return nil
	})

	// Each agent's metrics endpoint: PostgreSQL's statistics, read as the monitoring role.
	pgtest.Eventually(t, "metrics of the primary and the standby", func() error {
		for r, want := range map[*pgtest.RunningAgent][]string{
			primary: {"pgpilot_is_primary 1", `pgpilot_replication_streaming{application_name="db-1"} 1`},
			standby: {"pgpilot_is_primary 0", "pgpilot_wal_receiver_up 1"},
		} {
			code, body, err := get(r.MetricsURL, "")
			if err != nil || code != http.StatusOK {
				return fmt.Errorf("%s: %d (%v)", r.MetricsURL, code, err)
			}
			for _, line := range append(want, "pgpilot_up 1", "pgpilot_volume_free_bytes ", "process_resident_memory_bytes ") {
				if !strings.Contains(body, "\n"+line) {
					return fmt.Errorf("%s has no %q", r.MetricsURL, line)
				}
			}
		}
		return nil
	})
	var monitorIsSuperuser, monitorHasPgMonitor bool
	if err := app.QueryRow(ctx, "SELECT rolsuper, pg_has_role(oid, 'pg_monitor', 'MEMBER') FROM pg_roles WHERE rolname = $1",
		agentapi.MonitorUser).Scan(&monitorIsSuperuser, &monitorHasPgMonitor); err != nil || monitorIsSuperuser || !monitorHasPgMonitor {
		t.Errorf("%s: superuser %v, pg_monitor %v (%v), want a pg_monitor member only", agentapi.MonitorUser, monitorIsSuperuser, monitorHasPgMonitor, err)
	}

	// The operator changes the ConfigMap; the agent notices and reloads.
	pgtest.WriteConfig(t, primaryInst, pgtest.Cluster(map[string]string{"work_mem": "24MB"}))
	admin := pgtest.Connect(t, primaryInst, "postgres", "super", "postgres")
	pgtest.Eventually(t, "work_mem reloaded by the agent", func() error {
		var v string
		if err := admin.QueryRow(ctx, "SHOW work_mem").Scan(&v); err != nil || v != "24MB" {
			return fmt.Errorf("work_mem = %q (%v)", v, err)
		}
		return nil
	})

	// A setting that needs a restart: reported as pending, applied by a restart on request,
	// and the agent keeps supervising the new postmaster.
	pgtest.WriteConfig(t, primaryInst, pgtest.Cluster(map[string]string{"work_mem": "24MB", "max_connections": "120"}))
	pgtest.Eventually(t, "max_connections pending restart", func() error {
		s, err := status(primary)
		if err != nil || !slices.Equal(s.PendingRestart, []string{"max_connections"}) {
			return fmt.Errorf("pending %+v (%v)", s, err)
		}
		return nil
	})
	if code, body, err := post(primary.URL+agentapi.PathRestart, ""); err != nil || code != http.StatusUnauthorized {
		t.Fatalf("restart without token = %d %s (%v), want 401", code, body, err)
	}
	if code, body, err := post(primary.URL+agentapi.PathRestart, token); err != nil || code != http.StatusAccepted {
		t.Fatalf("restart = %d %s (%v), want 202", code, body, err)
	}
	pgtest.Eventually(t, "max_connections applied by the restart", func() error {
		conn, err := postgres.Connect(ctx, primaryInst.Port, "postgres", "super", "postgres")
		if err != nil {
			return err
		}
		defer func() { _ = conn.Close(ctx) }()
		var v string
		if err := conn.QueryRow(ctx, "SHOW max_connections").Scan(&v); err != nil || v != "120" {
			return fmt.Errorf("max_connections = %q (%v)", v, err)
		}
		return nil
	})
	pgtest.Eventually(t, "nothing pending and the standby streaming again", func() error {
		p, err := status(primary)
		if err != nil {
			return err
		}
		if len(p.PendingRestart) != 0 || len(p.Replicas) != 1 || p.Replicas[0].State != "streaming" {
			return fmt.Errorf("primary %+v", p)
		}
		return nil
	})
	if code, _, err := get(primary.URL+agentapi.PathLiveness, ""); err != nil || code != http.StatusOK {
		t.Fatalf("liveness after restart = %d (%v): the agent must keep supervising", code, err)
	}

	// SIGTERM in the pod: the agent stops PostgreSQL cleanly and returns without error.
	if err := standby.Stop(); err != nil {
		t.Fatalf("standby agent stop: %v", err)
	}
	if standbyInst.Running() {
		t.Fatal("postgres still running after the agent stopped")
	}
}

// What the agent sets on the server's command line is reserved in the CRD, so a user's
// parameter can never contradict it.
func TestInstanceSettingsAreManagedParameters(t *testing.T) {
	inst := agent.NewInstance(agentapi.Config{DataDir: "/data", ConfigDir: "/etc/pgpilot", SocketDir: "/run", PostgresPort: 5432})
	// postgres.Instance adds the port and the socket directory itself, and the logging settings
	// when the agent collects the log (Agent.Run).
	set := append(slices.Collect(maps.Keys(inst.Settings)), "port", "unix_socket_directories")
	for _, name := range append(set, postgres.LogSettings()...) {
		if !slices.Contains(pgv1.ManagedParameters, name) {
			t.Errorf("the agent sets %s, which pgv1.ManagedParameters does not reserve", name)
		}
	}
}
