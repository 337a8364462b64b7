// Command agent is pgpilot's instance agent, the entrypoint of every PostgreSQL container. An
// init container copies it from the operator image (`agent install`), so any image with the
// PostgreSQL server binaries works. Run without a subcommand (as the pod does) or as
// `agent run`, it bootstraps the data directory, supervises the postmaster, applies
// configuration changes and serves the probes and the operator's API. Its settings come from
// the environment the StatefulSet sets (agentapi.Config).
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/agent"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
)

func main() {
	// JSON lines on stderr through the standard library: controller-runtime's zap would add
	// megabytes to a binary copied into every pod.
	log := logr.FromSlogHandler(slog.NewJSONHandler(os.Stderr, nil)).WithName("agent")
	if err := newCommand(log).Execute(); err != nil {
		log.Error(err, "agent stopped")
		os.Exit(1)
	}
}

func newCommand(log logr.Logger) *cobra.Command {
	runE := func(cmd *cobra.Command, _ []string) error { return run(cmd.Context(), log) }
	root := &cobra.Command{
		Use:           "agent",
		Short:         "pgpilot's instance agent: runs and reports one PostgreSQL instance (run is the default)",
		Args:          cobra.NoArgs,
		RunE:          runE,
		SilenceUsage:  true,
		SilenceErrors: true,
		// The agent runs in pods; nobody completes its commands in a shell.
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	root.AddCommand(
		&cobra.Command{
			Use:   "run",
			Short: "Bootstrap, supervise and report PostgreSQL, as the pod's environment says",
			Args:  cobra.NoArgs,
			RunE:  runE,
		},
		&cobra.Command{
			Use:   "pgbackrest [--repository=backup|recovery] ARGS...",
			Short: "Run pgBackRest against the cluster's repository with its keys (archive_command, restore_command, inspection)",
			// Everything after --repository is pgBackRest's.
			DisableFlagParsing: true,
			RunE:               func(_ *cobra.Command, args []string) error { return agent.PgBackRestCommand(args) },
		},
		&cobra.Command{
			Use:   "psql [--superuser] [PSQL ARGS...]",
			Short: "Run psql on this instance as the application user (over loopback) or the superuser (over the socket)",
			// Everything after --superuser is psql's.
			DisableFlagParsing: true,
			RunE:               func(_ *cobra.Command, args []string) error { return agent.PsqlCommand(args) },
		},
		&cobra.Command{
			Use:   "carry MAJOR DEST",
			Short: "Copy this image's PostgreSQL MAJOR server and the libraries it links to DEST (a major upgrade's init container, in the old image)",
			Args:  cobra.ExactArgs(2),
			RunE: func(cmd *cobra.Command, args []string) error {
				major, err := strconv.Atoi(args[0])
				if err != nil {
					return fmt.Errorf("carry: major %q: %w", args[0], err)
				}
				_, err = postgres.Carry(cmd.Context(), major, args[1])
				return err
			},
		},
		&cobra.Command{
			Use:   "install DEST",
			Short: "Copy this executable to DEST (the init container: the operator image has no cp)",
			Args:  cobra.ExactArgs(1),
			RunE:  func(_ *cobra.Command, args []string) error { return install(args[0]) },
		},
	)
	return root
}

func run(ctx context.Context, log logr.Logger) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stop()
	cfg, err := agentapi.FromEnvironment(os.LookupEnv)
	if err != nil {
		return err
	}
	if cfg.BinDir == "" {
		if cfg.BinDir, err = findBinDir(); err != nil {
			return err
		}
	}
	log = agent.WithIdentity(log, cfg)
	leases, err := agent.NewKubeLeases(cfg.Namespace, agentapi.LeaseName(cfg.ClusterName))
	if err != nil {
		return fmt.Errorf("primary lease: %w", err)
	}
	a := &agent.Agent{Config: cfg, Options: agent.DefaultOptions(), Instance: agent.NewInstance(cfg), Leases: leases, Log: log}
	return a.Run(ctx)
}

// findBinDir locates the PostgreSQL server binaries when the environment does not say:
// postgres on PATH (the official image), then the newest /usr/lib/postgresql/<major>/bin
// (Debian).
func findBinDir() (string, error) {
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

// install copies this executable to dest, atomically.
func install(dest string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	data, err := os.ReadFile(self)
	if err != nil {
		return fmt.Errorf("install: %w", err)
	}
	tmp := dest + ".tmp"
	if err := os.WriteFile(tmp, data, 0o755); err != nil {
		return fmt.Errorf("install: %w", err)
	}
	return os.Rename(tmp, dest)
}
