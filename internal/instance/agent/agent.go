package agent

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
)

// Options tune the agent itself; they are not part of the pod's contract.
type Options struct {
	// ListenAddress of the HTTP API; empty means every address on Config.AgentPort.
	ListenAddress string
	// ShutdownGrace is how long a fast shutdown may take before an immediate one.
	ShutdownGrace time.Duration
	// ConfigInterval is how often the configuration files are checked for changes.
	ConfigInterval time.Duration
	// CloneRetry is the first delay between clone attempts; it grows to 30s.
	CloneRetry time.Duration
	// DetachHold is how long a standby stays detached without a new order; zero means
	// agentapi.DetachHold.
	DetachHold time.Duration
	// CatalogDriftInterval is how often the primary goes over its managed roles again; zero means
	// agentapi.CatalogDriftInterval.
	CatalogDriftInterval time.Duration
	// MetricsListenAddress of the metrics endpoint; empty means every address on
	// Config.MetricsPort.
	MetricsListenAddress string
	// Executable is the agent binary PostgreSQL calls as its restore_command during a
	// recovery; empty means this process's own.
	Executable string
}

// DefaultOptions fit a pod whose terminationGracePeriodSeconds is 60.
func DefaultOptions() Options {
	return Options{ShutdownGrace: 50 * time.Second, ConfigInterval: 5 * time.Second, CloneRetry: 2 * time.Second}
}

// NewInstance is the local PostgreSQL server as the pod's environment describes it. The agent
// alone sets where the data, the pg_hba.conf, the socket and the port are; the operator's
// postgresql.conf leaves them out.
func NewInstance(c agentapi.Config) *postgres.Instance {
	settings := map[string]string{
		"data_directory": c.DataDir,
		"hba_file":       c.HBAConfPath(),
	}
	if c.TLSDir != "" {
		maps.Copy(settings, TLSSettings(c))
	}
	return &postgres.Instance{
		BinDir:     c.BinDir,
		DataDir:    c.DataDir,
		ConfigFile: c.PostgresqlConfPath(),
		Settings:   settings,
		Port:       c.PostgresPort,
		SocketDir:  c.SocketDir,
		IdentMap:   localSuperuserMap(),
	}
}

// localSuperuserMap lets the agent's own OS user log in as the superuser and as the monitoring
// role over the local socket (pg_hba.conf's first lines: peer authentication through the map
// "pgpilot"), so that the agent never depends on a password it may be about to change.
func localSuperuserMap() string {
	name := "postgres"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	return fmt.Sprintf("%s %s %s\n%s %s %s\n", agentapi.LocalSuperuserMap, name, agentapi.Superuser,
		agentapi.LocalSuperuserMap, name, agentapi.MonitorUser)
}

// Agent supervises one PostgreSQL instance.
type Agent struct {
	Config   agentapi.Config
	Options  Options
	Instance *postgres.Instance
	Log      logr.Logger
	// restartMu makes restarts one at a time; the start holds it too.
	restartMu sync.Mutex
	// started: the start (startAsLeaseSays) is done, and the instance may be called ready.
	started atomic.Bool
	// loadedConfig is the configHash the server last loaded (started or reloaded with).
	loadedConfig atomic.Pointer[string]
	// Leases reads and renews the cluster's primary Lease (fencing.go).
	Leases      LeaseStore
	keeperOnce  sync.Once
	leaseKeeper *LeaseKeeper
	// stateMu guards the fencing state: the fence, when a standby last replied, the last rejoin.
	stateMu     sync.Mutex
	fence       *fence
	peerSeenAt  time.Time
	peerReplies map[string]string
	rejoined    *agentapi.Rejoin
	// detached is a standby's hold off streaming on the operator's order (detach.go).
	detached *detachment
	// latest are the credentials last read (credsMu: the API reads the token); applied, those
	// PostgreSQL was last given (the supervisor loop only).
	credsMu sync.Mutex
	latest  agentapi.Credentials
	applied *agentapi.Credentials
	// appliedConnInfo is the standby's connection string to the primary as last applied.
	appliedConnInfo string
	// tls is the instance's certificates as last loaded (tls.go).
	tls tlsState
	// repository is the cluster's pgBackRest repository as the agent last saw it (repository.go).
	repository repositoryState
	// upgradeCheck is the latest check of a major upgrade (upgrade.go).
	upgradeCheck upgradeCheck
	// upgradeRun is this instance's major upgrade (upgrade_run.go).
	upgradeRun upgradeRun
	// upgradeRebuild is this instance's rebuild on the new major (upgrade_rebuild.go).
	upgradeRebuild upgradeRebuild
	// customQueries feed the metrics exporter the user's queries, once it serves (metrics.go).
	customQueries atomic.Pointer[customQueries]
	// postgresLog turns PostgreSQL's log into the agent's and counts notable records (logs.go).
	postgresLog *postgresLog
	// responsive is whether PostgreSQL answers the agent's local queries (responsive.go).
	responsive responsiveness
	// managed are the declared roles the primary keeps (managed_roles.go).
	managed managedRoles
	// stopRenewing: a fence is under way; the Lease is left to lapse.
	stopRenewing atomic.Bool
	// renewing: a renewal of the Lease runs (leaseguard.go).
	renewing atomic.Bool
}

