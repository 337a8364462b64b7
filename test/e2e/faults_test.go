//go:build e2e

package e2e

import (
	"fmt"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
)

// RTO budgets: from a fault to the first write acknowledged again, per scenario. They are
// correctness budgets with room for CI's load (the write checker fails a spec over its budget),
// not the measured figures, which the specs report.
const (
	// A crash (kill -9, a deleted pod): its agent answers, so no Lease has to lapse; detected,
	// granted and promoted in one reconcile (3.7–5.7 s in the CI run of 93c44db).
	rtoCrash = 20 * time.Second
	// A frozen server: noticed once it has not answered its agent for agentapi.UnresponsiveAfter
	// (5 s), then fenced by its agent on the operator's order (11.8 s).
	rtoFrozen = 30 * time.Second
	// The operator killed with the primary: a new operator leads only after its leader Lease
	// (15 s) and its container's restart (20.1 s).
	rtoOperatorAndPrimary = 45 * time.Second
	// Node loss and a partition: the old primary's Lease must lapse first (12 s), and its
	// standbys must have been detached from it for 8 s (18.4 s and 20.7 s).
	rtoLease = 40 * time.Second
	// No failover at all (the primary cut off from the API server alone): no gap between
	// acknowledged writes may be longer than this.
	rtoNone = 5 * time.Second
)

// freezePostgres stops every process of pod's PostgreSQL server (SIGSTOP), as a hung disk or a
// stuck kernel would, while its agent lives on: the postmaster first, so that it forks nothing
// more, then each process it forked. The spec's cleanup lets them go (the fence kills them).
func freezePostgres(pod *corev1.Pod) {
	postmaster, _ := findPostmaster(pod)
	children, err := postgres.ChildrenOf(postmaster)
	Expect(err).NotTo(HaveOccurred())
	processes := append([]int{postmaster}, children...)
	By(fmt.Sprintf("SIGSTOP to the %d processes of %s's server (postmaster %d)", len(processes), pod.Name, postmaster))
	DeferCleanup(func() {
		for _, pid := range processes {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	})
	Expect(syscall.Kill(postmaster, syscall.SIGSTOP)).To(Succeed())
	for _, pid := range processes[1:] {
		_ = syscall.Kill(pid, syscall.SIGSTOP) // one may have ended meanwhile
	}
}
