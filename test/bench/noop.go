package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"gomodules.xyz/jsonpatch/v2"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/st-tech/fluent-pvc-operator/test/cluster"
)

// The control mode w runs plain pods through a mutating webhook that makes
// no API call and adds one label: what any webhook costs on this cluster,
// served the way the operator's is (controller-runtime, TLS, 127.0.0.1,
// reinvocationPolicy Never).
const (
	noopWebhookName  = "noop.bench.fluent-pvc-operator.tech.zozo.com"
	noopLabelKey     = "bench.fluent-pvc-operator.tech.zozo.com/noop-webhook"
	noopSeenLabelKey = "bench.fluent-pvc-operator.tech.zozo.com/noop-seen"
)

// startNoopWebhook serves and registers the no-op webhook for pods labelled
// noopLabelKey; stop unregisters it and stops the server.
func (e *env) startNoopWebhook(ctx context.Context) (stop func() error, err error) {
	dir, err := os.MkdirTemp("", "fluent-pvc-bench-noop-")
	if err != nil {
		return nil, err
	}
	caPEM, err := cluster.WriteServingCert(dir)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	srv := ctrlwebhook.NewServer(ctrlwebhook.Options{Host: "127.0.0.1", Port: port, CertDir: dir})
	srv.Register("/noop", &admission.Webhook{Handler: admission.HandlerFunc(func(context.Context, admission.Request) admission.Response {
		return admission.Patched("", jsonpatch.NewOperation("add", "/metadata/labels/"+strings.NewReplacer("~", "~0", "/", "~1").Replace(noopSeenLabelKey), "true"))
	})})
	srvCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Start(srvCtx) }()
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return srv.StartedChecker()(nil) == nil, nil
	}); err != nil {
		cancel()
		return nil, fmt.Errorf("the no-op webhook did not start: %w", err)
	}
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-noop"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    noopWebhookName,
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To(fmt.Sprintf("https://127.0.0.1:%d/noop", port)), CABundle: caPEM},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}},
			ObjectSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{noopLabelKey: "true"}},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			ReinvocationPolicy:      ptr.To(admissionregistrationv1.NeverReinvocationPolicy),
			TimeoutSeconds:          ptr.To[int32](10),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	hooks := e.kc.Clientset.AdmissionregistrationV1().MutatingWebhookConfigurations()
	if _, err := hooks.Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
		cancel()
		return nil, fmt.Errorf("registering the no-op webhook: %w", err)
	}
	// The API server loads webhook configurations asynchronously: wait
	// until a dry run shows the webhook's label.
	probe := noopPod(plainPod("default", "noop-probe"))
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p := probe.DeepCopy()
		if err := e.cl.Create(ctx, p, client.DryRunAll); err != nil {
			return false, nil
		}
		return p.Labels[noopSeenLabelKey] == "true", nil
	}); err != nil {
		cancel()
		return nil, errors.Join(fmt.Errorf("the no-op webhook did not take effect: %w", err),
			hooks.Delete(context.Background(), cfg.Name, metav1.DeleteOptions{}), <-done, os.RemoveAll(dir))
	}
	return func() error {
		err := hooks.Delete(context.Background(), cfg.Name, metav1.DeleteOptions{})
		cancel()
		return errors.Join(err, <-done, os.RemoveAll(dir))
	}, nil
}

// noopPod is p labelled for the no-op webhook.
func noopPod(p *corev1.Pod) *corev1.Pod {
	p.Labels[noopLabelKey] = "true"
	return p
}
