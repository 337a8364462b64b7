//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// No password or token pgpilot handles may appear in a log line or on a command line (where any
// process of the pod reads it in /proc): after every spec, while its namespaces still exist, each
// password, token and S3 secret key in their Secrets is looked for in the operators' logs, in the
// logs of every instance container (and its previous run), and in the command line of every
// process running in the instance containers. Logs are read from where the last check left off,
// and command lines once per pod and restart, so that the check costs seconds.
var _ = AfterEach(func(ctx SpecContext) {
	secrets := map[string]string{} // value → where it comes from
	for _, ns := range activeSpecNamespaces(ctx) {
		list := &corev1.SecretList{}
		Expect(k8s.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		for _, secret := range list.Items {
			for key, value := range secret.Data {
				if sensitiveKey(key) && len(value) >= 12 {
					secrets[string(value)] = fmt.Sprintf("%s/%s[%s]", ns, secret.Name, key)
				}
			}
		}
	}
	if len(secrets) == 0 {
		return
	}
	texts := leakSources(ctx)
	var leaks []string
	for where, text := range texts {
		for value, secret := range secrets {
			if strings.Contains(text, value) {
				leaks = append(leaks, fmt.Sprintf("%s holds %s", where, secret))
			}
		}
	}
	Expect(leaks).To(BeEmpty(), "secrets in logs or command lines")
})

func sensitiveKey(key string) bool {
	key = strings.ToLower(key)
	return key == corev1.BasicAuthPasswordKey || strings.Contains(key, "token") || strings.Contains(key, "secret_key")
}

func activeSpecNamespaces(ctx context.Context) []string {
	var active []string
	for _, name := range specNamespaces {
		ns := &corev1.Namespace{}
		if k8s.Get(ctx, client.ObjectKey{Name: name}, ns) == nil && ns.Status.Phase == corev1.NamespaceActive {
			active = append(active, name)
		}
	}
	return active
}

// leakChecks remembers, in this process, how far each log was read and whose command lines were.
var leakChecks = struct {
	sync.Mutex
	logsReadUntil map[string]time.Time // pod UID/container → time of the last read
	cmdlinesRead  map[string]bool      // pod UID/restart count
}{logsReadUntil: map[string]time.Time{}, cmdlinesRead: map[string]bool{}}

// leakSources are the texts to search, by where they come from: new log lines of the
// operators and of every instance container, and the command lines of instance processes.
func leakSources(ctx context.Context) map[string]string {
	texts := map[string]string{}
	operators := &corev1.PodList{}
	Expect(k8s.List(ctx, operators, client.MatchingLabels{"control-plane": "controller-manager"})).To(Succeed())
	for _, pod := range operators.Items {
		texts["log of operator "+pod.Namespace+"/"+pod.Name] = newLogLines(ctx, &pod, "manager", false)
	}
	instances := &corev1.PodList{}
	Expect(k8s.List(ctx, instances, client.MatchingLabels{"app.kubernetes.io/managed-by": "pgpilot"})).To(Succeed())
	for _, pod := range instances.Items {
		if owner := metav1.GetControllerOf(&pod); owner == nil || owner.Kind != "StatefulSet" {
			continue // a pod that only carries the labels (the hostile-tenant decoy) runs no PostgreSQL
		}
		for _, previous := range []bool{false, true} {
			where := fmt.Sprintf("log of %s/%s (previous run: %v)", pod.Namespace, pod.Name, previous)
			texts[where] = newLogLines(ctx, &pod, "postgres", previous)
		}
		texts["command lines in "+pod.Namespace+"/"+pod.Name] = commandLines(ctx, &pod)
	}
	return texts
}

// newLogLines is the container's log since this process last read it (a previous run's, once).
func newLogLines(ctx context.Context, pod *corev1.Pod, container string, previous bool) string {
	restarts := int32(0)
	for _, status := range pod.Status.ContainerStatuses {
		if status.Name == container {
			restarts = status.RestartCount
		}
	}
	if previous && restarts == 0 {
		return ""
	}
	key := fmt.Sprintf("%s/%s/%v/%d", pod.UID, container, previous, restarts)
	leakChecks.Lock()
	since, read := leakChecks.logsReadUntil[key]
	leakChecks.Unlock()
	if previous && read {
		return ""
	}
	options := &corev1.PodLogOptions{Container: container, Previous: previous}
	if read {
		// A line written as the last read ended may be read twice, never missed.
		options.SinceTime = &metav1.Time{Time: since.Add(-2 * time.Second)}
	}
	now := time.Now()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second) // a node cut off by a fault spec
	defer cancel()
	stream, err := clientset.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, options).Stream(ctx)
	if err != nil {
		return "" // not started yet, or its node is down: read next time
	}
	defer func() { _ = stream.Close() }()
	data, err := io.ReadAll(stream)
	if err != nil {
		return string(data)
	}
	leakChecks.Lock()
	leakChecks.logsReadUntil[key] = now
	leakChecks.Unlock()
	return string(data)
}

