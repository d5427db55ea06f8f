package lock_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/lock/locktest"
)

// Serve Healthy on a readiness endpoint with a short deadline, and point a
// Kubernetes readinessProbe (httpGet, path /readyz, periodSeconds 5,
// timeoutSeconds 2) at it. A pod that must not serve without its lock
// should watch its lease's Done channel instead.
func ExampleHealthChecker() {
	var locker lock.Locker = locktest.NewMemory().NewLocker("worker-1")
	defer locker.Close()

	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		defer cancel()
		if err := locker.(lock.HealthChecker).Healthy(ctx); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})

	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	fmt.Print(rec.Code, " ", rec.Body.String())
	// Output: 200 ok
}
