package builder

import (
	"encoding/json"
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// The user and group of the official postgres image, whose conventions pgpilot's images follow.
const postgresUID = 999

// DataVolumeName is the volume claim template of each instance.
const DataVolumeName = "pgdata"

const (
	configVolumeName = "config"
	socketVolumeName = "run"
	socketDir        = "/var/run/postgresql"
	agentVolumeName  = "pgpilot-bin"
	agentDir         = "/pgpilot/bin"
	// The older major's server during a major upgrade (Images.Carried).
	carriedVolumeName = "pgpilot-carried"
	carriedDir        = "/pgpilot/carried"
	// AgentPath is the agent in the PostgreSQL container, where `kubectl exec` finds it.
	AgentPath = agentDir + "/agent"
	// PostgresContainerName is the container that runs the agent and PostgreSQL.
	PostgresContainerName = "postgres"
	// CarryContainerName is the init container that carries an older major's server in.
	CarryContainerName = "carry-postgres"
	// The credential Secrets, projected: the kubelet rewrites the files when a Secret changes,
	// and the agent applies the new passwords without a restart.
	credentialsVolumeName = "credentials"
	credentialsDir        = "/pgpilot/credentials"
	// The TLS Secret, projected the same way: renewed certificates are loaded without a restart.
	tlsVolumeName = "tls"
	tlsDir        = "/pgpilot/tls"
)

// AgentBinary is where the operator image keeps the instance agent.
const AgentBinary = "/agent"

// Images are the container images of an instance pod.
type Images struct {
	// Postgres has the PostgreSQL server binaries.
	Postgres string
	// Agent is the operator's image, which carries the instance agent.
	Agent string
	// PostgresMajor is the major of Postgres, recorded on the StatefulSet
	// (PostgresMajorAnnotation).
	PostgresMajor int32
	// Carried, during a major upgrade, is the image of the data's older major, whose server an
	// init container copies out for the agent to run until the data is upgraded.
	Carried *CarriedImage
}

// CarriedImage is an older major's image and that major.
type CarriedImage struct {
	Image string
	Major int32
}

// PostgresMajorAnnotation, on the StatefulSet, is the PostgreSQL major its instances were made
// for: the record of a new cluster's major until its status holds it.
const PostgresMajorAnnotation = "postgres.pgpilot.io/postgres-major"

// BuildStatefulSet runs the cluster's instances: the instance agent, copied in from the
// operator image by an init container, supervises PostgreSQL from the PostgreSQL image.
func BuildStatefulSet(c *pgv1.PostgresCluster, images Images) (*appsv1ac.StatefulSetApplyConfiguration, error) {
	pod, err := buildPodTemplate(c, images)
	if err != nil {
		return nil, fmt.Errorf("pod template: %w", err)
	}
	sts := appsv1ac.StatefulSet(StatefulSetName(c), c.Namespace).
		WithLabels(CommonLabels(c))
	if images.PostgresMajor != 0 {
		sts.WithAnnotations(map[string]string{PostgresMajorAnnotation: strconv.Itoa(int(images.PostgresMajor))})
	}
	return sts.
		WithOwnerReferences(ownerReference(c)).
		WithSpec(appsv1ac.StatefulSetSpec().
			WithReplicas(c.Spec.Instances).
			WithServiceName(HeadlessServiceName(c)).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(SelectorLabels(c))).
			WithPodManagementPolicy(appsv1.OrderedReadyPodManagement).
			// pgpilot replaces outdated pods itself, replicas first and the primary after a
			// switchover (the operator's update stage).
			WithUpdateStrategy(appsv1ac.StatefulSetUpdateStrategy().WithType(appsv1.OnDeleteStatefulSetStrategyType)).
			WithPersistentVolumeClaimRetentionPolicy(appsv1ac.StatefulSetPersistentVolumeClaimRetentionPolicy().
				WithWhenDeleted(retentionPolicy(c.Spec.Storage.ReclaimPolicy)).
				WithWhenScaled(appsv1.RetainPersistentVolumeClaimRetentionPolicyType)).
			WithTemplate(pod).
			WithVolumeClaimTemplates(buildDataClaimTemplate(c))), nil
}

