package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	_ "github.com/fencelock/fencelock/etcdlock" // registers etcd://
	"github.com/fencelock/fencelock/lock"
	_ "github.com/fencelock/fencelock/zklock" // registers zk://
)

// Exit statuses; see the package documentation.
const (
	exitOK        = 0
	exitError     = 1
	exitUsage     = 2
	exitFree      = 3
	exitHeld      = 75
	exitLost      = 76
	exitCannotRun = 126
	exitNotFound  = 127
)

const usageText = `Usage:
  fencelock [flags] run --lock NAME [--lock NAME...] [--shared | --limit N] [--try] [--wait D] [--grace D] [--] COMMAND [ARG...]
  fencelock [flags] holder NAME
  fencelock [flags] leader NAME [--watch]
  fencelock [flags] revoke NAME --token T
  fencelock [flags] queue NAME

Flags (before or after the command name):
  --url URL        backend: etcd://host:port[,...]/prefix?ttl=10s or
                   zk://host:port[,...]/root?session_timeout=10s
                   (default: $FENCELOCK_URL)
  --identity ID    identity stored with the lock (default host/pid/random)
  --ca-file F      TLS: PEM file of the certificates that verify the servers
                   (default: the system's roots, once TLS is on)
  --cert-file F    TLS: PEM file of the client certificate (with --key-file)
  --key-file F     TLS: PEM file of the client certificate's key
  --server-name N  TLS: the name to verify in the servers' certificates
  --user NAME      the user to authenticate as (etcd user, ZooKeeper digest
                   user); the password is read from $FENCELOCK_PASSWORD,
                   never from the command line
  The last five also come from $FENCELOCK_CA_FILE, $FENCELOCK_CERT_FILE,
  $FENCELOCK_KEY_FILE, $FENCELOCK_SERVER_NAME and $FENCELOCK_USER; a flag
  wins over its variable. They become the URL keys ca_file, cert_file,
  key_file, server_name and the URL's user (with
  password_env=FENCELOCK_PASSWORD), which the URL must not give as well.
  --timeout D      bound on connecting and on each request, not on the
                   wait for the lock (default 10s)
  -v               report progress, and the backend's log, on stderr
  --log-level L    log the backend's events at level L and above (debug,
                   info, warn, error) on stderr (default: none without -v,
                   info with -v)
  --log-format F   the log's format: text (default) or json
  --metrics-addr A serve Prometheus metrics at http://A/metrics while the
                   command runs (for instance 127.0.0.1:9464)

run holds the lock while COMMAND runs, with FENCING_TOKEN and FENCELOCK_LOCK
in its environment, and exits with COMMAND's status:
  --lock NAME      the lock to hold (required); repeated, run holds every
                   name or none, without deadlock, with the names in
                   FENCELOCK_LOCKS and each token in FENCING_TOKEN_<NAME>
                   (NAME upper-cased, '_' for all but A-Z and 0-9);
                   FENCING_TOKEN and FENCELOCK_LOCK with one --lock only
  --shared         hold a shared (read) grant: shared runs of NAME hold it
                   together, a run without --shared (the writer) alone;
                   first come, first served, so a waiting writer is not
                   overtaken by later readers
  --limit N        hold one of N permits of the semaphore NAME: at most N
                   runs at once (every run of NAME must give the same N)
  --try            do not wait: exit 75 at once if the grant would wait
  --wait D         give up after waiting D for the lock (exit 75)
  --grace D        time between SIGTERM and SIGKILL when the lease is lost
                   (default 10s; the exit status is then 76)

holder prints every holder of the lock, one line each in grant order:
"token=N identity=ID", followed by " shared" for a shared grant or
" permit limit=N" for a semaphore permit (exit 3 if free).
leader prints the election's leader the same way (exit 3 if none); with
--watch it prints every change of leader ("none" when there is none) until
interrupted.

revoke ends the grant of NAME whose fencing token is T, without the
holder's help, and prints "revoked token=T"; the next waiter is granted,
and the revoked holder's writes are refused by resources that check
tokens. Exit 3 if no current holder of NAME has token T (a waiter's or an
ended grant's token ends nothing).

queue prints every request of NAME in queue order, holders first, one line
each: "position=N held|waiting token=T identity=ID", the kind as holder
prints it, and " since=TIME" (UTC) when the backend records it (ZooKeeper:
yes; etcd: no). Exit 3 if nobody holds or waits for NAME.

Exit status: 0 ok, 1 error, 2 bad usage, 3 free (revoke: no such
holder), 75 held, 76 lease lost,
126/127 COMMAND not runnable/not found, else COMMAND's status (128+signal).
`

