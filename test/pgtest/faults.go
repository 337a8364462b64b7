package pgtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
)

// ServerProcesses are inst's postmaster (from postmaster.pid) and every process PostgreSQL
// lists in pg_stat_activity (backends, walsenders, auxiliary processes), as the superuser sees
// them: what a freeze stops.
func ServerProcesses(t TB, inst *postgres.Instance, superuserPassword string) []int {
	t.Helper()
	pidFile, err := os.ReadFile(filepath.Join(inst.DataDir, "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	postmaster, _ := strconv.Atoi(strings.SplitN(string(pidFile), "\n", 2)[0])
	admin := Connect(t, inst, agentapi.Superuser, superuserPassword, "postgres")
	rows, err := admin.Query(context.Background(), "SELECT pid FROM pg_stat_activity WHERE pid <> pg_backend_pid()")
	if err != nil {
		t.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		t.Fatal(err)
	}
	_ = admin.Close(context.Background())
	processes := make([]int, 0, 1+len(pids))
	processes = append(processes, postmaster)
	for _, pid := range pids {
		processes = append(processes, int(pid))
	}
	return processes
}

// Freeze stops every process of pids (SIGSTOP), as a hung disk or a stuck kernel would, and
// returns how to let them go again; the test's cleanup lets them go in any case.
func Freeze(t TB, pids []int) (thaw func()) {
	t.Helper()
	thaw = func() {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	t.Cleanup(thaw)
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatalf("freeze process %d: %v", pid, err)
		}
	}
	return thaw
}

// Alive: the process exists and is not a zombie.
func Alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	end := strings.LastIndexByte(string(stat), ')')
	fields := strings.Fields(string(stat[end+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}
