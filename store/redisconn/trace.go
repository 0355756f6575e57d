package redisconn

import (
	"context"

	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
)

// Trace makes every command rdb sends (a script call is one EVALSHA) a client
// span of tp, the child of the span in the command's context, so that a
// request's span holds its Redis calls. A script's span is named after the
// operation ("evalsha acquire"). Commands are recorded by name only: their
// arguments carry lock names, SHA-256s of lease, ticket and session ids, and
// owner labels, which go-redis's redisotel would record as db.statement.
// Errors: redisotel's, for a client type it cannot instrument.
func Trace(rdb redis.UniversalClient, tp trace.TracerProvider) error {
	err := redisotel.InstrumentTracing(rdb, redisotel.WithTracerProvider(tp),
		redisotel.WithDBStatement(false), redisotel.WithCallerEnabled(false))
	if err == nil {
		rdb.AddHook(scriptNames{}) // after redisotel's: runs inside its span
	}
	return err
}

// opKey carries the store operation of a script call (WithOp).
type opKey struct{}

// WithOp marks ctx as that of a call for the store operation op: a traced
// command sent with it has its span named after op.
func WithOp(ctx context.Context, op string) context.Context {
	return context.WithValue(ctx, opKey{}, op)
}

// scriptNames names the span of each script call after its operation.
type scriptNames struct{}

func (scriptNames) DialHook(next redis.DialHook) redis.DialHook { return next }

func (scriptNames) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if op, ok := ctx.Value(opKey{}).(string); ok {
			trace.SpanFromContext(ctx).SetName(cmd.Name() + " " + op)
		}
		return next(ctx, cmd)
	}
}

func (scriptNames) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if op, ok := ctx.Value(opKey{}).(string); ok {
			trace.SpanFromContext(ctx).SetName("redis.pipeline " + op)
		}
		return next(ctx, cmds)
	}
}