// app is one invocation of the command, with its environment made
// explicit for tests.
type app struct {
	stdin   io.Reader
	stdout  io.Writer
	stderr  io.Writer
	getenv  func(string) string
	environ []string         // passed to COMMAND, plus FENCING_TOKEN and FENCELOCK_LOCK
	signals <-chan os.Signal // SIGINT, SIGTERM, SIGHUP sent to the process

	// openURL opens the backend; nil means lock.Open. Tests replace it to
	// check argument handling without a backend.
	openURL func(ctx context.Context, rawURL string) (lock.Locker, error)

	// metrics serves --metrics-addr once open has started it; main stops
	// it.
	metrics *metricsServer
}

// failure is an error with the exit status it causes. A failure without
// err exits silently (run passing on COMMAND's status).
type failure struct {
	code int
	err  error
}

func (f *failure) Error() string {
	if f.err == nil {
		return "exit status " + strconv.Itoa(f.code)
	}
	return f.err.Error()
}

func (f *failure) Unwrap() error { return f.err }

func fail(code int, format string, args ...any) error {
	return &failure{code: code, err: fmt.Errorf(format, args...)}
}

func usageError(format string, args ...any) error { return fail(exitUsage, format, args...) }

// common holds the flags every command accepts.
type common struct {
	url      string
	identity string
	timeout  time.Duration
	verbose  bool
	// The observability settings.
	logLevel, logFormat, metricsAddr string
	// The TLS and credential settings (see secure below).
	caFile, certFile, keyFile, serverName, user string
}

// secureSetting is one TLS or credential setting of the command line: its
// flag's value, the environment variable read when the flag is not given,
// and the URL query key it becomes ("" for the user, which becomes the
// URL's user information).
type secureSetting struct {
	flag, env, key string
	value          *string
}

// passwordEnv is the variable the password is read from; only its name
// ever travels, in the URL's password_env key.
const passwordEnv = "FENCELOCK_PASSWORD"

func (c *common) secureSettings() []secureSetting {
	return []secureSetting{
		{"--ca-file", "FENCELOCK_CA_FILE", "ca_file", &c.caFile},
		{"--cert-file", "FENCELOCK_CERT_FILE", "cert_file", &c.certFile},
		{"--key-file", "FENCELOCK_KEY_FILE", "key_file", &c.keyFile},
		{"--server-name", "FENCELOCK_SERVER_NAME", "server_name", &c.serverName},
		{"--user", "FENCELOCK_USER", "", &c.user},
	}
}

// register adds the common flags to fs, with the values parsed so far as
// defaults, so they can be given before or after the command name.
func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.url, "url", c.url, "backend URL")
	fs.StringVar(&c.identity, "identity", c.identity, "identity stored with the lock")
	fs.DurationVar(&c.timeout, "timeout", c.timeout, "bound on connecting and on each request")
	fs.BoolVar(&c.verbose, "v", c.verbose, "verbose")
	fs.StringVar(&c.logLevel, "log-level", c.logLevel, "log level")
	fs.StringVar(&c.logFormat, "log-format", c.logFormat, "log format")
	fs.StringVar(&c.metricsAddr, "metrics-addr", c.metricsAddr, "metrics address")
	for _, st := range c.secureSettings() {
		fs.StringVar(st.value, strings.TrimPrefix(st.flag, "--"), *st.value, st.flag)
	}
}

