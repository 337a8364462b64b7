package controller

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
	"github.com/pgpilot/pgpilot-operator/internal/instance/agent"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
	"github.com/pgpilot/pgpilot-operator/internal/version"
	"github.com/pgpilot/pgpilot-operator/test/pgtest"
)

// These specs run real instance agents over real PostgreSQL servers in this process, with the
// credentials the operator generated, and act as the kubelet for the pods.
var _ = Describe("Instances with real agents", func() {
	var cluster *pgv1.PostgresCluster

	BeforeEach(func() {
		cluster = createCluster(newCluster(newNamespace(), onHostServers, func(c *pgv1.PostgresCluster) { c.Spec.Instances = 2 }))
	})

	// runInstance starts pod's agent and PostgreSQL, then marks the pod ready once the agent's
	// readiness endpoint answers, as the kubelet's probe would.
	runInstanceWith := func(pod string, primaryPort int, initialPrimary string, leases agent.LeaseStore) *pgtest.RunningAgent {
		return runAgentFor(cluster, pod, primaryPort, initialPrimary, leases)
	}
	runInstance := func(pod string, primaryPort int, initialPrimary string) *pgtest.RunningAgent {
		return runInstanceWith(pod, primaryPort, initialPrimary, clusterLeases(cluster))
	}

	It("confirms the primary with its agent and becomes Ready once the replica streams", func() {
		primary := runInstance("db-0", 0, "db-0")
		Eventually(func(g Gomega) {
			pod := &corev1.Pod{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: "db-0"}, pod)).To(Succeed())
			g.Expect(pod.Labels).To(HaveKeyWithValue(pgbuilder.RoleLabel, pgbuilder.RolePrimary))
			got := fetch(cluster)
			g.Expect(got.Status.CurrentPrimary).To(Equal("db-0"))
			g.Expect(got.Status.InstancesStatus).NotTo(BeEmpty())
			g.Expect(got.Status.InstancesStatus[0].Role).To(Equal(agentapi.RolePrimary))
			g.Expect(got.Status.InstancesStatus[0].LSN).NotTo(BeEmpty())
			g.Expect(got.Status.InstancesStatus[0].AgentVersion).To(Equal(version.Version))
		}).Should(Succeed())

		// The StatefulSet controller creates the second pod once the first is ready.
		standby := runInstance("db-1", primary.Instance.Port, "db-0")
		Eventually(func(g Gomega) {
			got := fetch(cluster)
			g.Expect(got.Status.Phase).To(Equal(pgv1.PhaseReady))
			g.Expect(condition(got, pgv1.ConditionReady).Status).To(Equal(metav1.ConditionTrue))
			g.Expect(got.Status.InstancesStatus).To(HaveLen(2))
			replica := got.Status.InstancesStatus[1]
			g.Expect(replica.Name).To(Equal("db-1"))
			g.Expect(replica.Role).To(Equal(agentapi.RoleReplica))
			g.Expect(replica.Streaming).To(BeTrue())
			g.Expect(replica.LagBytes).NotTo(BeNil())
			g.Expect(replica.Timeline).To(Equal(int64(1)))
			pod := &corev1.Pod{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: "db-1"}, pod)).To(Succeed())
			g.Expect(pod.Labels).To(HaveKeyWithValue(pgbuilder.RoleLabel, pgbuilder.RoleReplica))
		}, 60*time.Second).Should(Succeed())
		Eventually(eventReasons).WithArguments(cluster).Should(ContainElements("PrimaryElected", "ClusterReady"))
		measureHealthCheck(cluster)

		// Scaling down removes db-1 (the StatefulSet controller deletes its pod; here its agent
		// stops too): its replication slot must not keep WAL on the primary.
		updateCluster(cluster, func(c *pgv1.PostgresCluster) { c.Spec.Instances = 1 })
		Expect(standby.Stop()).To(Succeed())
		admin := pgtest.Connect(GinkgoT(), primary.Instance, agentapi.Superuser,
			clusterCredentials(cluster).SuperuserPassword, "postgres")
		Eventually(func() ([]string, error) {
			rows, err := admin.Query(ctx, "SELECT slot_name::text FROM pg_replication_slots")
			if err != nil {
				return nil, err
			}
			return pgx.CollectRows(rows, pgx.RowTo[string])
		}, 30*time.Second).Should(BeEmpty())
		Eventually(eventReasons).WithArguments(cluster).Should(ContainElement("ReplicationSlotsDropped"))

		// A primary that stops takes Ready away.
		Expect(primary.Stop()).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(condition(fetch(cluster), pgv1.ConditionReady).Status).To(Equal(metav1.ConditionFalse))
		}, 30*time.Second).Should(Succeed())
	})

	It("switches over to the annotated instance without losing an acknowledged commit", func() {
		rw, route := rwService(cluster)
		for _, pod := range []string{"db-0", "db-1"} {
			a := runInstance(pod, rw.Port, "db-0")
			route(pod, a.Instance.Port)
		}
		Eventually(func(g Gomega) {
			g.Expect(fetch(cluster).Status.Phase).To(Equal(pgv1.PhaseReady))
		}, 60*time.Second).Should(Succeed())

		password := clusterCredentials(cluster).AppPassword
		app, err := pgx.Connect(ctx, postgres.ConnInfo("host", "127.0.0.1", "port", strconv.Itoa(rw.Port),
			"user", "app", "password", password, "dbname", "app"))
		Expect(err).NotTo(HaveOccurred())
		for i := range 100 {
			_, err := app.Exec(ctx, fmt.Sprintf("CREATE TABLE IF NOT EXISTS t (v int); INSERT INTO t VALUES (%d)", i))
			Expect(err).NotTo(HaveOccurred())
		}
		_ = app.Close(ctx)

		updateCluster(cluster, func(c *pgv1.PostgresCluster) {
			c.Annotations = map[string]string{pgv1.SwitchoverAnnotation: "db-1"}
		})
		Eventually(func(g Gomega) {
			got := fetch(cluster)
			g.Expect(got.Status.CurrentPrimary).To(Equal("db-1"))
			g.Expect(got.Status.TargetPrimary).To(BeEmpty())
			g.Expect(got.Status.Phase).To(Equal(pgv1.PhaseReady))
			replica := got.Status.InstancesStatus[0]
			g.Expect(replica.Role).To(Equal(agentapi.RoleReplica))
			g.Expect(replica.Streaming).To(BeTrue())
			g.Expect(replica.Timeline).To(Equal(int64(2)))
		}, 90*time.Second).Should(Succeed())
		Eventually(eventReasons).WithArguments(cluster).Should(ContainElements("SwitchoverStarted", "Demoted", "Promoted", "SwitchoverCompleted"))

		Eventually(func() (int, error) {
			conn, err := pgx.Connect(ctx, postgres.ConnInfo("host", "127.0.0.1", "port", strconv.Itoa(rw.Port),
				"user", "app", "password", password, "dbname", "app"))
			if err != nil {
				return 0, err
			}
			defer func() { _ = conn.Close(ctx) }()
			var rows int
			return rows, conn.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&rows)
		}, 30*time.Second).Should(Equal(100), "every acknowledged commit is on the new primary")
	})

	It("restarts for settings that need it, the replica first and the primary last", func() {
		primary := runInstance("db-0", 0, "db-0")
		replica := runInstance("db-1", primary.Instance.Port, "db-0")
		Eventually(func(g Gomega) {
			g.Expect(fetch(cluster).Status.Phase).To(Equal(pgv1.PhaseReady))
		}, 60*time.Second).Should(Succeed())

		updateCluster(cluster, func(c *pgv1.PostgresCluster) {
			c.Spec.PostgreSQL.Parameters = map[string]pgv1.ParameterValue{"max_connections": "150"}
		})
		// What the kubelet does with the ConfigMap volume: project the new files into each pod.
		Eventually(func(g Gomega) {
			cm := &corev1.ConfigMap{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: pgbuilder.ConfigMapName(cluster)}, cm)).To(Succeed())
			g.Expect(cm.Data[agentapi.PostgresqlConfFile]).To(ContainSubstring("max_connections = '150'"))
			for _, a := range []*pgtest.RunningAgent{primary, replica} {
				g.Expect(os.WriteFile(a.Instance.ConfigFile, []byte(cm.Data[agentapi.PostgresqlConfFile]), 0o644)).To(Succeed())
				g.Expect(os.WriteFile(a.Instance.Settings["hba_file"], []byte(cm.Data[agentapi.HBAConfFile]), 0o644)).To(Succeed())
			}
		}).Should(Succeed())

		password := clusterCredentials(cluster).SuperuserPassword
		for _, a := range []*pgtest.RunningAgent{primary, replica} {
			Eventually(func(g Gomega) {
				conn, err := postgres.Connect(ctx, a.Instance.Port, agentapi.Superuser, password, "postgres")
				g.Expect(err).NotTo(HaveOccurred())
				defer func() { _ = conn.Close(ctx) }()
				var v string
				g.Expect(conn.QueryRow(ctx, "SHOW max_connections").Scan(&v)).To(Succeed())
				g.Expect(v).To(Equal("150"))
			}, 90*time.Second).Should(Succeed())
		}
		// (The instances started from the test's files, so cluster_name is pending too.)
		Eventually(restartNotes).WithArguments(cluster).Should(HaveExactElements(
			And(HavePrefix("Restarting db-1 to apply"), ContainSubstring("max_connections")),
			And(HavePrefix("Restarting db-0 to apply"), ContainSubstring("max_connections"))))
		Eventually(func(g Gomega) {
			got := fetch(cluster)
			g.Expect(got.Status.Phase).To(Equal(pgv1.PhaseReady))
			for _, st := range got.Status.InstancesStatus {
				g.Expect(st.PendingRestart).To(BeEmpty())
			}
		}, 60*time.Second).Should(Succeed())
	})

	It("reports two instances that both claim to be primary, and relabels nothing", func() {
		runInstance("db-0", 0, "db-0")
		Eventually(func(g Gomega) {
			g.Expect(fetch(cluster).Status.CurrentPrimary).To(Equal("db-0"))
		}).Should(Succeed())
		// A second, independent primary: its own initdb instead of a clone, obeying a Lease of its
		// own (a rogue or misconfigured agent; pgpilot's agents share the cluster's).
		runInstanceWith("db-1", 0, "db-1", pgtest.NewMemoryLeases("db-1"))
		Eventually(func(g Gomega) {
			degraded := condition(fetch(cluster), pgv1.ConditionDegraded)
			g.Expect(degraded).NotTo(BeNil(), "no Degraded condition yet")
			g.Expect(degraded.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(degraded.Reason).To(Equal("MultiplePrimaries"))
			g.Expect(degraded.Message).To(ContainSubstring("db-0, db-1"))
		}, 60*time.Second).Should(Succeed())
		pod := &corev1.Pod{}
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: "db-1"}, pod)).To(Succeed())
		Expect(pod.Labels).NotTo(HaveKeyWithValue(pgbuilder.RoleLabel, pgbuilder.RolePrimary))
		Eventually(eventReasons).WithArguments(cluster).Should(ContainElement("MultiplePrimaries"))
	})
})

