// Package pgtest runs real PostgreSQL servers for tests: Debian's postgresql-15 (or
// PGPILOT_PG_BINDIR), on loopback only, configured with the very files the operator generates.
package pgtest

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/jackc/pgx/v5"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
	"github.com/pgpilot/pgpilot-operator/internal/instance/agent"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
)

// TB is what the helpers need of a test: *testing.T, or GinkgoT() in a Ginkgo suite.
type TB interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
	Cleanup(func())
}

func BinDir(t TB) string {
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

// Major is the major version of the server binaries the tests run (BinDir).
func Major(t TB) int {
	t.Helper()
	out, err := exec.Command(filepath.Join(BinDir(t), "postgres"), "--version").Output()
	if err != nil {
		t.Fatalf("postgres --version: %v", err)
	}
	major, err := postgres.ParseMajor(string(out))
	if err != nil {
		t.Fatal(err)
	}
	return major
}

// RunAs is the postgres OS user when the tests run as root, which PostgreSQL refuses.
func RunAs(t TB) *syscall.Credential {
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

// FreePort is a loopback port free now, for a server started a moment later. It is taken below
// the kernel's ephemeral range: a port the kernel handed out (":0") is free again once this
// returns, and any outgoing connection of any process may take it before the server binds it
// (CI saw PostgreSQL fail with "Address already in use" that way). Below the range only
// another test's random pick can collide. A port is handed out once per test process: a
// stopped server's port is free, and an agent restarted beside it took it once (its server then
// could not bind it when it started again).
func FreePort(t TB) int {
	t.Helper()
	low := ephemeralLow()
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 100 {
		port := firstTestPort + rand.IntN(low-firstTestPort)
		if handedOut.ports[port] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort(Loopback, strconv.Itoa(port)))
		if err != nil {
			continue
		}
		_ = l.Close()
		handedOut.ports[port] = true
		return port
	}
	t.Fatal("no free loopback port below the ephemeral range")
	return 0
}

// handedOut are the ports FreePort gave in this process.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// firstTestPort is above the well-known and most registered service ports.
const firstTestPort = 10000

// ephemeralLow is the first port of the kernel's ephemeral range (32768 when unreadable).
func ephemeralLow() int {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if fields := strings.Fields(string(data)); len(fields) == 2 {
			if low, err := strconv.Atoi(fields[0]); err == nil && low > firstTestPort+1000 {
				return low
			}
		}
	}
	return 32768
}

func Cluster(parameters map[string]string) *pgv1.PostgresCluster {
	c := &pgv1.PostgresCluster{}
	c.Name = "pgtest"
	c.Spec.Storage.Size = resource.MustParse("1Gi")
	for name, value := range parameters {
		if c.Spec.PostgreSQL.Parameters == nil {
			c.Spec.PostgreSQL.Parameters = map[string]pgv1.ParameterValue{}
		}
		c.Spec.PostgreSQL.Parameters[name] = pgv1.ParameterValue(value)
	}
	return c
}

// NewInstance prepares a data directory and pgpilot's configuration files for one server.
func NewInstance(t TB, name string) *postgres.Instance {
	t.Helper()
	cred := RunAs(t)
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
	inst := agent.NewInstance(agentapi.Config{
		BinDir: BinDir(t), DataDir: filepath.Join(dir, "pgdata"), ConfigDir: dir, SocketDir: socketDir,
		PostgresPort: FreePort(t),
	})
	// Loopback only, whatever the operator's file says.
	inst.Settings["listen_addresses"] = Loopback
	inst.Output, inst.RunAs = logWriter{t, name}, cred
	WriteConfig(t, inst, Cluster(nil))
	t.Cleanup(func() { _ = inst.Stop(10 * time.Second) })
	return inst
}

// WriteConfig renders the operator's configuration files for cluster into the instance, with
// TLS not required (the instances have no certificates unless EnableTLS gives them some).
func WriteConfig(t TB, inst *postgres.Instance, cluster *pgv1.PostgresCluster) {
	t.Helper()
	WriteConfigTLS(t, inst, cluster, agentapi.TLSPolicy{})
}