// Run bootstraps the instance if its data directory is empty, serves the API, starts
// PostgreSQL in the role the primary Lease allows (fencing.go), and supervises it until ctx ends;
// then it shuts PostgreSQL down in order and, on the primary, releases the Lease. It returns
// an error when a standby's PostgreSQL stops on its own, so that the container restarts; a
// primary's is fenced instead, for the operator to fail over.
func (a *Agent) Run(ctx context.Context) error {
	if err := a.collectPostgresLog(); err != nil {
		return err
	}
	if _, err := a.readCredentials(); err != nil {
		return err
	}
	if _, err := a.syncTLS(); err != nil {
		return err
	}
	lease, err := a.readLease(ctx)
	if err != nil {
		return err
	}
	// Before the data directory is judged empty: an upgrade stopped between its two renames
	// left none in place.
	finishedUpgrade, err := a.recoverMajorUpgrade()
	if err != nil {
		return err
	}
	if err := a.recoverRebuild(); err != nil {
		return err
	}
	if !a.Instance.Initialised() || a.restoring() {
		if err := a.bootstrap(ctx, lease); err != nil {
			return fmt.Errorf("bootstrap: %w", err)
		}
	}
	if err := a.runDataDirectoryMajor(ctx); err != nil {
		return err
	}
	if err := a.Instance.CheckMajor(ctx); err != nil {
		return err
	}
	address := cmp.Or(a.Options.ListenAddress, a.Config.ListenAddress())
	server := &http.Server{Handler: NewHandler(a, a.token), ReadHeaderTimeout: 5 * time.Second,
		ErrorLog: a.serverErrorLog("api")}
	listener, err := net.Listen("tcp", address)
	if err != nil {
		return fmt.Errorf("listen %s: %w", address, err)
	}
	if a.Config.TLSDir != "" {
		server.Handler, server.TLSConfig = apiClientsOnly(server.Handler, a.Config.ReplicationUser), a.serverTLS()
		listener = tls.NewListener(listener, server.TLSConfig)
	}
	go func() { _ = server.Serve(listener) }()
	defer func() { _ = server.Close() }()
	metricsAddress, stopMetrics, err := a.serveMetrics()
	if err != nil {
		return err
	}
	defer stopMetrics()
	if _, err := writeRepositoryConfigs(a.Config, a.Instance.RunAs); err != nil {
		a.Log.Error(err, "pgbackrest configuration")
	}
	go a.keepRepository(ctx)
	// Role changes wait for the start (they answer "in progress" meanwhile), and the instance is
	// not ready before it is done: a demotion that came once the server accepted connections,
	// while the start still set up its roles, stopped the server under it and ended the agent.
	a.restartMu.Lock()
	err = a.startAsLeaseSays(ctx, lease)
	a.restartMu.Unlock()
	if err != nil {
		_ = a.Instance.Stop(a.Options.ShutdownGrace)
		return err
	}
	a.started.Store(true)
	a.resolveFence(ctx) // started fenced: the Lease may allow a start already
	if finishedUpgrade && a.Instance.Running() && a.isPrimary() {
		a.catchUpRecoveredUpgrade(ctx)
	}
	a.Log.Info("agent started", "primary", a.Instance.Running() && a.isPrimary(), "fenced", a.fenced() != nil,
		"api", listener.Addr().String(), "metrics", metricsAddress)
	go a.guardLease(ctx)
	return a.supervise(ctx)
}

