package chaos

import (
	_ "embed"
)

// flakyLabelKey marks the drain Jobs' pods that the flaky stages fail one
// time in four and otherwise complete, after 2-6 s.
const flakyLabelKey = "chaos.fluent-pvc-operator/flaky"

var (
	//go:embed stages/flaky-fail.yaml
	flakyFailStage string
	//go:embed stages/flaky-succeed.yaml
	flakySucceedStage string
)
