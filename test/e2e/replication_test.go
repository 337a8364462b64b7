//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// The instance agent's promise, end to end: a primary with streaming replicas that clients
// reach through <name>-rw and <name>-ro, with the credentials pgpilot generated.
var _ = Describe("Streaming replication", Ordered, SpecPriority(longestSpecs), func() {
	var cluster *pgv1.PostgresCluster
	jobs := 0
	// sql runs a statement from another pod; it fails the spec when psql fails.
	sql := func(ctx context.Context, host, secret, database, statement string) string {
		jobs++
		logs, ok := psql(ctx, cluster, fmt.Sprintf("psql-%d", jobs), host, secret, database, statement)
		Expect(ok).To(BeTrue(), "psql failed:\n%s", logs)
		return logs
	}
	// trySQL is sql for checks retried until they pass (replication, a reload).
	trySQL := func(ctx context.Context, host, secret, database, statement string) string {
		jobs++
		logs, _ := psql(ctx, cluster, fmt.Sprintf("psql-%d", jobs), host, secret, database, statement)
		return logs
	}

	BeforeAll(func(ctx SpecContext) {
		cluster = synchronousCluster(ctx, "repl", 3) // default parameters: a spec below sets one
		start := time.Now()
		Expect(k8s.Create(ctx, cluster)).To(Succeed())
		waitForReady(ctx, cluster, 8*time.Minute)
		AddReportEntry("kubectl apply to Ready, 3 instances", time.Since(start).Round(time.Second).String())
	})
	AfterEach(dumpOnFailure)

	It("has a primary and two replicas that stream from it", func(ctx SpecContext) {
		expectReplication(ctx, cluster, 3)
	})

	It("serves a row written through -rw on -ro, to the application user from another pod", func(ctx SpecContext) {
		sql(ctx, "repl-rw", "repl-app", "app", "CREATE TABLE greetings (msg text); INSERT INTO greetings VALUES ('hello over streaming replication')")
		Eventually(func() string {
			return trySQL(ctx, "repl-ro", "repl-app", "app", "SELECT msg || ' / in recovery: ' || pg_is_in_recovery() FROM greetings")
		}).WithTimeout(2 * time.Minute).Should(ContainSubstring("hello over streaming replication / in recovery: true"))
	})

	tlsSpecs(func() *pgv1.PostgresCluster { return cluster })
	hostileTenantSpecs(func() *pgv1.PostgresCluster { return cluster })

	It("scales 3 → 5 → 2 keeping the data and replication healthy", func(ctx SpecContext) {
		for _, instances := range []int32{5, 2} {
			By(fmt.Sprintf("scaling to %d", instances))
			scale(ctx, cluster, instances)
			Eventually(func(g Gomega) {
				current := &pgv1.PostgresCluster{}
				g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cluster), current)).To(Succeed())
				g.Expect(current.Status.InstancesStatus).To(HaveLen(int(instances)))
				g.Expect(current.Status.Phase).To(Equal(pgv1.PhaseReady))
			}).WithTimeout(8 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
			expectReplication(ctx, cluster, instances)
			Expect(sql(ctx, "repl-ro", "repl-app", "app", "SELECT count(*) || ' greetings' FROM greetings")).
				To(ContainSubstring("1 greetings"))
		}
		By("the removed instances' replication slots are gone from the primary")
		Eventually(func() string {
			return trySQL(ctx, "repl-rw", "repl-superuser", "postgres", "SELECT count(*) || ' slots' FROM pg_replication_slots")
		}).WithTimeout(2 * time.Minute).Should(ContainSubstring("1 slots"))
	})

	It("switches over under writes without losing an acknowledged one", func(ctx SpecContext) {
		current := &pgv1.PostgresCluster{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cluster), current)).To(Succeed())
		old := current.Status.CurrentPrimary
		target := ""
		for _, st := range current.Status.InstancesStatus {
			if st.Name != old {
				target = st.Name
			}
		}
		checker := startWriteChecker(ctx, cluster)
		time.Sleep(2 * time.Second) // writes acknowledged before the switchover, too
		start := time.Now()
		switchoverTo(ctx, cluster, target)
		AddReportEntry("switchover "+old+" → "+target+" to Ready", time.Since(start).Round(100*time.Millisecond).String())
		checker.finish(ctx, "switchover")
		expectReplication(ctx, cluster, current.Spec.Instances)
	})

	// A target that does not replay the old primary's WAL to its end (here paused; in CI run 18
	// a WAL receiver that reconnected while the primary was fenced) must not leave the cluster
	// without a primary: after 20 s an instance that has all of it is promoted instead. With the
	// two instances left by the scaling spec, that is the old primary itself, promoted back.
	It("promotes an instance with all the WAL when the switchover's target does not replay it, losing no acknowledged write", func(ctx SpecContext) {
		current := getCluster(ctx, cluster)
		old, timeline := current.Status.CurrentPrimary, current.Status.Timeline
		target := ""
		for _, st := range current.Status.InstancesStatus {
			if st.Name != old {
				target = st.Name
			}
		}
		AddReportEntry("switchover target whose replay is paused", fmt.Sprintf("%s → %s", old, target))
		targetSQL := instanceConnInfo(ctx, cluster, target, "superuser", "postgres")
		Expect(queryOne(ctx, targetSQL, "SELECT 'paused' FROM pg_wal_replay_pause()")).To(Equal("paused"))
		resumed := false
		DeferCleanup(func(ctx SpecContext) {
			if !resumed {
				_, _ = queryOne(ctx, targetSQL, "SELECT 'resumed' FROM pg_wal_replay_resume()")
			}
		})
		checker := startWriteChecker(ctx, cluster)
		time.Sleep(2 * time.Second)
		start := time.Now()
		Expect(retryUpdate(ctx, current, func() {
			current.Annotations = map[string]string{pgv1.SwitchoverAnnotation: target}
		})).To(Succeed())
		Eventually(func() []string {
			return clusterEventReasons(ctx, cluster, start)
		}).WithTimeout(2 * time.Minute).Should(ContainElements("Demoted", "SwitchoverRetargeted", "SwitchoverCompleted"))
		AddReportEntry("switchover to a target that does not replay: another instance promoted", time.Since(start).Round(100*time.Millisecond).String())
		Expect(queryOne(ctx, targetSQL, "SELECT 'resumed' FROM pg_wal_replay_resume()")).To(Equal("resumed"))
		resumed = true
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cluster), current)).To(Succeed())
			g.Expect(current.Status.CurrentPrimary).NotTo(Equal(target))
			g.Expect(current.Status.Timeline).To(BeNumerically(">", timeline))
			expectSettled(g, current)
		}).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
		checker.finish(ctx, "switchover to a target that does not replay")
		expectReplication(ctx, cluster, current.Spec.Instances)
		Expect(clusterEventReasons(ctx, cluster, start)).NotTo(ContainElement("FailoverStarted"))
		countRows := "SELECT count(*)::text FROM " + checker.table
		onPrimary, err := queryOne(ctx, rwConnInfo(ctx, cluster, "superuser", "app"), countRows)
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() (string, error) {
			return queryOne(ctx, instanceConnInfo(ctx, cluster, target, "superuser", "app"), countRows)
		}).WithTimeout(time.Minute).Should(Equal(onPrimary), "the write checker's rows on %s, which fell behind", target)
	})

	It("applies a parameter change and reports it", func(ctx SpecContext) {
		changed := cluster.DeepCopy()
		Expect(retryUpdate(ctx, changed, func() {
			changed.Spec.PostgreSQL.Parameters = map[string]pgv1.ParameterValue{"work_mem": "24MB"}
		})).To(Succeed())
		// The kubelet projects the new ConfigMap into the pods (up to a minute or two), the
		// agents reload; no pod restarts for a reloadable setting.
		Eventually(func() string {
			return trySQL(ctx, "repl-ro", "repl-superuser", "postgres", "SELECT 'work_mem=' || current_setting('work_mem')")
		}).WithTimeout(4 * time.Minute).WithPolling(10 * time.Second).Should(ContainSubstring("work_mem=24MB"))
		current := &pgv1.PostgresCluster{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cluster), current)).To(Succeed())
		Expect(current.Status.ObservedGeneration).To(Equal(current.Generation))
		for _, pod := range clusterPods(ctx, cluster) {
			for _, status := range pod.Status.ContainerStatuses {
				Expect(status.RestartCount).To(BeZero(), "pod %s restarted", pod.Name)
			}
		}
	})

	pluginSpecs(func() *pgv1.PostgresCluster { return cluster })
})

