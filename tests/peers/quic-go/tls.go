package main

import (
	"crypto/tls"
	"log"
)

func mustTLS(certFile, keyFile string) *tls.Config {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		log.Fatalf("loading certificate: %v", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS13}
}
