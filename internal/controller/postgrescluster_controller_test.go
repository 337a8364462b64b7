package controller

import (
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
	"github.com/pgpilot/pgpilot-operator/internal/version"
)

var _ = Describe("PostgresCluster reconciler", func() {
	var cluster *pgv1.PostgresCluster

	BeforeEach(func() {
		cluster = createCluster(newCluster(newNamespace()))
	})

	It("creates every child with an owner reference, managed by pgpilot", func() {
		for _, child := range children(cluster) {
			Eventually(get).WithArguments(child).Should(Succeed(), "%T %s", child, child.GetName())
			Expect(metav1.GetControllerOf(child)).NotTo(BeNil())
			Expect(metav1.GetControllerOf(child).UID).To(Equal(cluster.UID))
			Expect(child.GetLabels()).To(HaveKeyWithValue(pgbuilder.ManagedByLabel, pgbuilder.ManagedByValue))
			managers := []string{}
			for _, f := range child.GetManagedFields() {
				managers = append(managers, f.Manager)
			}
			Expect(managers).To(ContainElement(pgbuilder.FieldOwner), "%T %s", child, child.GetName())
		}
		Eventually(func(g Gomega) {
			c := fetch(cluster)
			g.Expect(c.Status.Phase).To(Equal(pgv1.PhaseBootstrapping))
			g.Expect(c.Status.ObservedGeneration).To(Equal(c.Generation))
			g.Expect(c.Status.OperatorVersion).To(Equal(version.Version))
			progressing := condition(c, pgv1.ConditionProgressing)
			g.Expect(progressing).NotTo(BeNil())
			g.Expect(progressing.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(progressing.Reason).To(Equal("Bootstrapping"))
			g.Expect(condition(c, pgv1.ConditionReady).Status).To(Equal(metav1.ConditionFalse))
		}).Should(Succeed())
		Eventually(eventReasons).WithArguments(cluster).Should(ContainElement("Created"))
	})

	It("applies spec changes to the children", func() {
		sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: cluster.Name, Namespace: cluster.Namespace}}
		Eventually(get).WithArguments(sts).Should(Succeed())
		template := sts.Spec.Template.DeepCopy()

		c := updateCluster(cluster, func(c *pgv1.PostgresCluster) {
			c.Spec.Instances = 5
			c.Spec.PostgreSQL.Parameters = map[string]pgv1.ParameterValue{"max_connections": "250"}
		})

		Eventually(func(g Gomega) {
			g.Expect(get(sts)).To(Succeed())
			g.Expect(*sts.Spec.Replicas).To(Equal(int32(5)))
			// The agent reloads the configuration in place: a parameter must not roll the pods.
			g.Expect(sts.Spec.Template).To(Equal(*template))
		}).Should(Succeed())
		cm := &corev1.ConfigMap{}
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: pgbuilder.ConfigMapName(c)}, cm)).To(Succeed())
		Expect(cm.Data[agentapi.PostgresqlConfFile]).To(ContainSubstring("max_connections = '250'"))
		// A cluster pgpilot created loads pg_stat_statements, and its status says so.
		Expect(cm.Data[agentapi.PostgresqlConfFile]).To(ContainSubstring("shared_preload_libraries = 'pg_stat_statements'"))
		Expect(get(c)).To(Succeed())
		Expect(c.Status.StatementStatistics).To(BeTrue())
	})

	It("never regenerates a password", func() {
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: pgbuilder.SuperuserSecretName(cluster), Namespace: cluster.Namespace}}
		Eventually(get).WithArguments(secret).Should(Succeed())
		password := string(secret.Data[corev1.BasicAuthPasswordKey])
		Expect(len(password)).To(BeNumerically(">=", 20))

		c := updateCluster(cluster, func(c *pgv1.PostgresCluster) { c.Spec.Instances = 2 })
		Eventually(func(g Gomega) {
			sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: c.Name, Namespace: c.Namespace}}
			g.Expect(get(sts)).To(Succeed())
			g.Expect(*sts.Spec.Replicas).To(Equal(int32(2)))
		}).Should(Succeed())
		Expect(get(secret)).To(Succeed())
		Expect(string(secret.Data[corev1.BasicAuthPasswordKey])).To(Equal(password))
	})

	It("heals drift: a scaled StatefulSet and a deleted Service", func() {
		sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: cluster.Name, Namespace: cluster.Namespace}}
		Eventually(get).WithArguments(sts).Should(Succeed())
		// As kubectl scale does: read, change, write, again when the StatefulSet changed between.
		Eventually(func() error {
			if err := get(sts); err != nil {
				return err
			}
			sts.Spec.Replicas = ptr.To(int32(1))
			return k8sClient.Update(ctx, sts, client.FieldOwner("kubectl-scale"))
		}).Should(Succeed())

		rw := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: pgbuilder.ReadWriteServiceName(cluster), Namespace: cluster.Namespace}}
		Eventually(get).WithArguments(rw).Should(Succeed())
		oldUID := rw.UID
		Expect(k8sClient.Delete(ctx, rw)).To(Succeed())

		Eventually(func(g Gomega) {
			g.Expect(get(sts)).To(Succeed())
			g.Expect(*sts.Spec.Replicas).To(Equal(int32(3)))
			g.Expect(get(rw)).To(Succeed())
			g.Expect(rw.UID).NotTo(Equal(oldUID))
		}).Should(Succeed())
	})

	It("creates the primary Lease again when it is deleted", func() {
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: pgbuilder.PrimaryLeaseName(cluster), Namespace: cluster.Namespace}}
		Eventually(get).WithArguments(lease).Should(Succeed())
		oldUID := lease.UID
		Expect(k8sClient.Delete(ctx, lease)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(get(lease)).To(Succeed())
			g.Expect(lease.UID).NotTo(Equal(oldUID))
		}).Should(Succeed())
	})

	It("leaves an idle cluster alone: no writes across several reconciles", func() {
		Eventually(func(g Gomega) {
			g.Expect(fetch(cluster).Status.Phase).To(Equal(pgv1.PhaseBootstrapping))
		}).Should(Succeed())
		// Let the creation burst settle (owned-object events reconcile once more).
		Eventually(func() int {
			before := writes.count(cluster.Namespace)
			time.Sleep(2 * testRequeueInterval)
			return writes.count(cluster.Namespace) - before
		}).Should(BeZero())

		versions := resourceVersions(cluster)
		writesBefore := writes.count(cluster.Namespace)
		reconcilesBefore := reconcileCount()
		time.Sleep(5 * testRequeueInterval)

		// Bootstrapping polls at half the time waited so far (the pods' events end the wait).
		Expect(reconcileCount()-reconcilesBefore).To(BeNumerically(">=", 1), "the cluster should have been requeued while waiting")
		Expect(writes.count(cluster.Namespace)).To(Equal(writesBefore), "an idle cluster must cost no API writes")
		Expect(resourceVersions(cluster)).To(Equal(versions))
	})

	It("heals drift of an idle cluster whose reconciles skip comparing unchanged children", func() {
		key := client.ObjectKeyFromObject(cluster)
		Eventually(func(g Gomega) {
			record, ok := testReconciler.memory().unchanged.get(key)
			g.Expect(ok).To(BeTrue(), "no reconcile found every owned object up to date")
			g.Expect(record.clusterVersion).To(Equal(fetch(cluster).ResourceVersion))
			// ServiceAccount, Role, RoleBinding, ConfigMap, StatefulSet, 4 Services, PodDisruptionBudget.
			g.Expect(record.children).To(HaveLen(10))
		}).Should(Succeed())

		configMap := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: pgbuilder.ConfigMapName(cluster), Namespace: cluster.Namespace}}
		Expect(get(configMap)).To(Succeed())
		wantConf := configMap.Data[agentapi.PostgresqlConfFile]
		configMap.Data[agentapi.PostgresqlConfFile] = "max_connections = 1\n"
		Expect(k8sClient.Update(ctx, configMap, client.FieldOwner("someone-else"))).To(Succeed())
		ro := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: pgbuilder.ReadOnlyServiceName(cluster), Namespace: cluster.Namespace}}
		Expect(get(ro)).To(Succeed())
		wantSelector := ro.Spec.Selector
		ro.Spec.Selector = map[string]string{"app": "elsewhere"}
		Expect(k8sClient.Update(ctx, ro, client.FieldOwner("someone-else"))).To(Succeed())

		Eventually(func(g Gomega) {
			g.Expect(get(configMap)).To(Succeed())
			g.Expect(configMap.Data[agentapi.PostgresqlConfFile]).To(Equal(wantConf))
			g.Expect(get(ro)).To(Succeed())
			g.Expect(ro.Spec.Selector).To(Equal(wantSelector))
		}).Should(Succeed())
	})

	It("lets garbage collection remove the children when the cluster is deleted", func() {
		for _, child := range children(cluster) {
			Eventually(get).WithArguments(child).Should(Succeed())
		}
		Expect(k8sClient.Delete(ctx, fetch(cluster))).To(Succeed())
		for _, child := range children(cluster) {
			Eventually(func() bool { return apierrors.IsNotFound(get(child)) }).Should(BeTrue(), "%T %s", child, child.GetName())
		}
	})
})

