package builder

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

var testImages = Images{Postgres: "ghcr.io/pgpilot/postgres:17.2", Agent: "ghcr.io/pgpilot/pgpilot-operator:v0.2.0"}

// buildStatefulSet builds the StatefulSet of c and returns it in typed form.
func buildStatefulSet(t *testing.T, c *pgv1.PostgresCluster) appsv1.StatefulSet {
	t.Helper()
	ac, err := BuildStatefulSet(c, testImages)
	if err != nil {
		t.Fatalf("BuildStatefulSet: %v", err)
	}
	return toTyped[appsv1.StatefulSet](t, ac)
}

func TestBuildStatefulSetIdentityAndSelector(t *testing.T) {
	sts := buildStatefulSet(t, newCluster(func(c *pgv1.PostgresCluster) { c.Spec.Instances = 5 }))

	if sts.Name != "db" || sts.Namespace != "ns" {
		t.Errorf("name = %s/%s, want ns/db", sts.Namespace, sts.Name)
	}
	if got := ptr.Deref(sts.Spec.Replicas, -1); got != 5 {
		t.Errorf("replicas = %d, want spec.instances 5", got)
	}
	if sts.Spec.ServiceName != "db-instances" {
		t.Errorf("serviceName = %q, want db-instances", sts.Spec.ServiceName)
	}
	if diff := cmp.Diff(map[string]string{"postgres.pgpilot.io/cluster": "db"}, sts.Spec.Selector.MatchLabels); diff != "" {
		t.Errorf("selector (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantCommonLabels(), sts.Spec.Template.Labels); diff != "" {
		t.Errorf("pod labels (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantCommonLabels(), sts.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]metav1.OwnerReference{wantOwnerReference()}, sts.OwnerReferences); diff != "" {
		t.Errorf("owner references (-want +got):\n%s", diff)
	}
}

func TestBuildStatefulSetRestartAnnotationChangesTheTemplate(t *testing.T) {
	plain := buildStatefulSet(t, newCluster())
	if len(plain.Spec.Template.Annotations) != 0 {
		t.Errorf("template annotations without a restart request: %v", plain.Spec.Template.Annotations)
	}
	for _, at := range []string{"2026-12-02T10:00:00Z", "2026-12-02T11:00:00Z"} {
		sts := buildStatefulSet(t, newCluster(func(c *pgv1.PostgresCluster) {
			c.Annotations = map[string]string{pgv1.RestartAnnotation: at, "other": "x"}
		}))
		want := map[string]string{"postgres.pgpilot.io/restarted-at": at}
		if diff := cmp.Diff(want, sts.Spec.Template.Annotations); diff != "" {
			t.Errorf("template annotations for a restart at %s (-want +got):\n%s", at, diff)
		}
	}
}

func TestBuildStatefulSetVolumeClaimTemplate(t *testing.T) {
	tests := []struct {
		name             string
		mutate           func(*pgv1.PostgresCluster)
		wantSize         string
		wantStorageClass *string
		wantWhenDeleted  appsv1.PersistentVolumeClaimRetentionPolicyType
	}{
		{
			name:            "default class and unset reclaim policy retains claims",
			mutate:          func(c *pgv1.PostgresCluster) {},
			wantSize:        "1Gi",
			wantWhenDeleted: appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
		},
		{
			name: "explicit class and Retain",
			mutate: func(c *pgv1.PostgresCluster) {
				c.Spec.Storage.Size = resource.MustParse("20Gi")
				c.Spec.Storage.StorageClassName = ptr.To("fast-ssd")
				c.Spec.Storage.ReclaimPolicy = pgv1.PVCReclaimRetain
			},
			wantSize:         "20Gi",
			wantStorageClass: ptr.To("fast-ssd"),
			wantWhenDeleted:  appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
		},
		{
			name:            "Delete reclaim policy deletes claims with the cluster",
			mutate:          func(c *pgv1.PostgresCluster) { c.Spec.Storage.ReclaimPolicy = pgv1.PVCReclaimDelete },
			wantSize:        "1Gi",
			wantWhenDeleted: appsv1.DeletePersistentVolumeClaimRetentionPolicyType,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sts := buildStatefulSet(t, newCluster(tt.mutate))

			if len(sts.Spec.VolumeClaimTemplates) != 1 {
				t.Fatalf("got %d volume claim templates, want 1", len(sts.Spec.VolumeClaimTemplates))
			}
			claim := sts.Spec.VolumeClaimTemplates[0]
			if claim.Name != "pgdata" {
				t.Errorf("claim name = %q, want pgdata", claim.Name)
			}
			size := claim.Spec.Resources.Requests[corev1.ResourceStorage]
			if size.String() != tt.wantSize {
				t.Errorf("storage request = %s, want %s", size.String(), tt.wantSize)
			}
			if diff := cmp.Diff(tt.wantStorageClass, claim.Spec.StorageClassName); diff != "" {
				t.Errorf("storageClassName (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, claim.Spec.AccessModes); diff != "" {
				t.Errorf("access modes (-want +got):\n%s", diff)
			}
			want := &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
				WhenDeleted: tt.wantWhenDeleted,
				WhenScaled:  appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
			}
			if diff := cmp.Diff(want, sts.Spec.PersistentVolumeClaimRetentionPolicy); diff != "" {
				t.Errorf("retention policy (-want +got):\n%s", diff)
			}
		})
	}
}

// The claim template is not a namespaced object of its own: an empty metadata.namespace in the
// desired object never comes back from the API server and would make the StatefulSet look
// changed on every reconcile.
func TestBuildStatefulSetClaimTemplateHasNoNamespaceOrType(t *testing.T) {
	ac, err := BuildStatefulSet(newCluster(), testImages)
	if err != nil {
		t.Fatalf("BuildStatefulSet: %v", err)
	}
	claim := ac.Spec.VolumeClaimTemplates[0]
	if ns := claim.GetNamespace(); ns != nil {
		t.Errorf("claim template namespace = %q, want unset", *ns)
	}
	if kind, version := claim.GetKind(), claim.GetAPIVersion(); kind != nil || version != nil {
		t.Errorf("claim template type = %v %v, want unset (the API server returns templates without it)", version, kind)
	}
}

func TestBuildStatefulSetSecurity(t *testing.T) {
	sts := buildStatefulSet(t, newCluster())
	pod := sts.Spec.Template.Spec

	wantPod := &corev1.PodSecurityContext{
		RunAsNonRoot:        ptr.To(true),
		RunAsUser:           ptr.To[int64](999),
		RunAsGroup:          ptr.To[int64](999),
		FSGroup:             ptr.To[int64](999),
		FSGroupChangePolicy: ptr.To(corev1.FSGroupChangeOnRootMismatch),
		SeccompProfile:      &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	if diff := cmp.Diff(wantPod, pod.SecurityContext); diff != "" {
		t.Errorf("pod security context (-want +got):\n%s", diff)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("got %d containers, want 1", len(pod.Containers))
	}
	wantContainer := &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		RunAsNonRoot:             ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	if diff := cmp.Diff(wantContainer, pod.Containers[0].SecurityContext); diff != "" {
		t.Errorf("container security context (-want +got):\n%s", diff)
	}
	if pod.Containers[0].Image != testImages.Postgres {
		t.Errorf("image = %q, want %q", pod.Containers[0].Image, testImages.Postgres)
	}
}

func TestBuildStatefulSetResources(t *testing.T) {
	tests := []struct {
		name      string
		resources corev1.ResourceRequirements
	}{
		{name: "unset resources stay unset"},
		{name: "requests only", resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")},
		}},
		{name: "limits and requests", resources: corev1.ResourceRequirements{
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")},
			Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi"), corev1.ResourceCPU: resource.MustParse("1")},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sts := buildStatefulSet(t, newCluster(func(c *pgv1.PostgresCluster) { c.Spec.Resources = tt.resources }))
			got := sts.Spec.Template.Spec.Containers[0].Resources
			if diff := cmp.Diff(tt.resources, got); diff != "" {
				t.Errorf("resources (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBuildStatefulSetScheduling(t *testing.T) {
	defaultAntiAffinity := &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
			Weight: 100,
			PodAffinityTerm: corev1.PodAffinityTerm{
				TopologyKey:   "kubernetes.io/hostname",
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"postgres.pgpilot.io/cluster": "db"}},
			},
		}},
	}}
	userAffinity := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "disk", Operator: corev1.NodeSelectorOpIn, Values: []string{"ssd"}}},
		}}},
	}}
	user := pgv1.SchedulingSpec{
		Affinity:     userAffinity,
		Tolerations:  []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "db", Effect: corev1.TaintEffectNoSchedule}},
		NodeSelector: map[string]string{"pool": "db"},
		TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
			MaxSkew: 1, TopologyKey: "topology.kubernetes.io/zone", WhenUnsatisfiable: corev1.DoNotSchedule,
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"postgres.pgpilot.io/cluster": "db"}},
		}},
	}
	tests := []struct {
		name       string
		scheduling pgv1.SchedulingSpec
		want       pgv1.SchedulingSpec
	}{
		{
			name: "no scheduling gets the default pod anti-affinity",
			want: pgv1.SchedulingSpec{Affinity: defaultAntiAffinity},
		},
		{
			name:       "user scheduling is copied and the affinity replaces the default",
			scheduling: user,
			want:       user,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sts := buildStatefulSet(t, newCluster(func(c *pgv1.PostgresCluster) { c.Spec.Scheduling = tt.scheduling }))
			pod := sts.Spec.Template.Spec
			got := pgv1.SchedulingSpec{
				Affinity:                  pod.Affinity,
				Tolerations:               pod.Tolerations,
				NodeSelector:              pod.NodeSelector,
				TopologySpreadConstraints: pod.TopologySpreadConstraints,
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("scheduling (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBuildStatefulSetRunsTheAgent(t *testing.T) {
	c := newCluster()
	sts := buildStatefulSet(t, c)
	pod := sts.Spec.Template.Spec
	if len(sts.Spec.Template.Annotations) != 0 {
		t.Errorf("pod template annotations = %v; a configuration change must not roll the pods", sts.Spec.Template.Annotations)
	}
	if len(pod.InitContainers) != 1 || pod.InitContainers[0].Image != testImages.Agent ||
		!slices.Equal(pod.InitContainers[0].Command, []string{AgentBinary, "install", "/pgpilot/bin/agent"}) {
		t.Fatalf("init containers = %+v, want the agent installed from the operator image", pod.InitContainers)
	}
	pg := pod.Containers[0]
	if !slices.Equal(pg.Command, []string{"/pgpilot/bin/agent"}) || len(pg.Args) != 0 {
		t.Errorf("postgres container runs %v %v, want the agent", pg.Command, pg.Args)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range pg.Env {
		env[e.Name] = e
	}
	// Credentials are files projected from the Secrets (the kubelet updates them in place), never
	// environment variables (fixed for the container's life).
	for _, e := range pg.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			t.Errorf("env %s comes from a Secret", e.Name)
		}
	}
	projected := map[string]string{} // file → Secret/key
	for _, v := range pod.Volumes {
		if v.Projected == nil {
			continue
		}
		if v.Projected.DefaultMode == nil || *v.Projected.DefaultMode != 0o440 {
			t.Errorf("credentials volume mode %v, want 0440", v.Projected.DefaultMode)
		}
		for _, source := range v.Projected.Sources {
			for _, item := range source.Secret.Items {
				projected[item.Path] = source.Secret.Name + "/" + item.Key
			}
		}
	}
	for file, want := range map[string]string{
		"superuser-password":   SuperuserSecretName(c) + "/password",
		"replication-password": ReplicationSecretName(c) + "/password",
		"app-username":         AppSecretName(c) + "/username",
		"app-password":         AppSecretName(c) + "/password",
		"agent-token":          AgentSecretName(c) + "/password",
	} {
		if projected[file] != want {
			t.Errorf("credential file %s from %q, want %s", file, projected[file], want)
		}
	}
	if env["PGPILOT_CREDENTIALS_DIR"].Value != "/pgpilot/credentials" {
		t.Errorf("PGPILOT_CREDENTIALS_DIR = %+v", env["PGPILOT_CREDENTIALS_DIR"])
	}
	for name, want := range map[string]string{
		"PGDATA": PGDataPath, "PGPILOT_INITIAL_PRIMARY": "db-0", "PGPILOT_PRIMARY_HOST": "db-rw", "PGPILOT_APP_DATABASE": "app",
	} {
		if env[name].Value != want {
			t.Errorf("env %s = %q, want %q", name, env[name].Value, want)
		}
	}
	if ref := env["PGPILOT_POD_NAME"].ValueFrom; ref == nil || ref.FieldRef == nil || ref.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("PGPILOT_POD_NAME = %+v, want the downward API pod name", env["PGPILOT_POD_NAME"])
	}
	for probe, path := range map[*corev1.Probe]string{pg.StartupProbe: "/startupz", pg.ReadinessProbe: "/readyz", pg.LivenessProbe: "/healthz"} {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != path || probe.HTTPGet.Port.StrVal != "agent" ||
			probe.HTTPGet.Scheme != corev1.URISchemeHTTPS {
			t.Errorf("probe %+v, want GET %s on the agent port over HTTPS", probe, path)
		}
	}
	// The certificates: the TLS Secret whole (the agent reloads it when the kubelet rewrites
	// it), never the CA Secret, which holds the CA's key.
	var tlsVolume *corev1.Volume
	for i, v := range pod.Volumes {
		if v.Secret != nil {
			if v.Secret.SecretName != TLSSecretName(c) || len(v.Secret.Items) != 0 {
				t.Errorf("secret volume %s from %s %v, want the whole TLS Secret", v.Name, v.Secret.SecretName, v.Secret.Items)
			}
			tlsVolume = &pod.Volumes[i]
		}
		for _, source := range volumeSecrets(v) {
			if source == CASecretName(c) {
				t.Errorf("volume %s mounts the CA Secret", v.Name)
			}
		}
	}
	if tlsVolume == nil || *tlsVolume.Secret.DefaultMode != 0o440 {
		t.Fatalf("TLS volume %+v, want the TLS Secret with mode 0440", tlsVolume)
	}
	mounted := ""
	for _, m := range pg.VolumeMounts {
		if m.Name == tlsVolume.Name && m.ReadOnly {
			mounted = m.MountPath
		}
	}
	if mounted == "" || env["PGPILOT_TLS_DIR"].Value != mounted {
		t.Errorf("PGPILOT_TLS_DIR = %q, TLS volume mounted read-only at %q", env["PGPILOT_TLS_DIR"].Value, mounted)
	}
}

// volumeSecrets names the Secrets a volume reads.
func volumeSecrets(v corev1.Volume) []string {
	var names []string
	if v.Secret != nil {
		names = append(names, v.Secret.SecretName)
	}
	if v.Projected != nil {
		for _, s := range v.Projected.Sources {
			if s.Secret != nil {
				names = append(names, s.Secret.Name)
			}
		}
	}
	return names
}

// During a major upgrade the pods run the new major's image and carry the old major's server in
// from its own image: an init container of the old image copies it into a volume the agent reads
// (PGPILOT_CARRIED_DIR); without one, none of it is there.
func TestBuildStatefulSetCarriesTheOldMajor(t *testing.T) {
	volumes := len(buildStatefulSet(t, newCluster()).Spec.Template.Spec.Volumes)
	for _, carried := range []*CarriedImage{nil, {Image: "ghcr.io/pgpilot/postgresql:15", Major: 15}} {
		images := testImages
		images.Carried = carried
		ac, err := BuildStatefulSet(newCluster(), images)
		if err != nil {
			t.Fatal(err)
		}
		pod := toTyped[appsv1.StatefulSet](t, ac).Spec.Template.Spec
		pg := pod.Containers[0]
		carriedDir := ""
		for _, e := range pg.Env {
			if e.Name == "PGPILOT_CARRIED_DIR" {
				carriedDir = e.Value
			}
		}
		mounted := slices.ContainsFunc(pg.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/pgpilot/carried" && !m.ReadOnly })
		if carried == nil {
			if len(pod.InitContainers) != 1 || carriedDir != "" || mounted || len(pod.Volumes) != volumes {
				t.Errorf("without an upgrade: init containers %d, carried dir %q, mounted %v, %d volumes", len(pod.InitContainers), carriedDir, mounted, len(pod.Volumes))
			}
			continue
		}
		if len(pod.InitContainers) != 2 || len(pod.Volumes) != volumes+1 {
			t.Fatalf("init containers = %+v, %d volumes", pod.InitContainers, len(pod.Volumes))
		}
		carry := pod.InitContainers[1]
		if carry.Name != CarryContainerName || carry.Image != carried.Image ||
			!slices.Equal(carry.Command, []string{AgentPath, "carry", "15", "/pgpilot/carried"}) ||
			!slices.ContainsFunc(carry.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/pgpilot/carried" && !m.ReadOnly }) {
			t.Errorf("carry container = %+v", carry)
		}
		if carriedDir != "/pgpilot/carried" || !mounted || pg.Image != testImages.Postgres {
			t.Errorf("postgres container: carried dir %q, mounted %v, image %s", carriedDir, mounted, pg.Image)
		}
	}
}
