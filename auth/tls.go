package auth

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// certCheckInterval is how often a handshake may stat the certificate files.
const certCheckInterval = time.Second

// TLSFiles names the PEM files of TLS; cmd/server fills it from the environment.
type TLSFiles struct {
	CertFile     string // BATON_TLS_CERT_FILE: the certificate chain, leaf first
	KeyFile      string // BATON_TLS_KEY_FILE: its private key
	ClientCAFile string // BATON_TLS_CLIENT_CA_FILE: CAs a client certificate must chain to; empty for none
}

// Enabled reports whether any TLS file is set.
func (f TLSFiles) Enabled() bool { return f != TLSFiles{} }

// NewTLSConfig returns the server's TLS configuration: TLS 1.2 or later (1.2
// with ECDHE and AEAD suites only), the certificate and key of f, re-read when either file changes (a handshake looks
// at most once a second, so a rotated certificate serves the next connection
// without a restart; a pair that fails to load is logged and the last good one
// kept), and, with f.ClientCAFile, a verified client certificate required of
// every client. The client CAs are read once: changing them takes a restart. It
// returns an error when only one of the certificate and key is given, a client
// CA file comes without them, or a file cannot be read or parsed.
func NewTLSConfig(f TLSFiles, log zerolog.Logger) (*tls.Config, error) {
	if f.CertFile == "" || f.KeyFile == "" {
		if f.CertFile == "" && f.KeyFile == "" && f.ClientCAFile != "" {
			return nil, errors.New("BATON_TLS_CLIENT_CA_FILE needs BATON_TLS_CERT_FILE and BATON_TLS_KEY_FILE")
		}
		return nil, errors.New("TLS needs both BATON_TLS_CERT_FILE and BATON_TLS_KEY_FILE")
	}
	r := &certReloader{certFile: f.CertFile, keyFile: f.KeyFile, every: certCheckInterval, log: log}
	if err := r.load(); err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, CipherSuites: tls12Suites, GetCertificate: r.get}
	if f.ClientCAFile != "" {
		pool, err := readCAs(f.ClientCAFile)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// tls12Suites are the cipher suites TLS 1.2 may use: forward secrecy (ECDHE)
// and authenticated encryption (GCM, ChaCha20-Poly1305) only, none of the CBC
// suites (with SHA-1, and open to padding oracles) Go still accepts by
// default. TLS 1.3's suites are all of that kind and not configurable.
var tls12Suites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// readCAs reads a PEM bundle of CA certificates.
func readCAs(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("BATON_TLS_CLIENT_CA_FILE: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("BATON_TLS_CLIENT_CA_FILE %s: no PEM certificate in it", path)
	}
	return pool, nil
}

// certReloader serves the newest certificate pair that loaded.
type certReloader struct {
	certFile, keyFile string
	every             time.Duration
	log               zerolog.Logger

	cert      atomic.Pointer[tls.Certificate]
	nextCheck atomic.Int64 // unix nanoseconds
	mu        sync.Mutex   // one check at a time; guards the sigs
	certSig   fileSig      // the files as last loaded or tried
	keySig    fileSig
}

// get is the GetCertificate of the config.
func (r *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if now := time.Now(); now.UnixNano() >= r.nextCheck.Load() && r.mu.TryLock() {
		r.nextCheck.Store(now.Add(r.every).UnixNano())
		r.check()
		r.mu.Unlock()
	}
	return r.cert.Load(), nil
}

// check loads the pair again when either file changed since the last try; the
// caller holds r.mu.
func (r *certReloader) check() {
	cs, ks := statSig(r.certFile), statSig(r.keyFile)
	if cs.same(r.certSig) && ks.same(r.keySig) {
		return
	}
	if err := r.load(); err != nil {
		r.log.Error().Err(err).Msg("TLS certificate not reloaded: the previous one is still served")
	}
}

// load reads the pair and serves it. The stats come first, so a change during
// the read is seen by the next check.
func (r *certReloader) load() error {
	r.certSig, r.keySig = statSig(r.certFile), statSig(r.keyFile)
	pair, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("TLS certificate %s with key %s: %w", r.certFile, r.keyFile, err)
	}
	r.cert.Store(&pair)
	ev := r.log.Info()
	if pair.Leaf != nil {
		if time.Now().After(pair.Leaf.NotAfter) {
			ev = r.log.Warn().Bool("expired", true)
		}
		ev = ev.Str("subject", pair.Leaf.Subject.String()).Time("not_after", pair.Leaf.NotAfter)
	}
	ev.Str("cert_file", r.certFile).Msg("TLS certificate loaded")
	return nil
}
