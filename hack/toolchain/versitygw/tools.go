//go:build tools

// Package tools pins VersityGW, the S3 server pgpilot's backup tests and `make demo` run (its
// posix backend stores objects as files). Its own module: its dependencies are not the
// operator's.
package tools

import (
	_ "github.com/versity/versitygw/cmd/versitygw"
)
