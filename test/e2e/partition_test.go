//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// partitionSpec cuts the primary's pod off from everything but its own loopback (the API
// server, its standbys, the kubelet, the clients): rules in the pod's network namespace. The
// old primary must stop accepting writes by itself before pgpilot grants the primary Lease to
// another instance, and must rejoin as a standby once the partition heals.
func partitionSpec(cluster **pgv1.PostgresCluster) {
	It("fences a primary cut off from the API server and its peers before promoting another, and it rejoins after", func(ctx SpecContext) {
		c := *cluster
		current := &pgv1.PostgresCluster{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(c), current)).To(Succeed())
		old := &corev1.Pod{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: current.Status.CurrentPrimary}, old)).To(Succeed())
		netns := podNetns(old)
		password := secretValue(ctx, c.Namespace, c.Name+"-superuser", corev1.BasicAuthPasswordKey)
		Expect(acceptsWrites(netns, password)).To(BeTrue(), "the primary does not accept writes before the partition")

		checker := startWriteChecker(ctx, c)
		time.Sleep(2 * time.Second)
		checker.fault(rtoLease)
		partition(netns, true)
		DeferCleanup(partition, netns, false)
		start := time.Now()
		// The isolated primary is sampled until the grant, never latched: one probe that timed
		// out on a loaded machine is no fence, a probe that got in is proof it was not fenced.
		var lastAccepted, grantedAfter time.Duration
		refusedInARow := 0
		Eventually(func(g Gomega) {
			if grantedAfter == 0 {
				if acceptsWrites(netns, password) {
					lastAccepted, refusedInARow = time.Since(start), 0
				} else {
					refusedInARow++
				}
				if holder, err := primaryLeaseHolder(ctx, c); err == nil && holder != old.Name {
					grantedAfter = time.Since(start)
				}
			}
			g.Expect(grantedAfter).NotTo(BeZero(), "the primary lease was not granted elsewhere")
		}).WithTimeout(2 * time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())
		AddReportEntry("partition: the isolated primary last accepted a write after", lastAccepted.Round(100*time.Millisecond).String())
		AddReportEntry("partition: the primary lease was granted to another instance after", grantedAfter.Round(100*time.Millisecond).String())
		Expect(refusedInARow).To(BeNumerically(">=", 3), "split brain: the isolated primary was not seen fenced, steadily, "+
			"before the grant (it last accepted a write %s after the cut, the grant came after %s)",
			lastAccepted.Round(100*time.Millisecond), grantedAfter.Round(100*time.Millisecond))

		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(c), current)).To(Succeed())
			g.Expect(current.Status.CurrentPrimary).NotTo(Equal(old.Name))
		}).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
		AddReportEntry("partition: a new primary after", time.Since(start).Round(100*time.Millisecond).String())
		partition(netns, false)
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(c), current)).To(Succeed())
			expectSettled(g, current)
		}).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
		AddReportEntry("partition: healed to Ready with the old primary streaming", time.Since(start).Round(100*time.Millisecond).String())
		checker.finish(ctx, "partition")
		expectReplication(ctx, c, current.Spec.Instances)
		Expect(clusterEventReasons(ctx, c, start)).To(ContainElements("FailoverStarted", "Fenced", "Promoted", "FailoverCompleted", "Rejoined"))
	})
}

// podNetns is the network namespace of pod, by its agent's process.
func podNetns(pod *corev1.Pod) string {
	_, agent := findPostmaster(pod)
	return fmt.Sprintf("/proc/%d/ns/net", agent)
}

// partition drops (on) or lets through (off) every packet of the network namespace netns
// that does not stay on its loopback.
func partition(netns string, on bool) {
	netnsRules(netns, on, [][]string{{"INPUT", "!", "-i", "lo", "-j", "DROP"}, {"OUTPUT", "!", "-o", "lo", "-j", "DROP"}})
}

// cutReplication resets (on) every connection from the network namespace netns to a PostgreSQL
// port elsewhere, and drops what such connections still send it; off lets them through again.
func cutReplication(netns string, on bool) {
	netnsRules(netns, on, [][]string{
		{"OUTPUT", "!", "-o", "lo", "-p", "tcp", "--dport", "5432", "-j", "REJECT", "--reject-with", "tcp-reset"},
		{"INPUT", "!", "-i", "lo", "-p", "tcp", "--sport", "5432", "-j", "DROP"},
	})
}

// netnsRules inserts (on) or deletes (off) iptables rules in the network namespace netns. A rule
// that is already gone is not an error when deleting: cleanups run after a heal too.
func netnsRules(netns string, on bool, rules [][]string) {
	action := "-I"
	if !on {
		action = "-D"
	}
	for _, rule := range rules {
		args := append([]string{"--net=" + netns, "iptables", action}, rule...)
		out, err := exec.Command("nsenter", args...).CombinedOutput()
		if on || err == nil {
			Expect(err).NotTo(HaveOccurred(), "nsenter %s: %s", strings.Join(args, " "), out)
		}
	}
}

// acceptsWrites asks the PostgreSQL of the pod whose network namespace is netns, over its
// loopback, whether it is a primary that accepts connections.
func acceptsWrites(netns, password string) bool {
	cmd := exec.Command("nsenter", "--net="+netns, "psql", "-h", "127.0.0.1", "-U", "postgres", "-d", "postgres", "-tAc",
		"SELECT NOT pg_is_in_recovery()")
	cmd.Env = append(os.Environ(), "PGPASSWORD="+password, "PGCONNECT_TIMEOUT=1")
	out, err := cmd.Output()
	return err == nil && strings.TrimSpace(string(out)) == "t"
}

func primaryLeaseHolder(ctx context.Context, c *pgv1.PostgresCluster) (string, error) {
	lease := &coordinationv1.Lease{}
	err := k8s.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.Name + "-primary"}, lease)
	return ptr.Deref(lease.Spec.HolderIdentity, ""), err
}

func secretValue(ctx context.Context, namespace, name, key string) string {
	secret := &corev1.Secret{}
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, secret)).To(Succeed())
	return string(secret.Data[key])
}
