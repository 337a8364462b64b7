// Command bench measures what pgpilot costs the API server and itself: it starts a control plane
// with an audit log of every request the operator makes, runs the manager binary out of cluster
// under its own identity and shipped RBAC, and measures converge, idle, churn and cache bound.
// It prints a table, writes a JSON report and exits non-zero when a budget (budgets.yaml) is
// exceeded. Run it through `make bench` from the repository root.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// config is one benchmark run's size.
type config struct {
	Clusters  int           `json:"clusters"`
	Idle      time.Duration `json:"idle"`
	Unrelated int           `json:"unrelatedPerKind"`
	// CPUProfile, when set, is where the idle phase's CPU profile of the manager is written.
	CPUProfile string `json:"-"`
	// ManagerFlags are extra flags of the manager, e.g. to compare --kube-api-qps settings.
	ManagerFlags []string `json:"managerFlags,omitempty"`
	// RepoRoot holds config/ (CRDs, RBAC) and cmd/ (the manager).
	RepoRoot string `json:"-"`
}

func main() {
	cfg := config{RepoRoot: "."}
	flag.IntVar(&cfg.Clusters, "clusters", 100, "PostgresClusters created at once (up to 1000)")
	flag.DurationVar(&cfg.Idle, "idle", 3*time.Minute, "how long the converged clusters are left alone")
	flag.IntVar(&cfg.Unrelated, "unrelated", 10000, "unrelated Secrets and as many ConfigMaps for the cache-bound phase (0 skips it)")
	flag.StringVar(&cfg.CPUProfile, "cpuprofile", "", "write the manager's CPU profile of the idle phase here (go tool pprof)")
	managerFlags := flag.String("manager-flags", "", "extra flags for the manager, separated by spaces")
	reportPath := flag.String("report", "bench-report.json", "where to write the JSON report")
	budgetsPath := flag.String("budgets", "test/bench/budgets.yaml", "budgets to enforce")
	flag.Parse()
	cfg.ManagerFlags = strings.Fields(*managerFlags)
	if cfg.Clusters < 1 || cfg.Clusters > 1000 {
		fail(fmt.Errorf("-clusters must be 1..1000"))
	}
	limits, err := loadBudgets(*budgetsPath)
	if err != nil {
		fail(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	r, err := run(ctx, cfg, func(msg string) { fmt.Printf("==> %s\n", msg) })
	if err != nil {
		fail(err)
	}
	r.print(os.Stdout)
	data, _ := json.MarshalIndent(r, "", "  ")
	if err := os.WriteFile(*reportPath, data, 0o644); err != nil {
		fail(err)
	}
	fmt.Printf("\nreport written to %s\n", *reportPath)
	if v := limits.violations(r); len(v) > 0 {
		for _, line := range v {
			fmt.Fprintln(os.Stderr, "BUDGET EXCEEDED:", line)
		}
		os.Exit(1)
	}
	fmt.Println("all budgets met")
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(2)
}