func retentionPolicy(p pgv1.PVCReclaimPolicy) appsv1.PersistentVolumeClaimRetentionPolicyType {
	if p == pgv1.PVCReclaimDelete {
		return appsv1.DeletePersistentVolumeClaimRetentionPolicyType
	}
	return appsv1.RetainPersistentVolumeClaimRetentionPolicyType
}

func buildDataClaimTemplate(c *pgv1.PostgresCluster) *corev1ac.PersistentVolumeClaimApplyConfiguration {
	spec := corev1ac.PersistentVolumeClaimSpec().
		WithAccessModes(corev1.ReadWriteOnce).
		WithVolumeMode(corev1.PersistentVolumeFilesystem).
		WithResources(corev1ac.VolumeResourceRequirements().
			WithRequests(corev1.ResourceList{corev1.ResourceStorage: c.Spec.Storage.Size}))
	if c.Spec.Storage.StorageClassName != nil {
		spec.WithStorageClassName(*c.Spec.Storage.StorageClassName)
	}
	// Not corev1ac.PersistentVolumeClaim(name, ""): a template carries no namespace, kind or
	// apiVersion, and fields the API server never returns would keep the StatefulSet from ever
	// looking up to date.
	return (&corev1ac.PersistentVolumeClaimApplyConfiguration{}).
		WithName(DataVolumeName).
		WithLabels(CommonLabels(c)).
		WithSpec(spec)
}

func buildPodTemplate(c *pgv1.PostgresCluster, images Images) (*corev1ac.PodTemplateSpecApplyConfiguration, error) {
	spec := corev1ac.PodSpec().
		WithSecurityContext(corev1ac.PodSecurityContext().
			WithRunAsNonRoot(true).
			WithRunAsUser(postgresUID).
			WithRunAsGroup(postgresUID).
			WithFSGroup(postgresUID).
			WithFSGroupChangePolicy(corev1.FSGroupChangeOnRootMismatch).
			WithSeccompProfile(corev1ac.SeccompProfile().WithType(corev1.SeccompProfileTypeRuntimeDefault))).
		WithTerminationGracePeriodSeconds(60).
		WithEnableServiceLinks(false).
		// The agent reads and renews the primary Lease with this account's token (access.go).
		WithServiceAccountName(InstanceAccessName(c)).
		WithAutomountServiceAccountToken(true).
		WithInitContainers(buildAgentInstaller(images.Agent)).
		WithContainers(buildPostgresContainer(c, images)).
		WithVolumes(
			corev1ac.Volume().WithName(configVolumeName).
				WithConfigMap(corev1ac.ConfigMapVolumeSource().WithName(ConfigMapName(c))),
			corev1ac.Volume().WithName(socketVolumeName).WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
			corev1ac.Volume().WithName(agentVolumeName).WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
			credentialsVolume(c),
			corev1ac.Volume().WithName(tlsVolumeName).WithSecret(corev1ac.SecretVolumeSource().
				WithSecretName(TLSSecretName(c)).WithDefaultMode(0o440)),
		)
	if queries := customQueriesVolume(c); queries != nil {
		spec.WithVolumes(queries)
	}
	if images.Carried != nil {
		spec.WithInitContainers(buildServerCarrier(*images.Carried)).
			WithVolumes(corev1ac.Volume().WithName(carriedVolumeName).WithEmptyDir(corev1ac.EmptyDirVolumeSource()))
	}
	if err := applyScheduling(spec, c); err != nil {
		return nil, err
	}
	// No configuration hash on the template: the agent reloads changed files in place, and a
	// parameter that needs a restart is reported, not forced by rolling every pod.
	template := corev1ac.PodTemplateSpec().WithLabels(CommonLabels(c)).WithSpec(spec)
	if at := c.Annotations[pgv1.RestartAnnotation]; at != "" {
		// A changed template is what rolls the instances, in pgpilot's order (the update stage).
		template.WithAnnotations(map[string]string{pgv1.RestartAnnotation: at})
	}
	return template, nil
}

