package agent_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/agent"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
	"github.com/pgpilot/pgpilot-operator/test/pgtest"
)

// primaryAndStandby runs db-0's agent, the primary, and db-1's, a standby that clones it and
// streams from it directly, and waits until db-1 streams.
func primaryAndStandby(t *testing.T) (leases *pgtest.MemoryLeases, primary, standby *pgtest.RunningAgent) {
	leases = pgtest.NewMemoryLeases("db-0")
	primaryInst, standbyInst := pgtest.NewInstance(t, "db-0"), pgtest.NewInstance(t, "db-1")
	primary = pgtest.StartAgent(t, agentConfig(t, "db-0", primaryInst, primaryInst.Port), primaryInst, leases)
	standby = pgtest.StartAgent(t, agentConfig(t, "db-1", standbyInst, primaryInst.Port), standbyInst, leases)
	pgtest.Eventually(t, "standby streaming", func() error { // its clone's WAL stream counts on the primary, too
		s, err := status(standby)
		if err == nil && !s.Streaming {
			err = fmt.Errorf("standby not streaming: %+v", s)
		}
		return err
	})
	return leases, primary, standby
}

// Secrets are the truth for role passwords: new credential files (what the kubelet writes
// when a Secret changes) reach PostgreSQL without a restart, on the primary and the standby.
func TestCredentialsRotateWithoutRestart(t *testing.T) {
	ctx := context.Background()
	_, primary, standby := primaryAndStandby(t)
	primaryInst, standbyInst, primaryCfg, standbyCfg := primary.Instance, standby.Instance, primary.Config, standby.Config

	rotated := agentapi.Credentials{
		SuperuserPassword: "new super", ReplicationPassword: `it's a \ new: one`,
		AppUser: "app", AppPassword: "new-app", AgentToken: "new-token",
	}
	for _, cfg := range []agentapi.Config{primaryCfg, standbyCfg} {
		pgtest.SetCredentials(t, cfg, rotated)
	}
	login := func(user, password string) error {
		conn, err := postgres.Connect(ctx, primaryInst.Port, user, password, "postgres")
		if err == nil {
			_ = conn.Close(ctx)
		}
		return err
	}
	pgtest.Eventually(t, "new passwords work on the primary", func() error {
		if err := login("app", rotated.AppPassword); err != nil {
			return err
		}
		return login(agentapi.Superuser, rotated.SuperuserPassword)
	})
	for user, old := range map[string]string{"app": credentials.AppPassword, agentapi.Superuser: credentials.SuperuserPassword} {
		if login(user, old) == nil {
			t.Errorf("the old password of %s still works", user)
		}
	}
	pgtest.Eventually(t, "the new token opens the API and the old one does not", func() error {
		newCode, _, err := get(primary.URL+agentapi.PathStatus, rotated.AgentToken)
		oldCode, _, _ := get(primary.URL+agentapi.PathStatus, token)
		if err == nil && (newCode != http.StatusOK || oldCode != http.StatusUnauthorized) {
			err = fmt.Errorf("new token %d, old token %d", newCode, oldCode)
		}
		return err
	})

	// The standby's next connection to the primary uses the new replication password: cut its
	// current one and watch it stream again.
	admin := pgtest.Connect(t, primaryInst, agentapi.Superuser, rotated.SuperuserPassword, "postgres")
	standbyAdmin := pgtest.Connect(t, standbyInst, agentapi.Superuser, rotated.SuperuserPassword, "postgres")
	pgtest.Eventually(t, "the standby's password file has the new password", func() error {
		data, err := os.ReadFile(standbyInst.ReplicationPassfile())
		if want := `:it's a \\ new\: one` + "\n"; err == nil && !strings.HasSuffix(string(data), want) {
			err = fmt.Errorf("passfile %q does not end with %q", data, want)
		}
		return err
	})
	// No password in the connection string ALTER SYSTEM wrote, nor in the file it keeps.
	var conninfo string
	if err := standbyAdmin.QueryRow(ctx, "SHOW primary_conninfo").Scan(&conninfo); err != nil {
		t.Fatal(err)
	}
	auto, err := os.ReadFile(filepath.Join(standbyInst.DataDir, "postgresql.auto.conf"))
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{conninfo, string(auto)} {
		if strings.Contains(text, "password") || strings.Contains(text, "new: one") {
			t.Errorf("a replication password in %q", text)
		}
	}
	if info, err := os.Stat(standbyInst.ReplicationPassfile()); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("passfile mode %v (%v), want 0600", info.Mode(), err)
	}
	if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_replication"); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, "standby streaming with the new password", func() error {
		var n int
		if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'").Scan(&n); err != nil || n != 1 {
			return fmt.Errorf("%d streaming standbys (%v)", n, err)
		}
		return nil
	})

	// A credential file gone (a Secret's key removed) changes nothing in the database.
	pgtest.SetCredentials(t, primaryCfg, agentapi.Credentials{SuperuserPassword: "x", ReplicationPassword: "y",
		AppUser: "app", AppPassword: "", AgentToken: rotated.AgentToken})
	time.Sleep(time.Second) // five of the agent's ticks: time enough to have done harm
	if code, _, err := get(primary.URL+agentapi.PathStatus, rotated.AgentToken); err != nil || code != http.StatusOK {
		t.Errorf("with unreadable credentials the token changed: %d %v", code, err)
	}
	if err := login("app", rotated.AppPassword); err != nil {
		t.Errorf("an empty app-password file changed the app password: %v", err)
	}
}

// A standby starts streaming with the credentials it has now, not with the connection string
// its data directory kept (from before a rotation, or from an older release without client
// certificates): correcting it afterwards restarts the WAL receiver, and a WAL receiver that
// reconnects while the primary is fenced for a switchover misses the end of its WAL. The
// agent here never applies credentials on its own (ConfigInterval of an hour), so only the
// start can have used the new password.
func TestStandbyStartsWithTheCurrentConnection(t *testing.T) {
	ctx := context.Background()
	leases, primary, standby := primaryAndStandby(t)
	primaryInst, standbyInst, primaryCfg, standbyCfg := primary.Instance, standby.Instance, primary.Config, standby.Config
	if err := standby.Stop(); err != nil {
		t.Fatal(err)
	}

	rotated := credentials
	rotated.ReplicationPassword = "rotated while the standby was down"
	pgtest.SetCredentials(t, primaryCfg, rotated)
	pgtest.SetCredentials(t, standbyCfg, rotated)
	pgtest.Eventually(t, "the primary has the new replication password", func() error {
		conn, err := postgres.Connect(ctx, primaryInst.Port, standbyCfg.ReplicationUser, rotated.ReplicationPassword, "postgres")
		if err == nil {
			_ = conn.Close(ctx)
		}
		return err
	})
	restarted := pgtest.StartAgent(t, standbyCfg, standbyInst, leases, func(o *agent.Options) { o.ConfigInterval = time.Hour })
	pgtest.Eventually(t, "the restarted standby streams with the new password", func() error {
		s, err := status(restarted)
		if err == nil && !s.Streaming {
			err = fmt.Errorf("standby not streaming: %+v", s)
		}
		return err
	})
}
