package faulttest

import (
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/fencing/httpfence"
)

// registerPath is the register's path. The multi workload's clients
// each name a set of their own below it, "/register/<name>", fenced as
// the resource "register/<name>"; the other workloads use the path
// itself, the resource "register".
const registerPath = "/register"

// regNode is one version of the register's set: its parent version plus
// one element. Versions form a tree, so that a write "the set of version
// base, plus op" costs O(1) whatever the set's size, and a write based on
// an old version really does drop what was added since.
type regNode struct {
	parent int
	elem   int64
	n      int
	sum    uint64
}

// serverEvent is one request the register answered, in the order it
// handled them (accepted requests in the order they were applied).
type serverEvent struct {
	T      int64 // since the run's start, on the shared monotonic clock
	Client int
	Name   string // the set's name in the multi workload, else ""
	Write  bool
	// Shared marks a reader's read (see sharedHeader).
	Shared bool
	Token  uint64
	Status int // 200 accepted, 409 stale, 400 bad token
	Op     int64
	Base   int // a write's base version
	Cur    int // the current version when a write was applied
	V      int // the version after the request
}

// register is the fenced register: a set of op ids (one per name in the
// multi workload) served over HTTP on 127.0.0.1. GET returns the current
// version, size and hash; POST ?base=V&op=X replaces the set by "the set
// of version V, plus X". With
// fencing on, httpfence.Handler runs both inside the Guard's critical
// section, so the token check and the read or write are one step; with
// fencing off (the control run) any token is accepted.
type register struct {
	start  int64
	fenced bool

	mu    sync.Mutex
	nodes []regNode
	cur   map[string]int // the current version of each name's set
	log   []serverEvent
	hooks map[int]func(serverEvent) bool
	hookN int
	holds map[int]time.Duration // per client, sent with its next answer

	srv *httptest.Server
}

// newRegister starts a register; it is closed in t.Cleanup.
func newRegister(t testing.TB, start int64, fenced bool) *register {
	t.Helper()
	r := &register{start: start, fenced: fenced, nodes: []regNode{{}}, cur: map[string]int{}}
	inner := http.HandlerFunc(r.serve)
	var h http.Handler = inner
	if fenced {
		var err error
		h, err = httpfence.Handler(&fencing.Guard{}, func(req *http.Request) string { return strings.TrimPrefix(req.URL.Path, "/") }, inner)
		if err != nil {
			t.Fatalf("httpfence.Handler() = %v", err)
		}
	}
	r.srv = httptest.NewServer(r.recordRefusals(h))
	t.Cleanup(r.srv.Close)
	return r
}

// URL returns the register's address.
func (r *register) URL() string { return r.srv.URL + registerPath }

// statusWriter remembers the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// recordRefusals logs the requests that h refused before they reached
// serve, which logs the accepted ones itself.
func (r *register) recordRefusals(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(sw, req)
		if sw.status == http.StatusOK {
			return
		}
		tok, _ := httpfence.TokenFromRequest(req)
		client, _ := strconv.Atoi(req.Header.Get(clientHeader))
		op, _ := strconv.ParseInt(req.URL.Query().Get("op"), 10, 64)
		r.mu.Lock()
		name := setName(req)
		r.log = append(r.log, serverEvent{
			T: monoNow() - r.start, Client: client, Name: name, Write: req.Method == http.MethodPost, Shared: req.Header.Get(sharedHeader) != "",
			Token: uint64(tok), Status: sw.status, Op: op, V: r.cur[name],
		})
		r.mu.Unlock()
	})
}