// supervise reacts to PostgreSQL exiting, and every tick keeps the Lease, resolves a fence and
// applies configuration and credential changes.
func (a *Agent) supervise(ctx context.Context) error {
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	lastConfig, lastConfigCheck := a.configHash(), time.Now()
	a.managed.ctx.Store(&ctx)
	a.loadedConfig.Store(&lastConfig)
	for {
		var exited <-chan struct{}
		if a.fenced() == nil {
			exited = a.Instance.Exited() // nil before the first start: never ready
		}
		select {
		case <-ctx.Done():
			return a.shutdown()
		case <-exited:
			// A restart, role change or fence holds restartMu until it is done.
			a.restartMu.Lock()
			running, wasPrimary := a.Instance.Running(), !a.Instance.IsStandby()
			a.restartMu.Unlock()
			if running || a.fenced() != nil {
				continue
			}
			if !wasPrimary {
				return fmt.Errorf("postgres exited: %v", a.Instance.ExitErr())
			}
			// Not restarted here: the operator may be failing over already.
			a.logFenceErr(a.fenceNow(fmt.Sprintf("postgres exited: %v", a.Instance.ExitErr()), a.keeper().Current().Transitions))
		case now := <-ticker.C:
			a.primaryTick(ctx)
			a.resolveFence(ctx)
			a.endExpiredHold(ctx, now)
			if now.Sub(lastConfigCheck) < a.Options.ConfigInterval || !a.Instance.Running() {
				continue
			}
			lastConfigCheck = now
			a.syncCredentials(ctx)
			a.checkCatalogDrift(now)
			a.reloadRenewedCertificates()
			if hash := a.configHash(); hash != lastConfig {
				a.Log.Info("configuration changed, reloading")
				if err := a.Instance.Reload(); err != nil {
					a.Log.Error(err, "reload")
					continue
				}
				lastConfig = hash
				a.loadedConfig.Store(&hash)
			}
		}
	}
}

// shutdown stops PostgreSQL (fast: sessions end, standbys receive every WAL record) and, on
// the primary, gives the Lease up so that a standby is promoted without waiting for it to
// expire.
func (a *Agent) shutdown() error {
	a.restartMu.Lock()
	defer a.restartMu.Unlock()
	wasPrimary := a.fenced() == nil && a.Instance.Running() && a.isPrimary()
	a.Log.Info("stopping postgres", "grace", a.Options.ShutdownGrace)
	err := a.Instance.Stop(a.Options.ShutdownGrace)
	if wasPrimary && err == nil {
		a.releaseLease()
	}
	return err
}

// bootstrap creates the data directory: initdb on the initial primary of a new cluster (the
// Lease names it and was never granted since), a clone of the primary everywhere else (retried
// until the primary answers). An initial primary whose volume was lost after the cluster had
// data clones too, instead of starting an empty database.
func (a *Agent) bootstrap(ctx context.Context, l Lease) error {
	if a.Config.PodName == a.Config.InitialPrimary && l.Holder == a.Config.PodName && l.Transitions == 0 {
		if b, err := agentapi.ReadBackupConfig(a.Config.ConfigDir); err != nil || b.Recovery != nil {
			if err != nil {
				return err
			}
			return a.recover(ctx, b.Recovery)
		}
		a.Log.Info("initialising a new cluster")
		return a.Instance.InitDB(ctx, a.credentials().SuperuserPassword)
	}
	conninfo, password := a.cloneSource(a.credentials())
	for attempt := 1; ; attempt++ {
		a.Log.Info("cloning the primary", "host", a.Config.PrimaryHost, "attempt", attempt)
		err := a.Instance.Clone(ctx, conninfo, password, agentapi.SlotName(a.Config.PodName))
		if err == nil {
			return nil
		}
		a.Log.Error(err, "clone failed; retrying")
		// pg_basebackup leaves a partial directory behind; it must be empty to try again.
		if rmErr := removeContents(a.Instance.DataDir); rmErr != nil {
			return errors.Join(err, rmErr)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(time.Duration(attempt)*a.Options.CloneRetry, 30*time.Second)):
		}
	}
}

func (a *Agent) ensureRoles(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	conn, err := a.connectOnceAccepting(ctx)
	if err != nil {
		return err
	}
	c := a.credentials()
	err = postgres.EnsureRoles(ctx, conn, a.roles(c))
	_ = conn.Close(ctx)
	if err == nil {
		a.applied = &c
	}
	return err
}

