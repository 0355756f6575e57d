// Command server runs Baton, the HTTP/JSON gateway to distributed locks in Redis.
// Configuration comes from BATON_* environment variables (see the README).
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/kelseyhightower/envconfig"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/handlers"
	"github.com/batonhq/baton/internal/embedded"
	"github.com/batonhq/baton/metrics"
	"github.com/batonhq/baton/store"
	"github.com/batonhq/baton/store/redisconn"
)

func main() {
	ctx, forced := shutdownSignals()
	if err := run(ctx, os.Stderr, forced); err != nil {
		fmt.Fprintln(os.Stderr, "baton:", err)
		os.Exit(1)
	}
}

// shutdownSignals returns a context that ends at the first SIGINT or SIGTERM,
// which starts the graceful shutdown, and a channel closed at the second, which
// cuts it short.
func shutdownSignals() (context.Context, <-chan struct{}) {
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithCancel(context.Background())
	forced := make(chan struct{})
	go func() {
		<-sig
		cancel()
		<-sig
		close(forced)
	}()
	return ctx, forced
}

// errForced ends a shutdown cut short by a second signal.
var errForced = errors.New("second signal: exited at once, requests in flight were cut off")

// run reads the configuration and serves until ctx ends. When forced is closed
// during the graceful shutdown, it returns errForced at once, without waiting
// for serve, whose requests and store calls end with the process.
func run(ctx context.Context, logOut io.Writer, forced <-chan struct{}) error {
	var cfg Config
	if err := envconfig.Process("baton", &cfg); err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	if err := cfg.validate(); err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	log, err := newLogger(cfg, logOut)
	if err != nil {
		return err
	}
	tp, stopTracing, err := startTracing(ctx)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	defer stopTracing()
	if tp != nil {
		cfg.tracer = tp
		log.Info().Str("exporter", cmp.Or(os.Getenv("OTEL_TRACES_EXPORTER"), "otlp")).Msg("tracing on (OTEL_* variables)")
	}
	served := make(chan error, 1)
	go func() { served <- serve(ctx, cfg, log, nil) }()
	select {
	case err := <-served:
		return err
	case <-forced:
		log.Error().Msg("second signal during the shutdown: exiting at once, requests in flight are cut off")
		return errForced
	}
}

func newLogger(cfg Config, out io.Writer) (zerolog.Logger, error) {
	level, err := zerolog.ParseLevel(cfg.LogLevel)
	if err != nil {
		return zerolog.Logger{}, fmt.Errorf("configuration: BATON_LOG_LEVEL: %w", err)
	}
	if cfg.LogFormat == "console" {
		out = zerolog.ConsoleWriter{Out: out, TimeFormat: time.RFC3339}
	}
	return zerolog.New(out).Level(level).With().Timestamp().Logger(), nil
}

