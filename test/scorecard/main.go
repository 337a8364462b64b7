// Command pgpilot-scorecard-tests runs pgpilot's own scorecard tests. `operator-sdk scorecard`
// runs it in a pod (image SCORECARD_IMG, see bundle/tests/scorecard/config.yaml) with the bundle
// unpacked at /bundle, and reads the scorecard v1alpha3 TestStatus it prints as JSON from the
// pod's log; test/olm runs it the same way against the test control plane.
//
//	pgpilot-scorecard-tests [--bundle DIR] [--namespace NS] TEST
//
// Like operator-sdk's scorecard-test, it prints nothing but the JSON result on stdout and
// stderr (the pod log is parsed as a whole) and exits 0 whenever it could report a result: the
// outcome is the result's state (pass, fail or error).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	scapiv1alpha3 "github.com/operator-framework/api/pkg/apis/scorecard/v1alpha3"
)

// A check inspects a bundle and fills in a result.
type check func(ctx context.Context, b *bundle, opts options, r *scapiv1alpha3.TestResult)

var checks = map[string]check{
	ALMExamplesAcceptedTest:    checkALMExamplesAccepted,
	CRDFieldsDocumentedTest:    checkCRDFieldsDocumented,
	DescriptorsMatchSchemaTest: checkDescriptorsMatchSchema,
}

// Test names, the second word of each test's entrypoint in the scorecard configuration.
const (
	ALMExamplesAcceptedTest    = "alm-examples-accepted"
	CRDFieldsDocumentedTest    = "crd-fields-documented"
	DescriptorsMatchSchemaTest = "descriptors-match-schema"
)

type options struct {
	namespace string
}

func main() {
	bundleDir := flag.String("bundle", "/bundle", "directory of the unpacked bundle (manifests/, metadata/)")
	namespace := flag.String("namespace", "",
		"namespace for the dry-run creates (default: $SCORECARD_NAMESPACE, the pod's namespace, then \"default\")")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: %s [flags] %s\n", os.Args[0], strings.Join(testNames(), "|"))
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	status := run(ctx, flag.Arg(0), *bundleDir, options{namespace: resolveNamespace(*namespace)})
	out, err := json.MarshalIndent(status, "", "    ")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(string(out))
}

// run runs one test and never panics its way out: every outcome is a TestStatus.
func run(ctx context.Context, name, bundleDir string, opts options) (status scapiv1alpha3.TestStatus) {
	r := scapiv1alpha3.TestResult{Name: name, State: scapiv1alpha3.PassState, Errors: []string{}, Suggestions: []string{}}
	defer func() {
		if p := recover(); p != nil {
			r.State = scapiv1alpha3.ErrorState
			r.Errors = append(r.Errors, fmt.Sprintf("test panicked: %v", p))
		}
		status = scapiv1alpha3.TestStatus{Results: []scapiv1alpha3.TestResult{r}}
	}()
	c, ok := checks[name]
	if !ok {
		r.State = scapiv1alpha3.FailState
		r.Errors = append(r.Errors, fmt.Sprintf("unknown test %q; valid tests: %s", name, strings.Join(testNames(), ", ")))
		return
	}
	b, err := loadBundle(bundleDir)
	if err != nil {
		r.State = scapiv1alpha3.ErrorState
		r.Errors = append(r.Errors, err.Error())
		return
	}
	r.Log += fmt.Sprintf("Loaded bundle %s: ClusterServiceVersion %s, %d CRD(s)\n", bundleDir, b.csv.Name, len(b.crds))
	c(ctx, b, opts, &r)
	return
}

func resolveNamespace(flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	if ns := os.Getenv("SCORECARD_NAMESPACE"); ns != "" {
		return ns
	}
	if data, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil {
		if ns := strings.TrimSpace(string(data)); ns != "" {
			return ns
		}
	}
	return "default"
}

func testNames() []string {
	names := make([]string, 0, len(checks))
	for name := range checks {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// fail marks r failed with an error and an optional suggestion.
func fail(r *scapiv1alpha3.TestResult, suggestion, format string, args ...any) {
	r.State = scapiv1alpha3.FailState
	r.Errors = append(r.Errors, fmt.Sprintf(format, args...))
	if suggestion != "" && !contains(r.Suggestions, suggestion) {
		r.Suggestions = append(r.Suggestions, suggestion)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
