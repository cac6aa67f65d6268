package ops

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"os"
	"sync"
	"time"
)

// MetricsCertificate returns what the node listener serves: the operator's certificate
// (certFile and keyFile, e.g. a kubernetes.io/tls Secret's tls.crt and tls.key), or, when both
// are "", a self-signed one made now for this host, as kube-rbac-proxy and node-exporter do
// (Prometheus then scrapes with insecureSkipVerify; the bearer token is still encrypted on the
// wire). The operator's pair is loaded now (an error: a missing file, a key that does not fit)
// and read again at each TLS handshake, so a renewed Secret (cert-manager) is served from the
// next connection on without a restart; a pair that does not load then (a half-written update)
// leaves the last good one in use.
func MetricsCertificate(certFile, keyFile string) (func(*tls.ClientHelloInfo) (*tls.Certificate, error), error) {
	if certFile != "" || keyFile != "" {
		if certFile == "" || keyFile == "" {
			return nil, fmt.Errorf("a certificate needs both its file and its key file (got certificate %q, key %q)", certFile, keyFile)
		}
		files := &certFiles{cert: certFile, key: keyFile}
		if err := files.load(); err != nil {
			return nil, err
		}
		return files.get, nil
	}
	cert, err := selfSigned()
	if err != nil {
		return nil, err
	}
	return func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &cert, nil }, nil
}

// certFiles is a certificate and key file pair, read again at each handshake.
type certFiles struct {
	cert, key string
	mu        sync.Mutex
	pem       [2][]byte // the files' contents the current certificate was parsed from
	current   *tls.Certificate
}

// load reads the pair, parsing it only when the files changed since the last load.
func (f *certFiles) load() error {
	certPEM, err := os.ReadFile(f.cert)
	if err != nil {
		return err
	}
	keyPEM, err := os.ReadFile(f.key)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.current != nil && bytes.Equal(certPEM, f.pem[0]) && bytes.Equal(keyPEM, f.pem[1]) {
		return nil
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("%s, %s: %w", f.cert, f.key, err)
	}
	f.pem, f.current = [2][]byte{certPEM, keyPEM}, &cert
	return nil
}

// get is tls.Config.GetCertificate: the pair as the files hold it now, else the last good one.
func (f *certFiles) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	_ = f.load() // a failed reload keeps the last good pair
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.current, nil
}

// selfSigned makes a certificate for this host, valid ten years.
func selfSigned() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return tls.Certificate{}, err
	}
	host, _ := os.Hostname()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "mountkeeper@" + host},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(10 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{host, "localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
