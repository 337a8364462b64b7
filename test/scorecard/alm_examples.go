package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	scapiv1alpha3 "github.com/operator-framework/api/pkg/apis/scorecard/v1alpha3"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/pgpilot/pgpilot-operator/internal/jsonsubset"
)

// checkALMExamplesAccepted creates every alm-examples object with a server-side dry run: the
// API server applies the CRD's schema, CEL rules and defaults without storing anything. An
// example passes when it is accepted and the server kept every field it sets (an unknown field
// would be pruned silently, and the console's example would not do what it says).
func checkALMExamplesAccepted(ctx context.Context, b *bundle, opts options, r *scapiv1alpha3.TestResult) {
	raw := b.csv.Annotations["alm-examples"]
	var examples []unstructured.Unstructured
	if err := json.Unmarshal([]byte(raw), &examples); err != nil {
		fail(r, "", "the CSV's alm-examples annotation is not a JSON list of objects: %v", err)
		return
	}
	if len(examples) == 0 {
		fail(r, "Add samples to config/samples: they become the CSV's alm-examples.", "the CSV has no alm-examples")
		return
	}
	client, err := dynamicClient(r)
	if err != nil {
		r.State = scapiv1alpha3.ErrorState
		r.Errors = append(r.Errors, fmt.Sprintf("no Kubernetes client configuration (in-cluster or KUBECONFIG): %v", err))
		return
	}
	r.Log += fmt.Sprintf("Creating %d alm-examples object(s) with dryRun=All in namespace %q\n", len(examples), opts.namespace)
	for i := range examples {
		checkExample(ctx, b, client, opts, &examples[i], r)
	}
}

func checkExample(ctx context.Context, b *bundle, client dynamic.Interface, opts options,
	example *unstructured.Unstructured, r *scapiv1alpha3.TestResult) {
	gvk := example.GroupVersionKind()
	id := fmt.Sprintf("%s %q", gvk.Kind, example.GetName())
	if example.GetName() == "" {
		fail(r, "", "%s example has no metadata.name", gvk.Kind)
		return
	}
	crd := ownedCRDFor(b, gvk)
	if crd == nil {
		fail(r, "Every alm-examples object must be of a CRD the bundle owns.",
			"%s: no CRD in the bundle serves %s", id, gvk)
		return
	}
	gvr := schema.GroupVersionResource{Group: gvk.Group, Version: gvk.Version, Resource: crd.Spec.Names.Plural}
	var resource dynamic.ResourceInterface = client.Resource(gvr)
	obj := example.DeepCopy()
	if crd.Spec.Scope == apiextensionsv1.NamespaceScoped {
		obj.SetNamespace(opts.namespace)
		resource = client.Resource(gvr).Namespace(opts.namespace)
	}
	created, err := resource.Create(ctx, obj, metav1.CreateOptions{
		DryRun:          []string{metav1.DryRunAll},
		FieldManager:    "pgpilot-scorecard",
		FieldValidation: metav1.FieldValidationStrict,
	})
	switch {
	case apierrors.IsNotFound(err) && notFoundKind(err) == "namespaces":
		fail(r, "", "%s: namespace %q does not exist: %v", id, opts.namespace, err)
		return
	case apierrors.IsNotFound(err):
		// A create answers 404 only when the resource type itself is not served.
		fail(r, "Install the bundle (operator-sdk run bundle) so that its CRDs exist before running the scorecard.",
			"%s: the API server does not serve %s: %v", id, gvr, err)
		return
	case err != nil:
		fail(r, "", "%s was rejected by the API server: %v", id, err)
		return
	}
	want, have := toJSONValue(example.Object["spec"]), toJSONValue(created.Object["spec"])
	dropped := droppedFields(want, have)
	sort.Strings(dropped)
	for _, path := range dropped {
		fail(r, "Remove fields the CRD does not define from the samples (config/samples).",
			"%s: the API server dropped or changed %s", id, path)
	}
	if len(dropped) == 0 {
		var defaulted []string
		listAdded(want, have, "spec", &defaulted)
		sort.Strings(defaulted)
		r.Log += fmt.Sprintf("%s accepted; the API server defaulted %s\n", id, orNone(defaulted))
	}
}

// notFoundKind is the kind (resource) of a 404's details: "namespaces" for a missing namespace.
func notFoundKind(err error) string {
	if status, ok := err.(apierrors.APIStatus); ok && status.Status().Details != nil {
		return status.Status().Details.Kind
	}
	return ""
}

func ownedCRDFor(b *bundle, gvk schema.GroupVersionKind) *apiextensionsv1.CustomResourceDefinition {
	for _, owned := range b.csv.Spec.CustomResourceDefinitions.Owned {
		if owned.Kind != gvk.Kind || owned.Version != gvk.Version {
			continue
		}
		if crd := b.crd(owned.Name); crd != nil && crd.Spec.Group == gvk.Group {
			return crd
		}
	}
	return nil
}

func dynamicClient(r *scapiv1alpha3.TestResult) (dynamic.Interface, error) {
	loading := clientcmd.NewDefaultClientConfigLoadingRules()
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(loading, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		// No kubeconfig: the scorecard pod's service account.
		if cfg, err = rest.InClusterConfig(); err != nil {
			return nil, err
		}
	}
	// API warnings go into the result's log, never to stderr (the pod log must be pure JSON).
	cfg.WarningHandler = warningLogger{r}
	cfg.UserAgent = "pgpilot-scorecard-tests"
	return dynamic.NewForConfig(cfg)
}

type warningLogger struct{ r *scapiv1alpha3.TestResult }

func (w warningLogger) HandleWarningHeader(code int, agent, text string) {
	w.r.Log += fmt.Sprintf("API server warning: %s\n", text)
}

// toJSONValue is v as JSON sees it (numbers as float64). Both sides were decoded from JSON, so
// the fallback to v itself is for completeness, not an expected path.
func toJSONValue(v any) any {
	out, err := jsonsubset.Normalize(v)
	if err != nil {
		return v
	}
	return out
}

// droppedFields is every path of the spec set in want that got is missing or has another value at.
func droppedFields(want, got any) []string {
	differences := jsonsubset.All(want, got, "spec")
	dropped := make([]string, 0, len(differences))
	for _, d := range differences {
		path := d.Path
		if d.Kind == jsonsubset.Value {
			// The server's value tells a typo (pruned) from a value it rewrote (normalised).
			path = fmt.Sprintf("%s (%v, the server has %v)", d.Path, d.Want, d.Have)
		}
		dropped = append(dropped, path)
	}
	return dropped
}

// listAdded records the paths the server filled in (defaults).
func listAdded(want, got any, path string, added *[]string) {
	g, ok := got.(map[string]any)
	if !ok {
		return
	}
	w, _ := want.(map[string]any)
	for k, v := range g {
		if wv, ok := w[k]; ok {
			listAdded(wv, v, path+"."+k, added)
		} else {
			*added = append(*added, path+"."+k)
		}
	}
}

func orNone(list []string) string {
	if len(list) == 0 {
		return "nothing"
	}
	return strings.Join(list, ", ")
}
