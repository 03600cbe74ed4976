package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"os"
	"strings"

	"github.com/zkrecipes/zkrecipes"
)

// security is what it takes to reach a secured ensemble: TLS to the
// servers' secureClientPort, and digest credentials. The TLS flags are
// Consul's names (-ca-file, -client-cert, -client-key, -tls-server-name):
// etcdctl's -key would clash with queue put's -key.
type security struct {
	tls        bool
	caFile     string
	certFile   string
	keyFile    string
	serverName string
	auth       string // USER:PASSWORD, for the digest scheme

	config *tls.Config // made from the files by check, when TLS is on
}

// register adds the flags to fs. -auth defaults to $ZK_AUTH, so that a
// password need not be on the command line, where ps shows it.
func (sec *security) register(fs *flag.FlagSet) {
	fs.BoolVar(&sec.tls, "tls", sec.tls, "talk TLS to the servers (their secureClientPort); implied by the other TLS flags")
	fs.StringVar(&sec.caFile, "ca-file", sec.caFile, "trust the CA certificates in `FILE` (PEM) for the servers' certificates (default: the system's roots)")
	fs.StringVar(&sec.certFile, "client-cert", sec.certFile, "present the client certificate in `FILE` (PEM); with -client-key")
	fs.StringVar(&sec.keyFile, "client-key", sec.keyFile, "the client certificate's private key, in `FILE` (PEM)")
	fs.StringVar(&sec.serverName, "tls-server-name", sec.serverName, "check the servers' certificates for `NAME` (default: each server's host as given in -zk)")
	fs.StringVar(&sec.auth, "auth", sec.auth, "authenticate with the digest scheme as `USER:PASSWORD` (default $ZK_AUTH); the nodes zklock creates are then for that user only")
}

// useTLS reports whether any TLS flag was given.
func (sec *security) useTLS() bool {
	return sec.tls || sec.caFile != "" || sec.certFile != "" || sec.keyFile != "" || sec.serverName != ""
}

// check reports bad combinations and reads the certificate files, before
// anything is dialled: a file that cannot be used is bad input, like a
// mistyped flag.
func (sec *security) check() error {
	switch {
	case (sec.certFile == "") != (sec.keyFile == ""):
		return usagef("-client-cert and -client-key go together: give both or neither")
	case sec.auth != "":
		if user, _, ok := strings.Cut(sec.auth, ":"); !ok || user == "" {
			return usagef("-auth: want USER:PASSWORD (the digest scheme), with a user before the colon")
		}
	}
	if !sec.useTLS() {
		return nil
	}
	cfg := &tls.Config{ServerName: sec.serverName}
	if sec.caFile != "" {
		pem, err := os.ReadFile(sec.caFile)
		if err != nil {
			return usagef("-ca-file: %v", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return usagef("-ca-file: no PEM certificate in %s", sec.caFile)
		}
	}
	if sec.certFile != "" {
		cert, err := tls.LoadX509KeyPair(sec.certFile, sec.keyFile)
		if err != nil {
			return usagef("-client-cert, -client-key: %v", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	sec.config = cfg
	return nil
}

// options are the Session options the flags ask for (check first).
func (sec *security) options() []zkrecipes.Option {
	var opts []zkrecipes.Option
	if sec.config != nil {
		opts = append(opts, zkrecipes.WithTLS(sec.config))
	}
	if sec.auth != "" {
		opts = append(opts, zkrecipes.WithAuth("digest", []byte(sec.auth)))
	}
	return opts
}