var _ = Describe("Credentials rotation with real agents", func() {
	It("announces a changed Secret, touches the pods, and the agents apply the new password", func() {
		cluster := createCluster(newCluster(newNamespace(), onHostServers, func(c *pgv1.PostgresCluster) { c.Spec.Instances = 1 }))
		inst := pgtest.NewInstance(GinkgoT(), "db-0")
		a := pgtest.StartAgent(GinkgoT(), agentConfig(cluster, "db-0", "db-0", inst.Port, inst), inst, clusterLeases(cluster))
		agentAddresses.set(cluster.Namespace, "db-0", a.Address())
		Eventually(func() error { return readyz(a) }, 90*time.Second).Should(Succeed())
		markPodReady(cluster.Namespace, "db-0")
		Eventually(func(g Gomega) {
			g.Expect(fetch(cluster).Status.CredentialsVersions).To(HaveLen(4))
		}, 60*time.Second).Should(Succeed())

		// The user rotates the application password by editing its Secret.
		secret := &corev1.Secret{}
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: pgbuilder.AppSecretName(cluster)}, secret)).To(Succeed())
		secret.Data[corev1.BasicAuthPasswordKey] = []byte("rotated by the user")
		Expect(k8sClient.Update(ctx, secret)).To(Succeed())
		Eventually(eventReasons).WithArguments(cluster).Should(ContainElement("CredentialsChanged"))
		pod := &corev1.Pod{}
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: "db-0"}, pod)).To(Succeed())
			g.Expect(pod.Annotations).To(HaveKey(CredentialsAnnotation))
		}).Should(Succeed())

		// What the kubelet does on that touch: project the Secrets' new values into the pod.
		pgtest.SetCredentials(GinkgoT(), a.Config, clusterCredentials(cluster))
		Eventually(func() error {
			conn, err := postgres.Connect(ctx, inst.Port, "app", "rotated by the user", "app")
			if err == nil {
				_ = conn.Close(ctx)
			}
			return err
		}, 30*time.Second).Should(Succeed())

		// A Secret without its password key stops the cluster with a condition naming the key.
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(secret), secret)).To(Succeed())
		delete(secret.Data, corev1.BasicAuthPasswordKey)
		Expect(k8sClient.Update(ctx, secret)).To(Succeed())
		Eventually(func(g Gomega) {
			d := condition(fetch(cluster), pgv1.ConditionDegraded)
			g.Expect(d).NotTo(BeNil(), "no Degraded condition yet")
			g.Expect(d.Reason).To(Equal("CredentialsInvalid"))
			g.Expect(d.Message).To(ContainSubstring(`"password"`))
		}).Should(Succeed())
	})
})

