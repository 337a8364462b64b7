package controller

import (
	"context"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	"github.com/pgpilot/pgpilot-operator/internal/apply"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
	"github.com/pgpilot/pgpilot-operator/internal/controller/agentclient"
)

// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;patch

func (r *PostgresClusterReconciler) ensureConfigMap(ctx context.Context, s *scope) (*stop, error) {
	pods, err := r.instancePods(ctx, s.cluster)
	if err != nil {
		return nil, err
	}
	// TLS is required of remote connections once no instance runs an agent without
	// certificates: until its pod is rolled, such an instance can neither serve TLS nor log in
	// by certificate.
	s.tlsRequired = !slices.ContainsFunc(pods, func(p corev1.Pod) bool { return !agentclient.ServesTLS(&p) })
	sts, err := r.liveStatefulSet(ctx, s)
	if err != nil {
		return nil, err
	}
	if isLegacySuperuserAccess(s.cluster, sts) {
		s.cluster.Status.LegacySuperuserAccess = true
	}
	statistics, err := r.loadsStatementStatistics(ctx, s, sts)
	if err != nil {
		return nil, err
	}
	desired := pgbuilder.BuildConfigMap(withStatementStatistics(withSuperuserAccess(s.cluster, s.cluster.Status.LegacySuperuserAccess), statistics),
		agentapi.TLSPolicy{Required: s.tlsRequired})
	s.configHash = agentapi.ConfigHash([]byte(desired.Data[agentapi.PostgresqlConfFile]), []byte(desired.Data[agentapi.HBAConfFile]))
	live := &corev1.ConfigMap{} // as it was before this reconcile's apply
	if err := ensureOwned(ctx, r, s, desired, live); err != nil {
		return nil, err
	}
	s.tlsNowRequired = s.tlsRequired && live.ResourceVersion != "" && live.Data[agentapi.TLSPolicyFile] != desired.Data[agentapi.TLSPolicyFile]
	return nil, nil
}

// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;patch;delete

func (r *PostgresClusterReconciler) ensureStatefulSet(ctx context.Context, s *scope) (*stop, error) {
	live, err := r.liveStatefulSet(ctx, s)
	if err != nil {
		return nil, err
	}
	major, st := resolveMajor(s.cluster, live)
	if st != nil {
		return st, nil
	}
	s.postgresMajor = major
	images, st := r.instanceImages(s.cluster, major)
	if st != nil {
		return st, nil
	}
	if r.AgentImage == "" {
		return invalid("NoAgentImage", "the operator does not know its own image, which carries the instance agent (set RELATED_IMAGE_AGENT)"), nil
	}
	desired, err := pgbuilder.BuildStatefulSet(s.cluster, images)
	if err != nil {
		return invalid("InvalidSpec", err.Error()), nil
	}
	if s.cluster.Status.LegacySuperuserAccess {
		desired.WithAnnotations(map[string]string{legacySuperuserAccessAnnotation: "true"})
	}
	if replaced, err := r.replaceForLargerVolumes(ctx, s); err != nil {
		return nil, err
	} else if replaced {
		return waitFor("VolumesGrowing", "the StatefulSet was replaced to grow the volumes; waiting to create it anew"), nil
	}
	sts := &appsv1.StatefulSet{}
	if err := ensureOwned(ctx, r, s, desired, sts); err != nil {
		return nil, err
	}
	s.statefulSet = sts
	return nil, nil
}

// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;patch

func (r *PostgresClusterReconciler) ensureServices(ctx context.Context, s *scope) (*stop, error) {
	for _, svc := range pgbuilder.BuildServices(s.cluster) {
		if err := ensureOwned(ctx, r, s, svc, &corev1.Service{}); err != nil {
			return nil, err
		}
	}
	return nil, nil
}

// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;patch

func (r *PostgresClusterReconciler) ensurePodDisruptionBudget(ctx context.Context, s *scope) (*stop, error) {
	return nil, ensureOwned(ctx, r, s, pgbuilder.BuildPodDisruptionBudget(s.cluster), &policyv1.PodDisruptionBudget{})
}

// ensureOwned applies one owned object when it differs from the cache, and notes the write.
// live receives the object as cached (or nothing, when it was just created).
func ensureOwned[A apply.Config[A]](ctx context.Context, r *PostgresClusterReconciler, s *scope, desired A, live client.Object) error {
	kind, name := *desired.GetKind(), *desired.GetName()
	outcome, err := apply.Ensure(ctx, r.Client, pgbuilder.FieldOwner, desired, live)
	if err != nil {
		return fmt.Errorf("ensure %s %s: %w", kind, name, err)
	}
	s.noteEnsured(live, outcome != apply.Unchanged)
	switch outcome {
	case apply.Created:
		s.created = append(s.created, kind+" "+name)
	case apply.Updated:
		s.updated = append(s.updated, kind+" "+name)
	default:
		return nil
	}
	recordWrite(kind, string(outcome))
	logf.FromContext(ctx).Info("applied owned object", "kind", kind, "name", name, "outcome", outcome)
	return nil
}

// loadsStatementStatistics says whether the cluster loads pg_stat_statements: a new one (no
// StatefulSet, never a primary) does, one whose configuration loads it already keeps it (its
// ConfigMap is the record, beside status.statementStatistics), and a cluster of an earlier
// release running without it is not restarted to load it.
func (r *PostgresClusterReconciler) loadsStatementStatistics(ctx context.Context, s *scope, sts *appsv1.StatefulSet) (bool, error) {
	live := &corev1.ConfigMap{}
	err := r.Get(ctx, client.ObjectKey{Namespace: s.cluster.Namespace, Name: pgbuilder.ConfigMapName(s.cluster)}, live)
	if client.IgnoreNotFound(err) != nil {
		return false, fmt.Errorf("get configmap: %w", err)
	}
	if s.cluster.Status.StatementStatistics || (sts == nil && s.cluster.Status.CurrentPrimary == "") ||
		pgbuilder.LoadsStatementStatistics(live.Data[agentapi.PostgresqlConfFile]) {
		s.cluster.Status.StatementStatistics = true
	}
	return s.cluster.Status.StatementStatistics, nil
}

func withStatementStatistics(c *pgv1.PostgresCluster, on bool) *pgv1.PostgresCluster {
	if !on {
		return c
	}
	return pgbuilder.WithStatementStatistics(c)
}
