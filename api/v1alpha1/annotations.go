package v1alpha1

// SwitchoverAnnotation on a PostgresCluster names the instance to make the primary by a
// planned switchover: `kubectl annotate pgc NAME postgres.pgpilot.io/switchover-to=NAME-1`.
const SwitchoverAnnotation = "postgres.pgpilot.io/switchover-to"
