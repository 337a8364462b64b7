//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// digestEntry names the report entry that test/e2e/digest prints at the very end of a failed
// run: a CI log is often read from its tail only, and the full dumps are far above it.
const digestEntry = "digest"

// specNamespaces are the namespaces this process's specs created. Those still active when a
// spec fails are its own, or its ordered container's: the others' cleanups deleted theirs.
var specNamespaces []string

// A top-level AfterEach runs after every spec's own ones, before its DeferCleanups delete the
// namespaces.
var _ = AfterEach(func(ctx SpecContext) {
	if !CurrentSpecReport().Failed() {
		return
	}
	var out strings.Builder
	logLines, err := operatorLogLines(ctx)
	if err != nil {
		fmt.Fprintf(&out, "operator logs: %v\n", err)
	}
	for _, name := range specNamespaces {
		ns := &corev1.Namespace{}
		if k8s.Get(ctx, client.ObjectKey{Name: name}, ns) == nil && ns.Status.Phase == corev1.NamespaceActive {
			describeNamespace(ctx, &out, name, logLines)
		}
	}
	AddReportEntry(digestEntry, out.String())
})

// describeNamespace writes, in a few lines, the state of the clusters and pods of ns, its last
// Events and the last of the operators' log lines that mention it.
func describeNamespace(ctx context.Context, out *strings.Builder, ns string, logLines []string) {
	fmt.Fprintf(out, "namespace %s:\n", ns)
	clusters := &pgv1.PostgresClusterList{}
	if err := k8s.List(ctx, clusters, client.InNamespace(ns)); err != nil {
		fmt.Fprintf(out, "  list clusters: %v\n", err)
	}
	for _, c := range clusters.Items {
		fmt.Fprintf(out, "  cluster %s phase=%s primary=%s generation=%d observed=%d\n", c.Name, c.Status.Phase,
			c.Status.CurrentPrimary, c.Generation, c.Status.ObservedGeneration)
		for _, cond := range c.Status.Conditions {
			fmt.Fprintf(out, "    %s=%s %s: %s\n", cond.Type, cond.Status, cond.Reason, clip(cond.Message, 160))
		}
	}
	pods := &corev1.PodList{}
	if err := k8s.List(ctx, pods, client.InNamespace(ns)); err == nil {
		for _, pod := range pods.Items {
			fmt.Fprintf(out, "  pod %s %s node=%s ready=%v%s\n", pod.Name, pod.Status.Phase, pod.Spec.NodeName,
				podReady(&pod), unscheduledNote(&pod))
		}
	}
	about := slices.DeleteFunc(slices.Clone(logLines), func(line string) bool { return !strings.Contains(line, ns) })
	for _, line := range about[max(0, len(about)-12):] {
		fmt.Fprintf(out, "  log %s\n", clip(shortLogLine(line), 300))
	}
	events := &corev1.EventList{}
	if err := k8s.List(ctx, events, client.InNamespace(ns)); err == nil {
		slices.SortFunc(events.Items, func(a, b corev1.Event) int { return eventTime(a).Compare(eventTime(b)) })
		for _, e := range events.Items[max(0, len(events.Items)-6):] {
			fmt.Fprintf(out, "  event %s %s %s/%s: %s\n", e.Type, e.Reason, e.InvolvedObject.Kind, e.InvolvedObject.Name,
				clip(e.Message, 160))
		}
	}
}

// eventTime: events.k8s.io Events (the operator's) have an EventTime, core ones a LastTimestamp.
func eventTime(e corev1.Event) time.Time {
	if !e.LastTimestamp.IsZero() {
		return e.LastTimestamp.Time
	}
	return e.EventTime.Time
}

func unscheduledNote(pod *corev1.Pod) string {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue {
			return fmt.Sprintf(" unscheduled (%s: %s)", c.Reason, clip(c.Message, 120))
		}
	}
	return ""
}

// operatorLogLines is the end of the log of every pgpilot operator (deployed or installed by
// OLM, wherever it runs), read once for all the namespaces a digest describes.
func operatorLogLines(ctx context.Context) ([]string, error) {
	pods := &corev1.PodList{}
	if err := k8s.List(ctx, pods, client.MatchingLabels{"control-plane": "controller-manager"}); err != nil {
		return nil, err
	}
	var lines []string
	for _, pod := range pods.Items {
		stream, err := clientset.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name,
			&corev1.PodLogOptions{TailLines: ptr.To[int64](5000)}).Stream(ctx)
		if err != nil {
			continue
		}
		scanner := bufio.NewScanner(stream)
		scanner.Buffer(make([]byte, 64*1024), 1024*1024)
		for scanner.Scan() {
			lines = append(lines, scanner.Text())
		}
		_ = stream.Close()
	}
	return lines, nil
}

// shortLogLine drops from a JSON log line what the digest already says (controller, object,
// namespace, reconcile ID), keeping the time, level, message and the rest in key order. The
// key name stays: a line about an owned object names it second, and the last one read wins.
func shortLogLine(line string) string {
	var fields map[string]any
	if json.Unmarshal([]byte(line), &fields) != nil {
		return line
	}
	parts := []string{fmt.Sprint(fields["ts"]), fmt.Sprint(fields["level"]), fmt.Sprintf("%q", fields["msg"])}
	for _, key := range slices.Sorted(maps.Keys(fields)) {
		switch key {
		case "ts", "level", "msg", "controller", "controllerGroup", "controllerKind", "PostgresCluster",
			"namespace", "reconcileID":
			continue
		}
		value, _ := json.Marshal(fields[key])
		parts = append(parts, key+"="+string(value))
	}
	return strings.Join(parts, " ")
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
