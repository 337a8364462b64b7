package agent

import (
	"strings"
	"testing"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
)

// The connection strings the agent hands to pg_basebackup and pg_rewind, which become their
// command lines (readable in /proc by every process of the pod), carry no password: each tool
// gets its password in its environment (Instance.Clone, Instance.Rewind).
func TestCloneAndRewindSourcesCarryNoPassword(t *testing.T) {
	a := &Agent{Config: agentapi.Config{PrimaryHost: "db-rw", PostgresPort: 5432, ReplicationUser: agentapi.DefaultReplicationUser, PodName: "db-1"},
		Instance: &postgres.Instance{DataDir: "/pgdata/data"}}
	creds := agentapi.Credentials{SuperuserPassword: "super-secret-1", ReplicationPassword: "repl-secret-2"}
	a.latest = creds
	conninfo, password := a.cloneSource(creds)
	if strings.Contains(conninfo, "password") || strings.Contains(conninfo, creds.ReplicationPassword) || password != creds.ReplicationPassword {
		t.Errorf("clone source %q, password %q", conninfo, password)
	}
	conninfo, password = a.rewindSource()
	if strings.Contains(conninfo, "password") || !strings.Contains(conninfo, "user='streaming_replica'") || password != creds.ReplicationPassword {
		t.Errorf("rewind source %q, password %q", conninfo, password)
	}
	// Nor does the standby's own primary_conninfo, which ALTER SYSTEM sends as SQL text: it
	// names the password file beside the data directory.
	if conninfo := a.primaryConnInfo(); strings.Contains(conninfo, "password=") || !strings.Contains(conninfo, "passfile='/pgdata/pgpilot-replication.pgpass'") {
		t.Errorf("primary_conninfo %q", conninfo)
	}
}