// readyz asks the agent's readiness endpoint, as the kubelet's probe does.
func readyz(a *pgtest.RunningAgent) error { return a.Probe(agentapi.PathReadiness) }

// agentConfig is what the StatefulSet's environment and credential and certificate files give
// an agent, from the Secrets the operator generated for cluster: the operator reaches it over
// HTTPS with its client certificate, as in a pod.
func agentConfig(cluster *pgv1.PostgresCluster, pod, initialPrimary string, primaryPort int, inst *postgres.Instance) agentapi.Config {
	cfg := pgtest.AgentConfig(GinkgoT(), inst, pod, initialPrimary, primaryPort, clusterCredentials(cluster))
	secret := &corev1.Secret{}
	Eventually(func() error {
		return k8sClient.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: pgbuilder.TLSSecretName(cluster)}, secret)
	}).Should(Succeed())
	pgtest.InstallCertificates(GinkgoT(), inst, &cfg, secret.Data)
	return cfg
}

// clusterLeases is the cluster's primary Lease in the test's API server, as the agents reach it.
func clusterLeases(cluster *pgv1.PostgresCluster) *agent.KubeLeases {
	return &agent.KubeLeases{Client: coordinationclient.NewForConfigOrDie(cp.Config), Namespace: cluster.Namespace,
		Name: pgbuilder.PrimaryLeaseName(cluster)}
}

