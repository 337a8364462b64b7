package plugin

import (
	"fmt"
	"os"
	"os/exec"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	corev1 "k8s.io/api/core/v1"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	"github.com/pgpilot/pgpilot-operator/internal/builder"
)

func (s *session) psqlCommand() *cobra.Command {
	var replica, superuser bool
	cmd := &cobra.Command{
		Use:   "psql NAME [-- PSQL ARGS...]",
		Short: "Open psql on the primary (or a replica) as the application user, through kubectl exec",
		Long: "Runs psql in the instance's pod by `kubectl exec`, as the application user (its password\n" +
			"stays in the pod) or, with --superuser, as the superuser over the pod's socket.",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, pods, err := s.clusterWithPods(ctx, args[0])
			if err != nil {
				return err
			}
			pod, err := pickInstance(c, pods, replica)
			if err != nil {
				return err
			}
			kubectl, err := exec.LookPath(kubectlBinary())
			if err != nil {
				return fmt.Errorf("kubectl is not on PATH (set KUBECTL to it): %w", err)
			}
			agentArgs := []string{builder.AgentPath, "psql"}
			if superuser {
				agentArgs = append(agentArgs, "--superuser")
			}
			run := exec.CommandContext(ctx, kubectl, s.execArgs(pod, s.interactive(), append(agentArgs, args[1:]...))...)
			run.Stdin, run.Stdout, run.Stderr = s.streams.In, s.streams.Out, s.streams.ErrOut
			return run.Run()
		},
	}
	cmd.Flags().BoolVar(&replica, "replica", false, "connect to a ready replica instead of the primary")
	cmd.Flags().BoolVar(&superuser, "superuser", false, "connect as the superuser instead of the application user")
	return cmd
}

// pickInstance is the primary's pod, or with replica a ready replica's.
func pickInstance(c *pgv1.PostgresCluster, pods []corev1.Pod, replica bool) (string, error) {
	if !replica {
		if c.Status.CurrentPrimary == "" {
			return "", fmt.Errorf("postgrescluster %q has no primary now (kubectl pgpilot status %s)", c.Name, c.Name)
		}
		return c.Status.CurrentPrimary, nil
	}
	for _, p := range pods {
		if p.Name != c.Status.CurrentPrimary && p.DeletionTimestamp == nil && podReady(p) {
			return p.Name, nil
		}
	}
	return "", fmt.Errorf("postgrescluster %q has no ready replica", c.Name)
}

func podReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// interactive says whether psql gets a terminal: when the plugin has one.
func (s *session) interactive() bool {
	f, ok := s.streams.In.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func kubectlBinary() string {
	if k := os.Getenv("KUBECTL"); k != "" {
		return k
	}
	return "kubectl"
}

// execArgs is `kubectl exec` of command in pod's PostgreSQL container, with the connection
// flags the plugin was given, so that kubectl reaches the same cluster as the user.
func (s *session) execArgs(pod string, tty bool, command []string) []string {
	args := []string{"exec", "-i"}
	if tty {
		args = append(args, "-t")
	}
	args = append(args, s.connectionFlags()...)
	args = append(args, "--namespace="+s.namespace, pod, "--container="+builder.PostgresContainerName, "--")
	return append(args, command...)
}

// connectionFlags are the kubectl flags the user set, to pass on to kubectl.
func (s *session) connectionFlags() []string {
	var flags []string
	for _, f := range []struct {
		name  string
		value *string
	}{
		{"kubeconfig", s.flags.KubeConfig}, {"context", s.flags.Context}, {"cluster", s.flags.ClusterName},
		{"user", s.flags.AuthInfoName}, {"server", s.flags.APIServer}, {"token", s.flags.BearerToken},
		{"certificate-authority", s.flags.CAFile}, {"as", s.flags.Impersonate}, {"request-timeout", s.flags.Timeout},
	} {
		if f.value != nil && *f.value != "" && (f.name != "request-timeout" || *f.value != "0") {
			flags = append(flags, "--"+f.name+"="+*f.value)
		}
	}
	if s.flags.Insecure != nil && *s.flags.Insecure {
		flags = append(flags, "--insecure-skip-tls-verify")
	}
	return flags
}
