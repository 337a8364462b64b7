// Package version is the pgpilot release this build belongs to. The Makefile reads the same
// file for the bundle's CSV version, so the operator, its image and its bundle never disagree.
package version

import (
	_ "embed"
	"strings"
)

//go:embed VERSION
var raw string

// Version is the release, e.g. "0.2.0". Clusters report it in status.operatorVersion.
var Version = strings.TrimSpace(raw)
