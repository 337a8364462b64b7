package v1alpha1

import (
	"slices"
	"strings"
)

// ForbiddenParameters are the PostgreSQL settings that run a shell command or load code into the
// server. spec.postgresql.parameters may not set them: a user who may edit a PostgresCluster
// gets a database, not the pods' processes (the editor role does not include pods/exec). The CRD
// rejects each with one XValidation rule on PostgreSQLSpec.Parameters (other spellings with the
// case rule on PostgreSQLSpec), the builder refuses them again, and a real-server test of every
// supported major checks that every setting of pg_settings that names a command, a library or a
// code path is here, managed (ManagedParameters) or shared_preload_libraries.
var ForbiddenParameters = []string{
	"archive_cleanup_command",
	"recovery_end_command",
	"ssl_passphrase_command",
	"archive_library",
	"session_preload_libraries",
	"local_preload_libraries",
	"dynamic_library_path",
	"jit_provider",
	// PostgreSQL 18.
	"oauth_validator_libraries",
	"extension_control_path",
	"output_plugin_libraries",
}

// ForbiddenParameterMessage is what the API server says when spec.postgresql.parameters sets a
// forbidden parameter.
func ForbiddenParameterMessage(name string) string {
	return "postgresql.parameters." + name + " runs a command or loads code in the server and cannot be set"
}

// PreloadLibraries are the libraries of pgpilot's images that shared_preload_libraries may
// name: each is code the image ships and pgpilot has run.
var PreloadLibraries = []string{"pg_stat_statements", "auto_explain", "pgaudit"}

// PreloadLibrariesMessage is what the API server says of another shared_preload_libraries.
const PreloadLibrariesMessage = "postgresql.parameters.shared_preload_libraries may name only pg_stat_statements, auto_explain and pgaudit, separated by commas"

// AllowedPreloadLibraries says whether a shared_preload_libraries value names only
// PreloadLibraries, as the CRD's rule does (comma-separated, spaces around names ignored; the
// rule allows spaces only, this also tabs, which the rule refuses first).
func AllowedPreloadLibraries(value string) bool {
	for _, library := range strings.Split(value, ",") {
		if !slices.Contains(PreloadLibraries, strings.TrimSpace(library)) {
			return false
		}
	}
	return true
}
