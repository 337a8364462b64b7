package builder

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

func TestBuildStatefulSetCustomQueries(t *testing.T) {
	find := func(pod corev1.PodSpec) (*corev1.Volume, *corev1.VolumeMount, string) {
		var volume *corev1.Volume
		var mount *corev1.VolumeMount
		for i := range pod.Volumes {
			if pod.Volumes[i].Name == "custom-queries" {
				volume = &pod.Volumes[i]
			}
		}
		dir := ""
		for i, m := range pod.Containers[0].VolumeMounts {
			if m.Name == "custom-queries" {
				mount = &pod.Containers[0].VolumeMounts[i]
			}
		}
		for _, e := range pod.Containers[0].Env {
			if e.Name == "PGPILOT_CUSTOM_QUERIES_DIR" {
				dir = e.Value
			}
		}
		return volume, mount, dir
	}

	volume, mount, dir := find(buildStatefulSet(t, newCluster()).Spec.Template.Spec)
	if volume != nil || mount != nil || dir != "" {
		t.Errorf("without custom queries: volume %v, mount %v, PGPILOT_CUSTOM_QUERIES_DIR %q; want none", volume, mount, dir)
	}

	c := newCluster(func(c *pgv1.PostgresCluster) {
		c.Spec.Monitoring.CustomQueries = []pgv1.CustomQueriesSource{
			{ConfigMap: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "queries"}, Key: "queries.yaml"}},
			{Secret: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "private"}, Key: "more.yaml"}},
		}
	})
	volume, mount, dir = find(buildStatefulSet(t, c).Spec.Template.Spec)
	if volume == nil || mount == nil {
		t.Fatalf("volume %v, mount %v; want both", volume, mount)
	}
	want := &corev1.ProjectedVolumeSource{DefaultMode: ptr.To[int32](0o440), Sources: []corev1.VolumeProjection{
		{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "queries"}, Optional: ptr.To(true),
			Items: []corev1.KeyToPath{{Key: "queries.yaml", Path: "configmap.queries.queries.yaml"}}}},
		{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "private"}, Optional: ptr.To(true),
			Items: []corev1.KeyToPath{{Key: "more.yaml", Path: "secret.private.more.yaml"}}}},
	}}
	if diff := cmp.Diff(want, volume.Projected); diff != "" {
		t.Errorf("projected volume (-want +got):\n%s", diff)
	}
	if !mount.ReadOnly || mount.MountPath != dir || dir != "/pgpilot/custom-queries" {
		t.Errorf("mount %+v and PGPILOT_CUSTOM_QUERIES_DIR %q, want both /pgpilot/custom-queries, read-only", mount, dir)
	}
}
