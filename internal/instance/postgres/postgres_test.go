package postgres_test

import (
	"context"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
	"github.com/pgpilot/pgpilot-operator/test/pgtest"
)

// These tests run real PostgreSQL servers from the machine's packages (postgresql-15), on
// loopback only, configured with the very files the operator generates.

const (
	superuserPassword   = "super'secret"
	replicationPassword = "repl-secret"
	appPassword         = "app-secret"
)

func TestPrimaryStandbyReplicationReloadAndStatus(t *testing.T) {
	ctx := context.Background()
	primary := pgtest.NewInstance(t, "primary")
	if err := primary.InitDB(ctx, superuserPassword); err != nil {
		t.Fatal(err)
	}
	if !primary.Initialised() {
		t.Fatal("Initialised() is false after initdb")
	}
	if err := primary.Start(); err != nil {
		t.Fatal(err)
	}
	admin := pgtest.Connect(t, primary, "postgres", superuserPassword, "postgres")
	roles := postgres.Roles{Superuser: agentapi.Superuser, SuperuserPassword: superuserPassword,
		ReplicationUser: agentapi.DefaultReplicationUser, ReplicationPassword: replicationPassword,
		AppOwner: "app", AppPassword: appPassword, AppDatabase: "app"}
	if err := postgres.EnsureRoles(ctx, admin, roles); err != nil {
		t.Fatal(err)
	}
	if err := postgres.EnsureRoles(ctx, admin, roles); err != nil {
		t.Fatalf("EnsureRoles must be idempotent: %v", err)
	}
	var checksums string
	if err := admin.QueryRow(ctx, "SHOW data_checksums").Scan(&checksums); err != nil || checksums != "on" {
		t.Fatalf("data_checksums = %q (%v), want on", checksums, err)
	}

	standby := pgtest.NewInstance(t, "standby")
	// The password apart, as the agent gives it: pg_basebackup takes it from its environment.
	conninfo := fmt.Sprintf("host=127.0.0.1 port=%d user=%s application_name=pgtest-1",
		primary.Port, agentapi.DefaultReplicationUser)
	if err := standby.Clone(ctx, conninfo, replicationPassword, "pgtest_1"); err != nil {
		t.Fatal(err)
	}
	if err := standby.Start(); err != nil {
		t.Fatal(err)
	}

	app := pgtest.Connect(t, primary, "app", appPassword, "app")
	if _, err := app.Exec(ctx, "CREATE TABLE greetings (msg text); INSERT INTO greetings VALUES ('hello from the primary')"); err != nil {
		t.Fatal(err)
	}
	standbyApp := pgtest.Connect(t, standby, "app", appPassword, "app")
	pgtest.Eventually(t, "row replicated to the standby", func() error {
		var msg string
		if err := standbyApp.QueryRow(ctx, "SELECT msg FROM greetings").Scan(&msg); err != nil {
			return err
		}
		if msg != "hello from the primary" {
			return fmt.Errorf("msg = %q", msg)
		}
		return nil
	})
	if _, err := standbyApp.Exec(ctx, "INSERT INTO greetings VALUES ('x')"); err == nil {
		t.Fatal("a write on the standby succeeded; it must be read-only")
	}

	standbyAdmin := pgtest.Connect(t, standby, "postgres", superuserPassword, "postgres")
	pgtest.Eventually(t, "standby caught up and primary reports it streaming", func() error {
		p, err := postgres.QueryStatus(ctx, admin)
		if err != nil {
			return err
		}
		s, err := postgres.QueryStatus(ctx, standbyAdmin)
		if err != nil {
			return err
		}
		switch {
		case p.Role != agentapi.RolePrimary || s.Role != agentapi.RoleReplica:
			return fmt.Errorf("roles %s/%s", p.Role, s.Role)
		case p.Timeline != 1 || s.Timeline != 1:
			return fmt.Errorf("timelines %d/%d", p.Timeline, s.Timeline)
		case !s.Streaming:
			return fmt.Errorf("standby not streaming")
		case len(p.Replicas) != 1 || p.Replicas[0].ApplicationName != "pgtest-1" || p.Replicas[0].State != "streaming" ||
			p.Replicas[0].SyncState != "async": // no synchronous_standby_names here
			return fmt.Errorf("primary sees replicas %+v", p.Replicas)
		case len(p.Slots) != 1 || p.Slots[0] != (agentapi.SlotStatus{Name: "pgtest_1", Active: true}):
			return fmt.Errorf("slots %+v", p.Slots)
		case p.Replicas[0].LagBytes != 0 || s.ReplayLSN != p.CurrentLSN || p.Replicas[0].ReplayLSN != p.CurrentLSN:
			return fmt.Errorf("lag %d bytes, standby replay %s, primary current %s", p.Replicas[0].LagBytes, s.ReplayLSN, p.CurrentLSN)
		}
		return nil
	})
	var slot string
	if err := admin.QueryRow(ctx, "SELECT slot_name FROM pg_replication_slots WHERE active").Scan(&slot); err != nil || slot != "pgtest_1" {
		t.Fatalf("active replication slot = %q (%v), want pgtest_1", slot, err)
	}

	// A parameter that reloads: applied without a restart, nothing pending.
	pgtest.WriteConfig(t, primary, pgtest.Cluster(map[string]string{"work_mem": "12MB"}))
	if err := primary.Reload(); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, "work_mem reloaded", func() error {
		var v string
		if err := admin.QueryRow(ctx, "SHOW work_mem").Scan(&v); err != nil || v != "12MB" {
			return fmt.Errorf("work_mem = %q (%v)", v, err)
		}
		return nil
	})
	// A parameter that needs a restart is reported as pending.
	pgtest.WriteConfig(t, primary, pgtest.Cluster(map[string]string{"work_mem": "12MB", "shared_buffers": "64MB"}))
	if err := primary.Reload(); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, "shared_buffers pending restart", func() error {
		s, err := postgres.QueryStatus(ctx, admin)
		if err != nil {
			return err
		}
		if !slices.Contains(s.PendingRestart, "shared_buffers") {
			return fmt.Errorf("pending restart = %v", s.PendingRestart)
		}
		return nil
	})

	if dropped, err := postgres.DropInactiveSlots(ctx, admin, []string{"pgtest_1"}); err != nil || len(dropped) != 0 {
		t.Fatalf("dropped %v (%v): a slot in use must be kept", dropped, err)
	}
	if err := standby.Stop(10 * time.Second); err != nil {
		t.Fatalf("fast shutdown of the standby: %v", err)
	}
	// The standby is gone for good (scaled down): its slot would keep WAL forever.
	pgtest.Eventually(t, "the stopped standby's slot dropped", func() error {
		dropped, err := postgres.DropInactiveSlots(ctx, admin, []string{"pgtest_1", "no_such_slot"})
		if err != nil || !slices.Equal(dropped, []string{"pgtest_1"}) {
			return fmt.Errorf("dropped %v (%v)", dropped, err)
		}
		return nil
	})
	if s, err := postgres.QueryStatus(ctx, admin); err != nil || len(s.Slots) != 0 {
		t.Fatalf("slots after dropping: %+v (%v)", s, err)
	}
	if err := primary.Stop(10 * time.Second); err != nil {
		t.Fatalf("fast shutdown of the primary: %v", err)
	}
}

// After a container restart, postmaster.pid names a PID that, in the new PID namespace, may
// belong to another process of the same user: the server starts anyway.
func TestStartsOverAStaleLockFileOfAnotherProcess(t *testing.T) {
	ctx := context.Background()
	inst := pgtest.NewInstance(t, "stale")
	if err := inst.InitDB(ctx, superuserPassword); err != nil {
		t.Fatal(err)
	}
	other := osexec.Command("sleep", "120") // alive, same user as the server, not a postgres
	other.SysProcAttr = &syscall.SysProcAttr{Credential: pgtest.RunAs(t)}
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
	lock := fmt.Sprintf("%d\n%s\n", other.Process.Pid, inst.DataDir)
	lockFile := filepath.Join(inst.DataDir, "postmaster.pid")
	if err := os.WriteFile(lockFile, []byte(lock), 0o600); err != nil {
		t.Fatal(err)
	}
	if cred := pgtest.RunAs(t); cred != nil {
		if err := os.Chown(lockFile, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	if err := inst.Start(); err != nil {
		t.Fatal(err)
	}
	conn := pgtest.Connect(t, inst, agentapi.Superuser, superuserPassword, "postgres")
	var one int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("the server did not start over the stale lock file: %v", err)
	}
}
