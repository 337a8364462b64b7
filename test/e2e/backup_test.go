//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// The local cluster's S3 service (`localcluster s3 up`, run by test/e2e/run.sh): VersityGW over
// TLS with a certificate of the cluster's CA, its keys and CA in Secrets of its namespace.
const (
	s3Namespace = "pgpilot-s3"
	s3Endpoint  = "s3.pgpilot-s3.svc"
	s3Bucket    = "pgpilot"
)

// Backups end to end: pgBackRest in the PostgreSQL image archives WAL to a real S3 server,
// Backups and ScheduledBackups fill the repository, and a new cluster recovers from it to a time
// chosen between two batches of rows, across an S3 outage and a switchover.
var _ = Describe("Backup and point-in-time recovery", Ordered, SpecPriority(longestSpecs), func() {
	var (
		source *pgv1.PostgresCluster
		rows   *rowBatches
		// firstBackup is the on-demand Backup, taken before the outage and the switchover.
		firstBackup *pgv1.Backup
	)

	BeforeAll(func(ctx SpecContext) {
		ns := newNamespace(ctx, "e2e-backup")
		copyS3Secrets(ctx, ns)
		source = loadSample(ns)
		source.Name = "source"
		source.Spec.Instances = 2
		source.Spec.Storage.ReclaimPolicy = pgv1.PVCReclaimDelete
		source.Spec.Backup = backupSpec()
		start := time.Now()
		Expect(k8s.Create(ctx, source)).To(Succeed())
		waitForReady(ctx, source, 8*time.Minute)
		AddReportEntry("backed-up cluster: kubectl apply to Ready, 2 instances", time.Since(start).Round(time.Second).String())
		rows = newRowBatches(ctx, source)
	})
	AfterEach(dumpOnFailure)

	It("archives WAL continuously into its repository", func(ctx SpecContext) {
		rows.insert(ctx, 1)
		segment := rows.switchWAL(ctx)
		waitForArchived(ctx, source, segment)
	})

	It("takes a full Backup on demand and records it", func(ctx SpecContext) {
		start := time.Now()
		firstBackup = takeBackup(ctx, source, "first", pgv1.BackupFull)
		AddReportEntry("on-demand full Backup to Completed", time.Since(start).Round(100*time.Millisecond).String())
		st := firstBackup.Status
		Expect(st.Instance).To(Equal(currentPrimary(ctx, source)))
		Expect(st.Label).To(HaveSuffix("F"))
		Expect(st.SizeBytes).To(BeNumerically(">", 0))
		Expect(st.RepositorySizeBytes).To(BeNumerically(">", 0))
		Expect(st.StartLSN).NotTo(BeEmpty())
		Expect(st.StopLSN).NotTo(BeEmpty())
		Expect(st.StartWAL).NotTo(BeEmpty())
		Expect(st.StopWAL >= st.StartWAL).To(BeTrue(), "WAL range %s–%s", st.StartWAL, st.StopWAL)
		Expect(st.StartedAt.Time).NotTo(BeTemporally(">", st.StoppedAt.Time))
		Eventually(func(g Gomega) {
			current := getCluster(ctx, source)
			g.Expect(current.Status.Backup).NotTo(BeNil())
			g.Expect(current.Status.Backup.LastBackup).To(Equal(st.Label))
			g.Expect(current.Status.Backup.FirstRecoverabilityPoint).NotTo(BeNil())
		}).WithTimeout(operatorReacts).Should(Succeed())
	})

	It("reports WAL archiving failing while S3 is unreachable, keeps the primary writable, and archives again once S3 is back", func(ctx SpecContext) {
		start := time.Now()
		// The outage is the primary's alone (S3 refuses its connections, as a stopped server
		// would): other specs back up to the same S3 service meanwhile.
		primary := &corev1.Pod{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: source.Namespace, Name: currentPrimary(ctx, source)}, primary)).To(Succeed())
		netns := podNetns(primary)
		cutS3(ctx, netns, true)
		s3Running := false
		DeferCleanup(func(ctx context.Context) {
			if !s3Running {
				cutS3(ctx, netns, false) // the specs after this one need it
			}
		})
		rows.insert(ctx, 2) // the primary accepts writes during the outage
		rows.switchWAL(ctx)
		Eventually(func(g Gomega) {
			current := getCluster(ctx, source)
			c := meta.FindStatusCondition(current.Status.Conditions, pgv1.ConditionContinuousArchiving)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal("ArchiveFailing"))
			degraded := meta.FindStatusCondition(current.Status.Conditions, pgv1.ConditionDegraded)
			g.Expect(degraded).NotTo(BeNil())
			g.Expect(degraded.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(current.Status.Backup.ArchiveFailures).To(BeNumerically(">", 0))
			g.Expect(current.Status.Backup.WALBytes).To(BeNumerically(">", 0))
			g.Expect(current.Status.Backup.VolumeFreeBytes).To(BeNumerically(">", 0))
			GinkgoWriter.Printf("during the outage: %s; %s\n", c.Message, degraded.Message)
		}).WithTimeout(4 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
		AddReportEntry("S3 stopped to ContinuousArchiving False (ArchiveFailing)", time.Since(start).Round(time.Second).String())
		Expect(clusterEventReasons(ctx, source, start)).To(ContainElement("ArchiveFailing"))
		rows.insert(ctx, 3)

		cutS3(ctx, netns, false)
		s3Running = true
		start = time.Now()
		// A new segment wakes PostgreSQL's archiver, which otherwise retries a minute after its
		// last failure; archiving in order, it reaches it only after the outage's segments.
		waitForArchived(ctx, source, rows.switchWAL(ctx))
		Eventually(func(g Gomega) {
			current := getCluster(ctx, source)
			g.Expect(meta.IsStatusConditionTrue(current.Status.Conditions, pgv1.ConditionContinuousArchiving)).To(BeTrue())
			g.Expect(meta.IsStatusConditionFalse(current.Status.Conditions, pgv1.ConditionDegraded)).To(BeTrue())
		}).WithTimeout(2 * time.Minute).Should(Succeed())
		AddReportEntry("S3 started to ContinuousArchiving True", time.Since(start).Round(time.Second).String())
	})

	It("archives on the new timeline after a switchover, and recovers a new cluster from the Backup taken before the outage "+
		"and the switchover to a time between two batches, with exactly the rows committed before it", func(ctx SpecContext) {
		current := getCluster(ctx, source)
		// This cluster replicates asynchronously (the default): README's "a switchover loses
		// nothing" holds there too, under the write checker.
		checker := startWriteChecker(ctx, source)
		time.Sleep(2 * time.Second)
		for _, st := range current.Status.InstancesStatus {
			if st.Name != current.Status.CurrentPrimary {
				checker.fault(rtoCrash)
				switchoverTo(ctx, source, st.Name)
				break
			}
		}
		checker.finish(ctx, "switchover, 2 instances, asynchronous")
		rows.insert(ctx, 4)
		target := rows.markTime()
		rows.insert(ctx, 5)
		segment := rows.switchWAL(ctx)
		Expect(segment[:8]).NotTo(Equal(firstBackup.Status.StartWAL[:8]), "the switchover did not change the timeline")
		waitForArchived(ctx, source, segment)
		restored := recoverInto(ctx, source, "restored", target)
		// Exactly the batches committed before the target: from the backup, the WAL archived
		// before, during and after the outage, across the switchover's timeline.
		Expect(rows.countsIn(ctx, restored)).To(Equal("1:100 2:100 3:100 4:100"))
		Expect(getCluster(ctx, restored).Status.Timeline).To(BeNumerically(">", 2),
			"the recovery did not promote onto a timeline of its own")
		Expect(k8s.Delete(ctx, restored)).To(Succeed())
	})

	It("takes Backups on a schedule and expires the oldest full backup by retention", func(ctx SpecContext) {
		schedule := &pgv1.ScheduledBackup{
			ObjectMeta: metav1.ObjectMeta{Namespace: source.Namespace, Name: "every-30s"},
			// A cron descriptor rather than five fields, whose next minute can be a minute away;
			// the controller's unit tests cover both forms (dueTime).
			Spec: pgv1.ScheduledBackupSpec{Cluster: corev1.LocalObjectReference{Name: source.Name},
				Schedule: "@every 30s", Type: pgv1.BackupFull, Immediate: true},
		}
		Expect(k8s.Create(ctx, schedule)).To(Succeed())
		var completed []string
		Eventually(func(g Gomega) {
			backups := &pgv1.BackupList{}
			g.Expect(k8s.List(ctx, backups, client.InNamespace(source.Namespace),
				client.MatchingLabels{"postgres.pgpilot.io/scheduled-backup": schedule.Name})).To(Succeed())
			completed = nil
			for _, b := range backups.Items {
				g.Expect(b.Status.Phase).NotTo(Equal(pgv1.BackupFailed), "Backup %s: %s", b.Name, b.Status.Error)
				if b.Status.Phase == pgv1.BackupCompleted {
					completed = append(completed, b.Name)
				}
			}
			g.Expect(len(completed)).To(BeNumerically(">=", 2))
		}).WithTimeout(4 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
		Expect(retryUpdate(ctx, schedule, func() { schedule.Spec.Suspend = true })).To(Succeed())
		GinkgoWriter.Printf("scheduled Backups completed: %v\n", completed)
		// retention.full 2: the third full backup expired the first one, and the WAL before
		// the oldest kept backup with it.
		Eventually(func(g Gomega) {
			current := getCluster(ctx, source)
			g.Expect(current.Status.Backup.Backups).To(BeEquivalentTo(2))
			g.Expect(current.Status.Backup.FirstRecoverabilityPoint.Time).To(BeTemporally(">", firstBackup.Status.StoppedAt.Time))
		}).WithTimeout(2 * time.Minute).Should(Succeed())
	})
})

