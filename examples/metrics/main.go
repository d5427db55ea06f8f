// Command metrics runs a small fenced workload and serves its metrics to
// Prometheus, through the OpenTelemetry SDK and its Prometheus exporter.
//
//	metrics --url etcd://127.0.0.1:2379/myapp --metrics-addr 127.0.0.1:9464
//
// Two workers take turns on one lock and write, with their fencing
// token, to a resource guarded by a fencing.Guard. Every --stuck-every-th
// grant, the worker holding it gets stuck: an operator (a second Locker)
// revokes its grant (lock.Revoker), the other worker takes over and
// writes, and then the stuck worker wakes up and tries its write with its
// old token, which the Guard refuses. So a run shows, on
// http://ADDR/metrics, what the dashboard next to this file draws:
// fencelock_acquire_duration_seconds (wait time),
// fencelock_hold_duration_seconds (hold time), fencelock_leases_lost_total
// (lost leases, by reason) and fencelock_fencing_decisions_total (fencing
// decisions, the rejections among them). Each event is also printed:
//
//	worker <n>: wrote <resource> with token <T>
//	worker <n>: stuck with token <T>; the operator revokes it
//	worker <n>: lost its lease (token <T>): <error>
//	worker <n>: stale write refused: <error>
//
// It runs until interrupted, or for --duration.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	_ "github.com/fencelock/fencelock/etcdlock"
	"github.com/fencelock/fencelock/examples/internal/exutil"
	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/lock"
	_ "github.com/fencelock/fencelock/zklock"
)

func main() {
	ctx, stop := exutil.SignalContext()
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "metrics:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("metrics", flag.ContinueOnError)
	urlFlag := fs.String("url", "", "lock backend URL (default $FENCELOCK_URL)")
	addr := fs.String("metrics-addr", "127.0.0.1:9464", "where to serve /metrics")
	name := fs.String("lock", "orders", "the lock the workers share")
	stuckEvery := fs.Int("stuck-every", 5, "every how many grants a worker gets stuck")
	hold := fs.Duration("hold", 50*time.Millisecond, "how long a worker holds the lock")
	duration := fs.Duration("duration", 0, "stop after this long (0: until interrupted)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	url, err := exutil.URL(*urlFlag)
	if err != nil {
		return err
	}
	if *stuckEvery < 1 || *hold <= 0 {
		return errors.New("--stuck-every and --hold must be positive")
	}
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}

	// The SDK with the Prometheus exporter as its reader, on a registry
	// of its own.
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer mp.Shutdown(context.Background())
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
		<-served
	}()
	fmt.Fprintf(stdout, "serving metrics on http://%s/metrics\n", ln.Addr())

	opts := []lock.OpenOption{lock.WithMeterProvider(mp), lock.WithLogger(slog.New(slog.DiscardHandler))}
	workers, err := lock.Open(ctx, url, opts...)
	if err != nil {
		return err
	}
	defer workers.Close()
	operator, err := lock.Open(ctx, url, opts...)
	if err != nil {
		return err
	}
	defer operator.Close()
	revoker, ok := operator.(lock.Revoker)
	if !ok {
		return fmt.Errorf("%T cannot revoke grants", operator)
	}
	guard, err := fencing.NewGuard(1024, fencing.WithMeterProvider(mp))
	if err != nil {
		return err
	}

	w := &workload{
		out: stdout, locker: workers, revoker: revoker, guard: guard,
		name: *name, stuckEvery: *stuckEvery, hold: *hold,
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for n := 1; n <= 2; n++ {
		wg.Go(func() { errs <- w.worker(ctx, n) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil && ctx.Err() == nil {
			return err
		}
	}
	return ctx.Err()
}

// workload is the two workers' shared state.
type workload struct {
	out        io.Writer
	locker     lock.Locker
	revoker    lock.Revoker
	guard      *fencing.Guard
	name       string
	stuckEvery int
	hold       time.Duration

	mu     sync.Mutex // serializes output and grants
	grants int
}

func (w *workload) say(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	fmt.Fprintf(w.out, format+"\n", args...)
}

// worker takes the lock, writes with its token and releases, until ctx
// ends; every stuckEvery-th grant it gets stuck instead.
func (w *workload) worker(ctx context.Context, n int) error {
	resource := w.name + "/data"
	for ctx.Err() == nil {
		le, err := w.locker.Acquire(ctx, w.name)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		w.mu.Lock()
		w.grants++
		stuck := w.grants%w.stuckEvery == 0
		w.mu.Unlock()
		if stuck {
			w.getStuck(ctx, n, le, resource)
			continue
		}
		if err := w.guard.Apply(resource, le.Token(), func() error { return nil }); err != nil {
			w.say("worker %d: write refused: %v", n, err)
		} else {
			w.say("worker %d: wrote %s with token %d", n, resource, le.Token())
		}
		select {
		case <-time.After(w.hold):
		case <-ctx.Done():
		}
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = le.Release(rctx)
		cancel()
		if err != nil && !errors.Is(err, lock.ErrLost) {
			return err
		}
	}
	return nil
}

// getStuck plays a holder that stops answering: an operator revokes its
// grant, the other worker takes over and writes, and only then does this
// one try its write, with its old token.
func (w *workload) getStuck(ctx context.Context, n int, le lock.Lease, resource string) {
	w.say("worker %d: stuck with token %d; the operator revokes it", n, le.Token())
	if err := w.revoker.Revoke(ctx, w.name, le.Token()); err != nil {
		w.say("worker %d: revoke failed: %v", n, err)
	}
	select {
	case <-le.Done():
		w.say("worker %d: lost its lease (token %d): %v", n, le.Token(), le.Err())
	case <-ctx.Done():
		return
	}
	// Wait, as a paused process would, until the next holder has written.
	deadline := time.Now().Add(10 * time.Second)
	for w.guard.Highest(resource) <= le.Token() && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	if err := w.guard.Apply(resource, le.Token(), func() error { return nil }); err != nil {
		w.say("worker %d: stale write refused: %v", n, err)
	} else {
		w.say("worker %d: stale write accepted with token %d", n, le.Token())
	}
	rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = le.Release(rctx) // lost: cleans up what it can
	cancel()
}
