package agent

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5"

	"github.com/pgpilot/pgpilot-operator/internal/instance/agentapi"
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
}

// DefaultOptions fit a pod whose terminationGracePeriodSeconds is 60.
func DefaultOptions() Options {
	return Options{ShutdownGrace: 50 * time.Second, ConfigInterval: 5 * time.Second, CloneRetry: 2 * time.Second}
}

// NewInstance is the local PostgreSQL server as the pod's environment describes it. The agent
// alone sets where the data, the pg_hba.conf, the socket and the port are; the operator's
// postgresql.conf leaves them out.
func NewInstance(c agentapi.Config) *postgres.Instance {
	return &postgres.Instance{
		BinDir:     c.BinDir,
		DataDir:    c.DataDir,
		ConfigFile: c.PostgresqlConfPath(),
		Settings: map[string]string{
			"data_directory": c.DataDir,
			"hba_file":       c.HBAConfPath(),
		},
		Port:      c.PostgresPort,
		SocketDir: c.SocketDir,
		IdentMap:  localSuperuserMap(),
	}
}

// localSuperuserMap lets the agent's own OS user log in as the superuser over the local socket
// (pg_hba.conf's first line: peer authentication through the map "pgpilot"), so that the agent
// never depends on a password it may be about to change.
func localSuperuserMap() string {
	name := "postgres"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	return fmt.Sprintf("%s %s %s\n", agentapi.LocalSuperuserMap, name, agentapi.Superuser)
}

// Agent supervises one PostgreSQL instance.
type Agent struct {
	Config   agentapi.Config
	Options  Options
	Instance *postgres.Instance
	Log      logr.Logger
	// restartMu makes restarts one at a time.
	restartMu sync.Mutex
	// latest are the credentials last read (credsMu: the API reads the token); applied, those
	// PostgreSQL was last given (the supervisor loop only).
	credsMu sync.Mutex
	latest  agentapi.Credentials
	applied *agentapi.Credentials
}

// Run bootstraps the instance if its data directory is empty, starts PostgreSQL, serves the
// API and applies configuration changes until ctx ends, then shuts PostgreSQL down in order.
// It returns an error when PostgreSQL stops on its own, so that the container restarts.
func (a *Agent) Run(ctx context.Context) error {
	if _, err := a.readCredentials(); err != nil {
		return err
	}
	if !a.Instance.Initialised() {
		if err := a.bootstrap(ctx); err != nil {
			return fmt.Errorf("bootstrap: %w", err)
		}
	}
	if err := a.Instance.Start(); err != nil {
		return err
	}
	if a.isPrimary() {
		if err := a.ensureRoles(ctx); err != nil {
			_ = a.Instance.Stop(a.Options.ShutdownGrace)
			return err
		}
	}
	address := cmp.Or(a.Options.ListenAddress, a.Config.ListenAddress())
	server := &http.Server{Handler: NewHandler(a, a.token), ReadHeaderTimeout: 5 * time.Second}
	listener, err := net.Listen("tcp", address)
	if err != nil {
		_ = a.Instance.Stop(a.Options.ShutdownGrace)
		return fmt.Errorf("listen %s: %w", address, err)
	}
	go func() { _ = server.Serve(listener) }()
	defer func() { _ = server.Close() }()
	a.Log.Info("postgres started", "primary", a.isPrimary(), "api", listener.Addr().String())

	ticker := time.NewTicker(a.Options.ConfigInterval)
	defer ticker.Stop()
	lastConfig := a.configHash()
	for {
		select {
		case <-ctx.Done():
			a.Log.Info("stopping postgres", "grace", a.Options.ShutdownGrace)
			return a.Instance.Stop(a.Options.ShutdownGrace)
		case <-a.Instance.Exited():
			// A restart the operator asked for holds restartMu until the new postmaster runs.
			a.restartMu.Lock()
			running := a.Instance.Running()
			a.restartMu.Unlock()
			if running {
				continue
			}
			return fmt.Errorf("postgres exited: %v", a.Instance.ExitErr())
		case <-ticker.C:
			a.syncCredentials(ctx)
			if hash := a.configHash(); hash != lastConfig {
				a.Log.Info("configuration changed, reloading")
				if err := a.Instance.Reload(); err != nil {
					a.Log.Error(err, "reload")
					continue
				}
				lastConfig = hash
			}
		}
	}
}

// bootstrap creates the data directory: initdb on the initial primary, a clone of the primary
// everywhere else (retried until the primary answers).
func (a *Agent) bootstrap(ctx context.Context) error {
	if a.Config.PodName == a.Config.InitialPrimary {
		a.Log.Info("initialising a new cluster")
		return a.Instance.InitDB(ctx, a.credentials().SuperuserPassword)
	}
	conninfo := a.primaryConnInfo(a.credentials())
	for attempt := 1; ; attempt++ {
		a.Log.Info("cloning the primary", "host", a.Config.PrimaryHost, "attempt", attempt)
		err := a.Instance.Clone(ctx, conninfo, agentapi.SlotName(a.Config.PodName))
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
	for {
		conn, err := a.connect(ctx)
		if err == nil {
			c := a.credentials()
			err = postgres.EnsureRoles(ctx, conn, a.roles(c))
			_ = conn.Close(ctx)
			if err == nil {
				a.applied = &c
			}
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("postgres did not accept connections: %w", err)
		case <-a.Instance.Exited():
			return fmt.Errorf("postgres exited during start: %v", a.Instance.ExitErr())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// isPrimary: a standby has standby.signal in its data directory.
func (a *Agent) isPrimary() bool { return !a.Instance.IsStandby() }

// connect opens a superuser connection to the local server, over its socket.
func (a *Agent) connect(ctx context.Context) (*pgx.Conn, error) {
	return postgres.ConnectLocal(ctx, a.Instance.SocketDir, a.Instance.Port, agentapi.Superuser, "postgres")
}

func (a *Agent) configHash() [32]byte {
	h := sha256.New()
	for _, f := range []string{a.Config.PostgresqlConfPath(), a.Config.HBAConfPath()} {
		data, _ := os.ReadFile(f)
		h.Write(data)
		h.Write([]byte{0})
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum
}

// Alive, Ready and Status answer the API (Checks).
func (a *Agent) Alive() bool { return a.Instance.Running() }

func (a *Agent) Ready(ctx context.Context) error {
	conn, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	return conn.Ping(ctx)
}

func (a *Agent) Status(ctx context.Context) (*agentapi.Status, error) {
	conn, err := a.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	return postgres.QueryStatus(ctx, conn)
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