// backupSpec is a repository in the local cluster's S3 service (path-style URIs: the service
// has no per-bucket DNS names), two full backups kept.
func backupSpec() *pgv1.ClusterBackupSpec {
	return &pgv1.ClusterBackupSpec{
		Repository: s3Repository(),
		Retention:  &pgv1.BackupRetention{Full: 2},
	}
}

func s3Repository() pgv1.BackupRepository {
	return pgv1.BackupRepository{
		Endpoint: s3Endpoint, Bucket: s3Bucket, URIStyle: "path",
		CredentialsSecret: corev1.LocalObjectReference{Name: "s3-credentials"},
		CASecret:          &corev1.LocalObjectReference{Name: "s3-ca"},
	}
}

// copyS3Secrets copies the S3 service's credentials and CA into ns, for clusters to refer to.
func copyS3Secrets(ctx context.Context, ns string) {
	for _, name := range []string{"s3-credentials", "s3-ca"} {
		secret := &corev1.Secret{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: s3Namespace, Name: name}, secret)).To(Succeed(),
			"the local cluster's S3 service: run the suite through test/e2e/run.sh")
		Expect(k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Type: secret.Type, Data: secret.Data})).To(Succeed())
	}
}

// cutS3 makes the S3 service refuse (on) the connections of the network namespace netns, as a
// stopped server would, or lets them through again (off).
func cutS3(ctx context.Context, netns string, on bool) {
	svc := &corev1.Service{}
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: s3Namespace, Name: "s3"}, svc)).To(Succeed())
	netnsRules(netns, on, [][]string{{"OUTPUT", "-d", svc.Spec.ClusterIP, "-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset"}})
}

