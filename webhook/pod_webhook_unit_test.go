package webhook

import "testing"

func TestNativeSidecarSupport(t *testing.T) {
	cases := map[string]struct {
		gitVersion string
		supported  bool
	}{
		"1.36":                               {gitVersion: "v1.36.3", supported: true},
		"1.29, the first with them":          {gitVersion: "v1.29.0", supported: true},
		"a vendor build of 1.30":             {gitVersion: "v1.30.4-eks-a737599", supported: true},
		"1.28":                               {gitVersion: "v1.28.15", supported: false},
		"1.27 with a vendor suffix":          {gitVersion: "v1.27.2+k3s1", supported: false},
		"unreadable: the API server decides": {gitVersion: "unknown", supported: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			why := NativeSidecarSupport(tc.gitVersion)
			if (why == "") != tc.supported {
				t.Errorf("NativeSidecarSupport(%q) = %q, want supported=%v", tc.gitVersion, why, tc.supported)
			}
		})
	}
}
