//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

type storageClassList struct{ storagev1.StorageClassList }

func (l *storageClassList) defaultName() string {
	for _, sc := range l.Items {
		if sc.Annotations["storageclass.kubernetes.io/is-default-class"] == "true" {
			return sc.Name
		}
	}
	return ""
}

// loadSample reads config/samples' PostgresCluster into namespace ns, with the superuser's
// network access on: the specs check data as the superuser from Jobs (the third-party spec
// checks that a cluster without it refuses).
func loadSample(ns string) *pgv1.PostgresCluster {
	cluster := &pgv1.PostgresCluster{}
	readManifest("samples/postgres_v1alpha1_postgrescluster.yaml", cluster)
	cluster.Namespace = ns
	cluster.Spec.EnableSuperuserAccess = ptr.To(true)
	return cluster
}

// synchronousCluster is the sample named name in a new namespace (prefix e2e-<name>), with
// instances, its volumes deleted with it, default parameters, and every acknowledged commit on a
// standby too (ANY 1, required): the fault specs lose none.
func synchronousCluster(ctx context.Context, name string, instances int32) *pgv1.PostgresCluster {
	cluster := loadSample(newNamespace(ctx, "e2e-"+name))
	cluster.Name = name
	cluster.Spec.Instances = instances
	cluster.Spec.Storage.ReclaimPolicy = pgv1.PVCReclaimDelete
	cluster.Spec.PostgreSQL.Parameters = nil
	cluster.Spec.PostgreSQL.Synchronous = &pgv1.SynchronousSpec{Method: pgv1.SynchronousAny, Number: 1,
		DataDurability: pgv1.DurabilityRequired}
	return cluster
}

// clusterPods lists the instance pods of a cluster by the label pgpilot puts on them.
func clusterPods(ctx context.Context, c *pgv1.PostgresCluster) []corev1.Pod {
	pods := &corev1.PodList{}
	Expect(k8s.List(ctx, pods, client.InNamespace(c.Namespace),
		client.MatchingLabels{"postgres.pgpilot.io/cluster": c.Name})).To(Succeed())
	return pods.Items
}

func clusterClaims(ctx context.Context, c *pgv1.PostgresCluster) []corev1.PersistentVolumeClaim {
	claims := &corev1.PersistentVolumeClaimList{}
	Expect(k8s.List(ctx, claims, client.InNamespace(c.Namespace),
		client.MatchingLabels{"postgres.pgpilot.io/cluster": c.Name})).To(Succeed())
	return claims.Items
}

func podReady(pod *corev1.Pod) bool {
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// runJob runs a one-container Job to completion and returns its pod's log. It fails the spec,
// with the log, when the Job fails.
func runJob(ctx context.Context, ns, name string, pod corev1.PodSpec) string {
	logs, ok := tryJob(ctx, ns, name, pod)
	Expect(ok).To(BeTrue(), "job %s failed:\n%s", name, logs)
	return logs
}

// tryJob runs a one-container Job to completion and returns its pod's log and whether it
// succeeded, for checks that are retried until they pass.
func tryJob(ctx context.Context, ns, name string, pod corev1.PodSpec) (string, bool) {
	pod.RestartPolicy = corev1.RestartPolicyNever
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: batchv1.JobSpec{
			BackoffLimit:            ptr.To[int32](0),
			TTLSecondsAfterFinished: ptr.To[int32](600),
			Template:                corev1.PodTemplateSpec{Spec: pod},
		},
	}
	Expect(k8s.Create(ctx, job)).To(Succeed())
	var finished batchv1.JobConditionType
	Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(job), job)).To(Succeed())
		for _, cond := range job.Status.Conditions {
			if (cond.Type == batchv1.JobComplete || cond.Type == batchv1.JobFailed) && cond.Status == corev1.ConditionTrue {
				finished = cond.Type
			}
		}
		g.Expect(finished).NotTo(BeEmpty(), "job %s still running", name)
	}).Should(Succeed())
	return jobLogs(ctx, ns, name), finished == batchv1.JobComplete
}

