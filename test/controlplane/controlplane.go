// Package controlplane runs a real Kubernetes control plane for pgpilot's tests, demo and
// benchmark: etcd and kube-apiserver through envtest, plus kube-controller-manager as a process
// for what envtest lacks (garbage collection, StatefulSet pods, namespace deletion).
// The binaries come from KUBEBUILDER_ASSETS, which `make envtest` builds from the Go module proxy.
package controlplane

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Controllers kube-controller-manager runs in the test control plane.
const Controllers = "garbagecollector,statefulset,namespace"

// ControlPlane is a running etcd + kube-apiserver + kube-controller-manager.
type ControlPlane struct {
	Env    *envtest.Environment
	Config *rest.Config
	// Dir holds the kubeconfigs and the controller-manager's log.
	Dir string
	kcm *exec.Cmd
}

// Options shape the control plane.
type Options struct {
	// CRDDirs hold CRDs to install once the API server is up.
	CRDDirs []string
	// APIServerFlags are extra kube-apiserver flags, such as an audit policy.
	APIServerFlags map[string]string
}

// Start brings the control plane up with the CRDs found in crdDirs installed.
// It fails, never skips, when the binaries are missing.
func Start(crdDirs ...string) (*ControlPlane, error) {
	return StartWith(Options{CRDDirs: crdDirs})
}

// StartWith brings the control plane up as opts say.
func StartWith(opts Options) (*ControlPlane, error) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		return nil, errors.New("KUBEBUILDER_ASSETS is not set: run the tests through `make test`, which builds the control plane")
	}
	for _, bin := range []string{"etcd", "kube-apiserver", "kube-controller-manager"} {
		if _, err := os.Stat(filepath.Join(assets, bin)); err != nil {
			return nil, fmt.Errorf("control plane binary missing: %w", err)
		}
	}
	dir, err := os.MkdirTemp("", "pgpilot-controlplane-")
	if err != nil {
		return nil, err
	}
	cp := &ControlPlane{Dir: dir, Env: &envtest.Environment{
		CRDDirectoryPaths:     opts.CRDDirs,
		ErrorIfCRDPathMissing: len(opts.CRDDirs) > 0,
		BinaryAssetsDirectory: assets,
	}}
	// envtest's default /24 runs out after ~250 Services; benchmarks create thousands.
	cp.Env.ControlPlane.GetAPIServer().Configure().Set("service-cluster-ip-range", "10.0.0.0/16")
	for flag, value := range opts.APIServerFlags {
		cp.Env.ControlPlane.GetAPIServer().Configure().Set(flag, value)
	}
	if cp.Config, err = cp.Env.Start(); err != nil {
		// envtest leaves etcd and kube-apiserver running when a later step (CRDs) fails.
		_ = cp.Stop()
		return nil, fmt.Errorf("start envtest: %w", err)
	}
	if err := cp.startControllerManager(filepath.Join(assets, "kube-controller-manager")); err != nil {
		_ = cp.Stop()
		return nil, err
	}
	return cp, nil
}

// AdminKubeconfig writes a kubeconfig for a new system:masters user and returns its path.
func (cp *ControlPlane) AdminKubeconfig(user string) (string, error) {
	return cp.Kubeconfig(envtest.User{Name: user, Groups: []string{"system:masters"}})
}

// Kubeconfig writes a kubeconfig for user and returns its path.
func (cp *ControlPlane) Kubeconfig(user envtest.User) (string, error) {
	authn, err := cp.Env.AddUser(user, nil)
	if err != nil {
		return "", fmt.Errorf("add user %s: %w", user.Name, err)
	}
	data, err := authn.KubeConfig()
	if err != nil {
		return "", err
	}
	path := filepath.Join(cp.Dir, user.Name+".kubeconfig")
	return path, os.WriteFile(path, data, 0o600)
}

func (cp *ControlPlane) startControllerManager(binary string) error {
	kubeconfig, err := cp.AdminKubeconfig("kube-controller-manager")
	if err != nil {
		return err
	}
	logFile, err := os.Create(filepath.Join(cp.Dir, "kube-controller-manager.log"))
	if err != nil {
		return err
	}
	cp.kcm = exec.Command(binary,
		"--kubeconfig="+kubeconfig,
		"--controllers="+Controllers,
		"--use-service-account-credentials=false",
		"--leader-elect=false",
		"--secure-port=0",
		"--concurrent-gc-syncs=5",
		// Its client's default 20 requests a second would make a thousand clusters' first pods
		// and volume claims take over a minute: the benchmark measures pgpilot, not that limit.
		"--kube-api-qps=500", "--kube-api-burst=1000",
	)
	cp.kcm.Stdout, cp.kcm.Stderr = logFile, logFile
	cp.kcm.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cp.kcm.Start(); err != nil {
		return fmt.Errorf("start kube-controller-manager: %w", err)
	}
	return nil
}

// Stop stops kube-controller-manager, then the API server and etcd, and removes Dir.
func (cp *ControlPlane) Stop() error {
	var errs []error
	if cp.kcm != nil && cp.kcm.Process != nil {
		_ = cp.kcm.Process.Signal(syscall.SIGTERM)
		// Its exit status after a signal says nothing about the tests.
		done := make(chan struct{})
		go func() { _ = cp.kcm.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cp.kcm.Process.Kill()
			<-done
		}
	}
	if cp.Env != nil {
		errs = append(errs, cp.Env.Stop())
	}
	errs = append(errs, os.RemoveAll(cp.Dir))
	return errors.Join(errs...)
}

// ControllerManagerLog returns the controller-manager's output, for failure messages.
func (cp *ControlPlane) ControllerManagerLog() string {
	data, _ := os.ReadFile(filepath.Join(cp.Dir, "kube-controller-manager.log"))
	return string(data)
}
