package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
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

// pki holds the paths of the key material of one cluster. Everything is
// generated fresh for every cluster: ECDSA P-256 keys (fast to generate,
// supported by the apiserver for TLS, client certificates and ES256
// service-account tokens).
type pki struct {
	Dir string

	CACert, CAKey                 string
	ServingCert, ServingKey       string
	AdminCert, AdminKey           string
	ControllerCert, ControllerKey string
	SchedulerCert, SchedulerKey   string
	NodeCert, NodeKey             string
	ProxyCert, ProxyKey           string
	SAKey, SAPub                  string
	// Front proxy (requestheader authentication): the apiserver's client
	// certificate towards aggregated API servers, and the CA that
	// delegating components (the controller-manager) trust for it.
	FrontProxyCACert, FrontProxyCAKey string
	FrontProxyCert, FrontProxyKey     string
}

func newPKI(dir string) *pki {
	j := func(n string) string { return filepath.Join(dir, n) }
	return &pki{
		Dir:            dir,
		CACert:         j("ca.crt"),
		CAKey:          j("ca.key"),
		ServingCert:    j("serving.crt"),
		ServingKey:     j("serving.key"),
		AdminCert:      j("admin.crt"),
		AdminKey:       j("admin.key"),
		ControllerCert: j("controller-manager.crt"),
		ControllerKey:  j("controller-manager.key"),
		SchedulerCert:  j("scheduler.crt"),
		SchedulerKey:   j("scheduler.key"),
		NodeCert:       j("node.crt"),
		NodeKey:        j("node.key"),
		ProxyCert:      j("kube-proxy.crt"),
		ProxyKey:       j("kube-proxy.key"),
		SAKey:          j("sa.key"),
		SAPub:          j("sa.pub"),

		FrontProxyCACert: j("front-proxy-ca.crt"),
		FrontProxyCAKey:  j("front-proxy-ca.key"),
		FrontProxyCert:   j("front-proxy-client.crt"),
		FrontProxyKey:    j("front-proxy-client.key"),
	}
}

// generate writes a CA, a serving certificate for the loopback and in-cluster
// names of the apiserver, client certificates for the admin
// (system:masters), the controller-manager, the scheduler and the kubelet of
// the node named nodeName, and the service-account signing key pair.
func (p *pki) generate(serviceIP net.IP, nodeName string) error {
	if err := os.MkdirAll(p.Dir, 0o700); err != nil {
		return err
	}
	now := time.Now().Add(-time.Hour) // tolerate small clock differences
	notAfter := now.Add(10 * 365 * 24 * time.Hour)

	caCert, caKey, err := newCA("vpol-test-ca", now, notAfter, p.CACert, p.CAKey)
	if err != nil {
		return err
	}
	fpCert, fpKey, err := newCA("vpol-test-front-proxy-ca", now, notAfter, p.FrontProxyCACert, p.FrontProxyCAKey)
	if err != nil {
		return err
	}

	leaf := func(caCert *x509.Certificate, caKey crypto.Signer, certPath, keyPath string, subject pkix.Name, usage x509.ExtKeyUsage, dns []string, ips []net.IP) error {
		key, err := newKey()
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			SerialNumber:          serial(),
			Subject:               subject,
			NotBefore:             now,
			NotAfter:              notAfter,
			KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
			ExtKeyUsage:           []x509.ExtKeyUsage{usage},
			BasicConstraintsValid: true,
			DNSNames:              dns,
			IPAddresses:           ips,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, key.Public(), caKey)
		if err != nil {
			return err
		}
		if err := writeCert(certPath, der); err != nil {
			return err
		}
		return writeKey(keyPath, key)
	}

	if err := leaf(caCert, caKey, p.ServingCert, p.ServingKey, pkix.Name{CommonName: "kube-apiserver"}, x509.ExtKeyUsageServerAuth,
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		[]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1"), serviceIP}); err != nil {
		return err
	}
	if err := leaf(caCert, caKey, p.AdminCert, p.AdminKey, pkix.Name{CommonName: "vpol-admin", Organization: []string{"system:masters"}},
		x509.ExtKeyUsageClientAuth, nil, nil); err != nil {
		return err
	}
	if err := leaf(caCert, caKey, p.ControllerCert, p.ControllerKey, pkix.Name{CommonName: "system:kube-controller-manager"},
		x509.ExtKeyUsageClientAuth, nil, nil); err != nil {
		return err
	}

	if err := leaf(caCert, caKey, p.SchedulerCert, p.SchedulerKey, pkix.Name{CommonName: "system:kube-scheduler"},
		x509.ExtKeyUsageClientAuth, nil, nil); err != nil {
		return err
	}
	// What the Node authorizer and NodeRestriction expect of a kubelet's identity.
	if err := leaf(caCert, caKey, p.NodeCert, p.NodeKey, pkix.Name{CommonName: "system:node:" + nodeName,
		Organization: []string{"system:nodes"}}, x509.ExtKeyUsageClientAuth, nil, nil); err != nil {
		return err
	}

	// The user the bootstrap ClusterRoleBinding system:node-proxier names.
	if err := leaf(caCert, caKey, p.ProxyCert, p.ProxyKey, pkix.Name{CommonName: "system:kube-proxy"},
		x509.ExtKeyUsageClientAuth, nil, nil); err != nil {
		return err
	}

	if err := leaf(fpCert, fpKey, p.FrontProxyCert, p.FrontProxyKey, pkix.Name{CommonName: "front-proxy-client"},
		x509.ExtKeyUsageClientAuth, nil, nil); err != nil {
		return err
	}

	saKey, err := newKey()
	if err != nil {
		return err
	}
	if err := writeKey(p.SAKey, saKey); err != nil {
		return err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return err
	}
	return writePEM(p.SAPub, "PUBLIC KEY", pubDER, 0o644)
}

// newCA creates a self-signed CA and writes it to certPath and keyPath.
func newCA(name string, notBefore, notAfter time.Time, certPath, keyPath string) (*x509.Certificate, crypto.Signer, error) {
	key, err := newKey()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	if err := writeCert(certPath, der); err != nil {
		return nil, nil, err
	}
	if err := writeKey(keyPath, key); err != nil {
		return nil, nil, err
	}
	return cert, key, nil
}

func newKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		panic(err)
	}
	return n
}

func writeCert(path string, der []byte) error {
	return writePEM(path, "CERTIFICATE", der, 0o644)
}

func writeKey(path string, key crypto.Signer) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "PRIVATE KEY", der, 0o600)
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	data := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	if err := os.WriteFile(path, data, mode); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
