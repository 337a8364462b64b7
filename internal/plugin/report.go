package plugin

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/yaml"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	"github.com/pgpilot/pgpilot-operator/internal/builder"
)

// operatorPods select the operator's pods, wherever it is installed.
var operatorPods = client.MatchingLabels{"app.kubernetes.io/name": "pgpilot-operator", "control-plane": "controller-manager"}

func (s *session) reportCommand() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "report NAME",
		Short: "Write a tar.gz for a bug report: the cluster, its objects (Secrets' values redacted), Events, status, and the instances' and operator's logs",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if file == "" {
				file = fmt.Sprintf("pgpilot-report-%s-%s.tar.gz", args[0], s.now().UTC().Format("20060102T150405Z"))
			}
			// Its logs name roles, hosts and queries: the report's reader is whoever it is
			// sent to, not everyone on this machine.
			out, err := os.OpenFile(file, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			if err != nil {
				return err
			}
			if err := out.Chmod(0o600); err != nil { // a file that was there keeps its mode otherwise
				_ = out.Close()
				return err
			}
			err = s.writeReport(cmd.Context(), out, args[0])
			if closeErr := out.Close(); err == nil {
				err = closeErr
			}
			if err != nil {
				_ = os.Remove(file)
				return err
			}
			fmt.Fprintf(s.streams.Out, "wrote %s\n", file)
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "where to write the archive (default pgpilot-report-NAME-TIME.tar.gz)")
	return cmd
}

// report is the archive being written; the first error stops it.
type report struct {
	tar *tar.Writer
	now time.Time
	err error
}

func (r *report) add(name string, data []byte) {
	if r.err != nil {
		return
	}
	if r.err = r.tar.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: r.now}); r.err == nil {
		_, r.err = r.tar.Write(data)
	}
}

func (r *report) addYAML(name string, obj any) {
	data, err := yaml.Marshal(obj)
	if err != nil && r.err == nil {
		r.err = err
	}
	r.add(name, data)
}

func (s *session) writeReport(ctx context.Context, w io.Writer, name string) error {
	c, pods, err := s.clusterWithPods(ctx, name)
	if err != nil {
		return err
	}
	zw := gzip.NewWriter(w)
	r := &report{tar: tar.NewWriter(zw), now: s.now()}
	dir := "pgpilot-report-" + c.Name + "/"
	r.addYAML(dir+"postgrescluster.yaml", tidy(c))
	var events corev1.EventList
	if err := s.client.List(ctx, &events, client.InNamespace(c.Namespace)); err != nil {
		r.add(dir+"events.error", []byte(err.Error()))
	}
	view := BuildClusterView(c, pods, events.Items)
	view.Databases = s.databaseViews(ctx, c)
	var status bytes.Buffer
	_ = RenderStatus(&status, view, r.now, false)
	r.add(dir+"status.txt", status.Bytes())
	r.addYAML(dir+"events.yaml", events.Items)
	s.addChildren(ctx, r, dir+"objects/", c)
	for _, p := range pods {
		r.addYAML(dir+"objects/Pod/"+p.Name+".yaml", tidy(&p))
		s.addLogs(ctx, r, dir+"logs/", p, builder.PostgresContainerName)
	}
	var operators corev1.PodList
	if err := s.client.List(ctx, &operators, operatorPods); err != nil {
		r.add(dir+"operator/error", []byte("the operator's pods could not be listed: "+err.Error()))
	}
	for _, p := range operators.Items {
		r.addYAML(dir+"operator/"+p.Name+".yaml", tidy(&p))
		s.addLogs(ctx, r, dir+"operator/", p, "manager")
	}
	if r.err == nil {
		r.err = r.tar.Close()
	}
	if r.err == nil {
		r.err = zw.Close()
	}
	return r.err
}

