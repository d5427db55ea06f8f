package httpfence_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/fencing/httpfence"
	"github.com/fencelock/fencelock/internal/leakcheck"
	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/lock/locktest"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// register is the protected resource: the server keeps, per path, the
// tokens of the writes it applied, in order.
type register struct {
	mu      sync.Mutex
	applied map[string][]fencing.Token
}

func (reg *register) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// The middleware admitted the token; read it back to log it.
	tok, err := httpfence.TokenFromRequest(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	reg.mu.Lock()
	reg.applied[r.URL.Path] = append(reg.applied[r.URL.Path], tok)
	reg.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (reg *register) tokens(path string) []fencing.Token {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	return append([]fencing.Token(nil), reg.applied[path]...)
}

// newServer starts an httptest server whose handler fences next per URL
// path, and returns it with a client whose connections are closed at the
// end of the test.
func newServer(t *testing.T, next http.Handler) (*httptest.Server, *http.Transport) {
	t.Helper()
	return newServerWrapped(t, next, func(h http.Handler) http.Handler { return h })
}

// newServerWrapped is newServer with outer wrapped around the fencing
// handler.
func newServerWrapped(t *testing.T, next http.Handler, outer func(http.Handler) http.Handler) (*httptest.Server, *http.Transport) {
	t.Helper()
	h, err := httpfence.Handler(&fencing.Guard{}, func(r *http.Request) string { return r.URL.Path }, next)
	if err != nil {
		t.Fatalf("Handler() = %v", err)
	}
	srv := httptest.NewServer(outer(h))
	base := &http.Transport{}
	t.Cleanup(func() {
		base.CloseIdleConnections()
		srv.Close()
	})
	return srv, base
}

// send sends a PUT with the given Fencing-Token header values and returns
// the status and the decoded body (zero for an empty body).
func send(t *testing.T, c *http.Client, url string, tokens ...string) (int, httpfence.ErrorBody) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, url, strings.NewReader("v"))
	if err != nil {
		t.Fatalf("NewRequest() = %v", err)
	}
	for _, tok := range tokens {
		req.Header.Add(httpfence.Header, tok)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("PUT %s = %v", url, err)
	}
	return decode(t, resp)
}

func decode(t *testing.T, resp *http.Response) (int, httpfence.ErrorBody) {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	var body httpfence.ErrorBody
	if len(b) > 0 {
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type = %q; want application/json", ct)
		}
		if err := json.Unmarshal(b, &body); err != nil {
			t.Fatalf("decode body %q: %v", b, err)
		}
	}
	return resp.StatusCode, body
}

func TestHandlerStatus(t *testing.T) {
	reg := &register{applied: map[string][]fencing.Token{}}
	srv, base := newServer(t, reg)
	c := &http.Client{Transport: base}
	steps := []struct {
		name    string
		path    string
		tokens  []string
		status  int
		errCode string
		highest fencing.Token
	}{
		{"first write", "/a", []string{"7"}, http.StatusNoContent, "", 0},
		{"equal token", "/a", []string{"7"}, http.StatusNoContent, "", 0},
		{"higher token", "/a", []string{"8"}, http.StatusNoContent, "", 0},
		{"stale token", "/a", []string{"7"}, http.StatusConflict, "stale_token", 8},
		{"other resource", "/b", []string{"3"}, http.StatusNoContent, "", 0},
		{"missing", "/a", nil, http.StatusBadRequest, "missing_token", 0},
		{"zero", "/a", []string{"0"}, http.StatusBadRequest, "invalid_token", 0},
		{"negative", "/a", []string{"-8"}, http.StatusBadRequest, "invalid_token", 0},
		{"not a number", "/a", []string{"abc"}, http.StatusBadRequest, "invalid_token", 0},
		{"plus sign", "/a", []string{"+9"}, http.StatusBadRequest, "invalid_token", 0},
		{"overflow", "/a", []string{"18446744073709551616"}, http.StatusBadRequest, "invalid_token", 0},
		{"empty", "/a", []string{""}, http.StatusBadRequest, "invalid_token", 0},
		{"repeated", "/a", []string{"9", "9"}, http.StatusBadRequest, "invalid_token", 0},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			status, body := send(t, c, srv.URL+s.path, s.tokens...)
			if status != s.status {
				t.Fatalf("PUT %s %v: status %d; want %d (body %+v)", s.path, s.tokens, status, s.status, body)
			}
			if body.Error != s.errCode {
				t.Errorf("PUT %s %v: error %q; want %q", s.path, s.tokens, body.Error, s.errCode)
			}
			if s.errCode == "stale_token" {
				tok, _ := strconv.ParseUint(s.tokens[0], 10, 64)
				want := httpfence.ErrorBody{Error: "stale_token", Resource: s.path, Token: fencing.Token(tok), Highest: s.highest}
				if body != want {
					t.Errorf("PUT %s %v: body %+v; want %+v", s.path, s.tokens, body, want)
				}
			}
			if strings.HasSuffix(body.Error, "_token") && s.errCode != "stale_token" && body.Detail == "" {
				t.Errorf("PUT %s %v: body %+v; want a detail", s.path, s.tokens, body)
			}
		})
	}
	if got, want := fmt.Sprint(reg.tokens("/a")), "[7 7 8]"; got != want {
		t.Errorf("applied /a = %s; want %s", got, want)
	}
}