// buildAgentInstaller copies the agent out of the operator image, so any image with the
// PostgreSQL server binaries (the official one included) can run it.
func buildAgentInstaller(image string) *corev1ac.ContainerApplyConfiguration {
	return corev1ac.Container().
		WithName("install-agent").
		WithImage(image).
		WithImagePullPolicy(corev1.PullIfNotPresent).
		WithCommand(AgentBinary, "install", agentDir+"/agent").
		WithSecurityContext(restrictedContainer()).
		WithVolumeMounts(corev1ac.VolumeMount().WithName(agentVolumeName).WithMountPath(agentDir))
}

// buildServerCarrier copies the older major's server and the libraries it links out of its own
// image (the agent, installed before, runs there), since the new major's image, on a newer
// Debian release, has neither.
func buildServerCarrier(carried CarriedImage) *corev1ac.ContainerApplyConfiguration {
	return corev1ac.Container().
		WithName(CarryContainerName).
		WithImage(carried.Image).
		WithImagePullPolicy(corev1.PullIfNotPresent).
		WithCommand(AgentPath, "carry", strconv.Itoa(int(carried.Major)), carriedDir).
		WithSecurityContext(restrictedContainer()).
		WithVolumeMounts(
			corev1ac.VolumeMount().WithName(agentVolumeName).WithMountPath(agentDir).WithReadOnly(true),
			corev1ac.VolumeMount().WithName(carriedVolumeName).WithMountPath(carriedDir))
}

func restrictedContainer() *corev1ac.SecurityContextApplyConfiguration {
	return corev1ac.SecurityContext().
		WithAllowPrivilegeEscalation(false).
		WithRunAsNonRoot(true).
		WithCapabilities(corev1ac.Capabilities().WithDrop("ALL"))
}

func buildPostgresContainer(c *pgv1.PostgresCluster, images Images) *corev1ac.ContainerApplyConfiguration {
	container := corev1ac.Container().
		WithName(PostgresContainerName).
		WithImage(images.Postgres).
		WithImagePullPolicy(corev1.PullIfNotPresent).
		WithCommand(AgentPath).
		WithEnv(agentEnvironment(c, images.Carried != nil)...).
		WithPorts(
			corev1ac.ContainerPort().WithName("postgres").WithContainerPort(agentapi.DefaultPostgresPort).WithProtocol(corev1.ProtocolTCP),
			corev1ac.ContainerPort().WithName("agent").WithContainerPort(agentapi.DefaultAgentPort).WithProtocol(corev1.ProtocolTCP),
			corev1ac.ContainerPort().WithName("metrics").WithContainerPort(agentapi.DefaultMetricsPort).WithProtocol(corev1.ProtocolTCP),
		).
		// Startup covers initdb or a clone of a large primary; readiness is "accepts
		// connections"; liveness only asks whether the postmaster runs, so a busy server is
		// never killed for being slow to answer.
		WithStartupProbe(agentProbe(agentapi.PathStartup, 5, 720)).
		// A primary that stops answering leaves the -rw Service and wakes the operator (a pod
		// update) within 4 s: failover starts from here.
		WithReadinessProbe(agentProbe(agentapi.PathReadiness, 2, 2)).
		WithLivenessProbe(agentProbe(agentapi.PathLiveness, 10, 6)).
		WithSecurityContext(restrictedContainer()).
		WithVolumeMounts(
			corev1ac.VolumeMount().WithName(DataVolumeName).WithMountPath(DataMountPath),
			corev1ac.VolumeMount().WithName(configVolumeName).WithMountPath(ConfigMountPath).WithReadOnly(true),
			corev1ac.VolumeMount().WithName(socketVolumeName).WithMountPath(socketDir),
			corev1ac.VolumeMount().WithName(agentVolumeName).WithMountPath(agentDir).WithReadOnly(true),
			corev1ac.VolumeMount().WithName(credentialsVolumeName).WithMountPath(credentialsDir).WithReadOnly(true),
			corev1ac.VolumeMount().WithName(tlsVolumeName).WithMountPath(tlsDir).WithReadOnly(true),
		)
	if len(c.Spec.Monitoring.CustomQueries) > 0 {
		container.WithVolumeMounts(corev1ac.VolumeMount().WithName(customQueriesVolumeName).WithMountPath(customQueriesDir).WithReadOnly(true))
	}
	if images.Carried != nil {
		// Writable: the agent links there the carried libraries this image lacks (Carried.Link).
		container.WithVolumeMounts(corev1ac.VolumeMount().WithName(carriedVolumeName).WithMountPath(carriedDir))
	}
	if res := c.Spec.Resources; len(res.Limits) > 0 || len(res.Requests) > 0 {
		rr := corev1ac.ResourceRequirements()
		if len(res.Limits) > 0 {
			rr.WithLimits(res.Limits)
		}
		if len(res.Requests) > 0 {
			rr.WithRequests(res.Requests)
		}
		container.WithResources(rr)
	}
	return container
}

