package agent

import (
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
)

// The Secrets are the truth for every role's password. The kubelet rewrites the projected
// files when a Secret changes; the agent reads them on every tick and brings PostgreSQL in
// line without a restart: ALTER ROLE on the primary, the WAL receiver's password file on a
// standby. It connects over the local socket, so a changed superuser password never locks
// it out.

// readCredentials reads the credential files and remembers them as the latest; the token the
// API accepts follows at once.
func (a *Agent) readCredentials() (agentapi.Credentials, error) {
	c, err := agentapi.ReadCredentials(a.Config.CredentialsDir)
	if err != nil {
		return c, err
	}
	a.credsMu.Lock()
	defer a.credsMu.Unlock()
	a.latest = c
	return c, nil
}

func (a *Agent) credentials() agentapi.Credentials {
	a.credsMu.Lock()
	defer a.credsMu.Unlock()
	return a.latest
}

// token is the bearer token the operator must present.
func (a *Agent) token() string { return a.credentials().AgentToken }

// credentialsApplyTimeout bounds one application of the credential files to the local server.
const credentialsApplyTimeout = 5 * time.Second

// syncCredentials applies the credential files when they differ from what PostgreSQL was last
// given. A file missing or empty changes nothing: a role never gets an empty password.
func (a *Agent) syncCredentials(ctx context.Context) {
	c, err := a.readCredentials()
	if err != nil {
		a.Log.Error(err, "credentials unreadable; keeping the passwords PostgreSQL has")
		return
	}
	conninfo := a.primaryConnInfo()
	if a.applied != nil && *a.applied == c && a.appliedConnInfo == conninfo {
		return
	}
	// Bounded: this runs in the agent's main loop, whose every-second tick notices a frozen
	// server (primaryTick). The connection has its own timeout, but the statements had none: a
	// server frozen between the two held the loop for ever, and the freeze was never reported
	// (a CI run: the first apply after the start had failed, the next met the freeze; 60 s
	// without a report).
	local, cancel := context.WithTimeout(ctx, credentialsApplyTimeout)
	defer cancel()
	if err := a.applyCredentials(local, c); err != nil {
		a.Log.Error(err, "apply credentials; retrying")
		return
	}
	if a.applied != nil {
		a.Log.Info("credentials or TLS policy changed and applied", "primary", a.isPrimary())
	}
	a.applied, a.appliedConnInfo = &c, conninfo
}

func (a *Agent) applyCredentials(ctx context.Context, c agentapi.Credentials) error {
	conn, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	if a.isPrimary() {
		return postgres.EnsureRoles(ctx, conn, a.roles(c))
	}
	if a.detachment() != nil {
		return nil // held off streaming: Attach sets the connection of then
	}
	conninfo, err := a.streamingConnInfo(c)
	if err != nil {
		return err
	}
	_, err = postgres.EnsurePrimaryConnInfo(ctx, conn, conninfo)
	return err
}

func (a *Agent) roles(c agentapi.Credentials) postgres.Roles {
	return postgres.Roles{
		Superuser: agentapi.Superuser, SuperuserPassword: c.SuperuserPassword,
		ReplicationUser: a.Config.ReplicationUser, ReplicationPassword: c.ReplicationPassword,
		AppOwner: c.AppUser, AppPassword: c.AppPassword, AppDatabase: a.Config.AppDatabase,
		MonitorUser: agentapi.MonitorUser,
	}
}

// primaryConnInfo is how a standby's WAL receiver reaches the primary: with the replication
// password from the passfile (writePassfile), never in the string itself, which ALTER SYSTEM
// sends as SQL text and postgresql.auto.conf keeps.
func (a *Agent) primaryConnInfo() string {
	return a.connInfoToPrimary(a.Config.ReplicationUser, "", "passfile", a.Instance.ReplicationPassfile(),
		"application_name", a.Config.PodName)
}

// streamingConnInfo writes c's replication password into the passfile and returns the
// connection string that reads it.
func (a *Agent) streamingConnInfo(c agentapi.Credentials) (string, error) {
	if err := a.Instance.WriteReplicationPassfile(a.Config.ReplicationUser, c.ReplicationPassword); err != nil {
		return "", err
	}
	return a.primaryConnInfo(), nil
}

// cloneSource reaches the primary as the replication user without its password, which
// pg_basebackup gets in its environment (Instance.Clone): the standby's own primary_conninfo is
// written afterwards (Instance.ConfigureStandby).
func (a *Agent) cloneSource(c agentapi.Credentials) (conninfo, password string) {
	return a.connInfoToPrimary(a.Config.ReplicationUser, "", "application_name", a.Config.PodName), c.ReplicationPassword
}

// rewindSource reaches the primary's postgres database as the replication user, which may read
// the files pg_rewind needs (postgres.EnsureRoles grants it those functions, nothing more), so
// that the superuser need not log in over the network; the password goes in pg_rewind's
// environment.
func (a *Agent) rewindSource() (conninfo, password string) {
	return a.connInfoToPrimary(a.Config.ReplicationUser, "", "dbname", "postgres"), a.credentials().ReplicationPassword
}

// connInfoToPrimary reaches the primary through the -rw Service as user, with more keywords;
// without a password when it is empty.
func (a *Agent) connInfoToPrimary(user, password string, more ...string) string {
	pairs := []string{"host", a.Config.PrimaryHost, "port", strconv.Itoa(a.Config.PostgresPort), "user", user}
	if password != "" {
		pairs = append(pairs, "password", password)
	}
	pairs = append(pairs, "connect_timeout", "5")
	return postgres.ConnInfo(slices.Concat(pairs, a.connInfoTLS(), more)...)
}

// configureStandby makes the stopped server a standby of the primary, streaming with the
// credentials of now.
func (a *Agent) configureStandby() error {
	conninfo, err := a.streamingConnInfo(a.credentials())
	if err != nil {
		return err
	}
	return a.Instance.ConfigureStandby(conninfo, agentapi.SlotName(a.Config.PodName))
}