// commandLines are the command lines of the processes in the pod's PostgreSQL container, read
// once per container start (the agent starts the server; pg_basebackup and pg_rewind come and go
// and are checked by the agent's own tests).
func commandLines(ctx context.Context, pod *corev1.Pod) string {
	var started *corev1.ContainerStatus
	for i, status := range pod.Status.ContainerStatuses {
		if status.Name == "postgres" && status.State.Running != nil && status.Ready {
			started = &pod.Status.ContainerStatuses[i]
		}
	}
	if started == nil {
		return ""
	}
	key := fmt.Sprintf("%s/%d", pod.UID, started.RestartCount)
	leakChecks.Lock()
	done := leakChecks.cmdlinesRead[key]
	leakChecks.Unlock()
	if done {
		return ""
	}
	out, err := execInPod(ctx, pod.Namespace, pod.Name, "postgres",
		// A process may exit between the glob and the read: the group keeps its error quiet.
		"sh", "-c", `for f in /proc/[0-9]*/cmdline; do { tr '\0' ' ' < "$f"; } 2>/dev/null; echo; done; true`)
	if err != nil {
		// A pod that went away (its container killed mid-exec: 137, 143) or whose node is cut
		// off (a fault spec's) is read next time; a pod that answered, but not with command
		// lines, fails the check.
		if !regexp.MustCompile(`exit code (137|143)`).MatchString(err.Error()) {
			Expect(err.Error()).NotTo(MatchRegexp(`exit code|executable file not found|no such file or directory`),
				"read the command lines in %s/%s", pod.Namespace, pod.Name)
		}
		return ""
	}
	// An empty answer is an exec whose stream ended before the loop printed anything (its own
	// sh would be listed): a node losing power as it ran (the node-loss spec, beside this
	// check). It is read next time.
	if strings.TrimSpace(out) == "" {
		return ""
	}
	// The agent (the container's first process) or the server (the first process before 0.2.0)
	// is there: the command lines were read, not an empty answer. Without the server's (a rejoin
	// or a restart between its runs: their command lines went while being read) they are read
	// again next time.
	Expect(out).To(Or(ContainSubstring("/pgpilot/bin/agent"), ContainSubstring("postgres")), "command lines in %s/%s", pod.Namespace, pod.Name)
	if !strings.Contains(out, "postgres") {
		return ""
	}
	leakChecks.Lock()
	leakChecks.cmdlinesRead[key] = true
	leakChecks.Unlock()
	return out
}

// execInPod runs command in a container and returns its standard output.
func execInPod(ctx context.Context, ns, pod, container string, command ...string) (string, error) {
	req := clientset.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: command, Stdout: true, Stderr: true},
			scheme.ParameterCodec)
	executor, err := remotecommand.NewSPDYExecutor(restConfig, "POST", req.URL())
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err = executor.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		return "", fmt.Errorf("exec in %s/%s: %w (%s)", ns, pod, err, stderr.String())
	}
	return stdout.String(), nil
}