// AgentConfig is what the instance pods' environment tells their agents; the pod name comes
// from each pod itself.
func AgentConfig(c *pgv1.PostgresCluster) agentapi.Config {
	cfg := agentapi.Config{
		ClusterName:    c.Name,
		InitialPrimary: InstancePodName(c, 0),
		PrimaryHost:    ReadWriteServiceName(c),
		DataDir:        PGDataPath,
		ConfigDir:      ConfigMountPath,
		SocketDir:      socketDir,
		AppDatabase:    c.Spec.Bootstrap.InitDB.Database,
		CredentialsDir: credentialsDir,
		TLSDir:         tlsDir,
	}
	if len(c.Spec.Monitoring.CustomQueries) > 0 {
		cfg.CustomQueriesDir = customQueriesDir
	}
	return cfg.WithDefaults()
}

// agentCredentials are the Secret keys the agents read their credentials from.
func agentCredentials(c *pgv1.PostgresCluster) agentapi.CredentialRefs {
	password := func(secret string) agentapi.SecretKeyRef {
		return agentapi.SecretKeyRef{Name: secret, Key: corev1.BasicAuthPasswordKey}
	}
	return agentapi.CredentialRefs{
		SuperuserPassword:   password(SuperuserSecretName(c)),
		ReplicationPassword: password(ReplicationSecretName(c)),
		AppUser:             agentapi.SecretKeyRef{Name: AppSecretName(c), Key: corev1.BasicAuthUsernameKey},
		AppPassword:         password(AppSecretName(c)),
		AgentToken:          password(AgentSecretName(c)),
	}
}

func agentEnvironment(c *pgv1.PostgresCluster, carried bool) []*corev1ac.EnvVarApplyConfiguration {
	config := AgentConfig(c)
	if carried {
		config.CarriedDir = carriedDir
	}
	variables := config.Environment()
	env := make([]*corev1ac.EnvVarApplyConfiguration, 0, len(variables))
	for _, v := range variables {
		e := corev1ac.EnvVar().WithName(v.Name)
		if v.FieldPath != "" {
			e.WithValueFrom(corev1ac.EnvVarSource().WithFieldRef(corev1ac.ObjectFieldSelector().WithFieldPath(v.FieldPath)))
		} else {
			e.WithValue(v.Value)
		}
		env = append(env, e)
	}
	return env
}

