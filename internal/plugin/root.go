// Package plugin is kubectl-pgpilot, the kubectl plugin that shows and operates pgpilot's
// PostgresClusters the way a DBA works: one command for what four `kubectl get`s and a psql
// would show, and actions that set the same declarative triggers a user could set with kubectl.
package plugin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	"github.com/pgpilot/pgpilot-operator/internal/builder"
)

// session is one invocation: kubectl's flags, the streams, and the clients they lead to.
type session struct {
	flags     *genericclioptions.ConfigFlags
	streams   genericiooptions.IOStreams
	client    client.Client
	kube      kubernetes.Interface
	namespace string
	now       func() time.Time
}

// NewCommand is the kubectl-pgpilot command tree, with kubectl's usual flags (--kubeconfig,
// --context, -n, ...).
func NewCommand(streams genericiooptions.IOStreams) *cobra.Command {
	s := &session{flags: genericclioptions.NewConfigFlags(true), streams: streams, now: time.Now}
	root := &cobra.Command{
		Use:           "kubectl-pgpilot",
		Short:         "See and operate pgpilot's PostgreSQL clusters",
		SilenceUsage:  true,
		SilenceErrors: true,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl pgpilot"},
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return s.connect()
		},
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	s.flags.AddFlags(root.PersistentFlags())
	root.AddCommand(s.statusCommand(), s.promoteCommand(), s.restartCommand(), s.backupCommand(),
		s.psqlCommand(), s.logsCommand(), s.reportCommand())
	return root
}

// Scheme holds the kinds the plugin reads.
func Scheme() *runtime.Scheme {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		panic(err)
	}
	if err := pgv1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	return scheme
}

func (s *session) connect() error {
	config, err := s.flags.ToRESTConfig()
	if err != nil {
		return err
	}
	if s.namespace, _, err = s.flags.ToRawKubeConfigLoader().Namespace(); err != nil {
		return err
	}
	if s.client, err = client.New(config, client.Options{Scheme: Scheme()}); err != nil {
		return err
	}
	s.kube, err = kubernetes.NewForConfig(config)
	return err
}

// cluster gets PostgresCluster name in the session's namespace, with an error a person reads
// in one line when it does not exist or may not be read.
func (s *session) cluster(ctx context.Context, name string) (*pgv1.PostgresCluster, error) {
	c := &pgv1.PostgresCluster{}
	if err := s.client.Get(ctx, client.ObjectKey{Namespace: s.namespace, Name: name}, c); err != nil {
		return nil, s.explain(err, "postgrescluster", name)
	}
	return c, nil
}

// pods are the cluster's instance pods.
func (s *session) pods(ctx context.Context, c *pgv1.PostgresCluster) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := s.client.List(ctx, &pods, client.InNamespace(c.Namespace), client.MatchingLabels(builder.SelectorLabels(c))); err != nil {
		return nil, s.explain(err, "pods of postgrescluster", c.Name)
	}
	return pods.Items, nil
}

// clusterWithPods is cluster name and its instance pods.
func (s *session) clusterWithPods(ctx context.Context, name string) (*pgv1.PostgresCluster, []corev1.Pod, error) {
	c, err := s.cluster(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	pods, err := s.pods(ctx, c)
	return c, pods, err
}

// explain turns the API server's refusals into one line that says what to do.
func (s *session) explain(err error, kind, name string) error {
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%s %q not found in namespace %q", kind, name, s.namespace)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("no permission: %s", err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s %q: the API server did not answer in time", kind, name)
	default:
		return fmt.Errorf("%s %q: %w", kind, name, err)
	}
}

// instanceOf checks that instance is one of c's instances.
func instanceOf(c *pgv1.PostgresCluster, pods []corev1.Pod, instance string) error {
	var names []string
	for _, p := range pods {
		if p.Name == instance {
			return nil
		}
		names = append(names, p.Name)
	}
	return fmt.Errorf("%s is not an instance of postgrescluster %q (its instances: %v)", instance, c.Name, names)
}
