// Command agent is pgpilot's instance agent, the entrypoint of every PostgreSQL container. An
// init container copies it from the operator image, so any image with the PostgreSQL server
// binaries works. It bootstraps the data directory (initdb on the initial primary, a clone
// everywhere else), supervises the postmaster, applies configuration changes and serves the
// probes and the operator's status API. Settings come from the environment the StatefulSet sets.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/pgpilot/pgpilot-operator/internal/instance/agent"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
)

func main() {
	log := zap.New(zap.UseDevMode(false)).WithName("agent")
	// `agent install DEST`: the init container copies the agent out of the (distroless)
	// operator image, which has no cp.
	if len(os.Args) == 3 && os.Args[1] == "install" {
		if err := install(os.Args[2]); err != nil {
			log.Error(err, "install")
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	a, err := fromEnvironment()
	if err == nil {
		a.Log = log
		err = a.Run(ctx)
	}
	if err != nil {
		log.Error(err, "agent stopped")
		os.Exit(1)
	}
}

// fromEnvironment reads the agent's settings; secrets arrive as environment variables from
// Secret references and are never logged.
func fromEnvironment() (*agent.Agent, error) {
	var missing []string
	env := func(name, fallback string) string {
		if v := os.Getenv(name); v != "" {
			return v
		}
		if fallback == "" {
			missing = append(missing, name)
		}
		return fallback
	}
	configDir := env("PGPILOT_CONFIG_DIR", "/etc/pgpilot")
	dataDir := env("PGDATA", "")
	port := 5432
	if p := os.Getenv("PGPILOT_PORT"); p != "" {
		var err error
		if port, err = strconv.Atoi(p); err != nil {
			return nil, fmt.Errorf("PGPILOT_PORT: %w", err)
		}
	}
	cfg := agent.Config{
		PodName:        env("PGPILOT_POD_NAME", ""),
		InitialPrimary: env("PGPILOT_INITIAL_PRIMARY", ""),
		PrimaryHost:    env("PGPILOT_PRIMARY_HOST", ""),
		PrimaryPort:    port,
		ConfigFiles:    []string{filepath.Join(configDir, "postgresql.conf"), filepath.Join(configDir, "pg_hba.conf")},
		ListenAddress:  env("PGPILOT_AGENT_ADDRESS", ":8000"),
		Token:          env("PGPILOT_AGENT_TOKEN", ""),
		Superuser:      "postgres",
		SuperuserPass:  env("PGPILOT_SUPERUSER_PASSWORD", ""),
		Roles: postgres.Roles{
			ReplicationUser:     env("PGPILOT_REPLICATION_USER", "streaming_replica"),
			ReplicationPassword: env("PGPILOT_REPLICATION_PASSWORD", ""),
			AppOwner:            env("PGPILOT_APP_USER", ""),
			AppPassword:         env("PGPILOT_APP_PASSWORD", ""),
			AppDatabase:         env("PGPILOT_APP_DATABASE", ""),
		},
		ShutdownGrace:  50 * time.Second,
		ConfigInterval: 5 * time.Second,
		CloneRetry:     2 * time.Second,
	}
	socketDir := env("PGPILOT_SOCKET_DIR", "/var/run/postgresql")
	if len(missing) > 0 {
		return nil, fmt.Errorf("missing environment: %s", strings.Join(missing, ", "))
	}
	bin, err := findBinDir()
	if err != nil {
		return nil, err
	}
	return &agent.Agent{Config: cfg, Instance: &postgres.Instance{
		BinDir:     bin,
		DataDir:    dataDir,
		ConfigFile: cfg.ConfigFiles[0],
		Settings: map[string]string{
			"data_directory": dataDir,
			"hba_file":       cfg.ConfigFiles[1],
		},
		Port:      port,
		SocketDir: socketDir,
	}}, nil
}

// findBinDir locates the PostgreSQL server binaries: PGPILOT_PG_BINDIR, then postgres on
// PATH (the official image), then the newest /usr/lib/postgresql/<major>/bin (Debian).
func findBinDir() (string, error) {
	if dir := os.Getenv("PGPILOT_PG_BINDIR"); dir != "" {
		return dir, nil
	}
	if path, err := exec.LookPath("postgres"); err == nil {
		return filepath.Dir(path), nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return majorOf(dirs[i]) > majorOf(dirs[j]) })
	for _, dir := range dirs {
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
			return dir, nil
		}
	}
	return "", errors.New("no PostgreSQL server binaries found (set PGPILOT_PG_BINDIR)")
}

func majorOf(binDir string) int {
	major, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return major
}

// install copies this executable to dest.
func install(dest string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	data, err := os.ReadFile(self)
	if err != nil {
		return err
	}
	tmp := dest + ".tmp"
	if err := os.WriteFile(tmp, data, 0o755); err != nil {
		return err
	}
	return os.Rename(tmp, dest)
}
