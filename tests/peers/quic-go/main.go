// Minimal HTTP/3 server on quic-go, used by quicack as a real test peer.
//
// Serves the files of -www over HTTP/3 (/ is index.html). With QLOGDIR set, quic-go's own
// qlog.DefaultConnectionTracer writes <odcid>_server.sqlog per connection. Set
// QUIC_GO_DISABLE_GSO=true so captures on loopback see one QUIC datagram per frame (quicack
// KNOWLEDGE §5). Prints "listening on ADDR" once the socket is bound; on SIGTERM/SIGINT it
// closes every connection (which ends and flushes their qlog traces) and exits.
package main

import (
	"flag"
	"fmt"
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
	flag.Parse()
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
		TLSConfig: http3.ConfigureTLSConfig(mustTLS(*cert, *key)),
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
