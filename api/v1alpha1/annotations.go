package v1alpha1

// SwitchoverAnnotation on a PostgresCluster names the instance to make the primary by a
// planned switchover: `kubectl annotate pgc NAME postgres.pgpilot.io/switchover-to=NAME-1`.
const SwitchoverAnnotation = "postgres.pgpilot.io/switchover-to"

// RestartAnnotation on a PostgresCluster asks for a rolling restart of every instance, in the
// order of any pod template change (replicas, then the primary by a switchover or in place, as
// spec.primaryUpdateMethod says). pgpilot copies its value, conventionally the time of the
// request, onto the pods' template; a new value asks for another restart:
// `kubectl annotate --overwrite pgc NAME postgres.pgpilot.io/restarted-at="$(date -Is)"`.
const RestartAnnotation = "postgres.pgpilot.io/restarted-at"

// RotateCAAnnotation on a PostgresCluster asks for a rotation of the cluster's certificate
// authority, with overlap: the instances first trust the new CA beside the old, then every
// certificate is issued again from it, then the old one is dropped, each step once every
// instance has loaded the last; no restart. A new value, conventionally the time of the
// request, asks for another: `kubectl annotate --overwrite pgc NAME postgres.pgpilot.io/rotate-ca="$(date -Is)"`.
const RotateCAAnnotation = "postgres.pgpilot.io/rotate-ca"

// RetryMajorUpgradeAnnotation on a PostgresCluster asks pgpilot to check a held major upgrade
// again at once (status.majorUpgrade.step CheckFailed), or to try a reverted one again
// (Reverted), without going back to the old image first. A new value, conventionally the time of
// the request, asks again: `kubectl annotate --overwrite pgc NAME postgres.pgpilot.io/retry-major-upgrade="$(date -Is)"`.
const RetryMajorUpgradeAnnotation = "postgres.pgpilot.io/retry-major-upgrade"
