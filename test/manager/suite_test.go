// Package manager_test runs the real manager binary (cmd/main.go) as separate processes against
// a real control plane, to test what only the assembled binary does: its flags, leader election
// between replicas, and the authenticated metrics endpoint.
package manager_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/kubernetes"

	"github.com/pgpilot/pgpilot-operator/test/controlplane"
)

var (
	cp *controlplane.ControlPlane
	// clientset acts as a cluster admin, to arrange RBAC and read the Lease.
	clientset *kubernetes.Clientset
	// managerBinary is cmd/ built once for the whole suite.
	managerBinary string
	// managerKubeconfig is what every manager process runs with: a system:masters user, so the
	// specs test leader election and the metrics filter rather than the operator's own RBAC.
	managerKubeconfig string
	// workDir holds the binary and the managers' logs.
	workDir string
)

func TestManager(t *testing.T) {
	RegisterFailHandler(Fail)
	SetDefaultEventuallyTimeout(60 * time.Second)
	SetDefaultEventuallyPollingInterval(250 * time.Millisecond)
	RunSpecs(t, "Manager Binary Suite")
}

var _ = BeforeSuite(func() {
	var err error
	workDir, err = os.MkdirTemp("", "pgpilot-manager-test-")
	Expect(err).NotTo(HaveOccurred())

	// Build first: a compile error should fail the suite before a control plane is started.
	managerBinary = filepath.Join(workDir, "manager")
	build := exec.Command("go", "build", "-o", managerBinary, "./cmd")
	build.Dir = filepath.Join("..", "..")
	out, err := build.CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "go build ./cmd failed:\n%s", out)

	cp, err = controlplane.Start(filepath.Join("..", "..", "config", "crd", "bases"))
	Expect(err).NotTo(HaveOccurred())
	clientset, err = kubernetes.NewForConfig(cp.Config)
	Expect(err).NotTo(HaveOccurred())
	managerKubeconfig, err = cp.AdminKubeconfig("pgpilot-manager")
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	// Specs stop their own managers; this catches those left behind by a failed spec, before
	// the API server they talk to goes away.
	killAllManagers()
	if cp != nil {
		Expect(cp.Stop()).To(Succeed())
	}
	if workDir != "" {
		Expect(os.RemoveAll(workDir)).To(Succeed())
	}
})