var _ = Describe("A user-supplied application secret", func() {
	It("is reported while missing and used once it exists", func() {
		namespace := newNamespace()
		cluster := createCluster(newCluster(namespace, func(c *pgv1.PostgresCluster) {
			c.Spec.Bootstrap.InitDB.Secret = &corev1.LocalObjectReference{Name: "my-app-login"}
		}))
		Eventually(func(g Gomega) {
			degraded := condition(fetch(cluster), pgv1.ConditionDegraded)
			g.Expect(degraded).NotTo(BeNil())
			g.Expect(degraded.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(degraded.Reason).To(Equal("AppSecretNotFound"))
			g.Expect(degraded.Message).To(ContainSubstring("my-app-login"))
		}).Should(Succeed())
		Eventually(eventReasons).WithArguments(cluster).Should(ContainElement("AppSecretNotFound"))
		Expect(apierrors.IsNotFound(get(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db-app", Namespace: namespace}}))).To(BeTrue())

		Expect(k8sClient.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "my-app-login", Namespace: namespace},
			Type:       corev1.SecretTypeBasicAuth,
			StringData: map[string]string{"username": "app", "password": "s3cret-from-the-user"},
		})).To(Succeed())
		Eventually(func(g Gomega) {
			c := fetch(cluster)
			g.Expect(condition(c, pgv1.ConditionDegraded).Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Status.Phase).To(Equal(pgv1.PhaseBootstrapping))
		}).Should(Succeed())
	})

	It("may not name a role pgpilot manages: its password would become the Secret's", func() {
		namespace := newNamespace()
		Expect(k8sClient.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "my-app-login", Namespace: namespace},
			Type:       corev1.SecretTypeBasicAuth,
			StringData: map[string]string{"username": "postgres", "password": "now-i-am-superuser"},
		})).To(Succeed())
		cluster := createCluster(newCluster(namespace, func(c *pgv1.PostgresCluster) {
			c.Spec.Bootstrap.InitDB.Secret = &corev1.LocalObjectReference{Name: "my-app-login"}
		}))
		Eventually(func(g Gomega) {
			degraded := condition(fetch(cluster), pgv1.ConditionDegraded)
			g.Expect(degraded).NotTo(BeNil())
			g.Expect(degraded.Reason).To(Equal("AppSecretInvalid"))
			g.Expect(degraded.Message).To(ContainSubstring(`names "postgres", a role pgpilot manages`))
		}).Should(Succeed())
	})
})