// WriteConfigTLS renders the configuration files with the given TLS policy.
func WriteConfigTLS(t TB, inst *postgres.Instance, cluster *pgv1.PostgresCluster, policy agentapi.TLSPolicy) {
	t.Helper()
	encoded, _ := json.Marshal(policy)
	files := map[string]string{
		inst.ConfigFile:           pgbuilder.PostgresqlConf(cluster),
		inst.Settings["hba_file"]: pgbuilder.PgHBAConf(cluster, policy),
		filepath.Join(filepath.Dir(inst.ConfigFile), agentapi.TLSPolicyFile): string(encoded),
	}
	for path, content := range files {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func Connect(t TB, inst *postgres.Instance, role, password, database string) *pgx.Conn {
	t.Helper()
	var conn *pgx.Conn
	deadline := time.Now().Add(60 * time.Second)
	for {
		var err error
		conn, err = postgres.Connect(context.Background(), inst.Port, role, password, database)
		if err == nil {
			break
		}
		if time.Now().After(deadline) || !inst.Running() {
			t.Fatalf("connect to %s as %s: %v (running: %v)", inst.DataDir, role, err, inst.Running())
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func Eventually(t TB, what string, check func() error) {
	t.Helper()
	EventuallyWithin(t, what, time.Minute, check)
}

// BringUpWait bounds how long an instance takes to be ready or to stream from its primary: initdb
// and a clone, which on a saturated CI machine (the real-server suites beside the others) took
// over a minute. A wait, not a claim: no test measures its instances' start by it.
const BringUpWait = 3 * time.Minute

// EventuallyWithin is Eventually with its own bound.
func EventuallyWithin(t TB, what string, within time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
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

// logWriter sends a server's log to the test log, prefixed with its name.
type logWriter struct {
	t    TB
	name string
}

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Logf("[%s] %s", w.name, p)
	return len(p), nil
}

// RunningAgent is an instance agent running in this process over a real PostgreSQL server.
type RunningAgent struct {
	// URL of its API, http://127.0.0.1:<port> (https:// with certificates).
	URL string
	// MetricsURL is its metrics endpoint.
	MetricsURL string
	Instance   *postgres.Instance
	// Config is what the agent runs with (its credentials directory, for SetCredentials).
	Config agentapi.Config
	done   chan error
	stop   context.CancelFunc
	once   sync.Once
	err    error
}

// Stop stops the agent (as SIGTERM would) and returns what Run returned.
func (r *RunningAgent) Stop() error {
	r.once.Do(func() {
		r.stop()
		r.err = <-r.done
	})
	return r.err
}

// AgentConfig is what a pod's environment would tell pod's agent over inst (made by
// NewInstance): initialPrimary runs initdb, the others clone from 127.0.0.1:primaryPort. The
// credentials are written where the kubelet would project them (SetCredentials changes them).
func AgentConfig(t TB, inst *postgres.Instance, pod, initialPrimary string, primaryPort int, creds agentapi.Credentials) agentapi.Config {
	t.Helper()
	cfg := agentapi.Config{
		PodName: pod, Namespace: "default", ClusterName: "db", InitialPrimary: initialPrimary, PrimaryHost: Loopback, PostgresPort: primaryPort,
		DataDir: inst.DataDir, ConfigDir: filepath.Dir(inst.ConfigFile), SocketDir: inst.SocketDir,
		BinDir: inst.BinDir, AppDatabase: "app", CredentialsDir: filepath.Join(filepath.Dir(inst.ConfigFile), "credentials"),
	}.WithDefaults()
	if err := os.MkdirAll(cfg.CredentialsDir, 0o700); err != nil {
		t.Fatal(err)
	}
	SetCredentials(t, cfg, creds)
	return cfg
}

// SetCredentials replaces the credential files of cfg's agent, as the kubelet does when a
// Secret changes.
func SetCredentials(t TB, cfg agentapi.Config, creds agentapi.Credentials) {
	t.Helper()
	if err := agentapi.WriteCredentials(cfg.CredentialsDir, creds); err != nil {
		t.Fatal(err)
	}
}

// StartAgent runs an agent for cfg over inst, as the container would, listening on a free
// loopback port and with short intervals. It is stopped when the test ends.
func StartAgent(t TB, cfg agentapi.Config, inst *postgres.Instance, leases agent.LeaseStore, tune ...func(*agent.Options)) *RunningAgent {
	t.Helper()
	options := agent.Options{ListenAddress: fmt.Sprintf("127.0.0.1:%d", FreePort(t)),
		MetricsListenAddress: fmt.Sprintf("127.0.0.1:%d", FreePort(t)), ShutdownGrace: 10 * time.Second,
		ConfigInterval: 200 * time.Millisecond, CloneRetry: 200 * time.Millisecond}
	for _, f := range tune {
		f(&options)
	}
	a := &agent.Agent{Instance: inst, Config: cfg, Options: options, Leases: leases, Log: funcr.New(func(prefix, args string) {
		t.Logf("[agent %s] %s %s", cfg.PodName, prefix, args)
	}, funcr.Options{})}
	ctx, cancel := context.WithCancel(context.Background())
	scheme := "http://"
	if cfg.TLSDir != "" {
		scheme = "https://"
	}
	r := &RunningAgent{URL: scheme + options.ListenAddress, MetricsURL: scheme + options.MetricsListenAddress + "/metrics",
		Instance: inst, Config: cfg, done: make(chan error, 1), stop: cancel}
	go func() { r.done <- a.Run(ctx) }()
	t.Cleanup(func() { _ = r.Stop() })
	return r
}

// ProcessCPU is the user and system CPU time this process has used: a benchmark's own work,
// not the PostgreSQL server's, which runs in processes of its own.
func ProcessCPU(t TB) time.Duration {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		t.Fatal(err)
	}
	return time.Duration(usage.Utime.Nano() + usage.Stime.Nano())
}