// takeBackup creates a Backup of cluster and waits until it completed.
func takeBackup(ctx context.Context, cluster *pgv1.PostgresCluster, name string, kind pgv1.BackupType) *pgv1.Backup {
	backup := &pgv1.Backup{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace, Name: name},
		Spec:       pgv1.BackupSpec{Cluster: corev1.LocalObjectReference{Name: cluster.Name}, Type: kind},
	}
	Expect(k8s.Create(ctx, backup)).To(Succeed())
	Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(backup), backup)).To(Succeed())
		g.Expect(backup.Status.Phase).NotTo(Equal(pgv1.BackupFailed), backup.Status.Error)
		g.Expect(backup.Status.Phase).To(Equal(pgv1.BackupCompleted))
	}).WithTimeout(4 * time.Minute).WithPolling(time.Second).Should(Succeed())
	return backup
}

// recoverInto creates a one-instance cluster recovered from source's repository to target and
// waits for it to be Ready and archiving into its own repository path.
func recoverInto(ctx context.Context, source *pgv1.PostgresCluster, name string, target time.Time) *pgv1.PostgresCluster {
	restored := loadSample(source.Namespace)
	restored.Name = name
	restored.Spec.Instances = 1
	restored.Spec.PostgresVersion = source.Spec.PostgresVersion
	restored.Spec.Storage.ReclaimPolicy = pgv1.PVCReclaimDelete
	restored.Spec.Backup = backupSpec()
	restored.Spec.Bootstrap.Recovery = &pgv1.RecoverySpec{
		Repository: s3Repository(), ClusterName: source.Name,
		Target: &pgv1.RecoveryTarget{Time: target.UTC().Format(time.RFC3339)},
	}
	start := time.Now()
	Expect(k8s.Create(ctx, restored)).To(Succeed())
	waitForReady(ctx, restored, 8*time.Minute)
	AddReportEntry(fmt.Sprintf("recovery of %s to %s: kubectl apply to Ready", name, target.UTC().Format(time.RFC3339)),
		time.Since(start).Round(time.Second).String())
	Eventually(func(g Gomega) {
		current := getCluster(ctx, restored)
		g.Expect(meta.IsStatusConditionTrue(current.Status.Conditions, pgv1.ConditionContinuousArchiving)).To(BeTrue(),
			"%v", meta.FindStatusCondition(current.Status.Conditions, pgv1.ConditionContinuousArchiving))
	}).WithTimeout(2 * time.Minute).Should(Succeed())
	return restored
}

