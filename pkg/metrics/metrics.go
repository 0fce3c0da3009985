// Package metrics holds Pinion's Prometheus metrics, defined once here so
// every process exposes the same names, and the admin HTTP server that
// serves them (PINION_ADMIN_ADDR) beside pprof-free health endpoints.
package metrics

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Registry holds every Pinion metric (and the Go runtime's).
var Registry = prometheus.NewRegistry()

var (
	// HTTPRequests counts gateway answers by route and status.
	HTTPRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pinion_http_requests_total", Help: "HTTP requests answered by the gateway.",
	}, []string{"route", "method", "status"})
	// HTTPDuration is the gateway's latency by route.
	HTTPDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "pinion_http_request_duration_seconds", Help: "Gateway request latency.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
	}, []string{"route", "method"})
	// BusDuration is the latency of one NATS request/reply by subject.
	BusDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "pinion_bus_request_duration_seconds", Help: "NATS request/reply latency by subject.",
		Buckets: []float64{.0002, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 5, 30},
	}, []string{"subject", "result"})
	// BusOverload counts requests a service refused because it was at its
	// in-flight bound.
	BusOverload = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pinion_bus_overload_total", Help: "Requests answered 503 because the service was at capacity.",
	}, []string{"subject"})
	// SagaSteps counts saga steps by step and result (done, retry, failed).
	SagaSteps = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pinion_saga_steps_total", Help: "Saga steps handled.",
	}, []string{"step", "result"})
	// BotExecutions counts bot runs by outcome (ok, error).
	BotExecutions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pinion_bot_executions_total", Help: "Bot executions.",
	}, []string{"outcome"})
	// BotDuration is the time spent running bots.
	BotDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "pinion_bot_execution_duration_seconds", Help: "Bot execution time.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 60},
	})
	// SubscriptionDeliveries counts subscription delivery attempts by
	// channel (bot, rest-hook) and result (ok, retry, dead).
	SubscriptionDeliveries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pinion_subscription_deliveries_total", Help: "Subscription delivery attempts.",
	}, []string{"channel", "result"})
	// SubscriptionLatency is the time from a change's commit to the start
	// of its delivery (the bot's run, the rest-hook's request).
	SubscriptionLatency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "pinion_subscription_latency_seconds", Help: "Commit to delivery start.",
		Buckets: []float64{.0005, .001, .0015, .002, .003, .004, .005, .0075, .01, .015, .02, .03, .05, .075, .1, .25, .5, 1, 5, 30, 300},
	})
	// AuditSinkQueue is each audit sink's queue: the messages of the audit
	// stream its consumer has not had acknowledged (each carries one or
	// more events of one project), sampled every few seconds.
	AuditSinkQueue = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "pinion_audit_sink_queue_messages", Help: "Audit stream messages an audit sink has yet to deliver.",
	}, []string{"sink"})
	// AuditSinkDelivered counts the AuditEvents each sink delivered (again
	// after a failure, at least once).
	AuditSinkDelivered = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pinion_audit_sink_delivered_events_total", Help: "AuditEvents an audit sink delivered.",
	}, []string{"sink"})
	// AuditSinkFailures counts failed delivery attempts, each retried.
	AuditSinkFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pinion_audit_sink_failed_attempts_total", Help: "Failed audit sink delivery attempts (each retried).",
	}, []string{"sink"})
)

func init() {
	Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		HTTPRequests, HTTPDuration, BusDuration, BusOverload, SagaSteps, BotExecutions, BotDuration,
		SubscriptionDeliveries, SubscriptionLatency, AuditSinkQueue, AuditSinkDelivered, AuditSinkFailures)
}

// Since observes the seconds since t on a histogram.
func Since(h prometheus.Observer, t time.Time) { h.Observe(time.Since(t).Seconds()) }

// Serve runs the admin server (/metrics, /livez) on addr until ctx ends.
// An empty addr serves nothing.
func Serve(ctx context.Context, addr string, log *slog.Logger) error {
	if addr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`{"ok":true}`)) })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("admin server", "err", err)
		}
	}()
	return nil
}
