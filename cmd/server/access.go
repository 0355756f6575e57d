package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/rs/zerolog"

	"github.com/batonhq/baton/auth"
	"github.com/batonhq/baton/metrics"
)

// startAccess builds access control and TLS from the configuration: the Guard
// (protected, keys or off mode; a bad keys file is fatal here), reloaded on
// SIGHUP and when the file changes until ctx ends, and the TLS configuration
// when certificate files are set (nil otherwise).
func startAccess(ctx context.Context, cfg Config, log zerolog.Logger, met *metrics.Metrics) (*auth.Guard, *tls.Config, error) {
	g, err := auth.NewGuard(auth.Config{File: cfg.AuthFile, Auth: cfg.Auth, Logger: log, ReloadErrors: met.AuthReloadErrors,
		KeyMaxWaiters: cfg.keyMaxWaiters(), KeyCaps: cfg.keyCaps(), BuiltinCaps: cfg.builtinCaps()})
	if err != nil {
		return nil, nil, fmt.Errorf("access control: %w", err)
	}
	files := auth.TLSFiles{CertFile: cfg.TLSCertFile, KeyFile: cfg.TLSKeyFile, ClientCAFile: cfg.TLSClientCAFile}
	var tlsCfg *tls.Config
	if files.Enabled() {
		if tlsCfg, err = auth.NewTLSConfig(files, log); err != nil {
			return nil, nil, fmt.Errorf("TLS: %w", err)
		}
	}
	if g.Mode() == auth.ModeKeys {
		go g.Watch(ctx, 0)
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		go func() {
			defer signal.Stop(hup)
			for {
				select {
				case <-ctx.Done():
					return
				case <-hup:
					_ = g.Reload() // a bad file is logged and counted; the old keys stay
				}
			}
		}()
	}
	return g, tlsCfg, nil
}
