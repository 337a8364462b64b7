package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/test/pgtest"
)

func writeSynchronous(t *testing.T, a *pgtest.RunningAgent, durability string) {
	t.Helper()
	data, _ := json.Marshal(agentapi.SynchronousConfig{Method: "any", Number: 1, Durability: durability, Instances: []string{"db-0", "db-1"}})
	if err := os.WriteFile(filepath.Join(a.Config.ConfigDir, agentapi.SynchronousFile), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// Required: a commit waits for the standby even when it is gone. Preferred: once the standby
// stops streaming, commits go through without it.
func TestSynchronousStandbyNamesFollowTheDurability(t *testing.T) {
	ctx := context.Background()
	primary, standby, _, _ := startPair(t)
	writeSynchronous(t, primary, "required")
	admin := pgtest.Connect(t, primary.Instance, agentapi.Superuser, credentials.SuperuserPassword, "postgres")
	setting := func(want string) func() error {
		return func() error {
			var got string
			if err := admin.QueryRow(ctx, "SHOW synchronous_standby_names").Scan(&got); err != nil || got != want {
				return fmt.Errorf("synchronous_standby_names %q (%v), want %q", got, err, want)
			}
			return nil
		}
	}
	pgtest.Eventually(t, "required names the standby", setting(`ANY 1 ("db-1")`))
	insertRows(t, primary, 0, 1) // confirmed by the streaming standby
	if err := standby.Stop(); err != nil {
		t.Fatal(err)
	}
	blocked, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if _, err := admin.Exec(blocked, "INSERT INTO t VALUES (-1)"); err == nil {
		t.Fatal("a commit was acknowledged with no standby to confirm it in required mode")
	}
	admin = pgtest.Connect(t, primary.Instance, agentapi.Superuser, credentials.SuperuserPassword, "postgres")
	writeSynchronous(t, primary, "preferred")
	pgtest.Eventually(t, "preferred drops the missing standby", setting(""))
	insertRows(t, primary, 1, 2)
}
