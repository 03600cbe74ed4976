package zktest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TLS is a throwaway certificate authority for one test, and what a
// ZooKeeper server and a Go client need to talk TLS through it. Every
// certificate is ECDSA P-256 and valid for two days. Make one with
// [TLSFiles]; give it to [StartPrivate] with [WithTLS].
type TLS struct {
	Dir      string // where the files are (the test's temporary directory)
	Password string // of the CA store, KeyStore and TrustStore

	CACert     string // the CA's certificate, PEM
	KeyStore   string // the server's key and certificate chain, PKCS12; the certificate is for localhost and 127.0.0.1
	TrustStore string // the CA's certificate, PKCS12: whom the server trusts
	ClientCert string // a client certificate (CN=zktest client) signed by the CA, PEM
	ClientKey  string // its private key, PKCS8 PEM

	caPEM, certPEM, keyPEM []byte
}

// TLSFiles makes a CA, a server keystore and a truststore with the JDK's
// keytool, which comes with the Java that runs ZooKeeper, and a client
// certificate (its key made here, signed by the CA with keytool), in a
// temporary directory of the test. It takes a few seconds of keytool runs.
// Like [StartPrivate], it skips the test when there is no local ZooKeeper
// installation (see the package doc).
func TLSFiles(t testing.TB) *TLS {
	t.Helper()
	li := needLocal(t)
	begin := time.Now()
	f, err := makeTLS(li, t.TempDir())
	if err != nil {
		t.Fatalf("zktest: TLSFiles: %v", err)
	}
	t.Logf("zktest: made TLS files in %v", time.Since(begin).Round(time.Millisecond))
	return f
}

// ClientConfig returns a new client configuration that trusts the CA and
// presents the client certificate.
func (f *TLS) ClientConfig() *tls.Config {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(f.caPEM)
	cert, err := tls.X509KeyPair(f.certPEM, f.keyPEM)
	if err != nil {
		panic("zktest: client key pair: " + err.Error()) // checked by makeTLS
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}
}

// tlsPassword protects the test stores; keytool wants six characters at
// least.
const tlsPassword = "zktest-secret"

func makeTLS(li *localInstall, dir string) (*TLS, error) {
	keytool, err := findKeytool(li)
	if err != nil {
		return nil, err
	}
	path := func(name string) string { return filepath.Join(dir, name) }
	f := &TLS{
		Dir: dir, Password: tlsPassword,
		CACert: path("ca.pem"), KeyStore: path("server.p12"), TrustStore: path("truststore.p12"),
		ClientCert: path("client.pem"), ClientKey: path("client-key.pem"),
	}
	ca, serverCSR, serverPEM, chain, clientCSR := path("ca.p12"), path("server.csr"), path("server.pem"), path("server-chain.pem"), path("client.csr")
	kt := func(args ...string) func() error {
		return func() error {
			// Fastest start, as for the server (see jvmFlags).
			argv := []string{"-J-XX:TieredStopAtLevel=1", "-J-XX:+UseSerialGC", "-J-XX:-UsePerfData"}
			argv = append(argv, args...)
			argv = append(argv, "-storepass", tlsPassword)
			out, err := exec.Command(keytool, argv...).CombinedOutput()
			if err != nil {
				return fmt.Errorf("keytool %s: %w\n%s", strings.Join(args, " "), err, out)
			}
			return nil
		}
	}
	ec := []string{"-keyalg", "EC", "-groupname", "secp256r1", "-validity", "2", "-storetype", "PKCS12"}
	signed := []string{"-alias", "ca", "-keystore", ca, "-rfc", "-validity", "2"}
	// Independent runs go in parallel: each is a JVM start.
	steps := [][]func() error{
		{
			kt(append([]string{"-genkeypair", "-alias", "ca", "-dname", "CN=zktest CA", "-keystore", ca,
				"-ext", "bc:c=ca:true", "-ext", "ku:c=keyCertSign,cRLSign"}, ec...)...),
			kt(append([]string{"-genkeypair", "-alias", "server", "-dname", "CN=localhost", "-keystore", f.KeyStore}, ec...)...),
			func() error { return clientKey(f, clientCSR) },
		},
		{
			kt("-exportcert", "-alias", "ca", "-keystore", ca, "-rfc", "-file", f.CACert),
			kt("-certreq", "-alias", "server", "-keystore", f.KeyStore, "-file", serverCSR),
			kt(append(signed, "-gencert", "-infile", clientCSR, "-outfile", f.ClientCert,
				"-ext", "ku:c=digitalSignature", "-ext", "eku=clientAuth",
				"-ext", "san=dns:localhost,ip:127.0.0.1")...),
		},
		{
			kt(append(signed, "-gencert", "-infile", serverCSR, "-outfile", serverPEM,
				"-ext", "ku:c=digitalSignature", "-ext", "eku=serverAuth,clientAuth",
				"-ext", "san=dns:localhost,ip:127.0.0.1")...),
			kt("-importcert", "-alias", "ca", "-file", f.CACert, "-keystore", f.TrustStore, "-storetype", "PKCS12", "-noprompt"),
		},
		{
			// The reply, with the chain up to the CA, replaces the
			// server's self-signed certificate.
			func() error {
				if err := concat(chain, serverPEM, f.CACert); err != nil {
					return err
				}
				return kt("-importcert", "-alias", "server", "-file", chain, "-keystore", f.KeyStore, "-noprompt")()
			},
		},
	}
	for _, step := range steps {
		if err := parallel(step); err != nil {
			return nil, err
		}
	}
	if f.caPEM, err = os.ReadFile(f.CACert); err != nil {
		return nil, err
	}
	if f.certPEM, err = os.ReadFile(f.ClientCert); err != nil {
		return nil, err
	}
	if _, err := tls.X509KeyPair(f.certPEM, f.keyPEM); err != nil {
		return nil, fmt.Errorf("client key pair: %w", err)
	}
	return f, nil
}

// findKeytool looks for keytool beside the java that runs ZooKeeper, then
// on PATH.
func findKeytool(li *localInstall) (string, error) {
	java := li.java
	if p, err := filepath.EvalSymlinks(java); err == nil {
		java = p
	}
	if p := filepath.Join(filepath.Dir(java), "keytool"); isFile(p) {
		return p, nil
	}
	p, err := exec.LookPath("keytool")
	if err != nil {
		return "", fmt.Errorf("keytool not found beside %s nor on PATH: %w", li.java, err)
	}
	return p, nil
}

// clientKey makes the client's key, writes it to f.ClientKey and keeps it,
// and writes a certificate request for it to csrFile.
func clientKey(f *TLS, csrFile string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	f.keyPEM = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	if err := os.WriteFile(f.ClientKey, f.keyPEM, 0o600); err != nil {
		return err
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "zktest client"},
	}, key)
	if err != nil {
		return err
	}
	return os.WriteFile(csrFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csr}), 0o644)
}

// concat writes the files from, one after the other, to dst.
func concat(dst string, from ...string) error {
	var b []byte
	for _, p := range from {
		c, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		b = append(b, c...)
	}
	return os.WriteFile(dst, b, 0o644)
}

// parallel runs fs at once and returns their first error once all are done.
func parallel(fs []func() error) error {
	errs := make([]error, len(fs))
	var wg sync.WaitGroup
	for i, f := range fs {
		wg.Go(func() { errs[i] = f() })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
