package agent_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
	"github.com/pgpilot/pgpilot-operator/test/pgtest"
)

// Failed logins to an agent's PostgreSQL, read from its JSON log, are counted in the agent's
// status as one notice with the latest record and its client, which the operator turns into an
// Event.
func TestAgentReportsFailedLogins(t *testing.T) {
	ctx := context.Background()
	inst := pgtest.NewInstance(t, "db-0")
	a := pgtest.StartAgent(t, agentConfig(t, "db-0", inst, inst.Port), inst, pgtest.NewMemoryLeases("db-0"))
	waitReady(t, a)
	for range 2 {
		if conn, err := postgres.Connect(ctx, inst.Port, "app", "wrong", "app"); err == nil {
			_ = conn.Close(ctx)
			t.Fatal("a wrong password was accepted")
		}
	}
	pgtest.Eventually(t, "the failed logins in the agent's status", func() error {
		s, err := status(a)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(s.LogNotices, func(n agentapi.LogNotice) bool { return n.Reason == agentapi.LogNoticeAuthenticationFailed })
		if i < 0 {
			return fmt.Errorf("notices %+v", s.LogNotices)
		}
		n := s.LogNotices[i]
		if n.Count != 2 || !strings.Contains(n.Message, `user "app"`) || !strings.HasSuffix(n.Message, "(from 127.0.0.1)") || n.Last.IsZero() {
			return fmt.Errorf("notice %+v, want 2 failed logins of app from 127.0.0.1", n)
		}
		return nil
	})
}