// serve runs the server until ctx ends, then shuts down: /readyz turns 503 and
// long-polls are answered at once, new connections are still taken for
// ShutdownDelay (so load balancers see the 503), then in-flight requests get up
// to ShutdownTimeout to finish. listening, if set, is told the bound address.
func serve(ctx context.Context, cfg Config, log zerolog.Logger, listening func(net.Addr)) error {
	redis.SetLogger(redisLogger{log})
	url := cfg.RedisURL
	if url == "" {
		embedCtx, cancel := context.WithCancel(context.Background())
		defer cancel()
		emb, err := embedded.Start(embedCtx)
		if err != nil {
			return fmt.Errorf("embedded store: %w", err)
		}
		defer emb.Close()
		url = emb.URL() // carries the store's password: never logged
		log.Warn().Str("addr", emb.Addr()).Msg("BATON_REDIS_URL is empty: using the embedded in-process store. " +
			"It is for trying Baton out (one process, nothing kept), never for production: set BATON_REDIS_URL.")
	}
	rdb, gate, err := redisconn.NewGatedClient(url)
	if err != nil {
		return err
	}
	defer rdb.Close()
	if cfg.tracer != nil {
		if err := redisconn.Trace(rdb, cfg.tracer); err != nil {
			return fmt.Errorf("tracing: %w", err)
		}
	}
	met := metrics.New()
	met.WaitersMax.Set(float64(cfg.MaxWaiters))
	met.RedisDown(gate.Down)
	accessCtx, stopAccess := context.WithCancel(context.Background())
	defer stopAccess()
	guard, tlsCfg, err := startAccess(accessCtx, cfg, log, met)
	if err != nil {
		return err
	}
	st := store.New(rdb, store.Options{
		Prefix: cfg.KeyPrefix, TicketTTL: cfg.TicketTTL, MaxWaiters: cfg.MaxWaiters, Logger: log, Metrics: met,
		WaitReplicas: cfg.WaitReplicas, WaitTimeout: cfg.WaitTimeout, FenceGuard: cfg.FenceGuard,
		IdempotencyGrace: cfg.IdempotencyGrace, Secret: []byte(cfg.Secret), Gate: gate,
		MaxQueuedCalls: cfg.MaxQueuedCalls, MaxQueueWait: cfg.MaxQueueWait,
	})
	defer st.Close()
	if err := st.Ready(ctx); err != nil {
		log.Warn().Err(err).Msg("redis is not ready yet; serving 503 until it is")
	}
	if cfg.RedisURL != "" {
		go warnEviction(ctx, rdb, log)
	}

	raw, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	ln := limitConns(raw, cfg.maxConns(), met, log)
	warnLimits(cfg, log)
	srv := &http.Server{
		TLSConfig:         tlsCfg,
		ReadHeaderTimeout: 10 * time.Second,
		WriteTimeout:      cfg.writeTimeout(),
		IdleTimeout:       2 * time.Minute,
	}
	lot := startLot(cfg, srv, log)
	defer lot.Close()
	draining := make(chan struct{})
	srv.Handler = handlers.NewServer(handlers.Deps{
		Store: st,
		Limits: handlers.Limits{DefaultTTL: cfg.DefaultTTL, MinTTL: cfg.MinTTL, MaxTTL: cfg.MaxTTL, MaxWait: cfg.MaxWait,
			BodyReadTimeout: cfg.BodyReadTimeout},
		Logger:   log,
		Metrics:  met,
		Spec:     api.Spec,
		Guard:    guard,
		Tracer:   cfg.tracer,
		Lot:      lot,
		Draining: draining,
	})
	if lot != nil {
		srv.Handler, srv.ConnContext = lot.Handler(srv.Handler), lot.ConnContext
	}
	if cfg.DebugAddr != "" {
		dbg, at, err := startDebug(cfg.DebugAddr, cfg.DebugAllowRemote)
		if err != nil {
			ln.Close()
			return fmt.Errorf("BATON_DEBUG_ADDR: %w", err)
		}
		defer dbg.Close()
		log.Info().Str("addr", at.String()).Msg("debug listening")
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(listener(ln, srv, lot)) }()
	log.Info().Str("addr", ln.Addr().String()).Bool("tls", tlsCfg != nil).Str("auth", guard.Mode().String()).Msg("listening")
	if listening != nil {
		listening(ln.Addr())
	}

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	log.Info().Msg("shutting down: readiness off, long-polls answered")
	close(draining)
	st.Shutdown()
	time.Sleep(cfg.ShutdownDelay) // keep answering (readyz 503) while load balancers notice
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if lot != nil {
		_ = lot.Shutdown(sctx) // the parked answers, within the same time; the rest are cut off
	}
	log.Info().Msg("stopped")
	return nil
}

// warnLimits logs the limits that undercut each other: every long-poll holds
// a connection, and every connection a descriptor.
func warnLimits(cfg Config, log zerolog.Logger) {
	conns := cfg.maxConns()
	if conns < cfg.MaxWaiters {
		log.Warn().Int("max_conns", conns).Int("max_waiters", cfg.MaxWaiters).
			Msg("BATON_MAX_CONNS is below BATON_MAX_WAITERS: every long-poll holds a connection, so fewer can wait than BATON_MAX_WAITERS says")
	}
	if n, ok := openFileLimit(); ok && uint64(conns) >= n {
		log.Warn().Int("max_conns", conns).Uint64("open_files", n).
			Msg("BATON_MAX_CONNS is not below the open-file limit: a flood of connections can leave no descriptor for Redis")
	}
}

// redisLogger sends go-redis's own messages to the structured log.
type redisLogger struct{ log zerolog.Logger }

func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	l.log.Warn().Str("component", "go-redis").Msgf(format, v...)
}
