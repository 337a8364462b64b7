package manager_test

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// managerProcess is one running manager binary with its output in a log file.
type managerProcess struct {
	name        string
	cmd         *exec.Cmd
	logPath     string
	metricsPort int
	probePort   int
	// exited is closed once the process has been waited for; cmd.ProcessState is set then.
	exited chan struct{}
}

var (
	managersMu sync.Mutex
	// managers is every process started, so AfterSuite can kill those a failed spec left.
	managers []*managerProcess
)

// startManager starts the manager binary on free local ports with the given extra flags and
// waits until its health probe answers. The process is stopped when the spec ends, and its log
// is attached to the report when the spec fails.
func startManager(name string, args ...string) *managerProcess {
	GinkgoHelper()
	return startManagerWithEnv(name, nil, args...)
}

// startManagerWithEnv is startManager with extra environment variables ("KEY=value").
func startManagerWithEnv(name string, env []string, args ...string) *managerProcess {
	GinkgoHelper()
	m := &managerProcess{
		name:        name,
		logPath:     filepath.Join(workDir, fmt.Sprintf("%s-%d.log", name, time.Now().UnixNano())),
		metricsPort: freePort(),
		probePort:   freePort(),
		exited:      make(chan struct{}),
	}
	logFile, err := os.Create(m.logPath)
	Expect(err).NotTo(HaveOccurred())
	defer func() { _ = logFile.Close() }() // the child keeps its own descriptor

	m.cmd = exec.Command(managerBinary, append([]string{
		"--metrics-bind-address=" + addr(m.metricsPort),
		"--health-probe-bind-address=" + addr(m.probePort),
	}, args...)...)
	m.cmd.Env = append(os.Environ(),
		"KUBECONFIG="+managerKubeconfig,
		"RELATED_IMAGE_POSTGRES_17=postgresql:17",
		"RELATED_IMAGE_AGENT=pgpilot-operator:test",
	)
	m.cmd.Env = append(m.cmd.Env, env...)
	m.cmd.Stdout, m.cmd.Stderr = logFile, logFile
	// If the test process dies without running AfterSuite, the kernel kills the manager too.
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	Expect(m.cmd.Start()).To(Succeed())
	go func() {
		_ = m.cmd.Wait()
		close(m.exited)
	}()

	managersMu.Lock()
	managers = append(managers, m)
	managersMu.Unlock()

	DeferCleanup(func() {
		if CurrentSpecReport().Failed() {
			AddReportEntry(m.name+" log ("+m.logPath+")", m.log(), ReportEntryVisibilityFailureOrVerbose)
		}
		if m.running() {
			m.stop()
		}
	})

	// The probe server starts before leader election, so standbys answer too.
	Eventually(func(g Gomega) {
		if !m.running() {
			StopTrying(fmt.Sprintf("manager %s exited (%s) before becoming ready:\n%s",
				m.name, m.cmd.ProcessState, m.log())).Now()
		}
		resp, err := http.Get("http://" + addr(m.probePort) + "/readyz")
		g.Expect(err).NotTo(HaveOccurred())
		_ = resp.Body.Close()
		g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	}).Should(Succeed(), "manager %s never became ready", name)
	return m
}

// stop sends SIGTERM, as the kubelet does, and returns the exit code once the process is gone.
// It kills the process if it does not exit within 30s, the manager's graceful shutdown timeout.
func (m *managerProcess) stop() int {
	GinkgoHelper()
	Expect(m.cmd.Process.Signal(syscall.SIGTERM)).To(Succeed())
	select {
	case <-m.exited:
	case <-time.After(40 * time.Second):
		_ = m.cmd.Process.Kill()
		<-m.exited
		Fail(fmt.Sprintf("manager %s did not exit within 40s of SIGTERM:\n%s", m.name, m.log()))
	}
	return m.cmd.ProcessState.ExitCode()
}

func (m *managerProcess) running() bool {
	select {
	case <-m.exited:
		return false
	default:
		return true
	}
}

// log returns everything the process wrote to stdout and stderr so far.
func (m *managerProcess) log() string {
	data, err := os.ReadFile(m.logPath)
	if err != nil {
		return fmt.Sprintf("<cannot read %s: %v>", m.logPath, err)
	}
	return string(data)
}

func killAllManagers() {
	managersMu.Lock()
	defer managersMu.Unlock()
	for _, m := range managers {
		if m.running() {
			_ = m.cmd.Process.Kill()
			<-m.exited
		}
	}
}

// freePort asks the kernel for an unused port. Another process could take it before the
// manager binds it; the window is small, and the manager would then fail loudly at startup.
func freePort() int {
	GinkgoHelper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

func addr(port int) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}
