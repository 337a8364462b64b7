//go:build tools

// Package tools pins operator-sdk and its scorecard-test image binary. `go install` of
// operator-sdk is refused by the proxy (it checks a version list), a wrapper module is not.
package tools

import (
	_ "github.com/operator-framework/operator-sdk/cmd/operator-sdk"
	_ "github.com/operator-framework/operator-sdk/images/scorecard-test"
)
