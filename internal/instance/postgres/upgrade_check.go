package postgres

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// What keeps a cluster from being upgraded is found before any downtime, against the old
// cluster as it runs (a hot standby), and reported as a whole.

// UpgradeCheckFailed lists what keeps the cluster from being upgraded, each problem with what
// pg_upgrade found (the columns, the functions), ready for a condition's message.
type UpgradeCheckFailed struct{ Problems []string }

func (e *UpgradeCheckFailed) Error() string {
	return "the upgrade check failed: " + strings.Join(e.Problems, "; ")
}

// Check runs pg_upgrade --check against the old cluster as it is (a running server included:
// pg_upgrade's live check), after Prepare. Problems come back as *UpgradeCheckFailed; the old
// cluster is never changed.
func (u *MajorUpgrade) Check(ctx context.Context) error {
	out, err := u.pgUpgrade(ctx, "--check")
	if err == nil {
		return nil
	}
	problems := checkProblems(out, u.reportFiles())
	if len(problems) == 0 {
		return fmt.Errorf("pg_upgrade --check: %w", err)
	}
	return &UpgradeCheckFailed{Problems: problems}
}

// reportFiles are the lists pg_upgrade wrote of what it found (tables_using_reg.txt, …), newest
// run's, by name.
func (u *MajorUpgrade) reportFiles() map[string]string {
	runs, _ := filepath.Glob(filepath.Join(u.NextDataDir(), "pg_upgrade_output.d", "*"))
	if len(runs) == 0 {
		return nil
	}
	files, _ := filepath.Glob(filepath.Join(runs[len(runs)-1], "*.txt"))
	reports := map[string]string{}
	for _, f := range files {
		if data, err := os.ReadFile(f); err == nil {
			reports[filepath.Base(f)] = string(data)
		}
	}
	return reports
}

// checkProblems makes one line of each failed check pg_upgrade printed ("Checking for … fatal"
// before 17, "… failed check: Checking for …" since), with the lists it wrote (the objects to
// change) folded in.
func checkProblems(out []byte, reports map[string]string) []string {
	var problems []string
	for _, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		if _, check, ok := strings.Cut(line, "failed check: "); ok {
			problems = append(problems, strings.TrimSpace(check))
		} else if check, ok := strings.CutSuffix(line, "fatal"); ok && check != "" {
			problems = append(problems, strings.TrimSpace(check))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(reports)) {
		listed := strings.Join(strings.Fields(reports[name]), " ")
		problems = append(problems, fmt.Sprintf("%s: %s", strings.TrimSuffix(name, ".txt"), listed))
	}
	return problems
}

var consultLog = regexp.MustCompile(`Consult the last few lines of "([^"]+)"`)

// failureCause is what made pg_upgrade fail: the end of the log it names, else its last line.
func failureCause(out []byte) string {
	m := consultLog.FindSubmatch(out)
	if m == nil {
		return lastLine(out)
	}
	log, err := os.ReadFile(string(m[1]))
	if err != nil {
		return lastLine(out)
	}
	lines := strings.Split(strings.TrimSpace(string(log)), "\n")
	for k := len(lines) - 1; k >= 0; k-- {
		if strings.Contains(lines[k], "error") || strings.Contains(lines[k], "ERROR") {
			return strings.Join(lines[k:min(len(lines), k+3)], " / ")
		}
	}
	return strings.Join(lines[max(0, len(lines)-4):], " / ")
}

// MissingExtensions are the extensions installed in a database of the old cluster (connect
// opens a superuser connection to one) whose control file the new major's installation lacks,
// as "name in database". pg_upgrade's check finds missing libraries only; an extension made of
// SQL alone would fail the upgrade half-way.
func (u *MajorUpgrade) MissingExtensions(ctx context.Context, connect func(ctx context.Context, database string) (*pgx.Conn, error)) ([]string, error) {
	out, err := u.newInstance("").output(ctx, "pg_config", "--sharedir")
	if err != nil {
		return nil, err
	}
	extensionDir := filepath.Join(strings.TrimSpace(string(out)), "extension")
	conn, err := connect(ctx, maintenanceDatabase)
	if err != nil {
		return nil, err
	}
	rows, err := conn.Query(ctx, "SELECT datname FROM pg_database WHERE datallowconn ORDER BY datname")
	var databases []string
	if err == nil {
		databases, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	_ = conn.Close(ctx)
	if err != nil {
		return nil, fmt.Errorf("list databases: %w", err)
	}
	var missing []string
	for _, database := range databases {
		names, err := installedExtensions(ctx, connect, database)
		if err != nil {
			return nil, err
		}
		for _, name := range names {
			if _, err := os.Stat(filepath.Join(extensionDir, name+".control")); err != nil {
				missing = append(missing, fmt.Sprintf("%s in %s", name, database))
			}
		}
	}
	return missing, nil
}

func installedExtensions(ctx context.Context, connect func(ctx context.Context, database string) (*pgx.Conn, error), database string) ([]string, error) {
	conn, err := connect(ctx, database)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", database, err)
	}
	defer func() { _ = conn.Close(ctx) }()
	rows, err := conn.Query(ctx, "SELECT extname FROM pg_extension ORDER BY extname")
	if err != nil {
		return nil, fmt.Errorf("list the extensions of %s: %w", database, err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}
