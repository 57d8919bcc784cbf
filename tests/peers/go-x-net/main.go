// Minimal hq-interop server and client on Go's golang.org/x/net/quic, used by quicack as a real
// test peer ("go-x-net").
//
// x/net has QUIC but no public HTTP/3, so both sides speak hq-interop (ALPN "hq-interop", as
// the QUIC interop runner's endpoints do): the client opens a bidirectional stream, sends
// "GET /path\r\n" and closes its side; the server answers with the file's bytes (nothing for a
// missing file: hq-interop has no status) and closes the stream. / is index.html.
//
// Server: -addr IP:PORT -cert PEM -key PEM -www DIR. With QLOGDIR set, x/net's own qlog
// handler (quic/qlog, frame level) writes <odcid>_server.sqlog per connection (JSON-SEQ, qlog
// 0.3 layout). x/net sends one datagram per sendmsg (no UDP GSO). Prints "listening on ADDR"
// once the socket is bound; on SIGTERM/SIGINT it closes the endpoint (every connection sends its
// CONNECTION_CLOSE) and exits.
//
// Client: -get URL -ca PEM [-keylog FILE]: fetches URL's path over hq-interop, writes
// <odcid>_client.sqlog under QLOGDIR, prints "N bytes" and exits.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/quic"
	"golang.org/x/net/quic/qlog"
)

const alpn = "hq-interop"

func main() {
	addr := flag.String("addr", "127.0.0.1:4433", "UDP address to listen on")
	cert := flag.String("cert", "", "TLS certificate (PEM)")
	key := flag.String("key", "", "TLS private key (PEM)")
	www := flag.String("www", ".", "folder to serve")
	get := flag.String("get", "", "client mode: fetch this https:// URL over hq-interop, then exit")
	ca := flag.String("ca", "", "client mode: the certificate (PEM) to trust")
	keylog := flag.String("keylog", "", "client mode: append the TLS secrets to this file (NSS key log)")
	flag.Parse()
	if *get != "" {
		if *ca == "" {
			log.Fatal("usage: go-x-net-peer -get URL -ca PEM [-keylog FILE]")
		}
		if err := fetch(*get, *ca, *keylog); err != nil {
			log.Fatal(err)
		}
		return
	}
	if *cert == "" || *key == "" {
		log.Fatal("usage: go-x-net-peer -addr IP:PORT -cert PEM -key PEM -www DIR")
	}
	pair, err := tls.LoadX509KeyPair(*cert, *key)
	if err != nil {
		log.Fatalf("loading certificate: %v", err)
	}
	config := &quic.Config{
		TLSConfig:      &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS13, NextProtos: []string{alpn}},
		MaxIdleTimeout: 30 * time.Second,
		QLogLogger:     qlogger(),
	}
	endpoint, err := quic.Listen("udp", *addr, config)
	if err != nil {
		log.Fatal(err)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-stop
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		endpoint.Close(ctx) // CONNECTION_CLOSE on every connection; qlog records are written as they happen
		os.Exit(0)
	}()
	fmt.Printf("listening on %s\n", endpoint.LocalAddr())
	for {
		conn, err := endpoint.Accept(context.Background())
		if err != nil {
			log.Fatal(err)
		}
		go serveConn(conn, *www)
	}
}

// qlogger is x/net's JSON-SEQ qlog handler at frame level writing into $QLOGDIR, or nil.
func qlogger() *slog.Logger {
	dir := os.Getenv("QLOGDIR")
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		log.Fatal(err)
	}
	return slog.New(qlog.NewJSONHandler(qlog.HandlerOptions{Level: quic.QLogLevelFrame, Dir: dir}))
}

func serveConn(conn *quic.Conn, www string) {
	for {
		stream, err := conn.AcceptStream(context.Background())
		if err != nil {
			return
		}
		go serveStream(stream, www)
	}
}

// serveStream answers one hq-interop request: "GET /path" (CRLF or LF, the client then closes
// its side) with the file's bytes.
func serveStream(stream *quic.Stream, www string) {
	defer stream.Close()
	line, err := bufio.NewReader(io.LimitReader(stream, 4096)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return
	}
	fields := strings.Fields(line)
	if len(fields) < 2 || fields[0] != "GET" {
		return
	}
	path := strings.TrimPrefix(fields[1], "/")
	if path == "" || strings.HasSuffix(path, "/") {
		path += "index.html"
	}
	if !filepath.IsLocal(path) {
		return
	}
	body, err := os.ReadFile(filepath.Join(www, path))
	if err != nil {
		return
	}
	stream.Write(body)
}

// fetch GETs url's path over hq-interop and prints "N bytes".
func fetch(rawURL, caFile, keylog string) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return err
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return fmt.Errorf("%s holds no PEM certificate", caFile)
	}
	tlsConfig := &tls.Config{RootCAs: roots, ServerName: u.Hostname(), MinVersion: tls.VersionTLS13, NextProtos: []string{alpn}}
	if keylog != "" {
		f, err := os.OpenFile(keylog, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		defer f.Close()
		tlsConfig.KeyLogWriter = f
	}
	endpoint, err := quic.Listen("udp", ":0", nil)
	if err != nil {
		return err
	}
	defer endpoint.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	config := &quic.Config{TLSConfig: tlsConfig, MaxIdleTimeout: 30 * time.Second, QLogLogger: qlogger()}
	conn, err := endpoint.Dial(ctx, "udp", u.Host, config)
	if err != nil {
		return err
	}
	defer conn.Close()
	stream, err := conn.NewStream(ctx)
	if err != nil {
		return err
	}
	stream.SetReadContext(ctx)
	stream.SetWriteContext(ctx)
	path := u.EscapedPath()
	if path == "" {
		path = "/"
	}
	if _, err := stream.Write([]byte("GET " + path + "\r\n")); err != nil {
		return err
	}
	stream.CloseWrite()
	body, err := io.ReadAll(stream)
	if err != nil {
		return err
	}
	fmt.Printf("%d bytes\n", len(body))
	return nil
}