// waitForArchived waits until the cluster's status says WAL segment (or a later one) reached
// the repository.
func waitForArchived(ctx context.Context, cluster *pgv1.PostgresCluster, segment string) {
	Eventually(func(g Gomega) {
		current := getCluster(ctx, cluster)
		g.Expect(meta.IsStatusConditionTrue(current.Status.Conditions, pgv1.ConditionContinuousArchiving)).To(BeTrue(),
			"%v", meta.FindStatusCondition(current.Status.Conditions, pgv1.ConditionContinuousArchiving))
		g.Expect(current.Status.Backup).NotTo(BeNil())
		// Segment names of one timeline sort as their positions; a later timeline sorts after.
		g.Expect(current.Status.Backup.LastArchivedWAL >= segment).To(BeTrue(),
			"last archived %q, waiting for %s", current.Status.Backup.LastArchivedWAL, segment)
	}).WithTimeout(3 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
}

func getCluster(ctx context.Context, c *pgv1.PostgresCluster) *pgv1.PostgresCluster {
	current := &pgv1.PostgresCluster{}
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(c), current)).To(Succeed())
	return current
}

func currentPrimary(ctx context.Context, c *pgv1.PostgresCluster) string {
	return getCluster(ctx, c).Status.CurrentPrimary
}

// retryUpdate applies change to obj's latest version until the update does not conflict.
func retryUpdate(ctx context.Context, obj client.Object, change func()) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		change()
		return k8s.Update(ctx, obj)
	})
}
