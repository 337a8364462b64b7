package plugin

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// Each action sets what a user could set with kubectl (an annotation, a Backup, a pod
// deletion) and says so; pgpilot does the rest. --wait follows it until the cluster is Ready.

func (s *session) promoteCommand() *cobra.Command {
	var waitFor time.Duration
	cmd := &cobra.Command{
		Use:   "promote NAME INSTANCE",
		Short: "Switch the primary over to INSTANCE (sets the " + pgv1.SwitchoverAnnotation + " annotation)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, instance, err := s.clusterAndInstance(ctx, args[0], args[1])
			if err != nil {
				return err
			}
			if c.Status.CurrentPrimary == instance {
				return fmt.Errorf("%s is already the primary of postgrescluster %q", instance, c.Name)
			}
			// The annotation asks for one switchover: pgpilot acts on a value once, so asking again
			// for the instance it last switched to takes removing the value first.
			if c.Annotations[pgv1.SwitchoverAnnotation] == instance {
				if err := s.annotate(ctx, c, pgv1.SwitchoverAnnotation, nil); err != nil {
					return err
				}
			}
			if err := s.annotate(ctx, c, pgv1.SwitchoverAnnotation, &instance); err != nil {
				return err
			}
			fmt.Fprintf(s.streams.Out, "postgrescluster/%s: switchover to %s requested (%s=%s)\n", c.Name, instance, pgv1.SwitchoverAnnotation, instance)
			return s.waitUntil(ctx, c.Name, waitFor, func(c *pgv1.PostgresCluster) bool {
				return c.Status.CurrentPrimary == instance && c.Status.TargetPrimary == "" && c.Status.Phase == pgv1.PhaseReady
			})
		},
	}
	cmd.Flags().DurationVar(&waitFor, "wait", 0, "wait up to this long for the instance to be the primary of a Ready cluster (0: do not wait)")
	return cmd
}

func (s *session) restartCommand() *cobra.Command {
	var waitFor time.Duration
	cmd := &cobra.Command{
		Use:   "restart NAME [INSTANCE]",
		Short: "Restart every instance, rolling in pgpilot's order (sets the " + pgv1.RestartAnnotation + " annotation), or one replica (deletes its pod)",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if len(args) == 2 {
				return s.restartInstance(ctx, args[0], args[1])
			}
			c, err := s.cluster(ctx, args[0])
			if err != nil {
				return err
			}
			at := s.now().UTC().Format(time.RFC3339)
			if err := s.annotate(ctx, c, pgv1.RestartAnnotation, &at); err != nil {
				return err
			}
			fmt.Fprintf(s.streams.Out, "postgrescluster/%s: rolling restart requested (%s=%s)\n", c.Name, pgv1.RestartAnnotation, at)
			return s.waitUntil(ctx, c.Name, waitFor, func(c *pgv1.PostgresCluster) bool {
				return c.Status.Phase == pgv1.PhaseReady && c.Status.ObservedGeneration == c.Generation && s.restartedSince(ctx, c, at)
			})
		},
	}
	cmd.Flags().DurationVar(&waitFor, "wait", 0, "wait up to this long for every instance to restart and the cluster to be Ready (0: do not wait)")
	return cmd
}

// restartInstance deletes a replica's pod, which the StatefulSet recreates on the same volume.
// The primary is refused: a switchover first keeps it writable.
func (s *session) restartInstance(ctx context.Context, name, instance string) error {
	c, _, err := s.clusterAndInstance(ctx, name, instance)
	if err != nil {
		return err
	}
	if c.Status.CurrentPrimary == instance {
		return fmt.Errorf("%s is the primary of postgrescluster %q: promote another instance first (kubectl pgpilot promote %s INSTANCE) or restart the whole cluster",
			instance, c.Name, c.Name)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: instance}}
	if err := s.client.Delete(ctx, pod); err != nil {
		return s.explain(err, "pod", instance)
	}
	fmt.Fprintf(s.streams.Out, "pod/%s deleted: the StatefulSet recreates it on its volume\n", instance)
	return nil
}

// restartedSince says whether every instance pod of c comes from the template that carries
// restart request at.
func (s *session) restartedSince(ctx context.Context, c *pgv1.PostgresCluster, at string) bool {
	pods, err := s.pods(ctx, c)
	if err != nil || int32(len(pods)) != c.Spec.Instances {
		return false
	}
	for _, p := range pods {
		if p.Annotations[pgv1.RestartAnnotation] != at || p.DeletionTimestamp != nil {
			return false
		}
	}
	return true
}

func (s *session) backupCommand() *cobra.Command {
	var backupType string
	cmd := &cobra.Command{
		Use:   "backup NAME",
		Short: "Take a backup now (creates a Backup)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := s.cluster(ctx, args[0])
			if err != nil {
				return err
			}
			if c.Spec.Backup == nil {
				return fmt.Errorf("postgrescluster %q has no spec.backup: it has no repository to back up into", c.Name)
			}
			b := &pgv1.Backup{
				ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, GenerateName: c.Name + "-"},
				Spec:       pgv1.BackupSpec{Cluster: corev1.LocalObjectReference{Name: c.Name}, Type: pgv1.BackupType(backupType)},
			}
			if err := s.client.Create(ctx, b); err != nil {
				return s.explain(err, "backup of postgrescluster", c.Name)
			}
			fmt.Fprintf(s.streams.Out, "backup/%s created\n", b.Name)
			return nil
		},
	}
	cmd.Flags().StringVar(&backupType, "type", "full", "full, diff or incr")
	return cmd
}

// clusterAndInstance gets the cluster and checks that instance is one of its pods.
func (s *session) clusterAndInstance(ctx context.Context, name, instance string) (*pgv1.PostgresCluster, string, error) {
	c, pods, err := s.clusterWithPods(ctx, name)
	if err != nil {
		return nil, "", err
	}
	return c, instance, instanceOf(c, pods, instance)
}

// annotate sets (or, with nil, removes) one annotation of c by a merge patch.
func (s *session) annotate(ctx context.Context, c *pgv1.PostgresCluster, key string, value *string) error {
	var patch string
	if value == nil {
		patch = fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, key)
	} else {
		patch = fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, key, *value)
	}
	if err := s.client.Patch(ctx, c, client.RawPatch("application/merge-patch+json", []byte(patch))); err != nil {
		return s.explain(err, "postgrescluster", c.Name)
	}
	return nil
}

// waitUntil polls cluster name until done says so, for at most timeout (0: return at once).
func (s *session) waitUntil(ctx context.Context, name string, timeout time.Duration, done func(*pgv1.PostgresCluster) bool) error {
	if timeout == 0 {
		return nil
	}
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		c, err := s.cluster(ctx, name)
		if err != nil {
			return false, nil //nolint:nilerr // a blip of the API server is not the end of the wait
		}
		return done(c), nil
	})
	if err != nil {
		return fmt.Errorf("postgrescluster %q: not done after %s (kubectl pgpilot status %s shows where it is)", name, timeout, name)
	}
	fmt.Fprintf(s.streams.Out, "postgrescluster/%s: done\n", name)
	return nil
}
