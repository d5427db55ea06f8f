package httpfence_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/fencing/httpfence"
	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/lock/locktest"
)

// A server fences writes per URL path; a client sends them with the token
// of its lease. After the lease is lost, the client refuses to send, and a
// request that left earlier with the old token is refused by the server.
func Example() {
	ctx := context.Background()
	config := ""
	h, err := httpfence.Handler(&fencing.Guard{},
		func(r *http.Request) string { return r.URL.Path },
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			config = string(b) // runs inside the guard's critical section
		}))
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	base := &http.Transport{}
	defer base.CloseIdleConnections()

	m := locktest.NewMemory()
	a, b := m.NewLocker("a"), m.NewLocker("b")
	defer a.Close()
	defer b.Close()
	leaseA, _ := a.Acquire(ctx, "config")
	clientA := &http.Client{Transport: &httpfence.Transport{Lease: leaseA, Base: base}}
	show := func(resp *http.Response, err error) {
		if err != nil {
			fmt.Println("not sent, lease lost:", errors.Is(err, lock.ErrLost))
			return
		}
		defer resp.Body.Close()
		msg, _ := io.ReadAll(resp.Body)
		fmt.Println(strings.TrimSpace(fmt.Sprint(resp.StatusCode, " ", string(msg))))
	}
	show(clientA.Post(srv.URL+"/config", "text/plain", strings.NewReader("v1")))

	m.ExpireSession(a) // A is partitioned away and loses the lock
	leaseB, _ := b.Acquire(ctx, "config")
	clientB := &http.Client{Transport: &httpfence.Transport{Lease: leaseB, Base: base}}
	show(clientB.Post(srv.URL+"/config", "text/plain", strings.NewReader("v2")))
	show(clientA.Post(srv.URL+"/config", "text/plain", strings.NewReader("v3 from A")))

	// A request that A sent with its token before the loss, arriving only
	// now:
	late, _ := http.NewRequest(http.MethodPost, srv.URL+"/config", strings.NewReader("v3 from A"))
	late.Header.Set(httpfence.Header, leaseA.Token().String())
	show((&http.Client{Transport: base}).Do(late))
	fmt.Println(config)
	// Output:
	// 200
	// 200
	// not sent, lease lost: true
	// 409 {"error":"stale_token","resource":"/config","token":1,"highest":2}
	// v2
}