func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// main runs the command line args and returns the exit status.
func (a *app) main(ctx context.Context, args []string) int {
	c := &common{timeout: 10 * time.Second}
	fs := newFlagSet("fencelock")
	c.register(fs)
	defer func() {
		if a.metrics != nil {
			a.metrics.stop()
		}
	}()
	err := fs.Parse(args)
	switch {
	case err != nil:
		err = a.flagError("", err)
	case fs.NArg() == 0:
		err = usageError("no command given: want run, holder, leader, revoke or queue (fencelock help shows the usage)")
	default:
		switch cmd, rest := fs.Arg(0), fs.Args()[1:]; cmd {
		case "run":
			err = a.run(ctx, c, rest)
		case "holder":
			err = a.holder(ctx, c, rest)
		case "leader":
			err = a.leader(ctx, c, rest)
		case "revoke":
			err = a.revoke(ctx, c, rest)
		case "queue":
			err = a.queue(ctx, c, rest)
		case "help":
			fmt.Fprint(a.stdout, usageText)
		default:
			err = usageError("unknown command %q: want run, holder, leader, revoke or queue", cmd)
		}
	}
	return a.exit(err)
}

// exit prints err as one line and returns its exit status.
func (a *app) exit(err error) int {
	if err == nil {
		return exitOK
	}
	code := exitError
	var f *failure
	if errors.As(err, &f) {
		code = f.code
		if f.err == nil {
			return code
		}
	}
	msg := strings.Join(strings.Fields(err.Error()), " ")
	fmt.Fprintf(a.stderr, "fencelock: %s\n", msg)
	return code
}

// flagError turns an error from FlagSet.Parse into a usage failure; -h
// prints the usage and succeeds.
func (a *app) flagError(cmd string, err error) error {
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(a.stdout, usageText)
		return &failure{code: exitOK}
	}
	if cmd != "" {
		cmd += ": "
	}
	return usageError("%s%v (fencelock help shows the usage)", cmd, err)
}

// parseInterspersed parses flags that may come before and after positional
// arguments, and returns the positional ones.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if i := len(args) - len(rest); i > 0 && args[i-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// open opens the Locker named by --url or FENCELOCK_URL.
func (a *app) open(ctx context.Context, c *common) (lock.Locker, error) {
	if c.timeout <= 0 {
		return nil, usageError("--timeout %v: must be positive", c.timeout)
	}
	raw := c.url
	if raw == "" {
		raw = a.getenv("FENCELOCK_URL")
	}
	if raw == "" {
		return nil, usageError("no backend: give --url or set FENCELOCK_URL (etcd://host:port/prefix or zk://host:port/root)")
	}
	raw, err := a.addSettings(c, raw)
	if err != nil {
		return nil, err
	}
	logger, err := a.logger(c)
	if err != nil {
		return nil, err
	}
	opts := []lock.OpenOption{lock.WithLogger(logger)}
	if c.metricsAddr != "" {
		prom := newPromProvider()
		srv, err := serveMetrics(c.metricsAddr, prom)
		if err != nil {
			return nil, fmt.Errorf("--metrics-addr %s: %w", c.metricsAddr, err)
		}
		a.metrics = srv
		opts = append(opts, lock.WithMeterProvider(prom))
	}
	octx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	openURL := a.openURL
	if openURL == nil {
		openURL = func(ctx context.Context, raw string) (lock.Locker, error) {
			return lock.Open(ctx, raw, opts...)
		}
	}
	l, err := openURL(octx, raw)
	if err != nil {
		if errors.Is(err, lock.ErrInvalidConfig) {
			return nil, &failure{code: exitUsage, err: err}
		}
		return nil, fmt.Errorf("cannot connect: %w", err)
	}
	return l, nil
}

