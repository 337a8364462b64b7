package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

func (s *session) statusCommand() *cobra.Command {
	var output, colour string
	cmd := &cobra.Command{
		Use:   "status NAME",
		Short: "Show a cluster at a glance: phase, conditions, the primary, each instance's replication, backups and recent events",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			view, err := s.clusterView(cmd, args[0])
			if err != nil {
				return err
			}
			return writeView(s.streams.Out, view, output, s.useColour(colour), s)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "json or yaml instead of text")
	cmd.Flags().StringVar(&colour, "color", "auto", "auto (on a terminal, unless NO_COLOR is set), always or never")
	return cmd
}

// clusterView reads cluster name, its pods and its namespace's Events.
func (s *session) clusterView(cmd *cobra.Command, name string) (ClusterView, error) {
	ctx := cmd.Context()
	c, pods, err := s.clusterWithPods(ctx, name)
	if err != nil {
		return ClusterView{}, err
	}
	var events corev1.EventList
	if err := s.client.List(ctx, &events, client.InNamespace(c.Namespace)); err != nil {
		return ClusterView{}, s.explain(err, "events of postgrescluster", name)
	}
	view := BuildClusterView(c, pods, events.Items)
	view.Databases = s.databaseViews(ctx, c)
	return view, nil
}

// databaseViews are the cluster's Databases; none when they cannot be listed (a release
// without the kind, or no right to read them): the rest of the status stands without them.
func (s *session) databaseViews(ctx context.Context, c *pgv1.PostgresCluster) []DatabaseView {
	var databases pgv1.DatabaseList
	if err := s.client.List(ctx, &databases, client.InNamespace(c.Namespace)); err != nil {
		return nil
	}
	return DatabaseViews(c.Name, databases.Items)
}

func writeView(w io.Writer, view ClusterView, output string, colour bool, s *session) error {
	switch output {
	case "":
		return RenderStatus(w, view, s.now(), colour)
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(view)
	case "yaml":
		data, err := yaml.Marshal(view)
		if err != nil {
			return err
		}
		_, err = w.Write(data)
		return err
	default:
		return fmt.Errorf("--output %q: want json or yaml", output)
	}
}

// useColour says whether to colour: always, never, or auto — on a terminal unless NO_COLOR
// is set (no-color.org).
func (s *session) useColour(mode string) bool {
	switch mode {
	case "always":
		return true
	case "never":
		return false
	}
	f, ok := s.streams.Out.(*os.File)
	_, noColour := os.LookupEnv("NO_COLOR")
	return ok && !noColour && term.IsTerminal(int(f.Fd()))
}
