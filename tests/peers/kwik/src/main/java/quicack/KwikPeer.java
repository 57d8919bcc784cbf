// Minimal HTTP/3 server and client on kwik 0.10.8 + flupke 0.9.4 (Java), used by quicack as a
// real test peer.
//
// Server: --addr IP:PORT --cert PEM --key PEM --www DIR serves the files of DIR over HTTP/3 (/ is
// index.html) from one DatagramSocket (plain java.net: one datagram per send, no UDP GSO). kwik's
// qlog writer is not published on Maven Central: no qlog. Prints "listening on ADDR" once bound;
// on SIGTERM/SIGINT the JVM's shutdown hook closes the server connector.
//
// Client: --get URL --ca PEM fetches URL over HTTP/3 and prints "STATUS N bytes" (flupke's
// client, certificate check off: kwik takes no CA file).
package quicack;

import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.DatagramSocket;
import java.net.InetSocketAddress;
import java.net.URI;
import java.security.KeyFactory;
import java.security.KeyStore;
import java.security.PrivateKey;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.security.spec.PKCS8EncodedKeySpec;
import java.util.Arrays;
import java.util.Base64;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;

import tech.kwik.core.log.NullLogger;
import tech.kwik.core.server.ServerConnectionConfig;
import tech.kwik.core.server.ServerConnector;
import tech.kwik.flupke.Http3Client;
import tech.kwik.flupke.server.Http3ApplicationProtocolFactory;
import tech.kwik.flupke.server.HttpRequestHandler;

public final class KwikPeer {
    public static void main(String[] args) throws Exception {
        Map<String, String> flags = new HashMap<>();
        for (int i = 0; i + 1 < args.length; i += 2) {
            flags.put(args[i], args[i + 1]);
        }
        if (flags.containsKey("--get")) {
            fetch(flags.get("--get"));
            return;
        }
        for (String needed : new String[] {"--addr", "--cert", "--key", "--www"}) {
            if (!flags.containsKey(needed)) {
                System.err.println("usage: kwik-peer --addr IP:PORT --cert PEM --key PEM --www DIR");
                System.exit(2);
            }
        }
        String addr = flags.get("--addr");
        int colon = addr.lastIndexOf(':');
        String host = addr.substring(0, colon).replace("[", "").replace("]", "");
        DatagramSocket socket = new DatagramSocket(new InetSocketAddress(host, Integer.parseInt(addr.substring(colon + 1))));
        ServerConnectionConfig config = ServerConnectionConfig.builder()
                .maxIdleTimeoutInSeconds(30)
                .maxOpenPeerInitiatedUnidirectionalStreams(10)
                .maxOpenPeerInitiatedBidirectionalStreams(100)
                .maxConnectionBufferSize(10_000_000)
                .maxUnidirectionalStreamBufferSize(1_000_000)
                .maxBidirectionalStreamBufferSize(1_000_000)
                .build();
        // (withCertificate reads RSA keys only: the P-256 key goes through a key store)
        char[] password = "quicack".toCharArray();
        ServerConnector server = ServerConnector.builder().withSocket(socket)
                .withKeyStore(keyStore(Path.of(flags.get("--cert")), Path.of(flags.get("--key")), password), "peer", password, "secp256r1")
                .withConfiguration(config).withLogger(new NullLogger()).build();
        server.registerApplicationProtocol("h3", new Http3ApplicationProtocolFactory(files(Path.of(flags.get("--www")))));
        server.start();
        System.out.println("listening on " + socket.getLocalSocketAddress());
        System.out.flush();
        Runtime.getRuntime().addShutdownHook(new Thread(server::close));
        Thread.currentThread().join();
    }

    /** An in-memory key store holding the PEM certificate and its PKCS#8 EC key. */
    static KeyStore keyStore(Path certFile, Path keyFile, char[] password) throws Exception {
        Certificate cert;
        try (InputStream in = new FileInputStream(certFile.toFile())) {
            cert = CertificateFactory.getInstance("X.509").generateCertificate(in);
        }
        String pem = Files.readString(keyFile).replaceAll("-----[A-Z ]+-----", "").replaceAll("\\s", "");
        PrivateKey key = KeyFactory.getInstance("EC").generatePrivate(new PKCS8EncodedKeySpec(Base64.getDecoder().decode(pem)));
        KeyStore store = KeyStore.getInstance("PKCS12");
        store.load(null, null);
        store.setKeyEntry("peer", key, password, new Certificate[] {cert});
        return store;
    }

    static HttpRequestHandler files(Path www) {
        return (request, response) -> {
            String path = request.path().split("\\?", 2)[0].replaceFirst("^/+", "");
            if (path.isEmpty() || path.endsWith("/")) {
                path += "index.html";
            }
            Path file = www.resolve(path).normalize();
            if (!file.startsWith(www.normalize()) || !Files.isRegularFile(file)) {
                response.setStatus(404);
                response.getOutputStream().close();
                return;
            }
            byte[] body = Files.readAllBytes(file);
            response.setStatus(200);
            response.addHeader("server", "kwik-peer");
            OutputStream out = response.getOutputStream();
            // in 8 KiB pieces, each flushed: written at once, the 64 KiB file now and then stalled
            // after two packets on a cold, loaded JVM (observed: 1 of 3 first probes) until the
            // client gave up; in pieces it has not (9 probes under the same load)
            // (whole arrays: flupke 0.9.4's DataFrameWriter.write(b, off, len) takes len for the
            // buffer's limit, so every piece after the first would be empty)
            for (int at = 0; at < body.length; at += 8192) {
                out.write(Arrays.copyOfRange(body, at, Math.min(at + 8192, body.length)));
                out.flush();
            }
            out.close();
        };
    }

    static void fetch(String url) throws IOException, InterruptedException {
        HttpClient client = Http3Client.newBuilder().disableCertificateCheck().connectTimeout(Duration.ofSeconds(10)).build();
        HttpResponse<byte[]> response = client.send(HttpRequest.newBuilder(URI.create(url)).timeout(Duration.ofSeconds(20)).build(),
                HttpResponse.BodyHandlers.ofByteArray());
        System.out.println(response.statusCode() + " " + response.body().length + " bytes");
        System.exit(0);
    }
}