func jobLogs(ctx context.Context, ns, job string) string {
	pods := &corev1.PodList{}
	Expect(k8s.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{"job-name": job})).To(Succeed())
	var out strings.Builder
	for _, pod := range pods.Items {
		fmt.Fprintf(&out, "--- pod %s (%s)\n", pod.Name, pod.Status.Phase)
		stream, err := clientset.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{}).Stream(ctx)
		if err != nil {
			fmt.Fprintf(&out, "no log: %v\n", err)
			continue
		}
		_, _ = io.Copy(&out, stream)
		_ = stream.Close()
	}
	return out.String()
}

// restrictedContainer applies the restricted Pod Security profile to a test container.
func restrictedContainer(c corev1.Container) corev1.Container {
	c.ImagePullPolicy = corev1.PullIfNotPresent
	c.SecurityContext = &corev1.SecurityContext{
		RunAsNonRoot:             ptr.To(true),
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	return c
}

// dumpOnFailure prints what the operator logged when a spec fails, for the CI log.
func dumpOnFailure(ctx context.Context) {
	if !CurrentSpecReport().Failed() {
		return
	}
	AddReportEntry("operator log", deploymentLogTail(ctx, operatorNamespace, operatorDeployment, 100))
	AddReportEntry("instance logs", instanceLogTails(ctx, 30))
	AddReportEntry("what the agents said", agentLogLines(ctx, 40))
}

// agentLogLines is, for every instance pod, the last lines the agent itself logged (the records
// of its own decisions: fences, promotions, upgrades, errors) out of the last thousands of lines
// of the container, which PostgreSQL's and its tools' output fill.
func agentLogLines(ctx context.Context, lines int) string {
	return eachInstanceLog(ctx, []bool{false}, 5000, func(data []byte) string {
		var agent []string
		for line := range strings.Lines(string(data)) {
			if strings.Contains(line, `"logger":"agent"`) {
				agent = append(agent, line)
			}
		}
		return strings.Join(agent[max(0, len(agent)-lines):], "")
	})
}

// instanceLogTails is the end of the PostgreSQL container's log of every instance pod, and of
// its previous run when it restarted.
func instanceLogTails(ctx context.Context, lines int64) string {
	return eachInstanceLog(ctx, []bool{true, false}, lines, func(data []byte) string { return string(data) })
}

// eachInstanceLog is what show makes of the last lines of the PostgreSQL container's log of
// every instance pod, for each of its runs asked for (previous or current) that has one.
func eachInstanceLog(ctx context.Context, runs []bool, lines int64, show func([]byte) string) string {
	pods := &corev1.PodList{}
	if err := k8s.List(ctx, pods, client.MatchingLabels{"app.kubernetes.io/managed-by": "pgpilot"}); err != nil {
		return err.Error()
	}
	var out strings.Builder
	for _, pod := range pods.Items {
		for _, previous := range runs {
			stream, err := clientset.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{
				Container: "postgres", Previous: previous, TailLines: ptr.To(lines)}).Stream(ctx)
			if err != nil {
				continue // no previous run, or the node is down
			}
			data, _ := io.ReadAll(stream)
			_ = stream.Close()
			fmt.Fprintf(&out, "--- %s/%s (previous run: %v)\n%s", pod.Namespace, pod.Name, previous, show(data))
		}
	}
	return out.String()
}

// deploymentLogTail is the end of the log of each pod of a Deployment (by its pods' name prefix).
func deploymentLogTail(ctx context.Context, ns, deployment string, lines int64) string {
	pods := &corev1.PodList{}
	if err := k8s.List(ctx, pods, client.InNamespace(ns)); err != nil {
		return err.Error()
	}
	var out strings.Builder
	for _, pod := range pods.Items {
		if !strings.HasPrefix(pod.Name, deployment+"-") {
			continue
		}
		stream, err := clientset.CoreV1().Pods(ns).GetLogs(pod.Name,
			&corev1.PodLogOptions{TailLines: ptr.To(lines)}).Stream(ctx)
		if err != nil {
			fmt.Fprintf(&out, "%s: %v\n", pod.Name, err)
			continue
		}
		data, _ := io.ReadAll(stream)
		_ = stream.Close()
		fmt.Fprintf(&out, "--- %s\n%s", pod.Name, data)
	}
	return out.String()
}