// waitingOnGuard reports whether some goroutine is blocked acquiring a
// fencing.Guard's per-resource lock inside Apply. The only way to know
// that a request is queued at the critical section, rather than merely on
// its way to it, is to look at where its goroutine is parked.
func waitingOnGuard() bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "[sync.Mutex.Lock") && strings.Contains(g, "fencing.(*Guard).Apply(") {
			return true
		}
	}
	return false
}

// TestHandlerRunsInsideCriticalSection holds the handler of a request with
// token 7 open inside the Guard's critical section, sends token 8
// meanwhile, and lets 7 finish only once 8 is parked on the Guard's lock
// for the same resource (seen in its goroutine's stack, after the fencing
// handler itself reported 8's arrival by asking for its resource). 8's
// handler must not have started before 7's finished; afterwards 7 is
// stale.
func TestHandlerRunsInsideCriticalSection(t *testing.T) {
	var (
		mu    sync.Mutex
		order []string
	)
	entered7, release7 := make(chan struct{}), make(chan struct{})
	started8 := make(chan struct{})
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := r.Header.Get(httpfence.Header)
		mu.Lock()
		order = append(order, "start "+tok)
		mu.Unlock()
		if tok == "8" {
			close(started8)
		}
		if tok == "7" && r.URL.Query().Get("hold") != "" {
			close(entered7)
			<-release7
		}
		mu.Lock()
		order = append(order, "end "+tok)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	// The fencing handler asks for the resource once it has read the
	// token, right before it enters the Guard.
	arrived8 := make(chan struct{})
	resourceOf := func(r *http.Request) string {
		if r.Header.Get(httpfence.Header) == "8" {
			close(arrived8)
		}
		return r.URL.Path
	}
	h, err := httpfence.Handler(&fencing.Guard{}, resourceOf, next)
	if err != nil {
		t.Fatalf("Handler() = %v", err)
	}
	srv := httptest.NewServer(h)
	base := &http.Transport{}
	t.Cleanup(func() {
		base.CloseIdleConnections()
		srv.Close()
	})
	c := &http.Client{Transport: base}
	put := func(url, tok string, done chan<- int) {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPut, url, nil)
		req.Header.Set(httpfence.Header, tok)
		resp, err := c.Do(req)
		if err != nil {
			done <- -1
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}

	done7 := make(chan int, 1)
	go put(srv.URL+"/r?hold=1", "7", done7)
	<-entered7
	done8 := make(chan int, 1)
	go put(srv.URL+"/r", "8", done8)
	<-arrived8
	// 8 is in the fencing handler. It must now wait on the Guard, not
	// run: poll until its goroutine is parked on the lock, failing if
	// its handler starts meanwhile.
	deadline := time.After(10 * time.Second)
	for parked := false; !parked; {
		select {
		case <-started8:
			close(release7)
			<-done7
			<-done8
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("handler order = %s: token 8's handler started while token 7's was still running; want 8 to wait for 7", strings.Join(order, ", "))
		case <-deadline:
			close(release7)
			<-done7
			<-done8
			t.Fatal("token 8 never waited on the Guard's lock within 10s")
		default:
		}
		if parked = waitingOnGuard(); !parked {
			time.Sleep(time.Millisecond)
		}
	}
	close(release7)
	if s := <-done7; s != http.StatusNoContent {
		t.Fatalf("token 7 (held): status %d; want 204", s)
	}
	if s := <-done8; s != http.StatusNoContent {
		t.Fatalf("token 8: status %d; want 204", s)
	}
	mu.Lock()
	got := strings.Join(order, ", ")
	mu.Unlock()
	if want := "start 7, end 7, start 8, end 8"; got != want {
		t.Errorf("handler order = %s; want %s", got, want)
	}
	if status, body := send(t, c, srv.URL+"/r", "7"); status != http.StatusConflict || body.Highest != 8 {
		t.Errorf("late token 7: %d %+v; want 409 with highest 8", status, body)
	}
}

