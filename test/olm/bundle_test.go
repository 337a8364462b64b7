package olm_test

import (
	"encoding/json"
	"testing"
)

// validateBundle runs operator-sdk bundle validate with the operatorframework suite and the
// good-practices validator and fails on any error or warning.
func validateBundle(t *testing.T, dir string) {
	t.Helper()
	for _, selector := range []string{"suite=operatorframework", "name=good-practices"} {
		out, err := runErr(repoRoot, nil, operatorSDK(t), "bundle", "validate", dir,
			"--select-optional", selector, "-o", "json-alpha1")
		var result validateOutput
		if jerr := json.Unmarshal(out, &result); jerr != nil {
			t.Fatalf("bundle validate %s --select-optional %s: no JSON result (%v): %v", dir, selector, jerr, err)
		}
		for _, o := range result.Outputs {
			t.Errorf("bundle validate %s --select-optional %s: %s: %s", dir, selector, o.Type, o.Message)
		}
		if err != nil || !result.Passed {
			t.Errorf("bundle validate %s --select-optional %s did not pass: %v", dir, selector, err)
		}
		if err == nil && result.Passed && len(result.Outputs) == 0 {
			t.Logf("bundle validate %s --select-optional %s: passed, no errors, no warnings", dir, selector)
		}
	}
}

// The committed bundle passes operator-sdk's validators with neither errors nor warnings.
func TestBundleValidates(t *testing.T) {
	validateBundle(t, "./bundle")
}
