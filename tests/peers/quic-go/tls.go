package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log"
	"os"
	"strings"
)

func mustTLS(certFile, keyFile string) *tls.Config {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		log.Fatalf("loading certificate: %v", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS13}
}

// mustRoots is a pool holding the certificate (PEM) the client trusts.
func mustRoots(caFile string) *x509.CertPool {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		log.Fatalf("reading %s: %v", caFile, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		log.Fatalf("%s holds no PEM certificate", caFile)
	}
	return pool
}

var curveNames = map[string]tls.CurveID{
	"X25519": tls.X25519, "P256": tls.CurveP256, "P384": tls.CurveP384, "P521": tls.CurveP521,
	"X25519MLKEM768": tls.X25519MLKEM768,
}

// mustCurves parses "X25519,P384" into key exchange groups; "" is Go's default (nil).
func mustCurves(list string) []tls.CurveID {
	if list == "" {
		return nil
	}
	var out []tls.CurveID
	for _, name := range strings.Split(list, ",") {
		id, ok := curveNames[strings.TrimSpace(name)]
		if !ok {
			log.Fatal(fmt.Sprintf("unknown group %q (known: X25519, P256, P384, P521, X25519MLKEM768)", name))
		}
		out = append(out, id)
	}
	return out
}
