package open

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/tracing"
)

// tracingShutdownTimeout bounds the export of the spans still queued when
// the agent closes; it is past the drain (the lifecycle action is
// completed by then), and nothing waits for a collector longer.
const tracingShutdownTimeout = 5 * time.Second

// Tracing installs the tracer provider that the tracing section and
// the OTEL_* environment (read through lookup, which also reads the
// headers secret) describe, its metrics on reg at 0 whether on or off,
// and returns the func that flushes and stops it.
func Tracing(ctx context.Context, cfg config.Config, lookup func(string) (string, bool), reg prometheus.Registerer, log *slog.Logger,
	version, instanceID, region, asg string) (func(), error) {
	m := tracing.NewMetrics(reg)
	if lookup == nil {
		lookup = func(string) (string, bool) { return "", false }
	}
	s, err := tracing.Resolve(cfg.Tracing, lookup, lookup)
	if err != nil {
		return nil, err
	}
	if err := s.CheckSelf(cfg.AdminAddr); err != nil {
		return nil, err
	}
	res := []attribute.KeyValue{attribute.String("service.version", version)}
	if instanceID != "" {
		res = append(res, attribute.String("service.instance.id", instanceID), attribute.String("host.id", instanceID))
	}
	if region != "" {
		res = append(res, attribute.String("cloud.provider", "aws"), attribute.String("cloud.platform", "aws_ec2"),
			attribute.String("cloud.region", region))
	}
	if asg != "" {
		res = append(res, attribute.String("aws.autoscaling.group.name", asg))
	}
	t := tracing.Setup(tracing.Options{Settings: s, Resource: res, Metrics: m, Logger: log.With("component", "tracing")})
	return func() {
		// Closing runs after ctx may have ended; it keeps ctx's values only.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tracingShutdownTimeout)
		defer cancel()
		if err := t.Shutdown(sctx); err != nil {
			log.Warn("tracing: spans still queued at exit were dropped", "err", err)
		}
	}, nil
}

// TracingError is a tracing setting from the environment or the headers
// secret that cannot work: a configuration problem.
type TracingError struct{ Err error }

func (e *TracingError) Error() string { return "tracing: " + e.Err.Error() }

func (e *TracingError) Unwrap() error { return e.Err }

// ListenerTracing installs tracing for the standalone alert listener
// (`autodiag intake`), its metrics on reg (the listener's registry); the returned func
// flushes and stops it. The listener's spans (the request, a send per task)
// carry service.version and instance_id when the config sets it.
func ListenerTracing(ctx context.Context, cfg config.Config, o Options, lookup func(string) (string, bool),
	reg prometheus.Registerer) (func(), error) {
	stop, err := Tracing(ctx, cfg, lookup, reg, orDiscard(o.Logger), o.Version, cfg.InstanceID, "", "")
	if err != nil {
		return nil, &TracingError{Err: err}
	}
	return stop, nil
}
