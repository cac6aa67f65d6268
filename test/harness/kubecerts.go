package harness

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// kubePKI is the throw-away PKI of one KubeNode: a CA, the apiserver's serving cert, client
// certs for the tests (system:masters) and for kubelet (system:node:<name>), and the
// service-account key pair. All files live in dir.
type kubePKI struct {
	dir string
}

func (p kubePKI) path(name string) string { return filepath.Join(p.dir, name) }

func (p kubePKI) caCert() string         { return p.path("ca.crt") }
func (p kubePKI) serverCert() string     { return p.path("apiserver.crt") }
func (p kubePKI) serverKey() string      { return p.path("apiserver.key") }
func (p kubePKI) adminCert() string      { return p.path("admin.crt") }
func (p kubePKI) adminKey() string       { return p.path("admin.key") }
func (p kubePKI) kubeletCert() string    { return p.path("kubelet-client.crt") }
func (p kubePKI) kubeletKey() string     { return p.path("kubelet-client.key") }
func (p kubePKI) saPublicKey() string    { return p.path("sa.pub") }
func (p kubePKI) saPrivateKey() string   { return p.path("sa.key") }
func (p kubePKI) apiserverKCert() string { return p.path("apiserver-kubelet-client.crt") }
func (p kubePKI) apiserverKKey() string  { return p.path("apiserver-kubelet-client.key") }

// generate writes every file of the PKI. nodeName is kubelet's node name.
func (p kubePKI) generate(nodeName string) error {
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now().Add(-time.Hour)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "mountkeeper-test-ca"},
		NotBefore:             now,
		NotAfter:              now.Add(48 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return fmt.Errorf("create CA: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	if err := writePEM(p.caCert(), "CERTIFICATE", caDER); err != nil {
		return err
	}
	serial := int64(2)
	leaf := func(certPath, keyPath string, subject pkix.Name, usage x509.ExtKeyUsage, ips []net.IP, dns []string) error {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      subject,
			NotBefore:    now,
			NotAfter:     now.Add(48 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			IPAddresses:  ips,
			DNSNames:     dns,
		}
		serial++
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
		if err != nil {
			return fmt.Errorf("create certificate %s: %w", certPath, err)
		}
		if err := writePEM(certPath, "CERTIFICATE", der); err != nil {
			return err
		}
		return writeKey(keyPath, key)
	}
	if err := leaf(p.serverCert(), p.serverKey(), pkix.Name{CommonName: "kube-apiserver"}, x509.ExtKeyUsageServerAuth,
		[]net.IP{net.IPv4(127, 0, 0, 1), net.IPv4(10, 96, 0, 1)},
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"}); err != nil {
		return err
	}
	if err := leaf(p.adminCert(), p.adminKey(), pkix.Name{CommonName: "mountkeeper-test", Organization: []string{"system:masters"}},
		x509.ExtKeyUsageClientAuth, nil, nil); err != nil {
		return err
	}
	if err := leaf(p.kubeletCert(), p.kubeletKey(), pkix.Name{CommonName: "system:node:" + nodeName, Organization: []string{"system:nodes"}},
		x509.ExtKeyUsageClientAuth, nil, nil); err != nil {
		return err
	}
	if err := leaf(p.apiserverKCert(), p.apiserverKKey(), pkix.Name{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}},
		x509.ExtKeyUsageClientAuth, nil, nil); err != nil {
		return err
	}
	sa, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	if err := writeKey(p.saPrivateKey(), sa); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(sa.Public())
	if err != nil {
		return err
	}
	return writePEM(p.saPublicKey(), "PUBLIC KEY", pub)
}

func writeKey(path string, key crypto.Signer) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "PRIVATE KEY", der)
}

func writePEM(path, typ string, der []byte) error {
	data := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
