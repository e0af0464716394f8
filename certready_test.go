package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// testCA is a CA and a serving certificate it signed for
// webhook.ns.svc, and another for another name, all PEM.
type testCA struct{ caPEM, servingPEM, otherNamePEM []byte }

func newTestCA(t *testing.T) testCA {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "webhook"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"webhook.ns.svc"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber, tmpl.DNSNames = big.NewInt(3), []string{"old-name.ns.svc"}
	otherDER, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return testCA{
		caPEM:        pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		servingPEM:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		otherNamePEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: otherDER}),
	}
}

// webhookConfigs are the two configurations with the given CA bundles, one
// webhook each.
func webhookConfigs(mutatingCA, validatingCA []byte) []client.Object {
	return []client.Object{
		&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "m"},
			Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "pod.example.com", ClientConfig: admissionregistrationv1.WebhookClientConfig{CABundle: mutatingCA}}}},
		&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "v"},
			Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "mount.example.com", ClientConfig: admissionregistrationv1.WebhookClientConfig{CABundle: validatingCA}}}},
	}
}

func TestCertTrusted(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	ca, other := newTestCA(t), newTestCA(t)
	for name, tc := range map[string]struct {
		cert    []byte // nil: no file
		objects []client.Object
		trusted bool
	}{
		"not mounted yet":                 {objects: webhookConfigs(ca.caPEM, ca.caPEM)},
		"mounted, CA not injected yet":    {cert: ca.servingPEM, objects: webhookConfigs(nil, nil)},
		"mounted, one webhook not yet":    {cert: ca.servingPEM, objects: webhookConfigs(ca.caPEM, nil)},
		"mounted, an older CA injected":   {cert: ca.servingPEM, objects: webhookConfigs(ca.caPEM, other.caPEM)},
		"an older certificate mounted":    {cert: other.servingPEM, objects: webhookConfigs(ca.caPEM, ca.caPEM)},
		"no webhook configuration":        {cert: ca.servingPEM},
		"not PEM":                         {cert: []byte("garbage"), objects: webhookConfigs(ca.caPEM, ca.caPEM)},
		"issued for another service name": {cert: ca.otherNamePEM, objects: webhookConfigs(ca.caPEM, ca.caPEM)},
		"mounted and trusted everywhere":  {cert: ca.servingPEM, objects: webhookConfigs(ca.caPEM, ca.caPEM), trusted: true},
	} {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "tls.crt")
			if tc.cert != nil {
				if err := os.WriteFile(file, tc.cert, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			r := fake.NewClientBuilder().WithScheme(scheme).WithObjects(tc.objects...).Build()
			err := certTrusted(context.Background(), r, file, "webhook.ns.svc", "m", "v")
			if got := err == nil; got != tc.trusted {
				t.Errorf("trusted = %v (%v), want %v", got, err, tc.trusted)
			}
		})
	}
}

func TestServingCertReady(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	ca := newTestCA(t)
	r := fake.NewClientBuilder().WithScheme(scheme).WithObjects(webhookConfigs(ca.caPEM, ca.caPEM)...).Build()
	for name, tc := range map[string]struct {
		mount        bool // the kubelet mounts the certificate meanwhile
		rotatorReady bool
	}{
		"the certificate is mounted before the rotator's backoff sees it": {mount: true},
		"the rotator says so first":                                       {rotatorReady: true},
	} {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "tls.crt")
			rotator, ready := make(chan struct{}), make(chan struct{})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			go servingCertReady(ctx, r, file, "webhook.ns.svc", "m", "v", rotator, ready)
			select {
			case <-ready:
				t.Fatal("ready before the certificate is mounted or the rotator is ready")
			case <-time.After(2 * certPoll):
			}
			if tc.mount {
				if err := os.WriteFile(file, ca.servingPEM, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if tc.rotatorReady {
				close(rotator)
			}
			select {
			case <-ready:
			case <-ctx.Done():
				t.Fatal("not ready")
			}
		})
	}

	t.Run("stopped before ready: the channel stays open", func(t *testing.T) {
		ready := make(chan struct{})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		servingCertReady(ctx, r, filepath.Join(t.TempDir(), "tls.crt"), "webhook.ns.svc", "m", "v", make(chan struct{}), ready)
		select {
		case <-ready:
			t.Fatal("closed on cancellation")
		default:
		}
	})
}
