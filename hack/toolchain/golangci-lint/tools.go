//go:build tools

// Package tools pins golangci-lint, which `make test` runs with .golangci.yml. Its own module:
// its dependencies are not the operator's.
package tools

import (
	_ "github.com/golangci/golangci-lint/v2/cmd/golangci-lint"
)
