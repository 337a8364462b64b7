package v1alpha1

// MaxClusterNameLength is the longest metadata.name every child of a cluster can be derived
// from. The CRD enforces it (a rule on the PostgresCluster type, checked against this number
// by a test), and a builder test validates every derived name at this length.
const MaxClusterNameLength = 52