// TestHandlerConcurrent sends requests with rising and stale tokens from
// many clients at once and checks that the server applied them in
// non-decreasing token order, answering 409 for every other one.
func TestHandlerConcurrent(t *testing.T) {
	reg := &register{applied: map[string][]fencing.Token{}}
	srv, base := newServer(t, reg)
	c := &http.Client{Transport: base}
	const clients, perClient = 8, 40
	var grants sync.Mutex
	next := fencing.Token(0)
	var wg sync.WaitGroup
	var ok, conflict, other sync.Map
	for i := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 3))
			var mine fencing.Token
			for j := range perClient {
				if mine == 0 || rng.IntN(3) == 0 {
					grants.Lock()
					next++
					mine = next
					grants.Unlock()
				}
				req, _ := http.NewRequestWithContext(t.Context(), http.MethodPut, srv.URL+"/reg", nil)
				req.Header.Set(httpfence.Header, mine.String())
				resp, err := c.Do(req)
				key := fmt.Sprint(i, "/", j)
				if err != nil {
					other.Store(key, err.Error())
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusNoContent:
					ok.Store(key, true)
				case http.StatusConflict:
					conflict.Store(key, true)
				default:
					other.Store(key, resp.Status)
				}
			}
		})
	}
	wg.Wait()
	other.Range(func(k, v any) bool { t.Errorf("request %v: %v; want 204 or 409", k, v); return true })
	count := func(m *sync.Map) (n int) { m.Range(func(any, any) bool { n++; return true }); return n }
	got := reg.tokens("/reg")
	for i := 1; i < len(got); i++ {
		if got[i] < got[i-1] {
			t.Fatalf("applied token %d after %d; want non-decreasing", got[i], got[i-1])
		}
	}
	if n := count(&ok); n != len(got) || n == 0 {
		t.Errorf("204 responses = %d, applied writes = %d; want equal and nonzero", n, len(got))
	}
	if count(&conflict) == 0 {
		t.Error("no 409 responses; want some stale requests")
	}
}

// pausingTransport holds a request that is already on its way (its token
// attached) until released: a client paused between its last look at the
// lease and the moment the request reaches the server.
type pausingTransport struct {
	base    http.RoundTripper
	paused  chan struct{}
	release chan struct{}
}

func (p *pausingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	close(p.paused)
	<-p.release
	return p.base.RoundTrip(req)
}

