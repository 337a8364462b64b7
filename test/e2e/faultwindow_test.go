//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"sync"
	"syscall"

	. "github.com/onsi/gomega"
)

// faultWindow keeps a fault that kills the operator apart from every other fault under a write
// checker, across the parallel spec processes: those are measured against a failover budget the
// operator drives, and an operator restarting in the middle (leader election, cache sync) would
// spend it. Faults that leave the operator alone share the window; one that kills it waits for
// them to end and holds it alone (a shared or exclusive flock on one file). The returned function
// ends the window; calling it again does nothing.
func faultWindow(stopsOperator bool) func() {
	path := filepath.Join(os.TempDir(), "pgpilot-e2e-fault-window.lock")
	file, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	Expect(err).NotTo(HaveOccurred())
	how := syscall.LOCK_SH
	if stopsOperator {
		how = syscall.LOCK_EX
	}
	Expect(syscall.Flock(int(file.Fd()), how)).To(Succeed())
	var once sync.Once
	return func() {
		once.Do(func() { _ = file.Close() }) // closing the last descriptor releases the lock
	}
}