// expectReplication checks status.instancesStatus: one primary, the rest streaming replicas.
func expectReplication(ctx context.Context, cluster *pgv1.PostgresCluster, instances int32) {
	GinkgoHelper()
	expectReplicationWith(ctx, Default, cluster, instances)
}

// expectReplicationWith is expectReplication for g, an Eventually's.
func expectReplicationWith(ctx context.Context, g Gomega, cluster *pgv1.PostgresCluster, instances int32) {
	current := &pgv1.PostgresCluster{}
	g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cluster), current)).To(Succeed())
	g.Expect(current.Status.InstancesStatus).To(HaveLen(int(instances)))
	primaries := 0
	for _, st := range current.Status.InstancesStatus {
		switch st.Role {
		case "primary":
			primaries++
			g.Expect(st.Name).To(Equal(current.Status.CurrentPrimary))
		case "replica":
			g.Expect(st.Streaming).To(BeTrue(), "replica %s does not stream", st.Name)
			g.Expect(st.LagBytes).NotTo(BeNil(), "the primary does not see replica %s", st.Name)
		default:
			g.Expect(st.Role).To(BeElementOf("primary", "replica"), "instance %s: %s", st.Name, st.Error)
		}
	}
	g.Expect(primaries).To(Equal(1))
}

func scale(ctx context.Context, cluster *pgv1.PostgresCluster, instances int32) {
	current := cluster.DeepCopy()
	Expect(retryUpdate(ctx, current, func() { current.Spec.Instances = instances })).To(Succeed())
}

// psql runs statement in a Job from another pod, connecting to host as the login in the
// basic-auth Secret secret, and returns the Job's log and whether psql succeeded.
func psql(ctx context.Context, cluster *pgv1.PostgresCluster, job, host, secret, database, statement string) (string, bool) {
	sts := &appsv1.StatefulSet{}
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cluster), sts)).To(Succeed())
	fromSecret := func(key string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key}}
	}
	return tryJob(ctx, cluster.Namespace, job, corev1.PodSpec{
		Containers: []corev1.Container{restrictedContainer(corev1.Container{
			Name:    "psql",
			Image:   sts.Spec.Template.Spec.Containers[0].Image,
			Command: []string{"psql", "-h", host, "-d", database, "-v", "ON_ERROR_STOP=1", "-tAc", statement},
			Env: []corev1.EnvVar{
				{Name: "PGUSER", ValueFrom: fromSecret(corev1.BasicAuthUsernameKey)},
				{Name: "PGPASSWORD", ValueFrom: fromSecret(corev1.BasicAuthPasswordKey)},
				{Name: "PGCONNECT_TIMEOUT", Value: "10"},
			},
		})},
	})
}
