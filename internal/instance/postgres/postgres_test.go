package postgres

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"k8s.io/apimachinery/pkg/api/resource"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
)

// These tests run real PostgreSQL servers from the machine's packages (postgresql-15), on
// loopback only, configured with the very files the operator generates.

const (
	superuserPassword   = "super'secret"
	replicationPassword = "repl-secret"
	appPassword         = "app-secret"
)

func binDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("PGPILOT_PG_BINDIR")
	if dir == "" {
		dir = "/usr/lib/postgresql/15/bin"
	}
	if _, err := os.Stat(filepath.Join(dir, "postgres")); err != nil {
		t.Fatalf("PostgreSQL server binaries not found in %s (install postgresql-15 or set PGPILOT_PG_BINDIR): %v", dir, err)
	}
	return dir
}

// runAs is the postgres OS user when the tests run as root, which PostgreSQL refuses.
func runAs(t *testing.T) *syscall.Credential {
	t.Helper()
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		t.Fatalf("running as root needs a postgres user to run the server as: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

func testCluster(parameters map[string]string) *pgv1.PostgresCluster {
	c := &pgv1.PostgresCluster{}
	c.Name = "pgtest"
	c.Spec.Storage.Size = resource.MustParse("1Gi")
	c.Spec.PostgreSQL.Parameters = parameters
	return c
}

// newInstance prepares a data directory and pgpilot's configuration files for one server.
func newInstance(t *testing.T, name string) *Instance {
	t.Helper()
	cred := runAs(t)
	dir, err := os.MkdirTemp("", "pgpilot-"+name+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	socketDir := filepath.Join(dir, "run")
	if err := os.Mkdir(socketDir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dir, socketDir} {
		if cred != nil {
			if err := os.Chown(d, int(cred.Uid), int(cred.Gid)); err != nil {
				t.Fatal(err)
			}
		}
	}
	inst := &Instance{
		BinDir:     binDir(t),
		DataDir:    filepath.Join(dir, "pgdata"),
		ConfigFile: filepath.Join(dir, pgbuilder.PostgresqlConfKey),
		Settings: map[string]string{
			// The operator's file names the pod's paths; the command line wins over it.
			"data_directory":   filepath.Join(dir, "pgdata"),
			"hba_file":         filepath.Join(dir, pgbuilder.PgHBAConfKey),
			"listen_addresses": "127.0.0.1",
		},
		Port:      freePort(t),
		SocketDir: socketDir,
		Output:    testWriter{t, name},
		RunAs:     cred,
	}
	writeConfig(t, inst, testCluster(nil))
	t.Cleanup(func() { _ = inst.Stop(10 * time.Second) })
	return inst
}

// writeConfig renders the operator's configuration files for cluster into the instance.
func writeConfig(t *testing.T, inst *Instance, cluster *pgv1.PostgresCluster) {
	t.Helper()
	files := map[string]string{
		inst.ConfigFile:           pgbuilder.PostgresqlConf(cluster),
		inst.Settings["hba_file"]: pgbuilder.PgHBAConf(cluster),
	}
	for path, content := range files {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func connect(t *testing.T, inst *Instance, user, password, database string) *pgx.Conn {
	t.Helper()
	var conn *pgx.Conn
	deadline := time.Now().Add(60 * time.Second)
	for {
		var err error
		conn, err = Connect(context.Background(), inst.Port, user, password, database)
		if err == nil {
			break
		}
		if time.Now().After(deadline) || !inst.Running() {
			t.Fatalf("connect to %s as %s: %v (running: %v)", inst.DataDir, user, err, inst.Running())
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestPrimaryStandbyReplicationReloadAndStatus(t *testing.T) {
	ctx := context.Background()
	primary := newInstance(t, "primary")
	if err := primary.InitDB(ctx, superuserPassword); err != nil {
		t.Fatal(err)
	}
	if !primary.Initialised() {
		t.Fatal("Initialised() is false after initdb")
	}
	if err := primary.Start(); err != nil {
		t.Fatal(err)
	}
	admin := connect(t, primary, "postgres", superuserPassword, "postgres")
	roles := Roles{ReplicationUser: pgbuilder.ReplicationUser, ReplicationPassword: replicationPassword,
		AppOwner: "app", AppPassword: appPassword, AppDatabase: "app"}
	if err := EnsureRoles(ctx, admin, roles); err != nil {
		t.Fatal(err)
	}
	if err := EnsureRoles(ctx, admin, roles); err != nil {
		t.Fatalf("EnsureRoles must be idempotent: %v", err)
	}
	var checksums string
	if err := admin.QueryRow(ctx, "SHOW data_checksums").Scan(&checksums); err != nil || checksums != "on" {
		t.Fatalf("data_checksums = %q (%v), want on", checksums, err)
	}

	standby := newInstance(t, "standby")
	conninfo := fmt.Sprintf("host=127.0.0.1 port=%d user=%s password=%s application_name=pgtest-1",
		primary.Port, pgbuilder.ReplicationUser, replicationPassword)
	if err := standby.Clone(ctx, conninfo, "pgtest_1"); err != nil {
		t.Fatal(err)
	}
	if err := standby.Start(); err != nil {
		t.Fatal(err)
	}

	app := connect(t, primary, "app", appPassword, "app")
	if _, err := app.Exec(ctx, "CREATE TABLE greetings (msg text); INSERT INTO greetings VALUES ('hello from the primary')"); err != nil {
		t.Fatal(err)
	}
	standbyApp := connect(t, standby, "app", appPassword, "app")
	eventually(t, "row replicated to the standby", func() error {
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

	standbyAdmin := connect(t, standby, "postgres", superuserPassword, "postgres")
	eventually(t, "standby caught up and primary reports it streaming", func() error {
		p, err := QueryStatus(ctx, admin)
		if err != nil {
			return err
		}
		s, err := QueryStatus(ctx, standbyAdmin)
		if err != nil {
			return err
		}
		switch {
		case p.Role != RolePrimary || s.Role != RoleReplica:
			return fmt.Errorf("roles %s/%s", p.Role, s.Role)
		case p.Timeline != 1 || s.Timeline != 1:
			return fmt.Errorf("timelines %d/%d", p.Timeline, s.Timeline)
		case !s.Streaming:
			return fmt.Errorf("standby not streaming")
		case len(p.Replicas) != 1 || p.Replicas[0].ApplicationName != "pgtest-1" || p.Replicas[0].State != "streaming":
			return fmt.Errorf("primary sees replicas %+v", p.Replicas)
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
	writeConfig(t, primary, testCluster(map[string]string{"work_mem": "12MB"}))
	if err := primary.Reload(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "work_mem reloaded", func() error {
		var v string
		if err := admin.QueryRow(ctx, "SHOW work_mem").Scan(&v); err != nil || v != "12MB" {
			return fmt.Errorf("work_mem = %q (%v)", v, err)
		}
		return nil
	})
	// A parameter that needs a restart is reported as pending.
	writeConfig(t, primary, testCluster(map[string]string{"work_mem": "12MB", "shared_buffers": "64MB"}))
	if err := primary.Reload(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "shared_buffers pending restart", func() error {
		s, err := QueryStatus(ctx, admin)
		if err != nil {
			return err
		}
		if !slices.Contains(s.PendingRestart, "shared_buffers") {
			return fmt.Errorf("pending restart = %v", s.PendingRestart)
		}
		return nil
	})

	if err := standby.Stop(10 * time.Second); err != nil {
		t.Fatalf("fast shutdown of the standby: %v", err)
	}
	if err := primary.Stop(10 * time.Second); err != nil {
		t.Fatalf("fast shutdown of the primary: %v", err)
	}
}

// testWriter sends a server's log to the test log, prefixed with its name.
type testWriter struct {
	t    *testing.T
	name string
}

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("[%s] %s", w.name, p)
	return len(p), nil
}