// serve applies an accepted request. With fencing on it runs inside the
// Guard's critical section.
func (r *register) serve(w http.ResponseWriter, req *http.Request) {
	tok, err := httpfence.TokenFromRequest(req)
	if err != nil {
		httpfence.WriteError(w, err)
		return
	}
	e, status, msg := parseRequest(req)
	if status != http.StatusOK {
		http.Error(w, msg, status)
		return
	}
	e.Token = uint64(tok)

	r.mu.Lock()
	if e.Write {
		if e.Base < 0 || e.Base >= len(r.nodes) {
			r.mu.Unlock()
			http.Error(w, "unknown base version", http.StatusBadRequest)
			return
		}
		b := r.nodes[e.Base]
		r.nodes = append(r.nodes, regNode{parent: e.Base, elem: e.Op, n: b.n + 1, sum: b.sum + elemHash(e.Op)})
		e.Cur = r.cur[e.Name]
		r.cur[e.Name] = len(r.nodes) - 1
	}
	cur := r.cur[e.Name]
	e.V = cur
	e.T = monoNow() - r.start
	st := registerState{Version: cur, N: r.nodes[cur].n, Sum: r.nodes[cur].sum}
	r.log = append(r.log, e)
	hooks := maps.Clone(r.hooks)
	r.mu.Unlock()
	defer func() {
		// After the hooks, which may have asked for a longer hold.
		r.mu.Lock()
		st.Hold = r.holds[e.Client]
		delete(r.holds, e.Client)
		r.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(st)
	}()

	// Hooks run before the answer is sent, still inside the critical
	// section: a client frozen or killed here is frozen or killed with
	// its request applied and its answer not yet received.
	for id, h := range hooks {
		if h(e) {
			r.mu.Lock()
			delete(r.hooks, id)
			r.mu.Unlock()
		}
	}
}

// parseRequest returns the log entry of an accepted request, without its
// token and times, or the status and message refusing it.
func parseRequest(req *http.Request) (serverEvent, int, string) {
	client, _ := strconv.Atoi(req.Header.Get(clientHeader))
	e := serverEvent{Client: client, Name: setName(req), Status: http.StatusOK}
	switch req.Method {
	case http.MethodGet:
		e.Shared = req.Header.Get(sharedHeader) != ""
	case http.MethodPost:
		base, err1 := strconv.Atoi(req.URL.Query().Get("base"))
		op, err2 := strconv.ParseInt(req.URL.Query().Get("op"), 10, 64)
		if err1 != nil || err2 != nil || op <= 0 {
			return e, http.StatusBadRequest, "bad base or op"
		}
		e.Write, e.Base, e.Op = true, base, op
	default:
		return e, http.StatusMethodNotAllowed, "method not allowed"
	}
	return e, http.StatusOK, ""
}

// onAccepted installs fn, called with every accepted request (in handling
// order, before its answer is sent) until it returns true.
func (r *register) onAccepted(fn func(serverEvent) bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.hooks == nil {
		r.hooks = map[int]func(serverEvent) bool{}
	}
	r.hookN++
	r.hooks[r.hookN] = fn
}

// holdLonger makes the register's next answer to client ask it to keep
// its current lease for d before releasing it. Faults that target the
// holder use it so that the fault hits a lease that is still held, as a
// holder busy with long work would keep it.
func (r *register) holdLonger(client int, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.holds == nil {
		r.holds = map[int]time.Duration{}
	}
	r.holds[client] = d
}

// events returns a copy of the log.
func (r *register) events() []serverEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]serverEvent(nil), r.log...)
}

// setName returns the name of the set req is for: "" for the register's
// own path.
func setName(req *http.Request) string {
	return strings.TrimPrefix(strings.TrimPrefix(req.URL.Path, registerPath), "/")
}

// state returns the current elements, size and hash of the set of name.
func (r *register) state(name string) (elems map[int64]bool, n int, sum uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	elems = map[int64]bool{}
	cur := r.cur[name]
	for v := cur; v != 0; v = r.nodes[v].parent {
		elems[r.nodes[v].elem] = true
	}
	return elems, r.nodes[cur].n, r.nodes[cur].sum
}

// elemHash spreads an op id over 64 bits (splitmix64's finalizer). The
// register's hash is the sum of its elements' hashes, so two sets compare
// equal, with overwhelming probability, when their sizes and sums do.
func elemHash(x int64) uint64 {
	z := uint64(x) + 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