// logger returns the logger of the backends and their clients, as
// --log-level, --log-format and -v say: without -v or --log-level none,
// since the one-line error is the whole story.
func (a *app) logger(c *common) (*slog.Logger, error) {
	if c.logFormat != "" && c.logFormat != "text" && c.logFormat != "json" {
		return nil, usageError("--log-format %q: want text or json", c.logFormat)
	}
	var level slog.Level
	switch c.logLevel {
	case "":
		if !c.verbose {
			return slog.New(slog.DiscardHandler), nil
		}
		level = slog.LevelInfo
	case "debug":
		level = slog.LevelDebug
	case "info":
		level = slog.LevelInfo
	case "warn":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	default:
		return nil, usageError("--log-level %q: want debug, info, warn or error", c.logLevel)
	}
	hopts := &slog.HandlerOptions{Level: level}
	if c.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(a.stderr, hopts)), nil
	}
	return slog.New(slog.NewTextHandler(a.stderr, hopts)), nil
}

// addSettings returns raw with --identity and the TLS and credential
// settings (flags, else their environment variables) added as URL keys.
// A setting the URL already has is a usage error, not a silent choice.
func (a *app) addSettings(c *common, raw string) (string, error) {
	type add struct{ what, key, value string }
	var adds []add
	if c.identity != "" {
		adds = append(adds, add{"--identity", "identity", c.identity})
	}
	user, userFrom := "", ""
	for _, st := range c.secureSettings() {
		v, from := *st.value, st.flag
		if v == "" {
			v, from = a.getenv(st.env), "$"+st.env
		}
		switch {
		case v == "":
		case st.key == "":
			user, userFrom = v, from
		default:
			adds = append(adds, add{from, st.key, v})
		}
	}
	if len(adds) == 0 && user == "" {
		return raw, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url.Error repeats the URL, password included.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return "", usageError("bad backend URL: %v", err)
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return "", usageError("bad backend URL %q: %v", u.Redacted(), err)
	}
	for _, ad := range adds {
		if q.Has(ad.key) {
			return "", usageError("%s given twice: by %s and in the URL", ad.key, ad.what)
		}
		q.Set(ad.key, ad.value)
	}
	if user != "" {
		if u.User != nil {
			return "", usageError("user given twice: by %s and in the URL", userFrom)
		}
		if q.Has("password_env") {
			return "", usageError("password_env given twice: by %s (which reads $%s) and in the URL", userFrom, passwordEnv)
		}
		u.User = url.User(user)
		q.Set("password_env", passwordEnv)
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// holderOf reads the holder of name within the request timeout. It doubles
// as the check that the backend answers before a long wait.
func (a *app) holderOf(ctx context.Context, c *common, l lock.Locker, name string) (lock.Holder, error) {
	hctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	h, err := l.Holder(hctx, name)
	if err != nil && !errors.Is(err, lock.ErrNotHeld) && ctx.Err() == nil {
		return h, fmt.Errorf("cannot reach the backend: %w", err)
	}
	return h, err
}

// formatHolder is the one-line form of a holder printed by holder and
// leader: "token=N identity=ID" for an exclusive grant, the line of the
// command's first versions, followed by " shared" for a shared grant and
// by " permit limit=N" for a semaphore permit.
func formatHolder(h lock.Holder) string {
	if h.Token == 0 {
		return "none"
	}
	id := h.Identity
	if id == "" || strings.ContainsAny(id, " \t\n\"\\=") || !strconv.CanBackquote(id) {
		id = strconv.Quote(id)
	}
	line := fmt.Sprintf("token=%d identity=%s", h.Token, id)
	switch {
	case h.Limit > 0:
		line += " permit limit=" + strconv.Itoa(h.Limit)
	case h.Shared:
		line += " shared"
	}
	return line
}

// interruptible returns a context cancelled when a signal arrives, and a
// function that stops watching and returns that signal, if any.
func (a *app) interruptible(ctx context.Context) (context.Context, func() os.Signal) {
	ctx, cancel := context.WithCancelCause(ctx)
	var (
		once sync.Once
		got  os.Signal
		quit = make(chan struct{})
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		select {
		case s := <-a.signals:
			got = s
			cancel(fmt.Errorf("interrupted by %v", s))
		case <-quit:
		}
	}()
	return ctx, func() os.Signal {
		once.Do(func() {
			close(quit)
			<-done
			cancel(nil)
		})
		return got
	}
}

// signalStatus is the shell's exit status for a process ended by s.
func signalStatus(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return exitError
}
