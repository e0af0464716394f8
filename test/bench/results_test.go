package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestWriteResults(t *testing.T) {
	at := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	cases := map[string]struct {
		// before is what dir holds before the write: file name to content,
		// or to "-> target" for a symlink.
		before map[string]string
		// kept are files of before that the write must leave as they were.
		kept []string
	}{
		"empty directory": {},
		"copies of an earlier run are replaced by pointers": {
			before: map[string]string{
				"latest.md": "old", "latest.json": "{}", "startup-latest.svg": "<svg/>",
			},
		},
		"pointers to an earlier run move, its files stay": {
			before: map[string]string{
				"2026-11-23.md": "old", "2026-11-23.json": "{}", "startup-2026-11-23.svg": "<svg/>",
				"latest.md": "-> 2026-11-23.md", "latest.json": "-> 2026-11-23.json", "startup-latest.svg": "-> startup-2026-11-23.svg",
			},
			kept: []string{"2026-11-23.md", "2026-11-23.json", "startup-2026-11-23.svg"},
		},
		"a second run on the same date replaces the first": {
			before: map[string]string{
				"2026-11-24.md": "first", "2026-11-24.json": "{}", "startup-2026-11-24.svg": "<svg/>",
				"latest.md": "-> 2026-11-24.md", "latest.json": "-> 2026-11-24.json", "startup-latest.svg": "-> startup-2026-11-24.svg",
			},
		},
		"a pointer left half-made is replaced": {
			before: map[string]string{"latest.md.tmp": "-> nowhere.md"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			for name, content := range tc.before {
				p := filepath.Join(dir, name)
				var err error
				if target, ok := strings.CutPrefix(content, "-> "); ok {
					err = os.Symlink(target, p)
				} else {
					err = os.WriteFile(p, []byte(content), 0o644)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			r := &results{Date: at.Format(time.RFC3339), Config: config{N: 3, Delay: 5 * time.Second}}

			paths, err := r.write(dir, at)
			if err != nil {
				t.Fatal(err)
			}

			var want []string
			for _, name := range []string{"2026-11-24.json", "2026-11-24.md", "latest.json", "latest.md", "startup-2026-11-24.svg", "startup-latest.svg"} {
				want = append(want, filepath.Join(dir, name))
			}
			if !slices.Equal(paths, want) {
				t.Errorf("write returned %v, want %v", paths, want)
			}
			for link, target := range map[string]string{
				"latest.md": "2026-11-24.md", "latest.json": "2026-11-24.json", "startup-latest.svg": "startup-2026-11-24.svg",
			} {
				got, err := os.Readlink(filepath.Join(dir, link))
				if err != nil {
					t.Errorf("%s is not a symlink: %v", link, err)
					continue
				}
				if got != target {
					t.Errorf("%s -> %s, want -> %s", link, got, target)
				}
				if info, err := os.Stat(filepath.Join(dir, link)); err != nil || info.Size() == 0 {
					t.Errorf("%s does not lead to a written file: %v", link, err)
				}
			}
			md, err := os.ReadFile(filepath.Join(dir, "latest.md"))
			if err != nil {
				t.Fatal(err)
			}
			if want := r.markdown("startup-2026-11-24.svg"); string(md) != want {
				t.Errorf("latest.md holds\n%s\nwant this run's results, which show startup-2026-11-24.svg:\n%s", md, want)
			}
			if _, err := os.Lstat(filepath.Join(dir, "latest.md.tmp")); !os.IsNotExist(err) {
				t.Errorf("latest.md.tmp is left behind (%v)", err)
			}
			for _, name := range tc.kept {
				got, err := os.ReadFile(filepath.Join(dir, name))
				if err != nil || string(got) != tc.before[name] {
					t.Errorf("%s = %q (%v), want it kept as %q", name, got, err, tc.before[name])
				}
			}
		})
	}
}
