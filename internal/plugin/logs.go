package plugin

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"

	"github.com/pgpilot/pgpilot-operator/internal/builder"
)

// maxLogLine is the longest log line read: PostgreSQL's records can carry long statements.
const maxLogLine = 1 << 20

func (s *session) logsCommand() *cobra.Command {
	var follow bool
	var since time.Duration
	cmd := &cobra.Command{
		Use:   "logs NAME",
		Short: "The instances' logs merged, one JSON line per record (the agent's and PostgreSQL's), oldest first",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			_, pods, err := s.clusterWithPods(ctx, args[0])
			if err != nil {
				return err
			}
			opts := &corev1.PodLogOptions{Container: builder.PostgresContainerName, Follow: follow}
			if since > 0 {
				seconds := int64(since.Seconds())
				opts.SinceSeconds = &seconds
			}
			if follow {
				return s.followLogs(ctx, pods, opts)
			}
			return s.mergedLogs(ctx, pods, opts)
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new records as they come")
	cmd.Flags().DurationVar(&since, "since", 0, "only records newer than this (e.g. 10m)")
	return cmd
}

// mergedLogs reads every pod's log and prints the records in time order.
func (s *session) mergedLogs(ctx context.Context, pods []corev1.Pod, opts *corev1.PodLogOptions) error {
	perPod := make([][]string, len(pods))
	g, ctx := errgroup.WithContext(ctx)
	for i, p := range pods {
		g.Go(func() error {
			return s.eachLogLine(ctx, p.Name, opts, func(line string) { perPod[i] = append(perPod[i], line) })
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for _, line := range MergeLogs(perPod...) {
		if _, err := fmt.Fprintln(s.streams.Out, line); err != nil {
			return err
		}
	}
	return nil
}

// followLogs prints each pod's records as they arrive, a whole line at a time.
func (s *session) followLogs(ctx context.Context, pods []corev1.Pod, opts *corev1.PodLogOptions) error {
	var mu sync.Mutex
	g, ctx := errgroup.WithContext(ctx)
	for _, p := range pods {
		g.Go(func() error {
			return s.eachLogLine(ctx, p.Name, opts, func(line string) {
				mu.Lock()
				defer mu.Unlock()
				fmt.Fprintln(s.streams.Out, line)
			})
		})
	}
	return g.Wait()
}

func (s *session) eachLogLine(ctx context.Context, pod string, opts *corev1.PodLogOptions, each func(string)) error {
	stream, err := s.kube.CoreV1().Pods(s.namespace).GetLogs(pod, opts).Stream(ctx)
	if err != nil {
		return s.explain(err, "logs of pod", pod)
	}
	defer func() { _ = stream.Close() }()
	lines := bufio.NewScanner(stream)
	lines.Buffer(make([]byte, 64*1024), maxLogLine)
	for lines.Scan() {
		each(lines.Text())
	}
	if err := lines.Err(); err != nil && ctx.Err() == nil {
		return fmt.Errorf("logs of pod %s: %w", pod, err)
	}
	return nil
}

// MergeLogs merges logs, each in its own order, into one ordered by the records' "time"
// field (the agent's JSON lines); a line without one keeps the time of the line before it.
func MergeLogs(logs ...[]string) []string {
	type record struct {
		at   time.Time
		line string
	}
	var all []record
	for _, log := range logs {
		var last time.Time
		for _, line := range log {
			var r struct {
				Time time.Time `json:"time"`
			}
			if json.Unmarshal([]byte(line), &r) == nil && !r.Time.IsZero() {
				last = r.Time
			}
			all = append(all, record{at: last, line: line})
		}
	}
	slices.SortStableFunc(all, func(a, b record) int { return a.at.Compare(b.at) })
	merged := make([]string, len(all))
	for i, r := range all {
		merged[i] = r.line
	}
	return merged
}