// TestTransportEndToEnd uses real leases of the in-memory Locker: A's
// request leaves with A's token and is paused; A's session expires; B
// acquires and writes; A's request then arrives and gets 409 naming B's
// token; and A's transport refuses to send anything more.
func TestTransportEndToEnd(t *testing.T) {
	reg := &register{applied: map[string][]fencing.Token{}}
	srv, base := newServer(t, reg)
	ctx := t.Context()
	m := locktest.NewMemory()
	la, lb := m.NewLocker("A"), m.NewLocker("B")
	t.Cleanup(func() { la.Close(); lb.Close() })
	leaseA, err := la.Acquire(ctx, "reg")
	if err != nil {
		t.Fatalf("A: Acquire() = %v", err)
	}

	pause := &pausingTransport{base: base, paused: make(chan struct{}), release: make(chan struct{})}
	clientA := &http.Client{Transport: &httpfence.Transport{Lease: leaseA, Base: pause}}
	doneA := make(chan *http.Response, 1)
	errA := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL+"/reg", nil)
		resp, err := clientA.Do(req)
		errA <- err
		doneA <- resp
	}()
	<-pause.paused

	m.ExpireSession(la)
	<-leaseA.Done()
	leaseB, err := lb.Acquire(ctx, "reg")
	if err != nil {
		t.Fatalf("B: Acquire() = %v", err)
	}
	clientB := &http.Client{Transport: &httpfence.Transport{Lease: leaseB, Base: base}}
	if status, body := send(t, clientB, srv.URL+"/reg"); status != http.StatusNoContent {
		t.Fatalf("B: status %d %+v; want 204", status, body)
	}

	close(pause.release)
	if err := <-errA; err != nil {
		t.Fatalf("A: paused request = %v; want a response", err)
	}
	status, body := decode(t, <-doneA)
	want := httpfence.ErrorBody{Error: "stale_token", Resource: "/reg", Token: leaseA.Token(), Highest: leaseB.Token()}
	if status != http.StatusConflict || body != want {
		t.Fatalf("A: paused request: %d %+v; want 409 %+v", status, body, want)
	}
	if got := reg.tokens("/reg"); len(got) != 1 || got[0] != leaseB.Token() {
		t.Errorf("applied = %v; want only B's token %d", got, leaseB.Token())
	}

	// A's lease is gone: its transport sends nothing now.
	clientA.Transport.(*httpfence.Transport).Base = base
	body2 := &trackingBody{Reader: strings.NewReader("x")}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL+"/reg", body2)
	if _, err := clientA.Do(req); !errors.Is(err, lock.ErrLost) {
		t.Errorf("A: Do() after loss = %v; want ErrLost", err)
	}
	if !body2.closed {
		t.Error("A: request body not closed by the refusing transport")
	}
	// Released leases are refused too.
	if err := leaseB.Release(ctx); err != nil {
		t.Fatalf("B: Release() = %v", err)
	}
	req, _ = http.NewRequestWithContext(ctx, http.MethodPut, srv.URL+"/reg", nil)
	if _, err := clientB.Do(req); !errors.Is(err, lock.ErrReleased) {
		t.Errorf("B: Do() after Release = %v; want ErrReleased", err)
	}
	if got := reg.tokens("/reg"); len(got) != 1 {
		t.Errorf("applied = %v; want one write (refused requests never arrive)", got)
	}
}

type trackingBody struct {
	io.Reader
	closed bool
}

func (b *trackingBody) Close() error { b.closed = true; return nil }

func TestBadConfig(t *testing.T) {
	ok := http.NotFoundHandler()
	res := func(*http.Request) string { return "" }
	for _, tc := range []struct {
		name string
		g    *fencing.Guard
		res  func(*http.Request) string
		next http.Handler
	}{
		{"nil guard", nil, res, ok},
		{"nil resource", &fencing.Guard{}, nil, ok},
		{"nil next", &fencing.Guard{}, res, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if h, err := httpfence.Handler(tc.g, tc.res, tc.next); !errors.Is(err, fencing.ErrInvalidConfig) || h != nil {
				t.Errorf("Handler() = %v, %v; want nil, ErrInvalidConfig", h, err)
			}
		})
	}
	t.Run("transport without lease", func(t *testing.T) {
		body := &trackingBody{Reader: strings.NewReader("x")}
		req := httptest.NewRequest(http.MethodPut, "http://127.0.0.1/", body)
		if _, err := (&httpfence.Transport{}).RoundTrip(req); !errors.Is(err, fencing.ErrInvalidConfig) {
			t.Errorf("RoundTrip() = %v; want ErrInvalidConfig", err)
		}
		if !body.closed {
			t.Error("request body not closed")
		}
	})
}

func TestWriteErrorInternal(t *testing.T) {
	rec := httptest.NewRecorder()
	httpfence.WriteError(rec, errors.New("db password is hunter2"))
	status, body := decode(t, rec.Result())
	if status != http.StatusInternalServerError || body != (httpfence.ErrorBody{Error: "internal_error"}) {
		t.Errorf("WriteError(other) = %d %+v; want 500 {internal_error} without details", status, body)
	}
}
