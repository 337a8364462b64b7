package postgres

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"

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
		return fmt.Errorf("check: %w", err)
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
func (u *MajorUpgrade) MissingExtensions(ctx context.Context, connect Connector) ([]string, error) {
	out, err := u.newInstance("").output(ctx, "pg_config", "--sharedir")
	if err != nil {
		return nil, err
	}
	extensionDir := filepath.Join(strings.TrimSpace(string(out)), "extension")
	var missing []string
	err = eachDatabase(ctx, connect, func(conn *pgx.Conn, database string) error {
		rows, err := conn.Query(ctx, "SELECT extname FROM pg_extension ORDER BY extname")
		if err != nil {
			return fmt.Errorf("list the extensions of %s: %w", database, err)
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		for _, name := range names {
			if _, err := os.Stat(filepath.Join(extensionDir, name+".control")); err != nil {
				missing = append(missing, fmt.Sprintf("%s in %s", name, database))
			}
		}
		return err
	})
	return missing, err
}

// spaceMargin is room left for the new cluster's WAL and pg_upgrade's logs and dumps.
const spaceMargin = 256 << 20

// CheckSpace makes sure the data directory's volume holds what the mode writes: the new
// catalogs for a link upgrade, a copy of every database for a copy upgrade, each with a margin.
func (u *MajorUpgrade) CheckSpace(ctx context.Context, connect Connector) error {
	var needed int64
	err := eachDatabase(ctx, connect, func(conn *pgx.Conn, database string) error {
		size, err := upgradeWrites(ctx, conn, u.Mode)
		if err != nil {
			return fmt.Errorf("size of %s: %w", database, err)
		}
		needed += size
		return nil
	})
	if err != nil {
		return err
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(filepath.Dir(u.Old.DataDir), &fs); err != nil {
		return fmt.Errorf("free space of the data volume: %w", err)
	}
	if problem := spaceProblem(u.Mode, needed+spaceMargin, int64(fs.Bavail)*fs.Bsize); problem != "" {
		return &UpgradeCheckFailed{Problems: []string{problem}}
	}
	return nil
}

// upgradeWrites is what the upgrade writes for the database conn is connected to: its system catalogs when linking
// (the user's files are linked), all of it when copying.
func upgradeWrites(ctx context.Context, conn *pgx.Conn, mode UpgradeMode) (int64, error) {
	query := `SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname IN ('pg_catalog', 'information_schema') AND c.relkind IN ('r', 'm')`
	if mode == UpgradeCopy {
		query = "SELECT pg_database_size(current_database())"
	}
	var size int64
	err := conn.QueryRow(ctx, query).Scan(&size)
	return size, err
}

// spaceProblem says why free bytes cannot hold what a mode's upgrade writes, "" when they can.
func spaceProblem(mode UpgradeMode, needed, free int64) string {
	if free >= needed {
		return ""
	}
	return fmt.Sprintf("not enough free space for a %s upgrade: it writes about %d MiB, the data volume has %d MiB free",
		mode, needed>>20, free>>20)
}

// CheckAll runs every check against the old cluster as it runs (a hot standby): pg_upgrade's,
// the extensions, the rehearsal of the schema's restore and the space, and returns every
// problem found, none when the upgrade may start. The new cluster is prepared on the way.
func (u *MajorUpgrade) CheckAll(ctx context.Context, connect Connector) ([]string, error) {
	if err := u.Prepare(ctx); err != nil {
		return nil, err
	}
	var problems []string
	collect := func(err error) error {
		var failed *UpgradeCheckFailed
		if errors.As(err, &failed) {
			problems = append(problems, failed.Problems...)
			return nil
		}
		return err
	}
	if err := collect(u.Check(ctx)); err != nil {
		return nil, err
	}
	missing, err := u.MissingExtensions(ctx, connect)
	if err != nil {
		return nil, err
	}
	for _, extension := range missing {
		problems = append(problems, "extension "+extension+" is not in the new image")
	}
	if err := collect(u.Rehearse(ctx, connect)); err != nil {
		return nil, err
	}
	if err := collect(u.CheckSpace(ctx, connect)); err != nil {
		return nil, err
	}
	return problems, nil
}
