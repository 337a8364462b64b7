package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	"github.com/pgpilot/pgpilot-operator/test/controlplane"
)

// quietPeriod: the operator is done with a phase once it made no request (besides leader
// election) for this long.
const quietPeriod = 5 * time.Second

// run performs every phase and returns the measurements.
func run(ctx context.Context, cfg config, progress func(string)) (*report, error) {
	r := &report{Config: cfg, Machine: fmt.Sprintf("%s/%s, %d CPUs, %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), hostname())}
	dir, err := os.MkdirTemp("", "pgpilot-bench-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	policy, err := writeAuditPolicy(dir)
	if err != nil {
		return nil, err
	}
	auditLog := filepath.Join(dir, "audit.log")

	progress("starting etcd, kube-apiserver (auditing the operator) and kube-controller-manager")
	cp, err := controlplane.StartWith(controlplane.Options{
		CRDDirs: []string{filepath.Join(cfg.RepoRoot, "config", "crd", "bases")},
		APIServerFlags: map[string]string{
			"audit-policy-file": policy, "audit-log-path": auditLog, "audit-log-format": "json",
			"audit-log-mode": "blocking",
		},
	})
	if err != nil {
		return nil, err
	}
	defer func() { _ = cp.Stop() }()
	scheme := clientgoscheme.Scheme
	utilruntime.Must(pgv1.AddToScheme(scheme))
	admin, err := client.New(cp.Config, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	rbac := filepath.Join(cfg.RepoRoot, "config", "rbac")
	kubeconfig, err := cp.UserKubeconfig(ctx, admin, operatorUser, filepath.Join(rbac, "role.yaml"),
		"default", filepath.Join(rbac, "leader_election_role.yaml"))
	if err != nil {
		return nil, err
	}
	op := &operator{binary: filepath.Join(dir, "manager"), kubeconfig: kubeconfig, logPath: filepath.Join(dir, "manager.log"),
		flags: cfg.ManagerFlags}
	progress("building the manager")
	build := exec.CommandContext(ctx, "go", "build", "-o", op.binary, "./cmd")
	build.Dir, build.Stdout, build.Stderr = cfg.RepoRoot, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return nil, fmt.Errorf("build manager: %w", err)
	}
	if err := op.start(ctx); err != nil {
		return nil, withLog(err, op.logPath)
	}
	defer op.stop()

	phases := &phaseRunner{ctx: ctx, cp: cp, dir: dir, admin: admin, auditLog: auditLog, op: op, cfg: cfg, progress: progress}
	for _, phase := range []func(*report) error{phases.converge, phases.idle, phases.churn, phases.restart, phases.cache} {
		if err := phase(r); err != nil {
			return nil, withLog(err, op.logPath)
		}
	}
	return r, nil
}

func withLog(err error, logPath string) error {
	data, _ := os.ReadFile(logPath)
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	return fmt.Errorf("%w\n--- manager log (tail) ---\n%s", err, data)
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}
