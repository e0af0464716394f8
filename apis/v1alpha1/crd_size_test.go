package v1alpha1_test

import (
	"encoding/json"
	"os"
	"testing"

	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"sigs.k8s.io/yaml"

	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

// TestCRDFitsClientSideApply checks that every CRD can be installed with a
// client-side `kubectl apply`, which stores the whole object as compact JSON
// in the last-applied-configuration annotation; the API server refuses
// annotations over 256 KiB in total.
func TestCRDFitsClientSideApply(t *testing.T) {
	tests := map[string]struct {
		file string
	}{
		"FluentPVC":        {file: "fluent-pvc-operator.tech.zozo.com_fluentpvcs.yaml"},
		"FluentPVCBinding": {file: "fluent-pvc-operator.tech.zozo.com_fluentpvcbindings.yaml"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(fixtures.Path("config", "crd", "bases", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			// kubectl encodes the object it read, so the annotation is the
			// manifest's compact JSON followed by a newline.
			var obj map[string]any
			if err := yaml.Unmarshal(raw, &obj); err != nil {
				t.Fatalf("parsing %s: %v", tc.file, err)
			}
			compact, err := json.Marshal(obj)
			if err != nil {
				t.Fatal(err)
			}
			lastApplied := string(compact) + "\n"
			annotations := map[string]string{lastAppliedKey: lastApplied}
			if err := apivalidation.ValidateAnnotationsSize(annotations); err != nil {
				t.Errorf("%s: `kubectl apply` would fail: its %s annotation takes %d bytes, %d over the API server's limit of %d bytes for all annotations; "+
					"drop more descriptions from embedded core types (CRD_TRIM_PATHS in the Makefile) or install with --server-side",
					tc.file, lastAppliedKey, len(lastAppliedKey)+len(lastApplied),
					len(lastAppliedKey)+len(lastApplied)-apivalidation.TotalAnnotationSizeLimitB, apivalidation.TotalAnnotationSizeLimitB)
			}
			t.Logf("%s: last-applied-configuration %d of %d bytes", tc.file, len(lastAppliedKey)+len(lastApplied), apivalidation.TotalAnnotationSizeLimitB)
		})
	}
}