// credentialsVolume projects each credential's Secret key to its file in the agent's
// credentials directory, readable by the pod's group only.
func credentialsVolume(c *pgv1.PostgresCluster) *corev1ac.VolumeApplyConfiguration {
	var sources []*corev1ac.VolumeProjectionApplyConfiguration
	bySecret := map[string]*corev1ac.SecretProjectionApplyConfiguration{}
	for _, f := range agentCredentials(c).Files() {
		projection, ok := bySecret[f.Secret.Name]
		if !ok {
			projection = corev1ac.SecretProjection().WithName(f.Secret.Name)
			bySecret[f.Secret.Name] = projection
			sources = append(sources, corev1ac.VolumeProjection().WithSecret(projection))
		}
		projection.WithItems(corev1ac.KeyToPath().WithKey(f.Secret.Key).WithPath(f.Path))
	}
	// The repositories' Secrets are the user's: optional, so that a missing one never keeps
	// an instance from starting (failover included); the agent and the status say what is missing.
	for _, f := range repositoryKeyFiles(c) {
		sources = append(sources, corev1ac.VolumeProjection().WithSecret(corev1ac.SecretProjection().
			WithName(f.Secret.Name).WithOptional(true).WithItems(corev1ac.KeyToPath().WithKey(f.Secret.Key).WithPath(f.Path))))
	}
	return corev1ac.Volume().WithName(credentialsVolumeName).WithProjected(corev1ac.ProjectedVolumeSource().
		WithDefaultMode(0o440).WithSources(sources...))
}

func agentProbe(path string, period, failures int32) *corev1ac.ProbeApplyConfiguration {
	return corev1ac.Probe().
		// The kubelet does not verify the agent's certificate; the probes need no client one.
		WithHTTPGet(corev1ac.HTTPGetAction().WithScheme(corev1.URISchemeHTTPS).WithPath(path).WithPort(intstr.FromString("agent"))).
		WithPeriodSeconds(period).
		WithTimeoutSeconds(5).
		WithFailureThreshold(failures)
}

// applyScheduling copies the user's scheduling constraints, defaulting to a preference for
// one instance per node so that losing a node loses at most one instance.
func applyScheduling(spec *corev1ac.PodSpecApplyConfiguration, c *pgv1.PostgresCluster) error {
	s := c.Spec.Scheduling
	if len(s.NodeSelector) > 0 {
		spec.WithNodeSelector(s.NodeSelector)
	}
	affinity := defaultAffinity(c)
	if s.Affinity != nil {
		affinity = &corev1ac.AffinityApplyConfiguration{}
		if err := convert(s.Affinity, affinity); err != nil {
			return fmt.Errorf("affinity: %w", err)
		}
	}
	spec.WithAffinity(affinity)
	for i := range s.Tolerations {
		t := &corev1ac.TolerationApplyConfiguration{}
		if err := convert(&s.Tolerations[i], t); err != nil {
			return fmt.Errorf("toleration %d: %w", i, err)
		}
		spec.WithTolerations(t)
	}
	for i := range s.TopologySpreadConstraints {
		t := &corev1ac.TopologySpreadConstraintApplyConfiguration{}
		if err := convert(&s.TopologySpreadConstraints[i], t); err != nil {
			return fmt.Errorf("topology spread constraint %d: %w", i, err)
		}
		spec.WithTopologySpreadConstraints(t)
	}
	return nil
}

func defaultAffinity(c *pgv1.PostgresCluster) *corev1ac.AffinityApplyConfiguration {
	return corev1ac.Affinity().WithPodAntiAffinity(corev1ac.PodAntiAffinity().
		WithPreferredDuringSchedulingIgnoredDuringExecution(corev1ac.WeightedPodAffinityTerm().
			WithWeight(100).
			WithPodAffinityTerm(corev1ac.PodAffinityTerm().
				WithTopologyKey(corev1.LabelHostname).
				WithLabelSelector(metav1ac.LabelSelector().WithMatchLabels(SelectorLabels(c))))))
}

// convert turns a typed API value into its apply configuration; both share one JSON shape.
func convert(typed, applyConfig any) error {
	data, err := json.Marshal(typed)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, applyConfig)
}
