package builder

import (
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

const (
	customQueriesVolumeName = "custom-queries"
	customQueriesDir        = "/pgpilot/custom-queries"
)

// CustomQueriesFile is the file a source of custom queries becomes in the agent's directory,
// named after it so that an error about the file names the ConfigMap or Secret key.
func CustomQueriesFile(src pgv1.CustomQueriesSource) string {
	if src.Secret != nil {
		return "secret." + src.Secret.Name + "." + src.Secret.Key
	}
	return "configmap." + src.ConfigMap.Name + "." + src.ConfigMap.Key
}

// customQueriesVolume projects every source into one directory; nil without any. Projected
// (not subPath) files are updated in place by the kubelet, so the agent loads a change
// without a restart. The sources are optional: a missing ConfigMap must not keep an instance
// (or a failover) from starting; the agent says what is missing.
func customQueriesVolume(c *pgv1.PostgresCluster) *corev1ac.VolumeApplyConfiguration {
	sources := c.Spec.Monitoring.CustomQueries
	if len(sources) == 0 {
		return nil
	}
	var projections []*corev1ac.VolumeProjectionApplyConfiguration
	for _, src := range sources {
		item := corev1ac.KeyToPath().WithPath(CustomQueriesFile(src))
		switch {
		case src.Secret != nil:
			projections = append(projections, corev1ac.VolumeProjection().WithSecret(corev1ac.SecretProjection().
				WithName(src.Secret.Name).WithOptional(true).WithItems(item.WithKey(src.Secret.Key))))
		case src.ConfigMap != nil:
			projections = append(projections, corev1ac.VolumeProjection().WithConfigMap(corev1ac.ConfigMapProjection().
				WithName(src.ConfigMap.Name).WithOptional(true).WithItems(item.WithKey(src.ConfigMap.Key))))
		}
	}
	return corev1ac.Volume().WithName(customQueriesVolumeName).WithProjected(corev1ac.ProjectedVolumeSource().
		WithDefaultMode(0o440).WithSources(projections...))
}