var _ = Describe("CRD validation", func() {
	var namespace string
	BeforeEach(func() { namespace = newNamespace() })

	DescribeTable("rejects an invalid new cluster with a clear message",
		func(mutate func(*pgv1.PostgresCluster), message string) {
			err := k8sClient.Create(ctx, newCluster(namespace, mutate))
			Expect(err).To(HaveOccurred())
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), err.Error())
			Expect(err.Error()).To(ContainSubstring(message))
		},
		Entry("a managed parameter", func(c *pgv1.PostgresCluster) {
			c.Spec.PostgreSQL.Parameters = map[string]pgv1.ParameterValue{"port": "6543", "work_mem": "8MB"}
		}, "postgresql.parameters.port is managed by pgpilot and cannot be set"),
		Entry("two managed parameters", func(c *pgv1.PostgresCluster) {
			c.Spec.PostgreSQL.Parameters = map[string]pgv1.ParameterValue{"wal_level": "minimal", "listen_addresses": "*"}
		}, "postgresql.parameters.listen_addresses is managed by pgpilot"),
		Entry("a parameter name that hides a second setting", func(c *pgv1.PostgresCluster) {
			c.Spec.PostgreSQL.Parameters = map[string]pgv1.ParameterValue{"a = 1\nwal_level": "minimal"}
		}, "postgresql.parameters names must be PostgreSQL setting names"),
		Entry("an include directive", func(c *pgv1.PostgresCluster) {
			c.Spec.PostgreSQL.Parameters = map[string]pgv1.ParameterValue{"Include_Dir": "/tmp"}
		}, "postgresql.parameters cannot set include, include_dir or include_if_exists"),
		Entry("a managed parameter in upper case", func(c *pgv1.PostgresCluster) {
			c.Spec.PostgreSQL.Parameters = map[string]pgv1.ParameterValue{"WAL_LEVEL": "minimal"}
		}, "postgresql.parameters names a setting pgpilot manages or restricts in other letter case"),
		Entry("a line break in a parameter value", func(c *pgv1.PostgresCluster) {
			c.Spec.PostgreSQL.Parameters = map[string]pgv1.ParameterValue{"search_path": "\\'\nwal_level = minimal\n#"}
		}, "postgresql.parameters values cannot contain line breaks or NUL characters"),
		Entry("a parameter value longer than any setting", func(c *pgv1.PostgresCluster) {
			c.Spec.PostgreSQL.Parameters = map[string]pgv1.ParameterValue{"application_name": pgv1.ParameterValue(strings.Repeat("x", 4097))}
		}, "spec.postgresql.parameters.application_name: Too long"),
		Entry("a NUL in a parameter value", func(c *pgv1.PostgresCluster) {
			c.Spec.PostgreSQL.Parameters = map[string]pgv1.ParameterValue{"application_name": "a\x00b"}
		}, "postgresql.parameters values cannot contain line breaks or NUL characters"),
		Entry("a second pg_hba line in an entry", func(c *pgv1.PostgresCluster) {
			c.Spec.PostgreSQL.PgHBA = []string{"host all all 10.0.0.0/8 reject\nhost all all all trust"}
		}, "postgresql.pgHBA entries cannot contain line breaks or NUL characters"),
		Entry("a pg_hba entry continued onto pgpilot's rules", func(c *pgv1.PostgresCluster) {
			c.Spec.PostgreSQL.PgHBA = []string{"host all all all trust \\ "}
		}, "postgresql.pgHBA entries cannot end with a backslash"),
		Entry("a name longer than its children allow", func(c *pgv1.PostgresCluster) {
			c.Name = strings.Repeat("a", pgv1.MaxClusterNameLength+1)
		}, "metadata.name may have at most 52 characters"),
		Entry("a name with a dot, which no Service can carry", func(c *pgv1.PostgresCluster) { c.Name = "db.prod" },
			"metadata.name must be lower-case letters"),
		Entry("a name starting with a digit", func(c *pgv1.PostgresCluster) { c.Name = "1db" }, "start with a letter"),
		Entry("too many instances", func(c *pgv1.PostgresCluster) { c.Spec.Instances = 10 }, "spec.instances"),
		Entry("a bad database name", func(c *pgv1.PostgresCluster) { c.Spec.Bootstrap.InitDB.Database = "My-DB" }, "spec.bootstrap.initdb.database"),
		Entry("an unknown reclaim policy", func(c *pgv1.PostgresCluster) { c.Spec.Storage.ReclaimPolicy = "Recycle" }, "spec.storage.reclaimPolicy"),
		Entry("a negative size", func(c *pgv1.PostgresCluster) { c.Spec.Storage.Size = resource.MustParse("-1Gi") },
			"storage.size must be at least 64Mi"),
		Entry("a zero size", func(c *pgv1.PostgresCluster) { c.Spec.Storage.Size = resource.MustParse("0") },
			"storage.size must be at least 64Mi"),
		Entry("a size too small for initdb", func(c *pgv1.PostgresCluster) { c.Spec.Storage.Size = resource.MustParse("1Mi") },
			"storage.size must be at least 64Mi"),
		Entry("an archive_command of the user's", func(c *pgv1.PostgresCluster) {
			c.Spec.PostgreSQL.Parameters = map[string]pgv1.ParameterValue{"archive_command": "cp %p /tmp"}
		}, "postgresql.parameters.archive_command is managed by pgpilot"),
		Entry("a repository endpoint with a scheme", func(c *pgv1.PostgresCluster) {
			c.Spec.Backup = &pgv1.ClusterBackupSpec{Repository: testRepository()}
			c.Spec.Backup.Repository.Endpoint = "https://s3.example.com"
		}, "without http:// or https://"),
		Entry("two recovery targets", func(c *pgv1.PostgresCluster) {
			c.Spec.Bootstrap.Recovery = &pgv1.RecoverySpec{Repository: testRepository(), ClusterName: "old",
				Target: &pgv1.RecoveryTarget{Time: "2026-12-01T10:00:00Z", LSN: "0/3000060"}}
		}, "bootstrap.recovery.target takes at most one of time, lsn, xid, name and immediate"),
		Entry("a recovery time without its zone", func(c *pgv1.PostgresCluster) {
			c.Spec.Bootstrap.Recovery = &pgv1.RecoverySpec{Repository: testRepository(), ClusterName: "old",
				Target: &pgv1.RecoveryTarget{Time: "2026-12-01 10:00:00"}}
		}, "spec.bootstrap.recovery.target.time"),
		Entry("a restored cluster archiving into the repository it recovers from", func(c *pgv1.PostgresCluster) {
			c.Spec.Backup = &pgv1.ClusterBackupSpec{Repository: testRepository()}
			c.Spec.Bootstrap.Recovery = &pgv1.RecoverySpec{Repository: testRepository(), ClusterName: c.Name}
		}, "spec.backup.repository would be the repository the cluster recovers from"),
		Entry("custom queries naming both a ConfigMap and a Secret", func(c *pgv1.PostgresCluster) {
			c.Spec.Monitoring.CustomQueries = []pgv1.CustomQueriesSource{{
				ConfigMap: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "q"}, Key: "q.yaml"},
				Secret:    &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "q"}, Key: "q.yaml"}}}
		}, "name exactly one of configMap and secret"),
		Entry("custom queries naming neither", func(c *pgv1.PostgresCluster) {
			c.Spec.Monitoring.CustomQueries = []pgv1.CustomQueriesSource{{}}
		}, "name exactly one of configMap and secret"),
		Entry("a scrape interval that is not a duration", func(c *pgv1.PostgresCluster) {
			c.Spec.Monitoring.PodMonitor = &pgv1.PodMonitorSpec{Enabled: true, Interval: "30 seconds"}
		}, "spec.monitoring.podMonitor.interval"),
	)

	It("accepts a cluster restored from another one's repository that archives into its own", func() {
		createCluster(newCluster(namespace, func(c *pgv1.PostgresCluster) {
			c.Spec.Backup = &pgv1.ClusterBackupSpec{Repository: testRepository()}
			c.Spec.Bootstrap.Recovery = &pgv1.RecoverySpec{Repository: testRepository(), ClusterName: "old",
				Target: &pgv1.RecoveryTarget{Time: "2026-12-01T10:00:00.25+01:00", Exclusive: ptr.To(true)}}
		}))
	})

	It("keeps a Backup's spec as created", func() {
		b := &pgv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: namespace},
			Spec: pgv1.BackupSpec{Cluster: corev1.LocalObjectReference{Name: "db"}}}
		Expect(k8sClient.Create(ctx, b)).To(Succeed())
		Expect(b.Spec.Type).To(Equal(pgv1.BackupFull))
		b.Spec.Type = pgv1.BackupIncr
		err := k8sClient.Update(ctx, b)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("a Backup's spec is immutable"))
	})

	It("accepts the longest name and creates every child from it", func() {
		c := createCluster(newCluster(namespace, func(c *pgv1.PostgresCluster) {
			c.Name = "l" + strings.Repeat("o", pgv1.MaxClusterNameLength-2) + "g"
		}))
		Eventually(func(g Gomega) {
			sts := &appsv1.StatefulSet{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: namespace, Name: pgbuilder.StatefulSetName(c)}, sts)).To(Succeed())
			svc := &corev1.Service{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: namespace, Name: pgbuilder.HeadlessServiceName(c)}, svc)).To(Succeed())
			degraded := condition(fetch(c), pgv1.ConditionDegraded)
			g.Expect(degraded).NotTo(BeNil(), "no Degraded condition yet")
			g.Expect(degraded.Status).To(Equal(metav1.ConditionFalse))
		}).Should(Succeed())
	})

	It("rejects every parameter pgpilot manages, naming it", func() {
		for _, name := range pgv1.ManagedParameters {
			err := k8sClient.Create(ctx, newCluster(namespace, func(c *pgv1.PostgresCluster) {
				c.Spec.PostgreSQL.Parameters = map[string]pgv1.ParameterValue{name: "x", "work_mem": "8MB"}
			}))
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%s: %v", name, err)
			Expect(err.Error()).To(ContainSubstring(pgv1.ManagedParameterMessage(name)))
		}
	})

	It("rejects every parameter that runs a command or loads code, in any letter case, and libraries the images do not ship", func() {
		for _, name := range pgv1.ForbiddenParameters {
			for _, spelling := range []string{name, strings.ToUpper(name)} {
				err := k8sClient.Create(ctx, newCluster(namespace, func(c *pgv1.PostgresCluster) {
					c.Spec.PostgreSQL.Parameters = map[string]pgv1.ParameterValue{spelling: "x"}
				}))
				Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%s: %v", spelling, err)
			}
		}
		for _, value := range []string{"pgaudit,/tmp/evil", "$libdir/evil", "pg_stat_statements, plpython3u"} {
			err := k8sClient.Create(ctx, newCluster(namespace, func(c *pgv1.PostgresCluster) {
				c.Spec.PostgreSQL.Parameters = map[string]pgv1.ParameterValue{"shared_preload_libraries": pgv1.ParameterValue(value)}
			}))
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%s: %v", value, err)
			Expect(err.Error()).To(ContainSubstring(pgv1.PreloadLibrariesMessage))
		}
		createCluster(newCluster(namespace, func(c *pgv1.PostgresCluster) {
			c.Spec.PostgreSQL.Parameters = map[string]pgv1.ParameterValue{"shared_preload_libraries": "pg_stat_statements, pgaudit,auto_explain"}
		}))
	})

	It("rejects pg_hba entries for pgpilot's roles, the replication database or other files, and accepts the application's", func() {
		for _, entry := range []string{"host all postgres 0.0.0.0/0 trust", "host replication all 0.0.0.0/0 trust",
			`hostssl all "streaming_replica" all trust`, "host all app,pgpilot_monitor 10.0.0.0/8 password",
			"hostssl db,replication all all trust", "include /etc/passwd", "  include_dir /tmp"} {
			err := k8sClient.Create(ctx, newCluster(namespace, func(c *pgv1.PostgresCluster) { c.Spec.PostgreSQL.PgHBA = []string{entry} }))
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%q: %v", entry, err)
		}
		for i, entry := range []string{"host app app 10.0.0.0/8 trust", "host postgres app 10.0.0.0/8 scram-sha-256",
			"hostssl all postgres_reader 10.0.0.0/8 scram-sha-256"} {
			createCluster(newCluster(namespace, func(c *pgv1.PostgresCluster) {
				c.Name = fmt.Sprintf("hba%d", i)
				c.Spec.PostgreSQL.PgHBA = []string{entry}
			}))
		}
	})

	It("rejects an application owner that is a role pgpilot manages or PostgreSQL reserves", func() {
		for _, owner := range []string{"postgres", "streaming_replica", "pgpilot_monitor", "pg_monitor"} {
			err := k8sClient.Create(ctx, newCluster(namespace, func(c *pgv1.PostgresCluster) { c.Spec.Bootstrap.InitDB.Owner = owner }))
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%s: %v", owner, err)
			Expect(err.Error()).To(ContainSubstring("bootstrap.initdb.owner cannot be a role pgpilot manages"))
		}
	})

	It("rejects managed roles that are pgpilot's, the application owner, or members of roles acting as the server", func() {
		secret := &corev1.LocalObjectReference{Name: "pw"}
		for what, role := range map[string]pgv1.ManagedRoleSpec{
			"roles[].name cannot be a role pgpilot manages":       {Name: "streaming_replica"},
			"roles[].name cannot be a role pgpilot manages ":      {Name: "pg_signal"},
			"cannot name the application owner":                   {Name: "app"},
			"cannot name the application owner ":                  {Name: "reader", InRoles: []string{"app"}},
			"roles[].inRoles cannot name a role pgpilot manages":  {Name: "reader", InRoles: []string{"pg_read_all_data", "pg_execute_server_program"}},
			"roles[].inRoles cannot name a role pgpilot manages ": {Name: "reader", InRoles: []string{"postgres"}},
			"passwordSecret or has it removed by disablePassword": {Name: "reader", PasswordSecret: secret, DisablePassword: true},
		} {
			err := k8sClient.Create(ctx, newCluster(namespace, func(c *pgv1.PostgresCluster) { c.Spec.Roles = []pgv1.ManagedRoleSpec{role} }))
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%+v: %v", role, err)
			Expect(err.Error()).To(ContainSubstring(strings.TrimSpace(what)))
		}
		createCluster(newCluster(namespace, func(c *pgv1.PostgresCluster) {
			c.Name = "roles"
			c.Spec.Roles = []pgv1.ManagedRoleSpec{{Name: "reporting"}, {Name: "reader", Login: true, InRoles: []string{"reporting", "pg_read_all_data"}, PasswordSecret: secret}}
		}))
	})

	It("rejects Databases that name pgpilot's databases or roles, and changes to what is set once", func() {
		database := func(change func(*pgv1.Database)) *pgv1.Database {
			db := &pgv1.Database{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: namespace},
				Spec: pgv1.DatabaseSpec{Cluster: corev1.LocalObjectReference{Name: "db"}, Name: "shop", Owner: "shop"}}
			change(db)
			return db
		}
		for what, change := range map[string]func(*pgv1.Database){
			"name cannot be postgres, template0 or template1": func(db *pgv1.Database) { db.Spec.Name = "template1" },
			"owner cannot be a role pgpilot keeps for itself": func(db *pgv1.Database) { db.Spec.Owner = "streaming_replica" },
			"schemas[].name cannot be information_schema":     func(db *pgv1.Database) { db.Spec.Schemas = []pgv1.DatabaseSchemaSpec{{Name: "pg_temp"}} },
			"spec.reclaimPolicy":                              func(db *pgv1.Database) { db.Spec.ReclaimPolicy = "drop" },
		} {
			err := k8sClient.Create(ctx, database(change))
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%s: %v", what, err)
			Expect(err.Error()).To(ContainSubstring(what))
		}
		db := database(func(db *pgv1.Database) {})
		Expect(k8sClient.Create(ctx, db)).To(Succeed())
		Expect(db.Spec.ReclaimPolicy).To(Equal(pgv1.ReclaimRetain), "retain is the default")
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(db), db)).To(Succeed())
			g.Expect(db.Status.Message).To(Equal("PostgresCluster db does not exist"))
		}).Should(Succeed(), "a Database of no cluster says so")
		for what, change := range map[string]func(*pgv1.Database){
			"name cannot change":      func(db *pgv1.Database) { db.Spec.Name = "shop2" },
			"cluster cannot change":   func(db *pgv1.Database) { db.Spec.Cluster.Name = "other" },
			"encoding and locale are": func(db *pgv1.Database) { db.Spec.Encoding = "LATIN1" },
		} {
			changed := db.DeepCopy()
			change(changed)
			err := k8sClient.Patch(ctx, changed, client.MergeFrom(db))
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%s: %v", what, err)
			Expect(err.Error()).To(ContainSubstring(what))
		}
	})

	It("rejects repository values that would add options to pgbackrest.conf", func() {
		for field, mutate := range map[string]func(*pgv1.PostgresCluster){
			"spec.backup.repository.region": func(c *pgv1.PostgresCluster) {
				r := testRepository()
				r.Region = "us-east-1\nrepo1-storage-verify-tls=n"
				c.Spec.Backup = &pgv1.ClusterBackupSpec{Repository: r}
			},
			"spec.bootstrap.recovery.clusterName": func(c *pgv1.PostgresCluster) {
				c.Spec.Bootstrap = pgv1.BootstrapSpec{Recovery: &pgv1.RecoverySpec{Repository: testRepository(), ClusterName: "db\n[global:archive-push]"}}
			},
			"spec.bootstrap.recovery.namespace": func(c *pgv1.PostgresCluster) {
				c.Spec.Bootstrap = pgv1.BootstrapSpec{Recovery: &pgv1.RecoverySpec{Repository: testRepository(), ClusterName: "db", Namespace: "ns\nrepo1-path=/x"}}
			},
		} {
			err := k8sClient.Create(ctx, newCluster(namespace, mutate))
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%s: %v", field, err)
			Expect(err.Error()).To(ContainSubstring(field + ": Invalid value"))
		}
	})

	It("accepts parameters and pg_hba entries that only look hostile: pgpilot escapes them", func() {
		createCluster(newCluster(namespace, func(c *pgv1.PostgresCluster) {
			c.Spec.PostgreSQL.Parameters = map[string]pgv1.ParameterValue{
				"application_name":       `it's a \ # = caf\u00e9`,
				"search_path":            `public\`,
				"TimeZone":               "UTC",
				"pg_stat_statements.max": "1000",
			}
			c.Spec.PostgreSQL.PgHBA = []string{`host all all 10.0.0.0/8 scram-sha-256 # a \ comment`}
		}))
	})

	DescribeTable("rejects a forbidden change with a clear message",
		func(mutate func(*pgv1.PostgresCluster), message string) {
			c := createCluster(newCluster(namespace, func(c *pgv1.PostgresCluster) {
				c.Spec.Storage.Size = resource.MustParse("2Gi")
				c.Spec.Storage.StorageClassName = ptr.To("fast")
			}))
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				c = fetch(c)
				mutate(c)
				return k8sClient.Update(ctx, c)
			})
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
			Expect(err.Error()).To(ContainSubstring(message))
		},
		Entry("shrinking storage", func(c *pgv1.PostgresCluster) { c.Spec.Storage.Size = resource.MustParse("1536Mi") },
			"storage.size cannot shrink"),
		Entry("changing the storage class", func(c *pgv1.PostgresCluster) { c.Spec.Storage.StorageClassName = ptr.To("slow") },
			"storage.storageClassName is immutable"),
		Entry("dropping the storage class", func(c *pgv1.PostgresCluster) { c.Spec.Storage.StorageClassName = nil },
			"storage.storageClassName is immutable"),
		Entry("changing the bootstrap", func(c *pgv1.PostgresCluster) { c.Spec.Bootstrap.InitDB.Database = "other" },
			"spec.bootstrap is immutable"),
	)

	It("accepts growing storage and applies the defaults", func() {
		c := fetch(createCluster(newCluster(namespace, func(c *pgv1.PostgresCluster) { c.Spec.Instances = 0 })))
		Expect(c.Spec.Instances).To(Equal(int32(3)))
		Expect(c.Spec.Storage.ReclaimPolicy).To(Equal(pgv1.PVCReclaimRetain))
		Expect(c.Spec.Bootstrap.InitDB.Database).To(Equal("app"))
		Expect(c.Spec.Bootstrap.InitDB.Owner).To(Equal("app"))
		c = updateCluster(c, func(c *pgv1.PostgresCluster) { c.Spec.Storage.Size = resource.MustParse("5Gi") })
		Expect(c.Spec.Storage.Size.String()).To(Equal("5Gi"))
	})
})

func testRepository() pgv1.BackupRepository {
	return pgv1.BackupRepository{Endpoint: "s3.example.com", Bucket: "backups", CredentialsSecret: corev1.LocalObjectReference{Name: "s3"}}
}
