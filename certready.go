package main

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// certPoll is how often servingCertReady looks at the mounted certificate.
const certPoll = time.Second

// servingCertReady closes ready once the webhook can serve: when the
// certificate rotator says so (rotatorReady), or when the serving
// certificate in certFile is on disk, names dnsName, and every webhook of
// the named mutating and validating configurations trusts it, whichever
// comes first.
// The kubelet mounts a Secret's new data at its next sync of the pod, up to
// a minute and a half after the rotator wrote it, and the rotator looks for
// the file with an exponential backoff, which may then wait as long again:
// a fresh replica became Ready minutes late. This looks every certPoll.
func servingCertReady(ctx context.Context, r client.Reader, certFile, dnsName, mutating, validating string, rotatorReady <-chan struct{}, ready chan<- struct{}) {
	err := wait.PollUntilContextCancel(ctx, certPoll, true, func(ctx context.Context) (bool, error) {
		select {
		case <-rotatorReady:
			return true, nil
		default:
		}
		return certTrusted(ctx, r, certFile, dnsName, mutating, validating) == nil, nil
	})
	if err == nil {
		close(ready)
	}
}

// certTrusted says why the certificate in certFile is not yet one for
// dnsName that every webhook of the two configurations trusts; nil once it
// is.
func certTrusted(ctx context.Context, r client.Reader, certFile, dnsName, mutating, validating string) error {
	raw, err := os.ReadFile(certFile)
	if err != nil {
		return err
	}
	block, _ := pem.Decode(raw)
	if block == nil {
		return errors.New("no PEM certificate in " + certFile)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return err
	}
	var bundles [][]byte
	m := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := r.Get(ctx, types.NamespacedName{Name: mutating}, m); err != nil {
		return err
	}
	for _, w := range m.Webhooks {
		bundles = append(bundles, w.ClientConfig.CABundle)
	}
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := r.Get(ctx, types.NamespacedName{Name: validating}, v); err != nil {
		return err
	}
	for _, w := range v.Webhooks {
		bundles = append(bundles, w.ClientConfig.CABundle)
	}
	if len(bundles) == 0 {
		return errors.New("the webhook configurations have no webhook")
	}
	for _, b := range bundles {
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(b) {
			return errors.New("a webhook has no CA bundle yet")
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: dnsName, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			return fmt.Errorf("a webhook's CA bundle does not sign the serving certificate: %w", err)
		}
	}
	return nil
}
