package cluster

import (
	"io"

	"go.uber.org/zap/zapcore"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// SetCommandLogger gives controller-runtime's clients and informers in a
// command (the demo, kwokcluster) a logger that writes only errors to w, on
// one line and without stack traces. Without one, controller-runtime prints
// a warning with a 30-line stack trace that the logger was never set.
func SetCommandLogger(w io.Writer) {
	ctrllog.SetLogger(zap.New(zap.WriteTo(w), zap.Level(zapcore.ErrorLevel), zap.StacktraceLevel(zapcore.PanicLevel)))
}
