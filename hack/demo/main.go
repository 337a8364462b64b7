// Command demo runs pgpilot against a local control plane built from source: etcd,
// kube-apiserver and kube-controller-manager (test/controlplane), the operator binary with the
// RBAC it ships, and the sample PostgresCluster. There is no kubelet yet, so instance pods stay
// Pending and the cluster waits at bootstrap; the local-cluster work makes the pods real.
//
// Usage (from the repository root, through `make demo-envtest`): go run ./hack/demo [-exit]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgversion "github.com/pgpilot/pgpilot-operator/internal/version"
	"github.com/pgpilot/pgpilot-operator/test/controlplane"
)

const operatorUser = "pgpilot-operator"

func main() {
	exitAfter := flag.Bool("exit", false, "stop everything after printing, instead of waiting for Ctrl-C")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *exitAfter); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, exitAfter bool) error {
	step("starting etcd, kube-apiserver and kube-controller-manager (installing the CRDs)")
	cp, err := controlplane.Start(filepath.Join("config", "crd", "bases"))
	if err != nil {
		return err
	}
	defer func() { step("stopping the control plane"); _ = cp.Stop() }()

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(pgv1.AddToScheme(scheme))
	admin, err := client.New(cp.Config, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	adminKubeconfig, err := cp.AdminKubeconfig("demo-admin")
	if err != nil {
		return err
	}

	step("granting the operator's identity exactly the ClusterRole in config/rbac/role.yaml")
	operatorKubeconfig, err := cp.UserKubeconfig(ctx, admin, operatorUser,
		filepath.Join("config", "rbac", "role.yaml"), "default")
	if err != nil {
		return err
	}

	step("building and starting the operator (bin/manager)")
	operator, err := startOperator(ctx, operatorKubeconfig, filepath.Join(cp.Dir, "operator.log"))
	if err != nil {
		return err
	}
	defer func() { _ = operator.Process.Signal(syscall.SIGTERM); _ = operator.Wait() }()

	step("applying config/samples/postgres_v1alpha1_postgrescluster.yaml to namespace default")
	cluster, err := applySample(ctx, admin)
	if err != nil {
		return err
	}
	if err := waitForPhase(ctx, admin, cluster, pgv1.PhaseBootstrapping); err != nil {
		return fmt.Errorf("%w (operator log: %s)", err, filepath.Join(cp.Dir, "operator.log"))
	}

	kubectl := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl")
	show := func(args ...string) {
		fmt.Printf("\n$ kubectl %s\n", strings.Join(args, " "))
		cmd := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", adminKubeconfig}, args...)...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		_ = cmd.Run()
	}
	show("get", "postgresclusters")
	show("get", "statefulsets,services,poddisruptionbudgets,configmaps,secrets,pods", "-l", "postgres.pgpilot.io/cluster="+cluster.Name)
	show("get", "postgrescluster", cluster.Name, "-o", "jsonpath={range .status.conditions[*]}{.type}={.status} ({.reason}): {.message}{\"\\n\"}{end}")
	show("events", "--for", "postgrescluster/"+cluster.Name)

	fmt.Printf("\nThe instance pods stay Pending: this control plane has no kubelet yet.\n")
	if exitAfter {
		return nil
	}
	fmt.Printf("\nThe control plane is up. In another shell:\n  export KUBECONFIG=%s\n  %s get pgc\n"+
		"  %s explain postgrescluster.spec\nOperator log: %s\nPress Ctrl-C to stop.\n",
		adminKubeconfig, kubectl, kubectl, filepath.Join(cp.Dir, "operator.log"))
	<-ctx.Done()
	return nil
}

func step(msg string) { fmt.Printf("==> %s\n", msg) }

func startOperator(ctx context.Context, kubeconfig, logPath string) (*exec.Cmd, error) {
	build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join("bin", "manager"), "./cmd")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		return nil, fmt.Errorf("build manager: %w", err)
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join("bin", "manager"), "--metrics-bind-address=0", "--health-probe-bind-address=0")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "RELATED_IMAGE_POSTGRES_17=ghcr.io/pgpilot/postgresql:17",
		"RELATED_IMAGE_AGENT=ghcr.io/pgpilot/pgpilot-operator:v"+pgversion.Version)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd, cmd.Start()
}

func applySample(ctx context.Context, admin client.Client) (*pgv1.PostgresCluster, error) {
	data, err := os.ReadFile(filepath.Join("config", "samples", "postgres_v1alpha1_postgrescluster.yaml"))
	if err != nil {
		return nil, err
	}
	cluster := &pgv1.PostgresCluster{}
	if err := yaml.UnmarshalStrict(data, cluster); err != nil {
		return nil, fmt.Errorf("decode sample: %w", err)
	}
	cluster.Namespace = "default"
	return cluster, admin.Create(ctx, cluster)
}

func waitForPhase(ctx context.Context, c client.Client, cluster *pgv1.PostgresCluster, phase pgv1.Phase) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		if err := c.Get(ctx, client.ObjectKeyFromObject(cluster), cluster); err == nil && cluster.Status.Phase == phase {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.New("timed out waiting for the cluster to reach phase " + string(phase))
		case <-time.After(500 * time.Millisecond):
		}
	}
}
