//go:build tools

// Package tools pins OLM's binaries (olm, catalog, package-server, cpb, copy-content) and the
// opm its unpack Jobs run, at the versions OLM v0.38.0 requires.
package tools

import (
	_ "github.com/operator-framework/operator-lifecycle-manager/cmd/catalog"
	_ "github.com/operator-framework/operator-lifecycle-manager/cmd/copy-content"
	_ "github.com/operator-framework/operator-lifecycle-manager/cmd/olm"
	_ "github.com/operator-framework/operator-lifecycle-manager/cmd/package-server"
	_ "github.com/operator-framework/operator-lifecycle-manager/util/cpb"
	_ "github.com/operator-framework/operator-registry/cmd/opm"
)