// clusterCredentials reads the credentials from cluster's Secrets.
func clusterCredentials(cluster *pgv1.PostgresCluster) agentapi.Credentials {
	secret := func(name, key string) string {
		secret := &corev1.Secret{}
		Eventually(func() error {
			return k8sClient.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: name}, secret)
		}).Should(Succeed())
		return string(secret.Data[key])
	}
	password := func(name string) string { return secret(name, corev1.BasicAuthPasswordKey) }
	return agentapi.Credentials{
		SuperuserPassword:   password(pgbuilder.SuperuserSecretName(cluster)),
		ReplicationPassword: password(pgbuilder.ReplicationSecretName(cluster)),
		AppUser:             secret(pgbuilder.AppSecretName(cluster), corev1.BasicAuthUsernameKey),
		AppPassword:         password(pgbuilder.AppSecretName(cluster)),
		AgentToken:          password(pgbuilder.AgentSecretName(cluster)),
	}
}

// restartNotes lists the InstanceRestarted events about cluster, oldest first.
func restartNotes(cluster *pgv1.PostgresCluster) []string {
	list := &eventsv1.EventList{}
	Expect(k8sClient.List(ctx, list, client.InNamespace(cluster.Namespace))).To(Succeed())
	slices.SortFunc(list.Items, func(a, b eventsv1.Event) int { return a.EventTime.Compare(b.EventTime.Time) })
	var notes []string
	for _, e := range list.Items {
		if e.Reason == "InstanceRestarted" && e.Regarding.Name == cluster.Name {
			notes = append(notes, e.Note)
		}
	}
	return notes
}

// measureHealthCheck reports what one health check of a Ready cluster costs — the reconcile a
// running cluster gets every health interval: its agents asked over HTTP, the cache read, the
// status computed — in wall time and in CPU of the reconciling thread (the agents' handlers and
// the HTTP client's connection goroutines run elsewhere), and the writes it made. The calls run
// beside the manager's own reconciles of the cluster, which change nothing either.
func measureHealthCheck(cluster *pgv1.PostgresCluster) {
	const checks = 20
	request := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(cluster)}
	writesBefore := writes.count(cluster.Namespace)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cpuBefore := threadCPU()
	start := time.Now()
	for range checks {
		_, err := testReconciler.Reconcile(ctx, request)
		Expect(err).NotTo(HaveOccurred())
	}
	wall, cpu := time.Since(start)/checks, (threadCPU()-cpuBefore)/checks
	AddReportEntry("health check of a Ready 2-instance cluster with real agents",
		fmt.Sprintf("%s wall, %s CPU on the reconciling thread, %d writes in %d checks",
			wall.Round(time.Microsecond), cpu.Round(time.Microsecond), writes.count(cluster.Namespace)-writesBefore, checks))
}

// threadCPU is the CPU time the calling OS thread has used.
func threadCPU() time.Duration {
	var usage syscall.Rusage
	Expect(syscall.Getrusage(rusageThread, &usage)).To(Succeed())
	return time.Duration(usage.Utime.Nano() + usage.Stime.Nano())
}

// rusageThread is Linux's RUSAGE_THREAD.
const rusageThread = 1
