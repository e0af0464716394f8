package controllers

import (
	"strings"
	"testing"
	"time"
)

func TestOptionsValidate(t *testing.T) {
	valid := Options{OrphanGracePeriod: 2 * time.Minute, PoolBindMode: PoolBindSelectNode}
	for _, tc := range []struct {
		name   string
		change func(*Options)
		// want is part of the error; "" for none.
		want string
	}{
		{"defaults", func(*Options) {}, ""},
		{"grace period at the minimum", func(o *Options) { o.OrphanGracePeriod = 90 * time.Second }, ""},
		{"grace period below the request timeout plus the margin", func(o *Options) { o.OrphanGracePeriod = 20 * time.Second },
			"--orphan-grace-period=20s is too short"},
		{"the minimum named", func(o *Options) { o.OrphanGracePeriod = 89 * time.Second }, "at least 1m30s"},
		{"a short grace period allowed for tests", func(o *Options) {
			o.OrphanGracePeriod, o.AllowShortOrphanGracePeriod = 2*time.Second, true
		}, ""},
		{"unknown bind mode", func(o *Options) { o.PoolBindMode = "later" }, "--pool-bind-mode"},
		{"a negative time for a stranded attachment", func(o *Options) { o.StrandedAttachmentTimeout = -time.Second }, "--stranded-attachment-timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := valid
			tc.change(&o)
			err := o.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Validate() = %v, want an error with %q", err, tc.want)
			}
		})
	}
}
