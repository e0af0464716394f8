package webhook

import (
	"encoding/json"
	"testing"

	evanphx "github.com/evanphx/json-patch/v5"
	"gomodules.xyz/jsonpatch/v2"
)

func TestAppliesTo(t *testing.T) {
	const doc = `{"metadata":{"labels":{"a/b":"1","t~1":"2"}},"spec":{"containers":[{"name":"app"}],"volumes":[]},"n":null}`
	add := func(path string) jsonpatch.Operation { return jsonpatch.NewOperation("add", path, "v") }
	op := func(kind, path string) jsonpatch.Operation { return jsonpatch.NewOperation(kind, path, "v") }
	cases := map[string]struct {
		ops  []jsonpatch.Operation
		want bool
	}{
		"nothing":                                    {want: true},
		"a new member":                               {ops: []jsonpatch.Operation{add("/metadata/annotations")}, want: true},
		"a member there already":                     {ops: []jsonpatch.Operation{add("/metadata/labels/a~1b")}, want: true},
		"a member of a member added before":          {ops: []jsonpatch.Operation{add("/metadata/annotations"), add("/metadata/annotations/x")}},
		"a member of a member replaced before":       {ops: []jsonpatch.Operation{op("replace", "/metadata/labels"), add("/metadata/labels/x")}},
		"a member of a member removed before":        {ops: []jsonpatch.Operation{op("remove", "/metadata/labels"), add("/metadata/labels/x")}},
		"an escaped slash":                           {ops: []jsonpatch.Operation{op("replace", "/metadata/labels/a~1b")}, want: true},
		"an escaped tilde before a 1":                {ops: []jsonpatch.Operation{op("replace", "/metadata/labels/t~01")}, want: true},
		"an escaped key that is not there":           {ops: []jsonpatch.Operation{op("replace", "/metadata/labels/a~0b")}},
		"into an object doc lacks":                   {ops: []jsonpatch.Operation{add("/status/phase")}},
		"into null":                                  {ops: []jsonpatch.Operation{add("/n/x")}},
		"replacing null":                             {ops: []jsonpatch.Operation{op("replace", "/n")}, want: true},
		"appended, one after another":                {ops: []jsonpatch.Operation{add("/spec/containers/1"), add("/spec/containers/2"), add("/spec/volumes/0")}, want: true},
		"appended with -":                            {ops: []jsonpatch.Operation{add("/spec/containers/-")}, want: true},
		"past the end":                               {ops: []jsonpatch.Operation{add("/spec/containers/2")}},
		"an index with a leading zero":               {ops: []jsonpatch.Operation{add("/spec/containers/01")}},
		"into an element there before an append":     {ops: []jsonpatch.Operation{add("/spec/containers/1"), add("/spec/containers/0/env")}, want: true},
		"into the element appended":                  {ops: []jsonpatch.Operation{add("/spec/containers/1"), add("/spec/containers/1/env")}},
		"into an element after an insert":            {ops: []jsonpatch.Operation{add("/spec/containers/0"), add("/spec/containers/1/env")}},
		"replacing an element after an insert":       {ops: []jsonpatch.Operation{add("/spec/containers/0"), op("replace", "/spec/containers/1")}},
		"inserting after an insert":                  {ops: []jsonpatch.Operation{add("/spec/containers/0"), add("/spec/containers/0")}, want: true},
		"into an element":                            {ops: []jsonpatch.Operation{add("/spec/containers/0/volumeMounts")}, want: true},
		"replacing what is there":                    {ops: []jsonpatch.Operation{op("replace", "/spec/containers/0/name")}, want: true},
		"removing what is not there":                 {ops: []jsonpatch.Operation{op("remove", "/spec/containers/1")}},
		"removing an element":                        {ops: []jsonpatch.Operation{op("remove", "/spec/containers/0")}, want: true},
		"into an array after a remove":               {ops: []jsonpatch.Operation{op("remove", "/spec/containers/0"), add("/spec/containers/0")}, want: true},
		"past the end after a remove":                {ops: []jsonpatch.Operation{op("remove", "/spec/containers/0"), add("/spec/containers/1")}},
		"into an element of an array after a remove": {ops: []jsonpatch.Operation{op("remove", "/spec/containers/0"), add("/spec/containers/0/env")}},
		"the whole document":                         {ops: []jsonpatch.Operation{op("replace", "")}},
		"not a pointer":                              {ops: []jsonpatch.Operation{add("spec")}},
		"a move":                                     {ops: []jsonpatch.Operation{{Operation: "move", Path: "/spec/x", Value: nil}}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var d any
			if err := json.Unmarshal([]byte(doc), &d); err != nil {
				t.Fatal(err)
			}
			got := appliesTo(d, tc.ops)
			if got != tc.want {
				t.Errorf("appliesTo = %v, want %v", got, tc.want)
			}
			if !got {
				return
			}
			// A yes holds: the patch applies as the API server applies it.
			ops, err := json.Marshal(tc.ops)
			if err != nil {
				t.Fatal(err)
			}
			p, err := evanphx.DecodePatch(ops)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Apply([]byte(doc)); err != nil {
				t.Errorf("appliesTo = true, but the patch does not apply: %v", err)
			}
		})
	}
}
