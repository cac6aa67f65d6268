package ops

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testCA is a certificate authority that issues the node listener's certificates in tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// issue writes a server certificate for name with this serial, and its key, as PEM files
// tls.crt and tls.key of a kubernetes.io/tls Secret volume in dir (writeSecretVolume).
func (ca *testCA) issue(t *testing.T, dir, name string, serial int64) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writeSecretVolume(t, dir, map[string][]byte{
		"tls.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		"tls.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	})
	return filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
}

// writeSecretVolume lays files out as kubelet updates a Secret volume: a new timestamped
// directory, the ..data symlink swapped to it atomically (rename), each file a symlink
// through ..data.
func writeSecretVolume(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	gen, err := os.MkdirTemp(dir, "..gen_")
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(gen, name), data, 0o400); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(filepath.Join(dir, name)); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(gen), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

// scrape makes one request over a new connection and returns the serial of the certificate
// the server presented and the body.
func scrape(t *testing.T, addr string, tc *tls.Config) (int64, string, error) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tc, DisableKeepAlives: true}}
	resp, err := c.Get("https://" + addr + "/metrics")
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.TLS.PeerCertificates[0].SerialNumber.Int64(), string(body), nil
}

// TestServeMetricsWithCertificate serves /metrics with an operator's certificate (files laid
// out as kubelet keeps a kubernetes.io/tls Secret volume): a client that trusts only the issuing CA and checks
// the name gets the metrics; the Secret renewed in place is served from the next connection
// on; a broken update keeps the last good pair; a client trusting another CA is refused. With
// no files, a self-signed certificate is served.
func TestServeMetricsWithCertificate(t *testing.T) {
	ca := newTestCA(t)
	dir := t.TempDir()
	certFile, keyFile := ca.issue(t, dir, "mountkeeper.test", 100)
	cert, err := MetricsCertificate(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "mountkeeper_up 1\n") })
	allowAll := func(h http.Handler) http.Handler { return h }
	go ServeMetrics(ctx, l, metrics, allowAll, cert)
	addr := l.Addr().String()
	verified := &tls.Config{RootCAs: ca.pool, ServerName: "mountkeeper.test"}

	for _, step := range []struct {
		name   string
		change func()
		serial int64
	}{
		{"the operator's certificate", func() {}, 100},
		{"renewed (..data swapped): served from the next connection", func() { ca.issue(t, dir, "mountkeeper.test", 101) }, 101},
		{"a broken update keeps the last good pair", func() {
			writeSecretVolume(t, dir, map[string][]byte{"tls.crt": []byte("not a certificate"), "tls.key": []byte("nor a key")})
		}, 101},
	} {
		step.change()
		serial, body, err := scrape(t, addr, verified)
		if err != nil || serial != step.serial || body != "mountkeeper_up 1\n" {
			t.Errorf("%s: serial %d, body %q, %v; want serial %d and the metrics", step.name, serial, body, err, step.serial)
		}
	}
	if _, _, err := scrape(t, addr, &tls.Config{RootCAs: newTestCA(t).pool, ServerName: "mountkeeper.test"}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a client trusting another CA: %v, want a certificate error", err)
	}

	selfSigned, err := MetricsCertificate("", "")
	if err != nil {
		t.Fatal(err)
	}
	c, err := selfSigned(nil)
	if err != nil || len(c.Certificate) != 1 {
		t.Fatalf("self-signed: %v", err)
	}
	if leaf, err := x509.ParseCertificate(c.Certificate[0]); err != nil || leaf.CheckSignature(leaf.SignatureAlgorithm, leaf.RawTBSCertificate, leaf.Signature) != nil {
		t.Errorf("the default certificate is not self-signed: %v", err)
	}
}

// TestMetricsCertificateRefuses: files that cannot serve are an error at start, naming them.
func TestMetricsCertificateRefuses(t *testing.T) {
	ca := newTestCA(t)
	a, b := t.TempDir(), t.TempDir()
	certA, keyA := ca.issue(t, a, "a.test", 1)
	_, keyB := ca.issue(t, b, "b.test", 2)
	for _, c := range []struct {
		name, cert, key, want string
	}{
		{"certificate without key", certA, "", "needs both"},
		{"key without certificate", "", keyA, "needs both"},
		{"missing key file", certA, filepath.Join(a, "absent.key"), "absent.key"},
		{"another certificate's key", certA, keyB, "private key does not match"},
	} {
		if _, err := MetricsCertificate(c.cert, c.key); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
}
