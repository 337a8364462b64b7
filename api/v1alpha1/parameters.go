package v1alpha1

// The bound lets the API server afford the CEL rules on every value of
// spec.postgresql.parameters (200 values at most); the longest real settings
// (shared_preload_libraries, log_line_prefix, search_path) are far shorter.

// ParameterValue is the value of one postgresql.conf setting, at most 4096 characters.
// +kubebuilder:validation:MaxLength=4096
type ParameterValue string
