package agent

import (
	"strings"
	"testing"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
)

// The connection strings the agent hands to pg_basebackup and pg_rewind, which become their
// command lines (readable in /proc by every process of the pod), carry no password: each tool
// gets its password in its environment (Instance.Clone, Instance.Rewind).
func TestCloneAndRewindSourcesCarryNoPassword(t *testing.T) {
	a := &Agent{Config: agentapi.Config{PrimaryHost: "db-rw", PostgresPort: 5432, ReplicationUser: agentapi.DefaultReplicationUser, PodName: "db-1"}}
	creds := agentapi.Credentials{SuperuserPassword: "super-secret-1", ReplicationPassword: "repl-secret-2"}
	a.latest = creds
	conninfo, password := a.cloneSource(creds)
	if strings.Contains(conninfo, "password") || strings.Contains(conninfo, creds.ReplicationPassword) || password != creds.ReplicationPassword {
		t.Errorf("clone source %q, password %q", conninfo, password)
	}
	conninfo, password = a.rewindSource()
	if strings.Contains(conninfo, "password") || strings.Contains(conninfo, creds.SuperuserPassword) || password != creds.SuperuserPassword {
		t.Errorf("rewind source %q, password %q", conninfo, password)
	}
	// The standby's own primary_conninfo (a 0600 file in the data directory) keeps it.
	if !strings.Contains(a.primaryConnInfo(creds), creds.ReplicationPassword) {
		t.Errorf("primary_conninfo lost the replication password: %q", a.primaryConnInfo(creds))
	}
}