// connectOnceAccepting waits for the server just started to accept connections, and returns
// one; it gives up when the server exits or ctx ends.
func (a *Agent) connectOnceAccepting(ctx context.Context) (*pgx.Conn, error) {
	for {
		conn, err := a.connect(ctx)
		if err == nil {
			return conn, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("postgres did not accept connections: %w", err)
		case <-a.Instance.Exited():
			return nil, fmt.Errorf("postgres exited during start: %v", a.Instance.ExitErr())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// isPrimary: a standby has standby.signal in its data directory.
func (a *Agent) isPrimary() bool { return !a.Instance.IsStandby() }

// connect opens a superuser connection to the local server, over its socket.
func (a *Agent) connect(ctx context.Context) (*pgx.Conn, error) { return a.connectTo(ctx, "postgres") }

// connectTo is connect to database (a postgres.Connector).
func (a *Agent) connectTo(ctx context.Context, database string) (*pgx.Conn, error) {
	return postgres.ConnectLocal(ctx, a.Instance.SocketDir, a.Instance.Port, agentapi.Superuser, database)
}

// configHash identifies the configuration files as they are now.
func (a *Agent) configHash() string {
	conf, _ := os.ReadFile(a.Config.PostgresqlConfPath())
	hba, _ := os.ReadFile(a.Config.HBAConfPath())
	return agentapi.ConfigHash(conf, hba)
}

// Alive, Ready and Status answer the API (Checks). A fenced instance is alive: its
// PostgreSQL is down on purpose, and a container restart would change nothing.
func (a *Agent) Alive() bool { return a.Instance.Running() || a.fenced() != nil }

func (a *Agent) Ready(ctx context.Context) error {
	if !a.started.Load() {
		return errors.New("the agent is starting")
	}
	conn, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	return conn.Ping(ctx)
}

// Status is the instance as the operator sees it, with the certificates the agent loaded
// whatever the server's state.
func (a *Agent) Status(ctx context.Context) (*agentapi.Status, error) {
	status, err := a.serverStatus(ctx)
	if status != nil {
		status.CertificatesDigest = a.tls.loadedDigest()
	}
	return status, err
}

func (a *Agent) serverStatus(ctx context.Context) (*agentapi.Status, error) {
	if status := a.fencedStatus(); status != nil {
		return status, nil
	}
	if status := a.unresponsiveStatus(); status != nil {
		return status, nil
	}
	conn, err := a.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	status, err := postgres.QueryStatus(ctx, conn)
	if err != nil {
		return nil, err
	}
	a.responsive.answered()
	status.Rejoined, status.LeaseTransitions = a.lastRejoin(), a.keeper().Current().Transitions
	if loaded := a.loadedConfig.Load(); loaded != nil {
		status.ConfigHash = *loaded
	}
	if status.Role == agentapi.RolePrimary {
		if status.Archive, err = a.archiveStatus(ctx, conn); err != nil {
			return nil, err
		}
	}
	if queries := a.customQueries.Load(); queries != nil {
		status.Metrics = queries.status()
	}
	status.LogNotices = a.logNotices()
	status.Catalog = a.catalogState()
	if d := a.detachment(); d != nil && status.Role == agentapi.RoleReplica {
		d.report(status, time.Now())
	}
	return status, nil
}

// StartRestart restarts PostgreSQL in the background so that settings pending a restart take
// effect; false when a restart is already running.
func (a *Agent) StartRestart() bool {
	if !a.restartMu.TryLock() {
		return false
	}
	go func() {
		defer a.restartMu.Unlock()
		a.Log.Info("restarting postgres on request")
		if err := a.Instance.Restart(a.Options.ShutdownGrace); err != nil {
			// The supervisor loop sees no running postmaster and exits: the container restarts.
			a.Log.Error(err, "restart")
		}
	}()
	return true
}

func (a *Agent) DropInactiveSlots(ctx context.Context, names []string) ([]string, error) {
	conn, err := a.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	dropped, err := postgres.DropInactiveSlots(ctx, conn, names)
	if len(dropped) > 0 {
		a.Log.Info("dropped replication slots", "slots", dropped)
	}
	return dropped, err
}

func removeContents(dir string) error {
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}
