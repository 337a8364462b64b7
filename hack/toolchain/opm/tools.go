//go:build tools

// Package tools pins opm (operator-registry). `go install` needs the module's replace-free
// build with cgo for sqlite; pgpilot only uses file-based catalogs, so a wrapper module
// built with CGO_ENABLED=0 and the json1,containers_image_openpgp tags is enough.
package tools

import (
	_ "github.com/operator-framework/operator-registry/cmd/opm"
)
