// Minimal HTTP/3 server on quic-go, used by quicack as a real test peer (and, with -get, a
// minimal client).
//
// Serves the files of -www over HTTP/3 (/ is index.html). With QLOGDIR set, quic-go's own
// qlog.DefaultConnectionTracer writes <odcid>_server.sqlog per connection. -curves restricts the
// TLS key exchange groups (in Go's fixed order of preference): a server limited to a group the
// client supports but sent no key share for answers with a HelloRetryRequest.
//
// With -get URL it is a client instead: it fetches URL over HTTP/3 (trusting -ca, or with
// -insecure no certificate check at all, as quicack's testbed client does), prints the status,
// the body's length and the certificates received ("200 OK 10240 bytes 1 certificates"), writes
// <odcid>_client.sqlog under QLOGDIR (and its TLS secrets to -keylog) and exits, within -timeout
// (also its handshake idle timeout); its Go TLS stack sends a key share for its first group only.
// With -session FILE it keeps the TLS session (with quic-go's transport parameters) in FILE and,
// when FILE already holds one, resumes it and sends its GET in 0-RTT where the session allows
// early data (quicack's testbed: a full connection, then a resumed one, two processes). Set
// QUIC_GO_DISABLE_GSO=true so captures on loopback see one QUIC datagram per frame (quicack
// KNOWLEDGE §5). Prints "listening on ADDR" once the socket is bound; on SIGTERM/SIGINT it
// closes every connection (which ends and flushes their qlog traces) and exits.
package main

import (
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/quic-go/qlog"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:4433", "UDP address to listen on")
	cert := flag.String("cert", "", "TLS certificate (PEM)")
	key := flag.String("key", "", "TLS private key (PEM)")
	www := flag.String("www", ".", "folder to serve")
	curves := flag.String("curves", "", "TLS key exchange groups, e.g. X25519,P384 (default: Go's)")
	get := flag.String("get", "", "client mode: fetch this https:// URL over HTTP/3, then exit")
	ca := flag.String("ca", "", "client mode: the certificate (PEM) to trust")
	keylog := flag.String("keylog", "", "client mode: append the TLS secrets to this file (NSS key log)")
	insecure := flag.Bool("insecure", false, "client mode: accept any certificate (no -ca needed)")
	timeout := flag.Duration("timeout", 20*time.Second, "client mode: give up after this long")
	session := flag.String("session", "", "client mode: keep the TLS session in this file; resume it (GET in 0-RTT) when it holds one")
	flag.Parse()
	if *get != "" {
		if *ca == "" && !*insecure {
			log.Fatal("usage: quic-go-h3-server -get URL (-ca PEM | -insecure) [-curves LIST] [-keylog FILE] [-timeout D]")
		}
		if err := fetch(*get, *ca, *insecure, *timeout, mustCurves(*curves), *keylog, *session); err != nil {
			log.Fatal(err)
		}
		return
	}
	if *cert == "" || *key == "" {
		log.Fatal("usage: quic-go-h3-server -addr IP:PORT -cert PEM -key PEM -www DIR")
	}

	mux := http.NewServeMux()
	files := http.FileServer(http.Dir(*www))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Server", "quic-go-h3-server")
		files.ServeHTTP(w, r)
	})

	udpAddr, err := net.ResolveUDPAddr("udp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	conn, err := net.ListenUDP("udp", udpAddr)
	if err != nil {
		log.Fatal(err)
	}
	server := http3.Server{
		Handler:   mux,
		TLSConfig: http3.ConfigureTLSConfig(withCurves(mustTLS(*cert, *key), mustCurves(*curves))),
		QUICConfig: &quic.Config{
			Tracer:         qlog.DefaultConnectionTracer,
			MaxIdleTimeout: 30 * time.Second,
		},
	}

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-stop
		server.Close()
		// The qlog writers run in goroutines of their own: give them time to flush.
		time.Sleep(300 * time.Millisecond)
		os.Exit(0)
	}()

	fmt.Printf("listening on %s\n", conn.LocalAddr())
	if err := server.Serve(conn); err != nil && err != http.ErrServerClosed {
		log.Fatal(err)
	}
	select {} // closed by the signal handler, which exits once the qlog writers had time
}

func withCurves(c *tls.Config, curves []tls.CurveID) *tls.Config {
	c.CurvePreferences = curves
	return c
}

// fetch GETs url over HTTP/3 and prints "STATUS N bytes C certificates".
func fetch(url, caFile string, insecure bool, timeout time.Duration, curves []tls.CurveID, keylog, session string) error {
	config := &tls.Config{CurvePreferences: curves, MinVersion: tls.VersionTLS13, InsecureSkipVerify: insecure}
	method := http.MethodGet
	if session != "" {
		if _, err := os.Stat(session); err == nil {
			method = http3.MethodGet0RTT // sent at once when the resumed session allows early data
		}
		config.ClientSessionCache = fileSessionCache{session}
	}
	if !insecure {
		config.RootCAs = mustRoots(caFile)
	}
	if keylog != "" {
		f, err := os.OpenFile(keylog, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		defer f.Close()
		config.KeyLogWriter = f
	}
	tr := &http3.Transport{
		TLSClientConfig: config,
		QUICConfig: &quic.Config{Tracer: qlog.DefaultConnectionTracer, MaxIdleTimeout: 30 * time.Second,
			HandshakeIdleTimeout: timeout},
	}
	client := &http.Client{Transport: tr, Timeout: timeout}
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		tr.Close()
		// A failed request's trace is data too (a rejected 0-RTT, a timeout): let it flush.
		time.Sleep(300 * time.Millisecond)
		return err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	tr.Close()
	// The qlog writer runs in a goroutine of its own: give it time to flush.
	time.Sleep(300 * time.Millisecond)
	if err != nil {
		return err
	}
	certificates := 0
	if resp.TLS != nil {
		certificates = len(resp.TLS.PeerCertificates)
	}
	fmt.Printf("%s %d bytes %d certificates\n", resp.Status, len(body), certificates)
	return nil
}

// fileSessionCache keeps one TLS session in a file, so that a later process resumes it: the
// ticket and the session state (RFC 8446 §4.6.1), whose Extra holds quic-go's transport
// parameters for 0-RTT.
type fileSessionCache struct{ path string }

type savedSession struct {
	Ticket []byte
	State  []byte
}

func (c fileSessionCache) Get(string) (*tls.ClientSessionState, bool) {
	data, err := os.ReadFile(c.path)
	if err != nil {
		return nil, false
	}
	var saved savedSession
	if json.Unmarshal(data, &saved) != nil {
		return nil, false
	}
	state, err := tls.ParseSessionState(saved.State)
	if err != nil {
		return nil, false
	}
	session, err := tls.NewResumptionState(saved.Ticket, state)
	return session, err == nil
}

func (c fileSessionCache) Put(_ string, cs *tls.ClientSessionState) {
	if cs == nil {
		return
	}
	ticket, state, err := cs.ResumptionState()
	if err != nil || state == nil {
		return
	}
	encoded, err := state.Bytes()
	if err != nil {
		return
	}
	if data, err := json.Marshal(savedSession{ticket, encoded}); err == nil {
		_ = os.WriteFile(c.path, data, 0o600)
	}
}