// addChildren adds the cluster's objects by kind (its pods, read already, aside), Secrets with
// their values redacted.
func (s *session) addChildren(ctx context.Context, r *report, dir string, c *pgv1.PostgresCluster) {
	selector := client.MatchingLabels(builder.SelectorLabels(c))
	lists := []client.ObjectList{&appsv1.StatefulSetList{}, &corev1.ServiceList{}, &corev1.ConfigMapList{},
		&corev1.PersistentVolumeClaimList{}, &policyv1.PodDisruptionBudgetList{}, &corev1.SecretList{}, &pgv1.BackupList{}, &pgv1.ScheduledBackupList{}, &pgv1.DatabaseList{}}
	for _, list := range lists {
		opts := []client.ListOption{client.InNamespace(c.Namespace), selector}
		switch list.(type) {
		case *pgv1.BackupList, *pgv1.ScheduledBackupList, *pgv1.DatabaseList:
			opts = opts[:1] // the user's objects: not labelled, they name the cluster
		}
		gvk, _ := apiutil.GVKForObject(list, Scheme())
		kind := gvk.Kind[:len(gvk.Kind)-len("List")]
		if err := s.client.List(ctx, list, opts...); err != nil {
			r.add(dir+kind+".error", []byte(err.Error()))
			continue
		}
		items, _ := apiMetaItems(list)
		for _, obj := range items {
			if !belongsTo(obj, c.Name) {
				continue
			}
			if secret, ok := obj.(*corev1.Secret); ok {
				obj = RedactSecret(secret)
			}
			r.addYAML(dir+kind+"/"+obj.GetName()+".yaml", tidy(obj))
		}
	}
}

// belongsTo says whether a Backup or ScheduledBackup names the cluster; labelled objects do.
func belongsTo(obj client.Object, cluster string) bool {
	switch o := obj.(type) {
	case *pgv1.Backup:
		return o.Spec.Cluster.Name == cluster
	case *pgv1.ScheduledBackup:
		return o.Spec.Cluster.Name == cluster
	}
	return true
}

// addLogs adds container's current log and, when it restarted, the previous one.
func (s *session) addLogs(ctx context.Context, r *report, dir string, p corev1.Pod, container string) {
	var restarted bool
	for _, st := range p.Status.ContainerStatuses {
		restarted = restarted || st.Name == container && st.RestartCount > 0
	}
	for _, previous := range []bool{false, true} {
		if previous && !restarted {
			continue
		}
		name := dir + p.Name + ".log"
		if previous {
			name = dir + p.Name + ".previous.log"
		}
		data, err := s.kube.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: container, Previous: previous}).DoRaw(ctx)
		if err != nil {
			data = []byte("the log could not be read: " + err.Error())
		}
		r.add(name, data)
	}
}

// RedactSecret is s without its values: its keys stay, each with its length only.
func RedactSecret(s *corev1.Secret) *corev1.Secret {
	out := &corev1.Secret{TypeMeta: s.TypeMeta, ObjectMeta: *s.ObjectMeta.DeepCopy(), Type: s.Type, Data: map[string][]byte{}}
	for k, v := range s.Data {
		out.Data[k] = []byte(fmt.Sprintf("<redacted: %d bytes>", len(v)))
	}
	for k, v := range s.StringData {
		out.Data[k] = []byte(fmt.Sprintf("<redacted: %d bytes>", len(v)))
	}
	// kubectl apply keeps the whole object, values included, in this annotation.
	delete(out.Annotations, corev1.LastAppliedConfigAnnotation)
	return out
}

// tidy drops managedFields, which say who wrote what and would double the report's size.
func tidy[T client.Object](obj T) T {
	copied := obj.DeepCopyObject().(T)
	copied.SetManagedFields(nil)
	return copied
}

// apiMetaItems are list's items as objects.
func apiMetaItems(list client.ObjectList) ([]client.Object, error) {
	objs, err := meta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	items := make([]client.Object, 0, len(objs))
	for _, o := range objs {
		if obj, ok := o.(client.Object); ok {
			items = append(items, obj)
		}
	}
	return items, nil
}
